"""One rank's view of a process topology, read from an mpi4py communicator.

The neighbor lists keep MPI's order (block order = edge order), repeated neighbors
and ``PROC_NULL`` holes. Matching of repeated edges follows the MPI standard as
corrected by the erratum of mpi-forum issue 153 (MPI-4.0 Annex B.1.1, MPI-4.1 §8.6):

* graph and distributed graph: the k-th edge from ``a`` to ``b`` in ``a``'s
  destination list is received by the k-th occurrence of ``a`` in ``b``'s sources;
* Cartesian: send block ``s`` lands in receive block ``s ^ 1`` (the block sent in
  the negative direction of a dimension arrives from the positive one), also when a
  periodic dimension of size 1 or 2 makes both neighbors the same process.

Both rules are expressed by *labels*: out-edge ``k`` of ``a`` to ``b`` and in-edge ``i``
of ``b`` from ``a`` carry the same data iff their labels are equal. Labels are computed
locally, so no algorithm needs to communicate to know which block goes where.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mpi4py import MPI

from ..pattern import ALLGATHER, ALLTOALL, gather_item, personal_item

PROC_NULL = MPI.PROC_NULL

CART = "cart"
GRAPH = "graph"
DIST_GRAPH = "dist_graph"


def occurrence_labels(neighbors) -> tuple:
    """Label each entry by how often the same rank occurred before it in the list."""
    seen: dict = {}
    labels = []
    for rank in neighbors:
        labels.append(seen.get(rank, 0))
        seen[rank] = labels[-1] + 1
    return tuple(labels)


@dataclass(frozen=True)
class Topology:
    """The neighborhood of one rank.

    ``out_labels[k]`` and ``in_labels[i]`` implement the matching rule of the module
    docstring. ``cart`` holds ``(dims, periods, coords)`` for Cartesian communicators;
    ``offsets`` the relative offset list of an isomorphic (Cartesian) neighborhood.
    """

    rank: int
    size: int
    kind: str
    sources: tuple
    destinations: tuple
    in_labels: tuple
    out_labels: tuple
    source_weights: tuple | None = None
    dest_weights: tuple | None = None
    cart: tuple | None = None
    offsets: tuple | None = None
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def indegree(self) -> int:
        """Number of receive blocks (in-edges, ``PROC_NULL`` included)."""
        return len(self.sources)

    @property
    def outdegree(self) -> int:
        """Number of send edges (``PROC_NULL`` included)."""
        return len(self.destinations)

    def send_items(self, family: str) -> tuple:
        """The item each out-edge carries (``None`` for a ``PROC_NULL`` edge)."""
        me = self.rank
        if family == ALLGATHER:
            mine = gather_item(me)
            return tuple(None if d == PROC_NULL else mine for d in self.destinations)
        if family == ALLTOALL:
            return tuple(
                None if d == PROC_NULL else personal_item(me, d, label)
                for d, label in zip(self.destinations, self.out_labels)
            )
        raise ValueError(f"family: expected 'allgather' or 'alltoall', got {family!r}")

    def recv_items(self, family: str) -> tuple:
        """The item each receive block must end up holding (``None``: left untouched)."""
        me = self.rank
        if family == ALLGATHER:
            return tuple(None if s == PROC_NULL else gather_item(s) for s in self.sources)
        if family == ALLTOALL:
            return tuple(
                None if s == PROC_NULL else personal_item(s, me, label)
                for s, label in zip(self.sources, self.in_labels)
            )
        raise ValueError(f"family: expected 'allgather' or 'alltoall', got {family!r}")


def graph_topology(rank, size, sources, destinations, *, kind=DIST_GRAPH,
                   source_weights=None, dest_weights=None, offsets=None, extra=None) -> Topology:
    """A (distributed) graph neighborhood, matched by occurrence."""
    sources = tuple(int(s) for s in sources)
    destinations = tuple(int(d) for d in destinations)
    return Topology(
        rank=rank, size=size, kind=kind,
        sources=sources, destinations=destinations,
        in_labels=occurrence_labels(sources), out_labels=occurrence_labels(destinations),
        source_weights=None if source_weights is None else tuple(source_weights),
        dest_weights=None if dest_weights is None else tuple(dest_weights),
        offsets=offsets, extra=dict(extra or {}),
    )


def cart_topology(rank, size, dims, periods, coords, shifts) -> Topology:
    """An MPI Cartesian neighborhood: per dimension the ``-1`` then the ``+1`` neighbor.

    ``shifts[d]`` is ``Cart_shift(d, 1)`` = ``(rank_source, rank_dest)``; both the
    source and the destination lists are ``[src_0, dst_0, src_1, dst_1, ...]``.
    """
    neighbors = tuple(r for pair in shifts for r in pair)
    labels = tuple(range(len(neighbors)))
    return Topology(
        rank=rank, size=size, kind=CART,
        sources=neighbors, destinations=neighbors,
        in_labels=tuple(i ^ 1 for i in labels), out_labels=labels,
        cart=(tuple(dims), tuple(bool(p) for p in periods), tuple(coords)),
    )


def from_comm(comm) -> Topology:
    """Read this rank's Topology from an mpi4py topology communicator."""
    rank, size = comm.Get_rank(), comm.Get_size()
    if isinstance(comm, MPI.Cartcomm):
        ndim = comm.Get_dim()
        shifts = [comm.Shift(d, 1) for d in range(ndim)]
        dims, periods, coords = comm.Get_topo()
        return cart_topology(rank, size, dims, periods, coords, shifts)
    if isinstance(comm, MPI.Graphcomm):
        neighbors = comm.Get_neighbors(rank)
        return graph_topology(rank, size, neighbors, neighbors, kind=GRAPH)
    if isinstance(comm, MPI.Distgraphcomm):
        sources, destinations, weights = comm.Get_dist_neighbors()
        sw = dw = None
        if weights is not None:
            sw, dw = weights
        return graph_topology(rank, size, sources, destinations,
                              source_weights=sw, dest_weights=dw)
    raise TypeError(
        "comm: expected an mpi4py topology communicator (Cartcomm, Graphcomm or "
        f"Distgraphcomm), got {type(comm).__name__}"
    )
