"""The benchmark's workloads: topology SPEC strings -> communicators and block sizes.

SPECs (the papers' workloads):

* ``random:density=0.2,seed=1``, ``moore:D=2,R=2``, ``sparse-alltoall:p=0.3``: the
  generators of :mod:`sparsecoll.topology.generators` (HiPC 2017, 2023 paper, SC12);
* ``stencil:d=3,n=4,f=-1``: the ICPP 2019 neighborhoods (every vector with coordinates in
  ``f .. f+n-1`` except zero) on a periodic ``Compute_dims`` grid, built with
  :func:`sparsecoll.cart_neighborhood_create`;
* ``cart:d=2``: a plain MPI Cartesian communicator (periodic, ``Compute_dims``);
* ``matrix:PATH``: row-block partition of a Matrix Market matrix; rank ``i`` needs the
  x entries owned by the ranks whose columns its rows touch (SpMV: alltoallv with one
  block per needed entry; SpMM: allgather(v) of the owned rows).

Block sizes: ``allgather``/``alltoall`` move ``size`` bytes per block. The v variants
move ``size`` bytes per *unit*: for a matrix, the units of an alltoallv block are the x
entries the receiver needs from the sender, and of an allgatherv block the rows the
sender owns; elsewhere a small irregular multiplier (1 to 3) per edge.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path

import numpy
from mpi4py import MPI

from sparsecoll import cart_neighborhood_create, wrap
from sparsecoll.topology import generators

BUNDLED_MATRIX = Path(__file__).parent / "data" / "dwt_193.mtx"


@dataclass
class Workload:
    """One topology on the benchmark's communicator, with its block-size rules."""

    spec: str
    name: str
    comm: MPI.Comm                      # wrapped (sparsecoll) topology communicator
    alltoallv_units: dict = field(default_factory=dict)   # (origin, dest, label) -> units
    allgatherv_units: dict = field(default_factory=dict)  # origin -> units

    def units(self, item) -> int:
        """Units (multiples of the block size) of one item in the v variants."""
        if len(item) == 1:
            return self.allgatherv_units.get(item[0], 1 + item[0] % 3)
        return self.alltoallv_units.get(item, 1 + (item[0] + item[1] + item[2]) % 3)


def _stencil_offsets(d: int, n: int, f: int) -> list:
    return [c for c in itertools.product(range(f, f + n), repeat=d) if any(c)]


def _params(rest: str, types: dict, what: str) -> dict:
    params = {}
    for part in filter(None, rest.split(",")):
        key, eq, value = part.partition("=")
        if not eq or key.strip() not in types:
            raise ValueError(f"topology: bad parameter {part!r} for {what!r}; known: {sorted(types)}")
        params[key.strip()] = types[key.strip()](value)
    return params


def matrix_partition(path, size: int):
    """Row-block partition of a Matrix Market file for ``size`` ranks.

    Returns ``(sources, destinations, needed, rows)``: per rank the ranks it receives x
    entries from and sends to (ascending), ``needed[(owner, rank)]`` = number of
    distinct columns owned by ``owner`` that ``rank``'s rows touch, and the rows each
    rank owns.
    """
    import scipy.io
    matrix = scipy.io.mmread(str(path)).tocsr()
    nrows, ncols = matrix.shape
    row_owner = numpy.minimum(numpy.arange(nrows) * size // max(nrows, 1), size - 1)
    col_owner = numpy.minimum(numpy.arange(ncols) * size // max(ncols, 1), size - 1)
    rows = numpy.bincount(row_owner, minlength=size).tolist()
    needed = {}
    for rank in range(size):
        mine = numpy.flatnonzero(row_owner == rank)
        if len(mine) == 0:
            continue
        columns = numpy.unique(matrix[mine].indices)
        owners, counts = numpy.unique(col_owner[columns], return_counts=True)
        for owner, count in zip(owners.tolist(), counts.tolist()):
            if owner != rank:
                needed[(owner, rank)] = count
    sources = [sorted(o for (o, r) in needed if r == rank) for rank in range(size)]
    destinations = [sorted(r for (o, r) in needed if o == rank) for rank in range(size)]
    return sources, destinations, needed, rows


def build(spec: str, world: MPI.Comm) -> Workload:
    """Create the workload a SPEC names on ``world`` (collective)."""
    kind, _, rest = spec.partition(":")
    size, rank = world.Get_size(), world.Get_rank()
    if kind == "stencil":
        p = _params(rest, {"d": int, "n": int, "f": int}, kind)
        d, n, f = p.get("d", 2), p.get("n", 3), p.get("f", -1)
        dims = MPI.Compute_dims(size, d)
        comm = cart_neighborhood_create(world, dims, [True] * d, _stencil_offsets(d, n, f), algorithm="direct")
        return Workload(spec, f"stencil d={d} n={n} f={f}", comm)
    if kind == "cart":
        d = _params(rest, {"d": int}, kind).get("d", 2)
        raw = world.Create_cart(MPI.Compute_dims(size, d), periods=[True] * d)
        return Workload(spec, f"cart d={d}", wrap(raw, "direct"))
    if kind == "matrix":
        path = Path(rest) if rest else BUNDLED_MATRIX
        if not path.exists():
            raise FileNotFoundError(f"topology: matrix file {str(path)!r} not found")
        sources, destinations, needed, rows = matrix_partition(path, size)
        raw = world.Create_dist_graph_adjacent(sources[rank], destinations[rank])
        units = {(o, r, 0): n for (o, r), n in needed.items()}
        return Workload(spec, f"matrix {path.stem}", wrap(raw, "direct"), units,
                        {o: max(n, 1) for o, n in enumerate(rows)})
    adjacency = generators.generate(spec, size)
    raw = generators.create_dist_graph(world, adjacency)
    comm = wrap(raw, "direct")
    if adjacency.dims is not None:  # isomorphic: let the Cartesian algorithms see the grid
        comm = wrap(comm, "auto", grid=(adjacency.dims, (True,) * len(adjacency.dims)))
    label = spec.replace(":", " ").replace(",", " ")
    return Workload(spec, label, comm)
