"""The online check of a persistent request: ``auto``'s choice timed against the library's in the
user's own starts (:class:`CheckedRequest`), and the agreement on its outcome (:class:`Verdict`).

A persistent request is made to be started many times, so where ``auto`` chose an algorithm that
is not the library's (:mod:`.auto` says when), its request holds two: the choice's and the
library's, both on the user's buffers. Its first ``2 * (warm-up + timed)`` runs alternate them
(the choice first in each pair); a run's time is what the calling thread spends in it: its
``Start`` and every ``Test`` or ``Wait`` until it completes, which is what a run costs the user
whether or not they compute between ``Start`` and ``Wait``. Those runs are the user's, in the
user's conditions: their other calls, caches and buffers between them. (The trial at the init,
on scratch buffers in a burst, favoured ``distance_halving`` by 5-15 % on the 2-core VM in the
bench's process: ``benchmarks/auto/README.md``, twentieth stop.)

The agreement: the next ``Start`` (every rank makes it, the n-th start of this request on every
rank) sends the timed runs to every other rank and receives theirs, on a tag of the request's
own (a persistent channel taken at its init), and that run, the library's, completes only with
them; the standard lets any completion of a collective wait for every rank to have started it.
Not a nonblocking allreduce: MPI lets ranks start persistent requests in different orders
(MPI-4.1 section 7.4.4), and two requests' allreduces posted in different orders on one
communicator matched each other, so the ranks agreed on different times and kept different
winners (a hang at the next start). From the run after, the request is the winner's alone: the
choice if the median of its slowest-rank times is at most ``win`` times the library's, else the
library's. Every rank holds the same maxima, so every rank keeps the same. The dispatch applies
verdicts to its tables once every rank has posted them (one allreduce at calls every rank makes
in the same order: :meth:`.auto.AutoDispatch.apply_verdicts`), in the order the requests were made.
"""

from __future__ import annotations

import time

import numpy
from mpi4py import MPI

from .progress import RequestProtocol, check_status, empty_status, freed_request_error

CHOICE, LIBRARY = 0, 1


class Verdict:
    """The agreement on one online check: the slowest rank's time of each timed run, from this
    rank's times sent to every other rank and theirs received, posted when it is made (every rank
    makes it at the same start of the same request) on ``tag``, which no other message of ``comm``
    uses while it runs; ``choice_wins()`` once complete (:meth:`test`, :meth:`wait`)."""

    def __init__(self, comm, times: list, win: float, size_class: int, candidate: str, tag: int):
        self.size_class, self.candidate, self.win = size_class, candidate, win
        self._local = numpy.array(times, dtype=float)
        rank, size = comm.Get_rank(), comm.Get_size()
        self._rows = numpy.empty((size, self._local.size))
        self._rows[rank] = self._local
        peers = [peer for peer in range(size) if peer != rank]
        self._requests = ([comm.Irecv(self._rows[peer], peer, tag) for peer in peers]
                          + [comm.Isend(self._local, peer, tag) for peer in peers])
        self.worst = numpy.empty_like(self._local)
        self.done = False

    def test(self) -> bool:
        """Whether the agreement is complete (local)."""
        if not self.done and MPI.Request.Testall(self._requests):
            self._finish()
        return self.done

    def wait(self) -> None:
        """Complete the agreement (waits for every rank to have made it)."""
        if not self.done:
            MPI.Request.Waitall(self._requests)
            self._finish()

    def _finish(self) -> None:
        self.worst[:] = self._rows.max(axis=0)
        self._requests = []
        self.done = True

    def medians(self) -> tuple:
        """``(choice, library)``: the medians over the timed pairs of the slowest rank's seconds."""
        return float(numpy.median(self.worst[CHOICE::2])), float(numpy.median(self.worst[LIBRARY::2]))

    def choice_wins(self) -> bool:
        """Whether the choice keeps the request (:func:`choice_wins`)."""
        return choice_wins(*self.medians(), self.win)


def choice_wins(choice: float, library: float, win: float) -> bool:
    """The rule of every online check: the choice wins if its median is at most ``win`` times the
    library's (a tie goes to the library)."""
    return choice <= win * library


