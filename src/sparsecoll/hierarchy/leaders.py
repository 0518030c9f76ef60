"""The leaders' calls between nodes (step 3 of Fig. 1 of the universal hierarchical algorithm,
the paper on hierarchical shared-memory collectives and imbalanced process arrival, section II),
with every count and displacement inside MPI's ``int``.

The leaders move a node's bytes as ``MPI.BYTE``, so their counts and displacements in the node
buffer can pass ``2**31 - 1`` where the program's counts (of larger datatypes) do not; Open MPI
5.0 has no large-count calls and refuses them (:data:`sparsecoll.checks.MAX_COUNT`). What each
call does about it is decided from sizes the two ends of every message both know, so the leaders
never disagree about which messages go where:

* ``Bcast`` and ``Allgatherv``: every leader knows every size. A ``Bcast`` goes in pieces of at
  most ``MAX_COUNT`` bytes; an ``Allgatherv`` whose counts and displacements all fit is the
  library's call, otherwise every node's chunk is broadcast from its leader in such pieces.
* ``Gatherv``, ``Scatterv`` and ``Alltoallv``: a chunk's size is known to its sender and its
  receiver only. A chunk of more than ``MAX_COUNT // leaders`` bytes (:func:`large_chunk`) has
  count 0 in the library's call and goes point to point between the two leaders afterwards, in
  pieces of at most ``MAX_COUNT`` bytes. The chunks left in the call add up to at most
  ``MAX_COUNT`` bytes at any leader; where their displacements in the node buffer pass the
  ``int``, that leader copies them through a compact buffer of its own (a local choice: the same
  bytes go on the wire).

Reductions between leaders (in :mod:`.collectives`) go in :func:`pieces` of at most ``MAX_COUNT``
basic elements, which every leader knows (``Reduce_scatter`` in windows of the element vector,
each node's part of a window the next part of its share).

Below that size nothing changes: the calls are the library's collectives with the counts and
displacements of ``SetupInter``.
"""

from __future__ import annotations

import numpy
from mpi4py import MPI

from ..checks import MAX_COUNT
from .offsets import exclusive_sum

BYTE = MPI.BYTE
#: tag of the pieces of large chunks that leaders send each other point to point (the leader
#: communicator carries nothing else point to point; each call completes its pieces before it returns)
PIECE_TAG = 0


def large_chunk(nbytes, leaders: int):
    """Whether a chunk of ``nbytes`` between two of ``leaders`` leaders leaves the library's vector
    collective for point-to-point pieces (elementwise for an array): more than :func:`call_limit`."""
    return numpy.asarray(nbytes) > call_limit(leaders)


