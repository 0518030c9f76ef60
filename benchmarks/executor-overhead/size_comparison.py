"""What auto's size comparison adds to the library's call (:func:`sparsecoll.runtime.auto.library_shortcut`).

Run: mpiexec -n 8 python benchmarks/executor-overhead/size_comparison.py [--reps 2000]
The library's blocking ``Neighbor_allgather`` of 8 B on the periodic 2-D 9-point stencil
(``calibrate``'s neighborhood), called four ways, interleaved in the benchmark's random order,
each after a barrier, each time the maximum over ranks: the library's method itself; through a
bare Python function; through the size comparison with the receive array; and with a buffer
spec ``[array, MPI.BYTE]``. Printed: the medians, each less the library's method's. This is
what ``calibrate`` measures as the profile's ``native.shortcut``, with the bare function beside it
(the least any Python between the user and the library costs).
"""

import argparse

import numpy
from mpi4py import MPI

from sparsecoll import cart_neighborhood_create, wrap
from sparsecoll.model.calibrate import PROFILE_STENCIL
from sparsecoll.runtime.auto import library_shortcut
from sparsecoll.tools.fair_timing import fix_malloc_threshold, fresh_buffer, interleaved_medians

parser = argparse.ArgumentParser()
parser.add_argument("--reps", type=int, default=2000)
args = parser.parse_args()
fix_malloc_threshold()
world = MPI.COMM_WORLD
grid = cart_neighborhood_create(world, MPI.Compute_dims(world.Get_size(), 2), [True, True], PROFILE_STENCIL,
                                algorithm="native")
method = wrap(grid, "native").Neighbor_allgather
send = fresh_buffer(numpy.ones(8, dtype="u1"))
recv = fresh_buffer(numpy.zeros(8 * len(PROFILE_STENCIL), dtype="u1"))
spec = [recv, MPI.BYTE]
shortcut = library_shortcut({"blocking": recv.nbytes + 1}, "blocking", method, method)


def bare(sendbuf, recvbuf):
    """The least Python between the user and the library: one function."""
    return method(sendbuf, recvbuf)


variants = {"library's method": lambda: method(send, recv), "bare function": lambda: bare(send, recv),
            "comparison, array": lambda: shortcut(send, recv), "comparison, spec": lambda: shortcut(send, spec)}
calls = list(variants.values())
for call in calls:
    for _ in range(20):
        call()
medians = interleaved_medians(world, calls, args.reps)
if world.Get_rank() == 0:
    print(f"{world.Get_size()} ranks, {MPI.Get_library_version().splitlines()[0].strip()}, {args.reps} repetitions")
    for name, median in zip(variants, medians):
        print(f"  {name:18} {median * 1e6:8.2f} us  {(median - medians[0]) * 1e6:+6.2f}")
grid.Free()
