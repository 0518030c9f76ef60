"""The measurement loop (runs on every rank of an mpiexec launch).

Method of Träff and Hunold (ICPP 2019, Appendix A) and the HiPC 2017
microbenchmark: warm-up calls; then repetitions in which every (algorithm, mode)
variant is interleaved (in a new random order every repetition, the same on every rank:
a fixed rotation would give each variant the same predecessor every time, and what a
multi-step variant leaves behind, such as a progress thread's wake-ups, would then
always land on the same next variant), each call after a barrier, its time the maximum
over ranks. Per variant: median and quartiles of those times, and the median and
quartiles of the per-repetition ratio to ``native`` in the same mode.

Modes (the HiPC 2017 evaluation's persistent and non-persistent flavours, plus plain
blocking and nonblocking calls):

* ``persistent``: ``Neighbor_*_init`` once, then ``Start`` + ``Wait`` (bound once);
* ``nonpersistent``: blocking calls on a ``wrap(..., rebind=True)`` wrapper, which binds
  the schedule on every call; ``native`` makes the MPI library's blocking call;
* ``blocking``: blocking calls; sparsecoll caches the bound schedule per arguments;
* ``nonblocking``: ``Ineighbor_*`` + ``Wait`` (cached like blocking calls).

Where ``auto`` is a column, its one-time work runs before the timed repetitions: its first call
decides, then :func:`sparsecoll.runtime.auto.calls_until_settled` more calls build a protocol
candidate and run the online check. Those calls are repetitions like the timed ones, every column
interleaved, untimed: the check measures in the conditions the repetitions then time (a check run
in a burst of ``auto``'s calls alone took `distance_halving` for Open MPI's 64 KiB persistent
allgathers at 0.88-0.94 x the library's, where the repetitions then timed it at 1.07-1.11 x), and
the repetitions time what ``auto`` runs from then on, as the other columns' are timed after their
setup. Timed with the rest, a check that sent a losing choice back to the library put up to 43
of the choice's runs among the first repetitions of the column. Its first call's time, the untimed
repetitions' count and its time in them (``settle_calls``, ``settle_seconds``) and what the check
measured (``check``) are kept.

Variants: an algorithm may carry options (``direct+coloring``,
:func:`sparsecoll.algorithms.parse_variant`) and run on several executors (``steps``, ``dag``):
each (algorithm, options, executor) is one :class:`Variant`, one column, measured in the same
interleaved repetitions as the others (:func:`variants`).

The paper's two phases (Tables I and II) are measured apart from the calls, for every
sparsecoll algorithm: Phase 1 is ``Algorithm.build`` (pattern creation), Phase 2 is
binding the pattern to one call's buffers (``bind``) plus creating the executor's
persistent requests, i.e. what a non-persistent call pays before it communicates.
Each is the maximum over ranks of one repetition, after a barrier; the median over
``phase_reps`` repetitions is reported. The number of schedules bound during the timed
calls is counted per variant, so a run shows that non-persistent calls bind every time
and the other modes never do. Results are checked: every variant's receive buffer must
equal ``native``'s, bit for bit; when ``native`` is not among the measured algorithms, one
blocking native call made for the check gives the reference.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy
from mpi4py import MPI

from sparsecoll import check_executor as check_executor_options
from sparsecoll import executors as executor_names
from sparsecoll import wrap
from sparsecoll.algorithms import AUTO, REGISTRY, parse_variant
from sparsecoll.model.choice import library_fault, size_class
from sparsecoll.model.profile import library_name
from sparsecoll.pattern import REGULAR, family_of
from sparsecoll.runtime.auto import calls_until_settled

from ..fair_timing import call_orders, creation_order, fresh_buffer
from . import MODES
from .workloads import Workload

COLLECTIVES = ("allgather", "allgatherv", "alltoall", "alltoallv")
PHASE_FIELDS = ("phase1_seconds", "phase1_cpu_seconds", "phase2_seconds", "phase2_cpu_seconds",
                "phase2_bind_seconds")


@dataclass
class Buffers:
    """Send and receive buffers and their mpi4py specs for one algorithm and size."""

    send: numpy.ndarray
    recv: numpy.ndarray
    sendspec: object
    recvspec: object


#: The executor of ``wrap`` without ``executor=`` (listed first by :func:`sparsecoll.executors`).
DEFAULT_EXECUTOR = next(iter(executor_names()))


def check_executor(name: str) -> str:
    """``name`` if it is an executor of :func:`sparsecoll.executors` (ValueError naming ``executor`` otherwise)."""
    if name not in executor_names():
        raise ValueError(f"executor: expected one of {list(executor_names())}, got {name!r}")
    return name


def parse_executor(text: str) -> tuple:
    """``NAME[+OPTION=VALUE]...`` (e.g. ``rma+rtr_tree=4``) -> ``(name, options)`` with integer
    values, checked as ``wrap`` checks them (ValueError naming ``executor`` otherwise)."""
    name, *parts = [part.strip() for part in str(text).strip().split("+")]
    check_executor(name)
    options = {}
    for part in parts:
        key, _, value = part.partition("=")
        try:
            options[key] = int(value)
        except ValueError:
            raise ValueError(f"executor: bad option {part!r} in {text!r}; expected OPTION=INTEGER") from None
    try:
        check_executor_options(name, options)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"executor: {text!r}: {exc}") from None
    return name, options


@dataclass(frozen=True)
class Variant:
    """One measured column: a registered algorithm with its options, run on one executor
    (``NAME[+OPTION=VALUE]...``: :func:`parse_executor`)."""

    label: str
    algorithm: str
    options: dict = field(default_factory=dict, hash=False)
    executor: str = DEFAULT_EXECUTOR

    @classmethod
    def parse(cls, text: str, executor: str = DEFAULT_EXECUTOR, label: str | None = None) -> Variant:
        """The variant ``NAME[+OPTION[=VALUE]]...`` on ``executor`` (label: ``text`` unless given)."""
        name, options = parse_variant(text)
        parse_executor(executor)
        return cls(text if label is None else label, name, options, executor)

    @property
    def builds_pattern(self) -> bool:
        """Whether sparsecoll's executor runs it (not ``native``, not ``auto``)."""
        return self.algorithm != AUTO and not REGISTRY[self.algorithm].runs_library

    def wrap(self, comm, **keywords):
        """``comm`` wrapped with this variant's algorithm, options and executor."""
        executor, executor_options = parse_executor(self.executor)
        return wrap(comm, self.algorithm, executor=executor, executor_options=executor_options or None,
                    **self.options, **keywords)


