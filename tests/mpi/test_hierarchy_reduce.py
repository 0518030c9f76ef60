"""Reduce and Allreduce with dynamic leaders (section III of the paper on hierarchical shared-memory
collectives and imbalanced process arrival): results against the MPI library's own call on
COMM_WORLD, exactly on integer data, with seeded random sleeps before every call so the arrival
order (and so the leaders) changes from call to call; emulated nodes of 1, 2 and 3 ranks (an
uneven last node where the rank count is not a multiple); roots 0 and last; IN_PLACE; the slot
ring wrapping around and the window growing; the fallback of a non-commutative op; the
bookkeeping invariants (one leader per node and call, every control message received).

Runs on every rank (launched by ``tests/test_mpi.py``).
"""

from __future__ import annotations

import random
import time

import numpy
import pytest
from mpi4py import MPI

import sparsecoll
from sparsecoll.hierarchy import NodeLayout, reduce_dynamic
from sparsecoll.hierarchy.reduce_dynamic import DynamicReduce

WORLD = MPI.COMM_WORLD
RANK, SIZE = WORLD.Get_rank(), WORLD.Get_size()
RANKS_PER_NODE = (1, 2, 3)
ROOTS = sorted({0, SIZE - 1})
#: longest random sleep before a call (seconds): a few milliseconds, enough to reorder arrivals
MAX_SLEEP = 0.004


def _mod_sum(a, b, datatype):
    """A user-defined commutative op on int64: sum modulo 1009 (b = (a + b) % 1009)."""
    x = numpy.frombuffer(a, dtype=numpy.int64)
    y = numpy.frombuffer(b, dtype=numpy.int64)
    y[:] = (x + y) % 1009


def _first_wins(a, b, datatype):
    """A user-defined non-commutative op: the left operand (b = a): MPI's result is rank 0's data."""
    numpy.frombuffer(b, dtype=numpy.int64)[:] = numpy.frombuffer(a, dtype=numpy.int64)


def _affine(a, b, datatype):
    """A non-commutative op on elements of type PAIR, (p, q) meaning x -> p*x + q: b = a o b,
    modulo 1000003."""
    x = numpy.frombuffer(a, dtype=numpy.int64).reshape(-1, 2)
    y = numpy.frombuffer(b, dtype=numpy.int64).reshape(-1, 2)
    p = (y[:, 0] * x[:, 0]) % 1000003
    q = (y[:, 1] * x[:, 0] + x[:, 1]) % 1000003
    y[:, 0], y[:, 1] = p, q


MOD_SUM = MPI.Op.Create(_mod_sum, commute=True)
FIRST_WINS = MPI.Op.Create(_first_wins, commute=False)
AFFINE = MPI.Op.Create(_affine, commute=False)
PAIR = MPI.INT64_T.Create_contiguous(2).Commit()  # never freed: lives as long as the module
OPS = {"sum": MPI.SUM, "max": MPI.MAX, "user": MOD_SUM}


class _Library:
    """The fixed-order fallback the tests give: the MPI library's own calls on a duplicate."""

    def __init__(self):
        self.comm = WORLD.Dup()

    def reduce(self, sendbuf, recvbuf, op, root):
        self.comm.Reduce(sendbuf, recvbuf, op, root)
        return True

    def allreduce(self, sendbuf, recvbuf, op):
        self.comm.Allreduce(sendbuf, recvbuf, op)
        return True


@pytest.fixture(scope="module", params=RANKS_PER_NODE, ids=lambda k: f"{k}pernode")
def reducer(request):
    """One DynamicReduce per layout, shared by the tests (they compare stats before and after)."""
    layout = NodeLayout.create(WORLD, ranks_per_node=request.param)
    library = _Library()
    made = DynamicReduce(WORLD, layout, library.reduce, library.allreduce, "library")
    yield made
    made.free()
    library.comm.Free()
    layout.free()


def _sleeper(seed: int):
    generator = random.Random(seed * 7919 + RANK)
    return lambda: time.sleep(generator.uniform(0, MAX_SLEEP))


