"""distance_halving on real MPI: placement detection and overrides, negotiation agreement
across ranks on random graphs, results equal to ``direct``. Runs on every rank."""

from __future__ import annotations

import numpy
import pytest
from mpi4py import MPI

import sparsecoll
from sparsecoll.topology import placement
from sparsecoll.topology.generators import create_dist_graph, random_sparse

pytestmark = pytest.mark.timeout(240)

WORLD = MPI.COMM_WORLD


def graph(density: float, seed: int):
    return create_dist_graph(WORLD, random_sparse(WORLD.Get_size(), density, seed=seed))


def test_detected_placement_is_reported():
    raw = graph(0.5, 1)
    try:
        comm = sparsecoll.wrap(raw, "distance_halving")
        comm.pattern("allgather")
        info = comm.plan_stats("allgather")
    finally:
        raw.Free()
    assert info["placement_source"].startswith("detected: 1 node(s)")
    L, S = (int(x) for x in info["placement"].split("x"))
    assert L * S >= WORLD.Get_size()  # one node holds every rank
    assert WORLD.allgather(info["placement"]) == [info["placement"]] * WORLD.Get_size()
    keys = WORLD.allgather(placement.cpu_packages())
    if all(len(k) == 1 for k in keys):  # bound (or one package): sockets are known
        assert "node = socket" not in info["placement_source"]


def test_bad_override_raises_on_every_rank():
    raw = graph(0.5, 2)
    try:
        with pytest.raises(ValueError, match="larger than the communicator"):  # at wrap, before any message
            sparsecoll.wrap(raw, "distance_halving", ranks_per_socket=WORLD.Get_size() + 1)
        with pytest.raises(ValueError, match="ranks_per_socket: expected a positive integer, got 0"):
            sparsecoll.wrap(raw, "distance_halving", ranks_per_socket=0)
    finally:
        raw.Free()


@pytest.mark.parametrize("density", [0.1, 0.4, 0.8, 1.0])
@pytest.mark.parametrize("L", [1, 2])
def test_agents_agree_and_results_match_direct(density, L):
    n = WORLD.Get_size()
    if L > n:
        pytest.skip("needs at least L ranks")
    for seed in range(3):
        raw = graph(density, seed)
        try:
            comm = sparsecoll.wrap(raw, "distance_halving", ranks_per_socket=L)
            comm.pattern("allgather")
            info = comm.plan_stats("allgather")
            everyone = WORLD.allgather((info["agents"], info["origins"]))
            me = WORLD.Get_rank()
            for t, (a, o) in enumerate(zip(*everyone[me])):
                assert a < 0 or everyone[a][1][t] == me
                assert o < 0 or everyone[o][0][t] == me
            assert info["placement"] == f"{L}x1" and info["placement_source"] == "option"
            indegree = raw.Get_dist_neighbors_count()[0]
            send = numpy.arange(3, dtype="i8") + 100 * me
            got = numpy.full(3 * indegree, -1, dtype="i8")
            want = numpy.full(3 * indegree, -2, dtype="i8")
            comm.Neighbor_allgather(send, got)
            sparsecoll.wrap(raw, "direct").Neighbor_allgather(send, want)
            assert got.tolist() == want.tolist()
        finally:
            raw.Free()


def test_node_cores_are_the_union_of_the_ranks_affinities(monkeypatch):
    """A library that binds each rank to its own core leaves every rank an affinity of one core:
    the node's cores are the union over its ranks, and auto's load is ranks per those cores
    (one rank per core here, not SIZE ranks on one core); unbound ranks count their shared set."""
    from sparsecoll.model.profile import ranks_per_core
    size = WORLD.Get_size()
    monkeypatch.setattr(placement.os, "sched_getaffinity", lambda pid: {WORLD.Get_rank()})
    cores = placement.node_cores(WORLD)
    assert cores == size
    assert ranks_per_core(size, placement.Placement(size), cores) == 1.0
    monkeypatch.setattr(placement.os, "sched_getaffinity", lambda pid: {0, 1})
    assert placement.node_cores(WORLD) == 2