def variants(texts, executors=(DEFAULT_EXECUTOR,)) -> list:
    """One :class:`Variant` per algorithm text and executor: a pattern-building algorithm once per
    executor (labelled ``name[executor]`` unless the default executor runs alone), ``native``
    and ``auto`` once."""
    executors = list(dict.fromkeys(executors))
    if not executors:
        raise ValueError("executors: expected at least one executor")
    out = []
    for text in texts:
        plain = Variant.parse(text)
        if not plain.builds_pattern:
            out.append(plain)
            continue
        for executor in executors:
            label = text if executors == [DEFAULT_EXECUTOR] else f"{text}[{executor}]"
            out.append(Variant.parse(text, executor, label))
    return out


def supported(workload: Workload, family: str) -> list:
    """Registered algorithms (native first) that run ``family`` on this workload, then ``auto``."""
    topology = workload.comm.neighborhood
    names = ["native"] + [n for n in REGISTRY if n != "native" and not n.startswith("test_")]
    return [n for n in names if REGISTRY[n].unsupported_reason(topology, family) is None] + [AUTO]


#: The call form each mode makes (what ``auto`` decides per form).
FORM_OF_MODE = {"persistent": "persistent", "nonpersistent": "blocking", "blocking": "blocking",
                "nonblocking": "nonblocking"}


