"""Generators, and every registered builder on virtual ranks checked by verify."""

from __future__ import annotations

import dataclasses
import json

import numpy
import pytest
from mpi4py import MPI

from sparsecoll.algorithms import REGISTRY
from sparsecoll.algorithms import get as get_algorithm
from sparsecoll.model.params import Placement
from sparsecoll.pattern import FAMILIES, Pattern, Step
from sparsecoll.sim.harness import build_patterns, placement_options
from sparsecoll.topology.generators import (
    compute_dims,
    create_dist_graph,
    moore,
    moore_offsets,
    random_sparse,
)
from sparsecoll.topology.specs import generate, parse
from sparsecoll.verify import VerificationError

pytestmark = pytest.mark.timeout(120)


def test_moore_neighborhood_shape():
    adjacency = moore(64, D=2, R=1)
    assert adjacency.dims == compute_dims(64, 2) == (8, 8)
    assert all(len(d) == 8 and len(s) == 8 for d, s in zip(adjacency.destinations, adjacency.sources))
    # rank 9 = (1, 1): its neighbors are the 3x3 block around it
    assert sorted(adjacency.destinations[9]) == [0, 1, 2, 8, 10, 16, 17, 18]
    # symmetric: r sends to d along offset c, so d lists r as source along c
    for r, dests in enumerate(adjacency.destinations):
        for k, d in enumerate(dests):
            assert adjacency.sources[d][k] == r
    assert len(moore_offsets(3, 2)) == 5 ** 3 - 1


def test_random_sparse_density_and_seed():
    a = random_sparse(200, 0.1, seed=3)
    b = random_sparse(200, 0.1, seed=3)
    c = random_sparse(200, 0.1, seed=4)
    assert a.destinations == b.destinations != c.destinations
    assert all(r not in d for r, d in enumerate(a.destinations))
    assert 0.08 < a.edges() / (200 * 199) < 0.12
    for r, dests in enumerate(a.destinations):
        for d in dests:
            assert r in a.sources[d]


def test_spec_parser():
    def parsed(text):
        spec = parse(text)
        return spec.kind, spec.params
    assert parsed("random:density=0.2,seed=1") == ("random", {"density": 0.2, "seed": 1})
    assert parsed("moore:D=2,R=2") == ("moore", {"D": 2, "R": 2})
    assert parsed("sparse-alltoall:p=0.3") == ("sparse-alltoall", {"p": 0.3, "seed": 0})
    assert parsed("stencil:n=4") == ("stencil", {"d": 2, "n": 4, "f": -1})
    assert parsed("cart:") == ("cart", {"d": 2})
    assert parsed("hotspot") == ("hotspot", {"root": 0})
    assert parsed("matrix:")[1]["path"].endswith("dwt_193.mtx")
    assert generate("sparse-alltoall:p=0.3,seed=2", 30).destinations == random_sparse(30, 0.3, 2).destinations
    for bad in ("torus:D=2", "random:dens=0.2", "moore:D=two", "random:density=1.5", "random", "stencil:d=x",
                "cart:d=2", "matrix:/no/such.mtx", "hotspot:root=8", "hotspot:root=x", "stencil:d=2,n=3,d=3",
                "random:density=0.1,seed=1,seed=2"):
        with pytest.raises((ValueError, FileNotFoundError)):
            generate(bad, 8)


BENCHMARK_SPECS = ["random:density=0.3,seed=1", "sparse-alltoall:p=0.2", "moore:D=2,R=1", "stencil:d=2,n=3,f=-1",
                   "matrix:", "cross:d=2", "hotspot:root=3"]


@pytest.mark.parametrize("spec", BENCHMARK_SPECS)
def test_simulate_command_accepts_every_benchmark_spec(spec, capsys):
    from sparsecoll.tools.cli import main
    assert main(["simulate", "--ranks", "16", "--topology", spec, "--algorithms", "direct,cartesian",
                 "--sizes", "4"]) == 0
    out = capsys.readouterr().out
    assert f"topology {spec}" in out and "\ndirect " in out


@pytest.mark.parametrize("spec", ["torus:D=2", "cart:d=2", "random:dens=0.1", "matrix:/no/such.mtx"])
def test_simulate_command_answers_a_bad_spec_in_one_line(spec):
    from sparsecoll.tools.cli import main
    with pytest.raises(SystemExit) as exit_info:
        main(["simulate", "--ranks", "16", "--topology", spec])
    message = str(exit_info.value.code)
    assert message.startswith("simulate: ") and "\n" not in message and spec.partition(":")[0] in message


