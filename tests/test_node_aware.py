"""node_aware (locality-aware aggregation) on virtual ranks: delivery, one message per node pair, counts."""

from __future__ import annotations

from collections import Counter

import pytest

from sparsecoll.algorithms import check_options
from sparsecoll.algorithms.direct import direct_pattern
from sparsecoll.algorithms.node_aware import GATHER, INTER, SCATTER, agent, node_members
from sparsecoll.pattern import stats
from sparsecoll.sim.harness import build_patterns
from sparsecoll.topology import placement
from sparsecoll.topology.generators import random_sparse
from sparsecoll.topology.specs import generate

pytestmark = pytest.mark.timeout(300)

NAME = "node_aware"
WORKLOADS = ("random:density=0.3,seed=3", "random:density=0.8,seed=5", "moore:D=2,R=1", "moore:D=2,R=2", "matrix:")
#: (ranks, ranks per node): 1, 2 and 4 nodes, and nodes whose last one is smaller
PLACEMENTS = ((16, 16), (16, 8), (16, 4), (14, 4), (13, 5))


def build(adjacency, family: str, per_node: int):
    """Every rank's Pattern (verified) with ``per_node`` ranks on each node."""
    return build_patterns(adjacency, NAME, family, {"ranks_per_socket": per_node})


def inter_node_pairs(patterns, per_node: int) -> Counter:
    """``(step, source node, destination node)`` -> messages sent between the two nodes in that step."""
    count = Counter()
    for pattern in patterns:
        for s, step in enumerate(pattern.steps):
            for message in step.sends:
                a, b = pattern.rank // per_node, message.peer // per_node
                if a != b:
                    count[(s, a, b)] += 1
    return count


