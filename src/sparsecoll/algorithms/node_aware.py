"""``node_aware``: locality-aware aggregation of the blocks that leave a node.

The hierarchy idea of the universal hierarchical algorithm (the paper in
``shared/papers/004_*``, section II and Fig. 1: copy-in on the node, one inter-node
exchange of the aggregated data, copy-out on the node; Fig. 2 places the blocks bound for
one destination next to each other so the inter-node step moves them together), applied
to neighborhood collectives as locality-aware aggregation: a local gather, one inter-node
message per (source node, destination node) pair, a local scatter. Both families, so
every collective of the allgather and alltoall families, v and w forms included.

The Pattern has three steps:

1. **gather** (intra-node): every rank sends, to the node-mate that is its node's *agent*
   for a destination node, the blocks it has for that node; blocks for node-mates travel
   directly in this step (one message per pair of ranks: forwarded and direct blocks for
   one node-mate share it);
2. **inter-node**: the agent of node ``A`` for node ``B`` sends the agent of ``B`` for ``A``
   one message with every block that leaves ``A`` for ``B`` (an allgather block once, however
   many ranks of ``B`` need it), and receives the blocks ``B`` sends to ``A``;
3. **scatter** (intra-node): each agent sends every node-mate the blocks it received for it.

Agents: the ranks of a node, in rank order, serve the other nodes at distances 1, 2, ...
(modulo the number of nodes) in turn, one rank per node pair and direction both ways
(:func:`agent`), so a node talking to every other node spreads its pairs evenly over its
ranks. The choice depends only on the placement, which every rank shares.

The Pattern is built identically on every rank: the placement (nodes) comes from
:mod:`sparsecoll.topology.placement` (``Split_type(COMM_TYPE_SHARED)``, or the options
``ranks_per_socket`` and ``sockets_per_node`` (a node holds ``L * S`` ranks), or
``SPARSECOLL_PLACEMENT``), as for ``distance_halving``. An agent must know which blocks its
node-mates send to and need from the nodes it serves, which only they know: a protocol on
each node (:func:`exchange_node_view`) collects every rank's cross-node blocks at the
node's lowest rank, which hands each agent the part it serves (two messages per rank but
the lowest, none between nodes). With one node there is no cross-node block: the Pattern
is ``direct``'s and no protocol runs.

"Through the shared window": the intra-node steps are MPI point-to-point messages between
ranks of one node, which MPI libraries carry as copies through shared memory (MPICH's and
Open MPI's shared-memory transports); the executors need nothing special for them, so
every executor (``steps``, ``dag``, ``rma``) runs this Pattern and ``verify`` proves it.

Composition at the inter-node level (registry: the option ``inter`` of this entry, e.g.
``node_aware+inter=direct`` on the command line): ``"direct"`` (one message per node pair,
the scheme above) is the only value implemented. Scheduling step 2 by ``common_neighbor``
(alltoall and allgather) or ``distance_halving`` (allgather) on the node-level graph is not
done, for three reasons. (1) Those algorithms forward through intermediate nodes, and a node
pair's aggregate arrives at a relaying node at one agent and leaves it from another (the
agent of the next pair), so every forwarding round needs an intra-node hand-over step between
the relay's agents (three steps become ``2k + 1`` for ``k`` node-level rounds), or one leader
per node carries every pair, which gives up spreading the pairs over the node's ranks.
(2) In the allgather family the aggregates one node sends to two nodes overlap (a block
bound for both), so they are not node-level items of their own: routed through one relay
along two node-level routes, a block arrives there twice, which the IR forbids (``verify``)
and which doubles its bytes; a node-level allgather instead would carry blocks to nodes that
do not need them. (3) Their builders' protocols would run on a node-level communicator of
agents with a node-level topology (``Split`` plus a graph communicator built on the fly),
which the simulator's virtual communicator does not offer.
"""

from __future__ import annotations

from collections import defaultdict

from ..pattern import ALLGATHER, Message, Pattern, Step, gather_item
from ..topology import PROC_NULL, Topology
from ..topology.placement import check_options as check_placement_options
from ..topology.placement import resolve as resolve_placement
from .base import Algorithm
from .direct import direct_pattern
from .protocol import ProtocolChannel, protocol_communicator

