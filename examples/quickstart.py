"""sparsecoll in one page: wrap a topology communicator, keep calling mpi4py's methods.

Run: mpiexec -n 4 python examples/quickstart.py
"""

import numpy
from mpi4py import MPI

import sparsecoll

world = MPI.COMM_WORLD
cart = world.Create_cart(MPI.Compute_dims(world.Get_size(), 2), periods=[True, True])
comm = sparsecoll.wrap(cart)                        # still an MPI.Cartcomm on the same handle
rank, degree = comm.Get_rank(), 4                    # 2-D Cartesian: 4 neighbors (-x, +x, -y, +y)

# alltoall: block k of sendbuf goes to neighbor k, block k of recvbuf comes from neighbor k
sendbuf = numpy.array([100 * rank + k for k in range(degree)], dtype="i4")
recvbuf = numpy.empty(degree, dtype="i4")
comm.Neighbor_alltoall(sendbuf, recvbuf)            # sparsecoll's schedule, mpi4py's signature

expected = numpy.empty(degree, dtype="i4")
cart.Neighbor_alltoall(sendbuf, expected)           # the MPI library's own, for comparison
assert (recvbuf == expected).all()

# persistent allgather: bound once, then Start()/Wait() as often as needed
mine = numpy.array([rank], dtype="i4")
gathered = numpy.empty(degree, dtype="i4")
request = comm.Neighbor_allgather_init(mine, gathered)
for _ in range(3):
    request.Start()
    request.Wait()
request.Free()

stats = comm.plan_stats("alltoall")                 # steps, messages, items per rank of the schedule
if rank == 0:
    print(f"rank 0 received {recvbuf.tolist()} and gathered {gathered.tolist()}; "
          f"algorithm {stats['algorithm']}, {stats['steps']} step(s), {stats['sends']} message(s) in its schedule")
comm.Free()                                          # the handle and sparsecoll's private duplicate
