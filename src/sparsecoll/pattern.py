"""The Pattern IR: who sends which logical blocks ("items") to whom, step by step.

A Pattern belongs to one rank and one collective family. It knows no sizes and no
buffers, so it is computed once per (topology, algorithm, family) and cached.

Items are small tuples:

* allgather family: ``(origin,)`` -- the one send block of rank ``origin``;
* alltoall family: ``(origin, dest, label)`` -- the block rank ``origin`` sends along
  its out-edge to ``dest`` that carries matching label ``label`` (see
  :meth:`sparsecoll.topology.Topology.out_labels`).

Within one step, all sends and receives start together and the step ends when all
have completed. Between a pair of ranks, the n-th message ``a`` lists for peer ``b`` in
a step matches the n-th receive ``b`` lists from ``a`` in that step (MPI's
non-overtaking order); :func:`sparsecoll.verify.verify` checks that they agree.

Dependencies (SC12 section III-C). The steps are one valid order of a dependency graph
whose vertices are the messages. A send depends on

* the receive that last brought each item it carries (its *data* dependencies, derived
  from the items by :func:`dependencies`: a forwarded item leaves once the message that
  brought it has arrived), and
* the messages listed for it in ``Pattern.after`` (*ordering* dependencies that a
  transformation adds, e.g. schedule coloring's "send in color order").

A reference to a message is ``(kind, step, index)`` with ``kind`` :data:`SEND` or
:data:`RECV` and ``index`` its position in the step's ``sends`` or ``recvs``. Every
dependency points backwards: a receive of an earlier step, or a send of an earlier step
or of the same step listed before it. Step execution therefore honours every dependency;
the DAG executor (:mod:`sparsecoll.execute.dag`) starts a send as soon as its own
dependencies have completed, without waiting for the rest of the step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ALLGATHER = "allgather"
ALLTOALL = "alltoall"
FAMILIES = (ALLGATHER, ALLTOALL)
#: The regular collectives: one block size for every edge (the v/w ones give sizes per edge).
REGULAR = (ALLGATHER, ALLTOALL)

Item = tuple

#: The kinds of a message reference ``(kind, step, index)``.
SEND, RECV = "send", "recv"

#: The collectives of each family, as named in mpi4py (without the Neighbor_ prefix).
COLLECTIVE_FAMILY = {
    "allgather": ALLGATHER,
    "allgatherv": ALLGATHER,
    "allgatherw": ALLGATHER,
    "alltoall": ALLTOALL,
    "alltoallv": ALLTOALL,
    "alltoallw": ALLTOALL,
}


def family_of(collective: str) -> str:
    """Return the family (``"allgather"`` or ``"alltoall"``) of a collective or family name."""
    try:
        return COLLECTIVE_FAMILY[collective]
    except KeyError:
        raise ValueError(
            f"collective: expected one of {sorted(COLLECTIVE_FAMILY)}, got {collective!r}"
        ) from None


def gather_item(origin: int) -> Item:
    """The allgather-family item: the send block of rank ``origin``."""
    return (origin,)


def personal_item(origin: int, dest: int, label: int) -> Item:
    """The alltoall-family item: ``origin``'s block for ``dest`` along the edge labelled ``label``."""
    return (origin, dest, label)


@dataclass(frozen=True, slots=True)
class Message:
    """One message: the peer rank and the ordered items it carries."""

    peer: int
    items: tuple


@dataclass(frozen=True, slots=True)
class Step:
    """The messages one rank sends and receives in one round."""

    sends: tuple = ()
    recvs: tuple = ()


@dataclass(frozen=True)
class Pattern:
    """One rank's schedule of item-level messages for one collective family.

    ``info`` holds algorithm-specific facts (protocol cost, choices made) that
    :func:`stats` passes through to ``plan_stats``. ``after`` maps a send ``(step, index)``
    to the message references it must wait for beyond its data dependencies (see the
    module docstring); most algorithms leave it empty.
    """

    family: str
    rank: int
    steps: tuple
    info: dict = field(default_factory=dict, compare=False)
    after: dict = field(default_factory=dict, compare=False)


def dependencies(pattern: Pattern) -> dict:
    """``{(step, index): refs}``: what every send waits for, its data dependencies (no repeats)
    followed by the Pattern's ordering ones.

    An item is read from where it last arrived (the rule :mod:`sparsecoll.bind` places
    by), so a send carrying it depends on that receive; an item never received is read
    from the send buffer and adds nothing.
    """
    last = {}  # item -> (RECV, step, index) of its latest arrival so far
    sends = {}
    for s, step in enumerate(pattern.steps):
        for i, message in enumerate(step.sends):
            refs = [last[item] for item in message.items if item in last]
            refs += pattern.after.get((s, i), ())
            sends[(s, i)] = tuple(dict.fromkeys(refs))
        for i, message in enumerate(step.recvs):
            for item in message.items:
                last[item] = (RECV, s, i)
    return sends


def stats(pattern: Pattern) -> dict:
    """The deterministic numbers every algorithm reports for one rank's Pattern."""
    sends = sum(len(s.sends) for s in pattern.steps)
    recvs = sum(len(s.recvs) for s in pattern.steps)
    send_items = sum(len(m.items) for s in pattern.steps for m in s.sends)
    recv_items = sum(len(m.items) for s in pattern.steps for m in s.recvs)
    offrank = sum(1 for s in pattern.steps for m in s.sends if m.peer != pattern.rank)
    return {
        "family": pattern.family,
        "steps": sum(1 for s in pattern.steps if s.sends or s.recvs),
        "sends": sends,
        "recvs": recvs,
        "send_items": send_items,
        "recv_items": recv_items,
        "sends_to_others": offrank,
        **pattern.info,
    }
