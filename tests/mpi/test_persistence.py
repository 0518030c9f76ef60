"""The persistence levels (info keys of Hoefler and Schneider, SC12, section II) under MPI:
what each enables (seen in plan_stats and in the calls), their collective agreement, the
exact-bytes check, and the communicator's own info.

Runs on every rank (launched by ``tests/test_mpi.py``).
"""

from __future__ import annotations

import numpy
import pytest
from mpi4py import MPI

import sparsecoll
from sparsecoll.runtime import persistence
from sparsecoll.runtime.persistence import EXACT_BYTES, STATIC_BUFFERS, STRICT

WORLD = MPI.COMM_WORLD
RANK, SIZE = WORLD.Get_rank(), WORLD.Get_size()
EVERY_KEY = {STRICT: "true", EXACT_BYTES: "true", STATIC_BUFFERS: "true"}


def _plus_bytes(rank: int) -> int:
    """Bytes a rank sends to ``rank + 1`` in the varied alltoallv (8, 16 or 24)."""
    return 8 * (rank % 3 + 1)


def _ring(weights: str | None):
    """A ring: out-edge 0 to ``rank+1``, out-edge 1 to ``rank-1``; in-edge 0 from ``rank-1``
    (its out-edge 0), in-edge 1 from ``rank+1`` (its out-edge 1). ``weights``: None, ``"uniform"``
    (8 bytes per edge) or ``"varied"`` (the +1 direction carries :func:`_plus_bytes`, the -1 16)."""
    sources, dests = [(RANK - 1) % SIZE, (RANK + 1) % SIZE], [(RANK + 1) % SIZE, (RANK - 1) % SIZE]
    if weights is None:
        return WORLD.Create_dist_graph_adjacent(sources, dests)
    if weights == "uniform":
        source_weights = dest_weights = [8, 8]
    else:
        source_weights, dest_weights = [_plus_bytes((RANK - 1) % SIZE), 16], [_plus_bytes(RANK), 16]
    return WORLD.Create_dist_graph_adjacent(sources, dests, sourceweights=source_weights, destweights=dest_weights)


@pytest.fixture
def uniform():
    graph = _ring("uniform")
    yield graph
    graph.Free()


@pytest.fixture
def varied():
    graph = _ring("varied")
    yield graph
    graph.Free()


def _alltoall(comm, dtype="f8"):
    """A checked Neighbor_alltoall of one element per edge; returns what arrived."""
    send = numpy.array([RANK * 10 + 1, RANK * 10 + 2], dtype=dtype)
    recv = numpy.full(2, -1, dtype=dtype)
    comm.Neighbor_alltoall(send, recv)
    expected = numpy.array([((RANK - 1) % SIZE) * 10 + 1, ((RANK + 1) % SIZE) * 10 + 2], dtype=dtype)
    numpy.testing.assert_array_equal(recv, expected)


def _alltoallv_buffers():
    """The varied alltoallv: ``(sendbuf spec, recvbuf spec, recv array, expected)`` in doubles."""
    plus, minus = _plus_bytes(RANK) // 8, 2
    send = numpy.concatenate([numpy.full(plus, RANK + 0.25), numpy.full(minus, RANK + 0.5)])
    left, right = (RANK - 1) % SIZE, (RANK + 1) % SIZE
    from_left, from_right = _plus_bytes(left) // 8, 2
    recv = numpy.full(from_left + from_right, -1.0)
    expected = numpy.concatenate([numpy.full(from_left, left + 0.25), numpy.full(from_right, right + 0.5)])
    return ([send, ([plus, minus], [0, plus]), MPI.DOUBLE],
            [recv, ([from_left, from_right], [0, from_left]), MPI.DOUBLE], recv, expected)


def _no_message_left(comm) -> None:
    """Nothing of sparsecoll's is waiting on the handle's private communicator (between two
    barriers: without the second, a rank leaving the first may already send its next call's
    messages, a ``direct`` first call agreeing on nothing, before a slower rank probes)."""
    private = comm.runtime.private
    private.Barrier()
    status = MPI.Status()
    waiting = private.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG, status)
    private.Barrier()
    assert not waiting, f"a message from rank {status.Get_source()} with tag {status.Get_tag()} waits on rank {RANK}"


