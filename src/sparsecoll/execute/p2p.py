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

    __slots__ = ("steps", "_datatypes", "_schedule", "active")

    def __init__(self, comm: MPI.Comm, schedule: Schedule, tag_base: int):
        self._schedule = schedule  # keeps temporary space and user buffers alive
        self._datatypes = []
        self.steps = []
        self.active = False
        for s, (sends, recvs) in enumerate(schedule.steps):
            requests = [comm.Recv_init([MPI.BOTTOM, 1, self._datatype(m.pieces)], m.peer, tag_base + s)
                        for m in recvs]
            requests += [comm.Send_init([MPI.BOTTOM, 1, self._datatype(m.pieces)], m.peer, tag_base + s)
                         for m in sends]
            if requests:
                self.steps.append(requests)
        if schedule.copies:
            me = comm.Get_rank()
            tag = tag_base + len(schedule.steps)
            requests = []
            for src, dst in schedule.copies:
                requests.append(comm.Recv_init([MPI.BOTTOM, 1, self._datatype((dst,))], me, tag))
                requests.append(comm.Send_init([MPI.BOTTOM, 1, self._datatype((src,))], me, tag))
            self.steps.append(requests)

    def _datatype(self, pieces) -> MPI.Datatype:
        datatype = message_datatype(pieces)
        self._datatypes.append(datatype)
        return datatype

    def run(self) -> None:
        """Run all steps to completion (a blocking collective)."""
        for requests in self.steps:
            _Startall(requests)
            _Waitall(requests)

    def free(self) -> None:
        """Release requests and datatypes (the executor must not be active)."""
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

    def __init__(self, executor: Executor, *, persistent: bool, release=None):
        self._executor = executor
        self._persistent = persistent
        self._release = release
        self._step = -1  # -1: inactive
        self._freed = False

    # -- persistent start --------------------------------------------------------
    def Start(self) -> None:
        """Start (or restart) the collective; new buffer contents are picked up."""
        if self._freed:
            raise RuntimeError("request: Start() on a freed request")
        if self._step >= 0:
            raise RuntimeError("request: Start() on an active request; Wait() for it first")
        self._executor.active = True
        self._step = 0
        if self._executor.steps:
            _Startall(self._executor.steps[0])

    def _finish(self) -> None:
        self._step = -1
        self._executor.active = False
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
        steps = self._executor.steps
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
        if self._step < 0:
            return True
        steps = self._executor.steps
        while self._step < len(steps):
            _Waitall(steps[self._step])
            self._step += 1
            if self._step < len(steps):
                _Startall(steps[self._step])
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
