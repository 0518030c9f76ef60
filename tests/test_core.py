"""Pure parts in one process: Pattern + verify, bind, buffer-spec parsing.

Hypothesis draws random multigraphs (repeated edges, self loops, zero degrees) and
payload layouts.
"""

from __future__ import annotations

import importlib

import numpy
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mpi4py import MPI

from sparsecoll.algorithms.direct import direct_pattern
from sparsecoll.bind import bind, has_transit
from sparsecoll.buffers import Blocks, element_size, mixes_basic_types, parse_simple, parse_vector, parse_w
from sparsecoll.pattern import RECV, SEND, Message, Pattern, Step, dependencies, stats
from sparsecoll.topology import PROC_NULL, cart_topology, graph_topology
from sparsecoll.verify import VerificationError, verify


@st.composite
def multigraphs(draw, max_ranks=7):
    """Every rank's (sources, destinations) of a random multigraph, edge order shuffled."""
    size = draw(st.integers(1, max_ranks))
    edges = draw(st.lists(st.tuples(st.integers(0, size - 1), st.integers(0, size - 1)), max_size=4 * size))
    order = draw(st.permutations(range(len(edges))))
    sources = {r: [] for r in range(size)}
    dests = {r: [] for r in range(size)}
    for a, b in edges:
        dests[a].append(b)
    for index in order:  # receive order independent of send order
        a, b = edges[index]
        sources[b].append(a)
    return {r: graph_topology(r, size, sources[r], dests[r]) for r in range(size)}


def cart_ring(size: int, periodic: bool):
    """Topologies of a 1-D Cartesian grid (PROC_NULL at the ends when not periodic)."""
    topologies = {}
    for r in range(size):
        lo, hi = r - 1, r + 1
        if periodic:
            lo, hi = lo % size, hi % size
        lo = lo if 0 <= lo < size else PROC_NULL
        hi = hi if 0 <= hi < size else PROC_NULL
        topologies[r] = cart_topology(r, size, [size], [periodic], [r], [(lo, hi)])
    return topologies


@settings(max_examples=200, deadline=None)
@given(multigraphs())
def test_direct_patterns_verify_on_random_multigraphs(topologies):
    for family in ("allgather", "alltoall"):
        patterns = {r: direct_pattern(t, family) for r, t in topologies.items()}
        summary = verify(patterns, topologies)
        edges = sum(len(t.destinations) for t in topologies.values())
        assert summary["messages"] == edges


@pytest.mark.parametrize("size", [1, 2, 3, 5])
@pytest.mark.parametrize("periodic", [True, False])
def test_direct_patterns_verify_on_cartesian_rings(size, periodic):
    topologies = cart_ring(size, periodic)
    for family in ("allgather", "alltoall"):
        verify({r: direct_pattern(t, family) for r, t in topologies.items()}, topologies)


def test_cartesian_matching_swaps_directions():
    """Block s of the sender lands in block s^1 (MPI-4.1 §8.6): visible at size 1 and 2."""
    ring = cart_ring(2, True)
    assert ring[0].send_items("alltoall") == ((0, 1, 0), (0, 1, 1))
    assert ring[1].recv_items("alltoall") == ((0, 1, 1), (0, 1, 0))


def _mutations(patterns):
    """Broken variants of a valid pattern set, each with what it breaks."""
    rank = next(r for r, p in patterns.items() if p.steps and p.steps[0].sends)
    p = patterns[rank]
    step = p.steps[0]
    yield "dropped send", {**patterns, rank: Pattern(p.family, rank, (Step(step.sends[1:], step.recvs),))}
    first = step.sends[0]
    swapped = Message(first.peer, ((999,) * len(first.items[0]),))
    yield "wrong item", {**patterns, rank: Pattern(p.family, rank, (Step((swapped,) + step.sends[1:], step.recvs),))}
    late = Pattern(p.family, rank, (Step(step.sends[1:], step.recvs), Step(step.sends[:1], ())))
    yield "send one step late", {**patterns, rank: late}


