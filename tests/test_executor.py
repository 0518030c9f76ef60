"""The steps executor's wire representation: messages to one peer joined within the library's limits,
adjacent pieces joined.

Runs in one process (messages to self on ``COMM_SELF``).
"""

from __future__ import annotations

import numpy
from hypothesis import given, settings
from hypothesis import strategies as st
from mpi4py import MPI

import sparsecoll
from sparsecoll.bind import BoundMessage
from sparsecoll.checks import MAX_COUNT
from sparsecoll.execute.p2p import (
    LIBRARY_WIRE_LIMITS,
    WireLimits,
    coalesce,
    joined,
    wire_limits,
    wire_runs,
)


def _runs(messages, limits=None) -> list:
    """Per run: the peer and the byte size of each message it joined."""
    return [(peer, [count * datatype.Get_size() for _, count, datatype in pieces])
            for peer, pieces in coalesce(messages, limits)]


def test_small_messages_to_one_peer_are_joined_in_order():
    limits = LIBRARY_WIRE_LIMITS["MPICH"]
    small = [BoundMessage(1, ((1000 + 8 * k, 8, MPI.BYTE),)) for k in range(3)]
    other = BoundMessage(2, ((5000, 2, MPI.INT32_T),))
    large = BoundMessage(1, ((9000, limits.eager_bytes, MPI.BYTE),))
    runs = coalesce([small[0], other, small[1], large, small[2]], limits)
    assert runs == [(1, small[0].pieces + small[1].pieces), (2, other.pieces), (1, large.pieces), (1, small[2].pieces)]
    joined_all = coalesce([small[0], other, small[1], large, small[2]], LIBRARY_WIRE_LIMITS["Open MPI"])
    assert joined_all == [(1, small[0].pieces + small[1].pieces + large.pieces + small[2].pieces), (2, other.pieces)]


def test_a_joined_message_never_crosses_the_eager_limit():
    """Joined eager messages stay eager (a joined message past the limit waits for a handshake)."""
    limits = WireLimits(eager_bytes=4000, join_any_size=False)
    assert wire_runs([0] * 5, [1500] * 5, limits) == [[0, 1], [2, 3], [4]]
    assert wire_runs([0] * 3, [2000, 2000, 1], limits) == [[0, 1], [2]]
    assert wire_runs([0] * 3, [2001, 2000, 1], limits) == [[0], [1, 2]]
    assert wire_runs([0, 0, 1, 0], [4001, 4001, 8, 8], limits) == [[0], [1], [2], [3]]


def test_where_the_library_gains_every_message_to_a_peer_is_joined():
    joining = WireLimits(eager_bytes=4000, join_any_size=True)
    assert wire_runs([0, 0, 1, 0, 1], [4001, 65536, 65536, 8, 2000], joining) == [[0, 1, 3], [2, 4]]


def test_the_running_library_has_its_measured_limits():
    from mpi4py import MPI as mpi
    vendor = mpi.get_vendor()[0]
    assert vendor in LIBRARY_WIRE_LIMITS  # the two libraries sparsecoll is tested on
    assert wire_limits() == LIBRARY_WIRE_LIMITS[vendor]
    assert wire_limits().join_any_size == (vendor == "Open MPI")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.sampled_from([0, 1, 3, 500, 512, 513, 992, 993, 1984, 2048, 4096]))),
       st.sampled_from(sorted(LIBRARY_WIRE_LIMITS)))
def test_both_ends_cut_the_same_runs(edges, library):
    """The sender's blocks (bytes) and the receiver's (4-byte integers, other addresses) of the
    same edges give runs of the same sizes per peer, so every joined message has its match
    (under each library's limits)."""
    limits = LIBRARY_WIRE_LIMITS[library]
    sends = [BoundMessage(peer, ((10_000 * k, 4 * units, MPI.BYTE),)) for k, (peer, units) in enumerate(edges)]
    recvs = [BoundMessage(peer, ((7 + 50_000 * k, units, MPI.INT32_T),)) for k, (peer, units) in enumerate(edges)]
    for peer in range(3):
        assert [run for run in _runs(sends, limits) if run[0] == peer] == \
            [run for run in _runs(recvs, limits) if run[0] == peer]


