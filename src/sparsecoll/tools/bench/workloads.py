"""The benchmark's workloads: topology SPEC strings -> communicators and block sizes.

SPECs (the papers' workloads) are parsed by :mod:`sparsecoll.topology.specs`, which
also gives their process graphs; here each becomes a wrapped communicator:

* ``random:...``, ``moore:...``, ``sparse-alltoall:...``: a distributed graph
  communicator (an isomorphic one also told its grid, so the Cartesian algorithms run);
* ``stencil:d=3,n=4,f=-1``: the ICPP 2019 neighborhood on its periodic ``Compute_dims``
  grid, built with :func:`sparsecoll.cart_neighborhood_create`;
* ``cart:d=2``: a plain MPI Cartesian communicator (periodic, ``Compute_dims``);
* ``matrix:PATH``: the row-block partition of a Matrix Market matrix (SpMV: alltoallv
  with one block per needed x entry; SpMM: allgather(v) of the owned rows).

Block sizes: ``allgather``/``alltoall`` move ``size`` bytes per block. The v variants
move ``size`` bytes per *unit*: for a matrix, the units of an alltoallv block are the x
entries the receiver needs from the sender, and of an allgatherv block the rows the
sender owns; elsewhere a small irregular multiplier (1 to 3) per edge.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mpi4py import MPI

from sparsecoll import cart_neighborhood_create, wrap
from sparsecoll.topology import generators, specs


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


def build(text: str, world: MPI.Comm) -> Workload:
    """Create the workload a SPEC names on ``world`` (collective)."""
    spec = specs.parse(text)
    p = spec.params
    size, rank = world.Get_size(), world.Get_rank()
    if spec.kind == "cart":
        raw = world.Create_cart(MPI.Compute_dims(size, p["d"]), periods=[True] * p["d"])
        return Workload(text, f"cart d={p['d']}", wrap(raw, "direct"))
    if spec.kind == "matrix":
        path = Path(p["path"])
        sources, destinations, needed, rows = specs.matrix_partition(path, size)
        raw = world.Create_dist_graph_adjacent(sources[rank], destinations[rank])
        units = {(o, r, 0): n for (o, r), n in needed.items()}
        return Workload(text, f"matrix {path.stem}", wrap(raw, "direct"), units,
                        {o: max(n, 1) for o, n in enumerate(rows)})
    adjacency = specs.generate(spec, size)
    if spec.kind == "stencil":
        d = p["d"]
        comm = cart_neighborhood_create(world, list(adjacency.dims), [True] * d, list(adjacency.offsets),
                                        algorithm="direct")
        return Workload(text, f"stencil d={d} n={p['n']} f={p['f']}", comm)
    raw = generators.create_dist_graph(world, adjacency)
    comm = wrap(raw, "direct")
    if adjacency.dims is not None:  # isomorphic: let the Cartesian algorithms see the grid
        comm = wrap(comm, "auto", grid=(adjacency.dims, (True,) * len(adjacency.dims)))
    label = text.replace(":", " ").replace(",", " ")
    return Workload(text, label, comm)
