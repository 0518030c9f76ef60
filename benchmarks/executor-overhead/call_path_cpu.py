"""CPU time per call of sparsecoll's call path in one process (robust on a shared machine).

Run: python benchmarks/executor-overhead/call_path_cpu.py [--edges 8] [--bytes 8] [--number 20000] [--repeat 9]
A distributed graph on COMM_SELF with EDGES edges from the rank to itself; for each form
(persistent Start + Wait, blocking, Ineighbor + Wait) the CPU time (``time.process_time``,
so time the process waits for a core is not counted) per call of ``native`` and ``direct``,
the minimum over REPEAT runs of NUMBER calls; ``raw`` is mpi4py's Startall + Waitall of
the requests sparsecoll's executor makes for the same call, so ``direct - raw`` is what
sparsecoll's Python adds. Messages go to self, so the MPI part is not that of two ranks.
"""

import argparse
import time
import timeit

import numpy
from mpi4py import MPI

import sparsecoll
from sparsecoll.model.profile import library_version

parser = argparse.ArgumentParser()
parser.add_argument("--edges", type=int, default=8)
parser.add_argument("--bytes", type=int, default=8)
parser.add_argument("--number", type=int, default=20000)
parser.add_argument("--repeat", type=int, default=9)
args = parser.parse_args()

graph = MPI.COMM_SELF.Create_dist_graph_adjacent([0] * args.edges, [0] * args.edges)
direct = sparsecoll.wrap(graph, "direct")
send = numpy.arange(args.edges * args.bytes, dtype=numpy.uint8)
recv = numpy.zeros_like(send)
runtime = direct.runtime
executor = runtime.requests_for(runtime.bind_uncached(direct.plan, "alltoall", send, recv))
(stage,) = executor.steps
persistent = {"native": graph.Neighbor_alltoall_init(send, recv), "direct": direct.Neighbor_alltoall_init(send, recv)}


def start_wait(request):
    request.Start()
    request.Wait()


calls = [
    ("raw", "Startall + Waitall", lambda: (MPI.Prequest.Startall(stage), MPI.Request.Waitall(stage))),
    ("native", "persistent", lambda: start_wait(persistent["native"])),
    ("direct", "persistent", lambda: start_wait(persistent["direct"])),
    ("native", "blocking", lambda: graph.Neighbor_alltoall(send, recv)),
    ("direct", "blocking", lambda: direct.Neighbor_alltoall(send, recv)),
    ("native", "nonblocking", lambda: graph.Ineighbor_alltoall(send, recv).Wait()),
    ("direct", "nonblocking", lambda: direct.Ineighbor_alltoall(send, recv).Wait()),
]
for name, form, call in calls:
    call()
    seconds = min(timeit.Timer(call, timer=time.process_time).repeat(number=args.number, repeat=args.repeat))
    print(f"{form:>18}  {name:>6}  {seconds / args.number * 1e6:6.3f} us CPU per call")
print(f"{args.edges} self edges, {args.bytes} B blocks, direct makes {len(stage)} requests; "
      f"{library_version()}")
for request in persistent.values():
    request.Free()
executor.free()
graph.Free()