@settings(max_examples=100, deadline=None)
@given(multigraphs())
def test_verify_rejects_broken_patterns(topologies):
    for family in ("allgather", "alltoall"):
        patterns = {r: direct_pattern(t, family) for r, t in topologies.items()}
        if not any(p.steps[0].sends for p in patterns.values()):
            continue
        for _what, broken in _mutations(patterns):
            with pytest.raises(VerificationError):
                verify(broken, topologies)


def test_verify_rejects_forwarding_before_holding_and_extra_arrivals():
    topologies = {0: graph_topology(0, 2, [], [1]), 1: graph_topology(1, 2, [0], [])}
    early = {0: Pattern("allgather", 0, (Step((Message(1, ((1,),)),), ()),)),
             1: Pattern("allgather", 1, (Step((), (Message(0, ((1,),)),)),))}
    with pytest.raises(VerificationError, match="before holding"):
        verify(early, topologies)
    twice = {0: Pattern("allgather", 0, (Step((Message(1, ((0,),)), Message(1, ((0,),))), ()),)),
             1: Pattern("allgather", 1, (Step((), (Message(0, ((0,),)), Message(0, ((0,),)))),))}
    with pytest.raises(VerificationError, match="2 times"):
        verify(twice, topologies)


def _relay_patterns(after=None):
    """Rank 1 relays rank 0's block to rank 2 (and keeps it); ``after``: rank 1's ordering dependencies."""
    t = {0: graph_topology(0, 3, [], [1, 2]), 1: graph_topology(1, 3, [0], [2]), 2: graph_topology(2, 3, [0, 1], [])}
    patterns = {0: Pattern("allgather", 0, (Step((Message(1, ((0,),)),), ()),)),
                1: Pattern("allgather", 1, (Step((Message(2, ((1,),)),), (Message(0, ((0,),)),)),
                                            Step((Message(2, ((0,),)),), ())), after=after or {}),
                2: Pattern("allgather", 2, (Step((), (Message(1, ((1,),)),)), Step((), (Message(1, ((0,),)),))))}
    return patterns, t


def test_dependencies_are_derived_from_the_items_and_merged_with_ordering_ones():
    patterns, t = _relay_patterns(after={(1, 0): ((SEND, 0, 0),)})
    deps = dependencies(patterns[1])
    assert deps == {(0, 0): (), (1, 0): ((RECV, 0, 0), (SEND, 0, 0))}
    verify(patterns, t)
    schedule = bind(patterns[1], t[1], _blocks(100, [3]), _blocks(7000, [3]))
    assert schedule.after == deps


@pytest.mark.parametrize("after, message", [
    ({(1, 0): ((SEND, 1, 0),)}, "not an earlier send"),    # waits for itself
    ({(0, 0): ((SEND, 1, 0),)}, "not an earlier send"),    # waits for a later step
    ({(1, 0): ((RECV, 1, 0),)}, "not an earlier receive"),  # a receive that does not exist
    ({(0, 0): ((RECV, 0, 0),)}, "not an earlier receive"),  # a receive of its own step
    ({(1, 0): (("copy", 0, 0),)}, "malformed"),
    ({(5, 0): ()}, "does not exist"),
])
def test_verify_rejects_dependencies_that_do_not_point_backwards(after, message):
    patterns, t = _relay_patterns(after=after)
    with pytest.raises(VerificationError, match=message):
        verify(patterns, t)


def test_verify_rejects_a_forward_that_does_not_depend_on_its_arrival(monkeypatch):
    """The closure check itself: with the derived data dependencies taken away, the relay's
    forward of rank 0's block no longer waits for its arrival."""
    verify_module = importlib.import_module("sparsecoll.verify")
    patterns, t = _relay_patterns()
    real = verify_module.dependencies

    def without_data(pattern):
        return {key: tuple(r for r in refs if r[0] != RECV) for key, refs in real(pattern).items()}
    monkeypatch.setattr(verify_module, "dependencies", without_data)
    with pytest.raises(VerificationError, match="without depending on its arrival"):
        verify(patterns, t)