class CheckedRequest(RequestProtocol):
    """A persistent request of ``auto`` whose first runs alternate the choice's request and the
    library's (see the module); afterwards it is the winner's, whose ``Start``, ``Test``, ``Wait``
    and ``Get_status`` it then holds as its own (the loser is freed).

    ``requests``: ``(choice, library)``, both persistent requests on the user's buffers;
    ``post(times)`` makes the :class:`Verdict` of the timed runs (``times``: this rank's, the
    choice's and the library's alternately), ``warmup_pairs`` pairs of runs before the timed
    ``timed_pairs`` are not timed; ``on_free()``, if given, is called once the request is freed."""

    def __init__(self, requests, post, warmup_pairs: int, timed_pairs: int, on_free=None):
        self._requests = list(requests)
        self._post = post
        self._on_free = on_free  # called once the request is freed
        self._warmup_runs = 2 * warmup_pairs
        self._checked_runs = 2 * (warmup_pairs + timed_pairs)
        self._starts = 0
        self._running = None  # the request of the run in flight
        self._spent = 0.0  # seconds the calling thread spent in the run in flight so far
        self._times: list = []  # this rank's seconds per completed timed run
        self.verdict = None  # the agreement, once posted
        self.winner = None  # CHOICE or LIBRARY once agreed
        self._is_freed = False

    def Start(self) -> None:
        """Start the next run: the choice's or the library's request (see the module)."""
        if self._is_freed:
            raise freed_request_error()
        if self._running is not None:
            raise RuntimeError("request: Start() on an active request (complete it with Wait or Test first)")
        run = self._starts
        self._starts = run + 1
        if run == self._checked_runs:  # every timed run is complete on this rank: agree, in the library's run
            self.verdict = self._post(self._times)
        request = self._requests[CHOICE if run < self._checked_runs and run % 2 == 0 else LIBRARY]
        began = time.perf_counter()
        request.Start()
        self._spent = time.perf_counter() - began
        self._running = request

    def Wait(self, status=None) -> bool:
        """Block until the run is complete (the agreement too, in the run that posted it)."""
        request = self._running
        if request is None:
            return self._idle(status)
        began = time.perf_counter()
        request.Wait(status)
        if self.verdict is not None:
            self.verdict.wait()
        self._complete(time.perf_counter() - began)
        return True

    def Test(self, status=None) -> bool:
        """Whether the run is complete (completing it if so); never blocks."""
        request = self._running
        if request is None:
            return self._idle(status)
        began = time.perf_counter()
        done = request.Test(status) and self._agreed()
        if not done:
            self._spent += time.perf_counter() - began
            return False
        self._complete(time.perf_counter() - began)
        return True

    def Get_status(self, status=None) -> bool:
        """Whether the run is complete, leaving it active (as ``MPI_Request_get_status``)."""
        request = self._running
        if request is None:
            return self._idle(status)
        return request.Get_status(status) and self._agreed()

    def _agreed(self) -> bool:
        """Whether the agreement posted in this run, if any, is complete (local)."""
        return self.verdict is None or self.verdict.test()

    @staticmethod
    def _idle(status) -> bool:
        """An inactive (or freed) request completes at once with an empty status, as MPI's."""
        if status is not None:
            check_status(status)
            empty_status(status)
        return True

    def _complete(self, seconds: float) -> None:
        self._running = None
        if self._warmup_runs < self._starts <= self._checked_runs:
            self._times.append(self._spent + seconds)
        if self.verdict is not None:
            self._settle(CHOICE if self.verdict.choice_wins() else LIBRARY)

    def _settle(self, winner: int) -> None:
        """Keep ``winner``'s request alone and take its methods (no frame of this class per call)."""
        self.winner = winner
        self._requests[1 - winner].Free()
        kept = self._requests[winner]
        self._requests = [kept]
        self.Start, self.Wait, self.Test, self.Get_status = kept.Start, kept.Wait, kept.Test, kept.Get_status

    def Free(self) -> None:
        """Release the request (an active run is completed first)."""
        if self._is_freed:
            raise freed_request_error()
        if self._running is not None:
            self.Wait()
        for request in self._requests:
            request.Free()
        self._requests = []
        self._is_freed = True
        if self._on_free is not None:
            self._on_free()

    @property
    def freed(self) -> bool:
        """Whether the request was freed."""
        return self._is_freed
