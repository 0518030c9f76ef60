"""The default executor: persistent point-to-point requests over absolute addresses.

Each message of a bound Schedule becomes one derived datatype (a struct of its
pieces over absolute addresses, sent from ``MPI.BOTTOM``), so no data is packed or
copied by hand. The requests of a step are created once, then every run does one
``Startall`` + ``Waitall`` per step; receives are listed before sends so they are
posted first. Final local copies run as one extra step of messages to self.

Tags: ``tag = channel * span + step``. Channel 0 serves blocking calls (they never
overlap on one communicator); nonblocking calls and persistent requests get their
own channels in call order, which is the same on every rank, so two outstanding
collectives on one communicator never match each other's messages.
"""

from __future__ import annotations

from mpi4py import MPI

from ..bind import Schedule

_Startall = MPI.Prequest.Startall
_Waitall = MPI.Request.Waitall
_Testall = MPI.Request.Testall


def message_datatype(pieces) -> MPI.Datatype:
    """One committed struct datatype describing all pieces of a message."""
    datatype = MPI.Datatype.Create_struct(
        [count for _, count, _ in pieces],
        [address for address, _, _ in pieces],
        [dt for _, _, dt in pieces],
    )
    return datatype.Commit()


class Executor:
    """Persistent requests for every step of one bound Schedule on one communicator."""

    __slots__ = ("steps", "_datatypes", "_schedule")

    def __init__(self, comm: MPI.Comm, schedule: Schedule, tag_base: int):
        self._schedule = schedule  # keeps temporary space and user buffers alive
        self._datatypes = []
        self.steps = []
        for s, (sends, recvs) in enumerate(schedule.steps):
            requests = [comm.Recv_init(self._buffer(m.pieces), m.peer, tag_base + s) for m in recvs]
            requests += [comm.Send_init(self._buffer(m.pieces), m.peer, tag_base + s) for m in sends]
            if requests:
                self.steps.append(requests)
        if schedule.copies:
            me = comm.Get_rank()
            tag = tag_base + len(schedule.steps)
            requests = []
            for src, dst in schedule.copies:
                requests.append(comm.Recv_init(self._buffer((dst,)), me, tag))
                requests.append(comm.Send_init(self._buffer((src,)), me, tag))
            self.steps.append(requests)

    def _buffer(self, pieces) -> list:
        """The mpi4py message of one bound message.

        A message of one piece is sent straight from its address with the user's
        count and datatype, as the MPI library itself would (MPICH handles that
        faster than a struct over ``MPI.BOTTOM``); several pieces become one struct.
        """
        if len(pieces) == 1:
            address, count, datatype = pieces[0]
            if address != 0:
                return [MPI.buffer.fromaddress(address, 1), count, datatype]
        datatype = message_datatype(pieces)
        self._datatypes.append(datatype)
        return [MPI.BOTTOM, 1, datatype]

    def run(self) -> None:
        """Run all steps to completion (a blocking collective)."""
        for requests in self.steps:
            _Startall(requests)
            _Waitall(requests)

    def free(self) -> None:
        """Release requests and datatypes (no step of the executor may be in flight)."""
        for requests in self.steps:
            for request in requests:
                request.Free()
        for datatype in self._datatypes:
            datatype.Free()
        self.steps = []
        self._datatypes = []
        self._schedule = None


class ScheduleRequest:
    """A nonblocking or persistent neighborhood collective running an Executor.

    Progress: the first step starts with the call (or ``Start()``); later steps are
    started from ``Test()`` and ``Wait()``, so a multi-step schedule advances only
    while the application tests or waits (as with MPI's own nonblocking
    collectives in libraries without a progress thread). A one-step schedule (the
    ``direct`` algorithm) progresses like plain MPI point-to-point requests.
    """

    __slots__ = ("_executor", "_steps", "_persistent", "_release", "_step", "_freed")

    def __init__(self, executor: Executor, *, persistent: bool, release=None):
        self._executor = executor
        self._steps = executor.steps
        self._persistent = persistent
        self._release = release
        self._step = -1  # -1: inactive; else the step in flight
        self._freed = False

    def Start(self) -> None:
        """Start (or restart) the collective; new buffer contents are picked up."""
        if self._step >= 0 or self._freed:
            raise RuntimeError("request: Start() on an active or freed request")
        self._step = 0
        if self._steps:
            _Startall(self._steps[0])

    def _finish(self) -> None:
        self._step = -1
        if not self._persistent:
            self._release_executor()

    def _release_executor(self) -> None:
        if self._executor is not None:
            if self._release is not None:
                self._release(self._executor)
            else:
                self._executor.free()
            self._executor = None
        self._freed = True

    def Test(self, status=None) -> bool:
        """Advance the schedule without blocking; True once the collective is complete."""
        if self._step < 0:
            return True
        steps = self._steps
        while self._step < len(steps):
            if not _Testall(steps[self._step]):
                return False
            self._step += 1
            if self._step < len(steps):
                _Startall(steps[self._step])
        self._finish()
        return True

    def Wait(self, status=None) -> bool:
        """Block until the collective is complete."""
        step = self._step
        if step < 0:
            return True
        steps = self._steps
        last = len(steps) - 1
        while step < last:
            _Waitall(steps[step])
            step += 1
            _Startall(steps[step])
        if step == last:
            _Waitall(steps[step])
        self._finish()
        return True

    def Free(self) -> None:
        """Release the request; an active request is completed first (as MPI_Request_free lets it finish)."""
        if self._freed:
            return
        if self._step >= 0:
            self.Wait()
        if self._executor is not None:
            self._release_executor()
        self._freed = True

    @property
    def active(self) -> bool:
        """Whether the collective was started and has not completed yet."""
        return self._step >= 0

    def __bool__(self) -> bool:
        return not self._freed


def waitall(requests) -> None:
    """Wait for a list of sparsecoll (or mpi4py) requests."""
    for request in requests:
        request.Wait()