def test_simulate_command_predicts_steps_and_dag_side_by_side_with_algorithm_options(capsys, tmp_path):
    from sparsecoll.tools.cli import main
    assert main(["simulate", "--ranks", "16", "--topology", "moore:D=2,R=1", "--family", "alltoall",
                 "--algorithms", "direct,direct+coloring,cartesian_trivial", "--sizes", "4,64",
                 "--execution", "steps,dag", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "t(4B)[steps]" in out and "t(64B)[dag]" in out and "\ndirect+coloring " in out
    results = json.loads((tmp_path / "simulate.json").read_text())
    assert results["executions"] == ["steps", "dag"]
    colored = results["algorithms"]["direct+coloring"]
    assert colored["options"] == {"coloring": True} and colored["max_steps"] == 1
    trivial = results["algorithms"]["cartesian_trivial"]
    assert trivial["latency"] == trivial["latency_by_execution"]["steps"]
    # the trivial algorithm's rounds depend on nothing: as a DAG they run like direct's one step
    assert trivial["latency_by_execution"]["dag"] == results["algorithms"]["direct"]["latency_by_execution"]["dag"]
    assert trivial["max_steps"] > 1 and set(trivial["speedup_over_direct_by_execution"]) == {"steps", "dag"}
    for bad, word in ((["--execution", "eager"], "--execution"), (["--algorithms", "direct+colour"], "colour")):
        with pytest.raises(SystemExit) as exit_info:
            main(["simulate", "--ranks", "16", "--topology", "moore:D=2,R=1", *bad])
        assert str(exit_info.value.code).startswith("simulate: ") and word in str(exit_info.value.code)


def test_cross_is_the_periodic_cartesian_neighborhood():
    adjacency = generate("cross:d=4", 512)  # SC12 Fig. 11: the 9-point stencil on 512 processes
    dims = adjacency.dims
    assert dims == compute_dims(512, 4) and min(dims) >= 3
    coords = [tuple(int(x) for x in c) for c in numpy.array(numpy.unravel_index(numpy.arange(512), dims)).T]
    for rank in (0, 77, 511):
        expected = []
        for axis in range(4):
            for sign in (-1, 1):
                moved = list(coords[rank])
                moved[axis] = (moved[axis] + sign) % dims[axis]
                expected.append(int(numpy.ravel_multi_index(moved, dims)))
        assert list(adjacency.destinations[rank]) == expected
    run = build_patterns(generate("cross:d=2", 64), "cartesian", "alltoall")
    assert run.verified is not None and max(len(p.steps) for p in run.patterns) >= 2


def test_parse_variant_reads_names_and_options():
    from sparsecoll.algorithms import parse_variant
    assert parse_variant("direct") == ("direct", {})
    assert parse_variant("direct+coloring") == ("direct", {"coloring": True})
    assert parse_variant("distance_halving+ranks_per_socket=4+coloring=false") == (
        "distance_halving", {"ranks_per_socket": 4, "coloring": False})
    for bad in ("", "nosuch+coloring", "direct+", "direct+coloring="):
        with pytest.raises(ValueError, match="algorithm"):
            parse_variant(bad)


def test_create_dist_graph_from_adjacency():
    adjacency = moore(1, D=2, R=1)  # one rank: every offset wraps to itself
    graph = create_dist_graph(MPI.COMM_SELF, adjacency)
    try:
        sources, destinations, _ = graph.Get_dist_neighbors()
        assert list(sources) == [0] * 8 == list(destinations)
    finally:
        graph.Free()


@pytest.mark.parametrize("family", FAMILIES)
def test_direct_at_1024_virtual_ranks(family):
    run = build_patterns(generate("random:density=0.05,seed=7", 1024), "direct", family)
    assert run.verified["ranks"] == 1024
    summary = run.summary()
    assert summary["max_steps"] == 1
    assert summary["max_depth"] == 0 and summary["max_messages"] == 0  # purely local builder
    assert summary["mean_sends"] == pytest.approx(0.05 * 1023, rel=0.1)


BUILDABLE = sorted(name for name, alg in REGISTRY.items() if not alg.runs_library)


@pytest.mark.parametrize("name", BUILDABLE)
@pytest.mark.parametrize("spec", ["moore:D=2,R=1", "moore:D=3,R=1", "random:density=0.2,seed=1"])
@pytest.mark.parametrize("family", FAMILIES)
def test_every_registered_builder_verifies(name, spec, family):
    try:
        run = build_patterns(generate(spec, 64), name, family)
    except NotImplementedError as exc:
        pytest.skip(f"{name} does not support {spec} {family}: {exc}")
    assert run.verified["ranks"] == 64


# -- registry-driven: every builder, with the placement its options take ---------------------

#: Small-N cases every buildable algorithm is run on; the script
#: benchmarks/simulate-all-builders/simulate_all_builders.py runs the same at 1024+ ranks.
SMALL_CASES = [("moore:D=2,R=2", 64), ("random:density=0.1,seed=3", 96), ("stencil:d=3,n=3,f=-1", 64)]
SMALL_PLACEMENT = Placement(8, 2)


@pytest.mark.parametrize("name", BUILDABLE)
def test_every_builder_runs_on_some_case_and_verifies(name):
    """No buildable algorithm may be skipped everywhere: each verifies on at least one case."""
    verified = []
    for spec, ranks in SMALL_CASES:
        adjacency = generate(spec, ranks)
        for family in get_algorithm(name).families:
            try:
                run = build_patterns(adjacency, name, family, placement_options(name, SMALL_PLACEMENT))
            except NotImplementedError:
                continue
            assert run.verified["ranks"] == ranks
            verified.append((spec, family))
    assert verified, f"{name}: no small case is supported, so nothing checks its builder"


def test_distance_halving_halves_with_the_placement_it_is_given():
    options = placement_options("distance_halving", SMALL_PLACEMENT)
    assert options == {"ranks_per_socket": 8, "sockets_per_node": 2}
    assert placement_options("direct", SMALL_PLACEMENT) == {} == placement_options("distance_halving", None)
    run = build_patterns(generate("random:density=0.3,seed=2", 64), "distance_halving", "allgather", options)
    assert run.summary()["max_steps"] > 1  # 64 ranks, 8 per socket: halving steps before the final one


def test_simulate_charges_the_placement_the_builders_read_from_the_environment(monkeypatch, capsys):
    """SPARSECOLL_PLACEMENT reaches the builders on virtual ranks; the model, the results and the
    header say the same placement (they said none, and predicted an all pairs network)."""
    from sparsecoll.model.params import hockney
    from sparsecoll.sim.simulate import simulate
    from sparsecoll.tools.cli import main
    machine = hockney(1.0, 0.0)
    monkeypatch.setenv("SPARSECOLL_PLACEMENT", "4x1")
    by_environment = simulate(16, "random:density=0.5", ["node_aware"], "allgather", [4], machine)
    monkeypatch.delenv("SPARSECOLL_PLACEMENT")
    given = simulate(16, "random:density=0.5", ["node_aware"], "allgather", [4], machine, Placement(4, 1))
    assert by_environment["placement"] == "4x1"
    assert by_environment["algorithms"]["node_aware"]["latency"] == given["algorithms"]["node_aware"]["latency"]
    monkeypatch.setenv("SPARSECOLL_PLACEMENT", "4x1")
    assert main(["simulate", "--ranks", "16", "--topology", "random:density=0.5", "--algorithms", "node_aware",
                 "--sizes", "4"]) == 0
    assert "placement 4x1 (from SPARSECOLL_PLACEMENT)" in capsys.readouterr().out
    for value, ranks, named in (("abc", 16, "SPARSECOLL_PLACEMENT"), ("32x1", 16, "SPARSECOLL_PLACEMENT"),
                                (None, 16, "--placement")):
        if value is None:
            monkeypatch.delenv("SPARSECOLL_PLACEMENT")
        else:
            monkeypatch.setenv("SPARSECOLL_PLACEMENT", value)
        extra = ["--placement", "32x1"] if value is None else []
        with pytest.raises(SystemExit) as exit_info:  # a bad one: one line before any build (was a traceback)
            main(["simulate", "--ranks", str(ranks), "--topology", "random:density=0.5", "--algorithms",
                  "direct,node_aware", *extra])
        assert str(exit_info.value.code).startswith(f"simulate: {named}"), exit_info.value.code


def _drop_one_receive(build):
    def broken(topology, comm, options, family):
        pattern = build(topology, comm, options, family)
        if topology.rank != 0:
            return pattern
        steps = list(pattern.steps)
        for s, step in enumerate(steps):
            if step.recvs:
                steps[s] = Step(step.sends, step.recvs[1:])
                break
        return Pattern(pattern.family, pattern.rank, tuple(steps), pattern.info)
    return broken


@pytest.mark.parametrize("name", ["direct", "common_neighbor"])
def test_a_wrong_pattern_fails_the_harness(name, monkeypatch):
    """The registry-driven tests can fail: a builder that loses one receive is caught by verify."""
    entry = REGISTRY[name]
    monkeypatch.setitem(REGISTRY, name, dataclasses.replace(entry, build=_drop_one_receive(entry.build)))
    with pytest.raises(VerificationError):
        build_patterns(generate("moore:D=2,R=2", 64), name, "allgather")


def test_generate_covers_the_benchmark_specs():
    stencil = generate("stencil:d=2,n=3,f=-1", 16)
    assert stencil.dims == (4, 4) and len(stencil.offsets) == 8
    assert stencil.destinations == generate("moore:D=2,R=1", 16).destinations  # same 9-point offsets
    matrix = generate("matrix:", 8)
    assert matrix.size == 8 and matrix.edges() > 0
    for r, dests in enumerate(matrix.destinations):
        for d in dests:
            assert r in matrix.sources[d]
    assert generate("random:density=0.2,seed=1", 16).destinations == \
        generate("random:density=0.2,seed=1", 16).destinations
    with pytest.raises(ValueError, match="spec"):
        generate("cart:d=2", 8)