def _data(call: int, count: int, dtype="i8") -> numpy.ndarray:
    generator = numpy.random.default_rng(1000 * call + RANK)
    return generator.integers(-1000, 1000, size=count).astype(dtype)


@pytest.mark.parametrize("op_name", sorted(OPS))
@pytest.mark.parametrize("root", ROOTS)
def test_reduce_integers_equal_library(reducer, op_name, root):
    op, sleep = OPS[op_name], _sleeper(root)
    for call in range(reduce_dynamic.SLOTS + 2):  # the slot ring wraps around
        send = numpy.abs(_data(call, 5)) if op is MOD_SUM else _data(call, 5)
        got = numpy.full(5, -7, dtype="i8") if RANK == root else None
        expected = numpy.empty(5, dtype="i8") if RANK == root else None
        sleep()
        reducer.reduce(send, got, op, root)
        WORLD.Reduce(send, expected, op, root)
        if RANK == root:
            assert got.tolist() == expected.tolist()
    assert reducer.stats()["last_call"] == reduce_dynamic.DYNAMIC_LEADERS


@pytest.mark.parametrize("root", ROOTS)
def test_reduce_in_place_at_root(reducer, root):
    sleep = _sleeper(11 + root)
    for call in range(3):
        send = _data(call, 4, "i4")
        mine = send.copy()
        sleep()
        if RANK == root:
            reducer.reduce(MPI.IN_PLACE, mine, MPI.SUM, root)
        else:
            reducer.reduce(mine, None, MPI.SUM, root)
        expected = numpy.empty(4, dtype="i4") if RANK == root else None
        WORLD.Reduce(send, expected, MPI.SUM, root)
        if RANK == root:
            assert mine.tolist() == expected.tolist()


@pytest.mark.parametrize("op_name", sorted(OPS))
def test_allreduce_integers_equal_library(reducer, op_name):
    op, sleep = OPS[op_name], _sleeper(23)
    for call in range(reduce_dynamic.SLOTS + 1):
        send = numpy.abs(_data(call, 6)) if op is MOD_SUM else _data(call, 6)
        got = numpy.full(6, -7, dtype="i8")
        expected = numpy.empty(6, dtype="i8")
        sleep()
        if call % 2:  # every rank in place (MPI allows it on any subset of ranks for Allreduce)
            got[:] = send
            reducer.allreduce(MPI.IN_PLACE, got, op)
        else:
            reducer.allreduce(send, got, op)
        WORLD.Allreduce(send, expected, op)
        assert got.tolist() == expected.tolist()


def test_mixed_reduce_and_allreduce_grow_the_window(reducer):
    """Counts that grow make the window grow (collective on the node) between calls of both kinds."""
    sleep = _sleeper(31)
    grown_before = reducer.shared.regrowths
    for call, count in enumerate((1, 3, 700, 2, 9000, 5)):
        send = _data(call, count)
        root = call % SIZE
        got = numpy.empty(count, dtype="i8")
        expected = numpy.empty(count, dtype="i8")
        sleep()
        if call % 2:
            reducer.allreduce(send, got, MPI.SUM)
            WORLD.Allreduce(send, expected, MPI.SUM)
            assert got.tolist() == expected.tolist()
        else:
            reducer.reduce(send, got, MPI.SUM, root)
            WORLD.Reduce(send, expected, MPI.SUM, root)
            if RANK == root:
                assert got.tolist() == expected.tolist()
    assert reducer.shared.regrowths > grown_before


def test_a_rank_far_behind(reducer):
    """One rank arrives late to a run of reduces longer than the slot ring: the others of its node
    run ahead until the ring is full and wait for it; every result is still right."""
    calls = 2 * reduce_dynamic.SLOTS + 1
    sends = [_data(call, 3) for call in range(calls)]
    results = [numpy.empty(3, dtype="i8") for _ in range(calls)]
    if RANK == SIZE - 1:
        time.sleep(0.05)
    for call in range(calls):
        reducer.reduce(sends[call], results[call], MPI.SUM, 0)
    for call in range(calls):
        expected = numpy.empty(3, dtype="i8")
        WORLD.Reduce(sends[call], expected, MPI.SUM, 0)
        if RANK == 0:
            assert results[call].tolist() == expected.tolist()