def _blocks(base: int, counts, extent: int = 4, datatype=MPI.INT32_T) -> Blocks:
    displs, acc = [], 0
    for c in counts:
        displs.append(acc)
        acc += c * extent
    return Blocks(base, tuple(counts), tuple(displs), (datatype,) * len(counts))


@settings(max_examples=100, deadline=None)
@given(multigraphs(), st.data())
def test_bind_places_direct_messages_in_their_blocks(topologies, data):
    for _r, topology in topologies.items():
        for family in ("allgather", "alltoall"):
            nsend = 1 if family == "allgather" else topology.outdegree
            send = _blocks(1_000_000, data.draw(st.lists(st.integers(0, 4), min_size=nsend, max_size=nsend)))
            recv = _blocks(5_000_000, data.draw(st.lists(st.integers(0, 4), min_size=topology.indegree,
                                                         max_size=topology.indegree)))
            pattern = direct_pattern(topology, family)
            schedule = bind(pattern, topology, send, recv)
            assert not has_transit(pattern, topology) and not schedule.copies and schedule.temp is None
            (sends, recvs), = schedule.steps or [((), ())]
            send_items = topology.send_items(family)
            for message, (d, item) in zip(sends, [(d, i) for d, i in zip(topology.destinations, send_items)
                                                   if d != PROC_NULL]):
                k = send_items.index(item)
                assert message.peer == d and message.pieces == (send.piece(0 if family == "allgather" else k),)
            placed = sorted(message.pieces[0] for message in recvs)
            assert placed == sorted(recv.piece(i) for i in range(topology.indegree))


def test_bind_uses_temp_space_forwarding_and_copies():
    """A hand-made two-step allgather: rank 1 relays rank 0's block to rank 2 and keeps it."""
    t = {0: graph_topology(0, 3, [], [1, 2]), 1: graph_topology(1, 3, [0], []),
         2: graph_topology(2, 3, [0, 0], [])}
    patterns = {0: Pattern("allgather", 0, (Step((Message(1, ((0,),)),), ()),)),
                1: Pattern("allgather", 1, (Step((), (Message(0, ((0,),)),)), Step((Message(2, ((0,),)),), ()))),
                2: Pattern("allgather", 2, (Step(), Step((), (Message(1, ((0,),)),))))}
    verify(patterns, t)
    recv1 = _blocks(7000, [3])
    s1 = bind(patterns[1], t[1], _blocks(100, [3]), recv1)
    assert s1.steps[1][0][0].pieces == (recv1.piece(0),)  # forwarded from the receive buffer
    recv2 = _blocks(9000, [3, 3])
    s2 = bind(patterns[2], t[2], _blocks(200, [3]), recv2)
    assert s2.copies == [(recv2.piece(0), recv2.piece(1))]  # one arrival, two blocks
    relay_only = {1: graph_topology(1, 3, [], [])}
    with pytest.raises(ValueError, match="size is unknown"):
        bind(patterns[1], relay_only[1], _blocks(100, [3]), _blocks(0, []))
    s3 = bind(patterns[1], relay_only[1], _blocks(100, [3]), _blocks(0, []), lambda item: (3, MPI.INT32_T))
    address = s3.steps[0][1][0].pieces[0][0]
    assert s3.temp is not None and s3.temp.ctypes.data <= address < s3.temp.ctypes.data + s3.temp.nbytes
    assert s3.steps[1][0][0].pieces[0][0] == address


