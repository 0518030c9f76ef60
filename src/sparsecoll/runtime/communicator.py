"""The runtime of one communicator handle: pattern -> bound schedule -> executor on a channel.

One :class:`CommRuntime` per handle (stored as an MPI attribute, so every wrapper of the
handle shares it) owns every decision that affects communication; see
:mod:`sparsecoll.runtime` for the invariants it keeps.
"""

from __future__ import annotations

import atexit
import ctypes
import time
from dataclasses import replace
from functools import cache, partial
from operator import methodcaller
from types import MappingProxyType

import numpy
from mpi4py import MPI

from .. import algorithms, execute, reductions
from ..bind import bind, has_transit
from ..buffers import (
    Blocks,
    check_regular_blocks,
    element_size,
    mixes_basic_types,
    parse_simple,
    parse_vector,
    parse_w,
    with_own_datatypes,
)
from ..checks import nonnegative_integer
from ..execute import StepExecutor  # the size pass and request counts use the default
from ..execute.p2p import pattern_wire_sends, route, self_channel, take_errhandler
from ..model.choice import library_fault, local_nonblocking_library_fault, size_class
from ..model.profile import FORMS, ProfileError, library_name
from ..pattern import FAMILIES, REGULAR, family_of, stats
from ..topology import Topology, from_comm
from . import persistence as levels
from .auto import UNKNOWN, AutoDispatch, FamilyModel, explain_undecided, local_class_or_refusal
from .caches import CACHE_SIZE, LastArrays, ParseCache, Recent, call_signature, simple_spec
from .channels import Channels
from .plan import CallPlan, Plan
from .progress import (
    ENGINE,
    FREED,
    INACTIVE,
    PersistentRequest,
    ScheduleRequest,
    run_stages,
    single_stage,
)

_ndarray = numpy.ndarray

#: What the size pass sends per item: its bytes and the size of its basic elements, two int64.
SIZE_PASS_ITEM_BYTES = 16

#: Tag of blocking calls (and of the size pass of persistent requests at init).
BLOCKING_CHANNEL = 0
#: Buffer sets whose idle nonblocking executors are kept (at most one per channel each).
NONBLOCKING_KEYS = 4

PARSERS = {
    # collective: (send parser, one send block per out-edge?, recv parser)
    "allgather": (parse_simple, False, parse_simple),
    "allgatherv": (parse_simple, False, parse_vector),
    "allgatherw": (parse_simple, False, parse_w),
    "alltoall": (parse_simple, True, parse_simple),
    "alltoallv": (parse_vector, True, parse_vector),
    "alltoallw": (parse_w, True, parse_w),
}


#: What a rank refused among ``wrap``'s arguments, compared by :meth:`CommRuntime.agree_on_level`
#: (the higher code wins: another argument's refusal is not the profile's).
PROFILE_REFUSED, ARGUMENT_REFUSED = 1, 2


