"""Cartesian neighborhood communicators (Träff and Hunold, ICPP 2019, Listings 1 and 2).

:func:`cart_neighborhood_create` builds, from a process grid and one list of relative
offsets shared by all ranks, an MPI distributed graph communicator whose destinations
are ``R + N[i]`` and sources ``R - N[i]`` in offset order (``PROC_NULL`` off a
non-periodic mesh), so the MPI library's own neighborhood collectives still work on it.
The result is a :class:`CartNeighborhoodComm`: a wrapped ``Distgraphcomm`` that also
offers the paper's helpers (relative ranks, shifts and coordinates, neighbor queries).
"""

from __future__ import annotations


from mpi4py import MPI

from .checks import is_integer
from .comm import Distgraphcomm, wrap
from .topology.cartesian import (Grid, agree, check_grid, check_offsets, check_weights, fingerprint,
                                 grid_of, offset_topology)


class CartNeighborhoodComm(Distgraphcomm):
    """A distributed graph of identical relative neighborhoods on a process grid."""

    @property
    def grid(self) -> Grid:
        """The process grid (dimension sizes and periodicity)."""
        return grid_of(self.topology)

    @property
    def offsets(self) -> tuple:
        """The offsets ``N[0..t-1]`` every rank shares: as given to :func:`cart_neighborhood_create`,
        or canonical and sorted when detected by :func:`sparsecoll.wrap` with ``grid=``."""
        return self.topology.offsets

    def relative_rank(self, offset) -> int:
        """Rank of the process at ``R + offset`` (``PROC_NULL`` off a non-periodic mesh)."""
        return self.grid.shift(self.Get_rank(), self._offset(offset))

    def relative_shift(self, offset) -> tuple:
        """``(source, dest)``: the ranks at ``R - offset`` and ``R + offset``."""
        offset = self._offset(offset)
        rank = self.Get_rank()
        return self.grid.shift(rank, offset, -1), self.grid.shift(rank, offset, +1)

    def relative_coord(self, rank: int) -> tuple:
        """The offset from this process to ``rank`` (periodic coordinates in ``[-(p//2), p - p//2)``)."""
        size = self.Get_size()
        if not is_integer(rank) or not 0 <= rank < size:
            raise ValueError(f"rank: expected an integer in [0, {size}), got {rank!r}")
        return self.grid.relative(self.Get_rank(), int(rank))

    def neighbor_count(self) -> int:
        """``t``: the number of offsets (``PROC_NULL`` neighbors included)."""
        return len(self.offsets)

    def neighbor_get(self) -> tuple:
        """``(sources, sourceweights, dests, destweights)`` in offset order (weights None if unweighted)."""
        topology = self.topology
        return (list(topology.sources), _listed(topology.source_weights),
                list(topology.destinations), _listed(topology.dest_weights))

    def _offset(self, offset) -> tuple:
        (offset,) = check_offsets([offset], self.grid.ndim)
        return offset


def _listed(weights):
    return None if weights is None else list(weights)


def cart_neighborhood_create(comm: MPI.Intracomm, dims, periods, offsets, weights=None,
                             info=None, reorder: bool = False, *, algorithm: str = "auto",
                             **options) -> CartNeighborhoodComm:
    """Create a Cartesian neighborhood communicator (collective over ``comm``).

    Every rank passes the same ``dims``, ``periods`` and ``t`` relative ``offsets``
    (integer vectors of length ``len(dims)``; repeats allowed, the zero vector is the
    process itself) and the same per-offset ``weights`` (None: unweighted). ``dims``
    must multiply to the size of ``comm``. Bad or differing arguments raise the same
    TypeError/ValueError on every rank. ``info`` and ``reorder`` go to MPI; the result
    is wrapped with ``algorithm`` and ``options`` (see :func:`sparsecoll.wrap`).
    """
    if not isinstance(comm, MPI.Intracomm) or comm == MPI.COMM_NULL:
        raise TypeError(f"comm: expected an mpi4py intracommunicator, got {comm!r}")

    def local():
        grid = check_grid(dims, periods, comm.Get_size())
        checked_offsets = check_offsets(offsets, grid.ndim)
        checked_weights = check_weights(weights, len(checked_offsets))
        return ((grid, checked_offsets, checked_weights),
                fingerprint(grid, checked_offsets, checked_weights, bool(reorder)))

    grid, offsets, weights = agree(comm, local, what="dims, periods, offsets, weights and reorder")
    info = MPI.INFO_NULL if info is None else info
    cart = comm.Create_cart(grid.dims, grid.periods, reorder=bool(reorder))
    # The graph is made on a communicator without a topology in the Cartesian rank order:
    # Open MPI 5.0.x gives a distributed graph made from a Cartesian communicator the
    # parent's topology type too (open-mpi/ompi#14438), which breaks its neighborhood
    # collectives and mpi4py's Distgraphcomm.
    in_cart_order = cart.Split(0, cart.Get_rank())
    cart.Free()
    try:
        topology = offset_topology(grid, in_cart_order.Get_rank(), offsets, weights)
        mpi_weights = MPI.UNWEIGHTED if weights is None else list(weights)
        graph = in_cart_order.Create_dist_graph_adjacent(
            list(topology.sources), list(topology.destinations),
            sourceweights=mpi_weights, destweights=mpi_weights, info=info, reorder=False)
    finally:
        in_cart_order.Free()
    return wrap(CartNeighborhoodComm(graph), algorithm, topology=topology, **options)