def test_bind_takes_relayed_items_as_bytes_where_the_rule_says_so():
    """Rank 2 gets rank 0's block relayed by rank 1: with ``relayed_as_bytes`` answering yes it
    lands in temporary ``MPI_PACKED`` bytes (the block's 12 bytes) and a local copy fills both
    receive blocks; answering no, straight in the first block as before. Rank 1 gets the block
    from its origin, so it is never asked."""
    t = {1: graph_topology(1, 3, [0], []), 2: graph_topology(2, 3, [0, 0], [])}
    patterns = {1: Pattern("allgather", 1, (Step((), (Message(0, ((0,),)),)), Step((Message(2, ((0,),)),), ()))),
                2: Pattern("allgather", 2, (Step(), Step((), (Message(1, ((0,),)),))))}
    asked = []

    def rule(answer):
        def relayed_as_bytes(message):
            asked.append(message)
            return answer
        return relayed_as_bytes
    recv2 = _blocks(9000, [3, 3])
    as_bytes = bind(patterns[2], t[2], _blocks(200, [3]), recv2, relayed_as_bytes=rule(True))
    (piece,) = as_bytes.steps[1][1][0].pieces
    assert piece[1:] == (12, MPI.PACKED) and as_bytes.temp is not None
    assert as_bytes.copies == [(piece, recv2.piece(0)), (piece, recv2.piece(1))]
    typed = bind(patterns[2], t[2], _blocks(200, [3]), recv2, relayed_as_bytes=rule(False))
    assert typed.steps[1][1][0].pieces == (recv2.piece(0),) and typed.temp is None
    assert asked == [Message(1, ((0,),))] * 2
    bind(patterns[1], t[1], _blocks(100, [3]), _blocks(7000, [3]), relayed_as_bytes=rule(True))
    assert len(asked) == 2


def test_element_size_of_datatypes():
    """The one size of a datatype's basic elements, 0 where they differ."""
    pair = MPI.Datatype.Create_struct([1, 1], [0, 8], [MPI.CHAR, MPI.DOUBLE]).Commit()
    ints = MPI.Datatype.Create_struct([2, 1], [0, 12], [MPI.INT32_T, MPI.INT32_T]).Commit()
    strided = MPI.DOUBLE.Create_vector(3, 1, 2).Commit()
    try:
        assert [element_size(t) for t in (MPI.DOUBLE, MPI.BYTE, pair, ints, strided, MPI.DOUBLE_INT, MPI.TWOINT)] \
            == [8, 1, 0, 4, 8, 0, 4]
        assert not mixes_basic_types(Blocks(0, (1, 1), (0, 8), (MPI.DOUBLE, strided)))
        assert not mixes_basic_types(Blocks(0, (1, 1), (0, 8), (MPI.INT32_T, ints)))
        assert mixes_basic_types(Blocks(0, (1, 1), (0, 8), (MPI.INT32_T, strided)))
    finally:
        for datatype in (pair, ints, strided):
            datatype.Free()


def test_stats_count_messages_and_items():
    p = Pattern("alltoall", 0, (Step((Message(1, ((0, 1, 0), (0, 2, 0))),), (Message(1, ((1, 0, 0),)),)),
                                Step((), ())))
    s = stats(p)
    assert (s["steps"], s["sends"], s["recvs"], s["send_items"], s["recv_items"]) == (1, 1, 1, 2, 1)


# -- buffer specs -----------------------------------------------------------------


def test_simple_specs():
    a = numpy.zeros(12, dtype="i4")
    base = a.ctypes.data
    b = parse_simple(a, 3, readonly=False, arg="recvbuf")
    assert b.counts == (4, 4, 4) and b.displs == (0, 16, 32) and b.address == base
    b = parse_simple([a, (2, 3), MPI.INT32_T], 1, readonly=True, arg="sendbuf")
    assert b.counts == (2,) and b.displs == (12,)
    b = parse_simple([a, "d"], 2, readonly=True, arg="sendbuf")
    assert b.types[0] == MPI.DOUBLE and b.counts == (3, 3)
    with pytest.raises(ValueError, match="recvbuf.*5 blocks"):
        parse_simple(a, 5, readonly=False, arg="recvbuf")
    with pytest.raises(ValueError, match="sendbuf.*needs bytes"):
        parse_simple([a, 7, MPI.INT32_T], 2, readonly=True, arg="sendbuf")
    with pytest.raises(TypeError, match="recvbuf.*read-only"):
        parse_simple(bytes(8), 1, readonly=False, arg="recvbuf")
    with pytest.raises(ValueError, match="negative count"):
        parse_simple([a, -1, MPI.INT32_T], 1, readonly=True, arg="sendbuf")