def make_buffers(workload: Workload, collective: str, size: int) -> Buffers:
    """Rank-unique payloads laid out for ``collective`` with ``size`` bytes per block/unit, each
    buffer in a fresh mapping of its own (:func:`~sparsecoll.tools.fair_timing.fresh_buffer`:
    page-aligned, the same kind of memory for every column)."""
    topology = workload.comm.neighborhood
    rank = topology.rank
    family = family_of(collective)
    send_items = [i for i in topology.send_items(family)]
    recv_items = [i for i in topology.recv_items(family)]
    if collective in REGULAR:
        nsend = 1 if family == "allgather" else len(send_items)
        send = fresh_buffer((numpy.arange(nsend * size) + 7 * rank).astype(numpy.uint8))
        recv = fresh_buffer(numpy.zeros(len(recv_items) * size, dtype=numpy.uint8))
        return Buffers(send, recv, [send, size, MPI.BYTE], [recv, size, MPI.BYTE])

    def units(item):
        return 0 if item is None else workload.units(item)
    if family == "allgather":
        send_counts = [size * workload.units((rank,))]
    else:
        send_counts = [size * units(i) for i in send_items]
    recv_counts = [size * units(i) if i is not None else 0 for i in recv_items]
    send = fresh_buffer((numpy.arange(max(sum(send_counts), 1)) + 7 * rank).astype(numpy.uint8))
    recv = fresh_buffer(numpy.zeros(max(sum(recv_counts), 1), dtype=numpy.uint8))
    recvspec = [recv, (recv_counts, list(numpy.cumsum(recv_counts) - recv_counts)), MPI.BYTE]
    if family == "allgather":
        return Buffers(send, recv, [send, send_counts[0], MPI.BYTE], recvspec)
    sendspec = [send, (send_counts, list(numpy.cumsum(send_counts) - send_counts)), MPI.BYTE]
    return Buffers(send, recv, sendspec, recvspec)


class Call:
    """One algorithm's way of running the collective in the chosen mode."""

    def __init__(self, comm, collective: str, buffers: Buffers, mode: str):
        if mode not in MODES:
            raise ValueError(f"mode: expected one of {MODES}, got {mode!r}")
        self.comm = comm
        self.buffers = buffers
        self.mode = mode
        self.request = None
        name = "Neighbor_" + collective
        start = time.perf_counter()
        if mode == "persistent":
            self.request = getattr(comm, name + "_init")(buffers.sendspec, buffers.recvspec)
            self.request.Start()
            self.request.Wait()
        elif mode == "nonblocking":
            self.method = getattr(comm, "I" + name[0].lower() + name[1:])
            self.method(buffers.sendspec, buffers.recvspec).Wait()
        else:  # blocking, nonpersistent (the wrapper rebinds)
            self.method = getattr(comm, name)
            self.method(buffers.sendspec, buffers.recvspec)
        self.first_seconds = time.perf_counter() - start
        if self.request is None:  # looked up again, as a user's next call does (auto may now name the library's)
            self.method = getattr(comm, self.method.__name__)

    def __call__(self) -> None:
        if self.mode == "persistent":
            self.request.Start()
            self.request.Wait()
        elif self.mode == "nonblocking":
            self.method(self.buffers.sendspec, self.buffers.recvspec).Wait()
        else:
            self.method(self.buffers.sendspec, self.buffers.recvspec)

    def free(self) -> None:
        """Release the persistent request (if any)."""
        if self.request is not None:
            self.request.Free()


def reference_result(workload: Workload, collective: str, size: int, algorithm: str = "native") -> numpy.ndarray:
    """The receive buffer of one blocking call of ``algorithm``'s collective (collective; by default
    the MPI library's own)."""
    check = Call(wrap(workload.comm, algorithm), collective, make_buffers(workload, collective, size), "blocking")
    check.free()
    return check.buffers.recv


def known_library_fault(world, workload: Workload) -> str | None:
    """Why the MPI library computes ``workload`` wrongly on some rank, the same on every rank
    (collective), or None (:func:`sparsecoll.model.choice.library_fault`)."""
    mine = library_fault(workload.comm.neighborhood, library_name())
    reasons = [reason for reason in world.allgather(mine) if reason is not None]
    return reasons[0] if reasons else None


def _max_over_ranks(world, value: float) -> float:
    return world.allreduce(value, op=MPI.MAX)


def _median_of_max(world, seconds: numpy.ndarray) -> float:
    """Maximum over ranks per repetition, then the median over repetitions."""
    worst = numpy.empty_like(seconds)
    world.Allreduce(seconds, worst, op=MPI.MAX)
    return float(numpy.median(worst))


