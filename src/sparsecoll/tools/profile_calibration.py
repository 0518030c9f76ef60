"""The measurements behind ``sparsecoll calibrate`` (default ``--model profile``): auto's profile.

Every launched rank takes part, as in a neighborhood collective of that many ranks: on a
1-D periodic grid (the ring) each rank has one neighbor (offset ``+1``). The variants,
interleaved repetition by repetition in the benchmark's random order, with its fixed
``malloc`` threshold and fresh buffers (:mod:`sparsecoll.tools.fair_timing`), the variants of
one block size together as in one row of the benchmark, each after a barrier, each time the
maximum over ranks:

* the library's ``Neighbor_alltoall`` (blocking, ``Ineighbor`` + ``Wait``, persistent
  ``Start`` + ``Wait``) with one edge at 8 B;
* sparsecoll's ``direct`` in the three forms, one edge, 8 B;
* on the periodic 2-D 9-point stencil, ``Neighbor_alltoall`` and ``Neighbor_allgather`` of the
  library, ``direct`` and ``cartesian`` (two steps of combined messages), blocking at 8 B and
  64 KiB, and persistent at 8 B (library and ``direct``): the time per byte, the per-message
  overhead and sparsecoll's per-call, per-step and combined-message costs are fitted on them,
  a neighborhood of the kind users run;
* the library's blocking allgather on the stencil at 8 B through the size comparison of a
  form whose table mixes the library with other algorithms
  (:func:`sparsecoll.runtime.auto.library_shortcut`), in the 8 B group beside the library's
  method: the profile's ``native.shortcut``;
* ``direct``'s persistent alltoall on the stencil at 8 B and 64 KiB on the step and on the RMA
  executor: the profile's ``rma`` costs (:func:`sparsecoll.model.calibrate.fit_rma`);
* the library's persistent alltoall on the stencil with blocks just within and just past the
  library's eager limit (:func:`sparsecoll.model.calibrate.eager_straddle`), and ``direct``'s
  and ``cartesian``'s just past it, timed together: the ``rendezvous`` cost of a message past
  the limit, and the ``rendezvous_step`` of a step that waits for its handshake.

:func:`sparsecoll.model.calibrate.fit_profile_load` turns the medians into a profile load.
"""

from __future__ import annotations

import time

import numpy
from mpi4py import MPI

from sparsecoll import cart_neighborhood_create, wrap
from sparsecoll.model.calibrate import PROFILE_LARGE, PROFILE_SMALL, PROFILE_STENCIL, eager_straddle, ping_pong
from sparsecoll.model.profile import FORMS
from sparsecoll.runtime.auto import library_shortcut

from .fair_timing import fix_malloc_threshold, fresh_buffer, interleaved_medians


def _caller(comm, form: str, send, recv, family: str = "alltoall"):
    name = f"Neighbor_{family}"
    if form == "blocking":
        method = getattr(comm, name)
        return lambda: method(send, recv)
    if form == "nonblocking":
        method = getattr(comm, f"Ineighbor_{family}")
        return lambda: method(send, recv).Wait()
    request = getattr(comm, f"{name}_init")(send, recv)

    def start_wait():
        request.Start()
        request.Wait()
    start_wait.request = request
    return start_wait