def test_vector_specs():
    a = numpy.zeros(10, dtype="f8")
    b = parse_vector(a, 3, readonly=False, arg="recvbuf")
    assert b.counts == (4, 3, 3) and b.displs == (0, 32, 56)  # mpi4py gives the remainder to the first
    b = parse_vector([a, 2, 3, MPI.DOUBLE], 3, readonly=False, arg="recvbuf")
    assert b.counts == (2, 2, 2) and b.displs == (0, 24, 48)
    b = parse_vector([a, ([1, 2], [4, 0]), MPI.DOUBLE], 2, readonly=False, arg="recvbuf")
    assert b.displs == (32, 0)
    with pytest.raises(ValueError, match="recvbuf: expected 2 counts"):
        parse_vector([a, [1, 2, 3]], 2, readonly=False, arg="recvbuf")


def test_w_specs_and_datatype_checks():
    a = numpy.zeros(8, dtype="i4")
    b = parse_w([a, ([1, 2], [0, 8]), [MPI.INT32_T, MPI.INT32_T]], 2, readonly=True, arg="sendbuf")
    assert b.counts == (1, 2) and b.displs == (0, 8)
    b = parse_w([MPI.BOTTOM, [1], [a.ctypes.data], [MPI.INT32_T]], 1, readonly=True, arg="sendbuf")
    assert b.address == 0 and b.displs == (a.ctypes.data,)
    uncommitted = MPI.INT32_T.Create_contiguous(2)
    with pytest.raises(ValueError, match=r"recvbuf: datatypes\[1\].*not committed"):
        parse_w([a, ([1, 1], [0, 8]), [MPI.INT32_T, uncommitted]], 2, readonly=False, arg="recvbuf")
    uncommitted.Free()
    with pytest.raises(ValueError, match="BOTTOM requires"):
        parse_w([MPI.BOTTOM, [MPI.INT32_T]], 1, readonly=True, arg="sendbuf")
    with pytest.raises(ValueError, match="needs bytes"):
        parse_w([a, ([4], [24]), [MPI.INT32_T]], 1, readonly=True, arg="sendbuf")
    with pytest.raises(ValueError, match=r"recvbuf: expected 2 displacements \(one per neighbor\), got 1"):
        parse_w([a, ([1, 1], [0]), [MPI.INT32_T, MPI.INT32_T]], 2, readonly=False, arg="recvbuf")
    with pytest.raises(TypeError, match=r"recvbuf: displacements must be integers"):
        parse_w([a, ([1, 1], [0, 4.0]), [MPI.INT32_T, MPI.INT32_T]], 2, readonly=False, arg="recvbuf")
    with pytest.raises(ValueError, match=r"sendbuf: expected 2 datatypes \(one per neighbor\), got 3"):
        parse_w([a, ([1, 1], [0, 4]), [MPI.INT32_T] * 3], 2, readonly=True, arg="sendbuf")
    with pytest.raises(TypeError, match=r"sendbuf: datatypes must be a sequence of MPI datatypes"):
        parse_w([a, ([1, 1], [0, 4]), 7], 2, readonly=True, arg="sendbuf")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 5), max_size=6), st.lists(st.integers(0, 3), max_size=6), st.sampled_from(["i4", "f8"]))
