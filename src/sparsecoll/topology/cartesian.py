"""Cartesian neighborhoods: a process grid plus one list of relative offsets.

Träff and Hunold, "Cartesian Collective Communication", ICPP 2019, section 2. Processes
form a ``d``-dimensional mesh or torus (ranks numbered row-major, as MPI numbers a
Cartesian communicator); every process names the same ``t`` relative offsets
``N[0..t-1]`` (repeats allowed, the zero vector is the process itself). Process ``R``
sends block ``i`` to ``R + N[i]`` and receives block ``i`` from ``R - N[i]``; in a
non-periodic dimension a neighbor outside the mesh is ``PROC_NULL``.

This module holds the offset arithmetic (:class:`Grid`), argument checking that fails on
every rank at once (:func:`agree`), the per-rank :class:`~sparsecoll.topology.Topology`
of such a neighborhood (:func:`offset_topology`), the routes the Cartesian algorithms
forward along (:func:`routes`) and the isomorphism detection of the paper's section 2.2
for distributed graphs (:func:`detect`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from dataclasses import dataclass

import numpy
from mpi4py import MPI

from .. import reductions
from ..checks import MAX_COUNT, is_integer
from . import CART, PROC_NULL, Topology, graph_topology


@dataclass(frozen=True)
class Grid:
    """A mesh or torus of processes: dimension sizes and periodicity, ranks row-major."""

    dims: tuple
    periods: tuple

    @property
    def ndim(self) -> int:
        """Number of dimensions ``d``."""
        return len(self.dims)

    @property
    def size(self) -> int:
        """Number of processes (the product of the dimension sizes, exact: no 64-bit wrap)."""
        return math.prod(self.dims)

    def coords(self, rank: int) -> tuple:
        """Coordinates of ``rank`` (row-major: the last dimension varies fastest)."""
        coords = []
        for extent in reversed(self.dims):
            rank, c = divmod(rank, extent)
            coords.append(c)
        return tuple(reversed(coords))

    def rank_at(self, coords) -> int:
        """Rank at ``coords``; periodic dimensions wrap, else ``PROC_NULL`` outside the mesh."""
        rank = 0
        for c, extent, periodic in zip(coords, self.dims, self.periods):
            if periodic:
                c %= extent
            elif not 0 <= c < extent:
                return PROC_NULL
            rank = rank * extent + c
        return rank

    def moved(self, coords, offset, sign: int = 1) -> tuple | None:
        """``coords + sign * offset`` (wrapped), or None when it leaves the mesh."""
        result = []
        for c, n, extent, periodic in zip(coords, offset, self.dims, self.periods):
            c += sign * n
            if periodic:
                c %= extent
            elif not 0 <= c < extent:
                return None
            result.append(c)
        return tuple(result)

    def shift(self, rank: int, offset, sign: int = 1) -> int:
        """Rank of ``rank + sign * offset`` (``PROC_NULL`` outside a non-periodic mesh)."""
        coords = self.moved(self.coords(rank), offset, sign)
        return PROC_NULL if coords is None else self.rank_at(coords)

    def canonical(self, offset) -> tuple | None:
        """The offset with periodic coordinates reduced into ``[-(p//2), p - p//2 - 1]``.

        Two offsets reach the same process from every origin iff their canonical forms
        are equal. None when a non-periodic coordinate is at least the dimension size
        (such an offset never reaches a process).
        """
        result = []
        for n, extent, periodic in zip(offset, self.dims, self.periods):
            if periodic:
                half = extent // 2
                n = (n + half) % extent - half
            elif abs(n) >= extent:
                return None
            result.append(n)
        return tuple(result)

    def relative(self, origin: int, rank: int) -> tuple:
        """The canonical offset that leads from ``origin`` to ``rank``."""
        a, b = self.coords(origin), self.coords(rank)
        return self.canonical(tuple(y - x for x, y in zip(a, b)))


# -- argument checking -----------------------------------------------------------------

def _integer(value, arg: str) -> int:
    if not is_integer(value):
        raise TypeError(f"{arg}: expected an integer, got {value!r} ({type(value).__name__})")
    return int(value)


def check_grid(dims, periods, size: int) -> Grid:
    """Validate ``dims`` and ``periods`` (local checks only); return the Grid."""
    try:
        dims = tuple(_integer(n, "dims") for n in dims)
    except TypeError as error:
        if "dims:" in str(error):
            raise
        raise TypeError(f"dims: expected a sequence of integers, got {type(dims).__name__}") from None
    if any(n < 1 for n in dims):
        raise ValueError(f"dims: every dimension size must be at least 1, got {list(dims)}")
    try:
        periods = tuple(bool(p) for p in periods)
    except TypeError:
        raise TypeError(f"periods: expected a sequence of booleans, got {type(periods).__name__}") from None
    if len(periods) != len(dims):
        raise ValueError(f"periods: expected {len(dims)} entries (one per dimension), got {len(periods)}")
    grid = Grid(dims, periods)
    if grid.size != size:
        raise ValueError(f"dims: {list(dims)} multiply to {grid.size}, but the communicator has {size} processes")
    return grid


def check_offsets(offsets, ndim: int) -> tuple:
    """Validate the relative offsets (each ``ndim`` integers); return them as tuples."""
    try:
        offsets = [tuple(vector) for vector in offsets]
    except TypeError:
        raise TypeError("offsets: expected a sequence of integer vectors (one per neighbor)") from None
    for i, vector in enumerate(offsets):
        if len(vector) != ndim:
            raise ValueError(f"offsets: offset {i} {list(vector)} has {len(vector)} coordinates, "
                             f"the grid has {ndim} dimensions")
    return tuple(tuple(_integer(n, f"offsets[{i}]") for n in vector) for i, vector in enumerate(offsets))


def check_weights(weights, count: int) -> tuple | None:
    """Validate per-neighbor weights (None or ``MPI.UNWEIGHTED``: unweighted; ``MPI.WEIGHTS_EMPTY``:
    no weights of no neighbors, as MPI takes it for a degree of zero; else non-negative integers
    that fit MPI's ``int``)."""
    if weights is None or weights is MPI.UNWEIGHTED:
        return None
    if weights is MPI.WEIGHTS_EMPTY:
        if count:
            raise ValueError(f"weights: MPI.WEIGHTS_EMPTY is for no neighbors, but {count} offsets were given")
        return ()
    try:
        weights = tuple(_integer(w, "weights") for w in weights)
    except TypeError as error:
        if "weights:" in str(error):
            raise
        raise TypeError("weights: expected None or a sequence of integers") from None
    if len(weights) != count:
        raise ValueError(f"weights: expected {count} entries (one per offset), got {len(weights)}")
    if any(w < 0 for w in weights):
        raise ValueError("weights: must be non-negative")
    if any(w > MAX_COUNT for w in weights):
        raise ValueError(f"weights: MPI takes weights up to {MAX_COUNT} (a C int), got {max(weights)}")
    return weights


def fingerprint(*values) -> int:
    """A 63-bit digest of ``repr(values)``, the same in every process."""
    digest = hashlib.blake2b(repr(values).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def agree(comm: MPI.Comm, check, *, what: str):
    """Run the local ``check()`` on every rank and make all ranks agree on the outcome.

    ``check()`` returns ``(result, fingerprint)`` or raises TypeError/ValueError. One
    reduction tells every rank whether some rank failed (then the lowest failing rank's
    error is broadcast and raised everywhere) or whether the fingerprints differ (a
    ValueError naming ``what``). Returns ``result``.
    """
    try:
        result, digest = check()
        error = None
    except (TypeError, ValueError) as exc:
        result, digest, error = None, 0, exc
    rank, size = comm.Get_rank(), comm.Get_size()
    mine = numpy.array([-(rank if error is not None else size), digest, -digest], dtype=numpy.int64)
    summary = numpy.empty_like(mine)
    comm.Allreduce(mine, summary, op=MPI.MAX)
    first_bad = -int(summary[0])
    if first_bad < size:
        kind, message = comm.bcast((type(error).__name__, str(error)) if rank == first_bad else None,
                                   root=first_bad)
        exception = TypeError if kind == "TypeError" else ValueError
        if rank == first_bad:
            raise error
        raise exception(f"{message} (raised on rank {first_bad})")
    if summary[1] != -summary[2]:
        raise ValueError(f"{what}: ranks passed different values; every rank must pass the same")
    return result


# -- topology ------------------------------------------------------------------------------

def offset_topology(grid: Grid, rank: int, offsets, weights=None) -> Topology:
    """Rank ``rank``'s Topology: destination ``i`` is ``R + N[i]``, source ``i`` is ``R - N[i]``.

    Edges are matched as in a distributed graph (by occurrence), which pairs destination
    ``i`` of ``R - N[i]`` with source ``i`` of ``R``.
    """
    destinations = [grid.shift(rank, n, +1) for n in offsets]
    sources = [grid.shift(rank, n, -1) for n in offsets]
    topology = graph_topology(rank, grid.size, sources, destinations,
                              source_weights=weights, dest_weights=weights, offsets=tuple(offsets))
    return dataclasses.replace(topology, cart=(grid.dims, grid.periods, grid.coords(rank)))


def grid_of(topology: Topology) -> Grid:
    """The Grid of a Cartesian topology."""
    dims, periods, _ = topology.cart
    return Grid(tuple(dims), tuple(periods))


def routes(grid: Grid, offsets) -> tuple:
    """The distinct blocks an origin sends, as ``(canonical offset, label)`` pairs.

    The label is the occurrence of the canonical offset among the earlier ones: exactly
    the label MPI's edge matching gives the origin's out-edge (same label on every
    rank, since equal canonical offsets reach the same process from any origin).
    Offsets that never reach a process are left out; order follows ``offsets``.
    """
    seen: dict = {}
    result = []
    for offset in offsets:
        canonical = grid.canonical(offset)
        if canonical is None:
            continue
        label = seen.get(canonical, 0)
        seen[canonical] = label + 1
        result.append((canonical, label))
    return tuple(result)


def is_cartesian(topology: Topology) -> bool:
    """Whether ``topology`` is an isomorphic neighborhood on a known grid."""
    return topology.offsets is not None and topology.cart is not None


# -- isomorphism detection (section 2.2) -----------------------------------------------------

GRID_OPTION = "grid"


def grid_from_option(value, size: int) -> Grid:
    """The Grid a user states for detection: an ``MPI.Cartcomm`` or ``(dims, periods)``."""
    if isinstance(value, MPI.Cartcomm):
        dims, periods, _ = value.Get_topo()
        return check_grid(dims, periods, size)
    try:
        dims, periods = value
    except (TypeError, ValueError):
        raise TypeError(f"{GRID_OPTION}: expected an MPI.Cartcomm or a pair (dims, periods), "
                        f"got {value!r}") from None
    return check_grid(dims, periods, size)


def _merge_offsets(a: list, b: list) -> list:
    """Union of two sorted offset multisets (each offset with its larger multiplicity)."""
    result, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        if a[i] == b[j]:
            result.append(a[i])
            i += 1
            j += 1
        elif a[i] < b[j]:
            result.append(a[i])
            i += 1
        else:
            result.append(b[j])
            j += 1
    return result + a[i:] + b[j:]


def _agreed_grid(comm: MPI.Comm, grid_option) -> Grid:
    """The ``grid`` option's Grid, the same on every rank or a TypeError/ValueError on every rank
    (collective: :func:`agree`)."""
    def local():
        grid = grid_from_option(grid_option, comm.Get_size())
        return grid, fingerprint(grid)

    return agree(comm, local, what=GRID_OPTION)


def check_stated_grid(comm: MPI.Comm, topology: Topology, grid_option) -> None:
    """ValueError naming ``grid`` where ``topology``'s Cartesian neighborhood is known already (one
    :func:`sparsecoll.cart_neighborhood_create` made) and the stated grid has other dimensions or
    periods (before, such a ``grid`` was not even read). Collective over ``comm``: the ranks
    agree on the option first, and the neighborhood's grid is every rank's, so all raise alike."""
    grid, known = _agreed_grid(comm, grid_option), grid_of(topology)
    if grid != known:
        raise ValueError(f"{GRID_OPTION}: dims={list(grid.dims)}, periods={list(grid.periods)}, but this "
                         f"communicator's Cartesian neighborhood is on dims={list(known.dims)}, "
                         f"periods={list(known.periods)}")


def detect(comm: MPI.Comm, topology: Topology, grid_option) -> Topology:
    """Detect whether a distributed graph is one offset list translated over a grid.

    Collective over ``comm``. The paper's check (section 2.2): the root broadcasts its
    sorted relative neighborhood, every rank compares its own, one reduction combines
    the verdicts. On a torus the root's neighborhood is everybody's; with non-periodic
    dimensions boundary ranks see only part of it, so the candidate is instead the
    union of all ranks' sorted neighborhoods, gathered by one reduction. Each rank then
    checks that its destinations are exactly ``R + N`` and its sources ``R - N`` for
    the candidate offsets ``N`` that stay on the mesh.

    Returns ``topology`` with ``cart`` and ``offsets`` set when the neighborhoods are
    isomorphic, else with ``extra["cartesian"]`` saying why not.

    The offsets are read back from neighbor ranks, so where a periodic dimension is shorter than
    the neighborhood's reach (``+1`` and ``-1`` reach one rank) they are one valid reading of it,
    not necessarily the list the graph was made from: a 2x2 torus's Moore neighborhood reads as
    ``(-1,-1)`` four times, ``(-1,0)`` and ``(0,-1)`` twice each. Blocks reach the same ranks
    and the counts are the same; the rounds and the order of items in a message may differ from
    those the simulator (which keeps the generator's list) shows.
    """
    grid = _agreed_grid(comm, grid_option)
    if topology.kind == CART:
        reason = ("an MPI Cartesian communicator matches its +-1 neighbors by position, not by offset; "
                  "create the neighborhood with sparsecoll.cart_neighborhood_create")
        return dataclasses.replace(topology, extra={**topology.extra, "cartesian": reason})
    rank = topology.rank
    mine = sorted(grid.relative(rank, d) for d in topology.destinations if d != PROC_NULL)
    if all(grid.periods):
        candidate = comm.bcast(mine, root=0)
    else:
        candidate = reductions.allreduce(comm, mine, op=_merge_offsets)
    expected_out = sorted(n for n in candidate if grid.shift(rank, n, +1) != PROC_NULL)
    expected_in = sorted(n for n in candidate if grid.shift(rank, n, -1) != PROC_NULL)
    incoming = sorted(grid.relative(s, rank) for s in topology.sources if s != PROC_NULL)
    isomorphic = reductions.allreduce(comm, mine == expected_out and incoming == expected_in, op=MPI.LAND)
    if not isomorphic:
        reason = (f"the neighborhoods are not translations of one offset list on the grid "
                  f"dims={list(grid.dims)}, periods={list(grid.periods)}")
        return dataclasses.replace(topology, extra={**topology.extra, "cartesian": reason})
    return dataclasses.replace(topology, cart=(grid.dims, grid.periods, grid.coords(rank)),
                               offsets=tuple(candidate))
