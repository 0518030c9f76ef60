"""``algorithm="auto"``: per call, the algorithm the cost model predicts fastest, ``native`` included.

One :class:`AutoDispatch` per handle, auto plan and collective runs that collective's calls.
What it decides changes the wire, so every decision comes from numbers all ranks share
(invariant (a) of :mod:`sparsecoll.runtime`):

* **At the first call** of the collective (a collective event: every rank makes it), every
  rank predicts each candidate's time on its own Pattern with its profile
  (:mod:`sparsecoll.model.choice`), and one ``MPI.MAX`` allreduce gives every rank the
  slowest rank's prediction per candidate, form and block-size class, plus the range of
  the block-size classes the ranks passed. :func:`sparsecoll.model.choice.decide` turns
  those into one table per form: size class -> algorithm, identical on every rank.
* **Per call**: regular forms (``allgather``, ``alltoall``) look up the class of the call's
  block size when the first call showed every rank passing the same block size (MPI-4.1
  section 8.6.1 requires it of every call of the regular forms: a process's send block has
  the type signature of the receive blocks at all other processes, whether the graph is
  connected or not, so a graph of parts that exchange nothing still passes one size, and
  :func:`sparsecoll.buffers.check_regular_blocks` rejects a rank whose send and receive
  blocks differ). Otherwise (a rank without blocks, or ranks that passed different sizes), and
  for the v/w forms whose sizes differ per
  edge, the collective is *pinned*: every blocking and nonblocking call uses the class agreed
  at the first call (the largest over ranks), and runs that class's choice whatever its size, so
  there a candidate replaces ``native`` only where it is predicted at most
  :data:`~sparsecoll.model.choice.PINNED_ALLOWANCE` times native's time at every class
  (:func:`~sparsecoll.model.choice.safe_at_every_size`); a persistent request agrees its own
  class at its init (one allreduce: :meth:`AutoDispatch._request_class`). A form whose table
  says ``native`` for every class it can be called with goes straight to the library (the
  wrapper then calls the library's method itself, with no sparsecoll code on the path:
  :func:`wrapper_methods`, which the wrapper installs).
  A form whose table says ``native`` for every class below some size gets a shortcut: a
  call that receives fewer bytes than that (a plain numpy array's, or a buffer spec's blocks)
  goes to the library after one comparison (:attr:`AutoDispatch.library_below`), since parsing the arguments to find the
  class costs a microsecond, which several ranks per core turn into tens. Even that comparison
  costs 0.1-0.25 us, which 8 ranks on 2 cores turn into 3-9 us (1.155 x Open MPI's 8 B Moore
  allgather before it was trimmed; :func:`library_shortcut`); where the profile's
  ``native.shortcut`` (the slowest rank's, agreed in the first call's allreduce) exceeds
  :data:`~sparsecoll.model.choice.SHORTCUT_ALLOWANCE` of the library's call at a class the
  table leaves to it, the form's table becomes ``native`` at every size
  (:func:`~sparsecoll.model.choice.keep_the_library_whole`): a win at some sizes is not bought
  with a loss at the others.
* **Protocol candidates** (``common_neighbor``, ``distance_halving``, ``node_aware``) are predicted from an
  estimate until built. Where one is predicted to win, the call runs the best built
  candidate until the collective has been called :data:`REPEATS` times with that size
  class, or for a persistent request; then the Pattern is built (collectively), charged on
  its real messages (one more allreduce), and the tables of its family are decided again.
  ``REPEATS = 8``: the build is a protocol of several rounds, each as costly as a few calls,
  so it pays only in a loop; a signature seen 8 times is a loop, not set-up. A nonblocking
  call never builds nor sets up anything collectively (MPI's nonblocking calls are local): it
  runs the table's choice once a blocking or persistent call has set it up, the library's call
  until then, or, where the library's may not run, ``direct`` set up locally
  (:meth:`AutoDispatch._local_choice`). ``loggp_tree``
  has no estimate and is not a candidate (:mod:`sparsecoll.model.choice` says why).
* **Exact bytes** (``cdag_exact_byte_communications``, :mod:`.persistence`): the weights are
  every call's bytes, so the first call's class comes from the weights (the mean out-edge
  weight, else in-edge weight), not from the call, and every call is pinned to the largest
  class over ranks: calls never look at their block size (the check against the weights
  runs before, on every call), persistent requests included, and since no call has another
  size, no candidate is kept from that class for its predictions at others.
* **Online check of blocking calls** (on by default; ``verify_choice=False`` turns it off): the
  first blocking calls of a class whose choice is not ``native`` alternate the choice and
  ``native``, :data:`CHECK_WARMUP` pairs untimed, then :data:`TRIALS` pairs timed; one
  allreduce takes each timed call's time to the slowest rank's, and the class switches to
  ``native`` for good unless the median of the choice's calls is at most :data:`CHECK_WIN`
  times native's (a tie goes to the library: on the 2-core VM Open MPI's 64 KiB blocking
  allgathers ran `distance_halving` at 0.99-1.01 x the library's call, and 5 pairs let it
  through, at 1.07 x in auto's column, in the twentieth run). It only ever moves
  a class to the library, so at worst it costs a win. The verdict is a decision: the tables are
  decided again at that call, and every wrapper of the dispatch puts its methods in place again
  (:meth:`AutoDispatch.on_decision`), so a form the library now runs at every size calls its
  method itself. It is on by default because the model's
  inputs are measured in ``calibrate``'s program, not the user's: on the 16-core machine
  (``benchmarks/16core/README.md``, run c) MPICH's blocking 8 and 256 B alltoalls on the
  stencil and Moore neighborhoods ran `cartesian` at 0.78-0.92 x the library's call in the
  bench with every algorithm (and in ``calibrate``, 0.85 x), but at 1.08-1.20 x in a program
  calling only the library and auto. Its cost is once per size class: :data:`CHECK_CALLS` / 2
  calls of the library's and one allreduce. Nonblocking calls are not checked (their time
  ends in the user's ``Wait``).
* **Online check of a persistent request** (on by default for the model's choice;
  ``verify_choice=True`` also for its near misses; ``False`` turns it off): a persistent request
  is made to be started many times. Where the model chose a candidate (and, with
  ``verify_choice=True``, where it kept ``native`` while a built candidate is predicted at most
  :data:`TRIAL_BAND` times native's time), the init makes both requests on the user's buffers
  and returns a :class:`~.online_check.CheckedRequest`: its first starts alternate the two,
  :data:`CHECK_WARMUP` pairs untimed, then :data:`PERSISTENT_TRIALS` pairs timed (each run's time
  is what the caller spends in its ``Start`` and its ``Test``/``Wait`` calls); the next start
  sends those times to every other rank on a tag of the request's own (their maximum over ranks:
  MPI lets ranks start persistent requests in different orders, so not an allreduce, whose order
  on the communicator would be the starts'), which that run's completion waits for, and the
  request keeps the candidate if the median of its maxima is at most :data:`PERSISTENT_CHECK_WIN`
  times native's, else the library's request. The verdict is kept for the size class at the first init
  or decision of this collective after every rank posted it (every rank makes those calls in the
  same order; one allreduce there agrees which verdicts every rank has posted, as a start need not
  come on the same side of an init on every rank, and they are applied in the order the requests
  were made), so later requests of the class take it unchecked. By default only a choice that is
  not ``native`` is checked, so it only ever moves a class to the library: on the 2-core VM
  (``benchmarks/auto/README.md``, eighteenth run) Open MPI's 64 KiB persistent allgathers on the stencil and Moore
  neighborhoods ran the model's `cartesian` at 1.25 and 1.60 x the library's call. The check
  replaced a trial at the init, on scratch copies of the buffers, started in a burst: in the
  bench's process it accepted `distance_halving` for Open MPI's 64 KiB persistent allgathers
  that then ran at 1.08-1.16 x native (twentieth stop), and on the 16-core machine
  (``benchmarks/16core/README.md``) its near-miss winners ran at 1.04 and 1.10 x native in a
  bench of native and auto alone.

Counts and trials are indexed by (collective, size class), which every rank passes
through in the same order under the rule above, so the collective steps they trigger
happen on every rank at the same call.
"""

