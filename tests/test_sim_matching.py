"""Matching order of the simulator's indexed mailboxes against a plain list-scan reference.

MPI-4.1 §3.5: a receive takes the earliest arrived message that matches its
``(source, tag)`` pattern (wildcards included); an arriving message takes the earliest
posted matching receive. The reference below is the definition itself (scan in order).
"""

from __future__ import annotations

import random

import pytest
from mpi4py import MPI

from sparsecoll.sim import World

pytestmark = pytest.mark.timeout(60)

ANY_SOURCE, ANY_TAG = MPI.ANY_SOURCE, MPI.ANY_TAG


def matches(pattern, message) -> bool:
    """Whether a ``(source, tag)`` receive pattern matches a ``(source, tag, payload)`` message."""
    source, tag = pattern
    return source in (ANY_SOURCE, message[0]) and tag in (ANY_TAG, message[1])


def first_match(pattern, messages):
    """Index of the earliest message in ``messages`` that ``pattern`` matches, else None."""
    return next((i for i, m in enumerate(messages) if matches(pattern, m)), None)


def random_traffic(rng: random.Random, senders: int, count: int, tags: int) -> list:
    """Per sender, its messages ``(source, tag, payload)`` in sending order."""
    plan = [[] for _ in range(senders)]
    for k in range(count):
        source = rng.randrange(senders)
        plan[source].append((source, rng.randrange(tags), k))
    return plan


def random_pattern(rng: random.Random, senders: int, tags: int) -> tuple:
    """A receive pattern with wildcards about a third of the time each."""
    source = ANY_SOURCE if rng.random() < 0.3 else rng.randrange(senders)
    tag = ANY_TAG if rng.random() < 0.3 else rng.randrange(tags)
    return source, tag


@pytest.mark.parametrize("seed", range(12))
def test_unexpected_messages_are_received_in_matching_order(seed):
    rng = random.Random(seed)
    senders, tags = rng.randint(1, 5), rng.randint(1, 4)
    plan = random_traffic(rng, senders, rng.randint(1, 80), tags)
    arrived = [m for messages in plan for m in messages]  # senders run to completion in rank order
    receiver = senders
    # Receive patterns chosen so that each matches something; the reference decides which.
    remaining, patterns, expected = list(arrived), [], []
    while remaining:
        pattern = random_pattern(rng, senders, tags)
        index = first_match(pattern, remaining)
        if index is None:
            continue
        patterns.append(pattern)
        expected.append(remaining.pop(index))

    def fn(comm):
        if comm.rank < receiver:
            for source, tag, payload in plan[comm.rank]:
                comm.send((source, tag, payload), receiver, tag)
            return None
        got = []
        for source, tag in patterns:
            probe = MPI.Status()
            assert comm.iprobe(source, tag, probe)
            status = MPI.Status()
            value = comm.recv(None, source, tag, status)
            assert (status.Get_source(), status.Get_tag()) == (value[0], value[1])
            assert (probe.Get_source(), probe.Get_tag()) == (value[0], value[1])
            got.append(value)
        assert not comm.iprobe(ANY_SOURCE, ANY_TAG)
        return got

    assert World(senders + 1).run(fn)[receiver] == expected


@pytest.mark.parametrize("seed", range(12))
def test_arriving_messages_take_the_earliest_posted_receive(seed):
    rng = random.Random(100 + seed)
    senders, tags = rng.randint(1, 5), rng.randint(1, 4)
    plan = random_traffic(rng, senders, rng.randint(1, 60), tags)
    arrived = [m for messages in plan for m in messages]
    patterns = [random_pattern(rng, senders, tags) for _ in range(rng.randint(1, 60))]
    # Reference: each arriving message takes the earliest posted matching receive, else it
    # waits unexpected; afterwards, ANY_SOURCE/ANY_TAG receives drain in arrival order.
    open_receives = list(range(len(patterns)))
    matched = [None] * len(patterns)
    unexpected = []
    for message in arrived:
        k = next((k for k in open_receives if matches(patterns[k], message)), None)
        if k is None:
            unexpected.append(message)
        else:
            open_receives.remove(k)
            matched[k] = message
    receiver = 0

    def fn(comm):
        if comm.rank != receiver:
            # Virtual ranks start in rank order and run until they block: rank 0 has posted
            # every receive, and the senders send (eagerly) one after the other.
            for source, tag, payload in plan[comm.rank - 1]:
                comm.send((source, tag, payload), receiver, tag)
            comm.barrier()
            return None
        requests = [comm.irecv(None, source + 1 if source != ANY_SOURCE else source, tag)
                    for source, tag in patterns]
        comm.barrier()  # every message has arrived
        # (a failed test() would poll, and with every other rank done that is a livelock)
        got = [req.wait() if req.complete else None for req in requests]
        drained = []
        while comm.iprobe(ANY_SOURCE, ANY_TAG):
            drained.append(comm.recv(None, ANY_SOURCE, ANY_TAG))
        return got, drained

    got, drained = World(senders + 1).run(fn)[receiver]
    assert got == matched
    assert drained == unexpected