@pytest.mark.parametrize("family", ["allgather", "alltoall"])
@pytest.mark.parametrize("spec", WORKLOADS)
@pytest.mark.parametrize("size, per_node", PLACEMENTS)
def test_delivers_with_one_message_per_node_pair(spec, family, size, per_node):
    adjacency = generate(spec, size)
    run = build(adjacency, family, per_node)  # verify() proves delivery
    pairs = inter_node_pairs(run.patterns, per_node)
    assert all(n == 1 for n in pairs.values()), f"several messages between one node pair: {pairs}"
    assert {s for s, _, _ in pairs} <= {INTER}, "only step 2 crosses nodes"
    # every node pair with an edge between them has its message, and no other pair
    wanted = {(a // per_node, b // per_node) for a, dests in enumerate(adjacency.destinations) for b in dests
              if a // per_node != b // per_node}
    assert {(a, b) for _, a, b in pairs} == wanted
    nodes = -(-size // per_node)
    assert all(p.info["nodes"] == nodes for p in run.patterns)


@pytest.mark.parametrize("family", ["allgather", "alltoall"])
def test_one_node_is_direct_without_protocol(family):
    adjacency = random_sparse(8, 0.5, seed=2)
    run = build(adjacency, family, 8)
    for pattern, topology in zip(run.patterns, run.topologies):
        assert pattern.steps == direct_pattern(topology, family).steps
        assert pattern.info["protocol_messages"] == 0
    assert all(c["messages"] == 0 and c["collectives"] == 0 for c in run.counters)


def test_counts_against_direct():
    """Inter-node messages fall to one per node pair; the blocks that cross nodes never grow."""
    size, per_node = 16, 4
    adjacency = generate("moore:D=2,R=2", size)
    for family in ("allgather", "alltoall"):
        aware = build(adjacency, family, per_node).patterns
        direct = build_patterns(adjacency, "direct", family).patterns

        def crossing(patterns):
            messages = items = 0
            for p in patterns:
                for step in p.steps:
                    for m in step.sends:
                        if p.rank // per_node != m.peer // per_node:
                            messages += 1
                            items += len(m.items)
            return messages, items

        (aware_messages, aware_items), (direct_messages, direct_items) = crossing(aware), crossing(direct)
        # a 4x4 periodic grid with radius 2 (24 edges per rank, 4 of them in its own row): every
        # rank reaches every other row, so 4 * 3 node pairs
        assert aware_messages == 12 and direct_messages == 16 * 20
        if family == "alltoall":
            assert aware_items == direct_items  # personal blocks: each crosses once either way
        else:
            assert aware_items == 12 * 4 < direct_items  # a row's 4 blocks, once per other row
        # the fourth rank of each row serves no other row (3 pairs per node): no step 2 of its own
        assert [stats(p)["steps"] for p in aware] == [3, 3, 3, 2] * 4


def test_agents_spread_over_the_node():
    members = node_members([0, 0, 0, 1, 1, 1, 2, 2, 3])
    assert members == [[0, 1, 2], [3, 4, 5], [6, 7], [8]]
    assert [agent(members, 0, other) for other in (1, 2, 3)] == [0, 1, 2]
    assert [agent(members, 2, other) for other in (3, 0, 1)] == [6, 7, 6]
    assert [agent(members, 3, other) for other in (0, 1, 2)] == [8, 8, 8]


def test_steps_are_gather_inter_scatter():
    run = build(generate("random:density=0.5,seed=1", 12), "alltoall", 4)
    for pattern in run.patterns:
        for s in (GATHER, SCATTER):
            assert all(m.peer // 4 == pattern.rank // 4 for m in pattern.steps[s].sends)


def test_detected_nodes_need_not_be_contiguous():
    got = placement.from_keys([(0, None), (5, None), (0, None), (5, None), (9, None)])
    assert got.nodes(5) == (0, 1, 0, 1, 2)
    assert placement.PlacementInfo(placement.Placement(2, 2), "option").nodes(9) == (0, 0, 0, 0, 1, 1, 1, 1, 2)


def test_noncontiguous_nodes_deliver():
    """The Pattern is correct for any node assignment every rank shares (here: ranks dealt round robin)."""
    from sparsecoll.algorithms.node_aware import cross_node_blocks, node_aware_pattern
    from sparsecoll.verify import verify
    topologies = list(random_sparse(10, 0.5, seed=7).topologies())
    nodes = tuple(r % 3 for r in range(10))
    members = node_members(nodes)
    for family in ("allgather", "alltoall"):
        blocks = {t.rank: cross_node_blocks(t, family, nodes) for t in topologies}
        views = {r: {} for r in range(10)}
        for r, by_node in blocks.items():
            for other, (sent, needed) in by_node.items():
                served = views[agent(members, nodes[r], other)].setdefault(other, ({}, {}))
                if sent:
                    served[0][r] = sent
                if needed:
                    served[1][r] = needed
        verify([node_aware_pattern(t, family, nodes, views[t.rank]) for t in topologies], topologies)


@pytest.mark.parametrize("options, message", [
    ({"inter": "common_neighbor"}, "inter: expected one of \\['direct'\\]"),
    ({"ranks_per_socket": 0}, "ranks_per_socket: expected a positive integer"),
    ({"ranks_per_socket": 9}, "ranks_per_socket: 9 is larger than the communicator"),
])
def test_bad_options_name_the_argument(options, message):
    with pytest.raises(ValueError, match=message):
        check_options(NAME, options, 8)


def test_auto_considers_it_only_on_several_nodes():
    from sparsecoll.model import choice
    from sparsecoll.model.profile import BUILTIN
    topologies = list(generate("moore:D=2,R=2", 16).topologies())
    load = BUILTIN.load_for(1.0)
    one_node, four_nodes = placement.Placement(16), placement.Placement(4)
    for family in ("allgather", "alltoall"):
        assert NAME not in choice.candidates(topologies[0], family)
        assert NAME not in choice.local_costs(topologies[0], family, {}, load, one_node, {})
        costs = choice.local_costs(topologies[0], family, {}, load, four_nodes, {})
        assert costs[NAME].estimated
        built = build(generate("moore:D=2,R=2", 16), family, 4).patterns
        for topology, pattern in zip(topologies, built):
            # node-mates of a stencil have alike traffic, so the estimate charges this rank's real messages
            estimate = choice.estimate_node_aware(topology, family, {}, load, four_nodes)
            real = choice.pattern_cost(pattern, load, four_nodes)
            assert (estimate.steps, estimate.messages) == (real.steps, real.messages)
            assert estimate.per_byte == pytest.approx(real.per_byte)
