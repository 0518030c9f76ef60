"""common_neighbor (HiPC 2017): Algorithm 2 on random friendship graphs, Algorithm 1 + verify on
random and Moore topologies, the paper's qualitative claims, bad Θ, graphs without friends.

Everything runs on virtual ranks (the same builder code as on MPI); the MPI conformance
suite covers the executed collectives.
"""

from __future__ import annotations

import random

import pytest
from mpi4py import MPI

import sparsecoll
from sparsecoll.algorithms import check_options
from sparsecoll.algorithms.common_neighbor import split_common
from sparsecoll.pattern import FAMILIES
from sparsecoll.sim.harness import build_patterns, pair_on_virtual_ranks
from sparsecoll.topology import graph_topology
from sparsecoll.topology.specs import generate

pytestmark = pytest.mark.timeout(300)


def random_friendships(rng: random.Random, size: int) -> list:
    """Symmetric random weights: rank -> {friend: common-neighbor count}."""
    density = rng.choice((0.1, 0.3, 0.6, 1.0))
    weights = [dict() for _ in range(size)]
    for a in range(size):
        for b in range(a + 1, size):
            if rng.random() < density:
                w = rng.randint(1, 4)  # few distinct weights: many ties
                weights[a][b] = weights[b][a] = w
    return weights


def test_pairing_terminates_and_is_mutual_on_thousands_of_graphs():
    rng = random.Random(2017)
    graphs = 0
    for _ in range(2000):
        size = rng.randint(2, 12)
        weights = random_friendships(rng, size)
        results = pair_on_virtual_ranks(weights)  # a livelock would hit the timeout, a deadlock raises
        graphs += 1
        for p, (friend, iterations, _) in enumerate(results):
            if friend is None:
                continue
            assert friend in weights[p], (weights, results)
            # p paired with p' iff p' paired with p, in the same iteration
            assert results[friend][0] == p and results[friend][1] == iterations, (weights, results)
        edges = [(w, -a, -b, a, b) for a in range(size) for b, w in weights[a].items() if a < b]
        if edges:  # the heaviest friendship edge (ties: lowest ranks) is paired in iteration 1
            _, _, _, a, b = max(edges)
            assert results[a][:2] == (b, 1) and results[b][:2] == (a, 1)
    assert graphs == 2000


def test_pairing_without_friends_sends_nothing():
    assert pair_on_virtual_ranks([{}, {}, {}]) == [(None, 0, 0)] * 3


def test_split_common_conditions_1_to_4():
    common = [9, 3, 7, 1, 5]
    on_low, off_low = split_common(2, 6, common)
    on_high, off_high = split_common(6, 2, list(reversed(common)))
    assert on_low == (1, 3, 5) and off_low == (7, 9)   # lower rank keeps the first half
    assert not set(on_low) & set(off_low)               # 1. disjoint
    assert set(on_low) | set(off_low) == set(common)    # 2. covering
    assert on_low == off_high and off_low == on_high    # 3. and 4. consistent at both friends


RANDOM_SPECS = [f"random:density={d},seed={s}" for d, s in ((0.05, 1), (0.1, 2), (0.2, 3), (0.4, 4), (0.8, 5))]
MOORE_SPECS = [f"moore:D={D},R={R}" for D in (2, 3, 4) for R in (1, 2, 3)]
MOORE_SIZE = {2: 49, 3: 27, 4: 16}  # tiny grids for large D, R: repeated neighbors and self loops


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("spec", RANDOM_SPECS)
def test_verify_random(spec, family):
    run = build_patterns(generate(spec, 40), "common_neighbor", family)
    assert run.verified["ranks"] == 40


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("spec", MOORE_SPECS)
def test_verify_moore(spec, family):
    D = int(spec.split("D=")[1][0])
    run = build_patterns(generate(spec, MOORE_SIZE[D]), "common_neighbor", family)
    assert run.verified["ranks"] == MOORE_SIZE[D]


