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

Messages of one step between the same two ranks go on the wire as one message where that
saves the library work (:func:`coalesce`, limits per MPI library in :class:`WireLimits`):
several edges to one neighbor (repeated neighbors, periodic dimensions of size 1 or 2) then
cost one message instead of one per edge. Where every neighbor is a different rank nothing
changes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from mpi4py import MPI

from ..bind import Schedule
from ..checks import MAX_COUNT


@dataclass(frozen=True)
class WireLimits:
    """How far the messages of one step to one peer are joined, for one MPI library.

    ``eager_bytes``: the largest message the library sends eagerly over shared memory (one copy
    in, one out, no handshake); past it a message waits for a rendezvous handshake. Without
    ``join_any_size``, messages are joined while the joined message stays within it: joining
    across it turns eager messages into one that waits for the handshake (MPICH 5.0, 8 ranks
    on 2 cores, Moore neighborhood, persistent alltoall, joined pairs of blocks: 0.58 x the
    library's call at 4 KiB blocks, 1.32 x at 3968 B; 2 ranks, 8 edges to one peer, 2 KiB
    blocks: joined up to 16 KiB 0.73 x the library's time, within the limit 0.55 x), and past
    it MPICH moves a joined struct datatype slower than the messages it joins (0.53-0.82 x at
    16-64 KiB). ``join_any_size``: every message of a step to one peer is joined (Open MPI 5.0:
    a handshake saved is worth more than the struct costs. Speed-up over the library's call,
    2 ranks, Moore and 27-point neighborhoods, blocking and persistent: 2 KiB blocks 0.89-1.59
    joined, 0.65-1.05 within the limit; 4-64 KiB 1.6-6.3 joined, 0.89-1.02 not. 8 ranks on 2
    cores: 4-64 KiB persistent 1.06-1.19 joined; there a handshake costs a context switch, and 2 KiB
    blocks joined across the limit run at 0.64, within it at 0.94, which the cost model
    charges: :mod:`sparsecoll.model.choice`).
    """

    eager_bytes: int
    join_any_size: bool


#: Per library (:func:`sparsecoll.model.profile.library_name`'s vendor): Open MPI's shared-memory
#: BTL ``btl_sm_eager_limit`` is 4096 B with its headers (3968 B of data measured eager, 4096 B
#: not); MPICH's CH4 shared-memory eager cells took 7936 B eagerly, 8192 B not.
LIBRARY_WIRE_LIMITS = {
    "Open MPI": WireLimits(eager_bytes=3968, join_any_size=True),
    "MPICH": WireLimits(eager_bytes=7936, join_any_size=False),
}
#: Any other library: the smaller eager limit, nothing joined past it.
DEFAULT_WIRE_LIMITS = WireLimits(eager_bytes=3968, join_any_size=False)


@functools.cache
def wire_limits() -> WireLimits:
    """The running MPI library's :class:`WireLimits` (the same on every rank of a launch, so both
    ends of every message cut the same runs)."""
    return LIBRARY_WIRE_LIMITS.get(MPI.get_vendor()[0], DEFAULT_WIRE_LIMITS)


def message_datatype(pieces) -> MPI.Datatype:
    """One committed struct datatype describing all pieces of a message."""
    datatype = MPI.Datatype.Create_struct(
        [count for _, count, _ in pieces],
        [address for address, _, _ in pieces],
        [dt for _, _, dt in pieces],
    )
    return datatype.Commit()


def wire_counts(schedule: Schedule, rank: int) -> dict:
    """``wire_sends`` / ``wire_recvs``: the messages a run of ``schedule`` by the step or DAG
    executor sends to and receives from other ranks, those of a step to one peer joined
    (:func:`coalesce`); the Pattern's ``sends`` count them before, and neither counts the
    messages to self of the final local copies. Counted when asked, not when the executor is made."""
    def others(messages) -> int:
        return sum(1 for peer, _ in coalesce(messages) if peer != rank)
    return {"wire_sends": sum(others(sends) for sends, _ in schedule.steps),
            "wire_recvs": sum(others(recvs) for _, recvs in schedule.steps)}


