"""Per-call time of sparsecoll's persistent executor vs the MPI library's persistent collective.

Run: mpiexec -n 2 python scripts/executor_overhead.py [--edges 8] [--bytes 8] [--reps 20000]
Neighbor_alltoall on a distributed graph where every rank has EDGES out- and in-edges to
the next rank (repeated edges); BYTES per block. Repetitions alternate native and
direct (interleaved), each timed as the maximum over ranks of one Start+Wait.
"""

import argparse

import numpy
from mpi4py import MPI

import sparsecoll

parser = argparse.ArgumentParser()
parser.add_argument("--edges", type=int, default=8)
parser.add_argument("--bytes", type=int, default=8)
parser.add_argument("--reps", type=int, default=20000)
args = parser.parse_args()

world = MPI.COMM_WORLD
rank, size = world.Get_rank(), world.Get_size()
graph = world.Create_dist_graph_adjacent([(rank - 1) % size] * args.edges, [(rank + 1) % size] * args.edges)
send = numpy.arange(args.edges * args.bytes, dtype=numpy.uint8)
recv = {name: numpy.zeros(args.edges * args.bytes, dtype=numpy.uint8) for name in ("native", "direct")}
requests = {name: getattr(sparsecoll.wrap(graph, name), "Neighbor_alltoall_init")(send, recv[name])
            for name in ("native", "direct")}
samples = {name: [] for name in requests}
timer = MPI.Wtime
for rep in range(args.reps):
    for name in (("native", "direct") if rep % 2 == 0 else ("direct", "native")):
        request = requests[name]
        t0 = timer()
        request.Start()
        request.Wait()
        samples[name].append(timer() - t0)
for name in samples:
    local = numpy.array(samples[name])
    samples[name] = numpy.empty_like(local)
    world.Allreduce(local, samples[name], op=MPI.MAX)
assert numpy.array_equal(recv["native"], recv["direct"])
if rank == 0:
    warm = args.reps // 10
    ratio = samples["direct"][warm:] / samples["native"][warm:]
    for name in ("native", "direct"):
        q1, med, q3 = numpy.percentile(samples[name][warm:], [25, 50, 75]) * 1e6
        print(f"{name:>7}: median {med:7.2f} us  (q1 {q1:.2f}, q3 {q3:.2f})")
    q1, med, q3 = numpy.percentile(ratio, [25, 50, 75])
    print(f"direct/native per repetition pair: median {med:.3f} (q1 {q1:.3f}, q3 {q3:.3f}); "
          f"{size} ranks, {args.edges} edges, {args.bytes} B blocks, {MPI.Get_library_version().splitlines()[0]}")
for request in requests.values():
    request.Free()
graph.Free()