#: The ways step 2 (the node-level exchange) can be scheduled; see the module docstring.
INTER_SCHEDULES = ("direct",)
GATHER, INTER, SCATTER = 0, 1, 2
#: Protocol tags: members to the node's lowest rank, and back.
TAG_UP, TAG_DOWN = 0, 1


def node_members(nodes) -> list:
    """``members[n]``: the ranks of node ``n`` in rank order, from ``nodes[rank]`` (the node of each rank)."""
    members: list = [[] for _ in range(max(nodes) + 1)] if len(nodes) else []
    for rank, node in enumerate(nodes):
        members[node].append(rank)
    return members


def agent(members, node: int, other: int) -> int:
    """The rank of ``node`` that carries its traffic with node ``other`` (both directions).

    The node's ranks, in rank order, take the other nodes at distance 1, 2, ... in turn.
    """
    ranks = members[node]
    distance = (other - node) % len(members)
    return ranks[(distance - 1) % len(ranks)]


def cross_node_blocks(topology: Topology, family: str, nodes) -> dict:
    """``{other node: (items sent there, items needed from there)}`` for one rank, each sorted
    without repeats (an allgather block goes once to a node however many ranks need it)."""
    mine = nodes[topology.rank]
    out, needed = defaultdict(set), defaultdict(set)
    for dest, item in zip(topology.destinations, topology.send_items(family)):
        if dest != PROC_NULL and nodes[dest] != mine:
            out[nodes[dest]].add(item)
    for source, item in zip(topology.sources, topology.recv_items(family)):
        if source != PROC_NULL and nodes[source] != mine:
            needed[nodes[source]].add(item)
    return {node: (tuple(sorted(out[node])), tuple(sorted(needed[node]))) for node in sorted(set(out) | set(needed))}


def exchange_node_view(channel: ProtocolChannel, rank: int, members, nodes, blocks: dict) -> dict:
    """What this rank serves as agent: ``{other node: (sent, needed)}`` with ``sent[r]`` the items
    node-mate ``r`` sends to that node and ``needed[r]`` those it needs from it (collective on the node).

    Every rank sends its :func:`cross_node_blocks` to its node's lowest rank, which sends each
    agent the entries of the nodes it serves.
    """
    node = nodes[rank]
    leader = members[node][0]
    if rank != leader:
        channel.send(blocks, leader, TAG_UP)
        view, _ = channel.recv(leader, TAG_DOWN)
        channel.finish()
        return view
    everyone = channel.collect([r for r in members[node] if r != rank], TAG_UP)
    everyone[rank] = blocks
    views: dict = {r: {} for r in members[node]}
    for member in sorted(everyone):
        for other, (sent, needed) in everyone[member].items():
            served = views[agent(members, node, other)].setdefault(other, ({}, {}))
            if sent:
                served[0][member] = sent
            if needed:
                served[1][member] = needed
    for member in members[node]:
        if member != rank:
            channel.send(views[member], member, TAG_DOWN)
    channel.finish()
    return views[rank]


def assumed_view(topology: Topology, family: str, nodes) -> dict:
    """The agent view this rank would get if every node-mate had its cross-node traffic
    (:func:`exchange_node_view`'s result without communicating): what a cost estimate charges
    before the protocol has run. In the allgather family each node-mate sends its own block and
    needs the blocks this rank needs (as node-mates of a stencil do); in the alltoall family it
    sends and needs as many blocks as this rank, blocks of its own (made distinct by its rank)."""
    members = node_members(nodes)
    node = nodes[topology.rank]

    def alike(items, own) -> dict:
        return {member: own(member, items) for member in members[node]} if items else {}

    def distinct(member, items):
        return tuple((member, *item) for item in items)

    view = {}
    for other, (sent, needed) in cross_node_blocks(topology, family, nodes).items():
        if agent(members, node, other) != topology.rank:
            continue
        if family == ALLGATHER:
            view[other] = (alike(sent, lambda member, items: (gather_item(member),)),
                           alike(needed, lambda member, items: items))
        else:
            view[other] = (alike(sent, distinct), alike(needed, distinct))
    return view


def _messages(by_peer: dict) -> tuple:
    """One message per peer (in rank order) carrying its items sorted, without repeats."""
    return tuple(Message(peer, tuple(sorted(items))) for peer, items in sorted(by_peer.items()) if items)


