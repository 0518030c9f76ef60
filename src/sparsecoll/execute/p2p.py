"""The default executor: persistent point-to-point requests over absolute addresses.

Each message of a bound Schedule becomes one derived datatype (a struct of its
pieces over absolute addresses, sent from ``MPI.BOTTOM``), so no data is packed or
copied by hand; pieces that follow each other in memory with one datatype are joined
first, so a message of adjacent blocks is sent as one contiguous buffer. The requests
of a step are created once; a run starts each step's requests together (``Startall``)
once the previous step has completed; receives are listed before sends so they are
posted first. Final local copies run as one extra step of messages to self. Every
message of the executor carries one tag, its call's channel
(:mod:`sparsecoll.runtime.channels` says why that is enough).

Small messages of one step between the same two ranks go on the wire as one message
(:func:`coalesce`): several edges to one neighbor (repeated neighbors, periodic
dimensions of size 1 or 2) then cost one message instead of one per edge. Where every
neighbor is a different rank nothing changes.
"""

from __future__ import annotations

from mpi4py import MPI

from ..bind import Schedule

#: A message of at most this many bytes joins the other small messages of its step to the same peer ...
COALESCE_MESSAGE_BYTES = 2048
#: ... while together they stay within this many bytes (larger structs cost more than they save).
COALESCE_BYTES = 16384


def message_datatype(pieces) -> MPI.Datatype:
    """One committed struct datatype describing all pieces of a message."""
    datatype = MPI.Datatype.Create_struct(
        [count for _, count, _ in pieces],
        [address for address, _, _ in pieces],
        [dt for _, _, dt in pieces],
    )
    return datatype.Commit()


def message_bytes(pieces) -> int:
    """The bytes a message carries (its type signature's size)."""
    return sum(count * datatype.Get_size() for _, count, datatype in pieces)


def wire_runs(peers, sizes) -> list:
    """The messages of one step and direction as they go on the wire: lists of their indices.

    Walking the messages in order, a message of at most :data:`COALESCE_MESSAGE_BYTES` joins
    the open run of its peer while the run stays within :data:`COALESCE_BYTES`; otherwise it
    opens a new run (a larger message goes alone and closes its peer's run). Both ends of a
    pair cut the same runs: they list the messages of a step between them in the same
    order (the n-th send matches the n-th receive), and MPI requires the blocks of matching
    edges to have equal type signatures, so both see the same sequence of byte sizes.
    (The cost model charges sparsecoll's schedules for these runs, not for the Pattern's messages.)
    """
    runs = []  # [indices, bytes]
    open_runs = {}  # peer -> its run still open to small messages
    for index, (peer, size) in enumerate(zip(peers, sizes)):
        run = open_runs.get(peer)
        if size <= COALESCE_MESSAGE_BYTES and run is not None and run[1] + size <= COALESCE_BYTES:
            run[0].append(index)
            run[1] += size
            continue
        run = [[index], size]
        runs.append(run)
        open_runs[peer] = run if size <= COALESCE_MESSAGE_BYTES else None
    return [indices for indices, _ in runs]


def coalesce(messages) -> list:
    """``[(peer, pieces)]``: the bound messages of one step and direction, small ones to one peer
    joined (:func:`wire_runs`); the pieces of a run keep their order, so a joined message matches
    item by item."""
    runs = wire_runs([m.peer for m in messages], [message_bytes(m.pieces) for m in messages])
    return [(messages[run[0]].peer, tuple(piece for i in run for piece in messages[i].pieces)) for run in runs]


def joined(pieces) -> tuple:
    """The pieces with adjacent ones of one datatype joined and empty ones left out (same message).

    ``count`` elements of a datatype lie ``extent`` bytes apart, so a piece that starts where
    the previous one's last element ends continues it. A message with no data keeps one piece.
    """
    out = []
    for address, count, datatype in pieces:
        if count == 0:
            continue
        if out:
            last = out[-1]
            if last[2] == datatype and address == last[0] + last[1] * datatype.Get_extent()[1]:
                last[1] += count
                continue
        out.append([address, count, datatype])
    if not out:
        return tuple(pieces[:1])
    return tuple(tuple(piece) for piece in out)


def message_buffer(pieces, datatypes: list) -> list:
    """The mpi4py message of one bound message (a struct datatype made is appended to ``datatypes``).

    A message of one piece (after :func:`joined`) is sent straight from its address
    with its count and datatype, as the MPI library itself would (MPICH handles that
    faster than a struct over ``MPI.BOTTOM``); several pieces become one struct.
    """
    pieces = joined(pieces)
    if len(pieces) == 1:
        address, count, datatype = pieces[0]
        if address != 0:
            return [MPI.buffer.fromaddress(address, 1), count, datatype]
    datatype = message_datatype(pieces)
    datatypes.append(datatype)
    return [MPI.BOTTOM, 1, datatype]


def copy_requests(comm: MPI.Comm, schedule: Schedule, tag: int, datatypes: list) -> list:
    """The final local copies of a Schedule as persistent messages to self (receive, send per copy)."""
    requests = []
    if schedule.copies:
        me = comm.Get_rank()
        for src, dst in schedule.copies:
            requests.append(comm.Recv_init(message_buffer((dst,), datatypes), me, tag))
            requests.append(comm.Send_init(message_buffer((src,), datatypes), me, tag))
    return requests


def free_executor(executor) -> None:
    """Free an executor's requests (list stages, or dynamic stages with ``requests``) and datatypes."""
    for stage in executor.steps:
        for request in (stage if type(stage) is list else stage.requests):
            request.Free()
    for datatype in executor._datatypes:
        datatype.Free()
    executor.steps = []
    executor._datatypes = []
    executor._schedule = None


class Executor:
    """Persistent requests for every step of one bound Schedule on one communicator."""

    __slots__ = ("steps", "_datatypes", "_schedule")

    def __init__(self, comm: MPI.Comm, schedule: Schedule, tag: int):
        self._schedule = schedule  # keeps its temporary space alive
        self._datatypes = datatypes = []
        self.steps = []
        for sends, recvs in schedule.steps:
            requests = [comm.Recv_init(message_buffer(pieces, datatypes), peer, tag)
                        for peer, pieces in coalesce(recvs)]
            requests += [comm.Send_init(message_buffer(pieces, datatypes), peer, tag)
                         for peer, pieces in coalesce(sends)]
            if requests:
                self.steps.append(requests)
        copies = copy_requests(comm, schedule, tag, datatypes)
        if copies:
            self.steps.append(copies)

    def free(self) -> None:
        """Release requests and datatypes (no step of the executor may be in flight; idempotent)."""
        free_executor(self)
