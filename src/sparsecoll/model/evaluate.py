"""Predict the latency of a whole Pattern set (all ranks) with Hockney or LogGP.

The evaluation is per step and exact for its assumptions, which are those of the papers:

* a rank starts step ``s`` when its step ``s-1`` is done (all its sends injected and all
  its receives completed); messages of step ``s`` are received in the peer's step ``s``
  (:func:`sparsecoll.verify.verify` guarantees it);
* single port (2023 paper §V-C: "only one message can be sent or received at a time"):
  a rank first injects its sends in posting order, then completes its receives in
  arrival order on the same port. ``duplex=True`` gives sends and receives separate
  ports, both free at the step start;
* a receive completes when the matching send's data has arrived, and not before the
  receiving port could take it;
* optional per-node injection serialization (``nic=True``, the 2023 paper's eq. 5 and 8
  idea that the ``S*L`` ranks of a node share one network port): inter-node sends of one
  node are injected one at a time, first come first served.

Per message of ``m`` bytes between a pair of class ``c`` (:mod:`.params`):

=============  ==========================  ===================================
quantity       Hockney                     LogGP
=============  ==========================  ===================================
send spacing   ``alpha + m*beta``          ``max(o, g + (m-1)G)``
sender busy    ``alpha + m*beta``          ``o``
arrival        start + ``alpha + m*beta``  start + ``o + (m-1)G + L``
receiver       busy ``alpha + m*beta``,    done ``max(port, arrival) + o``
               done ``max(port+T, arr)``
node port      ``alpha + m*beta``          ``g + (m-1)G``
=============  ==========================  ===================================

So one Hockney message costs ``alpha + m*beta`` end to end, and a rank of the direct
pattern with ``k`` sends and ``k`` receives needs ``2k(alpha + m*beta)`` (eq. 4).
Message size ``m`` is the number of items times the bytes per block.

``execution="dag"`` evaluates the same messages with the same per-message costs as the
DAG executor runs them (SC12 section III-C, :mod:`sparsecoll.execute.dag`), by a
discrete-event simulation over all messages (:func:`_dag_ends`):

* every receive is posted at time 0; a send may start once the messages it depends on
  (:func:`sparsecoll.pattern.dependencies`: the receives that brought its items, the sends
  ``Pattern.after`` orders before it) have completed and the previous send to the same
  peer has started (MPI's non-overtaking order); a send completes ``busy_send`` after its
  start, a receive at its ``done`` time above;
* each rank's port (one for sends and receives; two with ``duplex``) takes one operation at
  a time: when it is free, a send that may start (the lowest in posting order; no sooner
  than the injection spacing after the rank's previous send) before any receive, else the
  receive that arrived first among those whose data can be taken by then (Hockney: the
  transfer has begun; LogGP: it has arrived); ``nic`` serializes a node's inter-node
  injections as above;
* a rank finishes at its last completion.

On a one-step pattern both executions give the same times (the step's sends, then its
receives in arrival order), except where a Hockney receiver gets messages of different
sizes (the step formula orders them by arrival, the event simulation takes those whose
transfer has begun). On more steps the DAG is usually faster, but not always: the port
takes whatever may start, so a later-step send that waits for nothing may occupy it
before a receive on the critical path, which the step barrier would have taken first (a
list-scheduling anomaly; the tests build one). Without coloring, every registered
algorithm's Patterns at 64 ranks are no slower as a DAG, placements included (tests);
coloring's ordering dependencies make some multi-step ones slower: ``distance_halving``
with ``coloring=True`` by up to 3.6% at 64 ranks (placements 4x2, 8x2) and 0.7-1.3% at
1024 ranks (16x2, a sparse alltoall graph, 64 KiB blocks; benchmarks/sc12).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass

import numpy

from .params import PAIR_CLASSES, Machine, Placement


@dataclass
class CompiledPatterns:
    """All ranks' sends, step by step, as arrays (rank-major, posting order)."""

    size: int
    steps: list  # per step: (src, dst, items) int64 arrays
    graph: MessageGraph | None = None  # the dependency graph, for execution="dag"

    @classmethod
    def from_patterns(cls, patterns, graph: bool = False) -> CompiledPatterns:
        """Compile a list (or rank-keyed mapping) of Patterns (``graph``: also their dependency graph)."""
        if hasattr(patterns, "items") and not isinstance(patterns, (list, tuple)):
            patterns = [patterns[r] for r in sorted(patterns)]
        nsteps = max((len(p.steps) for p in patterns), default=0)
        per_step = [([], [], []) for _ in range(nsteps)]
        for rank, pattern in enumerate(patterns):
            for s, step in enumerate(pattern.steps):
                src, dst, items = per_step[s]
                for message in step.sends:
                    src.append(rank)
                    dst.append(message.peer)
                    items.append(len(message.items))
        steps = [tuple(numpy.asarray(x, dtype=numpy.int64) for x in arrays) for arrays in per_step]
        return cls(len(patterns), steps, MessageGraph.from_patterns(patterns) if graph else None)


