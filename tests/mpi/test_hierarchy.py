"""The universal hierarchical algorithm's structure and collectives: node layouts (emulated and
detected), the growable shared window, and every global collective bit for bit against the MPI
library's own call on COMM_WORLD.

Runs on every rank (launched by ``tests/test_mpi.py``).
"""

from __future__ import annotations

import re

import numpy
import pytest
from mpi4py import MPI

import sparsecoll
from sparsecoll.hierarchy import NodeLayout, SharedWindow

WORLD = MPI.COMM_WORLD
RANK, SIZE = WORLD.Get_rank(), WORLD.Get_size()
#: emulated ranks per node: one rank per node, pairs, triples (uneven last node when SIZE % 3)
RANKS_PER_NODE = (1, 2, 3)


@pytest.mark.parametrize("per_node", RANKS_PER_NODE)
def test_emulated_layout(per_node):
    layout = NodeLayout.create(WORLD, ranks_per_node=per_node)
    try:
        assert layout.node == RANK // per_node
        assert layout.node_rank == RANK % per_node
        assert layout.nodes == -(-SIZE // per_node)
        assert sum(layout.ranks_per_node) == SIZE
        assert layout.members[layout.node][layout.node_rank] == RANK
        assert layout.position(RANK) == layout.node_rank
        assert layout.node_comm.Get_size() == layout.ranks_per_node[layout.node]
        assert layout.contiguous
        if layout.is_leader:
            assert layout.leader_comm.Get_size() == layout.nodes
            assert layout.leader_comm.Get_rank() == layout.node
        else:
            assert layout.leader_comm == MPI.COMM_NULL
    finally:
        layout.free()
    assert layout.node_comm == MPI.COMM_NULL


def test_detected_layout_matches_shared_memory():
    layout = NodeLayout.create(WORLD)
    try:
        shared = WORLD.Split_type(MPI.COMM_TYPE_SHARED)
        assert layout.node_comm.Get_size() == shared.Get_size()
        assert layout.source.startswith("detected")
        shared.Free()
    finally:
        layout.free()


def test_placement_override(monkeypatch):
    per_node = min(2, SIZE)
    monkeypatch.setenv("SPARSECOLL_PLACEMENT", f"{per_node}x1")
    layout = NodeLayout.create(WORLD)
    try:
        assert layout.node == RANK // per_node
        assert "SPARSECOLL_PLACEMENT" in layout.source
    finally:
        layout.free()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("value", ["1x1", "garbage"])
def test_a_placement_override_on_one_rank_raises_on_every_rank(monkeypatch, on_rank_0_only, value):
    """``SPARSECOLL_PLACEMENT`` is each process's own: rank 0 alone split by it (or raised on a bad
    one) while the others detected the nodes in collectives rank 0 never entered, and waited for
    good. Now every rank raises ValueError naming the variable."""
    if SIZE < 2:
        pytest.skip("needs two ranks")
    on_rank_0_only("SPARSECOLL_PLACEMENT", value)
    with pytest.raises(ValueError, match="SPARSECOLL_PLACEMENT"):
        NodeLayout.create(WORLD)
    monkeypatch.delenv("SPARSECOLL_PLACEMENT", raising=False)
    NodeLayout.create(WORLD).free()  # every rank again in step


def test_bad_ranks_per_node():
    with pytest.raises(ValueError, match="ranks_per_node"):
        NodeLayout.create(WORLD, ranks_per_node=0)
    with pytest.raises(TypeError, match="ranks_per_node"):
        NodeLayout.create(WORLD, ranks_per_node=1.5)


@pytest.mark.parametrize("per_node", (2, 3))
def test_shared_window_grows_and_is_shared(per_node):
    layout = NodeLayout.create(WORLD, ranks_per_node=per_node)
    window = SharedWindow(layout.node_comm)
    try:
        assert window.ensure(10 + RANK)  # sizes differ per rank: the node's largest wins
        first = window.segment_bytes
        assert first >= max(10 + r for r in layout.members[layout.node])
        window.segment(layout.node_rank)[:] = RANK % 251
        window.sync()
        for position, rank in enumerate(layout.members[layout.node]):
            assert (window.segment(position) == rank % 251).all()
        assert window.region().size == first * layout.node_comm.Get_size()
        window.sync()
        assert not window.ensure(first, agreed=True)
        assert window.ensure(first + 1, agreed=True)
        assert window.segment_bytes > first and window.regrowths == 2
        assert window.memory_model in (MPI.WIN_UNIFIED, MPI.WIN_SEPARATE)
    finally:
        window.free()
        layout.free()


# -- the collectives, bit for bit against the library's own call on COMM_WORLD ---------------------

#: a non-contiguous derived datatype: two int32 with one int32 gap (extent 12 bytes, size 8)
VECTOR = MPI.INT32_T.Create_vector(2, 1, 2).Commit()
KINDS = ("int32", "float64", "vector")
ROOTS = sorted({0, SIZE - 1, SIZE // 2})
SENTINEL = -7


def _left(invec, inoutvec, datatype):
    """A non-commutative, associative operation: ``a op b = a`` (the lowest rank's value wins); on
    the vector type only its elements, never the gaps."""
    source, target = numpy.frombuffer(invec, dtype=numpy.int32), numpy.frombuffer(inoutvec, dtype=numpy.int32)
    data = slice(None) if datatype.Get_size() == datatype.Get_extent()[1] else numpy.arange(target.size) % 3 != 1
    target[data] = source[data]


LEFT = MPI.Op.Create(_left, commute=False)


@pytest.fixture(scope="module", params=RANKS_PER_NODE)
def comm(request):
    """WORLD's duplicate wrapped with emulated nodes of 1, 2 or 3 ranks."""
    wrapped = sparsecoll.wrap(WORLD.Dup(), ranks_per_node=request.param)
    yield wrapped
    wrapped.Free()


def items(kind: str, elements: int) -> int:
    """numpy items that ``elements`` elements of ``kind`` span."""
    return 3 * elements if kind == "vector" else elements


def array(kind: str, elements: int, seed: int) -> numpy.ndarray:
    """Deterministic integer-valued data (exact under any summation order)."""
    dtype = numpy.float64 if kind == "float64" else numpy.int32
    return (numpy.arange(items(kind, elements)) * 7 + seed * 100 + 1).astype(dtype)


def blank(kind: str, elements: int) -> numpy.ndarray:
    return numpy.full(items(kind, elements), SENTINEL, dtype=numpy.float64 if kind == "float64" else numpy.int32)


def datatype(kind: str):
    return {"int32": MPI.INT32_T, "float64": MPI.DOUBLE, "vector": VECTOR}[kind]


def same(mine: numpy.ndarray, library: numpy.ndarray) -> None:
    assert mine.tobytes() == library.tobytes(), f"hierarchical {mine.tolist()} != library {library.tolist()}"


def both(comm, method: str, make_args, check=("recv",)):
    """Run ``method`` on the wrapper and on WORLD with fresh arguments from ``make_args()`` and compare
    the named outputs."""
    mine, theirs = make_args(), make_args()
    before = comm.hierarchy_stats()
    getattr(comm, method)(*mine["args"])
    getattr(WORLD, method)(*theirs["args"])
    for name in check:
        same(mine[name], theirs[name])
    after = comm.hierarchy_stats()
    return after["calls"] - before["calls"] + (after["library_calls"] - before["library_calls"]) * 10


@pytest.mark.parametrize("in_place", (False, True))
@pytest.mark.parametrize("kind", KINDS)
def test_allgather(comm, kind, in_place):
    dt = datatype(kind)

    def make():
        recv = blank(kind, 2 * SIZE)
        send = array(kind, 2, RANK)
        if in_place:
            recv[items(kind, 2) * RANK:items(kind, 2) * (RANK + 1)] = send
            return {"recv": recv, "args": (MPI.IN_PLACE, [recv, 2, dt])}
        return {"recv": recv, "args": ([send, 2, dt], [recv, 2, dt])}
    assert both(comm, "Allgather", make) == 1


@pytest.mark.parametrize("in_place", (False, True))
@pytest.mark.parametrize("kind", KINDS)
def test_allgatherv(comm, kind, in_place):
    dt = datatype(kind)
    counts = [r % 3 for r in range(SIZE)]  # zero counts included
    displs = [sum(counts[:r]) + r for r in range(SIZE)]  # a gap of one element between blocks
    total = displs[-1] + counts[-1] + 1

    def make():
        recv = blank(kind, total)
        send = array(kind, counts[RANK], RANK)
        if in_place:
            start = items(kind, displs[RANK])
            recv[start:start + send.size] = send
            return {"recv": recv, "args": (MPI.IN_PLACE, [recv, (counts, displs), dt])}
        return {"recv": recv, "args": ([send, counts[RANK], dt], [recv, (counts, displs), dt])}
    assert both(comm, "Allgatherv", make) == 1


@pytest.mark.parametrize("in_place", (False, True))
@pytest.mark.parametrize("kind", KINDS)
def test_alltoall(comm, kind, in_place):
    dt = datatype(kind)

    def make():
        recv = blank(kind, 2 * SIZE)
        send = array(kind, 2 * SIZE, RANK)
        if in_place:
            recv[:] = send
            return {"recv": recv, "args": (MPI.IN_PLACE, [recv, 2, dt])}
        return {"recv": recv, "args": ([send, 2, dt], [recv, 2, dt])}
    assert both(comm, "Alltoall", make) == 1


@pytest.mark.parametrize("in_place", (False, True))
@pytest.mark.parametrize("kind", KINDS)
def test_alltoallv(comm, kind, in_place):
    dt = datatype(kind)
    if in_place:  # MPI: the same counts both ways
        send_counts = recv_counts = [(RANK + r) % 3 for r in range(SIZE)]
    else:
        send_counts = [(2 * RANK + r) % 3 for r in range(SIZE)]
        recv_counts = [(2 * r + RANK) % 3 for r in range(SIZE)]
    recv_displs = [sum(recv_counts[:r]) + r for r in range(SIZE)]

    def make():
        recv = blank(kind, recv_displs[-1] + recv_counts[-1] + 1)
        if in_place:
            recv[:] = array(kind, recv_displs[-1] + recv_counts[-1] + 1, RANK)
            return {"recv": recv, "args": (MPI.IN_PLACE, [recv, (recv_counts, recv_displs), dt])}
        send = array(kind, sum(send_counts), RANK)
        return {"recv": recv, "args": ([send, send_counts, dt], [recv, (recv_counts, recv_displs), dt])}
    assert both(comm, "Alltoallv", make) == 1


@pytest.mark.parametrize("root", ROOTS)
@pytest.mark.parametrize("kind", KINDS)
def test_bcast(comm, kind, root):
    dt = datatype(kind)

    def make():
        buf = array(kind, 3, 5) if RANK == root else blank(kind, 3)
        return {"buf": buf, "args": ([buf, 3, dt], root)}
    assert both(comm, "Bcast", make, check=("buf",)) == 1


@pytest.mark.parametrize("in_place", (False, True))
@pytest.mark.parametrize("root", ROOTS)
@pytest.mark.parametrize("kind", KINDS)
def test_gather(comm, kind, root, in_place):
    dt = datatype(kind)

    def make():
        recv = blank(kind, 2 * SIZE)
        send = array(kind, 2, RANK)
        if in_place and RANK == root:
            recv[items(kind, 2) * RANK:items(kind, 2) * (RANK + 1)] = send
            return {"recv": recv, "args": (MPI.IN_PLACE, [recv, 2, dt], root)}
        return {"recv": recv, "args": ([send, 2, dt], [recv, 2, dt] if RANK == root else None, root)}
    assert both(comm, "Gather", make) == 1


@pytest.mark.parametrize("root", ROOTS)
@pytest.mark.parametrize("kind", KINDS)
def test_gatherv(comm, kind, root):
    dt = datatype(kind)
    counts = [(r + 1) % 3 for r in range(SIZE)]
    displs = [sum(counts[:r]) + 2 * r for r in range(SIZE)][::-1]  # blocks in reverse order, with gaps
    total = max(d + c for d, c in zip(displs, counts)) + 1

    def make():
        recv = blank(kind, total)
        send = array(kind, counts[RANK], RANK)
        return {"recv": recv, "args": ([send, counts[RANK], dt],
                                       [recv, (counts, displs), dt] if RANK == root else None, root)}
    assert both(comm, "Gatherv", make) == 1


@pytest.mark.parametrize("in_place", (False, True))
@pytest.mark.parametrize("root", ROOTS)
@pytest.mark.parametrize("kind", KINDS)
def test_scatter(comm, kind, root, in_place):
    dt = datatype(kind)

    def make():
        send = array(kind, 2 * SIZE, 9) if RANK == root else None
        recv = blank(kind, 2)
        if in_place and RANK == root:
            return {"recv": send, "args": ([send, 2, dt], MPI.IN_PLACE, root)}
        return {"recv": recv, "args": ([send, 2, dt] if RANK == root else None, [recv, 2, dt], root)}
    assert both(comm, "Scatter", make) == 1


@pytest.mark.parametrize("root", ROOTS)
@pytest.mark.parametrize("kind", KINDS)
def test_scatterv(comm, kind, root):
    dt = datatype(kind)
    counts = [(r + 2) % 3 for r in range(SIZE)]
    displs = [sum(counts[:r]) + r for r in range(SIZE)][::-1]
    total = max(d + c for d, c in zip(displs, counts)) + 1

    def make():
        send = array(kind, total, 4) if RANK == root else None
        recv = blank(kind, counts[RANK])
        return {"recv": recv, "args": ([send, (counts, displs), dt] if RANK == root else None,
                                       [recv, counts[RANK], dt], root)}
    assert both(comm, "Scatterv", make) == 1


OPS = {"sum": MPI.SUM, "max": MPI.MAX, "left": LEFT}


def _op_cases():
    """(kind, op name, hierarchical calls + 10 x library calls): int32 and float64 with SUM and MAX,
    the non-commutative user op on int32 and on the vector type (whose function gets the vector
    type, on data in its layout). MPICH refuses predefined operations on the vector type:
    :func:`test_predefined_op_on_derived_type` covers that case."""
    return ([(k, o, 1) for k in ("int32", "float64") for o in ("sum", "max")]
            + [("int32", "left", 1), ("vector", "left", 1)])


@pytest.mark.parametrize("in_place", (False, True))
@pytest.mark.parametrize("root", ROOTS)
@pytest.mark.parametrize("kind,op,calls", _op_cases())
def test_reduce(comm, kind, op, calls, root, in_place):
    dt = datatype(kind)

    def make():
        send = array(kind, 3, RANK)
        recv = blank(kind, 3)
        if in_place and RANK == root:
            return {"recv": send, "args": (MPI.IN_PLACE, [send, 3, dt], OPS[op], root)}
        return {"recv": recv, "args": ([send, 3, dt], [recv, 3, dt] if RANK == root else None, OPS[op], root)}
    assert both(comm, "Reduce", make) == calls


@pytest.mark.parametrize("in_place", (False, True))
@pytest.mark.parametrize("kind,op,calls", _op_cases())
def test_allreduce(comm, kind, op, calls, in_place):
    dt = datatype(kind)

    def make():
        send = array(kind, 3, RANK)
        if in_place:
            return {"recv": send, "args": (MPI.IN_PLACE, [send, 3, dt], OPS[op])}
        recv = blank(kind, 3)
        return {"recv": recv, "args": ([send, 3, dt], [recv, 3, dt], OPS[op])}
    assert both(comm, "Allreduce", make) == calls


@pytest.mark.parametrize("make_buffer", (lambda n: numpy.full(n, RANK + 1, dtype=numpy.uint8),
                                         lambda n: bytearray([RANK + 1] * n)), ids=("uint8", "bytearray"))
def test_reductions_of_byte_buffers_type_them_as_mpi4py(comm, make_buffer):
    """A buffer of format "B" (numpy uint8, bytearray) given without a datatype is MPI_UNSIGNED_CHAR,
    as mpi4py infers it, which SUM takes (MPI_BYTE, which it was typed as, takes only the bitwise
    operations: the hierarchy raised on the ranks that reduce and the others waited)."""
    def make():
        recv = make_buffer(4)
        return {"recv": numpy.frombuffer(recv, dtype=numpy.uint8), "args": (make_buffer(4), recv, MPI.SUM)}
    assert both(comm, "Allreduce", make) == 1

    def make_reduce():
        recv = make_buffer(4)
        return {"recv": numpy.frombuffer(recv, dtype=numpy.uint8), "args": (make_buffer(4), recv, MPI.MAX, 0)}
    assert both(comm, "Reduce", make_reduce) == 1


@pytest.mark.parametrize("in_place", (False, True))
@pytest.mark.parametrize("kind,op,calls", _op_cases())
def test_reduce_scatter_block(comm, kind, op, calls, in_place):
    dt = datatype(kind)

    def make():
        send = array(kind, 2 * SIZE, RANK)
        if in_place:
            return {"recv": send, "args": (MPI.IN_PLACE, [send, 2, dt], OPS[op])}
        recv = blank(kind, 2)
        return {"recv": recv, "args": ([send, 2, dt], [recv, 2, dt], OPS[op])}
    assert both(comm, "Reduce_scatter_block", make) == calls


@pytest.mark.parametrize("in_place", (False, True))
@pytest.mark.parametrize("kind,op,calls", _op_cases())
def test_reduce_scatter(comm, kind, op, calls, in_place):
    dt = datatype(kind)
    counts = [r % 3 for r in range(SIZE)]

    def make():
        send = array(kind, sum(counts), RANK)
        if in_place:
            return {"recv": send, "args": (MPI.IN_PLACE, [send, sum(counts), dt], counts, OPS[op])}
        recv = blank(kind, counts[RANK])
        return {"recv": recv, "args": ([send, sum(counts), dt], [recv, counts[RANK], dt], counts, OPS[op])}
    assert both(comm, "Reduce_scatter", make) == calls


@pytest.mark.parametrize("in_place", (False, True))
def test_predefined_op_on_derived_type(comm, in_place):
    """SUM on the vector type reduces its int32 elements (the library's result on those int32 alone);
    the gaps of the receive buffer keep their bytes."""
    send = array("vector", 3, RANK)
    recv = send.copy() if in_place else blank("vector", 3)
    comm.Allreduce(MPI.IN_PLACE if in_place else [send, 3, VECTOR], [recv, 3, VECTOR], MPI.SUM)
    expected = numpy.empty(6, dtype=numpy.int32)
    WORLD.Allreduce(numpy.ascontiguousarray(send.reshape(3, 3)[:, [0, 2]]).ravel(), expected, MPI.SUM)
    assert recv.reshape(3, 3)[:, [0, 2]].ravel().tolist() == expected.tolist()
    assert recv.reshape(3, 3)[:, 1].tolist() == (send if in_place else blank("vector", 3)).reshape(3, 3)[:, 1].tolist()


PADDED = MPI.DOUBLE.Create_resized(0, 16).Commit()  # a double, then 8 bytes the program leaves alone


def _add_padded(invec, inoutvec, datatype):
    """A user's op written for PADDED: its values sit every 16 bytes (the padding is never read)."""
    source, target = numpy.frombuffer(invec, dtype=numpy.float64), numpy.frombuffer(inoutvec, dtype=numpy.float64)
    target[::2] += source[::2]


ADD_PADDED = MPI.Op.Create(_add_padded, commute=True)


def test_user_op_gets_the_programs_datatype(comm):
    """A user-defined op on a derived datatype sees that datatype and its layout, as MPI calls it: the
    sums of the library, and the padding of the receive buffer untouched."""
    send = numpy.full(8, -7.0)
    send[::2] = numpy.arange(4) + 10 * RANK
    recv, expected = numpy.full(8, 5.0), numpy.full(8, 5.0)
    comm.Allreduce([send, 4, PADDED], [recv, 4, PADDED], ADD_PADDED)
    WORLD.Allreduce([send, 4, PADDED], [expected, 4, PADDED], ADD_PADDED)
    assert recv[::2].tolist() == expected[::2].tolist() and recv[1::2].tolist() == [5.0] * 4


def _max_strided(invec, inoutvec, datatype):
    """A user's op that honours the datatype MPI calls it with: the doubles sit every
    ``extent // 8`` places (PADDED: every other one)."""
    step = datatype.Get_extent()[1] // 8
    source, target = numpy.frombuffer(invec, dtype=numpy.float64), numpy.frombuffer(inoutvec, dtype=numpy.float64)
    target[::step] = numpy.maximum(target[::step], source[::step])


def _first_strided(invec, inoutvec, datatype):
    """Non-commutative: ``a op b = a``, on the doubles of the datatype MPI calls it with."""
    step = datatype.Get_extent()[1] // 8
    source, target = numpy.frombuffer(invec, dtype=numpy.float64), numpy.frombuffer(inoutvec, dtype=numpy.float64)
    target[::step] = source[::step]


MAX_STRIDED = MPI.Op.Create(_max_strided, commute=True)
FIRST_STRIDED = MPI.Op.Create(_first_strided, commute=False)


@pytest.mark.parametrize("reduce_mode", ("fixed", "dynamic"))
@pytest.mark.parametrize("per_node", (2, 3))
def test_user_ops_on_different_handles_of_one_signature(per_node, reduce_mode):
    """Ranks may pass different datatype handles of one type signature to a reduction (MPI-4.1
    6.9.1 asks for the same signature): DOUBLE here, a duplicate of it there, a double padded
    to 16 bytes elsewhere. Each rank's user-defined op sees its own datatype and layout; every
    rank runs the same algorithm (which handle a rank holds once chose library or hierarchy per
    rank, and the ranks hung), and the results are the library's: Allreduce, Reduce at every
    root, Reduce_scatter_block and Reduce_scatter (zero counts included)."""
    mine = (MPI.DOUBLE, MPI.DOUBLE.Dup().Commit(), PADDED)[RANK % 3]
    step = mine.Get_extent()[1] // 8
    comm = sparsecoll.wrap(WORLD.Dup(), ranks_per_node=per_node, reduce=reduce_mode)
    try:
        for op in (MAX_STRIDED, FIRST_STRIDED):
            def buffers():
                send = numpy.full(4 * step, -7.0)
                send[::step] = numpy.arange(4) * (RANK % 2 * 2 - 1) + 10 * RANK
                return send, numpy.full(4 * step, 5.0)
            for root in (None, *ROOTS):
                (send, recv), (library_send, expected) = buffers(), buffers()
                if root is None:
                    comm.Allreduce([send, 4, mine], [recv, 4, mine], op)
                    WORLD.Allreduce([library_send, 4, mine], [expected, 4, mine], op)
                else:
                    comm.Reduce([send, 4, mine], [recv, 4, mine], op, root=root)
                    WORLD.Reduce([library_send, 4, mine], [expected, 4, mine], op, root=root)
                assert recv.tobytes() == expected.tobytes(), (op, root)
                ran = comm.global_stats("Allreduce" if root is None else "Reduce")
                assert ran["algorithm"] != "library", ran
            for block in (True, False):
                counts = [2] * SIZE if block else [r % 3 for r in range(SIZE)]
                send = numpy.full(sum(counts) * step, -7.0)
                send[::step] = numpy.arange(sum(counts)) * (RANK % 2 * 2 - 1) + 10 * RANK
                recv, expected = numpy.full(counts[RANK] * step, 5.0), numpy.full(counts[RANK] * step, 5.0)
                method = "Reduce_scatter_block" if block else "Reduce_scatter"
                extra, sent = ((), counts[RANK]) if block else ((counts,), sum(counts))  # (mpi4py's counts)
                getattr(comm, method)([send, sent, mine], [recv, counts[RANK], mine], *extra, op)
                # MPI's rule, not MPICH 5.0.2's call, which fails an assertion or corrupts memory with
                # a user-defined op on a resized datatype (4 ranks)
                values = numpy.array([numpy.arange(sum(counts)) * (r % 2 * 2 - 1) + 10 * r for r in range(SIZE)])
                reduced = values.max(axis=0) if op is MAX_STRIDED else values[0]
                start = sum(counts[:RANK])
                expected[::step] = reduced[start:start + counts[RANK]]
                assert recv.tobytes() == expected.tobytes(), (op, method)
                assert comm.global_stats(method)["algorithm"] != "library"
    finally:
        comm.Free()
        if RANK % 3 == 1:
            mine.Free()


def test_a_datatype_whose_type_map_reorders_its_bytes(comm):
    """A transpose type: a column of a 3 x 3 matrix resized to one double, three of them, resized
    to the matrix. Its bounds are those of 9 contiguous doubles, but MPI moves its elements in
    type-map order (the transpose); they were copied as the raw bytes."""
    column = MPI.DOUBLE.Create_vector(3, 1, 3).Create_resized(0, 8)
    transpose = column.Create_contiguous(3).Create_resized(0, 72).Commit()
    column.Free()
    try:
        def make(method):
            def args():
                mine = numpy.arange(9.0) + 100 * RANK
                blocks = numpy.arange(9.0 * SIZE) + 100 * RANK
                recv = numpy.full(9 * SIZE, -7.0)
                if method == "Alltoall":
                    return {"recv": recv, "args": ([blocks, 1, transpose], [recv, 9, MPI.DOUBLE])}
                if method == "Allgather":
                    return {"recv": recv, "args": ([mine, 9, MPI.DOUBLE], [recv, 1, transpose])}
                if method == "Gather":
                    return {"recv": recv, "args": ([mine, 1, transpose], [recv, 9, MPI.DOUBLE], SIZE - 1)}
                if method == "Scatter":
                    return {"recv": mine, "args": ([blocks, 9, MPI.DOUBLE], [mine, 1, transpose], 0)}
                return {"recv": mine, "args": ([mine, 1, transpose], 0)}  # Bcast
            return args
        for method in ("Alltoall", "Allgather", "Gather", "Scatter", "Bcast"):
            assert both(comm, method, make(method)) == 1, method
    finally:
        transpose.Free()


@pytest.mark.parametrize("reduce_mode", ("fixed", "dynamic"))
def test_reductions_refuse_two_datatypes_as_mpi4py_does(reduce_mode):
    """float32 data into an int32 receive buffer: mpi4py raises ValueError (one datatype per
    reduction), on every rank here since every rank passes them; Reduce_scatter(_block) compared
    only the element sizes and the dynamic leaders only the counts, and reinterpreted the float
    bits as integers. (Reduce checks at its root only, so at one rank alone here.)"""
    comm = sparsecoll.wrap(WORLD.Dup(), ranks_per_node=2, reduce=reduce_mode)
    floats = numpy.arange(SIZE, dtype=numpy.float32) + 1
    calls = [lambda c: c.Allreduce(floats, numpy.zeros(SIZE, dtype=numpy.int32), MPI.SUM),
             lambda c: c.Reduce_scatter_block(floats, numpy.zeros(1, dtype=numpy.int32), MPI.SUM),
             lambda c: c.Reduce_scatter(floats, numpy.zeros(1, dtype=numpy.int32), [1] * SIZE, MPI.SUM)]
    if SIZE == 1:
        calls.append(lambda c: c.Reduce(floats, numpy.zeros(1, dtype=numpy.int32), MPI.SUM, root=0))
    try:
        for call in calls:
            with pytest.raises(ValueError):
                call(WORLD)  # mpi4py's own check
            with pytest.raises(ValueError, match="datatype"):
                call(comm)
    finally:
        comm.Free()


def _int32_at(buffer, datatype, elements: int) -> numpy.ndarray:
    """The ``elements`` int32 a user-defined op gets at ``buffer`` in ``datatype``'s layout, one
    contiguous run at the datatype's true lower bound (an absolute address under ``MPI.BOTTOM``,
    where MPI passes address 0, or a temporary shifted back by that bound)."""
    start = (MPI.memory(buffer).address + datatype.Get_true_extent()[0]) % 2**64
    return numpy.frombuffer(MPI.memory.fromaddress(start, 4 * elements), dtype=numpy.int32)


def _add_absolute(invec, inoutvec, datatype):
    """A user's op for a datatype of one run of int32 at any address (absolute ones included)."""
    elements = datatype.Get_size() // 4
    if elements:
        _int32_at(inoutvec, datatype, elements)[:] += _int32_at(invec, datatype, elements)


ADD_ABSOLUTE = MPI.Op.Create(_add_absolute, commute=True)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("reduce_mode", ("fixed", "dynamic"))
@pytest.mark.parametrize("per_node", (2, 3))
def test_user_op_on_bottom_with_absolute_addresses(per_node, reduce_mode):
    """``MPI.BOTTOM`` and a datatype of absolute addresses in Allreduce (in place) and Reduce at every
    root, with a user-defined op (the libraries take no predefined op on a derived datatype): the
    sums, as MPICH's own calls give them (Open MPI 5.0.11's in-place Reduce leaves the root's
    buffer as it was, raw mpi4py, 3 ranks: the expected values are computed here). The fixed leaders laid the data
    out in scratch memory from address 0 to the absolute address (a MemoryError of 85 TiB on the
    ranks that reduce, the others waited); the dynamic leaders asked mpi4py for memory at address
    0 (ValueError on every rank)."""
    def contribution(rank):
        return numpy.arange(4, dtype=numpy.int32) * (rank + 1) + 10 * rank
    total = sum(contribution(rank) for rank in range(SIZE)).tolist()
    comm = sparsecoll.wrap(WORLD.Dup(), ranks_per_node=per_node, reduce=reduce_mode)
    results, expected = [], []
    try:
        for root in (None, *ROOTS):
            mine = contribution(RANK)
            at_mine = MPI.INT32_T.Create_hindexed([4], [MPI.Get_address(mine)]).Commit()
            if root is None:
                comm.Allreduce(MPI.IN_PLACE, [MPI.BOTTOM, 1, at_mine], ADD_ABSOLUTE)
            else:
                comm.Reduce(MPI.IN_PLACE if RANK == root else [MPI.BOTTOM, 1, at_mine],
                            [MPI.BOTTOM, 1, at_mine] if RANK == root else None, ADD_ABSOLUTE, root=root)
            at_mine.Free()
            results.append(mine.tolist())
            expected.append(total if root in (None, RANK) else contribution(RANK).tolist())
    finally:
        comm.Free()
    assert results == expected
    mine = contribution(RANK)
    at_mine = MPI.INT32_T.Create_hindexed([4], [MPI.Get_address(mine)]).Commit()
    WORLD.Allreduce(MPI.IN_PLACE, [MPI.BOTTOM, 1, at_mine], ADD_ABSOLUTE)
    at_mine.Free()
    assert mine.tolist() == total  # the library's Allreduce (both libraries get it right)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("reduce_mode", ("fixed", "dynamic"))
def test_reductions_of_a_datatype_of_size_zero(reduce_mode):
    """A datatype of no bytes (``INT.Create_contiguous(0)``, as an index list that came out empty
    makes) with a count of 2, under a user-defined op: nothing to reduce, the buffers untouched, as
    in the library. Its basic elements per element are 0, and the fixed leaders divided by that
    (ZeroDivisionError on every rank)."""
    empty = MPI.INT.Create_contiguous(0).Commit()
    wrapped = sparsecoll.wrap(WORLD.Dup(), ranks_per_node=2, reduce=reduce_mode)
    try:
        for target in (wrapped, WORLD):
            data = numpy.full(4, RANK, dtype=numpy.int32)
            target.Allreduce(MPI.IN_PLACE, [data, 2, empty], ADD_ABSOLUTE)
            for root in ROOTS:
                target.Reduce(MPI.IN_PLACE if RANK == root else [data, 2, empty],
                              [data, 2, empty] if RANK == root else None, ADD_ABSOLUTE, root=root)
            target.Reduce_scatter([data, 2 * SIZE, empty], [data[2:], 2, empty], [2] * SIZE, ADD_ABSOLUTE)
            assert data.tolist() == [RANK] * 4
    finally:
        wrapped.Free()
        empty.Free()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("reduce_mode", ("fixed", "dynamic"))
@pytest.mark.parametrize("per_node", (2, 3))
def test_a_predefined_op_undefined_for_the_datatype_raises_on_every_rank(per_node, reduce_mode):
    """``MPI.BAND`` on doubles (MPI-4.1 6.9.2 defines it for integers and bytes only), one element
    per call: the library's reductions raise ``MPI_ERR_OP`` on every rank. The hierarchy applied the
    op only where a rank had a share of the elements (one rank of a node, or under dynamic leaders
    the second to arrive) and raised there, while the node's other ranks waited in its barrier (or
    for their turn) for good. Now every rank raises ValueError naming the op before it sends anything."""
    comm = sparsecoll.wrap(WORLD.Dup(), ranks_per_node=per_node, reduce=reduce_mode)
    one = numpy.ones(1)
    calls = [lambda c: c.Allreduce(one, numpy.zeros(1), MPI.BAND),
             lambda c: c.Allreduce(MPI.IN_PLACE, one.copy(), MPI.BAND),
             lambda c: c.Reduce_scatter_block(numpy.ones(SIZE), numpy.zeros(1), MPI.BAND),
             lambda c: c.Reduce_scatter(numpy.ones(SIZE), numpy.zeros(1), [1] * SIZE, MPI.BAND)]
    calls += [lambda c, root=root: c.Reduce(one, numpy.zeros(1), MPI.BAND, root=root) for root in ROOTS]
    try:
        for call in calls:
            with pytest.raises(MPI.Exception):
                call(WORLD)  # the library's own call: erroneous on every rank
            with pytest.raises(ValueError, match="op: .*not defined for datatype"):
                call(comm)
        comm.Allreduce(one, numpy.zeros(1), MPI.SUM)  # every rank still in step
    finally:
        comm.Free()


class _LeadersWhoseBcastFails:
    """The leader communicator, whose ``Bcast`` raises as a library's call can (Open MPI 5.0's for
    a count above MPI's int)."""

    def __init__(self, comm):
        self.comm = comm

    def __getattr__(self, name):
        return getattr(self.comm, name)

    def Bcast(self, *args, **kwargs):
        raise MPI.Exception(MPI.ERR_COUNT)


def _leaders_whose_bcast_fails(comm):
    return _LeadersWhoseBcastFails(comm)


@pytest.mark.timeout(60)
def test_a_leaders_library_error_raises_on_every_rank_of_its_node():
    """A leader's library call that raises left the other ranks of its node in the node barrier
    for good; now every rank raises, and the communicator still works."""
    comm = sparsecoll.wrap(WORLD.Dup(), ranks_per_node=2, inter_node=_leaders_whose_bcast_fails)
    try:
        with pytest.raises((MPI.Exception, RuntimeError)):
            comm.Bcast(numpy.zeros(4), root=0)
        gathered = numpy.zeros(SIZE)
        comm.Allgather(numpy.array([float(RANK)]), gathered)
        assert gathered.tolist() == [float(r) for r in range(SIZE)]
    finally:
        comm.Free()


class _LeadersWithASmallCountLimit:
    """The leader communicator as Open MPI 5.0's with MPI's int shrunk to ``limit``: a call of
    :data:`CHECKED` with a larger count or displacement raises ERR_COUNT; every such call is
    recorded as ``(method, largest count or displacement)``."""

    CHECKED = ("Bcast", "Allgatherv", "Gatherv", "Scatterv", "Alltoallv", "Isend", "Irecv", "Reduce", "Allreduce",
               "Reduce_scatter")

    def __init__(self, comm, limit: int):
        self.comm, self.limit, self.calls = comm, limit, []

    def __getattr__(self, name):
        method = getattr(self.comm, name)
        if name not in self.CHECKED:
            return method

        def checked(*args, **kwargs):
            largest = max(_largest_int(arg) for arg in args)
            self.calls.append((name, largest))
            if largest > self.limit:
                raise MPI.Exception(MPI.ERR_COUNT)
            return method(*args, **kwargs)
        return checked

    def bcasts(self) -> list:
        return [largest for name, largest in self.calls if name == "Bcast"]


def _largest_int(spec) -> int:
    """The largest count or displacement of an mpi4py buffer spec, or of a list of counts (0 for
    anything else)."""
    if not isinstance(spec, list):
        return 0
    if all(isinstance(item, int) for item in spec):
        return max(spec, default=0)
    if len(spec) == 2:
        return len(spec[0])
    counts = spec[1]
    if isinstance(counts, tuple):
        return max([0, *counts[0], *counts[1]])
    return int(counts)


@pytest.fixture
def small_count_limit(monkeypatch):
    """``(wrap, leaders)``: MPI's int shrunk to 64 for the leaders (MAX_COUNT patched to match on
    every rank); ``wrap(per_node)`` wraps a duplicate of WORLD whose leaders refuse more and records
    them in ``leaders``."""
    import sparsecoll.hierarchy.leaders as between_nodes
    monkeypatch.setattr(between_nodes, "MAX_COUNT", 64)
    leaders, made = [], []

    def small_limit(comm):
        leaders.append(_LeadersWithASmallCountLimit(comm, 64))
        return leaders[-1]

    def wrap(per_node):
        made.append(sparsecoll.wrap(WORLD.Dup(), ranks_per_node=per_node, inter_node=small_limit))
        return made[-1]
    yield wrap, leaders
    for comm in made:
        comm.Free()


@pytest.mark.timeout(60)
def test_a_bcast_past_mpis_int_goes_between_leaders_in_pieces(small_count_limit):
    """A Bcast of 2**28 + 1 doubles (2**31 + 8 bytes) raised on Open MPI 5.0, which refuses a count
    above MPI's int, where the library's own Bcast of 2**28 + 1 doubles delivers: the leaders now
    move the bytes in pieces of at most MAX_COUNT. Here MAX_COUNT is 64 and the leaders refuse
    more, so 164 bytes go in 3 pieces and arrive as the library's Bcast delivers them."""
    wrap, leaders = small_count_limit
    comm = wrap(1)
    root = 1 % SIZE
    data = numpy.arange(41, dtype=numpy.int32) * 3 + 7 * RANK
    expected = data.copy()
    WORLD.Bcast(expected, root=root)
    comm.Bcast(data, root=root)
    assert data.tolist() == expected.tolist()
    if SIZE > 1:
        assert [leader.bcasts() for leader in leaders] == [[64, 64, 36]]


def _uneven(rank: int) -> int:
    """int32 elements of rank ``rank``'s block in the vector calls below: 1 and 20 in turn (4 and
    80 bytes), so with MPI's int at 64 a node's chunk can be small or large, and the displacements
    of the chunks after a large one pass the int."""
    return 1 if rank % 2 == 0 else 20


def _large_count_cases():
    counts = [_uneven(r) for r in range(SIZE)]
    displs = _starts(counts)
    total = sum(counts)
    pairs = [[_uneven(r) + _uneven(s) for s in range(SIZE)] for r in range(SIZE)]  # elements r sends s

    def alltoallv():
        sends, receives = pairs[RANK], [pairs[s][RANK] for s in range(SIZE)]
        return ([array("int32", sum(sends), 80 + RANK), (sends, _starts(sends)), MPI.INT32_T],
                [blank("int32", sum(receives)), (receives, _starts(receives)), MPI.INT32_T])
    root = 1 % SIZE
    return {
        "Allgather": lambda: ([array("int32", 7, 10 + RANK), MPI.INT32_T], [blank("int32", 7 * SIZE), MPI.INT32_T]),
        "Allgatherv": lambda: ([array("int32", _uneven(RANK), 20 + RANK), MPI.INT32_T],
                               [blank("int32", total), (counts, displs), MPI.INT32_T]),
        "Gather": lambda: ([array("int32", 7, 30 + RANK), MPI.INT32_T],
                           [blank("int32", 7 * SIZE), MPI.INT32_T] if RANK == root else None, root),
        "Gatherv": lambda: ([array("int32", _uneven(RANK), 40 + RANK), MPI.INT32_T],
                            [blank("int32", total), (counts, displs), MPI.INT32_T] if RANK == root else None,
                            root),
        "Scatter": lambda: ([array("int32", 7 * SIZE, 50), MPI.INT32_T] if RANK == root else None,
                            [blank("int32", 7), MPI.INT32_T], root),
        "Scatterv": lambda: ([array("int32", total, 60), (counts, displs), MPI.INT32_T] if RANK == root else None,
                             [blank("int32", _uneven(RANK)), MPI.INT32_T], root),
        "Alltoall": lambda: ([array("int32", 3 * SIZE, 70 + RANK), MPI.INT32_T],
                             [blank("int32", 3 * SIZE), MPI.INT32_T]),
        "Alltoallv": alltoallv,
    }


def _starts(counts) -> list:
    return numpy.concatenate(([0], numpy.cumsum(counts)[:-1])).astype(int).tolist()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("per_node", (1, 2))
def test_the_leaders_calls_keep_counts_and_displacements_inside_mpis_int(small_count_limit, monkeypatch, per_node):
    """The leaders move a node's bytes, so their counts and displacements pass MPI's int where
    the program's do not, which Open MPI 5.0 refuses; in the rooted calls and Alltoall(v) one
    leader raised while the others waited for good. With MPI's int at 64 for the leaders, every
    gather, scatter and alltoall delivers what the library's own call does, no leader passes more
    than 64, chunks above 64 // leaders went point to point in pieces, and some leader passed its
    call a compact copy of chunks whose displacements pass the int. Reductions go in pieces of at
    most 64 basic elements."""
    import sparsecoll.hierarchy.leaders as between_nodes
    wrap, leaders = small_count_limit
    staged = []
    enter = between_nodes._compact.__enter__

    def spy(self):
        staged.append(self.staging is not None)
        return enter(self)
    monkeypatch.setattr(between_nodes._compact, "__enter__", spy)
    comm = wrap(per_node)
    for method, make in _large_count_cases().items():
        mine, library = make(), make()
        getattr(comm, method)(*mine)
        getattr(WORLD, method)(*library)
        for got, expected in zip(mine, library):
            if isinstance(got, list):
                same(got[0], expected[0])
    # SUM over 40 vectors of 2 int32 is 80 basic elements between the leaders where the program
    # passes 40 (the library's result on those int32 alone: MPICH refuses SUM on the vector type)
    root = 1 % SIZE
    for method in ("Allreduce", "Reduce"):
        send, received = array("vector", 40, 90 + RANK), blank("vector", 40)
        expected = numpy.zeros(80, dtype=numpy.int32)
        elements = numpy.ascontiguousarray(send.reshape(40, 3)[:, [0, 2]]).ravel()
        rooted = (root,) if method == "Reduce" else ()
        getattr(comm, method)([send, 40, VECTOR], [received, 40, VECTOR], MPI.SUM, *rooted)
        getattr(WORLD, method)(elements, expected, MPI.SUM, *rooted)
        if method == "Allreduce" or RANK == root:
            assert received.reshape(40, 3)[:, [0, 2]].ravel().tolist() == expected.tolist()
        if leaders:
            assert [largest for name, largest in leaders[0].calls if name == method] == [64, 16]
    # Reduce_scatter_block of 40 vectors per rank: windows of 64 elements of the leaders' vector
    send, received = array("vector", 40 * SIZE, 70 + RANK), blank("vector", 40)
    expected = numpy.zeros(80, dtype=numpy.int32)
    elements = numpy.ascontiguousarray(send.reshape(40 * SIZE, 3)[:, [0, 2]]).ravel()
    comm.Reduce_scatter_block([send, 40, VECTOR], [received, 40, VECTOR], MPI.SUM)
    WORLD.Reduce_scatter_block(elements, expected, MPI.SUM)
    assert received.reshape(40, 3)[:, [0, 2]].ravel().tolist() == expected.tolist()
    if leaders:
        windows = [largest for name, largest in leaders[0].calls if name == "Reduce_scatter"]
        assert len(windows) == -(-80 * SIZE // 64) and max(windows) <= 64
    if leaders:
        calls = leaders[0].calls
        assert max(largest for _, largest in calls) <= 64
        nodes = -(-SIZE // per_node)
        if nodes > 1:
            assert {"Isend", "Irecv"} <= {name for name, _ in calls}
    everywhere = WORLD.allgather(any(staged))
    if per_node == 1 and SIZE >= 3:  # node 2's 4 bytes lie past node 1's 80 at the root of Gatherv
        assert any(everywhere)


def test_zero_counts_everywhere(comm):
    """Calls that move nothing at all still agree with the library and leave buffers alone."""
    for method, make in (
        ("Allgather", lambda: {"recv": blank("int32", 1), "args": ([blank("int32", 0), 0, MPI.INT32_T],
                                                                    [blank("int32", 1), 0, MPI.INT32_T])}),
        ("Alltoallv", lambda: {"recv": blank("int32", 1), "args": ([blank("int32", 0), [0] * SIZE, MPI.INT32_T],
                                                                    [blank("int32", 1), [0] * SIZE, MPI.INT32_T])}),
        ("Allreduce", lambda: {"recv": blank("int32", 1), "args": ([blank("int32", 0), 0, MPI.INT32_T],
                                                                    [blank("int32", 1), 0, MPI.INT32_T], MPI.SUM)}),
        ("Bcast", lambda: {"recv": blank("int32", 1), "args": ([blank("int32", 1), 0, MPI.INT32_T], 0)}),
    ):
        assert both(comm, method, make) == 1


def test_window_grows_for_larger_calls(comm):
    before = comm.hierarchy_stats()["window_bytes"]
    big = 1 << 14
    send = numpy.full(big, RANK, dtype=numpy.int32)
    recv = numpy.empty(big * SIZE, dtype=numpy.int32)
    comm.Allgather(send, recv)
    assert (recv.reshape(SIZE, big) == numpy.arange(SIZE)[:, None]).all()
    stats = comm.hierarchy_stats()
    assert stats["window_bytes"] >= 2 * big * 4 * SIZE > before
    assert stats["nodes"] == len(stats["ranks_per_node"]) and sum(stats["ranks_per_node"]) == SIZE
    assert stats["inter_node"] and stats["memory_model"] in ("unified", "separate")


@pytest.mark.parametrize("per_node", (1, 2))
def test_free_leaves_user_windows_intact(per_node):
    node = WORLD.Split_type(MPI.COMM_TYPE_SHARED)
    user = MPI.Win.Allocate_shared(64, 1, comm=node)
    memory = numpy.frombuffer(user.tomemory(), dtype=numpy.uint8)
    memory[:] = 200 + node.Get_rank()
    duplicate = WORLD.Dup()
    wrapped = sparsecoll.wrap(duplicate, ranks_per_node=per_node)
    assert isinstance(wrapped, MPI.Intracomm) and wrapped == duplicate and sparsecoll.is_wrapped(wrapped)
    data = numpy.full(4, RANK, dtype=numpy.int64)
    wrapped.Allreduce(MPI.IN_PLACE, data)
    assert data.tolist() == [SIZE * (SIZE - 1) // 2] * 4
    hierarchy = wrapped._sc_hierarchy
    wrapped.Free()
    assert wrapped == MPI.COMM_NULL
    assert hierarchy.data.window is None and hierarchy.layout.node_comm == MPI.COMM_NULL
    assert hierarchy.layout.leader_comm == MPI.COMM_NULL
    assert (memory == 200 + node.Get_rank()).all()
    user.Free()
    node.Free()


def test_auto_keeps_the_library_on_one_node_unless_asked():
    """A bare wrap(intracomm) whose ranks share one node (this machine: one Split_type node) runs the
    library's global collectives, says why, and still reports its node structure; algorithm=
    'hierarchical' or an option of the node structure runs the hierarchy; Dup keeps the choice."""
    bare = sparsecoll.wrap(WORLD.Dup())
    asked = sparsecoll.wrap(WORLD.Dup(), "hierarchical")
    try:
        one_node = bare.hierarchy_stats()["nodes"] == 1
        data = numpy.arange(3, dtype=numpy.int64) + RANK
        for comm in (bare, asked):
            got, expected = numpy.zeros(3, dtype=numpy.int64), numpy.zeros(3, dtype=numpy.int64)
            comm.Allreduce(data, got)
            WORLD.Allreduce(data, expected)
            assert got.tolist() == expected.tolist()
        assert asked.plan_stats("Allreduce")["algorithm"] == "universal hierarchical"
        # plan_stats' other arguments are checked for a global collective too (they were dropped:
        # form="persistent" described the last blocking call; nonblocking and persistent global
        # collectives are the library's)
        ring = sparsecoll.wrap(WORLD.Create_cart([SIZE], periods=[True]), "direct", global_collectives="hierarchical")
        for arguments, named in (({"form": "bogus"}, "form"), ({"form": "persistent"}, "form"),
                                 ({"block_bytes": -1}, "block_bytes")):
            for comm in (asked, ring):
                with pytest.raises(ValueError, match=named):
                    comm.plan_stats("Allreduce", **arguments)
        ring.Free()
        stats = bare.plan_stats("Allreduce")
        if one_node:
            assert stats["algorithm"] == "library" and stats["reason"].startswith("one node")
            assert bare.hierarchy_stats()["calls"] == 0 and "one node" in bare.hierarchy_stats()["library"]
            copy = bare.Dup()
            assert copy.plan_stats("Bcast")["algorithm"] == "library"
            assert copy.Bcast.__func__ is MPI.Intracomm.Bcast and bare.Allreduce.__func__ is MPI.Intracomm.Allreduce
            copy.Free()
        else:
            assert stats["algorithm"] == "universal hierarchical"
    finally:
        bare.Free()
        asked.Free()


def test_native_intracomm_runs_the_library():
    wrapped = sparsecoll.wrap(WORLD.Dup(), "native")
    data = numpy.full(2, RANK, dtype=numpy.int32)
    wrapped.Allreduce(MPI.IN_PLACE, data)
    assert data.tolist() == [SIZE * (SIZE - 1) // 2] * 2
    with pytest.raises(RuntimeError, match="hierarchy_stats"):
        wrapped.hierarchy_stats()
    wrapped.Free()


def test_topology_communicator_keeps_the_librarys_global_collectives_by_default():
    ring = WORLD.Create_cart([SIZE], periods=[True])
    wrapped = sparsecoll.wrap(ring, "direct")
    data = numpy.full(2, RANK, dtype=numpy.int64)
    wrapped.Allreduce(MPI.IN_PLACE, data)
    assert data.tolist() == [SIZE * (SIZE - 1) // 2] * 2
    # the library's own methods, with no sparsecoll frame on their path (here and in a copy)
    copy = wrapped.Dup()
    for comm in (wrapped, copy):
        for name in ("Allreduce", "Bcast", "allreduce", "Reduce_scatter"):
            assert getattr(comm, name).__func__ is getattr(MPI.Intracomm, name), name
    copy.Free()
    hierarchical = sparsecoll.wrap(ring, "direct", global_collectives="hierarchical")
    assert hierarchical.Allreduce.__func__ is not MPI.Intracomm.Allreduce  # (the same handle: freed below)
    with pytest.raises(RuntimeError, match="global_collectives='hierarchical'"):
        wrapped.hierarchy_stats()
    with pytest.raises(ValueError, match="global_collectives"):
        sparsecoll.wrap(ring, "direct", global_collectives="fast")
    wrapped.Free()


def test_topology_communicator_gets_global_collectives():
    ring = WORLD.Create_cart([SIZE], periods=[True])
    wrapped = sparsecoll.wrap(ring, "direct", ranks_per_node=2, global_collectives="hierarchical")
    send = numpy.full(3, RANK, dtype=numpy.int32)
    recv = numpy.empty(3 * SIZE, dtype=numpy.int32)
    wrapped.Allgather(send, recv)
    assert recv.tolist() == [r for r in range(SIZE) for _ in range(3)]
    neighbors = numpy.empty(2, dtype=numpy.int32)
    wrapped.Neighbor_allgather(send[:1], neighbors)
    assert neighbors.tolist() == [(RANK - 1) % SIZE, (RANK + 1) % SIZE]
    assert wrapped.hierarchy_stats()["ranks_per_node"][0] == min(2, SIZE)
    duplicate = wrapped.Dup()
    duplicate.Bcast(send, root=SIZE - 1)
    assert send.tolist() == [SIZE - 1] * 3
    assert duplicate.hierarchy_stats()["ranks_per_node"][0] == min(2, SIZE)
    duplicate.Free()
    wrapped.Free()
    # detected nodes: making the node structure calls the library's allgather, not the wrapper's own
    detected = sparsecoll.wrap(WORLD.Create_cart([SIZE], periods=[True]), "direct", global_collectives="hierarchical")
    assert detected.allgather(RANK) == list(range(SIZE))
    assert detected.hierarchy_stats()["node_source"].startswith("detected")
    detected.Free()  # (the handle too, as wrapped.Free() freed ring's)


def test_bottom_with_absolute_addresses(comm):
    """``MPI.BOTTOM`` and a datatype of absolute addresses, as MPI and mpi4py allow: the copy-in and
    copy-out read and write where the datatype says (they asked for memory at address 0 before)."""
    mine = numpy.arange(4, dtype=numpy.int32) + 10 * RANK
    at_mine = MPI.INT32_T.Create_hindexed([4], [MPI.Get_address(mine)]).Commit()
    gathered = numpy.zeros(4 * SIZE, dtype=numpy.int32)
    comm.Allgather([MPI.BOTTOM, 1, at_mine], [gathered, 4, MPI.INT32_T])
    assert gathered.tolist() == [k + 10 * rank for rank in range(SIZE) for k in range(4)]
    if RANK != SIZE - 1:
        mine[:] = 0
    comm.Bcast([MPI.BOTTOM, 1, at_mine], root=SIZE - 1)
    assert mine.tolist() == [k + 10 * (SIZE - 1) for k in range(4)]
    at_mine.Free()


def test_idup_keeps_the_algorithm_and_options():
    """Idup's copy (usable once its request completed) runs what Dup's runs: the library's
    collectives under "native", the hierarchy with the same emulated nodes and reduce mode."""
    native = sparsecoll.wrap(WORLD.Dup(), "native")
    copy, request = native.Idup()
    request.Wait()
    assert copy.global_stats("Allreduce")["algorithm"] == "library"
    hierarchical = sparsecoll.wrap(WORLD.Dup(), ranks_per_node=2, reduce="dynamic")
    twin, request = hierarchical.Idup()
    request.Wait()
    data = numpy.arange(4, dtype=numpy.int32) + RANK
    result = numpy.zeros(4, dtype=numpy.int32)
    twin.Allreduce(data, result, MPI.SUM)
    assert result.tolist() == [SIZE * (SIZE - 1) // 2 + k * SIZE for k in range(4)]
    stats = twin.hierarchy_stats()
    assert stats["ranks_per_node"][0] == min(2, SIZE) and stats["reduce"] == "dynamic"
    hinted, request = native.Idup_with_info(MPI.INFO_NULL)  # mpi4py's other nonblocking duplicate
    request.Wait()
    assert hinted.global_stats("Allreduce")["algorithm"] == "library"
    for wrapped in (copy, native, twin, hierarchical, hinted):
        wrapped.Free()


def test_bad_arguments_raise_naming_them(comm):
    data = numpy.zeros(SIZE, dtype=numpy.int32)
    calls = comm.hierarchy_stats()["calls"]
    with pytest.raises(ValueError, match="root"):
        comm.Bcast(data, root=SIZE)
    with pytest.raises(ValueError, match="root"):
        comm.Gather(data[:1], data, root=-1)
    with pytest.raises(ValueError, match="sendbuf"):
        comm.Allgather(numpy.zeros(2, dtype=numpy.int32), data)  # 2 elements, blocks of 1
    with pytest.raises(ValueError, match="sendbuf"):
        comm.Alltoall(numpy.zeros(2 * SIZE, dtype=numpy.int32), data)
    with pytest.raises(ValueError, match="recvcounts"):
        comm.Reduce_scatter(MPI.IN_PLACE, data, None)
    with pytest.raises(TypeError, match="op"):
        comm.Allreduce(data, data.copy(), op="sum")
    with pytest.raises(ValueError, match="sendbuf: datatype MPI_INT differs from recvbuf.s .MPI_FLOAT."):
        comm.Allreduce(data, numpy.zeros(SIZE, dtype=numpy.float32))  # as mpi4py: not reinterpreted
    with pytest.raises(TypeError, match="op"):
        comm.allreduce(RANK, op=None)  # mpi4py: not callable (sparsecoll: on every rank, before sending)
    for op in (MPI.REPLACE, MPI.NO_OP):  # accumulate-only ops: the fixed leaders' path hung on them
        with pytest.raises(ValueError, match="op: MPI.REPLACE and MPI.NO_OP"):
            comm.Allreduce(data, data.copy(), op=op)
        with pytest.raises(ValueError, match="op: MPI.REPLACE and MPI.NO_OP"):
            comm.Reduce(data, data.copy(), op=op, root=SIZE - 1)
    with pytest.raises(ValueError, match="ranks_per_node"):
        sparsecoll.wrap(WORLD, ranks_per_node=0)
    assert comm.hierarchy_stats()["calls"] == calls  # nothing ran


def test_in_place_only_at_the_root(comm):
    """MPI allows IN_PLACE in Reduce, Gather(v) and Scatter(v) at the root only: elsewhere it is a
    ValueError naming the argument, raised before any message (so every rank may try it)."""
    data, calls = numpy.ones(SIZE, dtype=numpy.int32), comm.hierarchy_stats()["calls"]
    root = SIZE - 1
    if RANK != root:
        for in_place in (MPI.IN_PLACE, None):
            with pytest.raises(ValueError, match="sendbuf: MPI.IN_PLACE .* only at the root of Reduce"):
                comm.Reduce(in_place, data, root=root)
            with pytest.raises(ValueError, match="sendbuf: MPI.IN_PLACE .* only at the root of Gather"):
                comm.Gather(in_place, data, root=root)
            with pytest.raises(ValueError, match="sendbuf: MPI.IN_PLACE .* only at the root of Gather"):
                comm.Gatherv(in_place, [data, [1] * SIZE], root=root)
            with pytest.raises(ValueError, match="recvbuf: MPI.IN_PLACE .* only at the root of Scatter"):
                comm.Scatter(data, in_place, root=root)
            with pytest.raises(ValueError, match="recvbuf: MPI.IN_PLACE .* only at the root of Scatter"):
                comm.Scatterv([data, [1] * SIZE], in_place, root=root)
    assert comm.hierarchy_stats()["calls"] == calls


def _non_associative(a, b):
    """Neither commutative nor associative: shows the order mpi4py combines objects in."""
    return f"({a}.{b})"


def test_lowercase_object_collectives(comm):
    """mpi4py's pickle-based methods run on the hierarchical collectives and return exactly what
    mpi4py's own return on COMM_WORLD: objects of every size per rank, every root, reductions by an
    MPI.Op, a non-associative callable (mpi4py's combining order) and floating-point sums."""
    calls = comm.hierarchy_stats()["calls"]
    mine = {"rank": RANK, "data": list(range(RANK * 3)), "text": "x" * (RANK * 50)}
    assert comm.allgather(mine) == WORLD.allgather(mine)
    assert comm.allgather(None) == WORLD.allgather(None)
    outgoing = [(RANK, k, "y" * ((RANK + k) % 4)) for k in range(SIZE)]
    assert comm.alltoall(outgoing) == WORLD.alltoall(outgoing)
    assert comm.alltoall(None) == WORLD.alltoall(None) == [None] * SIZE  # mpi4py: None is SIZE Nones
    for root in ROOTS:
        assert comm.scatter(None, root) is WORLD.scatter(None, root) is None  # (it hung: root raised alone)
        sent = {"root": root, "payload": numpy.arange(root + 2)} if RANK == root else None
        got, expected = comm.bcast(sent, root), WORLD.bcast(sent, root)
        assert got["root"] == expected["root"] and numpy.array_equal(got["payload"], expected["payload"])
        assert comm.gather(mine, root) == WORLD.gather(mine, root)
        pieces = [{"to": k, "bytes": b"z" * k} for k in range(SIZE)] if RANK == root else None
        assert comm.scatter(pieces, root) == WORLD.scatter(pieces, root)
        assert comm.reduce([RANK], MPI.SUM, root) == WORLD.reduce([RANK], MPI.SUM, root)
        assert comm.reduce(str(RANK), _non_associative, root) == WORLD.reduce(str(RANK), _non_associative, root)
    value = 0.1 * (RANK + 1) + 1e-17 * RANK
    assert comm.allreduce(value, MPI.SUM) == WORLD.allreduce(value, MPI.SUM)
    assert comm.allreduce(str(RANK), _non_associative) == WORLD.allreduce(str(RANK), _non_associative)
    assert comm.allreduce(RANK, MPI.MAX) == SIZE - 1
    assert comm.hierarchy_stats()["calls"] > calls  # they ran on the hierarchical collectives


def test_roots_and_recvcounts_are_read_as_mpi4py_reads_them(comm):
    """mpi4py reads a root or a count through ``__index__``: a numpy integer, a 0-d integer array
    and a bool are taken. The hierarchical collectives refused bools and 0-d arrays (a ValueError
    naming ``root`` or ``recvcounts``) where the library's call ran; now the data is the library's."""
    last = numpy.array(SIZE - 1)  # a 0-d integer array
    data = numpy.arange(4, dtype="i8") + 10 * RANK
    got, expected = data.copy(), data.copy()
    comm.Bcast(got, root=last)
    WORLD.Bcast(expected, root=SIZE - 1)
    assert got.tolist() == expected.tolist()
    send = numpy.arange(SIZE, dtype="i8") + RANK
    got, expected = numpy.zeros(1, "i8"), numpy.zeros(1, "i8")
    comm.Reduce_scatter(send, got, [True] * SIZE)
    WORLD.Reduce_scatter(send, expected, [1] * SIZE)
    assert got.tolist() == expected.tolist()
    got, expected = numpy.zeros(4, "i8"), numpy.zeros(4, "i8")
    comm.Reduce(data, got, MPI.SUM, root=False)
    WORLD.Reduce(data, expected, MPI.SUM, root=0)
    assert got.tolist() == expected.tolist()
    assert comm.bcast("x" if RANK == SIZE - 1 else None, root=numpy.int32(SIZE - 1)) == "x"
    assert comm.gather(RANK, root=last) == (list(range(SIZE)) if RANK == SIZE - 1 else None)


def test_lowercase_bad_arguments_raise_before_any_message(comm):
    calls = comm.hierarchy_stats()["calls"]
    with pytest.raises(ValueError, match=f"sendobj: {SIZE + 1} objects, but the communicator has {SIZE} ranks"):
        comm.alltoall([0] * (SIZE + 1))
    with pytest.raises(ValueError, match="root"):
        comm.bcast(0, root=SIZE)
    with pytest.raises(TypeError, match="root"):
        comm.gather(0, root="0")
    if RANK == 0:
        with pytest.raises(TypeError, match="sendobj"):
            comm.scatter(3, root=0)
    with pytest.raises(TypeError, match="op"):
        comm.allreduce(1, op="sum")
    assert comm.hierarchy_stats()["calls"] == calls


def test_non_commutative_op_on_scattered_nodes_runs_the_library():
    """Nodes that are not consecutive rank ranges cannot keep MPI's order across leaders."""
    from sparsecoll.hierarchy import Hierarchy
    comm = WORLD.Dup()
    hierarchy = Hierarchy(comm, ranks_per_node=2)
    hierarchy.layout.node_of = tuple(reversed(hierarchy.layout.node_of))  # as a round-robin placement would be
    if SIZE > 2:
        assert not hierarchy.layout.contiguous
        assert hierarchy.reduction_plan(MPI.INT32_T, LEFT) is None
        assert "non-commutative" in hierarchy.library_reason
        assert hierarchy.reduction_plan(MPI.INT32_T, MPI.SUM) is not None
    hierarchy.free()
    comm.Free()


def test_plan_stats_name_what_each_global_collective_ran(comm):
    """plan_stats (global_stats) of a global collective: what its last call on this rank ran, the
    library with the reason where the library ran it; RuntimeError before a call, ValueError for
    a name that is no global collective; a topology wrapper's default global collectives are the
    library's."""
    fresh = sparsecoll.wrap(WORLD.Dup(), ranks_per_node=2)
    try:
        with pytest.raises(RuntimeError, match="no Bcast call"):
            fresh.plan_stats("Bcast")
        with pytest.raises(ValueError, match="collective: expected one of"):
            fresh.plan_stats("Neighbor_alltoall")
        data = numpy.arange(2, dtype=numpy.int32)
        fresh.Bcast(data, root=0)
        assert fresh.plan_stats("Bcast")["algorithm"] == "universal hierarchical"
        assert fresh.plan_stats("Bcast")["hierarchy"]["nodes"] == -(-SIZE // 2)
        pairs = numpy.zeros(2, dtype=numpy.dtype([("value", "f8"), ("rank", "i4")], align=True))
        fresh.Allreduce(MPI.IN_PLACE, [pairs, 2, MPI.DOUBLE_INT], op=MPI.MAXLOC)
        stats = fresh.global_stats("Allreduce")
        assert stats["algorithm"] == "library" and "one predefined contiguous type" in stats["reason"]
        assert fresh.allgather(RANK) == list(range(SIZE))
        assert fresh.plan_stats("allgather")["algorithm"] == "universal hierarchical"
    finally:
        fresh.Free()
    graph = WORLD.Create_dist_graph_adjacent([RANK], [RANK])
    try:
        wrapped = sparsecoll.wrap(graph)
        assert wrapped.plan_stats("Allreduce")["algorithm"] == "library"
        wrapped.Neighbor_allgather(numpy.ones(1), numpy.zeros(1))
        assert wrapped.plan_stats("allgather")["family"] == "allgather"  # the neighborhood one
    finally:
        graph.Free()


def test_reduce_scatter_whose_last_blocks_are_the_largest():
    """The leaders' Reduce_scatter ran in place, and MPICH 5.0.2's in-place Reduce_scatter aborts
    ('memcpy argument memory ranges overlap') when a node's block is larger than its offset: a
    legal call the library runs (int64 counts 17500 k for rank k)."""
    counts = [17500 * (r + 1) for r in range(SIZE)]
    for per_node in (2, 3):
        wrapped = sparsecoll.wrap(WORLD.Dup(), ranks_per_node=per_node)
        send = numpy.arange(sum(counts), dtype=numpy.int64) + RANK
        mine, theirs = numpy.zeros(counts[RANK], numpy.int64), numpy.zeros(counts[RANK], numpy.int64)
        wrapped.Reduce_scatter(send, mine, counts, op=MPI.SUM)
        WORLD.Reduce_scatter(send, theirs, counts, op=MPI.SUM)
        same(mine, theirs)
        assert wrapped.plan_stats("Reduce_scatter")["algorithm"] == "universal hierarchical"
        wrapped.Free()


def test_checked_arguments_raise_on_every_rank():
    """check_arguments=True: one allreduce finds disagreeing roots and counts; every rank raises the
    same error and the communicator stays usable."""
    checked = sparsecoll.wrap(WORLD.Dup(), ranks_per_node=2, check_arguments=True)
    data = numpy.full(2, RANK, dtype=numpy.int32)
    if SIZE > 1:
        with pytest.raises(ValueError, match="root"):
            checked.Bcast(data, root=RANK % 2)
        with pytest.raises(ValueError, match="buf"):
            checked.Bcast(data[:1 + RANK % 2], root=0)
        counts = [1] * SIZE
        with pytest.raises(ValueError, match=r"recvbuf: the root's counts disagree with those of rank\(s\) \[1\]"):
            send = numpy.zeros(2 if RANK == 1 else 1, dtype=numpy.int32)
            checked.Gatherv(send, [numpy.zeros(SIZE, dtype=numpy.int32), counts] if RANK == 0 else None, root=0)
    # the root's own blocks disagree with every rank's: it used to raise alone, before the agreement
    every = re.escape(str(list(range(SIZE))))
    with pytest.raises(ValueError, match=rf"sendbuf: the root's counts disagree with those of rank\(s\) {every}"):
        checked.Gather(numpy.zeros(3, dtype=numpy.int32), numpy.zeros(2 * SIZE, dtype=numpy.int32) if RANK == 0
                       else None, root=0)
    with pytest.raises(ValueError, match=r"recvbuf: the root's counts disagree"):
        checked.Scatter(numpy.zeros(2 * SIZE, dtype=numpy.int32) if RANK == 0 else None,
                        numpy.zeros(3, dtype=numpy.int32), root=0)
    with pytest.raises(ValueError, match=r"recvbuf: the ranks disagree about the counts of rank\(s\) \[0\]"):
        checked.Allgather(numpy.zeros(1 if RANK == 0 else 2, dtype=numpy.int32), numpy.zeros(2 * SIZE, numpy.int32))
    if SIZE > 1:  # recvcounts that differ between ranks with equal totals (returned silently before)
        counts = [SIZE] + [0] * (SIZE - 1) if RANK == 0 else [1] * SIZE
        with pytest.raises(ValueError, match=r"recvcounts: the ranks disagree about the counts of rank\(s\)"):
            checked.Reduce_scatter(numpy.ones(SIZE, numpy.int32), numpy.zeros(counts[RANK], numpy.int32), counts)
    # an error one rank finds in its own arguments before the agreement: it raises its own, the
    # others that it failed (they waited for ever before)
    for call, own in ((lambda: checked.Alltoall(numpy.zeros(2 * SIZE, numpy.int32),
                                                numpy.zeros((3 if RANK == 0 else 2) * SIZE, numpy.int32)),
                       "sendbuf: blocks of 8 bytes, but recvbuf's blocks hold 12 bytes"),
                      (lambda: checked.Reduce(numpy.zeros(2, numpy.int32), numpy.zeros(2, numpy.float32)
                                              if RANK == 0 else None, op=MPI.SUM, root=0),
                       "sendbuf: datatype MPI_INT differs from recvbuf's"),
                      (lambda: checked.Bcast(numpy.zeros((2, 2), numpy.int32)[:, 0] if RANK == 0 else data, root=0),
                       "buf")):
        with pytest.raises((ValueError, TypeError)) as raised:
            call()
        assert own in str(raised.value) if RANK == 0 else \
            "rank(s) [0] raised on their arguments of this call" in str(raised.value), str(raised.value)
    checked.Allreduce(MPI.IN_PLACE, data)
    assert data.tolist() == [SIZE * (SIZE - 1) // 2] * 2
    with pytest.raises(TypeError, match="check_arguments"):
        sparsecoll.wrap(WORLD, check_arguments="yes")
    checked.Free()


@pytest.mark.timeout(60)
def test_checked_alltoallv_with_one_ranks_bad_arguments_raises_on_every_rank():
    """check_arguments=True, Alltoallv, rank 0's receive buffer one element short of its counts:
    rank 0 raised its own error while the other ranks waited in the node barrier for good (Alltoallv
    took no part in the agreement). Now rank 0 raises its own, the others one naming it."""
    checked = sparsecoll.wrap(WORLD.Dup(), ranks_per_node=2, check_arguments=True)
    try:
        received = numpy.zeros(SIZE - 1 if RANK == 0 else SIZE, dtype=numpy.int32)
        with pytest.raises(ValueError) as raised:
            checked.Alltoallv([numpy.zeros(SIZE, numpy.int32), [1] * SIZE], [received, [1] * SIZE])
        assert "recvbuf" in str(raised.value) if RANK == 0 else \
            "rank(s) [0] raised on their arguments of this call" in str(raised.value), str(raised.value)
        sent = numpy.arange(SIZE, dtype=numpy.int32) + 10 * RANK
        received = numpy.zeros(SIZE, dtype=numpy.int32)
        checked.Alltoallv([sent, [1] * SIZE], [received, [1] * SIZE])  # every rank in step
        assert received.tolist() == [RANK + 10 * rank for rank in range(SIZE)]
    finally:
        checked.Free()


class CountingIntracomm(MPI.Intracomm):
    """The leaders' communicator of :func:`test_inter_node_option`: the library's collectives, counted."""

    calls = 0

    def Alltoallv(self, sendbuf, recvbuf):
        type(self).calls += 1
        return super().Alltoallv(sendbuf, recvbuf)


def test_inter_node_may_be_a_function_at_another_address_on_each_rank():
    """wrap compares inter_node by its qualified name: a function's repr holds its address, which
    differs between processes (every rank raised 'different algorithms or options')."""
    ballast = [bytearray(64) for _ in range(97 * RANK)]  # functions made below land elsewhere per rank

    def leaders_collectives(leader_comm):
        return leader_comm
    wrapped = sparsecoll.wrap(WORLD.Dup(), ranks_per_node=2, inter_node=leaders_collectives)
    recv = numpy.zeros(1)
    wrapped.Allreduce(numpy.ones(1), recv)
    assert recv[0] == SIZE
    wrapped.Free()
    del ballast


def test_an_argument_refused_on_one_rank_raises_on_every_rank():
    """wrap of an intracommunicator with an argument it refuses on rank 0 alone (a topology
    communicator's argument, an unknown option, a bad node option): rank 0 raised its error
    before the ranks compared their arguments, and the others waited in that allreduce for good.
    Now rank 0 raises its own error and every other rank a ValueError saying the ranks differ."""
    raw = WORLD.Dup()
    for refused, own in (({"profile": "builtin"}, "profile: is for topology communicators"),
                         ({"theta": 2}, "options: an intracommunicator takes only"),
                         ({"ranks_per_node": 0}, "ranks_per_node"),
                         ({"algorithm": "direct"}, "algorithm: an intracommunicator takes one of")):
        with pytest.raises((TypeError, ValueError)) as raised:
            sparsecoll.wrap(raw, **(refused if RANK == 0 else {}))
        expected = own if RANK == 0 else "another rank's were refused"
        assert expected in str(raised.value), str(raised.value)
    wrapped = sparsecoll.wrap(raw)  # the communicator is still usable: nothing half-made
    recv = numpy.zeros(1)
    wrapped.Allreduce(numpy.ones(1), recv)
    assert recv[0] == SIZE
    wrapped.Free()


def test_wrappers_of_one_handle_share_one_node_structure_freed_with_the_handle():
    """Node and leader communicators live on the handle: every wrap of it with equal options takes
    the same structure (wrap(COMM_WORLD) in a loop made one per call, and MPICH ran out of
    communicators after about 680), and freeing the handle through any object frees it (the
    user's own handle left the structure behind)."""
    from sparsecoll.hierarchy.handles import structures_made
    raw = WORLD.Dup()
    wrappers = [sparsecoll.wrap(raw, ranks_per_node=2) for _ in range(20)]
    other = sparsecoll.wrap(raw, ranks_per_node=1)
    recv = numpy.zeros(1)
    for wrapped in wrappers + [other]:
        wrapped.Allreduce(numpy.ones(1), recv)
        assert recv[0] == SIZE
    shared = wrappers[0]._sc_hier()
    assert all(wrapped._sc_hier() is shared for wrapped in wrappers)
    assert other._sc_hier() is not shared and structures_made(raw) == 2
    node_comm = shared.layout.node_comm
    raw.Free()  # the user's object, not a wrapper
    assert node_comm == MPI.COMM_NULL and other._sc_hier().layout.node_comm == MPI.COMM_NULL


def test_two_inter_node_closures_of_one_name_are_not_merged():
    """Two wrappers of one handle with equal options but different inter_node objects of one
    qualified name: the second shared the first's structure, and its callable never ran."""
    from sparsecoll.hierarchy.handles import structures_made
    called = {"first": 0, "second": 0}

    def make(name):
        def leaders_collectives(leader_comm):
            called[name] += 1
            return leader_comm
        return leaders_collectives
    raw = WORLD.Dup()
    first = sparsecoll.wrap(raw, ranks_per_node=2, inter_node=make("first"))
    same_object = sparsecoll.wrap(raw, ranks_per_node=2, inter_node=first._sc_hierarchy_options["inter_node"])
    second = sparsecoll.wrap(raw, ranks_per_node=2, inter_node=make("second"))
    recv = numpy.zeros(1)
    for wrapped in (first, same_object, second):
        wrapped.Allreduce(numpy.ones(1), recv)
        assert recv[0] == SIZE
    leader = RANK % 2 == 0
    assert called == {"first": int(leader), "second": int(leader)}
    assert same_object._sc_hier() is first._sc_hier() is not second._sc_hier()
    assert structures_made(raw) == 2
    raw.Free()


def test_a_copy_of_a_wrapper_makes_one_node_structure_and_its_free_frees_it(monkeypatch):
    """Dup, Clone and Dup_with_info of a wrapped intracommunicator: the copy's wrap agreed on its
    options with the copy's own (hierarchical) Allreduce, which made a second node structure
    that nothing freed."""
    from sparsecoll.hierarchy import collectives
    counts = {"made": 0, "freed": 0}
    made, freed = collectives.Hierarchy.__init__, collectives.Hierarchy.free

    def counted_init(self, *args, **kwargs):
        counts["made"] += 1
        made(self, *args, **kwargs)

    def counted_free(self):
        counts["freed"] += 1
        freed(self)
    monkeypatch.setattr(collectives.Hierarchy, "__init__", counted_init)
    monkeypatch.setattr(collectives.Hierarchy, "free", counted_free)
    original = sparsecoll.wrap(WORLD.Dup(), ranks_per_node=2)
    recv = numpy.zeros(1)
    for copy_of in (lambda: original.Dup(), lambda: original.Clone(),
                    lambda: original.Dup_with_info(MPI.INFO_NULL)):
        before = dict(counts)
        copy = copy_of()
        copy.Allreduce(numpy.ones(1), recv)
        assert recv[0] == SIZE
        copy.Free()
        assert (counts["made"] - before["made"], counts["freed"] - before["freed"]) == (1, 1)
    original.Free()


def test_inter_node_option():
    """inter_node chooses what the leaders call between nodes."""
    wrapped = sparsecoll.wrap(WORLD.Dup(), ranks_per_node=2, inter_node=CountingIntracomm)
    send = numpy.arange(SIZE, dtype=numpy.int32) + 10 * RANK
    recv = numpy.empty(SIZE, dtype=numpy.int32)
    wrapped.Alltoall(send, recv)
    assert recv.tolist() == [10 * r + RANK for r in range(SIZE)]
    assert CountingIntracomm.calls == (1 if RANK % 2 == 0 else 0)  # leaders only
    assert "CountingIntracomm" in wrapped.hierarchy_stats()["inter_node"]
    with pytest.raises(TypeError, match="inter_node"):
        sparsecoll.wrap(WORLD, inter_node=3)
    wrapped.Free()
