"""The default executor: persistent point-to-point requests over absolute addresses.

Each message of a bound Schedule becomes one derived datatype (a struct of its
pieces over absolute addresses, sent from ``MPI.BOTTOM``), so no data is packed or
copied by hand. The requests of a step are created once; a run starts each step's
requests together (``Startall``) once the previous step has completed; receives are
listed before sends so they are posted first. Final local copies run as one extra step
of messages to self. Every message of the executor carries one tag, its call's channel
(:mod:`sparsecoll.runtime.channels` says why that is enough).
"""

from __future__ import annotations

from mpi4py import MPI

from ..bind import Schedule


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

    def __init__(self, comm: MPI.Comm, schedule: Schedule, tag: int):
        self._schedule = schedule  # keeps its temporary space alive
        self._datatypes = []
        self.steps = []
        for sends, recvs in schedule.steps:
            requests = [comm.Recv_init(self._buffer(m.pieces), m.peer, tag) for m in recvs]
            requests += [comm.Send_init(self._buffer(m.pieces), m.peer, tag) for m in sends]
            if requests:
                self.steps.append(requests)
        if schedule.copies:
            me = comm.Get_rank()
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

    def free(self) -> None:
        """Release requests and datatypes (no step of the executor may be in flight; idempotent)."""
        for requests in self.steps:
            for request in requests:
                request.Free()
        for datatype in self._datatypes:
            datatype.Free()
        self.steps = []
        self._datatypes = []
        self._schedule = None
