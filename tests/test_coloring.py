"""Schedule coloring (SC12 section II-A3, III-C1) on virtual ranks.

The distributed protocol must give the sequential Welsh-Powell coloring, a proper one
(no rank sends or receives two edges of one color in a step), and the colored Patterns
must order and chain their sends by it and still verify.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from sparsecoll.algorithms import build_pattern, builds_locally, check_options
from sparsecoll.algorithms.coloring import color, edge_colors, greedy_colors
from sparsecoll.algorithms.direct import direct_pattern
from sparsecoll.pattern import ALLGATHER, ALLTOALL, FAMILIES, SEND, Message, Pattern, Step
from sparsecoll.runtime.plan import make_plan
from sparsecoll.sim.harness import build_patterns
from sparsecoll.sim.world import RankError, World
from sparsecoll.topology.generators import Adjacency
from sparsecoll.topology.specs import generate
from sparsecoll.verify import verify

pytestmark = pytest.mark.timeout(300)


def paper_alltoall(size: int) -> Adjacency:
    """The paper's example: every rank sends to 0, 1, ..., P-1 (itself left out), in that order."""
    others = tuple(tuple(q for q in range(size) if q != r) for r in range(size))
    return Adjacency(size, others, others, "for(i) send(i)")


def step_graphs(patterns) -> list:
    """Per step, the edges (sender, receiver) of all ranks' Patterns (one per pair)."""
    graphs = defaultdict(list)
    for pattern in patterns:
        for s, step in enumerate(pattern.steps):
            graphs[s].extend((pattern.rank, m.peer) for m in step.sends)
    return [list(dict.fromkeys(graphs[s])) for s in sorted(graphs)]


def assert_proper(colors: dict) -> None:
    """No sender and no receiver has two edges of one color."""
    sent, received = set(), set()
    for (u, v), c in colors.items():
        assert (u, c) not in sent, f"rank {u} sends two edges of color {c}"
        assert (v, c) not in received, f"rank {v} receives two edges of color {c}"
        sent.add((u, c))
        received.add((v, c))


def color_groups(pattern: Pattern, s: int) -> list:
    """The sends of step ``s`` grouped by the ordering chain in ``after``: a group is a maximal
    run of consecutive sends that wait for the same sends of this step."""
    groups, waits = [], None
    for i in range(len(pattern.steps[s].sends)):
        mine = tuple(ref for ref in pattern.after.get((s, i), ()) if ref[0] == SEND and ref[1] == s)
        if not groups or mine != waits:
            assert not groups or mine == tuple((SEND, s, j) for j in groups[-1]), \
                f"rank {pattern.rank} step {s}: send {i} does not wait for exactly the previous color's sends"
            groups.append([])
            waits = mine
        groups[-1].append(i)
    return groups


def check_colored(plain: list, colored: list) -> dict:
    """Compare the colored Patterns of all ranks with the sequential greedy coloring of the plain
    ones; return ``{"colors", "max_degree"}`` (over steps) as the test computes them."""
    graphs = step_graphs(plain)
    greedy = [greedy_colors(edges) for edges in graphs]
    for colors in greedy:
        assert_proper(colors)
    for before, after in zip(plain, colored):
        assert len(before.steps) == len(after.steps)
        for s, (old, new) in enumerate(zip(before.steps, after.steps)):
            assert new.recvs == old.recvs
            expected = sorted(old.sends, key=lambda m: greedy[s][(before.rank, m.peer)])  # stable
            assert list(new.sends) == expected, f"rank {before.rank} step {s}: sends not in color order"
            groups = color_groups(after, s)
            group_colors = [{greedy[s][(after.rank, new.sends[i].peer)] for i in g} for g in groups]
            assert all(len(c) == 1 for c in group_colors), "one chain group mixes colors"
            assert [c.pop() for c in group_colors] == sorted({greedy[s][(after.rank, m.peer)] for m in new.sends})
    degree = 0
    for edges in graphs:
        outs, ins = defaultdict(int), defaultdict(int)
        for u, v in edges:
            outs[u] += 1
            ins[v] += 1
        degree = max([degree, *outs.values(), *ins.values()])
    return {"colors": max((max(c.values()) + 1 for c in greedy if c), default=0), "max_degree": degree}


def colored_and_plain(adjacency, algorithm: str, family: str, options: dict | None = None) -> tuple:
    plain = build_patterns(adjacency, algorithm, family, options)
    colored = build_patterns(adjacency, algorithm, family, {**(options or {}), "coloring": True})
    return plain, colored


# -- the sequential definition ----------------------------------------------------------------

