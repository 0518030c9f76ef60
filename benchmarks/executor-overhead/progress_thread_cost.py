"""What the progress thread costs and gains on multi-step nonblocking calls.

Run: mpiexec -n 2 python benchmarks/executor-overhead/progress_thread_cost.py [--reps 3000] [--compute-us 200]
twice, with SPARSECOLL_PROGRESS_THREAD=0 and =1, and compare. A 2-D periodic Moore
neighborhood on a 2x1 grid with the ``cartesian`` algorithm (2 steps): (a) Ineighbor_allgather
+ Wait, (b) Ineighbor_allgather, a busy loop of COMPUTE_US microseconds, Wait; plus the
one-step ``direct`` call for reference. Medians of the maximum over ranks.
"""

import argparse
import os
import time

import numpy
from mpi4py import MPI

import sparsecoll
from sparsecoll.model.profile import library_version

parser = argparse.ArgumentParser()
parser.add_argument("--reps", type=int, default=3000)
parser.add_argument("--compute-us", type=float, default=200.0)
args = parser.parse_args()

world = MPI.COMM_WORLD
dims = MPI.Compute_dims(world.Get_size(), 2)
moore = [(a, b) for a in (-1, 0, 1) for b in (-1, 0, 1) if (a, b) != (0, 0)]
comms = {name: sparsecoll.cart_neighborhood_create(world, dims, [True, True], moore, algorithm=name)
         for name in ("cartesian", "direct")}
send = numpy.arange(8, dtype=numpy.uint8)
recv = numpy.zeros(8 * len(moore), dtype=numpy.uint8)


def busy(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def timed(name, compute):
    comm = comms[name]
    samples = numpy.empty(args.reps)
    for rep in range(args.reps):
        world.Barrier()
        t0 = MPI.Wtime()
        request = comm.Ineighbor_allgather(send, recv)
        if compute:
            busy(compute)
        request.Wait()
        samples[rep] = MPI.Wtime() - t0
    worst = numpy.empty_like(samples)
    world.Allreduce(samples, worst, op=MPI.MAX)
    return numpy.percentile(worst[args.reps // 10:], [25, 50, 75]) * 1e6


rows = [(name, compute) for name in ("cartesian", "direct") for compute in (0.0, args.compute_us * 1e-6)]
results = {row: timed(*row) for row in rows}
if world.Get_rank() == 0:
    thread = os.environ.get("SPARSECOLL_PROGRESS_THREAD", "1")
    library = library_version()[:40]
    print(f"progress thread {'off' if thread in ('0', 'false', 'no') else 'on'} "
          f"(thread level {MPI.Query_thread()}, {world.Get_size()} ranks, {library})")
    for (name, compute), (q1, med, q3) in results.items():
        print(f"  {name:>9} Ineighbor_allgather, compute {compute * 1e6:5.0f} us, Wait: median {med:8.2f} us "
              f"(q1 {q1:.2f}, q3 {q3:.2f})")
for comm in comms.values():
    comm.Free()
