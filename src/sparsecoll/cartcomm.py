"""Cartesian neighborhood communicators (Träff and Hunold, ICPP 2019, Listings 1 and 2).

:func:`cart_neighborhood_create` builds, from a process grid and one list of relative
offsets shared by all ranks, an MPI distributed graph communicator whose destinations
are ``R + N[i]`` and sources ``R - N[i]`` in offset order (``PROC_NULL`` off a
non-periodic mesh), so the MPI library's own neighborhood collectives still work on it.
The result is a :class:`~sparsecoll.comm.CartNeighborhoodComm`: a wrapped ``Distgraphcomm``
that also offers the paper's helpers (relative ranks, shifts and coordinates, neighbor queries).
"""

from __future__ import annotations

from mpi4py import MPI

from .comm import CartNeighborhoodComm, wrap
from .topology.cartesian import agree, check_grid, check_offsets, check_weights, fingerprint, offset_topology


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

