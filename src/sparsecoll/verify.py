"""Prove that the Patterns of all ranks deliver a neighborhood collective.

:func:`verify` is a pure function over the Patterns and Topologies of every rank. It
checks that

1. every message a rank sends in a step has the matching receive at its peer in the
   same step, carrying the same items in the same order (MPI's non-overtaking order
   pairs the n-th message between two ranks in a step with the n-th receive), so no
   step waits on a later one;
2. a rank only sends items it holds: its own blocks, or items it received in an
   earlier step;
3. every receive block that is not a ``PROC_NULL`` hole obtains its item;
4. nothing else arrives: a received item is needed by the rank or forwarded by it
   later, and no item arrives more often than the rank has blocks for it;
5. the dependency form (:func:`sparsecoll.pattern.dependencies`) is sound: every
   dependency names an existing message and points backwards (a receive of an earlier
   step, a send of an earlier step or listed earlier in the same step), so no message
   depends on a later one; and every forwarded item has arrived, by a receive the send
   depends on directly or through other sends, before it leaves.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence

from .pattern import RECV, SEND, dependencies


class VerificationError(AssertionError):
    """A Pattern set that does not implement the collective; the message says where."""


def _as_mapping(obj) -> Mapping:
    return obj if isinstance(obj, Mapping) else dict(enumerate(obj))


def verify(patterns: Mapping | Sequence, topologies: Mapping | Sequence) -> dict:
    """Check the Patterns of all ranks against their Topologies; raise VerificationError.

    Returns a small summary (ranks, steps, messages, items) on success.
    """
    patterns = _as_mapping(patterns)
    topologies = _as_mapping(topologies)
    if set(patterns) != set(topologies):
        raise VerificationError("patterns and topologies cover different ranks")
    families = {p.family for p in patterns.values()}
    if len(families) > 1:
        raise VerificationError(f"patterns mix collective families {sorted(families)}")
    if not patterns:
        return {"ranks": 0, "steps": 0, "messages": 0, "items": 0}
    family = families.pop()
    nsteps = max((len(p.steps) for p in patterns.values()), default=0)

    for rank, pattern in patterns.items():
        if pattern.rank != rank:
            raise VerificationError(f"pattern stored for rank {rank} says rank {pattern.rank}")
    messages = items = 0
    for s in range(nsteps):  # 1. matching sends and receives, step by step
        step_messages, step_items = _check_matching(s, patterns)
        messages += step_messages
        items += step_items
    for rank, pattern in patterns.items():  # 2-5. per rank: holding, delivery, nothing extra, dependencies
        _check_delivery(rank, pattern, topologies[rank], family)
        _check_dependencies(rank, pattern, topologies[rank], family)
    return {"ranks": len(patterns), "steps": nsteps, "messages": messages, "items": items}


def _check_matching(s: int, patterns: Mapping) -> tuple:
    """Step ``s``: every pair's sends equal the receives posted for them, in order; ``(messages, items)``."""
    messages = items = 0
    sent = defaultdict(list)      # (src, dst) -> [items, ...] in send order
    expected = defaultdict(list)  # (src, dst) -> [items, ...] in receive order
    for rank, pattern in patterns.items():
        if s >= len(pattern.steps):
            continue
        step = pattern.steps[s]
        for m in step.sends:
            if m.peer not in patterns:
                raise VerificationError(f"step {s}: rank {rank} sends to unknown rank {m.peer}")
            sent[(rank, m.peer)].append(tuple(m.items))
            messages += 1
            items += len(m.items)
        for m in step.recvs:
            if m.peer not in patterns:
                raise VerificationError(f"step {s}: rank {rank} receives from unknown rank {m.peer}")
            expected[(m.peer, rank)].append(tuple(m.items))
    for pair in set(sent) | set(expected):
        if sent.get(pair, []) != expected.get(pair, []):
            a, b = pair
            raise VerificationError(
                f"step {s}: rank {a} sends {sent.get(pair, [])} to rank {b}, "
                f"which expects {expected.get(pair, [])}"
            )
    return messages, items


def _check_delivery(rank: int, pattern, topo, family: str) -> None:
    """One rank: it holds every item it sends, obtains every item its receive blocks want,
    and receives nothing it neither needs nor forwards (nor more often than it has blocks for)."""
    own = {item for item in topo.send_items(family) if item is not None}
    wanted = Counter(item for item in topo.recv_items(family) if item is not None)
    held = set(own)
    arrivals = Counter()
    forwarded = set()
    for s, step in enumerate(pattern.steps):
        for m in step.sends:
            for item in m.items:
                if item not in held:
                    raise VerificationError(
                        f"step {s}: rank {rank} sends item {item} to {m.peer} before holding it")
                if item not in own:
                    forwarded.add(item)
        for m in step.recvs:
            for item in m.items:
                arrivals[item] += 1
                held.add(item)
    for item in wanted:
        if item not in held:
            raise VerificationError(f"rank {rank} never obtains item {item} for its receive blocks")
    for item, n in arrivals.items():
        if item not in wanted and item not in forwarded:
            raise VerificationError(f"rank {rank} receives item {item} that it neither needs nor forwards")
        if n > max(1, wanted.get(item, 0)):
            raise VerificationError(
                f"rank {rank} receives item {item} {n} times but has {wanted.get(item, 0)} blocks for it")


def _check_dependencies(rank: int, pattern, topo, family: str) -> None:
    """One rank: dependencies point backwards at existing messages, and each forwarded item
    has arrived by a receive in the send's dependency closure."""
    steps = pattern.steps
    for key in pattern.after:
        s, i = key
        if not (0 <= s < len(steps) and 0 <= i < len(steps[s].sends)):
            raise VerificationError(f"rank {rank}: ordering dependencies given for send {key}, which does not exist")
    own = {item for item in topo.send_items(family) if item is not None}
    deps = dependencies(pattern)
    reached = {}  # (step, index) of a send -> the receives it waits for, directly or through sends
    last = {}     # item -> its latest arrival before the step being checked
    for s, step in enumerate(steps):
        for i, message in enumerate(step.sends):
            closure = set()
            for ref in deps[(s, i)]:
                kind, rs, ri = ref
                if kind == RECV:
                    if not (0 <= rs < s and 0 <= ri < len(steps[rs].recvs)):
                        raise VerificationError(
                            f"rank {rank}: send {i} of step {s} depends on {ref}, not an earlier receive")
                    closure.add(ref)
                elif kind == SEND:
                    if not (0 <= rs < len(steps) and 0 <= ri < len(steps[rs].sends) and (rs, ri) < (s, i)):
                        raise VerificationError(
                            f"rank {rank}: send {i} of step {s} depends on {ref}, not an earlier send")
                    closure |= reached[(rs, ri)]
                else:
                    raise VerificationError(f"rank {rank}: send {i} of step {s} has a malformed dependency {ref}")
            reached[(s, i)] = closure
            for item in message.items:
                if item in own and item not in last:
                    continue
                if last.get(item) not in closure:
                    raise VerificationError(
                        f"rank {rank}: send {i} of step {s} forwards item {item} without depending on its arrival")
        for i, message in enumerate(step.recvs):
            for item in message.items:
                last[item] = (RECV, s, i)
