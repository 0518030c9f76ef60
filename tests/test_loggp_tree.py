"""loggp_tree (SC12 section II-B1): balancing on virtual ranks, verified Patterns, the hot spot's
scatter tree, logarithmic iteration counts, the paper's X, and option checks.

Everything runs on virtual ranks (the same builder code as on MPI, ``build_patterns`` runs
``verify`` on every result); the MPI conformance and adversarial suites run the collectives.
"""

from __future__ import annotations

import math
import random

import pytest

from sparsecoll.algorithms import check_options, get
from sparsecoll.algorithms.loggp_tree import DEFAULT_L, DEFAULT_O, lag, moved_count
from sparsecoll.pattern import ALLGATHER, ALLTOALL, FAMILIES, stats
from sparsecoll.sim.harness import build_patterns
from sparsecoll.topology import PROC_NULL, cart_topology, graph_topology
from sparsecoll.topology.cartesian import Grid, offset_topology
from sparsecoll.topology.generators import hotspot
from sparsecoll.topology.specs import generate, parse

pytestmark = pytest.mark.timeout(600)

#: Options under which the paper's rule moves messages eagerly: a hand-off costs no more than one
#: message (``ceil(L/o) = 1``) and any imbalance above one message counts.
EAGER = {"L": 1e-6, "o": 1e-6, "t": 0}
#: Latency equal to the overhead: ``ceil(L/o) = 1``, the paper's ``t = 2``.
LATENCY_EQUALS_OVERHEAD = {"L": 1e-6, "o": 1e-6}


def _max_sends(run) -> int:
    return max(stats(p)["sends"] for p in run.patterns)


def _iterations(run) -> int:
    counts = {p.info["balancing_iterations"] for p in run.patterns}
    assert len(counts) == 1, f"ranks disagree on the iteration count: {counts}"
    return counts.pop()


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("density", [0.1, 0.3, 0.6, 1.0])
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("options", [{}, EAGER])
def test_random_graphs_verify(family, density, seed, options):
    run = build_patterns(generate(f"random:density={density},seed={seed}", 24), "loggp_tree", family, options)
    assert run.verified["ranks"] == 24
    _iterations(run)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("spec,size", [("moore:D=2,R=1", 16), ("moore:D=2,R=2", 9), ("moore:D=3,R=1", 8),
                                       ("moore:D=2,R=1", 4)])
def test_moore_is_balanced_already(family, spec, size):
    """Every rank of an isomorphic neighborhood has the same out-degree: nothing moves, the Pattern
    is the direct one without self loops (small grids give repeated neighbors and self loops)."""
    adjacency = generate(spec, size)
    run = build_patterns(adjacency, "loggp_tree", family, EAGER)
    assert _iterations(run) == 0
    for rank, pattern in enumerate(run.patterns):
        assert len(pattern.steps) <= 1
        assert stats(pattern)["sends"] == len(set(adjacency.destinations[rank]) - {rank})
        assert pattern.info["moved"] == pattern.info["forwarded"] == 0


def _cartesian(dims, periods, offsets=None):
    grid = Grid(tuple(dims), tuple(periods))
    if offsets is not None:
        return [offset_topology(grid, rank, offsets) for rank in range(grid.size)]
    topologies = []
    for rank in range(grid.size):
        shifts = [(grid.shift(rank, tuple(int(i == d) for i in range(len(dims))), -1),
                   grid.shift(rank, tuple(int(i == d) for i in range(len(dims))), +1)) for d in range(len(dims))]
        topologies.append(cart_topology(rank, grid.size, dims, periods, grid.coords(rank), shifts))
    return topologies


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("dims,periods", [((2, 3), (True, True)), ((1, 2), (True, True)), ((3, 3), (False, True)),
                                          ((4,), (False,))])
def test_cartesian_communicators_verify(family, dims, periods):
    """MPI Cartesian neighborhoods: PROC_NULL holes, and repeated neighbors where a periodic
    dimension has size 1 or 2 (both directions reach one rank, matched by position)."""
    topologies = _cartesian(dims, periods)
    assert any(PROC_NULL in t.destinations for t in topologies) or all(periods)
    run = build_patterns(topologies, "loggp_tree", family, EAGER)
    assert run.verified["ranks"] == len(topologies)