def measure(world, reps: int, progress=print) -> tuple:
    """``(times, stencil, one_way)``: the medians the profile fit needs (collective over ``world``).

    ``times[(variant, form, edges, block)]``: the ring; ``stencil[(algorithm, family, form, block)]``:
    ``(seconds, this rank's Pattern)`` on the 9-point stencil.
    """
    fix_malloc_threshold()  # before any buffer exists, as the benchmark does
    size = world.Get_size()
    small, large = PROFILE_SMALL, PROFILE_LARGE
    wanted = [(name, form, 1, small) for name in ("native", "direct") for form in FORMS]
    ring = cart_neighborhood_create(world, [size], [True], [(1,)], algorithm="native")
    grid = cart_neighborhood_create(world, MPI.Compute_dims(size, 2), [True, True], PROFILE_STENCIL,
                                    algorithm="native")
    comms = [ring, grid]
    calls, keep, patterns = {}, [], {}

    def add(key, comm, form: str, send_bytes: int, recv_bytes: int, family: str = "alltoall",
            caller=_caller) -> None:
        """One timed variant: fresh send and receive buffers (kept alive) and its call."""
        send = fresh_buffer(numpy.ones(send_bytes, dtype="u1"))
        recv = fresh_buffer(numpy.zeros(recv_bytes, dtype="u1"))
        keep.append((send, recv))
        calls[key] = caller(comm, form, send, recv, family)

    for name, form, edges, block in wanted:
        add((name, form, edges, block), wrap(ring, name), form, edges * block, edges * block)
    edges = len(PROFILE_STENCIL)
    for family in ("alltoall", "allgather"):
        blocks = edges if family == "alltoall" else 1
        for name in ("native", "direct", "cartesian"):
            comm = wrap(grid, name)
            patterns[(name, family)] = comm.pattern(family)
            forms = ("blocking", "persistent") if name != "cartesian" else ("blocking",)
            for block in (small, large):
                for form in forms if block == small else ("blocking",):
                    add((name, family, form, block), comm, form, blocks * block, edges * block, family)
    # the library's 8 B allgather through auto's size comparison (every call below the limit)
    library = wrap(grid, "native")
    patterns[("shortcut", "allgather")] = library.pattern("allgather")
    add(("shortcut", "allgather", "blocking", small), library, "blocking", small, edges * small, "allgather",
        _through_shortcut)
    # what the RMA executor adds to direct's persistent alltoall, at both sizes (auto's "[rma]" twins),
    # each against a step-executor twin of its own timed in its group
    for name, executor in (("direct[steps]", "steps"), ("direct[rma]", "rma")):
        comm = wrap(grid, "direct", executor=executor)
        patterns[(name, "alltoall")] = comm.pattern("alltoall")
        for block in (small, large):
            add((name, "alltoall", "persistent", block), comm, "persistent", edges * block, edges * block)
    # the library's persistent alltoall on the stencil just within and just past its eager limit,
    # timed together: what a message past it costs (its ``rendezvous``); and direct's and
    # cartesian's just past it: what a second step that waits for a handshake adds
    straddle = eager_straddle()
    within, past = straddle
    for name, block in (("native", within), ("native", past), ("direct", past), ("cartesian", past)):
        add((name, "alltoall", "persistent", block), wrap(grid, name), "persistent", edges * block, edges * block)
    groups: dict = {}
    for key in calls:
        groups.setdefault(_group(key, straddle), []).append(key)
    progress(f"calibrate: {len(calls)} variants in {len(groups)} groups by block size x {reps} interleaved "
             f"repetitions on {size} ranks")
    for call in calls.values():  # warm-up
        for _ in range(3):
            call()
    medians = {}
    for number, (label, keys) in enumerate(groups.items(), 1):
        def report(done: int, label=label, number=number) -> None:
            if progress is not None and done % max(reps // 2, 1) == 0:
                progress(f"calibrate: {label} group ({number}/{len(groups)}): {done}/{reps} repetitions")
        values = interleaved_medians(world, [calls[key] for key in keys], reps, after_repetition=report)
        medians.update(zip(keys, values))
    times = {key: value for key, value in medians.items() if key[1] not in ("alltoall", "allgather")}
    stencil = {key: (value, patterns[(key[0], key[1])]) for key, value in medians.items()
               if key[1] in ("alltoall", "allgather")}
    one_way = ping_pong(world, [PROFILE_SMALL], max(reps, 10))[0] if size > 1 else 0.0
    for call in calls.values():
        request = getattr(call, "request", None)
        if request is not None:
            request.Free()
    for comm in comms:
        comm.Free()
    return times, stencil, one_way


def _through_shortcut(comm, form: str, send, recv, family: str):
    """``_caller``'s blocking call of ``comm`` (a wrapper holding the library's methods) through
    :func:`~sparsecoll.runtime.auto.library_shortcut`, which sends it to the library's method."""
    method = getattr(comm, f"Neighbor_{family}")
    shortcut = library_shortcut({form: recv.nbytes + 1}, form, method, method)
    return lambda: shortcut(send, recv)


def _group(key: tuple, straddle: tuple) -> str:
    """The interleaved group a variant is timed in: one per block size of the blocking and
    persistent calls, as one row of the benchmark (a 64 KiB call between two 8 B calls leaves the
    caches to the 8 B call's cost: measured, direct's 8 B stencil alltoall 0.78x the library's
    alone, 0.96-1.02x among the 64 KiB variants); the eager-limit straddle; and groups of their
    own for the nonblocking calls and for the RMA executor with its twin, which no row of the
    benchmark holds and which slow the calls timed beside them unevenly (8 ranks on 2 cores,
    MPICH: the library's and direct's persistent 8 B stencil alltoall alone 0.73-0.75x, beside
    nonblocking calls 0.77x, beside the RMA executor 0.78x)."""
    name, form, block = key[0], key[-2], key[-1]
    if block in straddle:
        return "eager limit"
    if name in ("direct[rma]", "direct[steps]"):
        return f"{block} B rma"
    return f"{block} B nonblocking" if form == "nonblocking" else f"{block} B"


def copy_seconds_per_byte(nbytes: int = 1 << 22, reps: int = 20) -> float:
    """Local copy time per byte (``numpy.copyto`` of ``nbytes``, median of ``reps``)."""
    source = fresh_buffer(numpy.ones(nbytes, dtype="u1"))
    target = numpy.empty_like(source)
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        numpy.copyto(target, source)
        samples.append(time.perf_counter() - start)
    return float(numpy.median(samples)) / nbytes
