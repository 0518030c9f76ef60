"""``sparsecoll demo``: wrap a communicator, run every collective with ``direct`` and
``native``, check that they agree bit for bit and print their timings side by side."""

from __future__ import annotations

import time

import numpy

from sparsecoll.pattern import REGULAR

DEFAULT_RANKS = 4


def add_arguments(parser) -> None:
    """Options of the demo."""
    parser.add_argument("--np", type=int, default=None,
                        help=f"launch this many ranks with the wheel's mpiexec (default {DEFAULT_RANKS} "
                             "when not already under mpiexec)")
    parser.add_argument("--reps", type=int, default=200, help="timed repetitions per collective")


def _case(comm, collective: str, count: int):
    """Send and receive buffers with rank-unique contents for one collective."""
    topology = comm.neighborhood
    r = comm.Get_rank()
    indeg, outdeg = topology.indegree, topology.outdegree
    if collective.startswith("allgather"):
        send = numpy.arange(count, dtype="i4") + 1000 * r
        recv = numpy.full(indeg * count, -1, dtype="i4")
    else:
        send = (numpy.arange(outdeg * count, dtype="i4") + 1000 * r).astype("i4")
        recv = numpy.full(indeg * count, -1, dtype="i4")
    return send, recv


def _specs(collective: str, send, recv, comm, count: int):
    from mpi4py import MPI
    topology = comm.neighborhood
    if collective in REGULAR:
        return send, recv
    if collective == "allgatherv":
        return send, [recv, [count] * topology.indegree, MPI.INT32_T]
    if collective == "alltoallv":
        return [send, [count] * topology.outdegree, MPI.INT32_T], [recv, [count] * topology.indegree, MPI.INT32_T]
    if collective == "allgatherw":
        return send, [recv, ([count] * topology.indegree, [4 * count * i for i in range(topology.indegree)]),
                      [MPI.INT32_T] * topology.indegree]
    if collective == "alltoallw":
        return ([send, ([count] * topology.outdegree, [4 * count * i for i in range(topology.outdegree)]),
                 [MPI.INT32_T] * topology.outdegree],
                [recv, ([count] * topology.indegree, [4 * count * i for i in range(topology.indegree)]),
                 [MPI.INT32_T] * topology.indegree])
    raise ValueError(collective)


def _main(args) -> int:
    from mpi4py import MPI

    import sparsecoll
    world = MPI.COMM_WORLD
    dims = MPI.Compute_dims(world.Get_size(), 2)
    cart = world.Create_cart(dims, periods=[True, True])
    wrapped = {name: sparsecoll.wrap(cart, name) for name in ("native", "direct")}
    count = 2
    rows = []
    ok = True
    for collective in ("allgather", "allgatherv", "allgatherw", "alltoall", "alltoallv", "alltoallw"):
        results, times = {}, {}
        for name, comm in wrapped.items():
            send, recv = _case(comm, collective, count)
            sendspec, recvspec = _specs(collective, send, recv, comm, count)
            method = getattr(comm, "Neighbor_" + collective)
            method(sendspec, recvspec)
            results[name] = recv.copy()
            samples = []
            for _ in range(args.reps):
                world.Barrier()
                t0 = time.perf_counter()
                method(sendspec, recvspec)
                samples.append(time.perf_counter() - t0)
            times[name] = world.allreduce(float(numpy.median(samples)), op=MPI.MAX)
        same = world.allreduce(bool(numpy.array_equal(results["native"], results["direct"])), op=MPI.LAND)
        ok &= same
        rows.append((collective, times["native"], times["direct"], same))
    if world.Get_rank() == 0:
        print(f"{world.Get_size()} ranks, 2-D periodic Cartesian grid {dims}, {count} x int32 per block, "
              f"median of {args.reps} blocking calls (max over ranks)")
        print(f"{'collective':<12} {'native us':>10} {'direct us':>10} {'direct/native':>14}  agree")
        for collective, tn, td, same in rows:
            print(f"{collective:<12} {tn * 1e6:10.1f} {td * 1e6:10.1f} {td / tn:14.2f}  {'yes' if same else 'NO'}")
    cart.Free()
    return 0 if ok else 1


def run(args) -> int:
    """Run the demo, launching ranks first when not under mpiexec."""
    from .launch import inside_mpi_launch, relaunch
    for option, value in (("--np", args.np), ("--reps", args.reps)):
        if value is not None and value < 1:
            raise SystemExit(f"demo: {option}: expected at least 1, got {value}")
    if not inside_mpi_launch():
        return relaunch(args.np or DEFAULT_RANKS, ["demo", "--reps", str(args.reps)])
    return _main(args)
