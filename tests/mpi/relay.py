"""A test-only two-step algorithm: every item travels origin -> relay -> destination.

The relay of origin ``o`` is rank ``(o + 1) % size``. It exercises what the one-step
``direct`` pattern never does: items in transit (temporary space, and the size pass
for v/w calls), forwarding from the receive buffer, one arrival serving several
receive blocks (local copies), and messages to self.
"""

from __future__ import annotations

from collections import defaultdict

from sparsecoll.algorithms import REGISTRY, Algorithm, register
from sparsecoll.pattern import Message, Pattern, Step
from sparsecoll.topology import PROC_NULL

NAME = "test_relay"


def build(topology, comm, options, family):
    """Two steps; needs every rank's destinations (one allgather on ``comm``)."""
    size, me = topology.size, topology.rank
    everyone = comm.allgather((topology.destinations, topology.out_labels))

    def relay(origin):
        return (origin + 1) % size

    def routed_items(origin):
        """(dest, item) pairs origin's blocks travel along (one per needed delivery)."""
        dests, labels = everyone[origin]
        pairs = []
        for d, label in zip(dests, labels):
            if d == PROC_NULL:
                continue
            item = (origin,) if family == "allgather" else (origin, d, label)
            if (d, item) not in pairs:
                pairs.append((d, item))
        return pairs

    def first_hop_items(origin):
        return sorted({item for _, item in routed_items(origin)})

    step0_sends = [Message(relay(me), tuple(first_hop_items(me)))] if first_hop_items(me) else []
    step0_recvs = [Message(o, tuple(first_hop_items(o))) for o in range(size)
                   if relay(o) == me and first_hop_items(o)]
    outgoing = defaultdict(list)  # dest -> items this rank relays to it
    for o in range(size):
        if relay(o) == me:
            for d, item in routed_items(o):
                if d != me:
                    outgoing[d].append(item)
    incoming = defaultdict(list)  # relay -> items it brings me
    for o in range(size):
        if relay(o) != me:
            for d, item in routed_items(o):
                if d == me:
                    incoming[relay(o)].append(item)
    step1_sends = [Message(d, tuple(sorted(items))) for d, items in sorted(outgoing.items())]
    step1_recvs = [Message(r, tuple(sorted(items))) for r, items in sorted(incoming.items())]
    return Pattern(family, me, (Step(tuple(step0_sends), tuple(step0_recvs)),
                                Step(tuple(step1_sends), tuple(step1_recvs))))


if NAME not in REGISTRY:
    register(Algorithm(name=NAME, summary="test only: every item through a relay rank", build=build,
                       builds_locally=False))  # its build allgathers
