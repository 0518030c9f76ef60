"""Topologies, payloads and an independent reference for the conformance suite.

Everything here is written from the MPI standard, independently of sparsecoll's own
code, so that it can catch sparsecoll's mistakes.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy
from mpi4py import MPI

# ---------------------------------------------------------------------------------
# topologies


def _random_edges(size: int, seed: int, *, density: float, repeats: bool, isolate_last: bool):
    rng = random.Random(seed)
    edges = []
    for a in range(size):
        for b in range(size):
            if isolate_last and size > 2 and size - 1 in (a, b):
                continue
            if rng.random() < density:
                edges.append((a, b))
                if repeats and rng.random() < 0.3:
                    edges.append((a, b))
    rng.shuffle(edges)
    return edges


def _adjacent_from_edges(world, edges, weighted: bool, seed: int):
    r = world.Get_rank()
    rng = random.Random(seed * 7919 + r)
    dests = [b for a, b in edges if a == r]
    sources = [a for a, b in edges if b == r]
    if weighted:
        return world.Create_dist_graph_adjacent(sources, dests, sourceweights=[rng.randint(1, 9) for _ in sources],
                                                destweights=[rng.randint(1, 9) for _ in dests])
    return world.Create_dist_graph_adjacent(sources, dests)


def _general_from_edges(world, edges, weighted: bool):
    """Each rank announces the edges whose index is congruent to its rank (any source)."""
    r, p = world.Get_rank(), world.Get_size()
    mine = [e for i, e in enumerate(edges) if i % p == r]
    by_source = {}
    for a, b in mine:
        by_source.setdefault(a, []).append(b)
    sources = sorted(by_source)
    degrees = [len(by_source[a]) for a in sources]
    destinations = [b for a in sources for b in by_source[a]]
    weights = [1 + (a + 3 * b) % 5 for a in sources for b in by_source[a]] if weighted else None
    if weighted:
        return world.Create_dist_graph(sources, degrees, destinations, weights)
    return world.Create_dist_graph(sources, degrees, destinations)


def _mpi1_graph(world):
    p = world.Get_size()
    index, edges = [], []
    for r in range(p):
        nbrs = [(r + 1) % p, (r - 1) % p, r, (r + 1) % p, (r - 1) % p]
        edges += nbrs
        index.append(len(edges))
    return world.Create_graph(index, edges)


def _two_dims(p: int):
    return [2, p // 2] if p % 2 == 0 else [p, 1]


TOPOLOGIES = {
    "cart1d_periodic": lambda w: w.Create_cart([w.size], periods=[True]),
    "cart1d_open": lambda w: w.Create_cart([w.size], periods=[False]),
    "cart2d_mixed": lambda w: w.Create_cart(MPI.Compute_dims(w.size, 2), periods=[True, False]),
    "cart3d_periodic": lambda w: w.Create_cart(MPI.Compute_dims(w.size, 3), periods=[True] * 3),
    "cart3d_open": lambda w: w.Create_cart(MPI.Compute_dims(w.size, 3), periods=[False] * 3),
    "cart_dim1_periodic": lambda w: w.Create_cart([1, w.size], periods=[True, True]),
    "cart_dim2_periodic": lambda w: w.Create_cart(_two_dims(w.size), periods=[True, True]),
    "graph_mpi1_multi": _mpi1_graph,
    "distgraph_adjacent_weighted": lambda w: _adjacent_from_edges(
        w, _random_edges(w.size, 11, density=0.5, repeats=True, isolate_last=True), True, 11),
    "distgraph_adjacent_dense": lambda w: _adjacent_from_edges(
        w, _random_edges(w.size, 12, density=0.9, repeats=True, isolate_last=False), False, 12),
    "distgraph_general": lambda w: _general_from_edges(
        w, _random_edges(w.size, 13, density=0.4, repeats=True, isolate_last=True), False),
    "distgraph_general_weighted": lambda w: _general_from_edges(
        w, _random_edges(w.size, 14, density=0.6, repeats=False, isolate_last=False), True),
    "distgraph_empty": lambda w: w.Create_dist_graph_adjacent([], []),
}


def neighbors(comm):
    """(sources, destinations) of a topology communicator, in MPI's block order."""
    if isinstance(comm, MPI.Cartcomm):
        nbrs = [r for d in range(comm.Get_dim()) for r in comm.Shift(d, 1)]
        return nbrs, nbrs
    if isinstance(comm, MPI.Graphcomm):
        nbrs = comm.Get_neighbors(comm.Get_rank())
        return nbrs, nbrs
    sources, destinations, _ = comm.Get_dist_neighbors()
    return list(sources), list(destinations)