@pytest.mark.parametrize("family", FAMILIES)
def test_uneven_offset_neighborhood_is_balanced(family):
    """A non-periodic mesh with far offsets: edge ranks have fewer neighbors than inner ones."""
    topologies = _cartesian((3, 4), (False, False), [(1, 0), (0, 1), (1, 1), (2, 3), (-2, -3), (-1, 0)])
    run = build_patterns(topologies, "loggp_tree", family, EAGER)
    assert run.verified["ranks"] == 12


def _multigraph(rng: random.Random, size: int) -> list:
    """Random multigraph with self loops, repeated edges, a hub, receive order shuffled."""
    edges = [(rng.randrange(size), rng.randrange(size)) for _ in range(rng.randint(0, 4 * size))]
    hub = rng.randrange(size)
    edges += [(hub, rng.randrange(size)) for _ in range(rng.randint(0, 3 * size))]
    order = list(range(len(edges)))
    rng.shuffle(order)
    sources = {r: [] for r in range(size)}
    destinations = {r: [] for r in range(size)}
    for a, b in edges:
        destinations[a].append(b)
    for index in order:
        a, b = edges[index]
        sources[b].append(a)
    return [graph_topology(r, size, sources[r], destinations[r]) for r in range(size)]


def test_multigraphs_with_self_loops_and_repeated_edges_verify():
    rng = random.Random(12)
    for _ in range(150):
        topologies = _multigraph(rng, rng.randint(1, 11))
        for family in FAMILIES:
            options = rng.choice([{}, EAGER, {"L": 0.0, "t": 1}])
            run = build_patterns(topologies, "loggp_tree", family, options)
            assert run.verified["ranks"] == len(topologies)
            _iterations(run)


def test_self_loops_need_no_message():
    topologies = [graph_topology(0, 2, [0, 0, 1], [0, 1, 0]), graph_topology(1, 2, [0], [0])]
    for family in FAMILIES:
        run = build_patterns(topologies, "loggp_tree", family)
        assert [stats(p)["sends"] for p in run.patterns] == [1, 1]


# -- the hot spot (the paper's Fig. 4 pattern) ----------------------------------------------------

def test_hotspot_spec():
    spec = parse("hotspot")
    assert spec.params == {"root": 0}
    adjacency = generate("hotspot:root=3", 5)
    assert adjacency.destinations == ([], [], [], [0, 1, 2, 4], [])
    assert adjacency.sources == ([3], [3], [3], [], [3])
    with pytest.raises(ValueError, match="root"):
        hotspot(4, root=4)


def test_hotspot_16_alltoall_is_a_logarithmic_tree():
    """The brief's bound ``ceil(log2 16) + 2 = 6`` messages per rank (direct: 15), with the
    default LogGP parameters (this machine's, ``ceil(L/o) = 1``) and with ``L = o``."""
    for options in ({}, LATENCY_EQUALS_OVERHEAD):
        run = build_patterns(hotspot(16), "loggp_tree", ALLTOALL, options)
        assert _max_sends(run) <= math.ceil(math.log2(16)) + 2
        assert run.patterns[0].info["lag"] == 1
    assert run.patterns[0].info["lag"] == math.ceil(DEFAULT_L / DEFAULT_O)