def phase1_seconds(world, comm, collective: str, repetitions: int) -> dict:
    """Phase 1 (pattern creation): ``Algorithm.build`` for ``comm``'s algorithm, collective.

    The pattern is built anew ``repetitions`` times on the handle's private
    communicator, each after a barrier. Returns ``phase1_seconds`` (wall clock) and
    ``phase1_cpu_seconds`` (this thread's CPU time, which oversubscribed ranks do not
    inflate), each the median over repetitions of the maximum over ranks. The
    wrapper's cached pattern is left alone.
    """
    if repetitions < 1:
        raise ValueError(f"repetitions: expected at least 1, got {repetitions}")
    wall, cpu = numpy.empty(repetitions), numpy.empty(repetitions)
    for k in range(repetitions):
        world.Barrier()
        start, start_cpu = time.perf_counter(), time.thread_time()
        comm.runtime.build_uncached(comm.plan, collective)
        wall[k], cpu[k] = time.perf_counter() - start, time.thread_time() - start_cpu
    return {"phase1_seconds": _median_of_max(world, wall), "phase1_cpu_seconds": _median_of_max(world, cpu)}


def phase2_seconds(world, comm, collective: str, buffers: Buffers, repetitions: int) -> dict:
    """Phase 2 (schedule creation for one call), collective over the ranks.

    Parsing the call's buffer specs and binding the pattern to them (counts,
    displacements, datatypes, temporary space; the size pass where one is needed),
    then creating the persistent requests and derived datatypes of ``comm``'s executor: everything
    a non-persistent call does before it communicates. Returns ``phase2_seconds``
    (wall clock), ``phase2_cpu_seconds`` (this thread's CPU time) and
    ``phase2_bind_seconds`` (wall clock of parsing and binding alone), each the median
    over ``repetitions`` of the maximum over ranks.
    """
    if repetitions < 1:
        raise ValueError(f"repetitions: expected at least 1, got {repetitions}")
    bind_wall, wall, cpu = numpy.empty(repetitions), numpy.empty(repetitions), numpy.empty(repetitions)
    for k in range(repetitions):
        world.Barrier()
        start, start_cpu = time.perf_counter(), time.thread_time()
        schedule = comm.runtime.bind_uncached(comm.plan, collective, buffers.sendspec, buffers.recvspec)
        bound = time.perf_counter()
        executor = comm.runtime.call_requests(comm.plan, collective, schedule)
        wall[k], cpu[k] = time.perf_counter() - start, time.thread_time() - start_cpu
        bind_wall[k] = bound - start
        executor.free()
    return {"phase2_seconds": _median_of_max(world, wall), "phase2_cpu_seconds": _median_of_max(world, cpu),
            "phase2_bind_seconds": _median_of_max(world, bind_wall)}


def plan_numbers(world, workload: Workload, comm, collective: str, size: int) -> dict:
    """Deterministic numbers over all ranks: steps, messages and bytes sent per rank."""
    stats = comm.plan_stats(collective)
    pattern = comm.pattern(collective)
    me = comm.neighborhood.rank
    multiplier = (lambda item: 1) if collective in REGULAR else workload.units
    sent_bytes = sum(size * multiplier(item) for step in pattern.steps for m in step.sends if m.peer != me
                     for item in m.items)
    rows = world.allgather((stats["steps"], stats["sends_to_others"], stats["send_items"], sent_bytes))
    steps, messages, items, nbytes = (numpy.array(column) for column in zip(*rows))
    extra = {k: v for k, v in stats.items() if k not in ("algorithm", "family", "steps", "sends", "recvs",
                                                           "send_items", "recv_items", "sends_to_others",
                                                           "build_seconds") and isinstance(v, (int, float, str))}
    return {"steps_max": int(steps.max()), "messages_max": int(messages.max()),
            "messages_mean": float(messages.mean()), "items_max": int(items.max()),
            "bytes_max": int(nbytes.max()), "bytes_mean": float(nbytes.mean()),
            "rank0_info": extra}


