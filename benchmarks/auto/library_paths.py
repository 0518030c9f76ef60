"""How much a Python function between a blocking call and the library's method costs at a load.

Times one neighborhood allgather four ways on a bench workload, interleaved in a random order
every repetition, a barrier before each call, the slowest rank's time per call:

* ``library``: the library's own method (``MPI.Topocomm.Neighbor_allgather``);
* ``one function``: a Python function that only calls that method;
* ``auto``: ``sparsecoll.wrap(comm)`` after ``calls_until_settled`` calls (where its blocking
  table is not ``native`` for every size, a call below that size reaches the library through
  ``library_shortcut``);
* ``class method``: sparsecoll's wrapper class method for ``native`` (what ``wrap(comm, "native")``
  ran before its methods became the library's own).

Run: mpiexec -n 8 python benchmarks/auto/library_paths.py [SPEC] [BYTES] [REPS]
(``SPARSECOLL_PROFILE`` names the profile auto decides with).
"""

import argparse

import numpy
from mpi4py import MPI

import sparsecoll
from sparsecoll.comm import NeighborhoodMixin
from sparsecoll.runtime.auto import calls_until_settled
from sparsecoll.tools.bench.runner import make_buffers
from sparsecoll.tools.bench.workloads import build

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("spec", nargs="?", default="moore:D=2,R=1", help="a bench topology SPEC")
parser.add_argument("bytes", nargs="?", type=int, default=8, help="block size in bytes")
parser.add_argument("reps", nargs="?", type=int, default=800, help="interleaved repetitions")
args = parser.parse_args()
spec, size, reps = args.spec, args.bytes, args.reps
world = MPI.COMM_WORLD
workload = build(spec, world)
auto = sparsecoll.wrap(workload.comm)
native = sparsecoll.wrap(workload.comm, "native")
library = MPI.Topocomm.Neighbor_allgather.__get__(workload.comm)


def one_function(sendbuf, recvbuf):
    """The library's method behind one Python frame."""
    return library(sendbuf, recvbuf)


methods = {"library": library, "one function": one_function, "auto": None,
           "class method": NeighborhoodMixin.Neighbor_allgather.__get__(native)}
buffers = {name: make_buffers(workload, "allgather", size) for name in methods}
auto.Neighbor_allgather(buffers["auto"].sendspec, buffers["auto"].recvspec)  # decides
for _ in range(calls_until_settled("blocking")):
    auto.Neighbor_allgather(buffers["auto"].sendspec, buffers["auto"].recvspec)
methods["auto"] = auto.Neighbor_allgather  # as a user's next call looks it up
samples = {name: numpy.empty(reps) for name in methods}
order = numpy.random.default_rng(20171218)
names = list(methods)
for rep in range(reps):
    for name in order.permutation(names):
        world.Barrier()
        start = MPI.Wtime()
        methods[name](buffers[name].sendspec, buffers[name].recvspec)
        samples[name][rep] = MPI.Wtime() - start
worst = {}
for name in names:
    worst[name] = numpy.empty(reps)
    world.Allreduce(samples[name], worst[name], op=MPI.MAX)
same = all(numpy.array_equal(buffers[name].recv, buffers["library"].recv) for name in names)
if world.rank == 0:
    stats = auto.plan_stats("allgather", block_bytes=size)
    print(f"{spec}, {size} B allgather, {world.size} ranks, {reps} repetitions; auto runs {stats['algorithm']} "
          f"through {type(methods['auto']).__name__} {getattr(methods['auto'], '__qualname__', '')}; "
          f"results equal: {same}")
    for name in names:
        ratio = numpy.median(worst[name] / worst["library"])
        print(f"{name:13} median {numpy.median(worst[name]) * 1e6:8.1f} us   / library {ratio:.3f}")