def test_adjacent_pieces_of_one_datatype_are_joined():
    double = MPI.DOUBLE
    assert joined(((800, 2, double), (816, 3, double), (840, 0, double), (840, 1, double))) == ((800, 6, double),)
    assert joined(((800, 2, double), (900, 1, double))) == ((800, 2, double), (900, 1, double))
    assert joined(((800, 2, MPI.INT64_T), (816, 1, double))) == ((800, 2, MPI.INT64_T), (816, 1, double))
    assert joined(((800, 0, double), (900, 0, double))) == ((800, 0, double),)
    # no joined count above MPI's int (Open MPI 5.0 refuses it: two adjacent 2**30 + 8 byte blocks failed)
    big = 2**30 + 8
    assert joined(((0, big, MPI.BYTE), (big, big, MPI.BYTE))) == ((0, big, MPI.BYTE), (big, big, MPI.BYTE))
    assert joined(((0, MAX_COUNT - 1, MPI.BYTE), (MAX_COUNT - 1, 1, MPI.BYTE))) == ((0, MAX_COUNT, MPI.BYTE),)
    # one piece of more is cut (an item in transit of 2**31 + 8 bytes, stored as MPI_PACKED, failed)
    large = 2 * MAX_COUNT + 10
    assert joined(((64, large, MPI.PACKED),)) == ((64, MAX_COUNT, MPI.PACKED), (64 + MAX_COUNT, MAX_COUNT, MPI.PACKED),
                                                  (64 + 2 * MAX_COUNT, 10, MPI.PACKED))
    pairs = MPI.DOUBLE.Create_resized(0, 16).Commit()  # every other double: extent 16
    try:
        assert joined(((800, 2, pairs), (832, 1, pairs))) == ((800, 3, pairs),)
        assert joined(((800, MAX_COUNT + 1, pairs),)) == ((800, MAX_COUNT, pairs), (800 + 16 * MAX_COUNT, 1, pairs))
    finally:
        pairs.Free()


def _self_graph(edges: int):
    return MPI.COMM_SELF.Create_dist_graph_adjacent([0] * edges, [0] * edges)


def test_repeated_edges_to_one_rank_are_one_message_and_land_in_order():
    graph = _self_graph(8)
    try:
        comm = sparsecoll.wrap(graph, "direct")
        send = numpy.arange(16, dtype="i4")
        recv = numpy.zeros(16, dtype="i4")
        comm.Neighbor_alltoall(send, recv)
        assert recv.tolist() == send.tolist()
        request = comm.Neighbor_alltoall_init(send, recv)
        steps = comm.runtime.requests_for(comm.runtime.bind_uncached(comm.plan, "alltoall", send, recv))
        try:
            assert [len(requests) for requests in steps.steps] == [2]  # one receive, one send
        finally:
            steps.free()
        recv[:] = 0
        send += 100
        request.Start()
        request.Wait()
        request.Free()
        assert recv.tolist() == send.tolist()
        big = numpy.arange(8 * 1024, dtype="i4")  # 4 KiB blocks: past every library's eager limit
        out = numpy.zeros_like(big)
        comm.Ineighbor_alltoall(big, out).Wait()
        assert out.tolist() == big.tolist()
        steps = comm.runtime.requests_for(comm.runtime.bind_uncached(comm.plan, "alltoall", big, out))
        try:  # joined where the library gains by it (Open MPI), else one message per edge
            assert [len(requests) for requests in steps.steps] == [2 if wire_limits().join_any_size else 16]
        finally:
            steps.free()
    finally:
        graph.Free()


def test_a_periodic_dimension_of_size_one_keeps_the_cartesian_matching():
    """Both neighbors are this rank; block 0 (sent in the negative direction) lands in block 1."""
    cart = MPI.COMM_SELF.Create_cart([1, 1], periods=[True, True])
    try:
        comm = sparsecoll.wrap(cart, "direct")
        send = numpy.arange(4, dtype="f8")
        recv = numpy.zeros(4)
        comm.Neighbor_alltoall(send, recv)
        assert recv.tolist() == [1.0, 0.0, 3.0, 2.0]
        comm.Neighbor_alltoallv([send, ([1, 1, 1, 1], [3, 2, 1, 0])], [recv, ([1, 1, 1, 1], [0, 1, 2, 3])])
        assert recv.tolist() == [2.0, 3.0, 0.0, 1.0]
    finally:
        cart.Free()