def call_limit(leaders: int) -> int:
    """The most bytes a chunk between two of ``leaders`` leaders carries in the library's vector call:
    ``MAX_COUNT // leaders``, so the chunks left in the call add up to at most ``MAX_COUNT`` at any leader."""
    return max(1, MAX_COUNT // max(1, leaders))


def pieces(items: int) -> list:
    """``(start, stop)`` ranges of at most ``MAX_COUNT`` covering ``items`` bytes or elements (one
    empty range for 0): what one call with an ``int`` count can carry."""
    return [(start, min(start + MAX_COUNT, items)) for start in range(0, items, MAX_COUNT)] or [(0, 0)]


def bcast(leader, buffer: numpy.ndarray, nbytes: int, root: int) -> None:
    """The first ``nbytes`` of ``buffer`` broadcast from leader ``root``, in pieces (every leader knows ``nbytes``)."""
    for start, stop in pieces(nbytes):
        leader.Bcast([buffer[start:stop], BYTE], root=root)


def allgatherv(leader, buffer: numpy.ndarray, counts, displs) -> None:
    """In place: node ``n``'s ``counts[n]`` bytes at ``displs[n]`` of ``buffer`` reach every leader."""
    counts, displs = numpy.asarray(counts, numpy.int64), numpy.asarray(displs, numpy.int64)
    displs = numpy.where(counts > 0, displs, 0)  # (an empty chunk's displacement may pass the int)
    if len(buffer) <= MAX_COUNT or _fits(counts, displs):
        leader.Allgatherv(MPI.IN_PLACE, [buffer, (counts.tolist(), displs.tolist()), BYTE])
        return
    for node, (count, displ) in enumerate(zip(counts.tolist(), displs.tolist())):
        if count:
            bcast(leader, buffer[displ:displ + count], count, node)


def gatherv(leader, buffer: numpy.ndarray, root: int, counts=None, displs=None, own=(0, 0)) -> None:
    """Every node's chunk to leader ``root``: there in place at ``counts`` / ``displs`` (given at the
    root only); elsewhere ``own = (start, nbytes)``, this node's chunk in ``buffer``."""
    _rooted(leader, buffer, root, counts, displs, own, toward_root=True)


def scatterv(leader, buffer: numpy.ndarray, root: int, counts=None, displs=None, own=(0, 0)) -> None:
    """Leader ``root``'s chunks at ``counts`` / ``displs`` of ``buffer`` (given at the root only) to
    their nodes; elsewhere ``own = (start, nbytes)`` is where this node's chunk goes."""
    _rooted(leader, buffer, root, counts, displs, own, toward_root=False)


def _rooted(leader, buffer: numpy.ndarray, root: int, counts, displs, own: tuple, toward_root: bool) -> None:
    """``Gatherv`` (``toward_root``) or ``Scatterv`` between the leaders, large chunks point to point."""
    leaders, node = leader.Get_size(), leader.Get_rank()
    if node != root:
        start, nbytes = own
        large = nbytes > call_limit(leaders)
        chunk = [buffer[start:start + (0 if large else nbytes)], BYTE]
        if toward_root:
            leader.Gatherv(chunk, None, root=root)
        else:
            leader.Scatterv(None, chunk, root=root)
        if large:
            post = leader.Isend if toward_root else leader.Irecv
            _complete([post([buffer[start + a:start + b], BYTE], root, PIECE_TAG) for a, b in pieces(nbytes)])
        return
    if len(buffer) <= call_limit(leaders):  # (the rule below, at a glance: no chunk is large, all fit)
        spec = [buffer, (numpy.asarray(counts).tolist(), numpy.asarray(displs).tolist()), BYTE]
        if toward_root:
            leader.Gatherv(MPI.IN_PLACE, spec, root=root)
        else:
            leader.Scatterv(spec, MPI.IN_PLACE, root=root)
        return
    counts, displs = numpy.asarray(counts, numpy.int64), numpy.asarray(displs, numpy.int64)
    large = large_chunk(counts, leaders)
    large[root] = False
    call = numpy.where(large, 0, counts)
    call[root] = 0  # in place: the root's own chunk is where it belongs
    with _compact(buffer, call, displs, receive=toward_root) as (staged, staged_displs):
        spec = [staged, (call.tolist(), staged_displs.tolist()), BYTE]
        if toward_root:
            leader.Gatherv(MPI.IN_PLACE, spec, root=root)
        else:
            leader.Scatterv(spec, MPI.IN_PLACE, root=root)
    post = leader.Irecv if toward_root else leader.Isend
    _complete([post([buffer[d + a:d + b], BYTE], m, PIECE_TAG)
               for m, c, d in _chunks(counts, displs, large) for a, b in pieces(c)])


def alltoallv(leader, sent: numpy.ndarray, send_counts, send_displs, received: numpy.ndarray, recv_counts,
              recv_displs) -> None:
    """Node ``m``'s chunk of ``sent`` (``send_counts[m]`` bytes at ``send_displs[m]``) to leader ``m``,
    and leader ``m``'s chunk for this node into ``received`` at ``recv_displs[m]``."""
    leaders, node = leader.Get_size(), leader.Get_rank()
    if max(len(sent), len(received)) <= call_limit(leaders):  # (the rule below, at a glance)
        leader.Alltoallv([sent, (send_counts.tolist(), send_displs.tolist()), BYTE],
                         [received, (recv_counts.tolist(), recv_displs.tolist()), BYTE])
        return
    send_counts, send_displs = numpy.asarray(send_counts, numpy.int64), numpy.asarray(send_displs, numpy.int64)
    recv_counts, recv_displs = numpy.asarray(recv_counts, numpy.int64), numpy.asarray(recv_displs, numpy.int64)
    send_large, recv_large = large_chunk(send_counts, leaders), large_chunk(recv_counts, leaders)
    own = bool(send_large[node])
    send_large[node] = recv_large[node] = False  # a large chunk to this node itself is a local copy
    send_call = numpy.where(send_large, 0, send_counts)
    recv_call = numpy.where(recv_large, 0, recv_counts)
    if own:
        send_call[node] = recv_call[node] = 0
        start, stop = int(send_displs[node]), int(send_displs[node] + send_counts[node])
        received[recv_displs[node]:recv_displs[node] + stop - start] = sent[start:stop]
    with _compact(sent, send_call, send_displs, receive=False) as (source, source_displs), \
            _compact(received, recv_call, recv_displs, receive=True) as (target, target_displs):
        leader.Alltoallv([source, (send_call.tolist(), source_displs.tolist()), BYTE],
                         [target, (recv_call.tolist(), target_displs.tolist()), BYTE])
    requests = [leader.Irecv([received[d + a:d + b], BYTE], m, PIECE_TAG)
                for m, c, d in _chunks(recv_counts, recv_displs, recv_large) for a, b in pieces(c)]
    requests += [leader.Isend([sent[d + a:d + b], BYTE], m, PIECE_TAG)
                 for m, c, d in _chunks(send_counts, send_displs, send_large) for a, b in pieces(c)]
    _complete(requests)


def _fits(counts: numpy.ndarray, displs: numpy.ndarray) -> bool:
    """Whether every chunk with bytes ends inside MPI's int (counts and displacements both fit)."""
    moving = counts > 0
    return not moving.any() or int((counts[moving] + displs[moving]).max()) <= MAX_COUNT


def _chunks(counts, displs, large):
    """``(leader, nbytes, displacement)`` of the large chunks, leaders in order."""
    return [(m, int(counts[m]), int(displs[m])) for m in numpy.flatnonzero(large).tolist()]


def _complete(requests: list) -> None:
    if requests:
        MPI.Request.Waitall(requests)


class _compact:
    """The buffer and displacements a leader passes to the library's vector call for the chunks
    ``counts`` at ``displs`` of ``buffer``: ``buffer`` itself where every chunk ends inside MPI's
    int, else a compact copy (filled from ``buffer`` before the call for data sent, copied back into
    ``buffer`` after it for data received; ``counts`` add up to at most ``MAX_COUNT``)."""

    def __init__(self, buffer: numpy.ndarray, counts: numpy.ndarray, displs: numpy.ndarray, receive: bool):
        self.buffer, self.counts, self.receive = buffer, counts, receive
        self.displs = numpy.where(counts > 0, displs, 0)
        self.staging = self.compact_displs = None
        if not _fits(counts, self.displs):
            self.staging, self.compact_displs = numpy.empty(int(counts.sum()), numpy.uint8), exclusive_sum(counts)

    def __enter__(self):
        if self.staging is None:
            return self.buffer, self.displs
        if not self.receive:
            for count, displ, at in self._moving():
                self.staging[at:at + count] = self.buffer[displ:displ + count]
        return self.staging, self.compact_displs

    def __exit__(self, kind, value, traceback) -> None:
        if self.staging is not None and self.receive and kind is None:
            for count, displ, at in self._moving():
                self.buffer[displ:displ + count] = self.staging[at:at + count]

    def _moving(self):
        return [(int(c), int(d), int(a)) for c, d, a in zip(self.counts, self.displs, self.compact_displs) if c]