def edge_labels(comm):
    """Matching labels per the MPI standard (mpi-forum issue 153): (in_labels, out_labels)."""
    sources, destinations = neighbors(comm)
    if isinstance(comm, MPI.Cartcomm):
        return [i ^ 1 for i in range(len(sources))], list(range(len(destinations)))

    def occurrences(lst):
        seen, out = {}, []
        for x in lst:
            out.append(seen.get(x, 0))
            seen[x] = out[-1] + 1
        return out
    return occurrences(sources), occurrences(destinations)


# ---------------------------------------------------------------------------------
# payload layouts


def strided_int() -> MPI.Datatype:
    """A non-contiguous derived datatype: one int32 with extent 8 (every other slot)."""
    return MPI.INT32_T.Create_resized(0, 8).Commit()


@dataclass
class Layout:
    """One buffer argument: a numpy array and per block (byte offset, count, datatype)."""

    array: numpy.ndarray
    blocks: list  # [(byte offset, count, MPI.Datatype)]


def _elements(datatype) -> int:
    """int32/float64 slots one element of ``datatype`` spans in our arrays."""
    return 2 if datatype.Get_extent()[1] == 8 and datatype.Get_size() == 4 else 1


def make_layout(counts, kinds, numpy_dtype, fill, gap=1):
    """A buffer holding blocks of counts[i] elements of kinds[i], with ``gap`` slots between."""
    blocks, cursor = [], 0
    itemsize = numpy.dtype(numpy_dtype).itemsize
    for count, datatype in zip(counts, kinds):
        blocks.append((cursor * itemsize, count, datatype))
        cursor += count * _elements(datatype) + gap
    array = numpy.full(max(cursor, 1), fill, dtype=numpy_dtype)
    return Layout(array, blocks)


def fill_blocks(layout: Layout, values_of_block) -> None:
    """Write values_of_block(i) (a sequence of numbers) into the elements of block i."""
    itemsize = layout.array.itemsize
    for i, (offset, count, datatype) in enumerate(layout.blocks):
        stride = _elements(datatype)
        start = offset // itemsize
        values = values_of_block(i)
        for j in range(count):
            layout.array[start + j * stride] = values[j]


def value(origin: int, block: int, j: int, salt: int) -> int:
    """A rank-unique payload element."""
    return origin * 100000 + block * 1000 + j * 3 + salt * 7 + 1


# ---------------------------------------------------------------------------------
# the reference: the "equivalent code" of MPI-4.1 §8.6 with label tags


def reference_exchange(comm, family: str, send: Layout, recv: Layout) -> None:
    """Run the collective with plain Isend/Irecv, matching repeated edges by label tags."""
    sources, destinations = neighbors(comm)
    in_labels, out_labels = edge_labels(comm)
    dup = comm.Dup()
    send_bytes = memoryview(send.array).cast("B")
    recv_bytes = memoryview(recv.array).cast("B")
    requests = []
    for i, s in enumerate(sources):
        if s == MPI.PROC_NULL:
            continue
        offset, count, datatype = recv.blocks[i]
        tag = 0 if family == "allgather" else in_labels[i]
        requests.append(dup.Irecv([recv_bytes[offset:], count, datatype], s, tag))
    for k, d in enumerate(destinations):
        if d == MPI.PROC_NULL:
            continue
        offset, count, datatype = send.blocks[0 if family == "allgather" else k]
        tag = 0 if family == "allgather" else out_labels[k]
        requests.append(dup.Isend([send_bytes[offset:], count, datatype], d, tag))
    MPI.Request.Waitall(requests)
    dup.Free()


def run_call(comm, collective: str, how: str, send, recv) -> None:
    """One ``Neighbor_<collective>`` call in form ``how``: ``blocking``, ``nonblocking``
    (``Ineighbor_*`` then ``Wait``) or ``persistent`` (``*_init``, ``Start``, ``Wait``, ``Free``)."""
    if how == "blocking":
        getattr(comm, f"Neighbor_{collective}")(send, recv)
    elif how == "nonblocking":
        getattr(comm, f"Ineighbor_{collective}")(send, recv).Wait()
    else:
        request = getattr(comm, f"Neighbor_{collective}_init")(send, recv)
        request.Start()
        request.Wait()
        request.Free()


def started_after_rank_0(start):
    """``start()`` (nonblocking calls; returns what it returns) on every rank, rank 1 entering it only
    after rank 0's returned (a message rank 0 sends once its call is back): legal MPI, since
    nonblocking calls are local, and a hang where a call agrees on something collectively."""
    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    if rank == 1:
        world.recv(source=0, tag=77)
    request = start()
    if rank == 0 and world.Get_size() > 1:
        world.send("started", dest=1, tag=77)
    return request
