"""Cartesian schedules without MPI: every rank's Pattern built in one process and verified.

The schedules of ``cartesian`` and ``cartesian_trivial`` are local (Träff and Hunold,
ICPP 2019, Proposition 3.1), so all ranks of a grid can be built here and checked with
:func:`sparsecoll.verify` at scale; the counts are checked against the paper.
"""

from __future__ import annotations

import itertools

import numpy
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsecoll import verify
from sparsecoll.algorithms import get
from sparsecoll.algorithms.cartesian import (
    allgather_schedule,
    alltoall_schedule,
    combining_pattern,
    trivial_pattern,
)
from sparsecoll.pattern import stats
from sparsecoll.tools.cartesian_table import FIGURE2_OFFSETS, PAPER_TABLE1, table1_row
from sparsecoll.tools.cli import main
from sparsecoll.topology import PROC_NULL, occurrence_labels
from sparsecoll.topology.cartesian import Grid, offset_topology, routes
from sparsecoll.topology.specs import stencil_offsets

FAMILIES = ("allgather", "alltoall")
BUILDERS = {"cartesian": combining_pattern, "cartesian_trivial": trivial_pattern}

FIVE_POINT = [(0, 1), (0, -1), (-1, 0), (1, 0)]
NINE_POINT = stencil_offsets(2, 3)
LISTING3 = [(0, 1), (0, -1), (-1, 0), (1, 0), (-1, 1), (1, 1), (1, -1), (-1, -1)]

CASES = {
    # name: (dims, periods, offsets)
    "27pt_8x8x8_torus": ((8, 8, 8), (True,) * 3, stencil_offsets(3, 3)),
    "27pt_8x8x8_mesh": ((8, 8, 8), (False,) * 3, stencil_offsets(3, 3)),
    "asym_n4_8x8x8_mixed": ((8, 8, 8), (True, False, True), stencil_offsets(3, 4)),
    "125pt_6x5x4_torus": ((6, 5, 4), (True,) * 3, stencil_offsets(3, 5)),
    "9pt_8x8_torus": ((8, 8), (True, True), NINE_POINT),
    "9pt_7x5_mesh": ((7, 5), (False, False), NINE_POINT),
    "listing3_order_4x6_mixed": ((4, 6), (False, True), LISTING3),
    "5pt_8x8_mesh": ((8, 8), (False, False), FIVE_POINT),
    "asym_n4_2d_torus": ((5, 6), (True, True), stencil_offsets(2, 4)),
    "asym_n5_2d_mesh": ((6, 6), (False, False), stencil_offsets(2, 5)),
    "zero_and_repeats": ((4, 4), (True, False), NINE_POINT + [(0, 0), (1, 1), (0, 0), (-1, 0)]),
    "dims_1_and_2_torus": ((1, 2, 3), (True,) * 3, stencil_offsets(3, 3) + [(0, 0, 0)]),
    "dims_1_and_2_mesh": ((2, 1, 3), (False,) * 3, stencil_offsets(3, 3)),
    "dims_2_2_torus_far": ((2, 2), (True, True), NINE_POINT + [(2, 3), (-3, 2), (4, 4)]),
    "far_offsets_mesh": ((3, 4), (False, False), [(5, 0), (0, -4), (2, 3), (-2, -3), (1, 1)]),
    "single_rank": ((1,), (False,), [(0,), (1,), (-1,), (0,)]),
    "1d_ring_long_reach": ((5,), (True,), [(k,) for k in range(-6, 7)]),
    "4d_3x2x2x2_mixed": ((3, 2, 2, 2), (True, False, True, False), stencil_offsets(4, 3)),
}


def _topologies(dims, periods, offsets):
    grid = Grid(tuple(dims), tuple(periods))
    return [offset_topology(grid, rank, offsets) for rank in range(grid.size)]


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("algorithm", sorted(BUILDERS))
def test_patterns_verify_on_every_rank(name, algorithm):
    topologies = _topologies(*CASES[name])
    for family in FAMILIES:
        patterns = [BUILDERS[algorithm](topology, family) for topology in topologies]
        verify(patterns, topologies)


@given(data=st.data())
@settings(max_examples=60, deadline=None)
def test_random_neighborhoods_verify(data):
    ndim = data.draw(st.integers(1, 3))
    dims = data.draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim))
    periods = data.draw(st.lists(st.booleans(), min_size=ndim, max_size=ndim))
    offset = st.tuples(*[st.integers(-5, 5)] * ndim)
    offsets = data.draw(st.lists(offset, min_size=0, max_size=12))
    topologies = _topologies(dims, periods, offsets)
    for family in FAMILIES:
        for build in BUILDERS.values():
            verify([build(t, family) for t in topologies], topologies)


def test_registry_builds_match_direct_calls():
    topologies = _topologies((4, 4), (True, True), NINE_POINT)
    for name, build in BUILDERS.items():
        algorithm = get(name)
        assert algorithm.unsupported_reason(topologies[5], "alltoall") is None
        assert algorithm.build(topologies[5], None, {}, "alltoall") == build(topologies[5], "alltoall")


def test_topology_edges_and_labels():
    grid = Grid((3, 4), (False, True))
    offsets = [(1, 0), (0, 4), (0, 0), (1, 4), (-1, 1), (1, 0)]
    topology = offset_topology(grid, grid.rank_at((2, 3)), offsets)
    assert topology.destinations == (PROC_NULL, 11, 11, PROC_NULL, 4, PROC_NULL)
    assert topology.sources == (7, 11, 11, 7, PROC_NULL, 7)
    # Routes carry MPI's occurrence labels, whatever the origin.
    labels = [label for _, label in routes(grid, offsets)]
    interior = offset_topology(grid, grid.rank_at((1, 0)), offsets)
    assert tuple(labels) == interior.out_labels == occurrence_labels(interior.destinations)


