"""RTR messages per rank and RTR tree depth of direct on the rma executor, with and without the RTR tree.

SC12 section II-C2: with the RTR tree of degree k a sender receives at most k combined
ready-to-receive messages (in a tree of depth about log_k of its receivers) instead of one per
receiver. Deterministic counts from plan_stats after one call; no timings.

Run: mpiexec -n 16 python benchmarks/rma/rtr_counts.py [--degrees 2,4] [--topology SPEC]...
"""

import argparse

import numpy
from mpi4py import MPI

import sparsecoll
from sparsecoll.tools.bench.workloads import build

WORKLOADS = ("cart:d=2", "cart:d=4", "random:density=0.5,seed=1")
parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--degrees", default="1,2,4", help="comma list of RTR tree degrees (besides no tree)")
parser.add_argument("--topology", action="append", default=None, help=f"repeatable; default {', '.join(WORKLOADS)}")
args = parser.parse_args()
world = MPI.COMM_WORLD
degrees = [None] + [int(d) for d in args.degrees.split(",") if d.strip()]
if world.Get_rank() == 0:
    print(f"{world.Get_size()} ranks, direct, one blocking Neighbor_alltoall of 8 B blocks, executor rma")
    print("| workload | RTR tree | receivers per sender (max) | RTR received as sender (max / mean) "
          "| RTR received per rank, all trees (max / mean) | RTR sent per rank (max / mean) | tree depth (max) |")
    print("|---|---|---|---|---|---|---|")
for text in args.topology or WORKLOADS:
    workload = build(text, world)
    for degree in degrees:
        options = None if degree is None else {"rtr_tree": degree}
        comm = sparsecoll.wrap(workload.comm, "direct", executor="rma", executor_options=options)
        send = numpy.zeros(comm.neighborhood.outdegree)
        recv = numpy.zeros(comm.neighborhood.indegree)
        comm.Neighbor_alltoall(send, recv)
        stats = comm.plan_stats("alltoall")
        receivers = len(set(comm.neighborhood.destinations) - {world.Get_rank(), MPI.PROC_NULL})
        rows = numpy.array(world.gather((receivers, stats["rtr_received_as_sender"], stats["rtr_received"],
                                         stats["rtr_sent"], stats["rtr_tree_depth"])) or [[0] * 5])
        if world.Get_rank() == 0:
            label = "none (one per receiver)" if degree is None else f"degree {degree}"
            cells = " | ".join(f"{rows[:, k].max()} / {rows[:, k].mean():.2f}" for k in (1, 2, 3))
            print(f"| {text} | {label} | {rows[:, 0].max()} | {cells} | {rows[:, 4].max()} |")
    workload.comm.Free()