def executor_counts(world, comm, collective: str, buffers: Buffers) -> dict:
    """The executor's own deterministic counts of one run (RMA executors: epochs, RTR messages
    sent and received and the RTR tree depth, puts, bytes put, staged regions), each as its
    maximum and mean over ranks; ``{}`` where the executor counts nothing of its own."""
    schedule = comm.runtime.bind_uncached(comm.plan, collective, buffers.sendspec, buffers.recvspec)
    executor = comm.runtime.call_requests(comm.plan, collective, schedule)
    try:
        counts = executor.counts() if hasattr(executor, "counts") else {}
    finally:
        executor.free()
    rows = world.allgather(counts)
    out = {}
    for name in sorted(rows[0]):
        column = numpy.array([row[name] for row in rows])
        out[f"{name}_max"], out[f"{name}_mean"] = int(column.max()), float(column.mean())
    return out


def measure(world, workload: Workload, collective: str, size: int, algorithms: list, *, modes, reps: int,
            warmup: int, phase_reps: int = 5, phase1_cache: dict | None = None, on_progress=None) -> list:
    """Interleaved measurement of every (algorithm, mode) for one workload, collective and size.

    ``algorithms``: names (``direct+coloring`` carries options) or :class:`Variant` objects; the
    results are keyed by their labels. Returns one result per mode (in ``modes`` order);
    each compares its algorithms with ``native`` in the same mode, repetition by
    repetition. ``phase1_cache`` (a dict kept across calls) lets Phase 1 be measured once
    per workload, family and algorithm, since it does not depend on the size or the mode.
    """
    modes = _checked_modes(modes)
    if reps < 1:
        raise ValueError(f"reps: expected at least 1, got {reps}")
    if not algorithms:  # nothing supports this case (the command has said so)
        return []
    columns = [a if isinstance(a, Variant) else Variant.parse(a) for a in algorithms]
    labels = [v.label for v in columns]
    if len(set(labels)) != len(labels):
        raise ValueError(f"algorithms: each column once, got {labels}")
    phase1_cache = {} if phase1_cache is None else phase1_cache
    setup = {v.label: _set_up(world, workload, collective, size, v, phase_reps, phase1_cache)
             for v in columns if v.algorithm != AUTO}
    made = {}
    wanted = [(mode, v) for mode in modes for v in columns]
    for position in creation_order(len(wanted), workload.name, collective, size):  # no column always first
        mode, v = wanted[position]
        comm = v.wrap(workload.comm, rebind=(mode == "nonpersistent" and v.algorithm != "native"))
        world.Barrier()
        made[(v.label, mode)] = Call(comm, collective, make_buffers(workload, collective, size), mode)
    calls = {(v.label, mode): made[(v.label, mode)] for mode, v in wanted}
    first = {variant: _max_over_ranks(world, call.first_seconds) for variant, call in calls.items()}
    for _ in range(warmup):
        for call in calls.values():
            call()
    autos = [v for v in columns if v.algorithm == AUTO]
    settle_reps = max(calls_until_settled(FORM_OF_MODE[mode]) for mode in modes) if autos else 0
    settling, _ = _interleaved(world, workload.comm, calls, settle_reps)  # auto's one-time work: the module
    samples, binds = _interleaved(world, workload.comm, calls, reps)
    chosen, predicted, checks = {}, {}, {}
    if autos:  # what auto ran at the end (its first call decided), and that algorithm's numbers
        for mode in modes:
            stats = calls[(autos[0].label, mode)].comm.plan_stats(collective, block_bytes=size,
                                                                  form=FORM_OF_MODE[mode])
            chosen[mode] = stats["algorithm"]
            # a pinned collective (a rank that cannot tell its block size) runs the class of its
            # first call at every size: that class's predictions are not this row's
            same_class = stats["auto"]["size_class"] == size_class(size)
            predicted[mode] = stats["auto"]["predicted_seconds"] if same_class else {}
            checks[mode] = stats["auto"]["check"]
        for name in set(chosen.values()) - set(setup):
            setup[name] = _set_up(world, workload, collective, size, Variant(name, name), phase_reps, phase1_cache)
    native = next((v.label for v in columns if v.algorithm == "native" and not v.options), None)
    fault = known_library_fault(world, workload)  # then direct's result is the reference (the standard's)
    reference = None if native is not None and fault is None else \
        reference_result(workload, collective, size, "native" if fault is None else "direct")
    results = []
    for mode in modes:
        result = {"workload": workload.spec, "topology": workload.name, "collective": collective,
                  "family": family_of(collective), "size": size, "mode": mode, "reps": reps, "algorithms": {},
                  "reference": "native" if fault is None else "direct", "library_fault": fault}
        expected = calls[(native, mode)].buffers.recv if reference is None else reference
        for v in columns:
            variant = (v.label, mode)
            worst = numpy.empty(reps)
            world.Allreduce(samples[variant], worst, op=MPI.MAX)
            agree = world.allreduce(bool(numpy.array_equal(calls[variant].buffers.recv, expected)), op=MPI.LAND)
            if v.algorithm == AUTO:
                ran = {**setup[chosen[mode]], "chosen": chosen[mode], "predicted_seconds": predicted[mode],
                       "check": checks[mode], "settle_calls": settle_reps,
                       "settle_seconds": _max_over_ranks(world, float(settling[variant].sum()))}
                ran.update({field: None for field in PHASE_FIELDS if field in ran})
            else:
                ran = setup[v.label]
            result["algorithms"][v.label] = {"samples": worst.tolist(), "first_call_seconds": first[variant],
                                             "agrees_with_native": agree,
                                             "binds_per_call": _max_over_ranks(world, binds[variant]) / reps,
                                             **ran, "algorithm": v.algorithm, "options": dict(v.options),
                                             "executor": v.executor if v.builds_pattern else None}
            if on_progress is not None:
                on_progress()
        results.append(result)
    for call in calls.values():
        call.free()
    return results


