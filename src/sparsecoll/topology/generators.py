"""Topology generators of the papers' benchmarks, as pure functions of (size, parameters).

Every generator returns an :class:`Adjacency`: for every rank its ordered sources and
destinations. The same object makes the virtual-rank Topologies of the simulator
(:meth:`Adjacency.topologies`) and the real distributed graph communicator
(:func:`create_dist_graph`), so a simulated and a measured run use the same graph.

* ``random``: Erdős–Rényi random sparse digraph with edge density ``density``
  (HiPC 2017 §V-A, 2023 paper §VII-A): every ordered pair ``i != j`` is an edge with
  probability ``density``, independently.
* ``sparse-alltoall``: the sparse alltoall pattern A(s, p) of the SC12 paper (§V-1): the
  same Erdős–Rényi digraph with probability ``p`` (the SC12 paper says so itself).
* ``hotspot``: one root sends to every other rank, nobody else sends (the hot-spot
  neighbor alltoall of the SC12 paper's Fig. 4, which its tree transformations turn into
  a scatter tree).
* ``cross``: SC12's ``2d+1``-point stencil (§IV-B2, Figs. 10-11): one neighbor each way
  along every dimension of a periodic ``Compute_dims`` grid, offsets ``-e_0, +e_0, ...``
  in MPI's Cartesian neighbor order.
* ``moore``: the Moore neighborhood of dimension ``D`` and radius ``R`` (HiPC 2017 §V-B,
  2023 paper §VII-B): ranks on a periodic ``D``-dimensional grid whose dims come from
  ``MPI.Compute_dims``; each rank sends to every rank within Chebyshev distance ``R``
  (``(2R+1)^D - 1`` neighbors; HiPC 2017 calls ``R`` a "(Manhattan) distance" but counts
  ``(2R+1)^D - 1`` neighbors, which is the Chebyshev ball). The offsets are listed in lexicographic order; rank
  ``r`` sends along offset ``c`` to ``r + c`` and receives along it from ``r - c``
  (the isomorphic neighborhoods of Träff and Hunold, ICPP 2019), so grids smaller than
  ``2R+1`` in a dimension give repeated neighbors and self loops, as MPI allows.

A topology SPEC string names a generator and its parameters
(``random:density=0.2,seed=1``, ``moore:D=2,R=2``, ``sparse-alltoall:p=0.3``); SPECs are
parsed and dispatched in :mod:`.specs`, which also names the benchmark's stencil, Cartesian
and matrix workloads.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field

import numpy

from ..checks import positive_integer
from . import graph_topology
from .cartesian import Grid


@dataclass(frozen=True)
class Adjacency:
    """Sources and destinations of every rank (lists of rank lists, MPI order).

    ``offsets`` and ``dims`` are set for isomorphic (Cartesian-offset) neighborhoods.
    """

    size: int
    sources: tuple
    destinations: tuple
    name: str = ""
    offsets: tuple | None = None
    dims: tuple | None = None
    params: dict = field(default_factory=dict, compare=False)

    def topology(self, rank: int):
        """The Topology of one virtual rank (dist-graph kind, matched by occurrence)."""
        extra = {"generator": self.name, **self.params}
        if self.dims is not None:
            extra["dims"] = self.dims
            extra["coords"] = Grid(self.dims, (True,) * len(self.dims)).coords(rank)
        topology = graph_topology(rank, self.size, self.sources[rank], self.destinations[rank],
                                  offsets=self.offsets, extra=extra)
        if self.dims is None:
            return topology
        # a periodic grid: the Cartesian algorithms run on it
        return dataclasses.replace(topology, cart=(self.dims, (True,) * len(self.dims), extra["coords"]))

    def topologies(self) -> list:
        """The Topologies of all ranks."""
        return [self.topology(r) for r in range(self.size)]

    def edges(self) -> int:
        """Number of edges (sum of out-degrees)."""
        return sum(len(d) for d in self.destinations)


def _check_probability(value, name: str) -> float:
    value = float(value)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name}: expected a probability in [0, 1], got {value}")
    return value


def random_sparse(size: int, density: float, seed: int = 0) -> Adjacency:
    """Erdős–Rényi digraph: each ordered pair ``i != j`` is an edge with probability ``density``.

    Destinations and sources are listed in increasing rank order. Deterministic in
    ``seed`` (NumPy PCG64, one row of the adjacency matrix at a time).
    """
    size = positive_integer(size, "size")
    density = _check_probability(density, "density")
    rng = numpy.random.default_rng(seed)
    destinations = []
    sources = [[] for _ in range(size)]
    for i in range(size):
        row = rng.random(size) < density
        row[i] = False
        dest = numpy.flatnonzero(row).tolist()
        destinations.append(dest)
        for j in dest:
            sources[j].append(i)
    return Adjacency(size, tuple(sources), tuple(destinations), name="random",
                     params={"density": density, "seed": seed})


def sparse_alltoall(size: int, p: float, seed: int = 0) -> Adjacency:
    """The SC12 paper's sparse alltoall pattern A(s, p): an Erdős–Rényi digraph with probability ``p``."""
    adjacency = random_sparse(size, _check_probability(p, "p"), seed)  # a bad p named as p, not as density
    return Adjacency(size, adjacency.sources, adjacency.destinations, name="sparse-alltoall",
                     params={"p": adjacency.params["density"], "seed": seed})


#: The most offsets a stencil or Moore neighborhood may have (``stencil:d=20`` asked for 3**20 - 1
#: and ran out of memory building them): 65536 is beyond any stencil of the papers (3**5 - 1 = 242).
MAX_OFFSETS = 2 ** 16