def test_hotspot_16_alltoall_with_a_long_latency():
    """``L/o`` between 2 and 3 (``lag = 3``): the root moves ``floor(15/2 - 3) = 4`` messages
    (12 left: 11 and the hand-off), then ``floor(12/2 - 3) = 3`` (10 left), then
    ``floor(10/2 - 3) = 2`` (9 left); at 9, ``floor(9/2 - 3) = 1`` would gain nothing. The
    paper's rule keeps more sends at the root the longer a hand-off takes to arrive."""
    run = build_patterns(hotspot(16), "loggp_tree", ALLTOALL, {"L": 2.5e-6, "o": 1e-6})
    assert run.patterns[0].info["lag"] == 3
    assert stats(run.patterns[0])["sends"] == 9
    assert _max_sends(run) == 9


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("root", [0, 5])
def test_hotspot_becomes_a_scatter_tree(family, root):
    """Fig. 4: the root sends far fewer than 15 messages, in at most log2(16) steps. Allgather:
    a tree (every other rank receives exactly one message, from its parent) whose every message
    carries the root's block alone (the paper: the moved messages are identical). Alltoall: a
    rank receives from its parent, and at most one more hand-off from a heavy rank it was
    paired with (a proxy need not be the heavy rank's child in the alltoall family)."""
    run = build_patterns(hotspot(16, root), "loggp_tree", family, LATENCY_EQUALS_OVERHEAD)
    assert stats(run.patterns[root])["sends"] <= 6
    assert max(stats(p)["steps"] for p in run.patterns) <= 4
    for rank, pattern in enumerate(run.patterns):
        if rank == root:
            continue
        if family == ALLGATHER:
            assert stats(pattern)["recvs"] == 1
            assert all(m.items == ((root,),) for s in pattern.steps for m in s.sends)
        else:
            assert 1 <= stats(pattern)["recvs"] <= 2
    moved = sum(p.info["moved"] for p in run.patterns)
    assert moved == sum(p.info["forwarded"] for p in run.patterns) > 0


@pytest.mark.parametrize("family,options", [(ALLTOALL, {}), (ALLTOALL, LATENCY_EQUALS_OVERHEAD), (ALLGATHER, {})])
def test_hotspot_iterations_grow_logarithmically(family, options):
    """The paper: O(log P) iterations on the hot spot. Asserted: at most log2(P) + 2."""
    counts = {}
    for size in (16, 64, 256, 1024):
        run = build_patterns(hotspot(size), "loggp_tree", family, options)
        counts[size] = _iterations(run)
        assert counts[size] <= math.log2(size) + 2, counts
        assert _max_sends(run) < size - 1
    print(family, options, "balancing iterations by ranks:", counts)


# -- the paper's X, and the options ---------------------------------------------------------------

def test_moved_count_is_the_papers_x():
    # alltoall: (m+s)/2 - s - ceil(L/o) = (15+0)/2 - 0 - 1 = 6.5 -> 6
    assert moved_count(15, 0, 1) == 6
    # allgather: (m-s)/2 - ceil(L/(o+(k-1)G)) = (12-4)/2 - 2 = 2
    assert moved_count(12, 4, 2) == 2
    assert moved_count(11, 4, 2) == 0  # 1.5 -> 1: a single message is not worth a hand-off
    assert moved_count(3, 3, 0) == 0


def test_lag_per_family():
    options = {"L": 3e-6, "o": 1e-6, "G": 0.1e-6, "block_bytes": 11}
    assert lag(ALLTOALL, options) == 3
    assert lag(ALLGATHER, options) == 2  # ceil(3 / (1 + 10 * 0.1)) = ceil(1.5)
    assert lag(ALLTOALL, {**options, "L": 0.0}) == 0


@pytest.mark.parametrize("name,value", [("t", -1), ("t", 1.5), ("t", True), ("o", 0), ("o", -1e-6),
                                        ("L", -1.0), ("G", float("nan")), ("L", "fast"),
                                        ("block_bytes", 0), ("block_bytes", 2.5)])
def test_bad_options_are_rejected_naming_the_option(name, value):
    with pytest.raises(ValueError, match=f"^{name}:"):
        check_options("loggp_tree", {name: value}, 4)
    with pytest.raises(ValueError, match=f"^{name}:"):
        build_patterns(hotspot(4), "loggp_tree", ALLTOALL, {name: value})


def test_defaults_and_info():
    options = check_options("loggp_tree", {}, 4)
    assert {k: options[k] for k in ("t", "block_bytes")} == {"t": 2, "block_bytes": 16}
    assert options["o"] > 0
    run = build_patterns(hotspot(8), "loggp_tree", ALLTOALL, {"t": 3})
    info = run.patterns[0].info
    assert info["t"] == 3 and info["o"] == DEFAULT_O and info["L"] == DEFAULT_L
    for key in ("balancing_iterations", "moved", "forwarded", "G", "block_bytes", "protocol_messages"):
        assert key in info
    assert stats(run.patterns[0])["balancing_iterations"] == info["balancing_iterations"]


