"""Where each block lies in a node's shared buffer, and the counts and displacements of the
inter-node collective: the ``SetupInter`` step and the alltoall placement of Fig. 2 of the
universal hierarchical algorithm (the paper on hierarchical shared-memory collectives and
imbalanced process arrival, section II). Pure arithmetic on byte sizes, no MPI.

Nodes are numbered ``0..N-1``; ``members[n]`` lists the ranks of node ``n`` in order (a rank's
*position* is its index there). Every function returns byte offsets into one buffer and the
per-node ``(counts, displs)`` the leaders pass to the library's vector collective.
"""

from __future__ import annotations

import numpy


def exclusive_sum(sizes) -> numpy.ndarray:
    """Offsets of consecutive blocks of the given sizes (int64; ``[0, s0, s0+s1, ...]`` minus the total)."""
    sizes = numpy.asarray(sizes, dtype=numpy.int64)
    out = numpy.zeros(sizes.size, dtype=numpy.int64)
    if sizes.size > 1:
        numpy.cumsum(sizes[:-1], out=out[1:])
    return out


def gather_placement(sizes, members) -> tuple:
    """Blocks of every rank grouped by node, nodes in order, ranks by position inside a node.

    ``sizes[r]``: bytes of rank ``r``'s block. Returns ``(offsets, counts, displs)``:
    ``offsets[r]`` the byte offset of rank ``r``'s block, ``counts[n]`` / ``displs[n]`` the
    bytes and offset of node ``n``'s chunk (what allgatherv, gatherv, scatterv and
    reduce_scatter among the leaders move). Node ``n``'s chunk is contiguous, so one
    inter-node message carries all blocks of its ranks.
    """
    sizes = numpy.asarray(sizes, dtype=numpy.int64)
    order = numpy.fromiter((r for ranks in members for r in ranks), dtype=numpy.int64, count=sizes.size)
    offsets = numpy.empty(sizes.size, dtype=numpy.int64)
    offsets[order] = exclusive_sum(sizes[order])
    counts = numpy.array([int(sizes[list(ranks)].sum()) for ranks in members], dtype=numpy.int64)
    return offsets, counts, exclusive_sum(counts)


def within_node(sizes) -> numpy.ndarray:
    """Offsets of a node's blocks inside its chunk, in position order (``sizes`` in position order)."""
    return exclusive_sum(sizes)


def alltoall_send_placement(send_sizes, members) -> tuple:
    """The send side of Fig. 2 for one node.

    ``send_sizes[p][r]``: bytes the rank at position ``p`` of this node sends to rank ``r``.
    The send buffer holds one chunk per destination node ``m``, nodes in order; inside it the
    blocks go source position by source position, and for each source, destination rank by
    destination position: every block bound for node ``m`` is adjacent to the others, so the
    inter-node alltoallv moves them together. Returns ``(offsets, counts, displs)`` with
    ``offsets[p][r]`` the block's byte offset and ``counts[m]`` / ``displs[m]`` node ``m``'s chunk.
    """
    send_sizes = numpy.asarray(send_sizes, dtype=numpy.int64).reshape(len(send_sizes), -1)
    offsets = numpy.empty_like(send_sizes)
    counts = numpy.zeros(len(members), dtype=numpy.int64)
    start = 0
    for node, ranks in enumerate(members):
        columns = list(ranks)
        chunk = send_sizes[:, columns]  # rows: source positions; columns: destination positions
        offsets[:, columns] = start + exclusive_sum(chunk.ravel()).reshape(chunk.shape)
        counts[node] = int(chunk.sum())
        start += int(counts[node])
    return offsets, counts, exclusive_sum(counts)


def alltoall_receive_placement(recv_sizes, members) -> tuple:
    """The receive side of Fig. 2 for one node (the same order the senders used).

    ``recv_sizes[q][r]``: bytes the rank at position ``q`` of this node receives from rank
    ``r``. The chunk from source node ``m`` holds, source rank by source position, the blocks
    for each destination position ``q`` in order. Returns ``(offsets, counts, displs)`` as
    :func:`alltoall_send_placement`, ``offsets[q][r]`` the offset of the block from ``r``.
    """
    recv_sizes = numpy.asarray(recv_sizes, dtype=numpy.int64).reshape(len(recv_sizes), -1)
    offsets = numpy.empty_like(recv_sizes)
    counts = numpy.zeros(len(members), dtype=numpy.int64)
    start = 0
    for node, ranks in enumerate(members):
        columns = list(ranks)
        chunk = recv_sizes[:, columns].T  # rows: source positions in node m; columns: our positions
        offsets[:, columns] = (start + exclusive_sum(chunk.ravel()).reshape(chunk.shape)).T
        counts[node] = int(chunk.sum())
        start += int(counts[node])
    return offsets, counts, exclusive_sum(counts)


def element_slices(elements: int, parts: int) -> list:
    """``parts`` consecutive ``(start, stop)`` ranges covering ``elements`` items, sizes differing by
    at most one (the share of the node reduction each node rank computes)."""
    base, extra = divmod(int(elements), int(parts))
    out, start = [], 0
    for part in range(parts):
        stop = start + base + (part < extra)
        out.append((start, stop))
        start = stop
    return out


def aligned(nbytes: int, alignment: int = 64) -> int:
    """``nbytes`` rounded up to a multiple of ``alignment``."""
    return -(-int(nbytes) // alignment) * alignment
