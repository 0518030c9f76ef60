"""The point-to-point traffic of pattern-building protocols, counted, on a communicator of their own.

Every algorithm whose Pattern takes a protocol builds it by exchanging small Python objects:
``common_neighbor`` (HiPC 2017, Algorithms 1 and 2), ``distance_halving`` (Sharifian et al. 2023,
Algorithms 1-3), ``loggp_tree`` and ``node_aware``, the ``coloring`` transformation, and the RTR
trees of the RMA executors (:mod:`sparsecoll.execute.rtr_tree`). They run on a duplicate of the
runtime's private communicator (:func:`protocol_communicator`), so their tags never meet the
messages of collective calls still in flight, and count what they send (``plan_stats`` reports
it). Written against mpi4py's interface, so the simulator runs it too.
"""

from __future__ import annotations

from contextlib import contextmanager

from mpi4py import MPI


class ProtocolChannel:
    """Counted point-to-point exchanges of one protocol run (mpi4py's pickle-based methods)."""

    def __init__(self, comm):
        self.comm = comm
        self.sent = 0
        self._pending = []
        self._status = MPI.Status()

    def send(self, obj, dest: int, tag: int) -> None:
        """Start sending ``obj`` (completed by :meth:`finish`)."""
        self._pending.append(self.comm.isend(obj, dest, tag))
        self.sent += 1

    def post(self, outgoing: dict, tag: int) -> None:
        """Start sending ``outgoing[peer]`` to every peer, in rank order."""
        for peer in sorted(outgoing):
            self.send(outgoing[peer], peer, tag)

    def recv(self, source: int, tag: int) -> tuple:
        """``(object, source)``; ``source`` may be ``MPI.ANY_SOURCE``."""
        obj = self.comm.recv(None, source, tag, self._status)
        return obj, self._status.Get_source()

    def collect(self, sources, tag: int, apply=lambda source, obj: obj) -> dict:
        """Receive one object from every source (in rank order), each passed through ``apply``.

        ``apply(source, obj)`` runs as each object arrives, so that a large message can be
        reduced before the next one is awaited.
        """
        return {q: apply(q, self.comm.recv(source=q, tag=tag)) for q in sorted(sources)}

    def exchange(self, outgoing: dict, sources, tag: int) -> dict:
        """Send ``outgoing`` and receive one object from every source."""
        self.post(outgoing, tag)
        received = self.collect(sources, tag)
        self.finish()
        return received

    def finish(self) -> None:
        """Complete every send posted so far."""
        for request in self._pending:
            request.wait()
        self._pending = []


@contextmanager
def protocol_communicator(comm):
    """A duplicate of ``comm`` for one protocol run (collective), freed when it ends."""
    duplicate = comm.Dup()
    try:
        yield duplicate
    finally:
        duplicate.Free()
