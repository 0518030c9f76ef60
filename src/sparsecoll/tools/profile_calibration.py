"""The measurements behind ``sparsecoll calibrate`` (default ``--model profile``): auto's profile.

Every launched rank takes part, as in a neighborhood collective of that many ranks: on a
1-D periodic grid each rank has ``k`` neighbors (offsets ``+1, -1, +1, -1``: the ring
neighbors, twice), or one (offset ``+1``). The variants, interleaved repetition by
repetition after a barrier, each time the maximum over ranks:

* the library's ``Neighbor_alltoall`` (blocking, ``Ineighbor`` + ``Wait``, persistent
  ``Start`` + ``Wait``) with one edge at 8 B, with ``k`` edges at 8 B, and one edge at 64 KiB;
* sparsecoll's ``direct`` in the three forms, one edge, 8 B; and with ``k`` edges;
* ``cartesian_trivial`` with ``k`` edges (``k`` rounds of one message).

:func:`sparsecoll.model.calibrate.fit_profile_load` turns the medians into a profile load.
"""

from __future__ import annotations

import time

import numpy
from mpi4py import MPI

from sparsecoll import cart_neighborhood_create, wrap
from sparsecoll.model.calibrate import PROFILE_EDGES, PROFILE_LARGE, PROFILE_SMALL, ping_pong

FORMS = ("blocking", "nonblocking", "persistent")


def _caller(comm, form: str, send, recv):
    if form == "blocking":
        return lambda: comm.Neighbor_alltoall(send, recv)
    if form == "nonblocking":
        return lambda: comm.Ineighbor_alltoall(send, recv).Wait()
    request = comm.Neighbor_alltoall_init(send, recv)

    def start_wait():
        request.Start()
        request.Wait()
    start_wait.request = request
    return start_wait


def measure(world, reps: int, progress=print) -> tuple:
    """``(times, trivial_steps, peers, one_way)``: the medians the profile fit needs, the rounds of
    ``cartesian_trivial`` and the distinct peers of the many-edge grid (collective over ``world``)."""
    size = world.Get_size()
    small, large, k = PROFILE_SMALL, PROFILE_LARGE, PROFILE_EDGES
    wanted = [(name, form, 1, small) for name in ("native", "direct") for form in FORMS]
    wanted += [("native", "blocking", 1, large)]
    wanted += [(name, "blocking", k, small) for name in ("native", "direct", "trivial")]
    algorithm = {"native": "native", "direct": "direct", "trivial": "cartesian_trivial"}
    grids = {edges: cart_neighborhood_create(world, [size], [True], [(1,), (-1,)] * (edges // 2) or [(1,)],
                                             algorithm="native") for edges in (1, k)}
    comms = list(grids.values())
    calls, keep = {}, []
    for name, form, edges, block in wanted:
        send = numpy.ones(edges * block, dtype="u1")
        recv = numpy.zeros(edges * block, dtype="u1")
        keep.append((send, recv))
        calls[(name, form, edges, block)] = _caller(wrap(grids[edges], algorithm[name]), form, send, recv)
    trivial = wrap(grids[k], "cartesian_trivial")
    trivial_steps = trivial.plan_stats("alltoall")["steps"]
    peers = len(set(trivial.topology.destinations))
    progress(f"calibrate: {len(calls)} variants x {reps} interleaved repetitions on {size} ranks")
    keys = list(calls)
    samples = numpy.zeros((reps, len(keys)))
    for call in calls.values():  # warm-up
        for _ in range(3):
            call()
    local = numpy.zeros(len(keys))
    for rep in range(reps):
        order = keys[rep % len(keys):] + keys[:rep % len(keys)]
        for key in order:
            world.Barrier()
            start = time.perf_counter()
            calls[key]()
            local[keys.index(key)] = time.perf_counter() - start
        world.Allreduce(local, samples[rep], op=MPI.MAX)
        if progress is not None and (rep + 1) % max(reps // 4, 1) == 0:
            progress(f"calibrate: {rep + 1}/{reps} repetitions")
    times = {key: float(numpy.median(samples[:, i])) for i, key in enumerate(keys)}
    one_way = ping_pong(world, [PROFILE_SMALL], max(reps, 10))[0] if size > 1 else 0.0
    for call in calls.values():
        request = getattr(call, "request", None)
        if request is not None:
            request.Free()
    for comm in comms:
        comm.Free()
    return times, trivial_steps, peers, one_way


def copy_seconds_per_byte(nbytes: int = 1 << 22, reps: int = 20) -> float:
    """Local copy time per byte (``numpy.copyto`` of ``nbytes``, median of ``reps``)."""
    source = numpy.ones(nbytes, dtype="u1")
    target = numpy.empty_like(source)
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        numpy.copyto(target, source)
        samples.append(time.perf_counter() - start)
    return float(numpy.median(samples)) / nbytes