from __future__ import annotations

import math
import time
from functools import partial

import numpy
from mpi4py import MPI

from ..buffers import buffer_object
from ..model import choice as model
from ..model.profile import FORMS, library_name, ranks_per_core, ranks_per_node
from ..pattern import REGULAR
from ..topology.placement import node_cores
from ..topology.placement import resolve as resolve_placement
from .online_check import CheckedRequest, Verdict, choice_wins

#: Calls of one (collective, size class) after which a predicted-winning protocol candidate is built.
REPEATS = 8
#: Sizes per form whose runner a settled method keeps (one more: it forgets them all and starts over).
MAX_KEPT_SIZES = 64
#: Pairs of (choice, native) blocking calls timed by the online check per size class. 8 ranks
#: on 2 cores spread one call's time over 0.8-1.8 x its median (a persistent 64 KiB allgather's
#: 40 runs in the twentieth VM run: 400-950 us, median 540), so the ratio of two medians of n
#: calls each varies by about 0.5 / sqrt(n): 5 pairs let ties through half the time.
TRIALS = 20
#: Pairs of the online check run before those, untimed: a choice's first calls in a process run
#: its Python code cold (on the 2-core VM, 2 ranks, 8 B: 350, 20, 10, then 7-8 us against the
#: library's 13-15), which made the check send ``direct`` at half the library's time to the library
#: on the 16-core machine.
CHECK_WARMUP = 3
#: Blocking calls of one size class the online check runs.
CHECK_CALLS = 2 * (CHECK_WARMUP + TRIALS)
#: Pairs of (choice, native) runs timed by the online check of a persistent request (after
#: :data:`CHECK_WARMUP` pairs untimed): a persistent request runs for long, so its check takes
#: twice the blocking check's samples. (In the twentieth VM run, 10 pairs let MPICH's 64 KiB
#: persistent allgather on the stencil take `distance_halving`, 1.05 x native in the bench, and
#: 20 pairs Open MPI's on the Moore neighborhood, 1.105 x.)
PERSISTENT_TRIALS = 40
#: A built candidate predicted at most this times native's time is checked against it in a persistent request.
TRIAL_BAND = 1.0
#: A checked choice keeps its class's blocking calls if the median of its measured times is at
#: most this times native's.
CHECK_WIN = 0.95
#: A checked choice keeps its persistent request if the median of its measured times is at most
#: this times native's. Stricter than the blocking check's: on the 2-core VM
#: (``benchmarks/auto/README.md``, twenty-first to twenty-ninth runs) the persistent checks a
#: choice passed between 0.90 and 0.95 x ran at 0.975-1.064 x the library in the bench that
#: followed (five: median 0.99, Open MPI's Moore 64 KiB allgather 1.064 at 0.949 in its check),
#: those passed at 0.90 or less at 0.912-0.995 x; blocking checks passed at 0.78-0.94 x ran at
#: 0.83-0.98 x.
PERSISTENT_CHECK_WIN = 0.9
LAST_CLASS = model.CLASSES - 1
#: What a nonblocking call runs where neither its choice (not set up) nor the library's call may
#: run: ``direct`` without transformations that run a protocol
#: (:meth:`sparsecoll.runtime.communicator.CommRuntime.local_direct`).
LOCAL_DIRECT = "direct, set up locally"
UNKNOWN = -1  # a rank that cannot tell the block size of a regular call (no edge in the alltoall family)