# -- parsing and agreement ---------------------------------------------------------------------------
def test_a_dict_and_an_mpi_info_give_the_same_level(uniform):
    info = MPI.Info.Create()
    for key, value in EVERY_KEY.items():
        info.Set(key, value.upper())
    info.Set("cdag_unknown_key", "whatever")
    try:
        from_info = sparsecoll.wrap(uniform, "direct", info=info)
    finally:
        info.Free()
    from_dict = sparsecoll.wrap(uniform, "direct", info={STRICT: True, EXACT_BYTES: "True", STATIC_BUFFERS: True,
                                                          "cdag_unknown_key": 1})
    expected = persistence.Persistence(True, True, True)
    assert from_info.plan.persistence == from_dict.plan.persistence == expected
    for comm in (from_info, from_dict):
        _alltoall(comm)
        assert comm.plan_stats("alltoall")["persistence"]["keys"] == [STRICT, EXACT_BYTES, STATIC_BUFFERS]


def test_unknown_keys_are_ignored(uniform):
    comm = sparsecoll.wrap(uniform, "direct", info={"cdag_no_such_level": "maybe", "x": object()})
    assert comm.plan.persistence == persistence.NONE
    _alltoall(comm)
    assert comm.plan_stats("alltoall")["persistence"] == {"keys": [], "enabled": []}


@pytest.mark.parametrize("key", [STRICT, EXACT_BYTES, STATIC_BUFFERS])
def test_a_bad_value_raises_naming_the_key_before_any_message(uniform, key):
    with pytest.raises(ValueError, match=key):
        sparsecoll.wrap(uniform, "direct", info={key: "yes"})
    with pytest.raises(TypeError, match="info"):
        sparsecoll.wrap(uniform, "direct", info=[(key, "true")])
    _alltoall(sparsecoll.wrap(uniform, "direct"))  # nothing was left behind


@pytest.mark.skipif(SIZE == 1, reason="one rank cannot disagree with itself")
@pytest.mark.parametrize("algorithm", ["direct", "native", "auto", "common_neighbor"])
def test_mismatched_keys_raise_on_every_rank_before_any_message(uniform, algorithm):
    mine = {STRICT: "true", STATIC_BUFFERS: "true"} if RANK == 0 else {STATIC_BUFFERS: "true"}
    if RANK == SIZE - 1:
        mine[EXACT_BYTES] = "true"
    with pytest.raises(ValueError, match=f"{STRICT}, {EXACT_BYTES}") as raised:
        sparsecoll.wrap(uniform, algorithm, info=mine)
    assert STATIC_BUFFERS not in str(raised.value)  # only the keys that differ are named
    again = sparsecoll.wrap(uniform, algorithm, info={STATIC_BUFFERS: "true"})
    _no_message_left(again)
    _alltoall(again)
    _no_message_left(again)


def test_a_key_set_false_counts_as_not_given(uniform):
    mine = {STRICT: "false"} if RANK % 2 else {}
    comm = sparsecoll.wrap(uniform, "direct", info=mine)
    assert comm.plan.persistence == persistence.NONE
    _alltoall(comm)


def test_the_communicators_own_info_counts_where_the_library_kept_it(uniform):
    info = MPI.Info.Create()
    info.Set(STRICT, "true")
    info.Set(STATIC_BUFFERS, "true")
    uniform.Set_info(info)
    info.Free()
    kept = persistence.from_comm(uniform)  # MPICH 5.0.2 and Open MPI 5.0.11 drop keys they do not know
    comm = sparsecoll.wrap(uniform, "common_neighbor")
    assert comm.plan.persistence.strict == kept.get(STRICT, False)
    assert comm.plan.persistence.static_buffers == kept.get(STATIC_BUFFERS, False)
    if kept.get(STRICT):  # the library kept the key: its effect is there, before any call
        assert STRICT in comm.plan_stats("alltoall")["persistence"]["keys"]
    overridden = sparsecoll.wrap(uniform, "direct", info={STATIC_BUFFERS: "false"})  # info= wins per key
    assert not overridden.plan.persistence.static_buffers
    assert overridden.plan.persistence.strict == kept.get(STRICT, False)
    _alltoall(overridden)


# -- cdag_strict_communication ----------------------------------------------------------------------------
def _allgather(comm):
    """A checked Neighbor_allgather of one double per rank."""
    recv = numpy.full(2, -1.0)
    comm.Neighbor_allgather(numpy.array([RANK + 0.5]), recv)
    assert recv.tolist() == [(RANK - 1) % SIZE + 0.5, (RANK + 1) % SIZE + 0.5]


@pytest.mark.parametrize("algorithm, families", [("common_neighbor", ("allgather", "alltoall")),
                                                 ("distance_halving", ("allgather",)),
                                                 ("loggp_tree", ("allgather", "alltoall"))])