def test_grid_arithmetic_matches_numpy():
    grid = Grid((3, 4, 5), (True, False, True))
    for rank in range(grid.size):
        coords = grid.coords(rank)
        assert coords == tuple(int(c) for c in numpy.unravel_index(rank, grid.dims))
        assert grid.rank_at(coords) == rank
    assert grid.canonical((4, 2, 3)) == (1, 2, -2)
    assert grid.canonical((0, 4, 0)) is None
    assert grid.relative(grid.rank_at((2, 0, 4)), grid.rank_at((0, 3, 0))) == (1, 3, 1)
    assert grid.shift(grid.rank_at((0, 3, 0)), (-1, 1, 0)) == PROC_NULL


@pytest.mark.parametrize("d,n", sorted(PAPER_TABLE1))
def test_table1_counts_equal_the_paper(d, n):
    row = table1_row(d, n)
    assert (row["t"], row["C"], row["allgather_V"], row["alltoall_V"]) == PAPER_TABLE1[(d, n)][:4]


def test_table1_ratios():
    assert table1_row(2, 3)["ratio"] == pytest.approx(1.0)
    assert table1_row(5, 5)["ratio"] == pytest.approx(0.331, abs=5e-4)
    assert table1_row(3, 3)["ratio_with_zero"] == pytest.approx(PAPER_TABLE1[(3, 3)][4], abs=5e-4)


def test_figure2_allgather_tree():
    offsets = list(FIGURE2_OFFSETS)
    assert allgather_schedule(offsets, 3, (0, 1, 2)).volume == 12
    increasing = allgather_schedule(offsets, 3)
    assert increasing.order == (1, 2, 0)
    assert increasing.volume == 6  # edges; the paper's 7 counts the tree's nodes
    assert alltoall_schedule(offsets, 3).volume == 12  # z_i = 3 for all four blocks


def test_the_allgather_order_counts_zero_coordinates_as_section_3_2_does():
    """C_k is "the number of different kth coordinates", zero included: here 3, 2, 3 (non-zero
    only: 2, 2, 2, a tie that kept the plain order and a tree of 9 edges, not 8)."""
    offsets = [(2, -1, 0), (0, -2, 1), (0, -2, 0), (-1, -1, 1), (2, -2, -1)]
    schedule = allgather_schedule(offsets, 3)
    assert schedule.order == (1, 0, 2)
    assert schedule.volume == 8 == min(allgather_schedule(offsets, 3, order).volume
                                       for order in itertools.permutations(range(3)))
    assert allgather_schedule(offsets, 3, (0, 1, 2)).volume == 9
    assert schedule.rounds == 6  # distinct non-zero coordinates: 2 + 2 + 2


@pytest.mark.parametrize("family", FAMILIES)
def test_combining_counts_per_rank_on_a_torus(family):
    """On a torus every rank sends C messages with V blocks in d steps (Props. 3.2, 3.3)."""
    offsets = stencil_offsets(3, 4)
    for topology in _topologies((5, 5, 5), (True,) * 3, offsets)[:7]:
        numbers = stats(combining_pattern(topology, family))
        schedule = (alltoall_schedule if family == "alltoall" else allgather_schedule)(offsets, 3)
        assert numbers["steps"] == 3
        assert numbers["sends"] == numbers["recvs"] == schedule.rounds == 9
        assert numbers["send_items"] == numbers["recv_items"] == schedule.volume
        trivial = stats(trivial_pattern(topology, family))
        assert trivial["steps"] == trivial["sends"] == len(offsets)


def test_periodic_wraparound_merges_rounds():
    """On a torus of size 3, offsets 2 and -1 reach the same rank: one round, not two."""
    topology = offset_topology(Grid((3,), (True,)), 0, [(2,), (-1,), (1,)])
    numbers = stats(combining_pattern(topology, "alltoall"))
    assert numbers["sends"] == 2 and numbers["send_items"] == 3


def test_cartesian_algorithms_need_an_isomorphic_neighborhood():
    from sparsecoll.topology import graph_topology
    topology = graph_topology(0, 2, [1], [1])
    assert get("cartesian").unsupported_reason(topology, "alltoall").startswith("Cartesian algorithms need")


def test_schedules_are_linear_in_t_d():
    """Building the d=5, n=5 schedules (t = 3124) stays well within a second."""
    offsets = stencil_offsets(5, 5)
    import time
    start = time.perf_counter()
    alltoall_schedule(offsets, 5)
    allgather_schedule(offsets, 5)
    assert time.perf_counter() - start < 2.0


def test_stencil_offsets():
    assert stencil_offsets(2, 3) == [v for v in itertools.product((-1, 0, 1), repeat=2) if v != (0, 0)]
    assert len(stencil_offsets(2, 4)) == 15


def test_cartesian_table_command(capsys):
    assert main(["cartesian-table"]) == 0
    output = capsys.readouterr().out
    for (d, n), (t, c, allgather_v, alltoall_v, _) in PAPER_TABLE1.items():
        cells = f"{d:>2} {n:>2} {t:>6} {c:>4} {allgather_v:>12} {alltoall_v:>11}"
        assert cells in output, cells
    figure2 = {" ".join(line.split()[:-2]): int(line.split()[-2]) for line in output.splitlines()
               if line.endswith(" edges")}
    assert figure2 == {"plain order (0, 1, 2)": 12, "reversed order (2, 1, 0)": 6,
                       "increasing C_k order (1, 2, 0)": 6}