def stencil_offsets(d: int, n: int, f: int = -1) -> list:
    """All ``d``-vectors with coordinates in ``f .. f+n-1``, minus the zero vector, lexicographic
    (the neighborhoods of Träff and Hunold, ICPP 2019). ``d`` and ``n`` are positive (ValueError naming
    them: ``d=-1`` raised itertools' 'repeat argument cannot be negative', ``n=0`` made no neighbors),
    and ``n**d`` at most :data:`MAX_OFFSETS`."""
    d, n = positive_integer(d, "d"), positive_integer(n, "n")
    if n ** d > MAX_OFFSETS:
        raise ValueError(f"d, n: d={d} coordinates of n={n} values give {n ** d - 1} offsets per rank; "
                         f"at most {MAX_OFFSETS - 1} are built")
    return [v for v in itertools.product(range(f, f + n), repeat=d) if any(v)]


def moore_offsets(D: int, R: int) -> tuple:
    """The ``(2R+1)^D - 1`` non-zero offsets of Chebyshev length at most ``R``, lexicographic
    (at most :data:`MAX_OFFSETS`: a ValueError naming ``D`` and ``R``)."""
    D, R = positive_integer(D, "D"), positive_integer(R, "R")
    if (2 * R + 1) ** D > MAX_OFFSETS:
        raise ValueError(f"D, R: dimension D={D} and radius R={R} give {(2 * R + 1) ** D - 1} offsets per "
                         f"rank; at most {MAX_OFFSETS - 1} are built")
    return tuple(stencil_offsets(D, 2 * R + 1, -R))


def compute_dims(size: int, ndims: int) -> tuple:
    """Balanced grid dimensions, from the MPI library's own ``MPI_Dims_create``.

    Both arguments are checked first: MPICH's ``MPI_Dims_create`` does not return for
    ``size`` 0.
    """
    from mpi4py import MPI
    return tuple(MPI.Compute_dims(positive_integer(size, "size"), positive_integer(ndims, "ndims")))


def isomorphic(size: int, dims, offsets, name: str = "isomorphic", params=None) -> Adjacency:
    """Periodic grid ``dims`` (product ``size``); rank r sends to r+c, receives from r-c per offset c."""
    size = positive_integer(size, "size")
    dims = tuple(int(d) for d in dims)
    if int(numpy.prod(dims)) != size:
        raise ValueError(f"dims: {dims} do not multiply to size {size}")
    offsets = tuple(tuple(int(x) for x in c) for c in offsets)
    grid = numpy.arange(size).reshape(dims)
    destinations = numpy.empty((size, len(offsets)), dtype=numpy.int64)
    sources = numpy.empty_like(destinations)
    for k, c in enumerate(offsets):
        # numpy.roll by -c moves the rank at coords x + c to x
        destinations[:, k] = numpy.roll(grid, [-x for x in c], axis=range(len(dims))).ravel()
        sources[:, k] = numpy.roll(grid, list(c), axis=range(len(dims))).ravel()
    return Adjacency(size, tuple(map(list, sources.tolist())), tuple(map(list, destinations.tolist())),
                     name=name, offsets=offsets, dims=dims, params=dict(params or {}))


def moore(size: int, D: int = 2, R: int = 1) -> Adjacency:
    """Moore neighborhood of dimension ``D``, radius ``R`` on a periodic ``Compute_dims`` grid."""
    D, R = positive_integer(D, "D"), positive_integer(R, "R")
    return isomorphic(size, compute_dims(size, D), moore_offsets(D, R), name="moore", params={"D": D, "R": R})


def cross_offsets(d: int) -> tuple:
    """The ``2d`` offsets ``-e_0, +e_0, -e_1, +e_1, ...`` (MPI's Cartesian neighbor order)."""
    return tuple(tuple(sign if axis == k else 0 for axis in range(d)) for k in range(d) for sign in (-1, 1))


def cross(size: int, d: int = 2) -> Adjacency:
    """The ``2d+1``-point stencil (one neighbor each way along every dimension, SC12 section IV-B2)
    on a periodic ``Compute_dims`` grid: the process graph of a periodic MPI Cartesian
    communicator wherever every dimension has at least 3 ranks."""
    d = positive_integer(d, "d")
    return isomorphic(size, compute_dims(size, d), cross_offsets(d), name="cross", params={"d": d})


def hotspot(size: int, root: int = 0) -> Adjacency:
    """The hot spot: ``root`` sends to every other rank in increasing rank order; nobody else sends."""
    size = positive_integer(size, "size")
    if isinstance(root, bool) or not isinstance(root, (int, numpy.integer)) or not 0 <= root < size:
        raise ValueError(f"root: expected a rank in [0, {size}), got {root!r}")
    root = int(root)
    others = [r for r in range(size) if r != root]
    destinations = tuple(others if r == root else [] for r in range(size))
    sources = tuple([] if r == root else [root] for r in range(size))
    return Adjacency(size, sources, destinations, name="hotspot", params={"root": root})


GENERATORS = {
    # name: (function, {parameter: type}); SPEC strings: .specs
    "random": (random_sparse, {"density": float, "seed": int}),
    "sparse-alltoall": (sparse_alltoall, {"p": float, "seed": int}),
    "moore": (moore, {"D": int, "R": int}),
    "cross": (cross, {"d": int}),
    "hotspot": (hotspot, {"root": int}),
}


def create_dist_graph(comm, adjacency: Adjacency, reorder: bool = False):
    """A real ``Distgraphcomm`` for this rank's lists (``Create_dist_graph_adjacent``; collective)."""
    if comm.Get_size() != adjacency.size:
        raise ValueError(f"adjacency: built for {adjacency.size} ranks, communicator has {comm.Get_size()}")
    rank = comm.Get_rank()
    return comm.Create_dist_graph_adjacent(adjacency.sources[rank], adjacency.destinations[rank],
                                           reorder=reorder)
