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
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy

from .params import CLASSES, Machine, Placement


@dataclass
class CompiledPatterns:
    """All ranks' sends, step by step, as arrays (rank-major, posting order)."""

    size: int
    steps: list  # per step: (src, dst, items) int64 arrays

    @classmethod
    def from_patterns(cls, patterns) -> CompiledPatterns:
        """Compile a list (or rank-keyed mapping) of Patterns."""
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
        return cls(len(patterns), steps)


@dataclass
class Prediction:
    """Predicted completion time of every rank; ``latency`` is the maximum."""

    latency: float
    ends: numpy.ndarray
    block_bytes: int

    @property
    def critical_rank(self) -> int:
        """A rank that finishes last."""
        return int(numpy.argmax(self.ends))


def _classes(src, dst, placement: Placement | None) -> numpy.ndarray:
    """Pair class index per message (0 socket, 1 node, 2 network)."""
    if placement is None:
        return numpy.full(src.shape, 2, dtype=numpy.int64)
    per_node = placement.L * placement.S
    same_socket = (src // placement.L) == (dst // placement.L)
    same_node = (src // per_node) == (dst // per_node)
    return numpy.where(same_socket, 0, numpy.where(same_node, 1, 2))


def _costs(machine: Machine, cls: numpy.ndarray, m: numpy.ndarray) -> dict:
    """Per-message cost arrays (see the module docstring's table)."""
    def param(name):
        return numpy.array([float(machine.params(c)[name]) for c in CLASSES])[cls]

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
             duplex: bool = False, nic: bool = False) -> Prediction:
    """Predict when every rank finishes the collective (see the module docstring).

    ``patterns``: the Patterns of all ranks or a :class:`CompiledPatterns`;
    ``block_bytes``: bytes per item; ``placement``: rank placement (None: every pair is
    ``network`` class); ``nic``: serialize inter-node injections per node (needs placement).
    """
    compiled = patterns if isinstance(patterns, CompiledPatterns) else CompiledPatterns.from_patterns(patterns)
    if nic and placement is None:
        raise ValueError("nic: per-node injection serialization needs a placement")
    if block_bytes < 0:
        raise ValueError(f"block_bytes: expected >= 0, got {block_bytes}")
    n = compiled.size
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
            duplex: bool = False, nic: bool = False) -> dict:
    """``{block_bytes: latency}`` for several block sizes (patterns compiled once)."""
    compiled = patterns if isinstance(patterns, CompiledPatterns) else CompiledPatterns.from_patterns(patterns)
    return {m: evaluate(compiled, machine, m, placement, duplex, nic).latency for m in sizes}