def pattern_wire_sends(pattern, block_bytes: int, limits: WireLimits | None = None) -> int:
    """The messages to other ranks the step and DAG executors send for ``pattern`` in a regular
    call with ``block_bytes`` blocks (the Pattern's messages to one peer in a step joined as
    :func:`wire_runs` cuts them; no copy to self)."""
    count = 0
    for step in pattern.steps:
        sends = [m for m in step.sends if m.peer != pattern.rank]
        count += len(wire_runs([m.peer for m in sends], [len(m.items) * block_bytes for m in sends], limits))
    return count


def message_bytes(pieces) -> int:
    """The bytes a message carries (its type signature's size)."""
    return sum(count * datatype.Get_size() for _, count, datatype in pieces)


def wire_runs(peers, sizes, limits: WireLimits | None = None) -> list:
    """The messages of one step and direction as they go on the wire: lists of their indices.

    Walking the messages in order, a message joins the open run of its peer where
    ``limits.join_any_size`` (the running library's :func:`wire_limits` by default), or where
    the joined message stays within ``limits.eager_bytes``; otherwise it opens a new run.
    Both ends of a pair cut the same runs: they list the messages of a step between them in the
    same order (the n-th send matches the n-th receive), and MPI requires the blocks of matching
    edges to have equal type signatures, so both see the same sequence of byte sizes.
    (The cost model charges sparsecoll's schedules for these runs, not for the Pattern's messages.)
    """
    limits = limits or wire_limits()
    eager, join_any_size = limits.eager_bytes, limits.join_any_size
    runs = []  # [indices, bytes]
    open_runs = {}  # peer -> its last run
    for index, (peer, size) in enumerate(zip(peers, sizes)):
        run = open_runs.get(peer)
        if run is not None and (join_any_size or run[1] + size <= eager):
            run[0].append(index)
            run[1] += size
            continue
        run = [[index], size]
        runs.append(run)
        open_runs[peer] = run
    return [indices for indices, _ in runs]


def coalesce(messages, limits: WireLimits | None = None) -> list:
    """``[(peer, pieces)]``: the bound messages of one step and direction, those to one peer
    joined as :func:`wire_runs` cuts them; the pieces of a run keep their order, so a joined
    message matches item by item."""
    runs = wire_runs([m.peer for m in messages], [message_bytes(m.pieces) for m in messages], limits)
    return [(messages[run[0]].peer, tuple(piece for i in run for piece in messages[i].pieces)) for run in runs]


def joined(pieces) -> tuple:
    """The pieces with adjacent ones of one datatype joined and empty ones left out (same message).

    ``count`` elements of a datatype lie ``extent`` bytes apart, so a piece that starts where
    the previous one's last element ends continues it, while the joined count stays within
    :data:`MAX_COUNT`; a piece of more (an item in transit past 2 GiB, counted in bytes) is cut
    into pieces within it. A message with no data keeps one piece.
    """
    out = []
    for address, count, datatype in pieces:
        if count == 0:
            continue
        if count > MAX_COUNT:
            extent = datatype.Get_extent()[1]
            for start in range(0, count, MAX_COUNT):
                out.append([address + start * extent, min(MAX_COUNT, count - start), datatype])
            continue
        if out:
            last = out[-1]
            if (last[2] == datatype and address == last[0] + last[1] * datatype.Get_extent()[1]
                    and last[1] + count <= MAX_COUNT):
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


def _delete_self_channel(comm, keyval, channel) -> None:
    channel.Free()


_SELF_CHANNEL = MPI.Comm.Create_keyval(delete_fn=_delete_self_channel)