class CommRuntime:
    """Everything sparsecoll keeps for one communicator handle.

    Kept until ``Free`` (built or agreed collectively, so never dropped on one rank alone):
    the private duplicate communicator, the Topology, the Patterns, the size-pass
    decisions and the tag channels. Kept for at most :data:`CACHE_SIZE` recent argument
    sets, and dropped by :meth:`release_caches` (local work only): parsed arguments, bound
    schedules and the executors of blocking calls, and the idle executors of nonblocking
    calls for :data:`NONBLOCKING_KEYS` buffer sets. None of them keeps a user buffer alive.
    """

    def __init__(self, comm: MPI.Comm, topology: Topology | None = None, private: MPI.Comm | None = None):
        """``private``: the handle's private duplicate made already (:class:`PendingPrivate`). It takes
        the handle's error handler of now (mpi4py gives every communicator it makes ``ERRORS_RETURN``,
        and one set since an ``Idup`` counts), and so does its channel to self, made here."""
        if private is None:
            private = _plain(comm).Dup()  # collective
        take_errhandler(comm, [private])
        self.private = private
        route(self.private, self.private.Get_rank())  # its channel to self, made here: never under the engine's lock
        self.topology = topology if topology is not None else from_comm(comm)
        self.channels = Channels(self.private.Get_attr(MPI.TAG_UB))
        self.patterns: dict = {}  # (algorithm, options key, family) -> Pattern
        self.build_seconds: dict = {}
        self._size_pass_flags: dict = {}  # pattern key -> (v/w calls need it, regular calls need it)
        self._call_plans: dict = {}  # (plan key, rebind, collective) -> CallPlan
        self._family_models: dict = {}  # (auto plan key, family) -> FamilyModel
        self._dispatches: dict = {}  # (auto plan key, rebind, collective) -> AutoDispatch
        self._decided: dict = {}  # the same key -> [whether its dispatch was made] (see decided_flag)
        self._library_allowed = None  # see library_allowed
        self._parsed = ParseCache()
        self._last_arrays = LastArrays()  # CallPlan -> the call key of its last call of two arrays
        self._layouts = Recent(size=4 * CACHE_SIZE)  # (send key, recv key) -> layout number
        self._layouts_made = 0
        # call keys: (CallPlan, layout number[, item sizes of the size pass])
        self._schedules = Recent()  # call key -> bound Schedule
        self._blocking = Recent(evict=methodcaller("free"))  # call key -> executor of blocking calls (of any kind)
        # call key -> {channel: idle executor}; an executor in flight is out of its pool
        self._idle = Recent(evict=_free_pool, size=NONBLOCKING_KEYS)
        self.schedules_bound = 0  # bind() calls for collective calls
        self._exact_checks: dict = {}  # collective -> ExactBytesCheck (cdag_exact_byte_communications)
        self._prepared: dict = {}  # plan key -> families prepared at wrap (cdag_strict_communication)
        # executor name -> execute.Prepared (a window per RMA variant, opened at the first call plan)
        self._executors: dict = {}

    # -- the topology -----------------------------------------------------------------------
    def set_topology(self, topology: Topology) -> None:
        """Replace the Topology (collective: after detecting a Cartesian neighborhood on every rank)."""
        self.topology = topology

    def check_supported(self, plan: Plan) -> None:
        """ValueError naming ``algorithm`` where ``plan``'s algorithm cannot run on this topology at
        all (local: the reasons depend on the topology's kind and detected grid, which every rank
        shares); a family it does not implement raises at that family's first call."""
        if plan.auto or plan.native:
            return
        supports = algorithms.get(plan.algorithm).supports
        reason = supports(self.topology) if supports is not None else None
        if reason is not None:
            raise ValueError(f"algorithm: {plan.algorithm!r} cannot run here: {reason}")

    # -- patterns (of a plan naming a registered algorithm) ----------------------------------
    @staticmethod
    def _pattern_key(plan: Plan, family: str) -> tuple:
        if plan.auto:
            raise RuntimeError("internal: an 'auto' plan has no pattern of its own; resolve it per call")
        return (plan.algorithm, plan.key[1], family)

    def pattern(self, plan: Plan, collective: str):
        """This rank's Pattern for ``collective``'s family (built once; collective for protocols)."""
        family = family_of(collective)
        key = self._pattern_key(plan, family)
        pattern = self.patterns.get(key)
        if pattern is None:
            reason = algorithms.get(key[0]).unsupported_reason(self.topology, family)
            if reason is not None:  # before any message (wrap refused the topology; a family is per call)
                raise ValueError(f"algorithm: {reason}")
            start = time.perf_counter()
            pattern = algorithms.build_pattern(key[0], self.topology, self.private, dict(plan.options), family)
            self.build_seconds[key] = time.perf_counter() - start
            self.patterns[key] = pattern
        return pattern

    def built_pattern(self, plan: Plan, collective: str):
        """The Pattern if this rank has it or can build it without communicating, else None."""
        key = self._pattern_key(plan, family_of(collective))
        if key in self.patterns or algorithms.builds_locally(key[0], plan.options):
            return self.pattern(plan, collective)
        return None

    def plan_stats(self, plan: Plan, collective: str, form: str = "blocking", block_bytes: int = 8) -> dict:
        """Deterministic numbers of the schedule ``plan`` runs for ``collective`` (never communicates).

        ``auto``: those of the algorithm a call of ``form`` with ``block_bytes`` blocks runs, and
        under ``"auto"`` the candidates, their predicted times, the profile and the reason.
        """
        family = family_of(collective)
        if form not in FORMS:
            raise ValueError(f"form: expected one of {list(FORMS)}, got {form!r}")
        block_bytes = nonnegative_integer(block_bytes, "block_bytes")
        explained = None
        level = self._persistence_stats(plan, collective)
        if plan.auto:
            dispatch = self._dispatches.get((plan.key, plan.rebind, collective))
            if dispatch is not None:
                explained = dispatch.explain(form, block_bytes)
            elif form == "nonblocking":
                explained = explain_undecided(plan, block_bytes,
                                              "native" if self._library_runs_undecided_calls() else "direct")
            else:
                raise RuntimeError(
                    f"plan_stats({collective!r}): 'auto' decides at the first call of Neighbor_{collective} "
                    f"or Neighbor_{collective}_init (collective: every rank makes it; a nonblocking call is "
                    f"local and decides nothing); call one on every rank first")
            plan = plan.resolved(explained["algorithm"])
        pattern = self.built_pattern(plan, collective)
        if pattern is None:
            if explained is not None:  # a protocol candidate auto predicts from an estimate
                return {"algorithm": plan.algorithm, "family": family, "auto": explained, "persistence": level}
            reason = algorithms.get(plan.algorithm).unsupported_reason(self.topology, family)
            if reason is not None:  # what the call would raise, not an invitation to make it
                raise ValueError(f"algorithm: {reason}")
            raise RuntimeError(
                f"plan_stats({collective!r}): the {plan.algorithm!r} pattern of the {family} family is built by a "
                f"collective call; call Neighbor_{collective} (blocking, nonblocking or persistent) or "
                f"comm.pattern({collective!r}) on every rank first")
        prepared = self._executors.get(plan.executor)
        executor = plan.executor if prepared is None else prepared.label
        key = self._pattern_key(plan, family)
        result = {"algorithm": plan.algorithm, "executor": "library" if plan.native else executor,
                  **stats(pattern),
                  "build_seconds": self.build_seconds.get(key, 0.0)}
        if prepared is not None and not plan.native:  # the executor's own numbers (RMA: its RTR messages)
            result.update(prepared.counts(key, pattern, plan.executor_options, self.private.Get_rank()))
        if not plan.native and executor in ("steps", "dag") and collective in REGULAR:
            result["wire_sends"] = pattern_wire_sends(pattern, block_bytes)  # messages to one peer joined
        call = self._call_plans.get((plan.key, plan.rebind, collective))
        result["size_pass"] = None
        if call is not None and call.size_pass and not plan.native:
            # the Pattern run once more on SIZE_PASS_ITEM_BYTES per item (:meth:`_size_pass`)
            result["size_pass"] = {"sends": result["sends"], "recvs": result["recvs"],
                                   "bytes_sent": SIZE_PASS_ITEM_BYTES * result["send_items"],
                                   "runs": "before every blocking or nonblocking call; once per persistent request"}
        if explained is not None:
            result["auto"] = explained
        result["persistence"] = level
        return result

    def _persistence_stats(self, plan: Plan, collective: str) -> dict:
        """``plan_stats``'s ``persistence``: the info keys in force and what each enabled."""
        auto_class = None
        if plan.auto and plan.persistence.exact_bytes:
            dispatch = self._dispatches.get((plan.key, plan.rebind, collective))
            auto_class = None if dispatch is None else dispatch.pinned
        block_bytes = None
        if plan.persistence.exact_bytes and not plan.auto:
            block_bytes = plan.options.get(levels.BLOCK_BYTES_OPTION)
        return {"keys": plan.persistence.keys(),
                "enabled": levels.enabled(plan.persistence, native=plan.native, auto=plan.auto,
                                          strict_built=self._prepared.get(plan.key, ()), auto_class=auto_class,
                                          block_bytes=block_bytes)}

    # -- persistence levels (:mod:`.persistence`) --------------------------------------------------
    def agree_on_level(self, plan: Plan, given_options: dict, detects_grid: bool = False,
                       wrapper_key: tuple = (), refused: Exception | None = None) -> Plan:
        """Check that every rank gave ``plan`` the same info keys, algorithm, options and executor,
        asked alike whether to detect a grid (``detects_grid``: wrap's ``grid=``, whose detection
        is collective) and gave the same ``wrapper_key`` (what else of wrap's arguments decides
        messages: the global collectives and their node structure's options) (collective: one
        allreduce) and return the plan to run (under exact bytes,
        sized by the weights: :meth:`.Plan.sized`; for ``auto``, keyed by what the ranks' profiles
        and ``verify_choice`` were: :meth:`.Plan.with_agreed_inputs`).

        ``refused``: the error of an argument of ``wrap`` this rank refused (a profile, file or
        argument: profiles are files of each host; any other argument, with ``plan`` a stand-in):
        it raises here on this rank, and an error saying so on every other (a ProfileError where
        only profiles were refused), instead of on this rank alone before the others wait in the
        allreduce."""
        key = (plan.key, detects_grid, wrapper_key)
        code = 0 if refused is None else PROFILE_REFUSED if isinstance(refused, ProfileError) else ARGUMENT_REFUSED
        largest, inputs, some_refused = levels.agree(self.private, plan.persistence, self.topology, key,
                                                     plan.decision_inputs(), code)
        if refused is not None:
            raise refused
        if some_refused == ARGUMENT_REFUSED:
            raise ValueError("wrap: another rank refused its arguments (its error names the argument); they "
                             "decide every call's messages, so every rank must give the same, and no rank runs")
        if some_refused:
            raise ProfileError("profile: another rank could not use its profile (its error names the file and "
                               "the key, or the argument); the choice of algorithm is collective, so no rank runs")
        return plan.with_agreed_inputs(inputs).sized(largest, given_options)

    def prepare_strict(self, plan: Plan) -> None:
        """``cdag_strict_communication`` at wrap (collective): build what the first calls would.

        A registered algorithm gets the call plans of every collective of each family it
        supports on every rank (its Pattern, built by its protocol where it has one, and the
        size-pass decision, agreed by one allreduce per Pattern); ``auto`` gets the cost model of
        both families (placement agreed, local candidates built). The first calls then send
        only their own messages, and ``plan_stats`` answers before any call; under ``auto`` the
        first call of each collective still makes its decision's allreduce (it takes that call's
        block size), after which ``plan_stats`` answers.
        """
        if plan.native or plan.key in self._prepared:
            return
        if plan.auto:
            for family in FAMILIES:
                self._family_model(plan, family)
            self._prepared[plan.key] = FAMILIES
            return
        algorithm = algorithms.get(plan.algorithm)
        local = numpy.array([algorithm.unsupported_reason(self.topology, f) is None for f in FAMILIES],
                            dtype=numpy.int64)
        supported = numpy.empty_like(local)
        self.private.Allreduce(local, supported, op=MPI.MIN)  # the same families on every rank
        families = tuple(f for f, ok in zip(FAMILIES, supported) if ok)
        for collective in PARSERS:
            if family_of(collective) in families:
                self.call_plan(plan, collective)
        self._prepared[plan.key] = families

    def exact_bytes_check(self, collective: str) -> levels.ExactBytesCheck:
        """The check of ``collective``'s calls against the weights (one per collective and handle)."""
        check = self._exact_checks.get(collective)
        if check is None:
            check = self._exact_checks[collective] = levels.ExactBytesCheck(self, collective, PARSERS[collective][1])
        return check

    # -- auto ------------------------------------------------------------------------------------
    def auto_dispatch(self, plan: Plan, collective: str, native_methods: dict, sendbuf, recvbuf,
                      refused: Exception | None = None) -> AutoDispatch:
        """The dispatch of an auto plan's ``collective`` (made collectively at its first call, from
        that call's arguments). ``refused``: this call's error where the weights contradict it
        (``cdag_exact_byte_communications``), raised on every rank after the decision's allreduce
        when this call makes it, else here, on this rank alone, as the library's call would."""
        key = (plan.key, plan.rebind, collective)
        dispatch = self._dispatches.get(key)
        if dispatch is None:
            model = self._family_model(plan, family_of(collective))
            by_weights = plan.persistence.exact_bytes
            if by_weights:  # the weights are every call's bytes (checked per call)
                nbytes = levels.weight_bytes(self.topology)
                local = UNKNOWN if nbytes is None else size_class(nbytes)
            else:  # arguments this rank refuses raise on every rank, after the decision's allreduce
                local, refused = local_class_or_refusal(self, collective, sendbuf, recvbuf)
            dispatch = self._dispatches[key] = AutoDispatch(self, plan, collective, model, native_methods, local,
                                                            by_weights, refused)
            self.decided_flag(plan, collective)[0] = True
        elif refused is not None:
            raise refused
        return dispatch

    def before_decision(self, plan: Plan, collective: str, library_method):
        """What an auto plan's nonblocking calls of ``collective`` run before its dispatch exists
        (local: a nonblocking call cannot agree with the other ranks): ``library_method``, or
        ``direct``'s call where the library's nonblocking call is known to fail here, which every
        rank knows alone (:func:`~sparsecoll.model.choice.local_nonblocking_library_fault`).
        ``direct`` is built without a transformation that runs a protocol (``coloring``, which
        orders sends and changes no data), so its first call agrees on nothing."""
        if self._library_runs_undecided_calls():
            return library_method
        return self.local_direct(plan, collective)

    def _library_runs_undecided_calls(self) -> bool:
        """Whether the library's own nonblocking call is what an auto plan's nonblocking calls run
        before a decision (:meth:`before_decision`): not where every rank knows alone that it fails."""
        return local_nonblocking_library_fault(self.topology, library_name()) is None

    def local_direct(self, plan: Plan, collective: str):
        """A nonblocking call of ``direct`` with ``plan``'s options less the transformations that
        run a protocol (:func:`~sparsecoll.algorithms.without_protocol_transformations`), as a
        callable of ``(sendbuf, recvbuf)``: made and run without agreeing on anything, so a
        nonblocking call of an auto plan may run it where the library's may not run."""
        options = MappingProxyType(algorithms.without_protocol_transformations(plan.options))
        local = replace(plan.resolved("direct"), options=options, executor=execute.DEFAULT_EXECUTOR)
        assert algorithms.builds_locally(local.algorithm, local.options)
        direct = self.call_plan(local, collective)
        return partial(direct.runtime.nonblocking, direct)

    def library_allowed(self) -> bool:
        """Whether no rank's neighborhood is one the MPI library is known to fail on
        (:func:`~sparsecoll.model.choice.library_fault`); collective the first time (one allreduce),
        which every rank asks at the same call."""
        if self._library_allowed is None:
            faulty = library_fault(self.topology, library_name()) is not None
            self._library_allowed = not reductions.allreduce(self.private, faulty, op=MPI.LOR)
        return self._library_allowed

    def decided_flag(self, plan: Plan, collective: str) -> list:
        """A one-item list saying whether an auto plan's ``collective`` has its dispatch on this
        handle (local; the same object each time, so a wrapper's method can read it per call).
        Every rank makes the dispatch at the same call, so every rank reads the same at each call."""
        key = (plan.key, plan.rebind, collective)
        flag = self._decided.get(key)
        if flag is None:
            flag = self._decided[key] = [key in self._dispatches]
        return flag

    def _family_model(self, plan: Plan, family: str) -> FamilyModel:
        """An auto plan's cost model of ``family`` (made collectively the first time)."""
        model = self._family_models.get((plan.key, family))
        if model is None:
            model = self._family_models[(plan.key, family)] = FamilyModel(self, plan, family)
        return model

    def auto_dispatches(self, plan: Plan, family: str) -> list:
        """Every dispatch of ``plan``'s collectives of ``family`` (they share the family's predictions)."""
        return [d for (key, _, collective), d in self._dispatches.items()
                if key == plan.key and family_of(collective) == family]

    def call_plan(self, plan: Plan, collective: str) -> CallPlan:
        """What calls of ``collective`` run (collective the first time for this plan and family)."""
        found = self._call_plans.get((plan.key, plan.rebind, collective))
        if found is not None:
            return found
        pattern = self.pattern(plan, collective)
        key = self._pattern_key(plan, family_of(collective))
        flags = self._size_pass_flags.get(key)
        if flags is None:
            forwards = algorithms.get(plan.algorithm).forwards  # the same on every rank
            flags = self._size_pass_flags[key] = self._agree_on_size_pass(pattern) if forwards else (False, False)
        vector_needs, regular_needs = flags
        runs = self
        if plan.persistence.exact_bytes:  # its calls are checked against the weights first
            runs = levels.CheckedRuntime(self, self.exact_bytes_check(collective))
        factory = self.prepared_executor(plan.executor).factory_for(key, pattern, plan.executor_options, self.private)
        found = CallPlan(collective, key[0], pattern, regular_needs if collective in REGULAR else vector_needs,
                         plan.rebind, runs, factory)
        self._call_plans[(plan.key, plan.rebind, collective)] = found
        return found

    def prepared_executor(self, name: str):
        """The executor ``name`` prepared on this communicator (:func:`sparsecoll.execute.prepare`).

        Collective the first time for an executor that opens a window: it is reached from
        :meth:`call_plan`, whose first call for a plan every rank makes together.
        """
        prepared = self._executors.get(name)
        if prepared is None:
            prepared = self._executors[name] = execute.prepare(name, self.private)
        return prepared

    def _agree_on_size_pass(self, pattern) -> tuple:
        """Whether calls need the size pass, decided together (one allreduce per pattern; none
        for an algorithm that never forwards, whose first call then stays local).

        v/w calls need it when any rank stores an item in transit; regular calls only
        when such a rank has no block of its own to take the layout from (no edges at
        all in the alltoall family).
        """
        topology = self.topology
        transit = has_transit(pattern, topology)
        blind = transit and pattern.family == "alltoall" and not (topology.indegree or topology.outdegree)
        flags = reductions.allreduce(self.private, int(transit) | 2 * int(blind), op=MPI.BOR)
        return bool(flags & 1), bool(flags & 2)

    # -- arguments --------------------------------------------------------------------------
    def parse(self, collective: str, sendbuf, recvbuf):
        """``(send Blocks, recv Blocks, layout)``: the buffer arguments checked and parsed.

        ``layout`` is a small integer naming the memory and layout of both arguments (equal
        layouts get equal numbers while they are remembered), the cheap half of every cache
        key. Parsing costs several times the MPI call itself, so the result is kept for the
        next call: for two plain arrays, or two ``[array, count, datatype]`` specs
        (:func:`.caches.simple_spec`), by the arrays' identity and layout and the specs' values
        (:meth:`.caches.ParseCache.recall_arrays`), else where both arguments have a cheap
        signature (:func:`.caches.call_signature`).
        """
        if type(sendbuf) is _ndarray and type(recvbuf) is _ndarray:  # the usual call
            parsed = self._parsed.recall_arrays(collective, sendbuf, recvbuf)
            if parsed is None:
                send, recv = self.parse_uncached(collective, sendbuf, recvbuf)
                parsed = send, recv, self._layout_number((send.key(), recv.key()))
                self._parsed.keep_arrays(collective, sendbuf, recvbuf, parsed)
            return parsed
        send_spec, recv_spec = simple_spec(sendbuf), simple_spec(recvbuf)
        if send_spec is not None and recv_spec is not None:  # [array, count, datatype] both
            extra = (send_spec[1:], recv_spec[1:])
            parsed = self._parsed.recall_arrays(collective, send_spec[0], recv_spec[0], extra)
            if parsed is None:
                send, recv = self.parse_uncached(collective, sendbuf, recvbuf)
                parsed = send, recv, self._layout_number((send.key(), recv.key()))
                self._parsed.keep_arrays(collective, send_spec[0], recv_spec[0], parsed, extra)
            return parsed
        signature = call_signature(sendbuf, recvbuf)
        if signature is not None:
            signature = (collective, signature)
            parsed = self._parsed.recall(signature, sendbuf, recvbuf)
            if parsed is not None:
                return parsed
        send, recv = self.parse_uncached(collective, sendbuf, recvbuf)
        parsed = send, recv, self._layout_number((send.key(), recv.key()))
        if signature is not None:
            self._parsed.keep(signature, sendbuf, recvbuf, parsed)
        return parsed

    def _layout_number(self, layout: tuple) -> int:
        number = self._layouts.recall(layout)
        if number is None:
            self._layouts_made += 1
            number = self._layouts_made  # never reused: a forgotten layout comes back as a new one
            self._layouts.keep(layout, number)
        return number

    def parse_uncached(self, collective: str, sendbuf, recvbuf):
        """``(send Blocks, recv Blocks)`` of one call's buffer arguments."""
        topology = self.topology
        for buf, arg in ((sendbuf, "sendbuf"), (recvbuf, "recvbuf")):
            if buf is MPI.IN_PLACE:  # (mpi4py passes it on; the libraries then move nothing)
                raise ValueError(f"{arg}: MPI.IN_PLACE is not meaningful in Neighbor_{collective} (MPI standard)")
        send_parser, per_edge, recv_parser = PARSERS[collective]
        send = send_parser(sendbuf, topology.outdegree if per_edge else 1, readonly=True, arg="sendbuf")
        recv = recv_parser(recvbuf, topology.indegree, readonly=False, arg="recvbuf")
        if collective in REGULAR:
            check_regular_blocks(send, recv, collective)
        return send, recv

    # -- binding (Phase 2 of HiPC 2017) ----------------------------------------------------------
    def bind(self, call: CallPlan, send: Blocks, recv: Blocks, sizes=None):
        """The Schedule of one call: the Pattern bound to these buffers.

        ``sizes`` are the item sizes of the call's size pass where the call plan needs one
        (:meth:`run_size_pass`).
        """
        # An item stored by a rank that does not know its datatype is kept as ``MPI_PACKED``
        # bytes, the one type MPI lets match any other on both ends (a receive typed ``MPI_BYTE``
        # of data sent as doubles is erroneous, MPI-4.1 section 3.3.1, example 3.2), so its origin
        # and its final receiver keep the program's datatype and nothing is packed by hand.
        # Where a relaying rank holds items as bytes, a relayed item is received as bytes too
        # unless every element of its message has one size (bind's ``relayed_as_bytes``).
        transit_size = relayed_as_bytes = None
        if sizes is not None:  # v/w: relaying ranks hold bytes; the size pass says each item's elements
            transit_size = lambda item: (sizes[item][0], MPI.PACKED)  # noqa: E731

            def relayed_as_bytes(message) -> bool:
                elements = {sizes[item][1] for item in message.items}
                return len(elements) > 1 or 0 in elements
        elif call.collective in REGULAR:
            # regular collectives: a block in transit is stored like a local receive block, or where
            # this rank receives nothing as packed bytes (a send datatype may name one element twice,
            # which a receive through it would write over: MPI forbids that of receive datatypes only);
            # every block has the call's one type signature, so only one that mixes sizes needs care
            if len(recv):
                block_layout = (recv.counts[0], recv.types[0])
            elif len(send):
                block_layout = (send.counts[0] * send.types[0].Get_size(), MPI.PACKED)
            if len(recv) or len(send):
                transit_size = lambda item: block_layout  # noqa: E731
            mixes_sizes = cache(partial(mixes_basic_types, recv if len(recv) else send))  # at the first relayed item
            relayed_as_bytes = lambda message: mixes_sizes()  # noqa: E731
        with ENGINE.lock:  # the progress thread binds too (size-passed nonblocking calls)
            self.schedules_bound += 1
        return bind(call.pattern, self.topology, send, recv, transit_size, relayed_as_bytes)

    def _schedule(self, call: CallPlan, send, recv, key, sizes):
        """The bound Schedule of a call: from the cache, or bound now and cached."""
        with ENGINE.lock:
            schedule = self._schedules.recall(key)
            if schedule is None:
                schedule = self.bind(call, send, recv, sizes)
                self._schedules.keep(key, schedule)
            return schedule

    def _size_pass(self, call: CallPlan, send: Blocks, tag: int):
        """``(executor, read)`` of the size pass: the Pattern run on two int64 per item.

        An intermediate rank cannot know the size of an item it only forwards, so the
        call's Pattern runs first on the byte size of each item at its origin and the size of
        its basic elements (:func:`~sparsecoll.buffers.element_size`); ``read()`` then gives
        ``{item: (bytes, element size)}`` of every item this rank receives. It runs on every
        call whose call plan needs it (a decision all ranks share); a persistent request
        pays it once, at init.
        """
        topology = self.topology
        fields = SIZE_PASS_ITEM_BYTES // 8  # int64 per item
        elements = {key: element_size(t) for key, t in {id(t): t for t in send.types}.items()}  # 0: mixed
        own = numpy.array([(c * t.Get_size(), elements[id(t)]) for c, t in zip(send.counts, send.types)],
                          dtype=numpy.int64).reshape(-1, fields)
        arrived = numpy.zeros((max(topology.indegree, 1), fields), dtype=numpy.int64)
        send_sizes = Blocks(own.ctypes.data, (fields,) * len(own),
                            tuple(SIZE_PASS_ITEM_BYTES * k for k in range(len(own))), (MPI.INT64_T,) * len(own))
        recv_sizes = Blocks(arrived.ctypes.data, (fields,) * topology.indegree,
                            tuple(SIZE_PASS_ITEM_BYTES * k for k in range(topology.indegree)),
                            (MPI.INT64_T,) * topology.indegree)
        schedule = bind(call.pattern, topology, send_sizes, recv_sizes, lambda item: (fields, MPI.INT64_T))
        executor = StepExecutor(self.private, schedule, tag)

        def read() -> dict:
            keep = (own, arrived)  # noqa: F841  (the arrays live until the sizes are read)
            return {item: tuple(ctypes.c_int64.from_address(piece[0] + 8 * k).value for k in range(fields))
                    for item, piece in schedule.received.items()}
        return executor, read

    def run_size_pass(self, call: CallPlan, send: Blocks, tag: int = BLOCKING_CHANNEL) -> dict:
        """Run the size pass now (blocking) and return ``{item: (bytes, element size)}``."""
        executor, read = self._size_pass(call, send, tag)
        try:
            run_stages(executor.steps)
            return read()
        finally:
            executor.free()

    # -- the phases apart (the benchmark's Phase 1 and Phase 2 of HiPC 2017) -------------------------
    def build_uncached(self, plan: Plan, collective: str):
        """Build ``plan``'s Pattern for ``collective`` anew, not cached (collective for protocols)."""
        family = family_of(collective)
        name = self._pattern_key(plan, family)[0]
        return algorithms.build_pattern(name, self.topology, self.private, dict(plan.options), family)

    def bind_uncached(self, plan: Plan, collective: str, sendbuf, recvbuf):
        """One call's Schedule made from scratch: parse, size pass where needed (collective), bind."""
        return self._bound_uncached(self.call_plan(plan, collective), sendbuf, recvbuf)

    def _bound_uncached(self, call: CallPlan, sendbuf, recvbuf):
        send, recv = self.parse_uncached(call.collective, sendbuf, recvbuf)
        sizes = self.run_size_pass(call, send) if call.size_pass else None
        return self.bind(call, send, recv, sizes)

    def call_requests(self, plan: Plan, collective: str, schedule):
        """The persistent requests and datatypes a call of ``plan``'s ``collective`` makes for
        ``schedule`` (its executor with the plan's executor options; never started: ``.free()`` them)."""
        return self.call_plan(plan, collective).make_executor(self.private, schedule, BLOCKING_CHANNEL)

    def requests_for(self, schedule, executor: str = execute.DEFAULT_EXECUTOR):
        """The persistent requests and datatypes a call of ``executor`` (a name of
        :data:`sparsecoll.execute.EXECUTORS`) makes for ``schedule`` (never started; ``.free()`` them)."""
        return self.prepared_executor(executor).factory(self.private, schedule, BLOCKING_CHANNEL)

    # -- calls ----------------------------------------------------------------------------------
    def blocking(self, call: CallPlan, sendbuf, recvbuf) -> None:
        """A blocking collective call on channel 0."""
        key = self._last_arrays.recall(call, sendbuf, recvbuf)  # the usual call: the last one's arrays
        if key is not None:
            executor = self._blocking.recall(key)
            if executor is not None:
                run_stages(executor.steps)
                return
        send, recv, layout = self.parse(call.collective, sendbuf, recvbuf)
        sizes = self.run_size_pass(call, send) if call.size_pass else None
        if call.rebind:  # non-persistent mode: bind on every call
            self._run_once(call, self.bind(call, send, recv, sizes))
            return
        key = _call_key(call, layout, sizes)
        executor = self._blocking.recall(key)
        if executor is None:
            executor = call.make_executor(self.private, self._schedule(call, send, recv, key, sizes), BLOCKING_CHANNEL)
            self._blocking.keep(key, executor)
        if sizes is None and type(sendbuf) is _ndarray and type(recvbuf) is _ndarray:
            self._last_arrays.keep(call, sendbuf, recvbuf, key)
        run_stages(executor.steps)

    def run_uncached(self, call: CallPlan, sendbuf, recvbuf) -> None:
        """A blocking call whose buffers are temporary: parse, bind, run, free (nothing cached)."""
        self._run_once(call, self._bound_uncached(call, sendbuf, recvbuf))

    def _run_once(self, call: CallPlan, schedule) -> None:
        executor = call.make_executor(self.private, schedule, BLOCKING_CHANNEL)
        try:
            run_stages(executor.steps)
        finally:
            executor.free()

    def nonblocking(self, call: CallPlan, sendbuf, recvbuf) -> ScheduleRequest:
        """A nonblocking call on the next nonblocking channel; returns its started request."""
        key = self._last_arrays.recall(call, sendbuf, recvbuf)  # the usual call: the last one's arrays
        send = None  # parsed below where the key is not known or no idle executor has it
        if key is None:
            send, recv, layout = self.parse(call.collective, sendbuf, recvbuf)
            if not (call.size_pass or call.rebind):
                key = _call_key(call, layout, None)
                if type(sendbuf) is _ndarray and type(recvbuf) is _ndarray:
                    self._last_arrays.keep(call, sendbuf, recvbuf, key)
        channels = self.channels
        channel = channels.take_nonblocking()  # before the lock: it may wait for the channel's last call
        if key is not None:  # the idle executor of this layout and channel
            pool = self._idle.recall(key)
            executor = pool.pop(channel, None) if pool is not None else None
            if executor is not None:  # taken without the engine's lock (see _park)
                request = _PooledRequest(executor, self, key, pool, channel, (sendbuf, recvbuf))
                channels.hold_nonblocking(channel, request)
                request._start()
                return request
        if send is None:
            send, recv, layout = self.parse(call.collective, sendbuf, recvbuf)
        with ENGINE.lock:
            if call.size_pass:
                request = self._sized_request(call, send, recv, layout, channel, (sendbuf, recvbuf))
            elif call.rebind:
                request = self._rebound_request(call, send, recv, channel, (sendbuf, recvbuf))
            else:  # a new executor, in the pool of this layout (made now if need be)
                idle = self._idle
                pool = idle.recall(key)
                if pool is None:
                    pool = {}
                    idle.keep(key, pool)
                executor = call.make_executor(self.private, self._schedule(call, send, recv, key, None), channel)
                request = _PooledRequest(executor, self, key, pool, channel, (sendbuf, recvbuf))
            channels.hold_nonblocking(channel, request)
        request._start()
        return request

    def _rebound_request(self, call, send, recv, channel, keep) -> ScheduleRequest:
        """A call of a rebinding wrapper: bound now, its executor freed once it completes."""
        executor = call.make_executor(self.private, self.bind(call, send, recv), channel)
        channels = self.channels

        def done(request):
            executor.free()
            channels.release_nonblocking(channel, request)  # last: it may release the communicator
        return _request_for(executor, persistent=False, on_complete=done, keep=keep)

    def _sized_request(self, call, send, recv, layout, channel, keep) -> ScheduleRequest:
        """A v/w call that needs the size pass: size pass, bind, data, all advanced by the engine.

        Its data schedule is bound once the sizes arrive, after the call returned: derived
        datatypes are duplicated first (the program may free its own meanwhile,
        :func:`~sparsecoll.buffers.with_own_datatypes`), and such a schedule is bound for
        this call alone (a cached one would outlive the duplicates)."""
        send, recv, duplicates = with_own_datatypes(send, recv)

        def program():
            # an executor whose runs are ordered by call (RMA epochs) reserves its turn now
            reserve = getattr(call.make_executor, "reserve", None)
            ticket = reserve() if reserve is not None else None
            try:
                sizes_executor, read = self._size_pass(call, send, channel)
                try:
                    yield from sizes_executor.steps
                    sizes = read()
                finally:
                    sizes_executor.free()
                if call.rebind or duplicates:
                    schedule = self.bind(call, send, recv, sizes)
                else:
                    schedule = self._schedule(call, send, recv, _call_key(call, layout, sizes), sizes)
                executor = call.make_executor(self.private, schedule, channel)
                if ticket is not None and executor.use_ticket(ticket):
                    ticket = None
            except BaseException:
                _free_all(duplicates)
                raise
            finally:
                if ticket is not None:
                    call.make_executor.release(ticket)
            try:
                yield from executor.steps
            finally:
                executor.free()
                _free_all(duplicates)

        channels = self.channels
        return ScheduleRequest(program, persistent=False, keep=keep,
                               on_complete=lambda request: channels.release_nonblocking(channel, request))

    def _park(self, key, pool: dict, channel: int, executor) -> None:
        """Keep the executor of a completed nonblocking call for the next call of ``key`` on ``channel``.

        ``pool`` is the one the call took the executor from; if it was dropped since (evicted,
        ``release_caches``, the communicator freed while the call ran) the executor is freed.
        Pools are used without the engine's lock (the usual call pops from one, :meth:`nonblocking`):
        every step on a pool is one dict operation, so each executor has one owner at a time, the
        pool or one call (:func:`_free_pool` too takes each one out before freeing it).
        """
        if self._idle.get(key) is not pool:
            executor.free()
            return
        earlier = pool.pop(channel, None)  # one step: a call on another thread may pop the channel's executor
        pool[channel] = executor
        if earlier is not None and earlier is not executor:
            earlier.free()

    def persistent(self, call: CallPlan, sendbuf, recvbuf, info=None) -> ScheduleRequest:
        """A persistent request (``*_init``): size pass now if needed, bound once, own channel.

        ``info`` (the ``*_init`` argument, checked by the interface) is not used by sparsecoll's executors."""
        send, recv, _ = self.parse(call.collective, sendbuf, recvbuf)
        sizes = self.run_size_pass(call, send) if call.size_pass else None
        schedule = self.bind(call, send, recv, sizes)
        factory, release_window = call.make_executor, None
        own_window = getattr(factory, "for_persistent_request", None)
        if own_window is not None:  # RMA: starts need no common order (:class:`.execute.rma.RequestWindows`)
            factory, release_window = own_window(self.private)
        channel = self.channels.take_persistent()
        executor = factory(self.private, schedule, channel)
        channels = self.channels

        def freed(request):
            executor.free()
            if release_window is not None:
                release_window()
            channels.release_persistent(channel)  # last: it may release the communicator
        request = _request_for(executor, persistent=True, on_free=freed, keep=(sendbuf, recvbuf))
        channels.hold_persistent(channel, request)
        return request

    def communicators(self) -> list:
        """The communicators this runtime made for the handle (the private duplicate and its channel
        to self): what the handle's error handler must reach (local)."""
        if self.private == MPI.COMM_NULL:
            return []
        channel = self_channel(self.private)
        return [self.private] + ([channel] if channel is not None else [])

    def cache_sizes(self) -> dict:
        """How many entries each local cache holds now."""
        return {"parsed": len(self._parsed), "schedules": len(self._schedules),
                "blocking_executors": len(self._blocking),
                "idle_executors": sum(len(pool) for pool in self._idle.values())}

    # -- lifetime -----------------------------------------------------------------------------------
    def release_caches(self) -> None:
        """Drop parsed arguments, bound schedules and idle executors (local; patterns stay)."""
        with ENGINE.lock:
            self._parsed.clear()
            self._last_arrays.clear()
            self._layouts.clear()
            self._schedules.clear()
            self._blocking.drop_all()
            self._idle.drop_all()

    def free(self) -> None:
        """Release everything, the private communicator included, once no request uses it: a
        nonblocking call in flight or a persistent request completes normally after its
        communicator was freed (MPI-4.1 section 7.4.3), so its release waits for the last of them."""
        self.channels.when_idle(self._release)

    def _release(self) -> None:
        self.release_caches()
        for prepared in self._executors.values():
            prepared.close()
        self._executors.clear()
        self.patterns.clear()
        self._call_plans.clear()
        self._dispatches.clear()
        self._family_models.clear()
        self._exact_checks.clear()
        if self.private != MPI.COMM_NULL:
            self.private.Free()