@dataclass
class Prediction:
    """Predicted completion time of every rank; ``latency`` is the maximum."""

    latency: float
    ends: numpy.ndarray
    block_bytes: int


def _classes(src, dst, placement: Placement | None) -> numpy.ndarray:
    """Pair class index per message (0 socket, 1 node, 2 network); with no placement every
    message is charged as a network one (the papers' models, for ranks on separate nodes)."""
    if placement is None:
        return numpy.full(src.shape, 2, dtype=numpy.int64)
    return placement.pair_class_indices(src, dst)


def _costs(machine: Machine, cls: numpy.ndarray, m: numpy.ndarray) -> dict:
    """Per-message cost arrays (see the module docstring's table)."""
    def param(name):
        return numpy.array([float(machine.params(c)[name]) for c in PAIR_CLASSES])[cls]

    if machine.model == "hockney":
        T = param("alpha") + m * param("beta")
        zero = numpy.zeros_like(T)
        return {"spacing": T, "busy_send": T, "arrival": T, "busy_recv": T, "after": zero, "nic": T}
    L, o, g, G = (param(x) for x in ("L", "o", "g", "G"))
    mm = numpy.maximum(m - 1, 0)
    return {"spacing": numpy.maximum(o, g + mm * G), "busy_send": o, "arrival": o + mm * G + L,
            "busy_recv": o, "after": o, "nic": g + mm * G}


def _group_starts(keys: numpy.ndarray) -> numpy.ndarray:
    """Boolean mask of the first element of each run of equal sorted keys."""
    first = numpy.ones(keys.shape, dtype=bool)
    first[1:] = keys[1:] != keys[:-1]
    return first


def _exclusive_grouped_cumsum(values, first) -> numpy.ndarray:
    inclusive = numpy.cumsum(values)
    exclusive = inclusive - values
    group = numpy.cumsum(first) - 1
    return exclusive - exclusive[first][group]


def _grouped_cummax(values, first) -> numpy.ndarray:
    """Running maximum that restarts at each group start (groups contiguous)."""
    if values.size == 0:
        return values
    group = numpy.cumsum(first) - 1
    span = float(values.max() - values.min()) + 1.0
    shift = group * span
    return numpy.maximum.accumulate(values + shift) - shift