def test_strict_builds_protocol_patterns_at_wrap(algorithm, families):
    graph = _ring(None)
    try:
        plain = sparsecoll.wrap(graph, algorithm)
        with pytest.raises(RuntimeError, match="collective call"):
            plain.plan_stats("allgather")
        strict = sparsecoll.wrap(graph, algorithm, info={STRICT: "true"})
        for family in families:
            stats = strict.plan_stats(family)  # before any call: built at wrap
            assert stats["persistence"]["keys"] == [STRICT]
            assert f"{', '.join(families)} made at wrap" in stats["persistence"]["enabled"][0]
        bound = strict.schedules_bound
        _allgather(strict)
        assert strict.schedules_bound == bound + 1
        # the same messages as without the key
        _allgather(plain)
        for key in ("steps", "sends", "recvs", "send_items", "recv_items"):
            assert strict.plan_stats("allgather")[key] == plain.plan_stats("allgather")[key]
    finally:
        graph.Free()


def test_strict_prepares_auto_and_is_said_on_native(uniform):
    comm = sparsecoll.wrap(uniform, "auto", info={STRICT: True})
    _alltoall(comm)
    assert "cost models of both families made at wrap" in comm.plan_stats("alltoall")["persistence"]["enabled"][0]
    native = sparsecoll.wrap(uniform, "native", info={STRICT: True})
    assert "library runs the calls" in native.plan_stats("allgather")["persistence"]["enabled"][0]
    _alltoall(native)


def test_strict_survives_dup(uniform):
    comm = sparsecoll.wrap(uniform, "common_neighbor", info={STRICT: "true"})
    copy = comm.Dup()
    try:
        assert copy.plan.persistence.strict
        assert copy.plan_stats("alltoall")["persistence"]["keys"] == [STRICT]  # prepared at Dup
        _alltoall(copy)
    finally:
        copy.Free()


# -- cdag_exact_byte_communications -------------------------------------------------------------------
@pytest.mark.parametrize("algorithm", ["direct", "native", "auto"])
def test_exact_bytes_needs_a_weighted_topology(algorithm):
    ring = WORLD.Create_cart([SIZE], periods=[True])
    graph = _ring(None)
    try:
        for comm in (ring, graph):
            with pytest.raises(ValueError, match=EXACT_BYTES):
                sparsecoll.wrap(comm, algorithm, info={EXACT_BYTES: "true"})
            _allgather(sparsecoll.wrap(comm, algorithm))  # nothing was left behind
    finally:
        ring.Free()
        graph.Free()


@pytest.mark.parametrize("algorithm", ["direct", "native", "auto", "common_neighbor"])
def test_exact_bytes_calls_that_match_the_weights_run(varied, algorithm):
    comm = sparsecoll.wrap(varied, algorithm, info={EXACT_BYTES: "true"})
    for _ in range(2):
        send, recv_spec, recv, expected = _alltoallv_buffers()
        comm.Neighbor_alltoallv(send, recv_spec)
        numpy.testing.assert_array_equal(recv, expected)
    _no_message_left(comm)
    assert "checked against the edge weights" in " ".join(comm.plan_stats("alltoallv")["persistence"]["enabled"])


@pytest.mark.parametrize("algorithm", ["direct", "native", "auto", "common_neighbor"])
@pytest.mark.parametrize("form", ["blocking", "nonblocking", "persistent"])
def test_exact_bytes_calls_that_contradict_the_weights_raise(uniform, algorithm, form):
    comm = sparsecoll.wrap(uniform, algorithm, info={EXACT_BYTES: "true"})
    method = {"blocking": comm.Neighbor_alltoall, "nonblocking": comm.Ineighbor_alltoall,
              "persistent": comm.Neighbor_alltoall_init}[form]
    wide = numpy.zeros(2, "f8"), numpy.zeros(2, "f8")
    if form == "nonblocking":
        method(*wide).Wait()
    elif form == "persistent":
        request = method(*wide)
        request.Start()
        request.Wait()
        request.Free()
    else:
        method(*wide)
    # every rank contradicts its weights (8 bytes): 4-byte blocks, then 16-byte receive blocks
    with pytest.raises(ValueError, match=rf"{EXACT_BYTES}: sendbuf: out-edge 0 \(to rank {(RANK + 1) % SIZE}\)"):
        method(numpy.zeros(2, "f4"), numpy.zeros(2, "f4"))
    # 16-byte receive blocks against 8-byte send blocks break the standard's rule for regular
    # collectives, checked as the arguments are parsed (before the weights) ...
    with pytest.raises(ValueError, match="recvbuf: blocks of 16 bytes where sendbuf's are 8"):
        method([numpy.zeros(2, "f8"), MPI.DOUBLE], [numpy.zeros(4, "f8"), 2, MPI.DOUBLE])
    # ... so the weights' in-edge check shows in the v form, whose blocks may differ
    with pytest.raises(ValueError, match=rf"{EXACT_BYTES}: recvbuf: in-edge 0 \(from rank {(RANK - 1) % SIZE}\)"):
        comm.Neighbor_alltoallv([numpy.zeros(2, "f8"), [1, 1]], [numpy.zeros(3, "f8"), [2, 1]])
    _alltoall(comm)  # a correct call still gives the right data
    _no_message_left(comm)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("form", ["blocking", "persistent"])