def _free_all(datatypes) -> None:
    """Free the datatypes sparsecoll made for itself."""
    for datatype in datatypes:
        datatype.Free()


def _call_key(call: CallPlan, layout: int, sizes) -> tuple:
    """The cache key of a call: its CallPlan, its layout number and the sizes of its size pass."""
    return (call, layout) if sizes is None else (call, layout, tuple(sizes.values()))


def _plain(comm: MPI.Comm) -> MPI.Comm:
    """``comm``'s handle as an object of its mpi4py class (a wrapper's ``Dup`` would wrap the copy)."""
    for cls in type(comm).__mro__:
        if cls.__module__ == "mpi4py.MPI":
            return cls(comm)
    raise TypeError(f"comm: expected an mpi4py communicator, got {type(comm).__name__}")


def _request_for(executor, *, persistent: bool, **kwargs) -> ScheduleRequest:
    """A request running ``executor``'s steps (one step: handled by MPI alone, bypassing the engine);
    a :class:`PersistentRequest` for a persistent call."""
    steps = executor.steps
    single = single_stage(steps)
    cls = PersistentRequest if persistent else ScheduleRequest
    if single is not None:
        return cls(single=single, persistent=persistent, **kwargs)
    return cls(lambda: steps, persistent=persistent, **kwargs)


