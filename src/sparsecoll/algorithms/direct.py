"""``direct``: the one-step pattern every MPI library uses.

Every rank sends each out-edge's block in its own message and receives each in-edge's
block in its own message, all in one round (MPI-4.1 §8.6 gives this as the defining
"equivalent code" of the neighborhood collectives). No paper beyond the standard.
"""

from __future__ import annotations

from ..pattern import Message, Pattern, Step
from ..topology import PROC_NULL, Topology
from .base import Algorithm


def direct_pattern(topology: Topology, family: str) -> Pattern:
    """One step: a message per non-``PROC_NULL`` edge, receives ordered to match by label."""
    sends = tuple(Message(d, (item,)) for d, item in zip(topology.destinations, topology.send_items(family))
                  if d != PROC_NULL)
    recv_items = topology.recv_items(family)
    # Messages between one pair match in posting order, so post receives in label order
    # (the order in which the sender posts the matching edges).
    order = sorted((i for i, s in enumerate(topology.sources) if s != PROC_NULL),
                   key=lambda i: (topology.in_labels[i], i))
    recvs = tuple(Message(topology.sources[i], (recv_items[i],)) for i in order)
    return Pattern(family, topology.rank, (Step(sends, recvs),))


def build(topology: Topology, comm, options: dict, family: str) -> Pattern:
    """Registry entry point (purely local: no communication)."""
    return direct_pattern(topology, family)


ALGORITHM = Algorithm(
    name="direct",
    summary="one message per edge in one round (sparsecoll's executor, MPI's own pattern)",
    build=build,
    forwards=False,
)