def test_greedy_colors_follow_welsh_powell_order():
    # degrees: (0,2): 2+2, (0,1): 2+1, (1,2): 1+2, (2,0): 1+1; ties by ranks
    assert greedy_colors([(0, 1), (0, 2), (1, 2), (2, 0)]) == {(0, 2): 0, (0, 1): 1, (1, 2): 1, (2, 0): 0}
    assert greedy_colors([(0, 1), (0, 1)]) == {(0, 1): 0}  # repeated messages of a pair: one edge


# -- the paper's example ---------------------------------------------------------------------

@pytest.mark.parametrize("size", [8, 64, 256])
def test_paper_alltoall_example_gets_one_receiver_per_round(size, record_property):
    plain, colored = colored_and_plain(paper_alltoall(size), "direct", ALLTOALL)
    assert colored.verified["ranks"] == size
    # uncolored, every rank's first send goes to the same receiver (rank 0, or 1 at rank 0)
    assert {p.steps[0].sends[0].peer for p in plain.patterns} == {0, 1}
    expected = check_colored(plain.patterns, colored.patterns)
    info = colored.patterns[0].info
    assert info["max_degree"] == expected["max_degree"] == size - 1
    assert info["colors"] == expected["colors"]
    assert size - 1 <= info["colors"] <= 2 * (size - 1) - 1
    # per round (color group position is rank-local, so count by the greedy colors): distinct receivers
    firsts = [p.steps[0].sends[0].peer for p in colored.patterns]
    assert len(set(firsts)) == size  # every rank's first round goes to a different receiver
    record_property("colors", info["colors"])
    record_property("coloring_rounds", info["coloring_rounds"])
    print(f"P={size}: colors {info['colors']} for max degree {info['max_degree']}, "
          f"{info['coloring_rounds']} coloring rounds, {info['coloring_messages']} protocol messages at rank 0")


def test_protocol_colors_equal_the_sequential_greedy_and_are_proper():
    adjacency = generate("sparse-alltoall:p=0.3,seed=5", 48)
    topologies = adjacency.topologies()
    plain = [direct_pattern(t, ALLTOALL) for t in topologies]
    results = World(len(topologies), topologies).run(lambda comm: edge_colors(plain[comm.Get_rank()], comm))
    greedy = greedy_colors(step_graphs(plain)[0])
    assert_proper(greedy)
    out = {(r, v): c for r, (sent, _, _) in enumerate(results) for (_, v), c in sent.items()}
    into = {(u, r): c for r, (_, received, _) in enumerate(results) for (_, u), c in received.items()}
    assert out == into == greedy
    infos = [info for _, _, info in results]
    assert len({(i["colors"], i["max_degree"], i["coloring_rounds"]) for i in infos}) == 1  # agreed
    assert infos[0]["colors"] == max(greedy.values()) + 1
    for r, info in enumerate(infos):  # a degree message to every neighbor, a READY per in-edge, a COLOR per out-edge
        neighbors = set(adjacency.sources[r]) | set(adjacency.destinations[r])
        assert info["coloring_messages"] == len(neighbors) + len(adjacency.sources[r]) + len(adjacency.destinations[r])


# -- every kind of Pattern ----------------------------------------------------------------------

CASES = [
    ("direct", "sparse-alltoall:p=0.2,seed=1", 40, ALLTOALL),
    ("direct", "random:density=0.3,seed=2", 33, ALLGATHER),
    ("direct", "moore:D=2,R=1", 36, ALLTOALL),
    ("common_neighbor", "moore:D=2,R=2", 64, ALLGATHER),
    ("common_neighbor", "moore:D=2,R=2", 64, ALLTOALL),
    ("common_neighbor", "random:density=0.4,seed=3", 32, ALLTOALL),
    ("cartesian", "moore:D=2,R=1", 36, ALLGATHER),
    ("cartesian", "moore:D=3,R=1", 27, ALLTOALL),
    ("cartesian_trivial", "moore:D=2,R=1", 16, ALLTOALL),
    ("distance_halving", "random:density=0.5,seed=4", 32, ALLGATHER),
]


@pytest.mark.parametrize("algorithm, spec, size, family", CASES)
def test_colored_patterns_verify_and_follow_the_greedy_coloring(algorithm, spec, size, family):
    options = {"ranks_per_socket": 4, "sockets_per_node": 2} if algorithm == "distance_halving" else None
    plain, colored = colored_and_plain(generate(spec, size), algorithm, family, options)
    assert colored.verified["ranks"] == size
    expected = check_colored(plain.patterns, colored.patterns)
    infos = [p.info for p in colored.patterns]
    for key in ("colors", "max_degree", "coloring_rounds"):
        assert len({info[key] for info in infos}) == 1, f"{key} differs between ranks"
    assert infos[0]["colors"] == expected["colors"]
    assert infos[0]["max_degree"] == expected["max_degree"]
    assert expected["max_degree"] <= expected["colors"] <= max(2 * expected["max_degree"] - 1, 0)
    for key, value in plain.patterns[0].info.items():  # the algorithm's own facts are kept
        if key != "phase1_messages":
            assert infos[0][key] == value