def test_exact_bytes_a_first_auto_call_one_rank_contradicts_raises_on_every_rank(uniform, form):
    """auto decides at a collective's first blocking call or init, in one allreduce. A first call
    whose bytes the last rank's weights contradicted raised there before that allreduce, and every
    other rank waited in it for good. Now that rank raises its error naming the argument, every
    other rank one saying so; the next call, good on every rank, decides and gives the right data."""
    comm = sparsecoll.wrap(uniform, "auto", info={EXACT_BYTES: "true"})
    dtype = "f4" if RANK == SIZE - 1 else "f8"  # 4-byte blocks against the weights' 8 on the last rank
    method = comm.Neighbor_alltoall if form == "blocking" else comm.Neighbor_alltoall_init
    with pytest.raises(ValueError, match=EXACT_BYTES if RANK == SIZE - 1 else "another rank"):
        method(numpy.ones(2, dtype), numpy.zeros(2, dtype))
    _alltoall(comm)
    _no_message_left(comm)


def test_exact_bytes_checks_the_allgather_family(uniform):
    comm = sparsecoll.wrap(uniform, "direct", info={EXACT_BYTES: "true"})
    _allgather(comm)
    with pytest.raises(ValueError, match=rf"{EXACT_BYTES}: sendbuf: out-edge 0"):
        comm.Neighbor_allgather(numpy.zeros(2), numpy.zeros(4))
    _alltoall(comm)


def test_exact_bytes_auto_chooses_by_the_weights(uniform):
    exact = sparsecoll.wrap(uniform, "auto", info={EXACT_BYTES: "true"})
    plain = sparsecoll.wrap(uniform, "auto")
    _alltoall(exact)
    _alltoall(plain)
    weights_class = exact.plan_stats("alltoall")["auto"]["size_class"]
    for block in (8, 1 << 20):
        explained = exact.plan_stats("alltoall", block_bytes=block)
        assert explained["auto"]["pinned"] and explained["auto"]["size_class"] == weights_class
        assert f"size class {weights_class}" in " ".join(explained["persistence"]["enabled"])
    assert not plain.plan_stats("alltoall")["auto"]["pinned"]  # the plain auto looks at each call's size
    assert plain.plan_stats("alltoall", block_bytes=1 << 20)["auto"]["size_class"] != weights_class


def test_exact_bytes_size_the_tree_transformation(varied):
    comm = sparsecoll.wrap(varied, "loggp_tree", info={EXACT_BYTES: "true"})
    largest = max([16] + [_plus_bytes(r) for r in range(SIZE)])  # the largest out-edge weight anywhere
    assert comm.options["block_bytes"] == largest  # the paper's k, from the weights
    given = sparsecoll.wrap(varied, "loggp_tree", block_bytes=4, info={EXACT_BYTES: "true"})
    assert given.options["block_bytes"] == 4
    send, recv_spec, recv, expected = _alltoallv_buffers()
    comm.Neighbor_alltoallv(send, recv_spec)
    numpy.testing.assert_array_equal(recv, expected)
    stats = comm.plan_stats("alltoall")
    assert stats["block_bytes"] == largest
    assert f"blocks of {largest} bytes" in " ".join(stats["persistence"]["enabled"])


# -- cdag_static_buffers -------------------------------------------------------------------------------
@pytest.mark.parametrize("executor", ["steps", "dag"])
def test_static_buffers_are_recorded(uniform, executor):
    comm = sparsecoll.wrap(uniform, "direct", executor=executor, info={STATIC_BUFFERS: "true"})
    assert comm.plan.persistence.static_buffers and comm.plan.key == sparsecoll.wrap(uniform, "direct",
                                                                                       executor=executor).plan.key
    for _ in range(3):
        _alltoall(comm)
    stats = comm.plan_stats("alltoall")
    assert stats["persistence"]["keys"] == [STATIC_BUFFERS]
    assert stats["persistence"]["enabled"][0].startswith(f"{STATIC_BUFFERS}: recorded")