def test_rma_runs_go_in_call_order_whatever_order_they_end_in():
    """EpochOrder: a ticket begins once every earlier one has finished, in any finishing order."""
    from sparsecoll.execute.rma import EpochOrder
    order = EpochOrder()
    first, second, third = order.take(), order.take(), order.take()
    assert order.ready(first) and not order.ready(second)
    order.finish(third)  # a reserved ticket given back early
    assert not order.ready(second)
    order.finish(first)
    assert order.ready(second)
    order.finish(second)
    assert order.ready(order.take())  # the third already finished: the next one goes


def test_rma_attached_ranges_join_within_a_page_only():
    from sparsecoll.execute.rma import PAGE, _merged_ranges
    base = 1 << 20  # page-aligned
    ranges = [(base + 100, 50), (base + 10, 20), (base + 200, 0), (base + 3000, 8), (base + 2 * PAGE, 8),
              (base + 3 * PAGE + 4, 4)]
    assert _merged_ranges(ranges) == [(base + 10, 2998), (base + 2 * PAGE, 8), (base + 3 * PAGE + 4, 4)]


def test_rma_dense_segments_are_plain_bytes_only():
    from sparsecoll.execute.rma import dense_segments
    strided = MPI.INT32_T.Create_vector(2, 1, 2).Commit()
    try:
        assert dense_segments(((1000, 2, MPI.DOUBLE), (1016, 3, MPI.DOUBLE))) == [(1000, 40)]
        assert dense_segments(((1000, 1, strided),)) is None
        assert dense_segments(((1000, 0, MPI.DOUBLE),)) == []
    finally:
        strided.Free()


def test_waiting_yields_only_where_the_user_asked_mpi_to(monkeypatch):
    """waitsome/waitany: MPI's own calls, or (where an environment setting asks MPI to yield while
    it waits) Testsome/Testany polls with sched_yield between them; the same results either way."""
    from sparsecoll.execute import waiting
    assert waiting.asked_to_yield({"MPIR_CVAR_POLLS_BEFORE_YIELD": "1"})
    assert waiting.asked_to_yield({"OMPI_MCA_mpi_yield_when_idle": "true"})
    assert waiting.asked_to_yield({"MPIR_CVAR_CH4_PROGRESS_THROTTLE": "Yes"})
    assert not waiting.asked_to_yield({"OMPI_MCA_mpi_yield_when_idle": "false"})
    assert not waiting.asked_to_yield({"MPIR_CVAR_POLLS_BEFORE_YIELD": "0", "PATH": "/bin"})
    comm = MPI.COMM_SELF
    for yielding in (False, True):
        monkeypatch.setattr(waiting, "YIELDING", yielding)
        got = numpy.zeros(2)
        sent = numpy.array([3.0, 4.0])
        receives = [comm.Irecv(got[i:i + 1], source=0, tag=i) for i in range(2)]
        sends = [comm.Isend(sent[i:i + 1], dest=0, tag=i) for i in range(2)]
        done = set()
        while len(done) < 2:
            done.update(waiting.waitsome(receives) or ())
        MPI.Request.Waitall(sends)
        assert got.tolist() == [3.0, 4.0]
        assert waiting.waitsome(receives) is None  # every request inactive, as MPI returns it
        receive = comm.Irecv(got[:1], source=0, tag=9)
        comm.Send(sent[1:], dest=0, tag=9)
        assert waiting.waitany([receive]) == 0 and got[0] == 4.0
    # polling: a Testsome that finds nothing twice yields twice, then returns what completed
    yields, answers = [], [[], [], [1]]
    monkeypatch.setattr(waiting, "YIELDING", True)
    monkeypatch.setattr(waiting, "_yield", lambda: yields.append(1))
    monkeypatch.setattr(waiting, "_Testsome", lambda requests: answers.pop(0))
    assert waiting.waitsome([None, None]) == [1] and len(yields) == 2