def node_aware_pattern(topology: Topology, family: str, nodes, view: dict) -> Pattern:
    """The three-step Pattern of one rank from the node of every rank and its agent ``view``
    (:func:`exchange_node_view`); see the module docstring."""
    rank = topology.rank
    members = node_members(nodes)
    node = nodes[rank]
    gather_out, gather_in = defaultdict(set), defaultdict(set)
    scatter_out, scatter_in = defaultdict(set), defaultdict(set)
    for dest, item in zip(topology.destinations, topology.send_items(family)):
        if dest == PROC_NULL:
            continue
        if nodes[dest] == node:
            gather_out[dest].add(item)  # within the node: straight to the destination
        elif agent(members, node, nodes[dest]) != rank:
            gather_out[agent(members, node, nodes[dest])].add(item)
    for source, item in zip(topology.sources, topology.recv_items(family)):
        if source == PROC_NULL:
            continue
        if nodes[source] == node:
            gather_in[source].add(item)
        elif agent(members, node, nodes[source]) != rank:
            scatter_in[agent(members, node, nodes[source])].add(item)
    inter_out, inter_in = {}, {}
    for other, (sent, needed) in view.items():
        peer = agent(members, other, node)
        inter_out[peer] = {item for member, items in sent.items() for item in items}
        inter_in[peer] = {item for member, items in needed.items() for item in items}
        for member, items in sent.items():
            if member != rank:
                gather_in[member].update(items)
        for member, items in needed.items():
            if member != rank:
                scatter_out[member].update(items)
    steps = [None] * 3
    steps[GATHER] = Step(_messages(gather_out), _messages(gather_in))
    steps[INTER] = Step(_messages(inter_out), _messages(inter_in))
    steps[SCATTER] = Step(_messages(scatter_out), _messages(scatter_in))
    return Pattern(family, rank, tuple(steps))


def build(topology: Topology, comm, options: dict, family: str) -> Pattern:
    """Registry entry point: placement (collective unless overridden), the node protocol, the Pattern."""
    size = comm.Get_size()
    placement = resolve_placement(comm, options.get("ranks_per_socket"), options.get("sockets_per_node"))
    nodes = placement.nodes(size)
    info = {**placement.describe(), "nodes": max(nodes) + 1, "inter": options.get("inter", "direct")}
    if max(nodes) == 0:
        pattern = direct_pattern(topology, family)
        return Pattern(family, pattern.rank, pattern.steps, {**info, "protocol_messages": 0})
    members = node_members(nodes)
    blocks = cross_node_blocks(topology, family, nodes)
    with protocol_communicator(comm) as protocol:
        channel = ProtocolChannel(protocol)
        view = exchange_node_view(channel, topology.rank, members, nodes, blocks)
    pattern = node_aware_pattern(topology, family, nodes, view)
    info.update({"agent_pairs": len(view), "protocol_messages": channel.sent})
    return Pattern(family, pattern.rank, pattern.steps, info)


def check_options(options: dict, size: int) -> dict:
    """Registry hook: the placement options must fit ``size`` ranks; ``inter`` must be a known schedule."""
    check_placement_options(size, options.get("ranks_per_socket"), options.get("sockets_per_node"))
    inter = options.get("inter", "direct")
    if inter not in INTER_SCHEDULES:
        raise ValueError(f"inter: expected one of {list(INTER_SCHEDULES)}, got {inter!r} (scheduling the "
                         f"node-level exchange by a forwarding algorithm is not implemented: see the docstring "
                         f"of sparsecoll.algorithms.node_aware)")
    return options


ALGORITHM = Algorithm(
    name="node_aware",
    summary="locality-aware aggregation: gather on the node, one message per node pair, scatter on the node",
    build=build,
    paper="Universal hierarchical algorithm for shared-memory collectives (section II, Figs. 1-2: copy-in, "
          "inter-node exchange, copy-out), as locality-aware aggregation (MPI Advance's neighbor alltoallv)",
    options={"ranks_per_socket": None, "sockets_per_node": None, "inter": "direct"},
    check=check_options,
    builds_locally=False,
    needs_nodes=True,
)