def take_errhandler(source: MPI.Comm, made) -> None:
    """Give each communicator of ``made`` the error handler ``source`` has now (local). mpi4py gives
    every communicator it makes ``ERRORS_RETURN``, and errors on those sparsecoll makes for a
    handle are the handle's."""
    handler = source.Get_errhandler()
    try:
        for comm in made:
            comm.Set_errhandler(handler)
    finally:
        handler.Free()


def route(comm, peer: int) -> tuple:
    """The communicator and rank a message of ``comm`` to or from ``peer`` goes by: ``(comm,
    peer)``, except a message to self on an MPI communicator of several ranks, which goes to
    rank 0 of a duplicate of ``MPI_COMM_SELF`` kept on ``comm`` (made at first use, locally:
    the runtime asks for it when it makes its private communicator, so never under the engine's
    lock; freed with ``comm``). MPICH 5.0.2 refuses a message to self on a communicator of several
    ranks that is sent as bytes (``MPI_BYTE``, ``MPI_PACKED``: items in transit, staging slots)
    and received into a struct type past about 8 KiB ("signature does not match"; not on a
    communicator of one rank). The tag stays the call's, which no other call on ``comm`` uses
    at the same time, so calls never meet on the duplicate either; the program's own
    ``MPI_COMM_SELF`` never sees these messages. The duplicate takes ``comm``'s error handler
    (its errors are ``comm``'s), and :func:`self_channel` finds it for a later ``Set_errhandler``."""
    if not isinstance(comm, MPI.Comm) or peer != comm.Get_rank() or comm.Get_size() == 1:
        return comm, peer
    channel = comm.Get_attr(_SELF_CHANNEL)
    if channel is None:
        channel = MPI.COMM_SELF.Dup()
        take_errhandler(comm, [channel])
        comm.Set_attr(_SELF_CHANNEL, channel)
    return channel, 0


def self_channel(comm: MPI.Comm):
    """The duplicate of ``MPI_COMM_SELF`` that ``comm``'s messages to self go by (:func:`route`),
    or None where none was made (local)."""
    return comm.Get_attr(_SELF_CHANNEL)


def recv_init(comm, buffer, peer: int, tag: int):
    """A persistent receive from ``peer`` (:func:`route`)."""
    by, rank = route(comm, peer)
    return by.Recv_init(buffer, rank, tag)


def send_init(comm, buffer, peer: int, tag: int):
    """A persistent send to ``peer`` (:func:`route`)."""
    by, rank = route(comm, peer)
    return by.Send_init(buffer, rank, tag)


def copy_requests(comm: MPI.Comm, schedule: Schedule, tag: int, datatypes: list) -> list:
    """The final local copies of a Schedule as persistent messages to self (receive, send per copy)."""
    requests = []
    if schedule.copies:
        me = comm.Get_rank()
        for src, dst in schedule.copies:
            requests.append(recv_init(comm, message_buffer((dst,), datatypes), me, tag))
            requests.append(send_init(comm, message_buffer((src,), datatypes), me, tag))
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

    __slots__ = ("steps", "_datatypes", "_schedule", "_rank")

    def __init__(self, comm: MPI.Comm, schedule: Schedule, tag: int):
        self._schedule = schedule  # keeps its temporary space alive
        self._rank = comm.Get_rank()
        self._datatypes = datatypes = []
        self.steps = []
        for sends, recvs in schedule.steps:
            requests = [recv_init(comm, message_buffer(pieces, datatypes), peer, tag)
                        for peer, pieces in coalesce(recvs)]
            requests += [send_init(comm, message_buffer(pieces, datatypes), peer, tag)
                         for peer, pieces in coalesce(sends)]
            if requests:
                self.steps.append(requests)
        copies = copy_requests(comm, schedule, tag, datatypes)
        if copies:
            self.steps.append(copies)

    def counts(self) -> dict:
        """The messages one run sends to and receives from other ranks (:func:`wire_counts`)."""
        return wire_counts(self._schedule, self._rank)

    def free(self) -> None:
        """Release requests and datatypes (no step of the executor may be in flight; idempotent)."""
        free_executor(self)