def quick_size_class(recvbuf, indegree: int) -> int:
    """The size class of a regular call with ``indegree`` receive blocks read without a parse, or -1.

    A plain C-contiguous numpy receive array is split evenly over the in-edges (mpi4py's rule for
    a buffer without a count), so its block is ``nbytes // indegree``; a buffer spec's block is
    :func:`spec_block_bytes`. Anything else (other specs, an uneven split, which the parse
    rejects, no in-edges) gives -1: the caller parses. (The runtime parses the call once more to
    run it, and a second parse per call cost 1-3 us here.) A spec whose buffer is too small for
    its count fails in whichever call runs it."""
    if indegree:
        kind = type(recvbuf)
        if kind is numpy.ndarray:
            nbytes = recvbuf.nbytes
            if not nbytes % indegree and recvbuf.flags.c_contiguous:
                return min((nbytes // indegree).bit_length(), LAST_CLASS)  # model.size_class, inlined
        elif kind is list or kind is tuple:
            nbytes = spec_block_bytes(recvbuf, indegree)
            if nbytes >= 0:
                return min(nbytes.bit_length(), LAST_CLASS)
    return -1


def spec_block_bytes(spec, indegree: int) -> int:
    """The bytes of one of ``indegree`` receive blocks of a buffer spec read without a parse, or -1.

    ``[buffer, count, datatype]``: ``count`` x the datatype's size. ``[array, datatype]`` (a numpy
    array): mpi4py splits the array's extents evenly over the in-edges, so ``nbytes // (extent x
    indegree)`` datatypes a block, where that split is even. Any other spec, a negative count, or
    a datatype whose size cannot be read (``DATATYPE_NULL``, freed) gives -1: the parse then
    names the fault."""
    try:
        if len(spec) == 3 and type(spec[1]) is int and type(spec[2]) is MPI.Datatype and spec[1] >= 0:
            return spec[1] * spec[2].Get_size()
        if len(spec) == 2 and type(spec[0]) is numpy.ndarray and type(spec[1]) is MPI.Datatype and indegree:
            array, datatype = spec
            per_edge = datatype.extent * indegree
            if per_edge > 0 and not array.nbytes % per_edge and array.flags.c_contiguous:
                return array.nbytes // per_edge * datatype.size
    except MPI.Exception:
        pass
    return -1


class FamilyModel:
    """The predictions of one auto plan for one family on one handle (shared by its collectives)."""

    def __init__(self, runtime, plan, family: str):
        self.runtime, self.plan, self.family = runtime, plan, family
        self.profile = plan.profile
        placement_info = resolve_placement(runtime.private, plan.options.get("ranks_per_socket"),
                                           plan.options.get("sockets_per_node"))  # collective
        self.placement = placement_info.placement
        size = runtime.private.Get_size()
        self.ranks_per_core = ranks_per_core(size, self.placement, node_cores(runtime.private))  # collective
        self.load = self.profile.load_for(self.ranks_per_core, ranks_per_node(size, self.placement))
        self.fault = model.library_fault(runtime.topology, library_name())  # this rank's, agreed at first call
        self.patterns: dict = {}
        self.costs = model.local_costs(runtime.topology, family, dict(plan.options), self.load, self.placement,
                                       self.patterns, plan.persistence.static_buffers)
        self.seconds: dict = {}  # candidate -> max over ranks, array[form, class]

    def built(self, name: str) -> bool:
        """Whether ``name``'s cost comes from its built Pattern (not from an estimate)."""
        return not self.costs[name].estimated

    def build(self, name: str, collective: str) -> None:
        """Build a protocol candidate's Pattern (collective) and charge it on its messages (one allreduce)."""
        pattern = self.runtime.pattern(self.plan.resolved(name), collective)
        self.patterns[name] = pattern
        self.costs[name] = model.candidate_cost(name, pattern, self.load, self.placement,
                                                self.runtime.topology.recv_items(self.family))
        worst = numpy.empty((len(FORMS), model.CLASSES))
        self.runtime.private.Allreduce(self.costs[name].seconds(), worst, op=MPI.MAX)
        self.seconds[name] = worst


class AutoDispatch:
    """Runs one collective of an auto plan on one handle (``runtime`` is itself: it runs the call)."""

    def __init__(self, runtime, plan, collective: str, family_model: FamilyModel, native_methods: dict,
                 local_class: int, by_weights: bool = False, refused: Exception | None = None):
        self.collective = collective
        self.runtime = self  # the wrapper calls ``call.runtime.<form>(call, ...)``; this object runs them
        self._comm_runtime = runtime
        self._plan = plan
        self._family = family_model
        self._native = native_methods  # form -> the library's method (bound to the wrapper)
        self._calls: dict = {}  # algorithm -> CallPlan
        self._seen: dict = {}  # size class -> calls so far
        self._check_times: dict = {}  # size class -> this rank's times of the online check's calls so far
        #: size class -> the blocking online check, once over: {candidate, candidate_seconds,
        #: native_seconds, winner} (the agreed medians)
        self.blocking_trials: dict = {}
        #: size class -> the online check of a persistent request of that class, applied:
        #: {candidate, candidate_seconds, native_seconds, winner}
        self.persistent_trials: dict = {}
        #: the persistent requests' checks not applied yet, in the order the requests were made (the
        #: same list on every rank: entries are added at inits and removed by an agreement)
        self._checks: list = []
        self._library_only: set = set()  # forms every call sends straight to the library, for good
        self.by_weights = by_weights  # cdag_exact_byte_communications: local_class is the weights'
        #: form -> receive-array bytes under which a call goes to the library (see :meth:`_library_limit`);
        #: updated whenever the tables are decided again, so the wrapper's shortcut reads it per call.
        self.library_below: dict = {}
        self._settled = {form: [None] * model.CLASSES for form in ("blocking", "nonblocking")}
        #: form -> {receive-array bytes: what a plain-array call with that many bytes runs}, the
        #: settled runner of its size class found by one dict lookup (local work only: see
        #: :meth:`settled_method`; emptied with ``_settled``)
        self._settled_by_nbytes: dict = {form: {} for form in ("blocking", "nonblocking")}
        #: form -> {block bytes: the same}, for calls with a receive buffer spec (:func:`spec_block_bytes`)
        self._settled_by_block: dict = {form: {} for form in ("blocking", "nonblocking")}
        #: receive blocks of a regular call (0 for the v/w forms: :meth:`_size_class` parses them)
        self._in_blocks = runtime.topology.indegree if collective in REGULAR else 0
        self._on_decision: list = []  # (callable, weak reference to its wrapper): see on_decision
        self._agree(local_class, refused)

    # -- the decision ------------------------------------------------------------------
    def _agree(self, local_class: int, refused: Exception | None = None) -> None:
        """The first call's allreduce: every candidate's worst time, and the range of size classes;
        where some rank's arguments were refused (``refused`` here: :func:`local_class_or_refusal`),
        every rank raises after it (:func:`raise_if_refused`)."""
        family = self._family
        names = list(family.costs)
        local = numpy.stack([family.costs[name].seconds() for name in names])
        check = float(self._plan.verify_code())
        vector = numpy.concatenate([local.ravel(), [family.load.native_shortcut], [float(refused is not None)],
                                    [-local_class if local_class != UNKNOWN else -model.CLASSES,
                                                    local_class, float(local_class == UNKNOWN),
                                                    float(family.fault is not None), check, -check]])
        worst = numpy.empty_like(vector)
        self._comm_runtime.private.Allreduce(vector, worst, op=MPI.MAX)
        raise_if_refused(refused, worst[local.size + 1], f"Neighbor_{self.collective} (its first call)")
        if worst[-2] != -worst[-1]:  # every rank raises: the checks below would run on some ranks only
            raise ValueError("verify_choice: the ranks passed different values to wrap (it decides which "
                             "calls are timed, collectively, so every rank must pass the same)")
        shape = local.shape
        for i, name in enumerate(names):
            family.seconds[name] = worst[: local.size].reshape(shape)[i]
        self.shortcut_seconds = float(worst[local.size])  # the slowest rank's (:func:`model.keep_the_library_whole`)
        lowest, highest, unknown, fault = -worst[-6], worst[-5], worst[-4], worst[-3]
        self.native_allowed = not fault  # the library errs on some rank's neighborhood: never run it
        # exact bytes: every call has the weights' sizes, so one class (the largest over ranks) serves all
        per_size = self.collective in REGULAR and not unknown and lowest == highest and not self.by_weights
        self.pinned = None if per_size else max(int(highest), 0)
        #: pinned, and its calls may have other sizes than the pinned class (not so under exact
        #: bytes, where the weights' class serves every call): each persistent request then agrees
        #: its own class at its init (:meth:`_request_class`), and blocking and nonblocking calls
        #: take only a choice safe at every size (:meth:`decide`)
        self.sizes_vary = self.pinned is not None and not self.by_weights
        self.decide()

    def decide(self) -> None:
        """The tables (per form: size class -> algorithm) from the family's agreed predictions and
        the checks' verdicts (called where every rank decides alike: see :meth:`apply_verdicts`)."""
        self.apply_verdicts()
        family = self._family
        seconds = family.seconds
        if self.sizes_vary and self.native_allowed:  # its calls run the pinned class's choice at any size
            seconds = model.safe_at_every_size(seconds, ("blocking", "nonblocking"))
        self.table = model.decide(seconds, self.native_allowed)
        built = {name: s for name, s in seconds.items() if family.built(name)}
        self.fallback = model.decide(built, self.native_allowed)
        # a pinned collective's calls never compare sizes; with the library excluded nothing runs it
        shortcut = self.shortcut_seconds if self.pinned is None and self.native_allowed else 0.0
        native = family.seconds[model.NATIVE]
        #: forms made ``native`` at every size since a size comparison would cost too much
        self.library_whole = model.keep_the_library_whole(self.table, native, shortcut)
        model.keep_the_library_whole(self.fallback, native, shortcut)
        persistent, blocking = FORMS.index("persistent"), FORMS.index("blocking")
        for size_class, trial in self.persistent_trials.items():  # measured outranks predicted
            self.table[persistent][size_class] = self.fallback[persistent][size_class] = trial["winner"]
        for size_class in self._checked_native():  # the online check's verdicts too
            self.table[blocking][size_class] = self.fallback[blocking][size_class] = model.NATIVE
        self._uniform = {}  # form -> the algorithm every call of it runs, when it is one for every size
        for f, form in enumerate(FORMS):
            row = self.table[f]
            names = {row[self.pinned]} if self._pinned_form(form) else set(row)
            name = names.pop() if len(names) == 1 else None
            # a blocking choice still to be checked online runs per size class (:meth:`_runner`) until
            # its check is over (a pinned collective's one class); a persistent request's check may
            # replace even native
            checked = ((form in ("blocking", "persistent") and name != model.NATIVE and self._plan.checks_choices
                        and not (form == "blocking" and self.pinned in self.blocking_trials))
                       or (form == "persistent" and self._plan.tries_near_misses))
            if name is not None and (name == model.NATIVE or family.built(name)) and not checked:
                self._uniform[form] = name
                if name == model.NATIVE:  # here, where every rank decides alike, not at a wrapper's first call
                    self._library_only.add(form)
            self.library_below[form] = self._library_limit(row)
        #: form -> per size class, what a call runs once its choice is final (the library's method or
        #: the chosen algorithm's runtime call), filled by :meth:`_runner`; local work only: emptied
        #: here, whenever the tables change
        self._uniform_runs: dict = {}  # form -> its runner, for a form in ``_uniform`` (no size class needed)
        self._forget_settled(("blocking", "nonblocking"))
        self._on_decision = [(announce, owner) for announce, owner in self._on_decision if announce() is not False]

    def _pinned_form(self, form: str) -> bool:
        """Whether every call of ``form`` runs the pinned class (a persistent request agrees its own
        where :attr:`sizes_vary`)."""
        return self.pinned is not None and not (form == "persistent" and self.sizes_vary)

    def on_decision(self, announce, owner) -> None:
        """Have ``announce()`` called after every later decision of the tables (a wrapper puts the
        methods :func:`wrapper_methods` then gives in place: local work), until it returns False.
        ``owner``: a weak reference to the wrapper; entries whose wrapper is gone are dropped here
        too, so a program that wraps a handle again and again keeps no entry per wrapper."""
        self._on_decision = [(held, of) for held, of in self._on_decision if of() is not None]
        self._on_decision.append((announce, owner))

    def _forget_settled(self, forms) -> None:
        """Empty the runners kept for ``forms`` (local work only; the dicts stay the same objects,
        which :meth:`settled_method` reads)."""
        for form in forms:
            self._settled[form][:] = [None] * model.CLASSES
            self._settled_by_nbytes[form].clear()
            self._settled_by_block[form].clear()
            self._uniform_runs.pop(form, None)

    def apply_verdicts(self) -> None:
        """Keep the verdict of every persistent request's online check that every rank has posted,
        in the order the requests were made (waiting for each agreement), and forget the checks
        every rank's request left unfinished at its ``Free``. Called at calls every rank makes in the
        same order (an init, a decision), so one allreduce of the checks' states makes every rank's
        tables hold the same verdicts there: a start is local and need not come before or after an
        init in the same order on every rank, so a rank's own posted verdicts cannot decide."""
        checks = self._checks
        if not checks:
            return
        states = numpy.array([check.state() for check in checks], dtype=float)
        worst = numpy.empty(2 * len(checks))
        self._comm_runtime.private.Allreduce(numpy.concatenate([states, -states]), worst, op=MPI.MAX)
        highest, lowest = worst[:len(checks)], -worst[len(checks):]
        pending = []
        for check, high, low in zip(checks, highest, lowest):
            if high == low == PendingCheck.POSTED:
                check.verdict.wait()
                self.persistent_trials[check.size_class] = trial_record(check.verdict)
            elif not high == low == PendingCheck.FREED:  # still running on some rank (or on all)
                pending.append(check)
        self._checks = pending

    def _check(self, size_class: int, candidate: str) -> PendingCheck:
        """The agreement slot of a persistent request checked against native (made at its init, on
        every rank in the same order), with a persistent channel of its own for its verdict's messages."""
        channels = self._comm_runtime.channels
        check = PendingCheck(size_class, candidate, channels.take_persistent())
        self._checks.append(check)
        return check

    def _post_verdict(self, check: PendingCheck, times: list) -> Verdict:
        """The agreement of a persistent request's check (its next start, on every rank)."""
        check.verdict = Verdict(self._comm_runtime.private, times, PERSISTENT_CHECK_WIN, check.size_class,
                                check.candidate, check.tag)
        return check.verdict

    def _trial(self, size_class: int):
        """The check of ``size_class``'s persistent requests this rank knows: the last one agreed
        (a verdict its request completed, not yet applied), else the one applied, else None."""
        agreed = [check.verdict for check in self._checks
                  if check.size_class == size_class and check.verdict is not None and check.verdict.done]
        return trial_record(agreed[-1]) if agreed else self.persistent_trials.get(size_class)

    def _checked_native(self) -> list:
        """The blocking size classes whose online check the choice lost (:attr:`blocking_trials`):
        they run native from then on, whatever a later :meth:`decide` predicts (measured
        outranks predicted)."""
        return [size_class for size_class, trial in self.blocking_trials.items() if trial["winner"] == model.NATIVE]

    def _library_limit(self, row) -> int:
        """Receive-buffer bytes under which every call of a form with this table row is the library's.

        A regular call's size class is that of its receive block, and its ``indegree`` receive
        blocks lie in its receive array, so an array of fewer than ``indegree * 2**(c-1)`` bytes
        has a class below ``c``: if every class below ``c`` is ``native``, such a call needs no
        parse at all (nor an online check: it checks only choices that are not ``native``). 0 (no
        shortcut) when the collective is pinned, not regular, or without in-edges.
        """
        indegree = self._comm_runtime.topology.indegree
        if self.pinned is not None or self.collective not in REGULAR or not indegree:
            return 0
        first = next((c for c, name in enumerate(row) if name != model.NATIVE), model.CLASSES)
        return 0 if first == 0 else indegree * 2 ** (first - 1)

    @property
    def in_blocks(self) -> int:
        """The receive blocks of a regular call (its in-degree; 0 for the v/w forms)."""
        return self._in_blocks

    def native_forms(self) -> tuple:
        """Forms whose every call goes to the library, for good (a wrapper may then call the
        library's method directly): those whose table said ``native`` at every size at some
        decision (:meth:`decide`, made at the same call on every rank), whichever wrapper asks."""
        return tuple(sorted(self._library_only))

    def _trial_candidate(self, size_class: int) -> str | None:
        """The candidate a persistent request of ``size_class`` is checked against ``native`` with, or None.

        The model's choice where it is not native (unless ``verify_choice=False``); with
        ``verify_choice=True``, where it is native, also the built candidate predicted fastest if at
        most :data:`TRIAL_BAND` times native's time. None otherwise, once a check of the class was
        applied, where native may not run, or for the v/w forms."""
        if (not self._plan.checks_choices or not self.native_allowed or self.collective not in REGULAR
                or size_class in self.persistent_trials):
            return None
        f = FORMS.index("persistent")
        chosen = self.table[f][size_class]
        if chosen != model.NATIVE:
            return chosen
        if not self._plan.tries_near_misses:
            return None
        family = self._family
        native = family.seconds[model.NATIVE][f, size_class]
        built = [name for name in family.seconds if name != model.NATIVE and family.built(name)]
        best = min(built, key=lambda name: family.seconds[name][f, size_class], default=None)
        if best is None or not family.seconds[best][f, size_class] <= TRIAL_BAND * native:
            return None
        return best

    def choose(self, form: str, size_class: int, persistent: bool = False, counts: bool = True) -> str:
        """The algorithm this call runs (may build a protocol candidate: collective, see the module).
        ``counts`` False: the table's choice, never built here (the call is not counted)."""
        if form in self._library_only:
            return model.NATIVE
        uniform = self._uniform.get(form)
        if uniform is not None:
            return uniform
        f = FORMS.index(form)
        name = self.table[f][size_class]
        if name == model.NATIVE or self._family.built(name) or not counts:
            return name
        seen = self._seen.get(size_class, 0) + 1
        self._seen[size_class] = seen
        if persistent or seen >= REPEATS:
            self._family.build(name, self.collective)
            for dispatch in self._comm_runtime.auto_dispatches(self._plan, self._family.family):
                dispatch.decide()
            return self.table[f][size_class]
        return self.fallback[f][size_class]

    def explain(self, form: str = "blocking", block_bytes: int = 8) -> dict:
        """What a call of ``form`` with ``block_bytes`` blocks runs, with every candidate's prediction.

        ``algorithm`` is what the next such call runs; ``predicted_winner`` differs from it while
        the winner is a protocol candidate not built yet (it is built at the :data:`REPEATS`-th call
        of the size class, or for a persistent request).
        """
        f = FORMS.index(form)
        size_class = self.pinned if self._pinned_form(form) else model.size_class(block_bytes)
        family = self._family
        predicted = {name: float(seconds[f, size_class]) for name, seconds in family.seconds.items()}
        winner = model.NATIVE if form in self._library_only else self.table[f][size_class]
        trial = self._trial(size_class) if form == "persistent" else None
        if trial is not None:  # what the next request runs: the check's winner
            winner = trial["winner"]
        runs = winner if winner == model.NATIVE or family.built(winner) else self.fallback[f][size_class]
        if form == "nonblocking":  # local: it runs what a blocking or persistent call set up
            local = self._local_choice(size_class)
            runs = "direct" if local == LOCAL_DIRECT else local
        native = predicted[model.NATIVE]

        def to_native(name: str) -> float:
            """``name``'s predicted time over native's (a profile may charge nothing: native's may be 0)."""
            seconds = predicted[name]
            return seconds / native if native else 1.0 if seconds == native else math.copysign(math.inf, seconds)
        best = min((n for n in predicted if n != model.NATIVE), key=predicted.get, default=None)
        unsafe, unsafe_ratio = (model.first_unsafe_class(family.seconds, best, form)
                                if best and self._pinned_form(form) and self.sizes_vary else (None, None))
        if not self.native_allowed:
            why = (f"the library's own call is excluded ({self._family.fault or 'a fault on another rank'}); "
                   f"{winner} is the fastest other candidate")
        elif winner == model.NATIVE and form in self.library_whole:
            why = (f"the library runs every size of this form: its table mixed the library with other "
                   f"algorithms, and the size comparison that needs ({self.shortcut_seconds * 1e6:.2f} us "
                   f"per call) would cost over {model.SHORTCUT_ALLOWANCE} x the library's call at some size "
                   f"it runs" + (f" (best here: {best}, {to_native(best):.2f} x)" if best else ""))
        elif winner == model.NATIVE and unsafe is not None and to_native(best) <= model.NATIVE_MARGIN:
            why = (f"pinned: {best} is predicted at {to_native(best):.2f} x native's time at this class, but "
                   f"{unsafe_ratio:.2f} x with blocks of {model.class_range(unsafe)}, over the "
                   f"{model.PINNED_ALLOWANCE} x a pinned collective's choice may cost at any size")
        elif winner == model.NATIVE:
            why = (f"no candidate is predicted at most {model.NATIVE_MARGIN} x native's time"
                   + (f" (best: {best}, {to_native(best):.2f} x)" if best else ""))
        else:
            why = f"{winner} is predicted at {to_native(winner):.2f} x native's time, the least"
        if runs != winner and form == "nonblocking":
            why += (f"; a nonblocking call is local and sets nothing up: it runs {runs} until a blocking call "
                    f"of this size (or a persistent request) has set {winner} up")
        elif runs != winner:
            why += (f"; it is estimated, not built: calls run {runs} until the {REPEATS}th call of this size "
                    f"(or a persistent request) builds it")
        if trial is not None:
            candidate = trial["candidate"]
            why = (f"measured by a persistent request's first starts: {candidate} "
                   f"{trial['candidate_seconds'] * 1e6:.2f} us, native {trial['native_seconds'] * 1e6:.2f} us "
                   f"(medians of {PERSISTENT_TRIALS} runs each after {CHECK_WARMUP} untimed, the slowest "
                   f"rank's times): {trial['winner']} runs this size from then on (a candidate needs at most "
                   f"{PERSISTENT_CHECK_WIN} x native's time; the model predicted {candidate} at "
                   f"{to_native(candidate):.2f} x)")
        if self._pinned_form(form):
            why += (f"; pinned: every call of this collective runs size class {size_class}, agreed at its first "
                    f"call, whatever its block size (block_bytes={block_bytes} does not change the choice)")
        elif self.pinned is not None:
            why += ("; pinned collective: each persistent request agrees its size class at its init (the "
                    "largest over ranks), so block_bytes picks the class")
        if form == "blocking" and size_class in self._checked_native():
            trial = self.blocking_trials[size_class]
            chosen_seconds, native_seconds = trial["candidate_seconds"], trial["native_seconds"]
            why = (f"the online check measured the model's choice at {chosen_seconds * 1e6:.2f} us "
                   f"and native at {native_seconds * 1e6:.2f} us (medians of {TRIALS} calls each after "
                   f"{CHECK_WARMUP} untimed, the slowest rank's times; the choice needs at most {CHECK_WIN} x "
                   f"native's): native runs this size from then on")
        check = trial if form == "persistent" else self.blocking_trials.get(size_class) if form == "blocking" else None
        return {"algorithm": runs, "check": check, "predicted_winner": winner, "form": form, "block_bytes": block_bytes,
                "size_class": size_class, "pinned": self.pinned is not None, "predicted_seconds": predicted,
                "estimated": sorted(n for n in predicted if n != model.NATIVE and not family.built(n)),
                "reason": why, "profile": family.profile.describe() + (
                    "; the ranks' profiles differ (this rank's; each prediction is the slowest rank's)"
                    if self._plan.profiles_differ else ""), "ranks_per_core": family.ranks_per_core,
                "load_ranks_per_core": family.load.ranks_per_core,
                "load_ranks_per_node": family.load.ranks_per_node, "placement": str(family.placement)}

    # -- calls -------------------------------------------------------------------------
    def _size_class(self, sendbuf, recvbuf) -> int:
        """The call's size class: the pinned one, else its block's (:func:`quick_size_class`, or
        :func:`block_bytes` from a parse where that cannot tell)."""
        pinned = self.pinned
        if pinned is not None:
            return pinned
        size_class = quick_size_class(recvbuf, self._in_blocks)
        if size_class >= 0:
            return size_class
        return model.size_class(block_bytes(self._comm_runtime, self.collective, sendbuf, recvbuf))

    def settled_method(self, form: str, method):
        """``method`` (the wrapper's ``form`` method for this collective) with every call whose size
        class :func:`quick_size_class` reads and whose choice is final running that choice at once
        (the library's method or the algorithm's runtime call, from ``_settled``), without the
        wrapper's and this dispatch's frames; None where no call can take that path (a pinned or
        irregular collective, no in-edges). Local work only: the runner is the
        one :meth:`blocking` / :meth:`nonblocking` would run.

        A plain receive array's class depends on its byte count alone, and a buffer spec's on
        its block bytes (:func:`spec_block_bytes`), so the runner is also kept by that number
        (:meth:`_first_settled_call`): such a call then costs one dict lookup
        before the runner (reading the class with :func:`quick_size_class` cost 0.2 us per
        call on the 2-core VM, which 4 ranks per core turned into 4-6 us of an 8-rank call's
        90). An array that mpi4py cannot split (uneven, not contiguous) is never kept; a later
        one of a kept size fails in the runner, as in any other."""
        if self.pinned is not None or not self._in_blocks:
            return None
        by_nbytes, by_block = self._settled_by_nbytes[form], self._settled_by_block[form]  # the same for good
        indegree = self._in_blocks
        ndarray, datatype = numpy.ndarray, MPI.Datatype
        first_call = partial(self._first_settled_call, form, method)

        def call(sendbuf, recvbuf):
            kind = type(recvbuf)
            if kind is ndarray:
                run = by_nbytes.get(recvbuf.nbytes)
            elif kind is list or kind is tuple:
                if len(recvbuf) == 3 and type(recvbuf[1]) is int and type(recvbuf[2]) is datatype:
                    try:  # spec_block_bytes's first rule without its frame (the spec the bench passes)
                        run = by_block.get(recvbuf[1] * recvbuf[2].Get_size())
                    except MPI.Exception:  # a datatype without a size: the parse names it
                        run = None
                else:
                    run = by_block.get(spec_block_bytes(recvbuf, indegree))
            else:
                run = None
            return run(sendbuf, recvbuf) if run is not None else first_call(sendbuf, recvbuf)
        call.__name__, call.__doc__ = method.__name__, method.__doc__
        return call

    def _first_settled_call(self, form: str, method, sendbuf, recvbuf):
        """A call the settled method found no runner for: ``method`` runs it (and settles its class
        where the choice is final); the runner is then kept by the array's bytes or the spec's
        block bytes."""
        size_class = quick_size_class(recvbuf, self._in_blocks)
        run = self._settled[form][size_class] if size_class >= 0 else None
        if run is None:
            return method(sendbuf, recvbuf)
        if type(recvbuf) is numpy.ndarray:
            kept, nbytes = self._settled_by_nbytes[form], recvbuf.nbytes
        else:  # a buffer spec, which quick_size_class read
            kept, nbytes = self._settled_by_block[form], spec_block_bytes(recvbuf, self._in_blocks)
        if len(kept) >= MAX_KEPT_SIZES:
            kept.clear()
        kept[nbytes] = run
        return run(sendbuf, recvbuf)

    def _call_plan(self, name: str):
        call = self._calls.get(name)
        if call is None:
            call = self._calls[name] = self._comm_runtime.call_plan(self._plan.resolved(name), self.collective)
            self._forget_settled(("nonblocking",))  # its stand-in for ``name`` (:meth:`_local_choice`) ends
        return call

    def _runner(self, form: str, size_class: int):
        """What a ``form`` call of ``size_class`` runs now (a callable of ``(sendbuf, recvbuf)``),
        kept in ``_settled`` when the choice is final (what the table says, built: while a
        protocol candidate waits for its :data:`REPEATS`-th call, every call counts; while the
        online check times a blocking choice, every call is one of its pairs)."""
        name = self._local_choice(size_class) if form == "nonblocking" else self.choose(form, size_class)
        if form == "blocking" and self._check_pending(size_class, name):
            return partial(self._checked_call, size_class, name)
        if name == LOCAL_DIRECT:  # never final: the table's choice takes over once set up
            return self._comm_runtime.local_direct(self._plan, self.collective)
        if name == model.NATIVE:
            run = self._native[form]
        else:
            call = self._call_plan(name)
            run = partial(getattr(call.runtime, form), call)
        if self._final(form, size_class, name):
            self._settled[form][size_class] = run
            if form in self._uniform:
                self._uniform_runs[form] = run
        return run

    def _final(self, form: str, size_class: int, name: str) -> bool:
        """Whether ``name`` is what every later ``form`` call of ``size_class`` runs until the
        tables change or a call plan is made: the table's choice (or the library's for good),
        built, set up; for a nonblocking call the library's call standing in for a choice not
        set up too (:meth:`_call_plan` forgets it)."""
        if form in self._library_only or (form == "nonblocking" and name == model.NATIVE):
            return name == model.NATIVE
        winner = self._uniform.get(form) or self.table[FORMS.index(form)][size_class]
        return name == winner and (name == model.NATIVE or (self._family.built(name) and name in self._calls))

    def _local_choice(self, size_class: int) -> str:
        """A nonblocking call's algorithm, with no collective set-up in the call: MPI's nonblocking
        calls are local (a rank may enter one, then wait in a receive that its peer answers only
        after entering the same call). The table's choice where it is built and its call plan made
        (by an earlier blocking or persistent call: at the same call on every rank, as every rank
        makes the same calls), else the library's call, which needs none; where the library may
        not run (a fault of its on some rank's neighborhood, agreed at the first call),
        :data:`LOCAL_DIRECT`, the stand-in the calls before the decision run there (it ran the
        choice, set up in the call: with ``coloring`` a protocol, which hung where a rank entered
        the call after its peer's had returned)."""
        name = self.choose("nonblocking", size_class, counts=False)
        if name == model.NATIVE or (self._family.built(name) and name in self._calls):
            return name
        return model.NATIVE if self.native_allowed else LOCAL_DIRECT

    def blocking(self, _, sendbuf, recvbuf):
        """A blocking call: the chosen algorithm (timed against native while the online check runs)."""
        run = self._uniform_runs.get("blocking")
        if run is None:
            size_class = self._size_class(sendbuf, recvbuf)
            run = self._settled["blocking"][size_class] or self._runner("blocking", size_class)
        return run(sendbuf, recvbuf)

    def nonblocking(self, _, sendbuf, recvbuf):
        """A nonblocking call of the chosen algorithm; returns its request."""
        run = self._uniform_runs.get("nonblocking")
        if run is None:
            size_class = self._size_class(sendbuf, recvbuf)
            run = self._settled["nonblocking"][size_class] or self._runner("nonblocking", size_class)
        return run(sendbuf, recvbuf)

    def persistent(self, _, sendbuf, recvbuf, info=MPI.INFO_NULL):
        """A persistent request of the chosen algorithm (protocol candidates are built for it); a
        :class:`~.online_check.CheckedRequest` where the choice, or with ``verify_choice`` the
        model's near miss, is checked against native in its first starts (see the module). A form
        the library runs for good (:meth:`native_forms`) gets the library's request with nothing
        collective, as a wrapper that installed the library's method gets it: another wrapper of
        the handle may make this init on some ranks and that one on the others."""
        if "persistent" in self._library_only:
            return self._native["persistent"](sendbuf, recvbuf, info)
        if self._checks:  # every rank makes its inits in the same order: the same checks here
            self.decide()
        size_class = self._request_class(sendbuf, recvbuf)
        name = self.choose("persistent", size_class, persistent=True)
        rival = self._trial_candidate(size_class)
        if rival is None:
            return self._persistent_request(name, sendbuf, recvbuf, info)
        requests = [self._persistent_request(n, sendbuf, recvbuf, info) for n in (rival, model.NATIVE)]
        check = self._check(size_class, rival)
        channels = self._comm_runtime.channels

        def freed():
            check.freed = True
            channels.release_persistent(check.tag)  # last: it may release the communicator
        request = CheckedRequest(requests, partial(self._post_verdict, check), CHECK_WARMUP, PERSISTENT_TRIALS,
                                 on_free=freed)
        channels.hold_persistent(check.tag, request)
        return request

    def _request_class(self, sendbuf, recvbuf) -> int:
        """A persistent request's size class: its block's, or, for a pinned collective (whose calls
        cannot tell one class every rank sees), the largest over ranks of each rank's
        :func:`local_class`, agreed at the init (collective: one allreduce; every rank makes its
        inits in the same order, and an init is set-up, where one allreduce costs little against
        the starts). A request made at 8 B and another at 64 KiB then each run their own class's
        choice (:data:`~sparsecoll.model.choice.PINNED_ALLOWANCE` says what the other choice cost).
        A rank whose arguments the parse refuses raises its error after the allreduce, and every
        other rank a ValueError saying so (the library's init raises on that rank alone and returns
        on the others, which then went on; here they would wait in the allreduce for good)."""
        if not self.sizes_vary:
            return self._size_class(sendbuf, recvbuf)
        local, refused = local_class_or_refusal(self._comm_runtime, self.collective, sendbuf, recvbuf)
        vector = numpy.array([local, refused is not None], dtype="i8")
        agreed = numpy.empty_like(vector)
        self._comm_runtime.private.Allreduce(vector, agreed, op=MPI.MAX)
        raise_if_refused(refused, agreed[1], f"Neighbor_{self.collective}_init")
        return int(agreed[0]) if agreed[0] >= 0 else self.pinned  # no rank could tell: the first call's

    def _persistent_request(self, name: str, sendbuf, recvbuf, info):
        if name == model.NATIVE:
            return self._native["persistent"](sendbuf, recvbuf, info)
        call = self._call_plan(name)
        return call.runtime.persistent(call, sendbuf, recvbuf)

    def _check_pending(self, size_class: int, name: str) -> bool:
        """Whether a blocking call of ``size_class`` that would run ``name`` is one of the online
        check's calls: a choice that is not ``native``, where native may run, checks on, the
        class's check not over (every rank alike: the same calls, the same choice)."""
        return (name != model.NATIVE and self._plan.checks_choices and self.native_allowed
                and size_class not in self.blocking_trials)

    def _checked_call(self, size_class: int, name: str, sendbuf, recvbuf) -> None:
        """One call of the online check: the choice (even calls) or native (odd ones), timed. At the
        last, one allreduce takes each call's time after the :data:`CHECK_WARMUP` pairs to the
        slowest rank's, and the class runs native for good unless the median of the choice's
        calls is at most :data:`CHECK_WIN` times native's."""
        times = self._check_times.setdefault(size_class, [])
        runs_native = len(times) % 2 == 1
        start = time.perf_counter()
        if runs_native:
            self._native["blocking"](sendbuf, recvbuf)
        else:
            call = self._call_plan(name)
            call.runtime.blocking(call, sendbuf, recvbuf)
        times.append(time.perf_counter() - start)
        if len(times) == CHECK_CALLS:
            worst = numpy.empty(2 * TRIALS)
            self._comm_runtime.private.Allreduce(numpy.array(times[2 * CHECK_WARMUP:]), worst, op=MPI.MAX)
            chosen, native = float(numpy.median(worst[0::2])), float(numpy.median(worst[1::2]))
            self.blocking_trials[size_class] = check_record(name, chosen, native, CHECK_WIN)
            del self._check_times[size_class]
            self.decide()  # again, every rank at this call: a form now the library's for good calls its method


def calls_until_settled(form: str) -> int:
    """The calls of one size class of ``form`` after which what ``auto`` runs no longer changes (an
    upper bound, the same on every rank): a blocking call's protocol candidate is built at the
    :data:`REPEATS`-th call, and the online check takes :data:`CHECK_CALLS` more; a persistent
    request's check takes its ``2 * (CHECK_WARMUP + PERSISTENT_TRIALS)`` starts and the one that
    agrees; a nonblocking call runs what the other forms set up. A benchmark of ``auto``'s steady
    state runs that many calls before it times any."""
    if form not in FORMS:
        raise ValueError(f"form: expected one of {FORMS}, got {form!r}")
    return {"blocking": REPEATS + CHECK_CALLS, "nonblocking": 0,
            "persistent": 2 * (CHECK_WARMUP + PERSISTENT_TRIALS) + 1}[form]


def check_record(candidate: str, candidate_seconds: float, native_seconds: float, win: float) -> dict:
    """What ``plan_stats`` reports of an online check (blocking or persistent) from its agreed medians."""
    winner = candidate if choice_wins(candidate_seconds, native_seconds, win) else model.NATIVE
    return {"candidate": candidate, "candidate_seconds": candidate_seconds, "native_seconds": native_seconds,
            "winner": winner}


class PendingCheck:
    """A persistent request's online check as its dispatch sees it until the check is applied:
    its size class, candidate, the tag of its verdict's messages, the verdict once posted, and
    whether the request was freed."""

    RUNNING, POSTED, FREED = 0.0, 1.0, 2.0

    __slots__ = ("size_class", "candidate", "tag", "verdict", "freed")

    def __init__(self, size_class: int, candidate: str, tag: int):
        self.size_class, self.candidate, self.tag = size_class, candidate, tag
        self.verdict = None
        self.freed = False

    def state(self) -> float:
        """POSTED once its verdict was posted here, else FREED once its request was freed, else RUNNING."""
        if self.verdict is not None:
            return self.POSTED
        return self.FREED if self.freed else self.RUNNING


def explain_undecided(plan, block_bytes: int, runs: str) -> dict:
    """``plan_stats``'s ``auto`` for a nonblocking call of a collective that no blocking call or
    persistent request has decided yet (the keys of :meth:`AutoDispatch.explain`): it runs ``runs``
    (the library's call, or ``direct`` set up locally where the library's fails here), since a
    nonblocking call is local and cannot agree on a choice with the other ranks."""
    return {"algorithm": runs, "check": None, "predicted_winner": None, "form": "nonblocking",
            "block_bytes": block_bytes, "size_class": model.size_class(block_bytes), "pinned": False,
            "predicted_seconds": {}, "estimated": [],
            "reason": (f"not decided: a nonblocking call is local, so it cannot agree on a choice with the other "
                       f"ranks, and runs {runs} until a blocking call or a persistent request of this "
                       f"collective (every rank) decides"),
            "profile": plan.profile.describe(), "ranks_per_core": None, "load_ranks_per_core": None,
            "load_ranks_per_node": None, "placement": None}


def trial_record(verdict: Verdict) -> dict:
    """:func:`check_record` of a persistent request's agreed verdict."""
    return check_record(verdict.candidate, *verdict.medians(), verdict.win)


def block_bytes(runtime, collective: str, sendbuf, recvbuf) -> int:
    """The block size of a call in bytes as auto classes it (:data:`UNKNOWN` if this rank cannot tell).

    Regular forms: the receive block (else the send block); v/w forms: the mean send block.
    """
    send, recv, _ = runtime.parse(collective, sendbuf, recvbuf)
    if collective in REGULAR:
        for blocks in (recv, send):
            if len(blocks):
                return blocks.counts[0] * blocks.types[0].Get_size()
        return UNKNOWN
    if not len(send):
        return UNKNOWN
    return sum(c * t.Get_size() for c, t in zip(send.counts, send.types)) // len(send)


def local_class(runtime, collective: str, sendbuf, recvbuf) -> int:
    """The size class of this rank's call (:data:`UNKNOWN` if it cannot tell)."""
    nbytes = block_bytes(runtime, collective, sendbuf, recvbuf)
    return UNKNOWN if nbytes == UNKNOWN else model.size_class(nbytes)


def local_class_or_refusal(runtime, collective: str, sendbuf, recvbuf) -> tuple:
    """``(local_class(...), None)``, or ``(UNKNOWN, the error)`` where the parse refuses this rank's
    arguments: a size-class agreement (one allreduce) carries whether some rank refused, so that
    :func:`raise_if_refused` raises on every rank after it instead of on this rank alone before
    it, while the others wait in it for good."""
    try:
        return local_class(runtime, collective, sendbuf, recvbuf), None
    except Exception as exc:  # noqa: BLE001 (raised by raise_if_refused, once every rank knows)
        return UNKNOWN, exc


def raise_if_refused(refused, some_rank_refused, call: str) -> None:
    """After the agreement: this rank's own error (``refused``, from :func:`local_class_or_refusal`),
    else a ValueError where another rank's arguments were refused (``some_rank_refused``)."""
    if refused is not None:
        raise refused
    if some_rank_refused:
        raise ValueError(f"{call}: another rank's arguments were refused (its error names the argument); the "
                         f"size class is agreed by every rank in the call, so no rank runs it")


def wrapper_methods(dispatch: AutoDispatch, library: dict, class_method) -> dict:
    """What a wrapper puts in place of its class's methods for ``dispatch``'s collective: form ->
    callable, installed on the wrapper by :mod:`sparsecoll.comm` (forms left out keep the class's).

    * a form whose every call goes to the library (:meth:`AutoDispatch.native_forms`): the
      library's method itself, so its calls run no sparsecoll code;
    * a blocking or nonblocking form with a size below which the library runs
      (:attr:`AutoDispatch.library_below`): :func:`library_shortcut` around the settled method;
    * else the settled method (:meth:`AutoDispatch.settled_method`) where there is one.

    ``library``: the library's method per form, with the wrapper's method's signature (checked
    against the weights under ``cdag_exact_byte_communications``, where no call is settled);
    ``class_method(form)``: the wrapper class's method bound to the wrapper.
    Local: every entry follows from the dispatch's tables, decided at calls every rank makes.
    """
    methods = {}
    library_only = dispatch.native_forms()
    for form in library_only:
        methods[form] = library[form]
    for form in ("blocking", "nonblocking"):
        if form in library_only:
            continue
        method = class_method(form)
        settled = None if dispatch.by_weights else dispatch.settled_method(form, method)
        if dispatch.library_below.get(form):  # outermost: one comparison sends a small call to the library
            methods[form] = library_shortcut(dispatch.library_below, form, library[form], settled or method,
                                             dispatch.in_blocks)
        elif settled is not None:
            methods[form] = settled
    return methods


def library_shortcut(limits: dict, form: str, library_method, method, indegree: int = 1):
    """``method`` (a wrapper's auto method) with calls that receive fewer than ``limits[form]``
    bytes sent straight to ``library_method`` (:attr:`AutoDispatch.library_below`).

    A plain receive array is what mpi4py splits over the ``indegree`` receive blocks, so its size
    is the bytes the call receives. A buffer spec (a list or tuple) receives ``indegree`` blocks
    of :func:`spec_block_bytes` (the rule :func:`quick_size_class` reads), not its array's size:
    MPI and mpi4py take a spec whose blocks reach past its array (``[big[:8], 2048, MPI.BYTE]``:
    memory the program owns beyond the view), and a rank that passed one, small array and large
    blocks, ran the library while its peers ran the table's choice for that size, and every rank
    waited for good. A spec that rule cannot read, and anything else, takes ``method`` (the parse
    names a block past its buffer). The limit is read once, here: a wrapper installs a new
    shortcut after every decision (:meth:`AutoDispatch.on_decision`).

    Every line here runs on each of the form's calls, so it is as short as it can be: a plain
    array (the common case) costs one type test and its ``nbytes``. That matters more than its
    CPU time (100 ns) says: on 8 ranks on 2 cores a process that waits on a shared core comes back
    to cold caches. The library's 8 B allgather on the 9-point stencil took, through this
    comparison with an array, 2.8-4.4 us longer (MPICH, 137 us) and 2.8 us (Open MPI, 43 us);
    through the first version (the spec test first, the limit looked up per call) 5.3-5.4 and
    3.9-5.2 us; through a bare Python function 0.4-2.2 and 0.5-0.7 us
    (``benchmarks/executor-overhead/size_comparison.py``).
    """
    ndarray, specs = numpy.ndarray, (list, tuple)
    limit = limits[form]

    def shortcut(sendbuf, recvbuf):
        kind = type(recvbuf)
        if kind is ndarray:
            if recvbuf.nbytes < limit:
                return library_method(sendbuf, recvbuf)
        elif kind in specs:
            block = spec_block_bytes(recvbuf, indegree)
            if 0 <= block and block * indegree < limit:
                return library_method(sendbuf, recvbuf)
        return method(sendbuf, recvbuf)
    shortcut.__name__, shortcut.__doc__ = method.__name__, method.__doc__
    return shortcut


def explicit_absent_side(library: dict, collective: str, absent: str, parse, present_blocks: int) -> dict:
    """``library`` (form -> the library's method for the regular ``collective``) called with the side
    this rank has no blocks on (``absent``: :func:`~sparsecoll.model.choice.library_absent_side`)
    given as ``[buffer, count, datatype]`` of the other side's block, unless it says as much
    already; the other argument as it was. Local: every rank still calls the library, with the
    same messages; only this rank's arguments change, as MPI means them.

    The usual arguments (plain arrays, ``[array, count, datatype]``) are read directly (a plain
    array holds ``present_blocks`` blocks of its dtype's datatype); anything else through
    ``parse`` (the runtime's, cached). A spec that states a count for that side (not 0) goes to
    the library as it is, after one test: every line here runs on each call of such a rank, and
    on two of 8 ranks (Open MPI, 8 ranks on 2 cores, the bench's random graph, ``[array, count,
    MPI.BYTE]`` specs) a parse on every call made the library's blocking calls take 1.14-1.32 x
    their time without it."""
    ndarray, datatypes, on_recv = numpy.ndarray, {}, absent == "recv"

    def count_and_datatype(buf, blocks: int):
        """``(count, datatype)`` of one of ``buf``'s ``blocks`` blocks where that is cheap to read, else None."""
        kind = type(buf)
        if kind is ndarray:
            datatype = datatypes.get(buf.dtype, ndarray)
            if datatype is ndarray:  # not looked up yet
                try:
                    datatype = MPI.Datatype.fromcode(buf.dtype.char) if buf.dtype.isnative else None
                except (KeyError, ValueError):  # (a structured dtype: parse reads it)
                    datatype = None
                datatypes[buf.dtype] = datatype
            if datatype is None or buf.size % blocks:  # (parse names a bad size)
                return None
            return buf.size // blocks, datatype
        if (kind is list or kind is tuple) and len(buf) == 3 and type(buf[1]) is int \
                and isinstance(buf[2], MPI.Datatype):
            return buf[1], buf[2]
        return None

    def arguments(sendbuf, recvbuf):
        present, other = (sendbuf, recvbuf) if on_recv else (recvbuf, sendbuf)
        block = count_and_datatype(present, present_blocks)
        if block is None:
            send, recv, _ = parse(collective, sendbuf, recvbuf)
            blocks = send if on_recv else recv
            block = blocks.counts[0], blocks.types[0]
        given = [buffer_object(other), *block]
        return (sendbuf, given) if on_recv else (given, recvbuf)

    def given(method):
        """``method`` with the side without edges stated, unless it is an explicit spec with a
        count already (the bench's ``[array, count, MPI.BYTE]``): then one test on the call's path."""
        def stated(sendbuf, recvbuf, *info):
            side = recvbuf if on_recv else sendbuf
            kind = type(side)
            if kind is not list and kind is not tuple or len(side) < 3 or side[1] == 0:
                sendbuf, recvbuf = arguments(sendbuf, recvbuf)
            return method(sendbuf, recvbuf, *info)
        stated.__name__, stated.__doc__ = getattr(method, "__name__", "stated"), method.__doc__
        stated.__wrapped__ = method  # (functools' name for what a wrapper calls)
        return stated
    return {form: given(method) for form, method in library.items()}


def until_decided(decided: list, decided_method, library_method):
    """A wrapper's nonblocking method before its collective's dispatch exists: calls go to
    ``library_method`` while ``decided[0]`` (:meth:`.CommRuntime.decided_flag`) is false, to
    ``decided_method`` (the class's, which takes the dispatch) after. The dispatch's existence,
    not the wrapper's history, decides, since every rank makes it at the same call."""
    def method(sendbuf, recvbuf):
        if decided[0]:
            return decided_method(sendbuf, recvbuf)
        return library_method(sendbuf, recvbuf)
    method.__name__, method.__doc__ = decided_method.__name__, decided_method.__doc__
    return method


class LibraryCall:
    """A nonblocking call run by the library's own method, in a CallPlan's shape
    (``call.runtime.nonblocking(call, ...)``): what a wrapper runs before the dispatch exists."""

    __slots__ = ("_method",)

    def __init__(self, method):
        self._method = method

    @property
    def runtime(self):
        """Itself: it runs the call."""
        return self

    def nonblocking(self, _, sendbuf, recvbuf):
        """The library's nonblocking call."""
        return self._method(sendbuf, recvbuf)