def test_vector_datatype_leaves_gaps_alone(reducer):
    vector = MPI.INT64_T.Create_vector(3, 1, 2).Commit()
    try:
        for root in ROOTS:
            send = numpy.arange(6, dtype="i8") + 10 * RANK
            got = numpy.full(6, -7, dtype="i8")
            reducer.reduce([send, 1, vector], [got, 1, vector], MPI.SUM, root)
            all_sends = WORLD.allgather(send)
            if RANK == root:
                assert got[0::2].tolist() == sum(s[0::2] for s in all_sends).tolist()
                assert got[1::2].tolist() == [-7, -7, -7]
    finally:
        vector.Free()


def test_floats_within_the_summation_bound(reducer):
    sleep = _sleeper(41)
    for call in range(3):
        send = numpy.random.default_rng(call * 100 + RANK).standard_normal(50) * 1e3
        got = numpy.empty(50)
        sleep()
        reducer.allreduce(send, got, MPI.SUM)
        everything = numpy.array(WORLD.allgather(send))
        exact_order = everything.sum(axis=0)
        bound = (SIZE - 1) * numpy.finfo(numpy.float64).eps * numpy.abs(everything).sum(axis=0)
        assert (numpy.abs(got - exact_order) <= 2 * bound).all()


@pytest.mark.parametrize("op", [FIRST_WINS, AFFINE], ids=["first_wins", "affine"])
@pytest.mark.parametrize("root", ROOTS)
def test_non_commutative_falls_back_to_fixed_order(reducer, op, root):
    generator = numpy.random.default_rng(RANK + 5)
    send = numpy.stack([generator.integers(1, 1000, 4), generator.integers(0, 1000, 4)], axis=1).reshape(-1)
    got = numpy.empty(8, dtype="i8")
    expected = numpy.empty(8, dtype="i8")
    datatype, count = (PAIR, 4) if op is AFFINE else (MPI.INT64_T, 8)
    fixed_before = reducer.stats()["fixed_calls"]
    reducer.reduce([send, count, datatype], [got, count, datatype], op, root)
    WORLD.Reduce([send, count, datatype], [expected, count, datatype], op, root)
    if RANK == root:
        assert got.tolist() == expected.tolist()
    reducer.allreduce([send, count, datatype], [got, count, datatype], op)
    WORLD.Allreduce([send, count, datatype], [expected, count, datatype], op)
    assert got.tolist() == expected.tolist()
    stats = reducer.stats()
    assert stats["fixed_calls"] == fixed_before + 2
    assert stats["last_call"] == "library (non-commutative op)"


def test_one_leader_per_node_and_every_control_message_received(reducer):
    sleep = _sleeper(53)
    layout = reducer.layout
    before = dict(reducer.stats())
    calls = 5
    root = SIZE - 1
    for call in range(calls):
        sleep()
        reducer.reduce(_data(call, 2), numpy.empty(2, dtype="i8"), MPI.SUM, root)
    after = reducer.stats()
    led = after["leader_calls"] - before["leader_calls"]
    per_node = numpy.zeros(layout.nodes, dtype="i8")
    per_node[layout.node] = led
    WORLD.Allreduce(MPI.IN_PLACE, per_node, MPI.SUM)
    root_node = layout.node_of[root]
    for node in range(layout.nodes):
        if node != root_node:
            assert per_node[node] == calls  # exactly one last arriver per node and call
        else:
            assert per_node[node] <= calls  # the root leads only when it arrived last
    sent = after["control_sent"] - before["control_sent"]
    received = after["control_received"] - before["control_received"]
    totals = WORLD.allreduce(numpy.array([sent, received]), op=MPI.SUM)
    assert totals[0] == totals[1]
    assert totals[0] >= calls * (layout.nodes - 1)  # at least one announcement per non-root node and call


def test_zero_count_sends_nothing(reducer):
    before = reducer.stats()["control_sent"]
    reducer.reduce(numpy.empty(0, dtype="i8"), numpy.empty(0, dtype="i8"), MPI.SUM, 0)
    reducer.allreduce(numpy.empty(0, dtype="i8"), numpy.empty(0, dtype="i8"), MPI.SUM)
    assert reducer.stats()["control_sent"] == before