class _PooledRequest(ScheduleRequest):
    """A nonblocking call running an executor of the idle pool: completing it releases its
    channel and parks the executor for the next call of the same layout on that channel."""

    __slots__ = ("_runtime", "_key", "_pool", "_channel", "_executor")

    def __init__(self, executor, runtime: CommRuntime, key, pool: dict, channel: int, keep):
        steps = executor.steps
        single = single_stage(steps)
        # ScheduleRequest's fields, set here: this runs on every pooled call
        self._program = None if single is not None else (lambda: steps)
        self._single = single
        self._stages = self._current = self._error = self._on_complete = self._on_free = None
        self._state = INACTIVE
        self._persistent = False
        self._keep = keep
        self._runtime = runtime
        self._key = key
        self._pool = pool
        self._channel = channel
        self._executor = executor

    def _complete(self) -> None:
        runtime = self._runtime
        if runtime is None:
            ScheduleRequest._complete(self)
            return
        self._runtime = None
        runtime._park(self._key, self._pool, self._channel, self._executor)
        runtime.channels.release_nonblocking(self._channel, self)  # last: it may release the communicator
        self._key = self._pool = self._executor = None
        # ScheduleRequest._complete and _release of a nonblocking request without callbacks
        error, self._error = self._error, None
        self._state = FREED
        self._program = self._single = self._keep = None
        if error is not None:
            raise error