def test_vector_layouts_round_trip(counts, gaps, dtype):
    """Random counts and gaps: parsed blocks are where the layout put them, inside the buffer."""
    gaps = (gaps + [0] * len(counts))[:len(counts)]
    displs, cursor = [], 0
    for c, g in zip(counts, gaps):
        cursor += g
        displs.append(cursor)
        cursor += c
    a = numpy.zeros(max(cursor, 1), dtype=dtype)
    b = parse_vector([a, (counts, displs)], len(counts), readonly=False, arg="recvbuf")
    assert b.counts == tuple(counts) and b.displs == tuple(d * a.itemsize for d in displs)


class _DLPackOnly:
    """An array reachable only through the DLPack protocol."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def test_dlpack_buffers_infer_their_datatype():
    array = numpy.zeros(6, dtype="f8")
    blocks = parse_simple(_DLPackOnly(array), 3, readonly=False, arg="recvbuf")
    assert blocks.types[0] == MPI.DOUBLE and blocks.counts == (2, 2, 2) and blocks.address == array.ctypes.data


def test_repeated_calls_on_the_same_arrays_parse_once_and_notice_changes(monkeypatch):
    """Plain numpy arguments are parsed once; an in-place dtype change or a read-only
    receive array is parsed (and checked) again."""
    import sparsecoll
    import sparsecoll.runtime.communicator as runtime_module
    parses = []
    real = runtime_module.parse_simple
    monkeypatch.setattr(runtime_module, "PARSERS", {
        name: (lambda *a, **k: parses.append(1) or real(*a, **k), per_edge, recv)
        for name, (_, per_edge, recv) in runtime_module.PARSERS.items()})
    graph = MPI.COMM_SELF.Create_dist_graph_adjacent([0, 0], [0, 0])
    try:
        comm = sparsecoll.wrap(graph, "direct")
        send, recv = numpy.array([7], dtype="i4"), numpy.zeros(2, dtype="i4")
        for _ in range(3):
            comm.Neighbor_allgather(send, recv)
            comm.Ineighbor_allgather(send, recv).Wait()
        assert len(parses) == 1 and recv.tolist() == [7, 7]
        recv.dtype = "u2"  # same memory, two blocks of two 2-byte entries now: parsed again
        recv[:] = 0
        send2 = numpy.array([5, 6], dtype="u2")  # blocks of matching edges have equal signatures (MPI)
        comm.Neighbor_allgather(send2, recv)
        assert len(parses) == 2 and recv.tolist() == [5, 6, 5, 6]
        recv.flags.writeable = False
        with pytest.raises(BufferError, match="recvbuf: buffer is read-only") as raised:  # as mpi4py
            comm.Neighbor_allgather(send2, recv)
        assert isinstance(raised.value, TypeError)  # as sparsecoll's other bad arguments
        # list specs with counts and predefined datatypes are kept by value: a displacement
        # list changed in place is parsed (and checked) again
        out = numpy.full(4, -1, dtype="i4")
        displs = [0, 2]
        for _ in range(2):
            comm.Neighbor_allgatherv([send, 1, MPI.INT32_T], [out, ([1, 1], displs), MPI.INT32_T])
        assert len(parses) == 4 and out.tolist() == [7, -1, 7, -1]  # (the read-only call parsed too)
        displs[1] = 3
        comm.Neighbor_allgatherv([send, 1, MPI.INT32_T], [out, ([1, 1], displs), MPI.INT32_T])
        assert len(parses) == 5 and out.tolist() == [7, -1, 7, 7]
        with pytest.raises(BufferError, match="sendbuf: ndarray cannot be used as an MPI buffer"):
            comm.Neighbor_allgather(numpy.zeros(4, dtype="u2")[::2], out)  # not contiguous, as mpi4py
        displs[1] = 4
        with pytest.raises(ValueError, match="recvbuf"):
            comm.Neighbor_allgatherv([send, 1, MPI.INT32_T], [out, ([1, 1], displs), MPI.INT32_T])
        # numpy counts and displacements are kept by value too, not by identity
        counts, displs = numpy.ones(2, dtype=int), numpy.array([0, 2])
        for expected in ([7, -1, 7, -1], [7, 7, -1, -1]):
            out[:] = -1
            comm.Neighbor_allgatherv([send, 1, MPI.INT32_T], [out, (counts, displs), MPI.INT32_T])
            assert out.tolist() == expected
            displs[:] = [1, 0]
        # [array, count, datatype] specs: kept by the arrays' identity and the count and datatype
        # by value; a changed count or another array is parsed again, a derived datatype once
        # (kept by its object and handle)
        before = len(parses)
        pair = numpy.zeros(4, dtype="i4")
        for _ in range(3):
            comm.Neighbor_allgather([send, 1, MPI.INT32_T], [pair, 1, MPI.INT32_T])
        assert len(parses) == before + 1 and pair.tolist() == [7, 7, 0, 0]
        comm.Neighbor_allgather([send2, 1, MPI.UINT32_T], [pair, 1, MPI.UINT32_T])  # 4 bytes: (5, 6) as one
        assert len(parses) == before + 2 and pair[:2].view("u2").tolist() == [5, 6, 5, 6]
        wide = numpy.array([1, 2], dtype="i4")
        comm.Neighbor_allgather([wide, 2, MPI.INT32_T], [pair, 2, MPI.INT32_T])
        assert len(parses) == before + 3 and pair.tolist() == [1, 2, 1, 2]
        twice = MPI.INT32_T.Create_contiguous(1).Commit()
        try:
            for _ in range(2):
                comm.Neighbor_allgather([send, 1, twice], [pair, 1, twice])
            assert len(parses) == before + 4 and pair.tolist()[:2] == [7, 7]
        finally:
            twice.Free()
    finally:
        graph.Free()


def test_typecode_strings_and_range_displacements_are_parsed_once(monkeypatch):
    """mpi4py takes a typecode string for a datatype and any sequence (a ``range``) for counts or
    displacements. Both are immutable and read the same every time, yet a spec that held one had
    no call signature and was parsed on every call; now once, and another code or range is parsed
    (and checked) again."""
    import sparsecoll
    import sparsecoll.runtime.communicator as runtime_module
    parses = []

    def counted(parser):  # each parse of a call reads two arguments: two counts
        return lambda *args, **kwargs: parses.append(1) or parser(*args, **kwargs)
    monkeypatch.setattr(runtime_module, "PARSERS", {name: (counted(send), per_edge, counted(recv))
                                                    for name, (send, per_edge, recv) in runtime_module.PARSERS.items()})
    graph = MPI.COMM_SELF.Create_dist_graph_adjacent([0, 0], [0, 0])
    try:
        comm = sparsecoll.wrap(graph, "direct")
        send, out = numpy.array([7, 8], dtype="i4"), numpy.full(6, -1, dtype="i4")
        for _ in range(3):
            comm.Neighbor_allgather([send, 2, "i"], [out, 2, "i"])
        assert len(parses) == 2 and out.tolist() == [7, 8, 7, 8, -1, -1]
        out[:] = -1
        for _ in range(3):
            comm.Neighbor_allgatherv([send, 2, "i"], [out, ([2, 2], range(0, 6, 3)), "i"])
        assert len(parses) == 4 and out.tolist() == [7, 8, -1, 7, 8, -1]
        out[:] = -1
        comm.Neighbor_allgatherv([send, 2, "i"], [out, ([2, 2], range(4, -1, -4)), "i"])
        assert len(parses) == 6 and out.tolist() == [7, 8, -1, -1, 7, 8]
        with pytest.raises(ValueError, match="recvbuf"):  # the same spec, out of bounds: checked anew
            comm.Neighbor_allgatherv([send, 2, "i"], [out, ([2, 2], range(0, 10, 5)), "i"])
        out16 = out.view("i2")
        comm.Neighbor_allgather([send.view("i2"), 4, "h"], [out16, 4, "h"])  # another code: parsed
        assert len(parses) == 10 and out.tolist() == [7, 8, 7, 8, 7, 8]
    finally:
        graph.Free()


def test_import_does_not_check_a_placement_override():
    """``SPARSECOLL_PLACEMENT`` is checked against a communicator when one is wrapped, not at import
    (it once raised there: a default plan was made for a 1-rank communicator)."""
    import os
    import subprocess
    import sys
    env = {**os.environ, "SPARSECOLL_PLACEMENT": "2x1"}
    done = subprocess.run([sys.executable, "-c", "import sparsecoll"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("algorithm", ["direct", "auto"])
def test_plan_stats_names_a_bad_form_or_block_size(algorithm):
    """plan_stats checks its keyword arguments (auto read an unknown form as an index error;
    direct ignored both)."""
    import sparsecoll
    graph = MPI.COMM_SELF.Create_dist_graph_adjacent([0], [0])
    try:
        profile = {"profile": sparsecoll.model.profile.BUILTIN} if algorithm == "auto" else {}
        comm = sparsecoll.wrap(graph, algorithm, **profile)
        comm.Neighbor_allgather(numpy.zeros(1, dtype="i4"), numpy.zeros(1, dtype="i4"))
        assert comm.plan_stats("allgather", form="persistent", block_bytes=0)["family"] == "allgather"
        with pytest.raises(ValueError, match="form: expected one of"):
            comm.plan_stats("allgather", form="persistant")
        with pytest.raises(ValueError, match="block_bytes: expected a non-negative integer"):
            comm.plan_stats("allgather", block_bytes=-1)
        with pytest.raises(TypeError, match="block_bytes"):
            comm.plan_stats("allgather", block_bytes="8")
    finally:
        graph.Free()


def test_the_wrapper_classes_keep_every_mpi4py_name_they_redefine_of_the_same_kind():
    """``wrap(comm)`` must be a one-line switch: a name sparsecoll's communicator classes define
    that mpi4py's class also has is the same kind of thing (a method for a method). The wrappers'
    ``topology`` was sparsecoll's Topology where mpi4py's is the topology type (``MPI.CART``...),
    so code branching on it took another branch silently."""
    import inspect

    import sparsecoll.comm as wrappers
    classes = {cls for cls in vars(wrappers).values()
               if inspect.isclass(cls) and issubclass(cls, MPI.Comm) and cls.__module__.startswith("sparsecoll.")}
    assert len(classes) >= 5  # Cartcomm, Graphcomm, Distgraphcomm, Intracomm, cart_neighborhood_create's
    for cls in classes:
        library = next(base for base in cls.__mro__ if base.__module__.startswith("mpi4py"))
        for base in cls.__mro__:
            if not base.__module__.startswith("sparsecoll."):
                continue
            for name, ours in vars(base).items():
                if name.startswith("__") or not hasattr(library, name):
                    continue
                theirs = inspect.getattr_static(library, name)
                assert callable(ours) and callable(theirs), (cls.__name__, name)


def test_wrap_checks_its_topology_argument_before_the_handle_keeps_it():
    """``wrap(comm, topology=5)`` raised AttributeError ('int' object has no attribute 'indegree')
    from inside the handle's runtime, which kept the bad topology: every later wrap of that
    communicator raised the same. Now a TypeError (or a ValueError for another rank's Topology)
    names the argument, and the handle wraps as before."""
    import sparsecoll
    graph = MPI.COMM_SELF.Create_dist_graph_adjacent([0], [0])
    try:
        with pytest.raises(TypeError, match="topology"):
            sparsecoll.wrap(graph, "direct", topology=5)
        other = graph_topology(1, 2, [0], [0])
        with pytest.raises(ValueError, match="topology: is rank 1 of 2"):
            sparsecoll.wrap(graph, "direct", topology=other)
        comm = sparsecoll.wrap(graph, "direct")
        send, recv = numpy.arange(2, dtype="i4"), numpy.empty(2, dtype="i4")
        comm.Neighbor_alltoall(send, recv)
        assert recv.tolist() == send.tolist()
    finally:
        graph.Free()