def test_bad_arguments_raise_before_any_message(reducer):
    send = numpy.zeros(2, dtype="i8")
    with pytest.raises(ValueError, match="root"):
        reducer.reduce(send, numpy.zeros(2, dtype="i8"), MPI.SUM, SIZE)
    with pytest.raises(TypeError, match="op"):
        reducer.reduce(send, numpy.zeros(2, dtype="i8"), "sum", 0)
    with pytest.raises(ValueError, match="recvbuf"):
        reducer.allreduce(send, numpy.zeros(3, dtype="i8"), MPI.SUM)
    if SIZE > 1:
        with pytest.raises(ValueError, match="sendbuf"):
            reducer.reduce(MPI.IN_PLACE, send, MPI.SUM, (RANK + 1) % SIZE)
    # the communicator still works afterwards: nothing was sent
    got = numpy.empty(2, dtype="i8")
    reducer.allreduce(numpy.full(2, RANK, dtype="i8"), got, MPI.SUM)
    assert got.tolist() == [SIZE * (SIZE - 1) // 2] * 2


@pytest.mark.parametrize("per_node", RANKS_PER_NODE)
def test_wrapped_intracomm_selects_dynamic_leaders(per_node):
    comm = sparsecoll.wrap(WORLD.Dup(), ranks_per_node=per_node, reduce="dynamic")
    try:
        assert comm.hierarchy_stats()["reduce"] == "dynamic"
        sleep = _sleeper(61 + per_node)
        for call in range(3):
            send = _data(call, 4)
            got, expected = numpy.empty(4, dtype="i8"), numpy.empty(4, dtype="i8")
            sleep()
            comm.Reduce(send, got, MPI.SUM, root=SIZE - 1)
            WORLD.Reduce(send, expected, MPI.SUM, root=SIZE - 1)
            if RANK == SIZE - 1:
                assert got.tolist() == expected.tolist()
            sleep()
            comm.Allreduce(send, got, MPI.MAX)
            WORLD.Allreduce(send, expected, MPI.MAX)
            assert got.tolist() == expected.tolist()
        stats = comm.hierarchy_stats()["dynamic_reduce"]
        assert stats["last_call"] == reduce_dynamic.DYNAMIC_LEADERS
        assert stats["dynamic_calls"] == 6
        assert comm.plan_stats("Reduce")["algorithm"] == comm.plan_stats("Allreduce")["algorithm"] == "dynamic leaders"
        # a non-commutative op: the fixed leaders' reduction in rank order, named in the stats
        send = numpy.array([RANK + 2, RANK], dtype="i8")
        comm.Allreduce([send, 1, PAIR], [got, 1, PAIR], AFFINE)
        WORLD.Allreduce([send, 1, PAIR], [expected, 1, PAIR], AFFINE)
        assert got[:2].tolist() == expected[:2].tolist()
        assert comm.hierarchy_stats()["dynamic_reduce"]["last_call"] == "fixed leaders (non-commutative op)"
        # named: the fallback to fixed order, which runs a user op on a 2-element type in its layout
        assert comm.plan_stats("Allreduce")["algorithm"] == "fixed leaders (non-commutative op)"
        right = MPI.Op.Create(lambda invec, inoutvec, datatype: None, commute=False)  # a o b = b
        try:
            comm.Reduce(send, got[:2], right, root=0)
            WORLD.Reduce(send, expected[:2], right, root=0)
            assert comm.plan_stats("Reduce")["algorithm"] == "fixed leaders (non-commutative op)"
            if RANK == 0:
                assert got[:2].tolist() == expected[:2].tolist() == [SIZE + 1, SIZE - 1]  # the last rank's
        finally:
            right.Free()
    finally:
        comm.Free()


def test_wrap_reduce_option():
    comm = sparsecoll.wrap(WORLD.Dup(), ranks_per_node=2)
    try:
        assert comm.hierarchy_stats()["reduce"] == "fixed"
    finally:
        comm.Free()
    base = WORLD.Dup()
    with pytest.raises(ValueError, match="reduce"):
        sparsecoll.wrap(base, reduce="sometimes")
    base.Free()


def test_early_ranks_leave_without_waiting_for_the_root(reducer):
    """The point of section III: a rank that is neither the root nor its node's last arriver
    returns as soon as its buffer is in shared memory, even while the root is still away: the root's
    node partners included, which fixed leaders keep at the node barrier until the root comes."""
    root, away = 0, 0.3
    before = reducer.stats()["leader_calls"]
    WORLD.Barrier()
    if RANK == root:
        time.sleep(away)
    start = time.perf_counter()
    reducer.reduce(numpy.full(3, RANK, dtype="i8"), numpy.empty(3, dtype="i8"), MPI.SUM, root)
    inside = time.perf_counter() - start
    led = reducer.stats()["leader_calls"] > before
    if RANK != root and not led:
        assert inside < away / 2
    WORLD.Barrier()


def test_dynamic_leaders_on_a_cartesian_communicator():
    """Open MPI 5.0.11 gives a Cartesian communicator (and its duplicates) no ``TAG_UB``
    attribute; the dynamic leaders' tag window took ``int(None)`` and every global collective
    of such a wrapper raised TypeError. MPI guarantees 32767 tags."""
    cart = WORLD.Create_cart([SIZE], periods=[True])
    comm = sparsecoll.wrap(cart, "direct", global_collectives="hierarchical", ranks_per_node=2, reduce="dynamic")
    try:
        got = numpy.zeros(3)
        comm.Allreduce(numpy.arange(3.0) + RANK, got, MPI.SUM)
        assert got.tolist() == (numpy.arange(3.0) * SIZE + SIZE * (SIZE - 1) / 2).tolist()
    finally:
        comm.Free()


@pytest.mark.parametrize("per_node", RANKS_PER_NODE)
def test_data_past_mpis_int_runs_the_fixed_leaders_reduction(per_node, monkeypatch):
    """A call of more than ``MAX_COUNT`` bytes would pass MPI's int in the dynamic leaders' one-message
    steps (Open MPI 5.0 refuses such counts): it runs the fixed leaders' reduction, which cuts its
    calls into pieces. MPI's int is shrunk to 64 bytes for this module; rank 0 passes pairs of
    int64 where the others pass int64 (one signature), so the bytes decide alike on every rank."""
    monkeypatch.setattr(reduce_dynamic, "MAX_COUNT", 64)
    comm = sparsecoll.wrap(WORLD.Dup(), ranks_per_node=per_node, reduce="dynamic")
    try:
        sleep = _sleeper(71 + per_node)
        for count, expected_call in ((8, reduce_dynamic.DYNAMIC_LEADERS),  # 64 bytes: fits
                                     (10, f"fixed leaders ({reduce_dynamic.PAST_MPIS_INT})")):  # 80
            spec = ((lambda array, count=count: [array, count // 2, PAIR]) if RANK == 0
                    else (lambda array, count=count: [array, count, MPI.INT64_T]))
            send = _data(count, count)
            got, expected = numpy.full(count, -7, dtype="i8"), numpy.empty(count, dtype="i8")
            before = comm.hierarchy_stats()["dynamic_reduce"]["fixed_calls"]
            sleep()
            comm.Reduce(spec(send), spec(got), MPI.SUM, root=SIZE - 1)
            WORLD.Reduce(send, expected, MPI.SUM, root=SIZE - 1)
            if RANK == SIZE - 1:
                assert got.tolist() == expected.tolist()
            assert comm.plan_stats("Reduce")["algorithm"] == expected_call
            sleep()
            comm.Allreduce(spec(send), spec(got), MPI.SUM)
            WORLD.Allreduce(send, expected, MPI.SUM)
            assert got.tolist() == expected.tolist()
            stats = comm.hierarchy_stats()["dynamic_reduce"]
            assert stats["last_call"] == expected_call
            assert stats["fixed_calls"] == before + (2 if expected_call != reduce_dynamic.DYNAMIC_LEADERS else 0)
    finally:
        comm.Free()
