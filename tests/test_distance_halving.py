"""distance_halving (Sharifian, Sojoodi, Afsahi 2023) on virtual ranks, and placement overrides."""

from __future__ import annotations

import random

import numpy
import pytest

from sparsecoll.algorithms.distance_halving import halving_depth, matrix_a, out_bits, ranked, split
from sparsecoll.pattern import stats
from sparsecoll.sim.harness import build_patterns
from sparsecoll.topology import placement
from sparsecoll.topology.generators import Adjacency, random_sparse
from sparsecoll.topology.specs import generate

pytestmark = pytest.mark.timeout(300)

NAME = "distance_halving"


def build(adjacency, L, S=1):
    """Patterns of every rank (verified) for ``L`` ranks per socket, ``S`` per node."""
    return build_patterns(adjacency, NAME, "allgather", {"ranks_per_socket": L, "sockets_per_node": S})


def check_agreement(patterns) -> int:
    """Each step: p's agent a has origin p and p's origin o has agent p. Returns agent pairs."""
    pairs = 0
    for p, pattern in enumerate(patterns):
        agents, origins = pattern.info["agents"], pattern.info["origins"]
        assert len(agents) == len(origins) == pattern.info["halving_steps"]
        for t, (a, o) in enumerate(zip(agents, origins)):
            if a >= 0:
                assert patterns[a].info["origins"][t] == p, f"rank {p} step {t}: agent {a} has another origin"
                pairs += 1
            if o >= 0:
                assert patterns[o].info["agents"][t] == p, f"rank {p} step {t}: origin {o} has another agent"
    return pairs


def test_depth_and_split_follow_algorithm_1():
    assert [halving_depth(n, 20) for n in (1, 20, 21, 40, 41, 2000)] == [0, 0, 1, 1, 2, 7]
    assert halving_depth(2160, 18) == 7 and halving_depth(2048, 16) == 7
    assert split(0, 9, 3) == ((0, 4), (5, 9), 4)
    assert split(0, 9, 7) == ((5, 9), (0, 4), 4)
    assert split(5, 9, 5) == ((5, 7), (8, 9), 7)


def test_matrix_a_as_in_fig_3():
    # rank 0 sends to 4, 5, 6; rank 4 to 5, 6; rank 5 to 6, 7; rank 6 to nobody; rank 7 to 4
    outs = {0: [4, 5, 6], 1: [], 2: [], 3: [], 4: [5, 6], 5: [6, 7], 6: [], 7: [4]}
    rows = [out_bits(outs[r], 8) for r in range(8)]
    C, A = matrix_a(rows, numpy.array(outs[0]), (4, 7), (4, 7))
    assert C.tolist() == [4, 5, 7]
    assert A.astype(int).tolist() == [[0, 1, 1], [0, 0, 1], [1, 0, 0]]
    # restricted to the neighbors in [5, 7]: rank 7 shares none of them
    C, A = matrix_a(rows, numpy.array(outs[0]), (4, 7), (5, 7))
    assert C.tolist() == [4, 5] and A.astype(int).tolist() == [[1, 1], [0, 1]]
    # ranking: most shared first; equal counts by the pair key (closest positions first)
    assert ranked(0, numpy.array([4, 5, 7]), numpy.array([[1, 1], [1, 0], [1, 0]], dtype=bool),
                  (0, 3), (4, 7)) == [4, 5, 7]
    assert ranked(2, numpy.array([4, 5, 6]), numpy.ones((3, 1), dtype=bool), (0, 3), (4, 7)) == [6, 5, 4]