def test_larger_t_stops_earlier():
    tight = build_patterns(hotspot(32), "loggp_tree", ALLTOALL, {**LATENCY_EQUALS_OVERHEAD, "t": 0})
    loose = build_patterns(hotspot(32), "loggp_tree", ALLTOALL, {**LATENCY_EQUALS_OVERHEAD, "t": 20})
    assert _max_sends(tight) < _max_sends(loose)


def test_registered_as_a_protocol_for_both_families():
    algorithm = get("loggp_tree")
    assert algorithm.families == FAMILIES and not algorithm.builds_locally
    assert "small" in algorithm.summary


def test_auto_leaves_it_out_for_want_of_a_local_estimate():
    from sparsecoll.model import choice
    topology = hotspot(8).topology(0)
    for family in FAMILIES:
        names = choice.candidates(topology, family)
        assert "direct" in names and "loggp_tree" not in names


def test_loggp_parameter_file(tmp_path):
    """``loggp=PATH``: a burst fit (o = 0) gives o = g/2 and L - 2o; a file with o > 0 is taken as it is."""
    from sparsecoll.model.params import loggp, tree_rule_loggp, with_loggp_file
    burst = tmp_path / "burst.json"
    loggp(4e-6, 0.0, 2e-6, 0.1e-9, "a burst fit", "socket").save(burst)
    assert tree_rule_loggp(loggp(4e-6, 0.0, 2e-6, 0.1e-9)) == pytest.approx({"L": 2e-6, "o": 1e-6, "G": 0.1e-9})
    assert tree_rule_loggp(loggp(4e-6, 3e-6, 0.0, 0.0)) == {"L": 4e-6, "o": 3e-6, "G": 0.0}
    run = build_patterns(hotspot(16), "loggp_tree", ALLTOALL, {"loggp": str(burst)})
    info = run.patterns[0].info
    assert info["L"] == pytest.approx(2e-6) and info["o"] == pytest.approx(1e-6) and info["lag"] == 2
    with pytest.raises(ValueError, match="^loggp:.*not both"):
        with_loggp_file({"loggp": str(burst), "o": 1e-6})
    with pytest.raises(ValueError, match="^loggp:"):
        with_loggp_file({"loggp": str(tmp_path / "missing.json")})
    with pytest.raises(ValueError, match="^loggp:"):
        tree_rule_loggp(loggp(4e-6, 0.0, 0.0, 0.0))
    with pytest.raises(ValueError, match="^loggp:"):
        check_options("loggp_tree", {"loggp": 3}, 4)


def test_ranks_with_different_options_all_raise():
    """The options shape the messages: ranks that disagree fail together instead of hanging."""
    from sparsecoll.algorithms.loggp_tree import build
    from sparsecoll.sim.world import World
    topologies = hotspot(4).topologies()

    def body(comm):
        options = check_options("loggp_tree", {"t": 1 if comm.Get_rank() == 2 else 2}, 4)
        try:
            build(comm.topology, comm, options, ALLTOALL)
        except ValueError as error:
            return str(error)
        return None

    results = World(4, topologies).run(body)
    assert all(result is not None and result.startswith("options:") for result in results)


@pytest.mark.parametrize("family,spec,options,levels", [
    (ALLTOALL, "hotspot", LATENCY_EQUALS_OVERHEAD, 3),
    (ALLGATHER, "random:density=0.3,seed=1", {"L": 0.0, "t": 0}, 2)])
def test_proxies_become_heavy_in_turn(family, spec, options, levels):
    """Multi-level trees: some rank hands on messages it was handed (moved and forwarded both);
    the alltoall hot spot's tree has at least 3 levels of steps."""
    run = build_patterns(generate(spec, 64), "loggp_tree", family, options)
    assert any(p.info["moved"] and p.info["forwarded"] for p in run.patterns)
    assert max(stats(p)["steps"] for p in run.patterns) >= levels
