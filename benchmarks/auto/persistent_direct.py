"""The library's persistent 8 B allgather on the 9-point stencil against ``direct``'s, timed alone.

Run: mpiexec -n 8 python benchmarks/auto/persistent_direct.py [--reps 1000] [--others N] [--rma]
The two requests (``Neighbor_allgather_init`` of ``calibrate``'s stencil, 8 B blocks) are
started and waited for in turn, interleaved in the benchmark's random order, each after a
barrier, each timed as the maximum over ranks; ``--others N`` also runs N other persistent
requests (native, direct, cartesian, distance_halving, common_neighbor) after each pair, as the
bench's other columns do; ``--rma`` keeps a persistent alltoall on the RMA executor alive (and
running) too, as ``calibrate`` does. Prints the medians and ``direct``/library.
"""

import argparse
from functools import partial

import numpy
from mpi4py import MPI

from sparsecoll import cart_neighborhood_create, wrap
from sparsecoll.model.calibrate import PROFILE_STENCIL
from sparsecoll.tools.fair_timing import fix_malloc_threshold, fresh_buffer, interleaved_medians

parser = argparse.ArgumentParser()
parser.add_argument("--reps", type=int, default=1000)
parser.add_argument("--others", type=int, default=0, choices=range(6))
parser.add_argument("--rma", action="store_true")
args = parser.parse_args()
fix_malloc_threshold()
world = MPI.COMM_WORLD
grid = cart_neighborhood_create(world, MPI.Compute_dims(world.Get_size(), 2), [True, True], PROFILE_STENCIL,
                                algorithm="native")
edges = len(PROFILE_STENCIL)
keep = []


def request(name: str, family: str = "allgather", executor=None):
    """A persistent request of ``name`` on fresh buffers (kept alive)."""
    send = fresh_buffer(numpy.ones(8 if family == "allgather" else 8 * edges, dtype="u1"))
    recv = fresh_buffer(numpy.zeros(8 * edges, dtype="u1"))
    keep.append((send, recv))
    comm = wrap(grid, name) if executor is None else wrap(grid, name, executor=executor)
    return getattr(comm, f"Neighbor_{family}_init")(send, recv)


timed = [request("native"), request("direct")]
others = [request(name) for name in ("native", "direct", "cartesian", "distance_halving", "common_neighbor")
          [:args.others]]
if args.rma:
    others.append(request("direct", "alltoall", executor="rma"))


def run(req) -> None:
    """One start and wait."""
    req.Start()
    req.Wait()


for req in timed + others:
    for _ in range(10):
        run(req)
library, direct = interleaved_medians(world, [partial(run, req) for req in timed], args.reps,
                                      [partial(run, req) for req in others])
if world.Get_rank() == 0:
    print(f"{world.Get_size()} ranks, others {args.others}, rma {args.rma}: library {library * 1e6:.1f} us, "
          f"direct {direct * 1e6:.1f} us, direct/library {direct / library:.3f}")
for req in timed + others:
    req.Free()
grid.Free()