def _checked_modes(modes) -> list:
    """The modes asked for, once each, in order (ValueError naming ``modes`` otherwise)."""
    modes = list(dict.fromkeys([modes] if isinstance(modes, str) else modes))
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise ValueError(f"modes: expected some of {MODES}, got {modes!r}")
    return modes


def _set_up(world, workload: Workload, collective: str, size: int, variant: Variant, phase_reps: int,
            phase1_cache: dict) -> dict:
    """What one variant costs before its calls: build time, the plan's numbers, Phases 1 and 2."""
    world.Barrier()
    start = time.perf_counter()
    comm = variant.wrap(workload.comm)
    if variant.algorithm != "native":
        comm.pattern(collective)
    build_seconds = _max_over_ranks(world, time.perf_counter() - start)
    plan = plan_numbers(world, workload, comm, collective, size)
    if variant.algorithm == "native":  # the MPI library's own setup is not visible
        phases = {**dict.fromkeys(PHASE_FIELDS), "phase_reps": 0}
    else:  # the pattern does not depend on the executor: Phase 1 once per algorithm and options
        key = (workload.spec, family_of(collective), variant.algorithm, tuple(sorted(variant.options.items())))
        if key not in phase1_cache:
            phase1_cache[key] = phase1_seconds(world, comm, collective, phase_reps)
        buffers = make_buffers(workload, collective, size)
        phases = {**phase1_cache[key], **phase2_seconds(world, comm, collective, buffers, phase_reps),
                  "phase_reps": phase_reps}
        plan["executor_counts"] = executor_counts(world, comm, collective, buffers)
    return {"build_seconds": build_seconds, **phases, "plan": plan}


def _interleaved(world, handle, calls: dict, reps: int) -> tuple:
    """``(samples, binds)``: every call once per repetition, in the order of
    :func:`~sparsecoll.tools.fair_timing.call_orders`, a barrier before each; this rank's seconds
    per call and the schedules each bound."""
    variants = list(calls)
    samples = {variant: numpy.empty(reps) for variant in variants}
    binds = dict.fromkeys(variants, 0)
    timer = MPI.Wtime
    orders = call_orders(len(variants))
    for rep in range(reps):
        for position in next(orders):
            variant = variants[position]
            call = calls[variant]
            bound_before = handle.schedules_bound
            world.Barrier()
            t0 = timer()
            call()
            samples[variant][rep] = timer() - t0
            binds[variant] += handle.schedules_bound - bound_before
    return samples, binds
