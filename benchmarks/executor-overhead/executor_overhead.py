"""Per-call time of sparsecoll's executor (``direct``) and default (``auto``) against the MPI library's own call.

Run: mpiexec -n 2 python benchmarks/executor-overhead/executor_overhead.py [--edges 8] [--bytes 8] [--reps 20000]
     [--forms blocking,nonblocking,persistent] [--names native,direct,auto]
Neighbor_alltoall on a distributed graph where every rank has EDGES out- and in-edges to
the next rank (repeated edges); BYTES per block. For each form (blocking call,
Ineighbor + Wait, persistent Start + Wait) repetitions cycle through the names
(interleaved, the order rotating), each timed as the maximum over ranks of one call.
``auto`` runs with the profile in force (``SPARSECOLL_PROFILE``, else the calibrated one).
"""

import argparse

import numpy
from mpi4py import MPI

import sparsecoll
from sparsecoll.model.profile import library_version

parser = argparse.ArgumentParser()
parser.add_argument("--edges", type=int, default=8)
parser.add_argument("--bytes", type=int, default=8)
parser.add_argument("--reps", type=int, default=20000)
parser.add_argument("--forms", default="blocking,nonblocking,persistent")
parser.add_argument("--names", default="native,direct", help="native first, then any algorithms or auto")
args = parser.parse_args()

world = MPI.COMM_WORLD
rank, size = world.Get_rank(), world.Get_size()
graph = world.Create_dist_graph_adjacent([(rank - 1) % size] * args.edges, [(rank + 1) % size] * args.edges)
send = numpy.arange(args.edges * args.bytes, dtype=numpy.uint8)
NAMES = tuple(args.names.split(","))
assert NAMES[0] == "native", "--names: native first"
recv = {name: numpy.zeros(args.edges * args.bytes, dtype=numpy.uint8) for name in NAMES}
comms = {name: sparsecoll.wrap(graph, name) for name in NAMES}
timer = MPI.Wtime


def calls(form):
    """name -> a function making one call of ``form``."""
    if form == "blocking":
        return {name: (lambda c=comms[name], r=recv[name]: c.Neighbor_alltoall(send, r)) for name in NAMES}
    if form == "nonblocking":
        return {name: (lambda c=comms[name], r=recv[name]: c.Ineighbor_alltoall(send, r).Wait()) for name in NAMES}
    requests = {name: comms[name].Neighbor_alltoall_init(send, recv[name]) for name in NAMES}

    def start_wait(request):
        request.Start()
        request.Wait()
    return {name: (lambda q=requests[name]: start_wait(q)) for name in NAMES}


for form in args.forms.split(","):
    call = calls(form)
    samples = {name: [] for name in NAMES}
    for rep in range(args.reps):
        shift = rep % len(NAMES)
        for name in NAMES[shift:] + NAMES[:shift]:
            run = call[name]
            t0 = timer()
            run()
            samples[name].append(timer() - t0)
    for name in NAMES:
        local = numpy.array(samples[name])
        samples[name] = numpy.empty_like(local)
        world.Allreduce(local, samples[name], op=MPI.MAX)
    assert all(numpy.array_equal(recv["native"], recv[name]) for name in NAMES)
    if rank == 0:
        warm = args.reps // 10
        line = [f"{form:>11}:"]
        for name in NAMES:
            q1, med, q3 = numpy.percentile(samples[name][warm:], [25, 50, 75]) * 1e6
            line.append(f"{name} {med:6.2f} us ({q1:.2f}-{q3:.2f})")
        for name in NAMES[1:]:
            ratio = samples[name][warm:] / samples["native"][warm:]
            q1, med, q3 = numpy.percentile(ratio, [25, 50, 75])
            line.append(f"{name}/native median {med:.3f} ({q1:.3f}-{q3:.3f})")
        print("  ".join(line), flush=True)
if "auto" in NAMES:  # what auto ran per form after the timed calls, and why
    for form in args.forms.split(","):
        explained = comms["auto"].plan_stats("alltoall", block_bytes=args.bytes, form=form)["auto"]
        if rank == 0:
            print(f"auto {form}: {explained['algorithm']} ({explained['reason']})")
if rank == 0:
    print(f"{size} ranks, {args.edges} edges, {args.bytes} B blocks, {library_version()}")
graph.Free()
