"""common_neighbor on real MPI: Phase 1 over the library's communicator, the numbers in
plan_stats, and the non-persistent mode (``rebind=True``) against the cached one.

Runs on every rank (launched by ``tests/test_mpi.py``).
"""

from __future__ import annotations

import numpy
import pytest
from mpi4py import MPI

import sparsecoll
from sparsecoll.topology.generators import create_dist_graph, moore

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def graph():
    world = MPI.COMM_WORLD
    comm = create_dist_graph(world, moore(world.Get_size(), D=2, R=2))
    yield comm
    comm.Free()


def test_plan_stats_agree_across_ranks(graph):
    comm = sparsecoll.wrap(graph, "common_neighbor")
    comm.pattern("allgather")  # collective: plan_stats only reports what was built
    stats = comm.plan_stats("allgather")
    everyone = graph.allgather(stats)
    assert len({s["pairs_total"] for s in everyone}) == 1
    assert 2 * stats["pairs_total"] == sum(s["friends_paired"] for s in everyone)
    assert stats["degenerate"] == (stats["pairs_total"] == 0)
    assert stats["phase1_messages"] >= 0 and stats["alg2_iterations"] >= stats["friends_paired"]
    # a periodic 5x5 neighborhood repeats neighbors on these small grids; with 25 distinct
    # neighbors or more (size >= 25) friends exist, at 1 rank there is nothing to combine
    if graph.Get_size() == 1:
        assert stats["degenerate"] and stats["sends"] == 0


@pytest.mark.parametrize("rebind", [False, True])
def test_rebind_gives_the_same_result_and_caches_nothing(graph, rebind):
    comm = sparsecoll.wrap(graph, "common_neighbor", rebind=rebind)
    sources, _, _ = graph.Get_dist_neighbors()
    rank = graph.Get_rank()
    for salt in range(3):
        send = numpy.array([rank * 10 + salt, -rank], dtype="i4")
        recv = numpy.full(2 * len(sources), -1, dtype="i4")
        comm.Neighbor_allgatherv(send, [recv, [2] * len(sources), None, MPI.INT32_T])
        expected = numpy.array([x for s in sources for x in (s * 10 + salt, -s)], dtype="i4")
        assert recv.tolist() == expected.tolist()
        request = comm.Ineighbor_allgather(send[:1], recv[:len(sources)])
        request.Wait()
        assert recv[:len(sources)].tolist() == [s * 10 + salt for s in sources]
    assert (comm.runtime.cache_sizes()["blocking_executors"] == 0) == rebind


def test_rebind_must_be_a_bool(graph):
    with pytest.raises(TypeError, match="rebind"):
        sparsecoll.wrap(graph, "common_neighbor", rebind="yes")