def test_repeated_neighbors_and_self_loops_keep_their_order():
    # rank r sends to r+1 twice (two labels), to itself, and to r+2; receives mirror that
    size = 6
    dests = tuple((((r + 1) % size), r, (r + 1) % size, (r + 2) % size) for r in range(size))
    srcs = tuple((((r - 1) % size), r, (r - 1) % size, (r - 2) % size) for r in range(size))
    adjacency = Adjacency(size, srcs, dests, "repeats")
    for family in FAMILIES:
        plain, colored = colored_and_plain(adjacency, "direct", family)
        check_colored(plain.patterns, colored.patterns)
        for before, after in zip(plain.patterns, colored.patterns):
            to_next = [m for m in after.steps[0].sends if m.peer == (before.rank + 1) % size]
            assert to_next == [m for m in before.steps[0].sends if m.peer == (before.rank + 1) % size]


def _hand_patterns(after_at_rank0: dict) -> list:
    """Four ranks, two steps: in step 0 rank 0 sends to 3; in step 1 rank 0 sends to 2, then to 1,
    and ranks 1 and 2 send to 3 (all ties: greedy colors (0,1) 0, (0,2) 1, (1,3) 0, (2,3) 1)."""
    steps = [{0: (3,)}, {0: (2, 1), 1: (3,), 2: (3,)}]
    patterns = []
    for r in range(4):
        own = []
        for s, senders in enumerate(steps):
            sends = tuple(Message(d, ((r, d, s),)) for d in senders.get(r, ()))
            recvs = tuple(Message(q, ((q, r, s),)) for q in sorted(senders) if r in senders[q])
            own.append(Step(sends, recvs))
        patterns.append(Pattern(ALLTOALL, r, tuple(own), after=after_at_rank0 if r == 0 else {}))
    return patterns


def _colored(patterns) -> list:
    return World(len(patterns)).run(lambda comm: color(patterns[comm.Get_rank()], comm))


def test_existing_ordering_dependencies_are_renumbered():
    assert greedy_colors([(0, 2), (0, 1), (1, 3), (2, 3)]) == {(0, 1): 0, (0, 2): 1, (1, 3): 0, (2, 3): 1}
    # the send to 1 (index 1 of step 1) waits for step 0's send; coloring moves it to index 0
    colored = _colored(_hand_patterns({(1, 1): ((SEND, 0, 0),)}))
    assert [m.peer for m in colored[0].steps[1].sends] == [1, 2]
    assert colored[0].after == {(1, 0): ((SEND, 0, 0),), (1, 1): ((SEND, 1, 0),)}
    # a dependency on a send of the same step that the coloring puts later is refused
    with pytest.raises(RankError, match="coloring orders after it"):
        _colored(_hand_patterns({(1, 1): ((SEND, 1, 0),)}))


# -- the option --------------------------------------------------------------------------------

def test_coloring_is_a_shared_bool_option():
    for name in ("direct", "cartesian", "cartesian_trivial", "common_neighbor", "distance_halving", "auto"):
        assert check_options(name, {}, 4)["coloring"] is False
        assert check_options(name, {"coloring": True}, 4)["coloring"] is True
    for bad in (1, "yes", None):
        with pytest.raises(TypeError, match="coloring"):
            check_options("direct", {"coloring": bad}, 4)
    with pytest.raises(TypeError, match="coloring.*native"):
        check_options("native", {"coloring": True}, 4)
    assert "coloring" not in check_options("native", {}, 4)
    plain, colored = (make_plan("direct", {"coloring": value}, False, 4) for value in (False, True))
    assert plain.key != colored.key  # patterns and schedules are cached apart
    assert builds_locally("direct", plain.options) and not builds_locally("direct", colored.options)
    assert not builds_locally("common_neighbor", plain.options)


def test_build_pattern_colors_only_when_asked():
    adjacency = paper_alltoall(4)
    topologies = adjacency.topologies()

    def both(comm):
        topology = topologies[comm.Get_rank()]
        return (build_pattern("direct", topology, comm, {"coloring": False}, ALLTOALL),
                build_pattern("direct", topology, comm, {"coloring": True}, ALLTOALL))
    results = World(4, topologies).run(both)
    assert [r[0] for r in results] == [direct_pattern(t, ALLTOALL) for t in topologies]
    assert all("colors" not in r[0].info and r[1].info["colors"] == 3 for r in results)
    verify([r[1] for r in results], topologies)