def _free_pool(pool: dict) -> None:
    """Free the idle executors of a pool, each taken out first: a call on another thread that
    popped one meanwhile owns it (and frees it itself once :meth:`CommRuntime._park` finds the pool gone)."""
    while pool:
        try:
            executor = pool.popitem()[1]
        except KeyError:  # emptied meanwhile
            return
        executor.free()


def _delete_runtime(comm, keyval, runtime):
    runtime.free()


_RUNTIME_KEYVAL = MPI.Comm.Create_keyval(delete_fn=_delete_runtime)


def runtime_of(comm: MPI.Comm, topology: Topology | None = None,
               pending: PendingPrivate | None = None) -> CommRuntime:
    """The runtime of a handle, created on first use: collectively (it duplicates the handle), or
    locally from ``pending``, a private copy started when the handle was made by ``Idup``."""
    runtime = comm.Get_attr(_RUNTIME_KEYVAL)
    if runtime is None:
        runtime = CommRuntime(comm, topology, None if pending is None else pending.take())
        comm.Set_attr(_RUNTIME_KEYVAL, runtime)
    elif pending is not None:
        pending.drop()
    return runtime


class PendingPrivate:
    """The private communicator of a handle made by ``Idup``, duplicated (``Idup``, on the parent,
    at the same point on every rank) when the handle was, so that its runtime is made without
    communicating whenever a rank first needs it (a local query included). Completed at exit
    where no one took it: MPI wants every request complete before ``MPI_Finalize``."""

    _open: set = set()
    _registered = False

    def __init__(self, parent: MPI.Comm):
        self._comm, self._request = _plain(parent).Idup()
        PendingPrivate._open.add(self)
        if not PendingPrivate._registered:
            PendingPrivate._registered = True
            atexit.register(PendingPrivate._complete_all)

    def take(self) -> MPI.Comm:
        """The private communicator (waits for its duplication, which every rank started)."""
        self._request.Wait()
        PendingPrivate._open.discard(self)
        return self._comm

    def drop(self) -> None:
        """Complete and free it (the handle is freed, or has a runtime already)."""
        self.take().Free()

    @staticmethod
    def _complete_all() -> None:
        if not MPI.Is_finalized():
            for pending in list(PendingPrivate._open):
                pending.take()


def release_runtime(comm: MPI.Comm) -> None:
    """Release the handle's runtime now, before the handle is freed (collective, as ``Free``): its
    attribute is deleted, which runs the delete callback at once. Left to the handle's ``MPI_Comm_free``,
    MPICH 5.0.2 runs that callback only when the last pending operation on the handle completes
    (a receive of the program's, a call ``auto`` gave the library), inside its ``MPI_Wait``, where the
    runtime's own MPI calls abort ("pthread_mutex_lock: Resource deadlock avoided")."""
    if existing_runtime(comm) is not None:
        comm.Delete_attr(_RUNTIME_KEYVAL)


def existing_runtime(comm: MPI.Comm):
    """The runtime of a handle if one was made (local), else None."""
    return comm.Get_attr(_RUNTIME_KEYVAL)
