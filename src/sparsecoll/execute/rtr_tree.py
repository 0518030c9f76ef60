"""The RTR tree of SC12 section II-C2: ready-to-receive messages combined in a tree per sender.

T. Hoefler, T. Schneider, "Optimization Principles for Collective Neighborhood
Communications", SC12, section II-C2 ("Collective RDMA RTR Protocol"): instead of one
ready-to-receive (RTR) message from each receiver to the sender (Fig. 5(a)), the receivers
of one sender form a tree rooted at that sender and *combine* their RTR messages along it
(Fig. 5(b)), so a sender with ``tau`` receivers gets at most ``degree`` messages and the RTR
time drops from ``Omega(tau)`` to ``O(log tau)``; the degree of the tree is a parameter (the
paper: "most of today's networks require trees with an outdegree larger than two").

The shape, per step of a Pattern and per sender ``s``: ``s``'s distinct receivers other than
itself, in rank order starting after ``s`` (cyclically: ``(r - s) mod P``), as the nodes
``1..n`` of a complete ``degree``-ary tree in heap order with ``s`` as node 0 (node ``i``'s
parent is node ``(i - 1) // degree``). The paper fixes no order; starting after the sender
spreads the forwarding over the ranks (in plain rank order the lowest ranks were inner nodes of
nearly every tree: at 16 ranks on a random graph of density 0.5 with degree 4, one rank
received 40 RTR messages where the mean is 7.6; starting after the sender, at most 12). Only ``s`` knows
its receivers, so it computes its tree and tells each receiver its parent and its children
(with the number of messages ``s`` sends into each child's subtree) in one message per
(sender, receiver) pair, a collective protocol run once per Pattern when its first call plan
is made (:func:`build`). Every rank then knows its role in every tree it belongs to: the
shape is decided by the sender alone from its Pattern and reaches every other rank as data,
so every rank uses the same tree.

A node's combined RTR payload is its own block (the target addresses of the messages ``s``
puts into it) followed by its children's payloads in child order, so the blocks of a subtree
arrive in preorder; :attr:`StepRoles.blocks` tells the root where each receiver's block lies.
Without a tree (``degree`` None) every receiver is a child of the sender: the point-to-point
protocol of Fig. 5(a), derived locally (:func:`flat_roles`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..algorithms.protocol import ProtocolChannel, protocol_communicator

#: The option of the ``rma`` executors that asks for the tree: its degree.
OPTION = "rtr_tree"
_TAG = 0


@dataclass
class StepRoles:
    """One rank's roles in the RTR trees of one step.

    ``parent[s]``: where this rank sends its combined RTR in the tree of sender ``s`` (every
    sender that puts into it, itself excluded). ``children[s]``: its children in that tree
    (``s`` this rank included: its own tree), each ``(rank, messages in that child's subtree)``.
    ``blocks[child]`` (own tree only): the ``(receiver, messages)`` whose blocks the child's
    payload holds, in order. ``depth``: the depth of this rank's own tree (0: no receivers).
    """

    parent: dict = field(default_factory=dict)
    children: dict = field(default_factory=dict)
    blocks: dict = field(default_factory=dict)
    depth: int = 0


def kary_tree(receivers, degree: int) -> tuple:
    """``(parent, children, depth)`` of the ``degree``-ary heap-order tree rooted at node 0 over
    ``receivers`` (nodes ``1..n`` in the order given): ``parent[i]`` and ``children[i]`` are
    node numbers, ``depth`` the number of levels below the root."""
    count = len(receivers) + 1
    parent = {i: (i - 1) // degree for i in range(1, count)}
    children = {i: list(range(degree * i + 1, min(degree * i + degree, count - 1) + 1)) for i in range(count)}
    level = [0] * count
    for i in range(1, count):
        level[i] = level[parent[i]] + 1
    return parent, children, max(level)


def sender_tree(me: int, sends: dict, degree: int | None) -> tuple:
    """The tree of sender ``me`` for one step: ``(role of each receiver, the sender's children,
    blocks, depth)``; ``degree`` None: every receiver a child (no tree).

    ``sends``: receiver -> messages ``me`` puts into it. A receiver's role is ``(parent,
    [(child, messages in its subtree)])``; the children are ``[(child, messages in its subtree)]``
    and ``blocks`` as :attr:`StepRoles.blocks`.
    """
    receivers = sorted((peer for peer in sends if peer != me), key=lambda peer: (peer < me, peer))
    if not receivers:
        return {}, [], {}, 0
    if degree is None:
        degree = len(receivers)
    parent, children, depth = kary_tree(receivers, degree)
    rank_of = [me] + receivers
    preorder = {}

    def subtree(node: int) -> list:
        found = preorder.get(node)
        if found is None:
            found = [(rank_of[node], sends[rank_of[node]])] if node else []
            for child in children[node]:
                found.extend(subtree(child))
            preorder[node] = found
        return found

    def listed(node: int) -> list:
        return [(rank_of[c], sum(m for _, m in subtree(c))) for c in children[node]]

    roles = {rank_of[node]: (rank_of[parent[node]], listed(node)) for node in range(1, len(rank_of))}
    blocks = {rank_of[c]: subtree(c) for c in children[0]}
    return roles, listed(0), blocks, depth


def _message_counts(messages) -> dict:
    counts: dict = {}
    for m in messages:
        counts[m.peer] = counts.get(m.peer, 0) + 1
    return counts


def flat_roles(me: int, sends, recvs) -> StepRoles:
    """The roles of one step without a tree: every receiver sends its RTR to the sender (local)."""
    _, children, blocks, _ = sender_tree(me, _message_counts(sends), None)
    roles = StepRoles(parent={s: s for s in _message_counts(recvs) if s != me}, blocks=blocks,
                      depth=1 if children else 0)
    roles.children = {s: [] for s in roles.parent}
    roles.children[me] = children
    return roles


def build(pattern, comm, degree: int) -> list:
    """This rank's :class:`StepRoles` for every step of ``pattern`` with trees of ``degree``.

    Collective over ``comm`` (every rank, with its own Pattern of one family and algorithm):
    each sender sends every receiver other than itself one object with its roles in all steps.
    """
    me = comm.Get_rank()
    steps = [StepRoles() for _ in pattern.steps]
    outgoing: dict = {}
    sources = set()
    for index, step in enumerate(pattern.steps):
        receivers, children, blocks, depth = sender_tree(me, _message_counts(step.sends), degree)
        steps[index].children[me] = children
        steps[index].blocks = blocks
        steps[index].depth = depth
        for receiver, role in receivers.items():
            outgoing.setdefault(receiver, {})[index] = role
        sources.update(m.peer for m in step.recvs if m.peer != me)
    with protocol_communicator(comm) as private:
        received = ProtocolChannel(private).exchange(outgoing, sources, _TAG)
    for sender, roles in received.items():
        for index, (parent, children) in roles.items():
            steps[index].parent[sender] = parent
            steps[index].children[sender] = children
    return steps


def counts(steps) -> dict:
    """Deterministic RTR numbers of one run over ``steps`` (:class:`StepRoles`): messages this
    rank sends and receives (in all trees, and in its own as the sender: the fan-in the tree
    reduces) and the depth of its deepest own tree."""
    return {"rtr_sent": sum(len(roles.parent) for roles in steps),
            "rtr_received": sum(len(children) for roles in steps for children in roles.children.values()),
            "rtr_received_as_sender": sum(len(roles.blocks) for roles in steps),
            "rtr_tree_depth": max((roles.depth for roles in steps), default=0)}


def check_degree(value) -> int:
    """``value`` as a tree degree (an int >= 1), else TypeError/ValueError naming the option."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"executor_options: {OPTION} expected an int >= 1, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"executor_options: {OPTION} expected an int >= 1, got {value}")
    return value