def _nic_starts(src, cls, cost, ready, placement: Placement) -> numpy.ndarray:
    """Send start times when the inter-node sends of a node share one port (FCFS)."""
    per_node = placement.L * placement.S
    starts = numpy.empty(src.size)
    spacing, nic = cost["spacing"].tolist(), cost["nic"].tolist()
    network = (cls == 2).tolist()
    first = numpy.flatnonzero(_group_starts(src)).tolist() + [src.size]
    by_node: dict = {}
    for lo, hi in zip(first[:-1], first[1:]):
        rank = int(src[lo])
        by_node.setdefault(rank // per_node, []).append((float(ready[rank]), lo, hi))
    for heap in by_node.values():
        heapq.heapify(heap)
        port = 0.0
        while heap:
            t, i, hi = heapq.heappop(heap)
            if network[i]:
                t = max(t, port)
                port = t + nic[i]
            starts[i] = t
            if i + 1 < hi:
                heapq.heappush(heap, (t + spacing[i], i + 1, hi))
    return starts


def evaluate(patterns, machine: Machine, block_bytes: int, placement: Placement | None = None,
             duplex: bool = False, nic: bool = False, execution: str = "steps") -> Prediction:
    """Predict when every rank finishes the collective (see the module docstring).

    ``patterns``: the Patterns of all ranks or a :class:`CompiledPatterns`;
    ``block_bytes``: bytes per item; ``placement``: rank placement (None: every pair is
    ``network`` class); ``nic``: serialize inter-node injections per node (needs placement);
    ``execution``: ``"steps"`` (a step starts when the rank's previous step is done) or
    ``"dag"`` (every message starts as soon as its dependencies allow; a CompiledPatterns
    must then be compiled with ``graph=True``).
    """
    if execution not in EXECUTIONS:
        raise ValueError(f"execution: expected one of {EXECUTIONS}, got {execution!r}")
    compiled = patterns if isinstance(patterns, CompiledPatterns) else \
        CompiledPatterns.from_patterns(patterns, graph=execution == "dag")
    if nic and placement is None:
        raise ValueError("nic: per-node injection serialization needs a placement")
    if block_bytes < 0:
        raise ValueError(f"block_bytes: expected >= 0, got {block_bytes}")
    n = compiled.size
    if execution == "dag":
        if compiled.graph is None:
            raise ValueError("patterns: compiled without the dependency graph; use "
                             "CompiledPatterns.from_patterns(patterns, graph=True) for execution='dag'")
        ends = _dag_ends(compiled.graph, machine, block_bytes, placement, duplex, nic)
        return Prediction(float(ends.max()) if n else 0.0, ends, block_bytes)
    ready = numpy.zeros(n)
    for src, dst, items in compiled.steps:
        if src.size == 0:
            continue
        cls = _classes(src, dst, placement)
        cost = _costs(machine, cls, (items * block_bytes).astype(float))
        first = _group_starts(src)
        if nic:
            start = _nic_starts(src, cls, cost, ready, placement)
        else:
            start = ready[src] + _exclusive_grouped_cumsum(cost["spacing"], first)
        sends_done = ready.copy()
        last = numpy.flatnonzero(numpy.r_[first[1:], True])
        sends_done[src[last]] = start[last] + cost["busy_send"][last]
        arrival = start + cost["arrival"]
        order = numpy.lexsort((arrival, dst))
        rdst = dst[order]
        rfirst = _group_starts(rdst)
        busy = cost["busy_recv"][order]
        prefix = busy + _exclusive_grouped_cumsum(busy, rfirst)
        port0 = (ready if duplex else sends_done)[rdst]
        done = prefix + numpy.maximum(port0, _grouped_cummax(arrival[order] + cost["after"][order] - prefix, rfirst))
        ends = sends_done.copy()
        rlast = numpy.flatnonzero(numpy.r_[rfirst[1:], True])
        ends[rdst[rlast]] = numpy.maximum(ends[rdst[rlast]], done[rlast])
        ready = ends
    return Prediction(float(ready.max()) if n else 0.0, ready, block_bytes)


def predict(patterns, machine: Machine, sizes, placement: Placement | None = None,
            duplex: bool = False, nic: bool = False, execution: str = "steps") -> dict:
    """``{block_bytes: latency}`` for several block sizes (patterns compiled once)."""
    compiled = patterns if isinstance(patterns, CompiledPatterns) else \
        CompiledPatterns.from_patterns(patterns, graph=execution == "dag")
    return {m: evaluate(compiled, machine, m, placement, duplex, nic, execution).latency for m in sizes}


# -- execution="dag": a discrete-event evaluation of the dependency graph -------------------

EXECUTIONS = ("steps", "dag")


@dataclass
class MessageGraph:
    """All ranks' sends as one dependency graph (what ``execution="dag"`` evaluates).

    Message ``k`` (rank-major, then step and posting order) goes from ``src[k]`` to
    ``dst[k]`` with ``items[k]`` items. ``after_send[k]`` / ``after_recv[k]``: the messages
    whose send / whose receive (at ``src[k]``) it waits for (:func:`sparsecoll.pattern.dependencies`);
    ``previous_to_peer[k]``: the previous message from ``src[k]`` to ``dst[k]``, or -1.
    """

    size: int
    src: numpy.ndarray
    dst: numpy.ndarray
    items: numpy.ndarray
    after_send: list
    after_recv: list
    previous_to_peer: list

    @classmethod
    def from_patterns(cls, patterns) -> MessageGraph:
        """The graph of a list of Patterns (one per rank, matched as :func:`sparsecoll.verify.verify` proves)."""
        from ..pattern import RECV, dependencies
        src, dst, items, sends_at = [], [], [], []
        for rank, pattern in enumerate(patterns):
            ids = {}
            for s, step in enumerate(pattern.steps):
                for i, message in enumerate(step.sends):
                    ids[(s, i)] = len(src)
                    src.append(rank)
                    dst.append(message.peer)
                    items.append(len(message.items))
            sends_at.append(ids)
        sent = {}  # (sender, receiver, step, n-th message between them in the step) -> message id
        for rank, pattern in enumerate(patterns):
            for s, step in enumerate(pattern.steps):
                count = {}
                for i, message in enumerate(step.sends):
                    n = count.get(message.peer, 0)
                    count[message.peer] = n + 1
                    sent[(rank, message.peer, s, n)] = sends_at[rank][(s, i)]
        after_send, after_recv, previous_to_peer = [], [], []
        for rank, pattern in enumerate(patterns):
            received = {}  # (step, index) of a receive -> the message id it matches
            for s, step in enumerate(pattern.steps):
                count = {}
                for j, message in enumerate(step.recvs):
                    n = count.get(message.peer, 0)
                    count[message.peer] = n + 1
                    try:
                        received[(s, j)] = sent[(message.peer, rank, s, n)]
                    except KeyError:
                        raise ValueError(f"patterns: rank {rank} step {s} receive {j} from {message.peer} has no "
                                         "matching send (run verify)") from None
            last_to_peer = {}
            for (s, i), refs in dependencies(pattern).items():
                k = sends_at[rank][(s, i)]
                after_recv.append([received[(ref_s, j)] for kind, ref_s, j in refs if kind == RECV])
                after_send.append([sends_at[rank][(ref_s, j)] for kind, ref_s, j in refs if kind != RECV])
                peer = dst[k]
                previous_to_peer.append(last_to_peer.get(peer, -1))
                last_to_peer[peer] = k
        return cls(len(patterns), *(numpy.asarray(x, dtype=numpy.int64) for x in (src, dst, items)),
                   after_send, after_recv, previous_to_peer)


def _dag_ends(graph: MessageGraph, machine: Machine, block_bytes: int, placement: Placement | None,
              duplex: bool, nic: bool) -> numpy.ndarray:
    """Completion time of every rank when every message starts as soon as it may (see :func:`evaluate`).

    A heap of events in time order: an *arrival* makes a receive takeable at its receiver's
    port, a *decision* lets a free port take its next operation (sends first, lowest posting
    order; else the arrived receive that arrived first). At equal times arrivals come first.
    """
    n, count = graph.size, int(graph.src.size)
    cls = _classes(graph.src, graph.dst, placement)
    cost = _costs(machine, cls, (graph.items * block_bytes).astype(float))
    spacing, busy_send, busy_recv, after, nic_cost = (cost[k].tolist() for k in
                                                      ("spacing", "busy_send", "busy_recv", "after", "nic"))
    flight = cost["arrival"].tolist()
    src, dst = graph.src.tolist(), graph.dst.tolist()
    network = (cls == 2).tolist()
    per_node = placement.L * placement.S if placement is not None else 1
    # who waits for what: one count per dependency, plus one for the previous send to the same peer
    waiting = [len(a) + len(b) + (p >= 0) for a, b, p in zip(graph.after_send, graph.after_recv,
                                                              graph.previous_to_peer)]
    on_send, on_recv, next_to_peer = ([[] for _ in range(count)], [[] for _ in range(count)], [-1] * count)
    for k in range(count):
        for d in graph.after_send[k]:
            on_send[d].append(k)
        for d in graph.after_recv[k]:
            on_recv[d].append(k)
        if graph.previous_to_peer[k] >= 0:
            next_to_peer[graph.previous_to_peer[k]] = k
    release = [0.0] * count
    ports = 2 * n if duplex else n  # port of rank r's sends: r; of its receives: r (+ n when duplex)
    recv_port = n if duplex else 0
    free = [0.0] * ports            # when the port can take its next operation
    next_injection = [0.0] * ports  # LogGP's gap between two injections
    node_free = {}                  # per node: its shared network port (nic)
    future = [[] for _ in range(ports)]   # sends whose dependencies are done: (release, id)
    ready = [[] for _ in range(ports)]    # ... and released by now: id (posting order)
    arrived = [[] for _ in range(ports)]  # receives takeable: (arrival, id)
    scheduled = [None] * ports
    token = [0] * ports
    ends = [0.0] * n
    events, sequence = [], itertools.count()
    started = 0

    def wake(port, t):
        t = max(t, free[port])
        if scheduled[port] is None or t < scheduled[port]:
            scheduled[port] = t
            token[port] += 1
            heapq.heappush(events, (t, 1, next(sequence), port, token[port]))

    def released(k, t):
        waiting[k] -= 1
        release[k] = max(release[k], t)
        if waiting[k] == 0:
            heapq.heappush(future[src[k]], (release[k], k))
            wake(src[k], release[k])

    for k in range(count):
        if waiting[k] == 0:
            heapq.heappush(future[src[k]], (0.0, k))
    for port in range(n):
        if future[port]:
            wake(port, 0.0)
    while events:
        t, kind, _, a, b = heapq.heappop(events)
        if kind == 0:  # message a's data can be taken by its receiver from time t
            port = dst[a] + recv_port
            heapq.heappush(arrived[port], (b, a))
            wake(port, t)
            continue
        port = a
        if b != token[port]:
            continue  # superseded by an earlier decision
        scheduled[port] = None
        queue = future[port] if port < n else ()
        while queue and queue[0][0] <= t:
            heapq.heappush(ready[port], heapq.heappop(queue)[1])
        if port < n and ready[port]:
            k = heapq.heappop(ready[port])
            start = max(t, next_injection[port])
            if nic and network[k]:
                node = src[k] // per_node
                start = max(start, node_free.get(node, 0.0))
                node_free[node] = start + nic_cost[k]
            started += 1
            done = start + busy_send[k]
            free[port], next_injection[port] = done, start + spacing[k]
            ends[src[k]] = max(ends[src[k]], done)
            arrival = start + flight[k]
            heapq.heappush(events, (arrival + after[k] - busy_recv[k], 0, next(sequence), k, arrival))
            if next_to_peer[k] >= 0:
                released(next_to_peer[k], start)
            for d in on_send[k]:
                released(d, done)
            wake(port, done)
            continue
        if (port >= n or not duplex) and arrived[port]:
            arrival, k = heapq.heappop(arrived[port])
            done = max(t + busy_recv[k], arrival + after[k])
            free[port] = done
            ends[dst[k]] = max(ends[dst[k]], done)
            for d in on_recv[k]:
                released(d, done)
            wake(port, done)
            continue
        if queue:
            wake(port, queue[0][0])
    if started != count:
        raise ValueError(f"patterns: {count - started} of {count} sends never become ready (a dependency cycle)")
    return numpy.asarray(ends, dtype=float)