def test_verify_at_64_ranks_with_phase1_costs():
    run = build_patterns(generate("moore:D=2,R=2", 64), "common_neighbor", "alltoall")
    info = run.patterns[0].info
    assert info["pairs_total"] == sum(p.info["friends_paired"] for p in run.patterns) // 2 > 0
    for pattern, counters in zip(run.patterns, run.counters):
        # the simulator counts the same point-to-point messages the builder reports
        assert pattern.info["phase1_messages"] == counters["messages"]
        assert pattern.info["alg2_iterations"] >= pattern.info["alg1_iterations"] >= pattern.info["friends_paired"]


def max_sends(spec: str, size: int, name: str, **options) -> int:
    """Maximum over ranks of messages sent in the Pattern."""
    return build_patterns(generate(spec, size), name, "allgather", options).summary()["max_sends"]


def test_moore_2d_radius_1_gains_little():
    """8 neighbors, at most 4 in common with any rank: one combining round saves at most 2 messages."""
    spec = "moore:D=2,R=1"
    direct = max_sends(spec, 64, "direct")
    combined = build_patterns(generate(spec, 64), "common_neighbor", "allgather")
    assert direct == 8
    assert all(p.info["friends_paired"] <= 1 for p in combined.patterns)
    assert combined.summary()["max_sends"] >= direct - 2
    # no pair shares more than 4 neighbors: with Θ = 5 nobody has a friend
    strict = build_patterns(generate(spec, 64), "common_neighbor", "allgather", {"theta": 5})
    assert all(p.info["degenerate"] and p.info["friends"] == 0 for p in strict.patterns)


@pytest.mark.parametrize("spec,size", [("moore:D=2,R=2", 64), ("moore:D=2,R=3", 64),
                                       ("random:density=0.4,seed=1", 48), ("random:density=0.8,seed=1", 32)])
def test_max_messages_well_below_neighbor_count(spec, size):
    """Moore D=2, R>=2 and random graphs with common neighborhoods (HiPC 2017 §VI)."""
    assert max_sends(spec, size, "common_neighbor") <= 0.75 * max_sends(spec, size, "direct")


def test_no_friends_degenerates_to_direct():
    ring = [graph_topology(r, 8, [(r - 1) % 8], [(r + 1) % 8]) for r in range(8)]
    combined = build_patterns(ring, "common_neighbor", "alltoall")
    direct = build_patterns(ring, "direct", "alltoall")
    assert all(p.info["degenerate"] and p.info["pairs_total"] == 0 for p in combined.patterns)
    assert [p.steps for p in combined.patterns] == [p.steps for p in direct.patterns]


def test_self_loops_and_repeated_edges():
    """Rank r sends twice to r+1, once to itself and to r+2..r+5: self loops need no message."""
    size = 8
    dests = [[(r + 1) % size, r, (r + 1) % size] + [(r + k) % size for k in range(2, 6)] for r in range(size)]
    sources = [[] for _ in range(size)]
    for r, ds in enumerate(dests):
        for d in ds:
            sources[d].append(r)
    topologies = [graph_topology(r, size, sources[r], dests[r]) for r in range(size)]
    for family in FAMILIES:
        run = build_patterns(topologies, "common_neighbor", family, {"theta": 2})
        assert run.patterns[0].info["pairs_total"] > 0
        assert all(m.peer != p.rank for p in run.patterns for s in p.steps for m in s.sends)


@pytest.mark.parametrize("theta, error", [(0, ValueError), (-1, ValueError), (2.5, TypeError),
                                          ("4", TypeError), (True, TypeError), (None, TypeError)])
def test_bad_theta_is_rejected_before_any_message(theta, error):
    with pytest.raises(error, match="theta: expected a positive integer"):
        check_options("common_neighbor", {"theta": theta}, 4)
    graph = MPI.COMM_SELF.Create_dist_graph_adjacent([0], [0])
    try:
        with pytest.raises(error, match="theta"):
            sparsecoll.wrap(graph, "common_neighbor", theta=theta)
    finally:
        graph.Free()


def test_theta_option_changes_the_pattern():
    spec = "moore:D=2,R=2"
    loose, strict = (build_patterns(generate(spec, 49), "common_neighbor", "allgather", {"theta": t})
                     for t in (4, 100))
    assert loose.patterns[0].info["pairs_total"] > 0 and strict.patterns[0].info["degenerate"]
    assert check_options("common_neighbor", {}, 4)["theta"] == 4
