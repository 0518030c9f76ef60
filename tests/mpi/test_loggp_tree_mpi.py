"""loggp_tree on real MPI: the balancing protocol over the library's communicator on the hot spot
(where it builds a forwarding tree from 5 ranks on), every call form against locally computed
results, and the numbers in plan_stats.

Runs on every rank (launched by ``tests/test_mpi.py``). The expected blocks are computed here,
not by the library's call: Open MPI 5.0.x hangs on graphs where a rank has exactly one of in-
and out-degree zero (open-mpi/ompi#14452), which is the hot spot.
"""

from __future__ import annotations

import numpy
import pytest
from mpi4py import MPI

import sparsecoll
from sparsecoll.topology.generators import create_dist_graph, hotspot

pytestmark = pytest.mark.timeout(120)

#: ``ceil(L/o) = 0`` and ``t = 0``: the root hands off as soon as ``X >= 2`` (from 5 ranks on).
EAGER = {"L": 0.0, "t": 0}
ROOT = 1


@pytest.fixture
def graph():
    world = MPI.COMM_WORLD
    comm = create_dist_graph(world, hotspot(world.Get_size(), root=ROOT % world.Get_size()))
    yield comm
    comm.Free()


def test_plan_stats_agree_across_ranks(graph):
    comm = sparsecoll.wrap(graph, "loggp_tree", **EAGER)
    for family in ("allgather", "alltoall"):
        comm.pattern(family)  # collective: plan_stats only reports what was built
        stats = comm.plan_stats(family)
        everyone = graph.allgather(stats)
        assert len({s["balancing_iterations"] for s in everyone}) == 1
        assert sum(s["moved"] for s in everyone) == sum(s["forwarded"] for s in everyone)
        assert stats["L"] == 0.0 and stats["t"] == 0 and stats["o"] > 0
        size = graph.Get_size()
        root_sends = everyone[ROOT % size]["sends"]
        if size >= 5:
            assert stats["steps"] >= 1 and max(s["steps"] for s in everyone) == 2
            assert root_sends < size - 1
        else:
            assert root_sends == size - 1


@pytest.mark.parametrize("form", ["blocking", "nonblocking", "persistent"])
def test_hotspot_delivers_in_every_form(graph, form):
    comm = sparsecoll.wrap(graph, "loggp_tree", **EAGER)
    sources, destinations, _ = graph.Get_dist_neighbors()
    rank = graph.Get_rank()
    for salt in range(2):
        gather_send = numpy.array([rank * 100 + salt, -rank], dtype="i4")
        gather_recv = numpy.full(2 * len(sources), -1, dtype="i4")
        personal_send = numpy.array([rank * 1000 + d * 10 + salt for d in destinations], dtype="i8")
        personal_recv = numpy.full(len(sources), -1, dtype="i8")
        if form == "blocking":
            comm.Neighbor_allgather(gather_send, gather_recv)
            comm.Neighbor_alltoall(personal_send, personal_recv)
        elif form == "nonblocking":
            requests = [comm.Ineighbor_allgather(gather_send, gather_recv),
                        comm.Ineighbor_alltoall(personal_send, personal_recv)]
            sparsecoll.waitall(requests)
        else:
            requests = [comm.Neighbor_allgather_init(gather_send, gather_recv),
                        comm.Neighbor_alltoall_init(personal_send, personal_recv)]
            for request in requests:
                request.Start()
            sparsecoll.waitall(requests)
            for request in requests:
                request.Free()
        assert gather_recv.tolist() == [x for s in sources for x in (s * 100 + salt, -s)]
        assert personal_recv.tolist() == [s * 1000 + rank * 10 + salt for s in sources]


def test_alltoallv_with_transit_blocks_of_different_sizes(graph):
    """Blocks in transit through a proxy have sizes only their origin and destination know."""
    comm = sparsecoll.wrap(graph, "loggp_tree", **EAGER)
    sources, destinations, _ = graph.Get_dist_neighbors()
    rank = graph.Get_rank()
    send_counts = [1 + d % 3 for d in destinations]
    send = numpy.array([rank * 1000 + d * 10 + j for d in destinations for j in range(1 + d % 3)], dtype="f8")
    recv_counts = [1 + rank % 3] * len(sources)
    recv = numpy.full(sum(recv_counts), -1.0)
    comm.Neighbor_alltoallv([send, send_counts, None, MPI.DOUBLE], [recv, recv_counts, None, MPI.DOUBLE])
    assert recv.tolist() == [float(s * 1000 + rank * 10 + j) for s in sources for j in range(1 + rank % 3)]


def test_bad_option_raises_before_any_message(graph):
    with pytest.raises(ValueError, match="^o:"):
        sparsecoll.wrap(graph, "loggp_tree", o=0)


def test_loggp_parameter_file(graph, tmp_path):
    """``wrap(..., loggp=PATH)`` reads L, o, G from the file (each rank its own copy here)."""
    from sparsecoll.model.params import loggp
    path = tmp_path / "loggp.json"
    loggp(3e-6, 1e-6, 0.0, 0.1e-9, "test file").save(path)
    comm = sparsecoll.wrap(graph, "loggp_tree", loggp=str(path))
    comm.pattern("alltoall")
    stats = comm.plan_stats("alltoall")
    assert (stats["L"], stats["o"], stats["lag"]) == (3e-6, 1e-6, 3)
    with pytest.raises(ValueError, match="^loggp:"):
        sparsecoll.wrap(graph, "loggp_tree", loggp=str(tmp_path / "missing.json"))