def test_negotiation_terminates_and_agrees_on_thousands_of_random_graphs():
    """Algorithms 2-3 on 1500 random graphs: no deadlock (the simulator would raise), one
    origin per agent per step, and verified Patterns."""
    rng = random.Random(2023)
    pairs = 0
    for trial in range(1500):
        n = rng.randint(2, 14)
        density = rng.choice([0.05, 0.2, 0.5, 0.8, 1.0, rng.random()])
        L = rng.randint(1, max(1, n // 2))
        run = build(random_sparse(n, density, seed=trial), L)
        pairs += check_agreement(run.patterns)
    assert pairs > 10_000  # the negotiation did pair ranks, often


@pytest.mark.parametrize("spec", ["moore:D=2,R=1", "moore:D=3,R=1", "moore:D=2,R=3"])
def test_ties_everywhere_moore(spec):
    """Moore neighborhoods: many candidates with equal counts, still every rank finds an agent."""
    run = build(generate(spec, 64), 4)
    check_agreement(run.patterns)
    assert all(p.info["ranks_with_agent"] == 64 for p in run.patterns)


@pytest.mark.parametrize("density", [0.05, 0.3, 0.7])
def test_random_graphs_256_ranks_18x2(density):
    run = build(random_sparse(256, density, seed=5), 18, 2)
    assert run.verified["ranks"] == 256
    check_agreement(run.patterns)
    info = run.patterns[0].info
    assert info["placement"] == "18x2" and info["placement_source"] == "option"
    assert info["halving_steps"] == 4 and len(run.patterns[0].steps) == 5
    direct = build_patterns(random_sparse(256, density, seed=5), "direct", "allgather")
    dh_sends = max(stats(p)["sends"] for p in run.patterns)
    direct_sends = max(stats(p)["sends"] for p in direct.patterns)
    if density >= 0.3:  # dense graphs: far fewer messages than one per edge
        assert dh_sends < direct_sends / 2


def test_moore_512_ranks_16x2():
    run = build(generate("moore:D=2,R=2", 512), 16, 2)
    assert run.verified["ranks"] == 512
    check_agreement(run.patterns)


def test_graph_where_no_rank_finds_an_agent_degenerates_to_direct():
    """Rank i sends only to i + n/2: nobody shares a neighbor, so nobody has a candidate."""
    n = 16
    adjacency = Adjacency(n, [[(i - n // 2) % n] for i in range(n)], [[(i + n // 2) % n] for i in range(n)])
    run = build(adjacency, 2)
    for p in run.patterns:
        assert p.info["degenerate"] and p.info["ranks_with_agent"] == 0 and p.info["agents_found"] == 0
        assert all(not s.sends for s in p.steps[:-1])
        assert [m.peer for m in p.steps[-1].sends] == [(p.rank + n // 2) % n]


def test_empty_and_self_loop_graphs():
    n = 8
    empty = build(Adjacency(n, [[] for _ in range(n)], [[] for _ in range(n)]), 1)
    assert all(stats(p)["sends"] == 0 for p in empty.patterns)
    loops = build(Adjacency(n, [[i, i] for i in range(n)], [[i, i] for i in range(n)]), 1)
    assert all(stats(p)["sends"] == 0 for p in loops.patterns)  # bind copies locally


def test_without_placement_the_simulator_is_one_socket():
    run = build_patterns(random_sparse(32, 0.3, seed=1), NAME, "allgather")
    info = run.patterns[0].info
    assert info["placement"] == "32x1" and info["placement_source"].startswith("none")
    assert info["halving_steps"] == 0 and info["degenerate"]


@pytest.mark.parametrize("options, message", [
    ({"ranks_per_socket": 0}, "ranks_per_socket: expected a positive integer, got 0"),
    ({"ranks_per_socket": -2}, "ranks_per_socket: expected a positive integer, got -2"),
    ({"ranks_per_socket": 9}, "ranks_per_socket: 9 is larger than the communicator (8 ranks)"),
    ({"ranks_per_socket": 4, "sockets_per_node": 3}, "sockets_per_node: 3 sockets per node"),
    ({"ranks_per_socket": 2, "sockets_per_node": 0}, "sockets_per_node: expected a positive integer"),
    ({"sockets_per_node": 2}, "sockets_per_node: given without ranks_per_socket"),
])
def test_bad_overrides_are_clear_errors(options, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        placement.override(8, **options)
    with pytest.raises(ValueError) as info:  # the option check, before any virtual rank runs
        build_patterns(random_sparse(8, 0.5, seed=1), NAME, "allgather", options)
    assert message in str(info.value)


def test_override_types_and_environment(monkeypatch):
    with pytest.raises(TypeError, match="ranks_per_socket"):
        placement.override(8, ranks_per_socket="2")
    with pytest.raises(TypeError, match="ranks_per_socket"):
        placement.override(8, ranks_per_socket=True)
    got = placement.override(8, ranks_per_socket=numpy.int64(4), sockets_per_node=numpy.int32(2))
    assert (got.ranks_per_socket, got.sockets_per_node) == (4, 2) and type(got.ranks_per_socket) is int
    monkeypatch.setenv(placement.ENVIRONMENT, "2x2")
    got = placement.override(8)
    assert (got.ranks_per_socket, got.sockets_per_node, got.source) == (2, 2, "environment SPARSECOLL_PLACEMENT")
    assert placement.override(8, ranks_per_socket=4).source == "option"  # options win
    run = build_patterns(random_sparse(8, 0.5, seed=1), NAME, "allgather")
    assert run.patterns[0].info["halving_steps"] == 2
    for bad in ("0x2", "2x", "abc", "16", "4x3"):
        monkeypatch.setenv(placement.ENVIRONMENT, bad)
        with pytest.raises(ValueError, match="SPARSECOLL_PLACEMENT"):
            placement.override(8)


def test_placement_from_detected_keys():
    # 2 nodes x 2 sockets x 3 ranks, in order
    keys = [(n * 6, s) for n in range(2) for s in range(2) for _ in range(3)]
    got = placement.from_keys(keys)
    assert (got.ranks_per_socket, got.sockets_per_node, got.contiguous) == (3, 2, True)
    assert got.source.startswith("detected: 2 node(s), 4 socket(s)")
    # round-robin over sockets: not contiguous; unbound ranks: node = socket
    got = placement.from_keys([(0, r % 2) for r in range(6)])
    assert (got.ranks_per_socket, got.sockets_per_node, got.contiguous) == (3, 2, False)
    got = placement.from_keys([(0, 0), (0, None), (4, 1), (4, 1)])
    assert (got.ranks_per_socket, got.sockets_per_node) == (2, 1) and "node = socket" in got.source


def test_cpu_packages_reads_sys():
    assert placement.cpu_packages({0}) in ({0}, set())  # one package id for CPU 0 (or no /sys)
    assert placement.cpu_packages({10 ** 6}) == set()   # no such CPU: unknown


@pytest.mark.parametrize("spec", ["stencil:d=2,n=3", "moore:D=2,R=1", "stencil:d=3,n=3", "random:density=0.4,seed=3"])
def test_on_one_socket_the_estimate_charges_the_pattern_it_builds(spec):
    """``n <= L``: no halving; the pattern is one message of the rank's block to each distinct
    destination (a small periodic grid wraps several offsets onto one rank), and auto's estimate
    charges exactly that: its steps and messages equal the built pattern's, and its bytes on the
    symmetric neighborhoods (it assumes as many received as sent). (The paper's
    eqs. 2-3, meant for the final step after halvings, charged 8 ranks of a 9-point stencil 64
    blocks where the pattern sends 5.)"""
    from sparsecoll.model import choice
    from sparsecoll.model.profile import BUILTIN

    n = 8
    adjacency = generate(spec, n)
    one_socket = placement.Placement(n)
    load = BUILTIN.load_for(1.0)
    built = build(adjacency, n).patterns
    for topology, pattern in zip(generate(spec, n).topologies(), built):
        estimate = choice.estimate_distance_halving(topology, "allgather", {}, load, one_socket)
        real = choice.pattern_cost(pattern, load, one_socket)
        assert (estimate.steps, estimate.messages) == (real.steps, real.messages) == (1, stats(pattern)["sends"])
        if not spec.startswith("random"):  # symmetric: it receives as many blocks as it sends, as estimated
            assert estimate.per_byte == pytest.approx(real.per_byte)
    if spec.startswith("stencil:d=2"):  # 8 offsets onto 5 distinct ranks of the 4 x 2 grid
        assert stats(built[0])["sends"] == 5
