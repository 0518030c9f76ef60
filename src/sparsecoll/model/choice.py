"""What ``algorithm="auto"`` runs: every candidate's predicted time, from its Pattern and a profile.

The model (parameters: :mod:`.profile`) charges one rank's schedule of a call with block
size ``m`` bytes as

    per_call(form) + sum over steps [ per_step + max alpha
                                      + sum over messages (overhead [+ rendezvous] + items * m * beta) ]

where the messages of a step are its sends and its receives (one port, as the Hockney model
of the 2023 paper's eq. 4 charges a rank both), ``rendezvous`` is paid by a message past the
library's eager limit (:class:`sparsecoll.execute.p2p.WireLimits`), and every step with such a
message but one pays ``rendezvous_step`` (the handshake a step that depends on the one before
waits for; a one-step call's is in its per-message costs), ``alpha``, ``beta``,
``overhead`` and ``rendezvous`` are those of the message's placement level (``self``,
``socket``, ``node``, ``network``), ``per_call`` is sparsecoll's (or, for ``native``, the
library's) cost of one call of that form, and ``per_step`` sparsecoll's cost of one
scheduling round (``native`` runs one step and pays no ``per_step``), and a byte in a message
that combines several blocks costs the family's ``combined_factor`` times ``beta`` (the
library moves it as a derived datatype), and every byte sparsecoll's executor moves its
``byte_factor`` times ``beta`` (1 for the library's call). So a multi-step schedule is charged
for what it costs here. sparsecoll's executor joins the messages of a step to one peer within the
library's limits (:func:`sparsecoll.execute.p2p.wire_runs`), so its messages are counted per
size class as they go on the wire; the library sends one message per edge. A candidate's time is
``fixed[form] + by_class[class] + per_byte * m`` (:class:`Cost`).

Candidates are every registered algorithm that supports the topology and family, and
``native`` (the library's call, whose schedule is ``direct``'s one step). Algorithms that
build their Pattern locally are charged on that Pattern. Those that build it by a
protocol (``common_neighbor``, ``distance_halving``) are first charged on an *estimate* from
cheap local statistics (:data:`ESTIMATORS`; their papers' own counts), and on their real
Pattern once it is built. ``node_aware`` is estimated on this rank's share of its own Pattern
as if every node-mate had this rank's cross-node traffic, and is a candidate only where the
placement has more than one node (on one node it is ``direct``, so the choice is unchanged).
``loggp_tree`` (SC12 tree transformations) is not a candidate: what
it builds depends on the out-degrees of all ranks (which ranks are heavy, which light, who
pairs with whom), which no rank sees locally, so there is no honest local estimate (on a
graph without a heavy rank it is ``direct``, on a hot spot a tree). Name it explicitly
(``algorithm="loggp_tree"``) to run it.

Under ``cdag_static_buffers`` (SC12 section II-C: buffers fixed for the life of a persistent
request, so RMA windows are registered once) every such candidate ``X`` also has a twin
``X[rma]``, the same schedule on the RMA executor, charged for persistent requests only
(:func:`rma_cost`, from the profile's ``rma`` costs); blocking and nonblocking calls register
their buffers anew each call and never run it.

The choice is made per form and per block-size class (:func:`size_class`) from the
**maximum over ranks** of each candidate's time (a collective finishes with its slowest
rank): the runtime reduces every rank's :func:`local_costs` with one ``MPI.MAX`` allreduce,
so every rank takes the same decision from the same numbers, whatever its own profile or
Pattern. A candidate replaces ``native`` only where it is predicted at most
:data:`NATIVE_MARGIN` times native's time, so model error falls on the library's side.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy

from .. import algorithms
from ..algorithms import node_aware
from ..bind import final_copies
from ..execute.p2p import wire_limits, wire_runs
from ..pattern import Pattern
from . import paper2023
from .profile import FORMS, Load

NATIVE = "native"
#: The suffix of a candidate that runs its algorithm's schedule on the RMA executor.
RMA_SUFFIX = "[rma]"
RMA_EXECUTOR = "rma"
#: Block-size classes: class 0 is 0 bytes, class ``k`` holds sizes in ``[2**(k-1), 2**k)``.
CLASSES = 32
#: A candidate must be predicted at most this fraction of native's time to replace it.
NATIVE_MARGIN = 0.9
#: A blocking or nonblocking form whose table runs the library at some size classes and other
#: algorithms at others cannot call the library's method directly: a call first has its size
#: compared (the profile's ``native.shortcut``). Such a table is kept only where that costs at
#: most this fraction of the library's predicted call at every class it leaves to the library;
#: else the form runs the library at every size (:func:`keep_the_library_whole`). 8 ranks on 2
#: cores, Moore neighborhood, 8 B allgather: the comparison cost 1.155 x the library's call on
#: Open MPI, 1.038 x on MPICH. It is well under the 5 % by which auto may be slower than the
#: library, since ``calibrate``'s figure is noisy: at 5 % (twenty-third run of
#: ``benchmarks/auto``) MPICH's calibration measured the comparison at 3.43 us (7.83-9.22 us in
#: three others), 2.5 % of the library's 8 B call, so the stencil's and Moore's blocking
#: allgather tables mixed the library with ``distance_halving``, and their small calls then ran
#: at 1.047-1.069 x the library's (1.041-1.051 x in the bench of auto and the library alone).
SHORTCUT_ALLOWANCE = 0.02
#: A *pinned* collective (:mod:`sparsecoll.runtime.auto`: a v/w form, or a regular one where a
#: rank cannot tell its block size) runs the choice of its first call's size class at whatever
#: size later calls have, so a candidate may replace ``native`` in its blocking and nonblocking
#: calls only where it is predicted at most this many times native's time at every class
#: (:func:`safe_at_every_size`): the 2-core VM, Open MPI, the 27-point stencil at 8 ranks,
#: persistent ``alltoallv`` pinned at 8 B: ``direct`` (predicted 0.71 x native there, 1.30 x at
#: 64 KiB) ran 64 KiB blocks at 0.78 x the library's speed.
PINNED_ALLOWANCE = 1.05


def size_class(nbytes: int) -> int:
    """The block-size class of ``nbytes`` (0 for 0 bytes, ``k`` for ``[2**(k-1), 2**k)``)."""
    return min(int(nbytes).bit_length(), CLASSES - 1)


def class_range(size_class: int) -> str:
    """The block sizes of ``size_class`` (:func:`size_class`) in words."""
    return "0 B" if size_class == 0 else f"{2 ** (size_class - 1)}-{2 ** size_class - 1} B"


#: The block size each class is predicted at: the geometric middle of its range.
CLASS_BYTES = numpy.array([0.0] + [2.0 ** (k - 1) * math.sqrt(2.0) for k in range(1, CLASSES)])


@dataclass(frozen=True)
class Cost:
    """One rank's predicted time of one candidate, ``fixed[form] + by_class[class] + per_byte * m``
    seconds (``by_class``: the per-message costs, which depend on how many messages go on the
    wire at that size), and its counts (``messages``: sends at the smallest class)."""

    fixed: tuple  # one per form of FORMS
    per_byte: float
    steps: int
    messages: int
    estimated: bool = False
    by_class: tuple = (0.0,) * CLASSES

    def seconds(self) -> numpy.ndarray:
        """The time per form (rows) and size class (columns)."""
        return (numpy.asarray(self.fixed)[:, None] + numpy.asarray(self.by_class)[None, :]
                + self.per_byte * CLASS_BYTES[None, :])


def _level_of(placement, rank: int):
    """The placement level of a message from ``rank`` to ``peer``; with no placement (a
    calibration's fit, all ranks on one machine) every other rank is on the same socket."""
    if placement is None:
        return lambda peer: "self" if peer == rank else "socket"
    return lambda peer: "self" if peer == rank else placement.pair_class(rank, peer)


def pattern_cost(pattern: Pattern, load: Load, placement=None, native: bool = False, recv_items=None) -> Cost:
    """One rank's :class:`Cost` of running ``pattern`` (``native``: as the library's call).

    With ``recv_items`` (the topology's receive blocks) a sparsecoll schedule is also charged its
    :func:`final_copies`: one more step, and per copy a message to self each way."""
    level_of = _level_of(placement, pattern.rank)
    per_call = load.native_per_call if native else load.sparsecoll_per_call
    per_step = 0.0 if native else load.sparsecoll_per_step
    combined = 1.0 if native else load.combined_factor[pattern.family]
    byte_factor = 1.0 if native else load.sparsecoll_byte_factor[pattern.family]
    fixed = per_byte = 0.0
    by_class = numpy.zeros(CLASSES)
    limits = wire_limits()
    eager = limits.eager_bytes
    steps = messages = 0
    waits = numpy.zeros(CLASSES)  # per class: the handshake waits of the steps, all summed ...
    longest_wait = numpy.zeros(CLASSES)  # ... and the longest, which the per-message costs hold
    for step in pattern.steps:
        if not (step.sends or step.recvs):
            continue
        steps += 1
        latency = 0.0
        wait = numpy.zeros(CLASSES)  # per class: this step's wait for a handshake, if a message needs one
        for direction in (step.sends, step.recvs):
            params = [load.levels[level_of(message.peer)] for message in direction]
            items = [len(message.items) for message in direction]
            for level, count in zip(params, items):
                latency = max(latency, level["alpha"])
                per_byte += count * level["beta"] * byte_factor * (combined if count > 1 else 1.0)
            if native:  # one message per edge
                for level, count in zip(params, items):
                    past = count * CLASS_BYTES > eager
                    by_class += level["overhead"] + level["rendezvous"] * past
                    wait = numpy.maximum(wait, level["rendezvous_step"] * past)
                continue
            peers = [message.peer for message in direction]
            for c in range(CLASSES):  # the messages that go on the wire at this block size
                sizes = [count * CLASS_BYTES[c] for count in items]
                for run in wire_runs(peers, sizes, limits):
                    level = params[run[0]]
                    by_class[c] += level["overhead"]
                    if sum(sizes[i] for i in run) > eager:
                        by_class[c] += level["rendezvous"]
                        wait[c] = max(wait[c], level["rendezvous_step"])
        waits += wait
        longest_wait = numpy.maximum(longest_wait, wait)
        fixed += per_step + latency
        messages += len(step.sends)
    by_class += waits - longest_wait  # a step that waits for the one before it waits for its handshake
    copies = 0 if native or recv_items is None else final_copies(pattern, recv_items)
    if copies:
        own = load.levels["self"]
        steps += 1
        fixed += per_step
        by_class += 2 * copies * own["overhead"]
        per_byte += copies * own["beta"] * byte_factor
    return Cost(tuple(per_call[form] + fixed for form in FORMS), per_byte, steps, messages,
                by_class=tuple(by_class.tolist()))


def _mean_level(topology, load: Load, placement) -> dict:
    """The level parameters averaged over this rank's out-neighbors (``socket`` if it has none)."""
    level_of = _level_of(placement, topology.rank)
    peers = [p for p in topology.destinations if p >= 0] or [None]
    levels = [load.levels["socket" if p is None else level_of(p)] for p in peers]
    return {name: sum(level[name] for level in levels) / len(levels)
            for name in ("alpha", "beta", "overhead", "rendezvous", "rendezvous_step")}


def _estimate(load: Load, family: str, params: dict, steps: int, sends: float, items: float,
              combined: bool = True) -> Cost:
    """A Cost from counts: ``steps`` rounds, ``sends`` messages (as many received), ``items`` blocks
    sent (``combined``: several to a message, as forwarded blocks travel; else one each).

    Priced as :func:`pattern_cost` prices a Pattern, with every message of the mean size
    ``items / sends`` blocks: a size class whose message is past the library's eager limit pays
    ``rendezvous`` per send and receive, and ``rendezvous_step`` for every step but one."""
    fixed = steps * (load.sparsecoll_per_step + params["alpha"]) + 2 * sends * params["overhead"]
    per_byte = (2 * items * params["beta"] * load.sparsecoll_byte_factor[family]
                * (load.combined_factor[family] if combined else 1.0))
    past = (items / sends if sends else 0.0) * CLASS_BYTES > wire_limits().eager_bytes
    by_class = past * (2 * sends * params["rendezvous"] + max(steps - 1, 0) * params["rendezvous_step"])
    return Cost(tuple(load.sparsecoll_per_call[form] + fixed for form in FORMS), per_byte,
                steps, int(round(sends)), estimated=True, by_class=tuple(by_class.tolist()))


def estimate_common_neighbor(topology, family: str, options: dict, load: Load, placement) -> Cost:
    """Common-neighbor combining (HiPC 2017) on a random graph of this rank's density.

    Two ranks share ``c = d * delta`` out-neighbors in expectation (out-degree ``d``, density
    ``delta = d / (n-1)``); while ``c >= theta`` a round pairs friends (one exchange) and
    halves the ``c`` common messages, each then carrying two blocks; the rest go directly.
    """
    n, d = topology.size, topology.outdegree
    delta = min(d / max(n - 1, 1), 1.0)
    theta = options.get("theta", 4)
    rounds, sends, items, remaining = 0, 0.0, 0.0, float(d)
    while n > 2 and remaining > 0 and remaining * delta >= theta:
        common = remaining * delta
        rounds += 1
        exchanged = 1.0 if family == "allgather" else common / 2
        sends += 1 + common / 2
        items += exchanged + common
        remaining -= common
    sends += remaining
    items += remaining
    return _estimate(load, family, _mean_level(topology, load, placement), 2 * rounds + 1, sends, items)


def estimate_distance_halving(topology, family: str, options: dict, load: Load, placement) -> Cost:
    """Distance halving (Sharifian et al. 2023) from the paper's eqs. 1-3 at this rank's density.

    The density counts this rank's distinct destinations: the pattern sends a block to a rank
    once however many edges lead there (a small periodic grid wraps several offsets onto one
    rank). Where no halving happens (``n <= L``, one socket) the pattern is the final step alone,
    one message of this rank's block to each distinct destination, and that is what is charged:
    eqs. 2 and 3 describe the final step after halvings on a random graph, and at ``n <= L``
    would charge ``n_in`` messages of ``delta * n_in`` blocks each (on 8 ranks of a 9-point
    stencil, 64 blocks where the pattern sends 5)."""
    n = topology.size
    peers = len({p for p in topology.destinations if p >= 0 and p != topology.rank})
    delta = min(peers / max(n - 1, 1), 1.0)
    L = placement.L if placement is not None else n
    if n <= L:
        return _estimate(load, family, _mean_level(topology, load, placement), 1, peers, peers, combined=False)
    halvings = paper2023.n_off(n, L, delta)
    final = paper2023.n_in(n, L, delta)
    items_final = final * max(delta * final, 1.0)
    sends = halvings + final
    items = (2.0 ** (halvings + 1) - 1.0) + items_final
    return _estimate(load, family, _mean_level(topology, load, placement), int(halvings) + 1, sends, items)


def estimate_node_aware(topology, family: str, options: dict, load: Load, placement) -> Cost:
    """Locality-aware aggregation on ``placement``'s nodes: this rank's gather sends and scatter
    receives exactly, and the node pairs it serves as agent as if each node-mate sent and needed
    what this rank does (:func:`sparsecoll.algorithms.node_aware.assumed_view`)."""
    nodes = tuple(placement.node(rank) for rank in range(topology.size))
    pattern = node_aware.node_aware_pattern(topology, family, nodes, node_aware.assumed_view(topology, family, nodes))
    return dataclasses.replace(pattern_cost(pattern, load, placement), estimated=True)


#: Cheap predictions of the algorithms that build their Pattern by a protocol (a protocol algorithm
#: without one, ``loggp_tree``, is not a candidate: see the module docstring).
ESTIMATORS = {"common_neighbor": estimate_common_neighbor, "distance_halving": estimate_distance_halving,
              "node_aware": estimate_node_aware}


def several_nodes(topology, placement) -> bool:
    """Whether ``placement`` spreads ``topology``'s communicator over more than one node."""
    return placement is not None and placement.node(topology.size - 1) > 0


def candidates(topology, family: str, placement=None) -> list:
    """The algorithms ``auto`` considers for ``family`` on ``topology``: ``native`` first, then every
    registered algorithm that supports them and can be predicted (built locally, or estimated);
    those that need several nodes only where ``placement`` has them."""
    names = [NATIVE]
    for name, algorithm in algorithms.REGISTRY.items():
        if algorithm.runs_library or algorithm.unsupported_reason(topology, family) is not None:
            continue
        if algorithm.needs_nodes and not several_nodes(topology, placement):
            continue
        if algorithm.builds_locally or name in ESTIMATORS:
            names.append(name)
    return names


def split_candidate(name: str) -> tuple:
    """``(algorithm, executor or None)`` of a candidate name (``"direct[rma]"`` -> ``("direct", "rma")``)."""
    if name.endswith(RMA_SUFFIX):
        return name[: -len(RMA_SUFFIX)], RMA_EXECUTOR
    return name, None


def rma_cost(cost: Cost, rma: dict | None) -> Cost:
    """``cost`` (a schedule on the step executor) run as a persistent request on the RMA executor:
    every message a rank sends and receives costs ``per_message`` more (a put and its RTR message
    through the library's RMA path; negative where that is cheaper) and every byte ``byte_factor``
    times as much; other forms cannot run it (infinite). Never below zero at the smallest class.
    ``rma`` None (this rank's profile did not measure it): infinite in every form, so that the
    ranks still predict the same candidates and the slowest rank's maximum rules the twin out."""
    if rma is None:
        return Cost((math.inf,) * len(FORMS), 0.0, cost.steps, cost.messages, cost.estimated, cost.by_class)
    extra = 2 * cost.messages * rma["per_message"]
    floor = -(cost.fixed[FORMS.index("persistent")] + min(cost.by_class))  # keeps every class's time >= 0
    fixed = tuple(value + max(extra, floor) if form == "persistent" else math.inf
                  for form, value in zip(FORMS, cost.fixed))
    return Cost(fixed, cost.per_byte * rma["byte_factor"], cost.steps, cost.messages, cost.estimated, cost.by_class)


def candidate_cost(name: str, pattern: Pattern, load: Load, placement, recv_items=None) -> Cost:
    """A candidate's Cost on its built Pattern (an ``[rma]`` twin on the RMA executor)."""
    if split_candidate(name)[1] == RMA_EXECUTOR:
        return rma_cost(pattern_cost(pattern, load, placement, recv_items=recv_items), load.rma)
    return pattern_cost(pattern, load, placement, native=name == NATIVE, recv_items=recv_items)


def local_costs(topology, family: str, options: dict, load: Load, placement, patterns: dict,
                static_buffers: bool = False) -> dict:
    """``{candidate: Cost}`` for this rank; ``patterns`` holds the Patterns built so far (by name),
    and gets those of locally built candidates added. ``static_buffers``: add the ``[rma]`` twin
    of every candidate but ``native`` (infinite where ``load`` has no RMA costs: the candidates,
    which every rank's allreduce lines up, must not depend on a rank's profile).

    A locally built candidate is charged on the Pattern its algorithm builds, before the
    transformations of :func:`sparsecoll.algorithms.build_pattern`: ``coloring`` (a protocol)
    only reorders each step's sends and adds ordering dependencies, which leaves every
    peer's message sequence, and so the wire runs this model charges, unchanged."""
    costs = {}
    for name in candidates(topology, family, placement):
        algorithm = algorithms.get("direct" if name == NATIVE else name)
        pattern = patterns.get(name)
        if pattern is None and algorithm.builds_locally:
            pattern = patterns[name] = algorithm.build(topology, None, options, family)
        if pattern is not None:
            costs[name] = pattern_cost(pattern, load, placement, native=name == NATIVE,
                                       recv_items=topology.recv_items(family))
        else:
            costs[name] = ESTIMATORS[name](topology, family, options, load, placement)
    if static_buffers:
        for name in [name for name in costs if name != NATIVE]:
            costs[name + RMA_SUFFIX] = rma_cost(costs[name], load.rma)
    return costs


def decide(seconds: dict, native_allowed: bool = True) -> list:
    """Per form and size class, the winner among ``{candidate: array[form, class]}`` (maxima over ranks).

    ``native`` wins unless another candidate is predicted at most :data:`NATIVE_MARGIN` of its
    time, and less than it (a profile may charge nothing: a tie at 0 goes to the library); with
    ``native_allowed=False`` (the library computes this neighborhood wrongly,
    :func:`library_fault`) the fastest other candidate wins.
    """
    names = list(seconds)
    table = numpy.stack([seconds[name] for name in names])  # candidate, form, class
    others = [i for i, name in enumerate(names) if name != NATIVE]
    native = table[names.index(NATIVE)]
    result = []
    for f in range(len(FORMS)):
        row = []
        for c in range(CLASSES):
            best = min(others, key=lambda i: table[i, f, c], default=None)
            if best is not None and (not native_allowed or table[best, f, c] < native[f, c]
                                     and table[best, f, c] <= NATIVE_MARGIN * native[f, c]):
                row.append(names[best])
            else:
                row.append(NATIVE)
        result.append(row)
    return result


def safe_at_every_size(seconds: dict, forms) -> dict:
    """``seconds`` ({candidate: array[form, class]}) where, in the rows of ``forms``, every candidate
    predicted over :data:`PINNED_ALLOWANCE` times native's time at some class is charged an
    infinite time at every class (so :func:`decide` never chooses it there)."""
    native = seconds[NATIVE]
    rows = [FORMS.index(form) for form in forms]
    safe = {}
    for name, times in seconds.items():
        if name != NATIVE:
            unsafe = [f for f in rows if numpy.any(times[f] > PINNED_ALLOWANCE * native[f])]
            if unsafe:
                times = times.copy()
                times[unsafe] = math.inf
        safe[name] = times
    return safe


def first_unsafe_class(seconds: dict, name: str, form: str) -> tuple:
    """The smallest size class where ``name`` is predicted over :data:`PINNED_ALLOWANCE` times
    native's time in ``form``, and that ratio; ``(None, None)`` where there is none."""
    f = FORMS.index(form)
    native, times = seconds[NATIVE][f], seconds[name][f]
    ratios = numpy.where(times > 0, math.inf, 1.0)  # where native's is 0 (a profile may charge nothing)
    numpy.divide(times, native, out=ratios, where=native > 0)
    over = numpy.flatnonzero(ratios > PINNED_ALLOWANCE)
    return (int(over[0]), float(ratios[over[0]])) if over.size else (None, None)


def keep_the_library_whole(table: list, native: numpy.ndarray, shortcut_seconds: float) -> list:
    """The blocking and nonblocking rows of ``table`` (:func:`decide`'s) that mix the library
    with other algorithms where reaching the library through the size comparison costs
    ``shortcut_seconds`` (the maximum over ranks), more than :data:`SHORTCUT_ALLOWANCE` of
    ``native``'s time (array[form, class]) at one of the classes the row leaves to it: those rows
    become ``native`` at every class (in place). Returns the forms changed."""
    changed = []
    for form in ("blocking", "nonblocking"):
        f = FORMS.index(form)
        library = [c for c, name in enumerate(table[f]) if name == NATIVE]
        if library and len(library) < len(table[f]) and (
                shortcut_seconds > SHORTCUT_ALLOWANCE * min(native[f, c] for c in library)):
            table[f] = [NATIVE] * len(table[f])
            changed.append(form)
    return changed


def local_nonblocking_library_fault(topology, library: str) -> str | None:
    """Why the library's own *nonblocking* call gives wrong results here, where every rank knows
    it without asking the others (None otherwise): a call that must stay local cannot agree.

    Open MPI's crash on a graph with a PROC_NULL neighbor is in its blocking calls alone (the
    nonblocking ones deliver); its wrong matching of repeated Cartesian neighbors (ompi#14430)
    hits the nonblocking calls, and a Cartesian communicator repeats a real neighbor exactly
    where a periodic dimension has 1 or 2 ranks, which is the same on every rank."""
    from ..topology import CART
    if not library.startswith("Open MPI") or topology.kind != CART:
        return None
    return library_fault(topology, library)


def library_absent_side(topology, library: str, collective: str) -> str | None:
    """The side (``"send"`` or ``"recv"``) of a regular neighborhood ``collective`` on which this
    rank has no blocks while it has some on the other, where the MPI library must be given that
    side with the other's count and datatype (None elsewhere).

    MPI-4.1 (section 8.6.1) wants a process's send signature equal to the receive signature at
    every other process, whatever the graph, and nothing moves on a side without edges. From a
    plain array there mpi4py infers a count of 0 (it has no blocks to size), and Open MPI 5.0.x
    compares the rank's two counts (open-mpi/ompi#14452): its ``Neighbor_alltoall`` raises
    ``MPI_ERR_TRUNCATE`` on that rank (the others wait for good) and its blocking
    ``Neighbor_allgather`` hangs; given equal counts it delivers, so auto states them. (An
    allgather always sends one block, so only a rank without in-edges qualifies.)"""
    if not library.startswith("Open MPI") or collective not in ("allgather", "alltoall"):
        return None
    sends = topology.outdegree > 0 or collective == "allgather"
    receives = topology.indegree > 0
    if sends == receives:
        return None
    return "recv" if sends else "send"


def library_fault(topology, library: str) -> str | None:
    """Why the MPI library's own collective gives wrong results on this rank's neighborhood (None
    if it is not known to): the faults the README lists that ``auto`` must not run into.

    Open MPI: a Cartesian communicator that repeats a real neighbor (a periodic dimension of 1 or
    2 ranks; ompi#14430: its nonblocking and persistent alltoall deliver blocks to the wrong
    places); ``PROC_NULL`` repeated (the corners of a non-periodic grid) is not such a fault
    (every form of allgather and alltoall on 2x2, 3x3, 1x4, 4x1 and 2x2x2 non-periodic grids,
    their v and w variants on all but 4x1, bit for bit against ``direct``). A distributed graph
    with a ``PROC_NULL`` neighbor crashes its blocking calls."""
    from ..topology import CART, PROC_NULL
    if not library.startswith("Open MPI"):
        return None
    sources = [rank for rank in topology.sources if rank != PROC_NULL]
    destinations = [rank for rank in topology.destinations if rank != PROC_NULL]
    repeated = len(set(sources)) < len(sources) or len(set(destinations)) < len(destinations)
    if topology.kind == CART and repeated:
        return "Open MPI 5.0 matches repeated neighbors of a Cartesian communicator wrongly (open-mpi/ompi#14430)"
    if topology.kind != CART and PROC_NULL in (*topology.sources, *topology.destinations):
        return ("Open MPI 5.0's blocking neighborhood collectives crash on a distributed graph with a PROC_NULL "
                "neighbor (segfault in its basic component; cart_neighborhood_create makes such graphs on "
                "non-periodic grids)")
    return None
