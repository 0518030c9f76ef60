"""mpi4py semantics beyond the conformance matrix: wrapper identity, buffer-spec
forms, MPI.BOTTOM, __cuda_array_interface__, pickle-based methods, isolation of
library traffic, overlapping nonblocking calls, Free, plan_stats and bad input.

Runs on every rank (launched by ``tests/test_mpi.py``).
"""

from __future__ import annotations

import contextlib

import numpy
import pytest
from mpi4py import MPI

import sparsecoll
from sparsecoll.hierarchy.handles import hierarchies

from . import cases

WORLD = MPI.COMM_WORLD


@pytest.fixture
def ring():
    """A periodic 1-D Cartesian communicator (2 neighbors per rank)."""
    comm = WORLD.Create_cart([WORLD.Get_size()], periods=[True])
    yield comm
    comm.Free()


@pytest.fixture
def open_line():
    """A non-periodic 1-D Cartesian communicator (PROC_NULL at the ends)."""
    comm = WORLD.Create_cart([WORLD.Get_size()], periods=[False])
    yield comm
    comm.Free()


def test_wrap_keeps_the_mpi4py_class_and_handle(ring):
    graph = WORLD.Create_dist_graph_adjacent([WORLD.Get_rank()], [WORLD.Get_rank()])
    mpi1 = WORLD.Create_graph(list(range(1, WORLD.Get_size() + 1)), list(range(WORLD.Get_size())))
    for raw, cls in ((ring, MPI.Cartcomm), (graph, MPI.Distgraphcomm), (mpi1, MPI.Graphcomm)):
        wrapped = sparsecoll.wrap(raw, "direct")
        assert isinstance(wrapped, cls) and sparsecoll.is_wrapped(wrapped)
        assert wrapped == raw  # same handle
        assert wrapped.Get_topology() == raw.Get_topology()
    assert sparsecoll.wrap(ring).Get_topo() == ring.Get_topo()
    graph.Free()
    mpi1.Free()


def test_rewrap_shares_state_and_switches_algorithm(ring):
    direct = sparsecoll.wrap(ring, "direct")
    native = sparsecoll.wrap(direct, "native")
    again = sparsecoll.wrap(ring, "auto")
    assert native == direct and native.algorithm == "native" and direct.algorithm == "direct"
    assert native.runtime is direct.runtime is again.runtime
    with pytest.raises(RuntimeError, match="Neighbor_alltoall"):
        again.plan_stats("alltoall")  # auto decides at the first call
    indegree, outdegree = again.neighborhood.indegree, again.neighborhood.outdegree
    again.Neighbor_alltoall(numpy.zeros(outdegree), numpy.zeros(indegree))
    stats = again.plan_stats("alltoall")
    assert stats["algorithm"] in stats["auto"]["predicted_seconds"]
    assert WORLD.allgather(stats["algorithm"]) == [stats["algorithm"]] * WORLD.Get_size()


def test_algorithm_listing():
    listing = sparsecoll.algorithms()
    assert {"native", "direct", "auto"} <= set(listing)
    assert all(isinstance(text, str) and text for text in listing.values())


def test_plan_stats_counts_the_direct_pattern(open_line):
    wrapped = sparsecoll.wrap(open_line, "direct")
    size, rank = WORLD.Get_size(), WORLD.Get_rank()
    real = sum(1 for r in (rank - 1, rank + 1) if 0 <= r < size)
    for family in ("allgather", "alltoall"):
        stats = wrapped.plan_stats(family)
        assert stats["algorithm"] == "direct" and stats["family"] == family
        assert stats["steps"] == (1 if real else 0)
        assert stats["sends"] == stats["recvs"] == stats["send_items"] == stats["recv_items"] == real
    with pytest.raises(ValueError, match="collective"):
        wrapped.plan_stats("reduce")


def _both(raw, method, sendspec_of, recvspec_of, nrecv, dtype="i4"):
    """Run ``method`` with native and direct on fresh buffers; return both receive arrays."""
    results = []
    for name in ("native", "direct"):
        comm = sparsecoll.wrap(raw, name)
        recv = numpy.full(nrecv, -1, dtype=dtype)
        getattr(comm, method)(sendspec_of(), recvspec_of(recv))
        results.append(recv)
    return results


def test_simple_buffer_forms(ring):
    rank = WORLD.Get_rank()
    send = numpy.arange(6, dtype="i4") + 100 * rank
    forms = {
        "buf": lambda b: b,
        "(buf, dtype)": lambda b: (b, MPI.INT32_T),
        "[buf, typecode]": lambda b: [b, "i"],
        "(buf, count)": lambda b: (b, 3),
        "[buf, count, dtype]": lambda b: [b, 3, MPI.INT32_T],
        "[buf, (count, displ), dtype]": lambda b: [b, (3, 0), MPI.INT32_T],
        "[buf, [count, displ]]": lambda b: [b, [3, 0]],
        "[buf, count, displ, dtype]": lambda b: [b, 3, 0, MPI.INT32_T],
    }
    for name, form in forms.items():
        native, direct = _both(ring, "Neighbor_alltoall", lambda form=form: form(send), form, 6)
        assert native.tobytes() == direct.tobytes(), name
        assert (native != -1).all(), name
    # a send block taken at a displacement, allgather style
    native, direct = _both(ring, "Neighbor_allgather", lambda: [send, (2, 4), MPI.INT32_T],
                           lambda r: [r, 2, MPI.INT32_T], 4)
    assert native.tobytes() == direct.tobytes()


def test_vector_and_w_buffer_forms(ring):
    # the block sent towards -1 arrives in the receiver's +1 block (MPI-4.1 §8.6), so
    # send counts [2, 3] meet receive counts [3, 2]
    rank = WORLD.Get_rank()
    send = numpy.arange(8, dtype="i4") + 100 * rank
    vector_forms = {
        "(buf, counts)": (lambda: (send, [2, 3]), lambda r: (r, [3, 2])),
        "(buf, (counts, displs), dtype)": (lambda: (send, ([2, 3], [0, 4]), MPI.INT32_T),
                                           lambda r: (r, ([3, 2], [5, 0]), MPI.INT32_T)),
        "[buf, counts, displs, typecode]": (lambda: [send, [2, 3], [0, 4], "i"], lambda r: [r, [3, 2], [5, 0], "i"]),
        "scalar count and stride": (lambda: [send, 2, 4, MPI.INT32_T], lambda r: [r, 2, 3, MPI.INT32_T]),
        "buf only": (lambda: send, lambda r: r),
    }
    for name, (sendspec, recvspec) in vector_forms.items():
        native, direct = _both(ring, "Neighbor_alltoallv", sendspec, recvspec, 8)
        assert native.tobytes() == direct.tobytes(), name
    first = MPI.Datatype.Create_struct([1], [0], [MPI.INT32_T]).Commit()
    second = MPI.Datatype.Create_struct([1], [4], [MPI.INT32_T]).Commit()
    w_forms = {
        "(buf, (counts, displs), types)": (lambda: (send, ([2, 3], [0, 16]), [MPI.INT32_T] * 2),
                                           lambda r: (r, ([3, 2], [20, 0]), [MPI.INT32_T] * 2)),
        "[buf, counts, displs, types]": (lambda: [send, [2, 3], [0, 16], [MPI.INT32_T, MPI.INT32_T]],
                                         lambda r: [r, [3, 2], [20, 0], [MPI.INT32_T, MPI.INT32_T]]),
        "(buf, types)": (lambda: (send, [first, second]), lambda r: (r, [first, second])),
    }
    for name, (sendspec, recvspec) in w_forms.items():
        native, direct = _both(ring, "Neighbor_alltoallw", sendspec, recvspec, 8)
        assert native.tobytes() == direct.tobytes(), name
    first.Free()
    second.Free()


@pytest.mark.timeout(60)  # without the fix: from about the 36th call on, blocks at an earlier call's displacements
@pytest.mark.parametrize("form", ["blocking", "nonblocking", "persistent"])
def test_displacements_in_a_numpy_object_array_set_anew_between_calls(ring, form):
    """mpi4py reads counts and displacements from any sequence of integers, a numpy object
    array too. One such array set to new values before each call holds new int objects, often
    at the addresses of the ones just freed: the parse cache signed the array by its bytes (the
    pointers), so a call whose values differed from an earlier one's reused that call's parse
    (the same arrays in every call, as a loop passes them)."""
    rank = WORLD.Get_rank()
    comm = sparsecoll.wrap(ring, "direct")
    send = numpy.arange(4000, dtype="i4") + 10000 * rank
    recv, expected = numpy.empty(4000, "i4"), numpy.empty(4000, "i4")
    send_displs, recv_displs = numpy.array([0, 0], dtype=object), numpy.array([0, 0], dtype=object)
    for call in range(60):
        send_displs[:] = recv_displs[:] = None  # the last call's ints freed: new ones may take their memory
        send_displs[:] = [1000 + 7 * call, 1003 + 7 * call]
        recv_displs[:] = [1005 + 7 * call, 1000 + 7 * call]
        send_spec, recv_spec = [send, ([1, 1], send_displs), MPI.INT], [recv, ([1, 1], recv_displs), MPI.INT]
        recv[:] = expected[:] = -1
        cases.run_call(comm, "alltoallv", form, send_spec, recv_spec)
        ring.Neighbor_alltoallv(send_spec, [expected, ([1, 1], recv_displs), MPI.INT])
        assert recv.tobytes() == expected.tobytes(), (call, numpy.nonzero(recv != -1)[0].tolist(),
                                                      numpy.nonzero(expected != -1)[0].tolist())


class _Index:
    """An object with ``__index__`` (mpi4py reads counts and displacements through it)."""

    def __init__(self, value: int):
        self.value = value

    def __index__(self) -> int:
        return self.value


def test_counts_and_displacements_are_read_through_index_as_mpi4py_reads_them(ring):
    """mpi4py reads a count or displacement through ``__index__``: bools (``(mask).tolist()``),
    0-d integer arrays and any object with ``__index__`` are taken. sparsecoll raised TypeError
    ("count must be an integer, got True") where the library's call ran."""
    rank = WORLD.Get_rank()
    send = numpy.arange(8, dtype="i4") + 100 * rank
    index, zero_d = _Index, numpy.array
    forms = {
        "bool counts": ("Neighbor_alltoallv", lambda: [send, ([True, True], [0, 2]), MPI.INT32_T],
                        lambda r: [r, ([True, True], [5, False]), MPI.INT32_T]),
        "bool scalar count and stride": ("Neighbor_alltoallv", lambda: [send, True, 2, MPI.INT32_T],
                                         lambda r: [r, True, 3, MPI.INT32_T]),
        "__index__ counts and displacements": (
            "Neighbor_alltoallv", lambda: [send, [index(2), index(3)], [index(0), index(4)], MPI.INT32_T],
            lambda r: [r, [index(3), index(2)], [index(5), index(0)], MPI.INT32_T]),
        "0-d array count and stride": ("Neighbor_alltoallv", lambda: [send, zero_d(2), zero_d(4), MPI.INT32_T],
                                       lambda r: [r, zero_d(2), zero_d(3), MPI.INT32_T]),
        "bool regular count": ("Neighbor_alltoall", lambda: [send, True, MPI.INT32_T],
                               lambda r: [r, True, MPI.INT32_T]),
        "0-d array regular count": ("Neighbor_allgather", lambda: [send, zero_d(3), MPI.INT32_T],
                                    lambda r: [r, zero_d(3), MPI.INT32_T]),
        "w: bools and __index__": (
            "Neighbor_alltoallw", lambda: [send, [True, index(2)], [zero_d(0), index(16)], [MPI.INT32_T] * 2],
            lambda r: [r, [index(2), True], [False, 20], [MPI.INT32_T] * 2]),
    }
    for name, (method, sendspec, recvspec) in forms.items():
        for _ in range(2):  # the second call through the parse cache
            native, direct = _both(ring, method, sendspec, recvspec, 8)
            assert native.tobytes() == direct.tobytes(), name
            assert (native != -1).any(), name
    direct = sparsecoll.wrap(ring, "direct")
    with pytest.raises(TypeError, match="sendbuf: count must be an integer"):  # as mpi4py: a numpy bool is none
        direct.Neighbor_alltoall([send, numpy.True_, MPI.INT32_T], [send.copy(), 1, MPI.INT32_T])


def test_bottom_with_absolute_addresses(ring):
    rank = WORLD.Get_rank()
    send = numpy.arange(4, dtype="i4") + 100 * rank
    base = MPI.Get_address(send)
    results = []
    for name in ("native", "direct"):
        recv = numpy.full(4, -1, dtype="i4")
        raddr = MPI.Get_address(recv)
        comm = sparsecoll.wrap(ring, name)
        comm.Neighbor_alltoallw([MPI.BOTTOM, [2, 2], [base, base + 8], [MPI.INT32_T] * 2],
                                [MPI.BOTTOM, [2, 2], [raddr + 8, raddr], [MPI.INT32_T] * 2])
        results.append(recv)
    assert results[0].tobytes() == results[1].tobytes() and (results[0] != -1).all()


class HostCAI:
    """A host array exposed only through __cuda_array_interface__."""

    def __init__(self, array):
        self.array = array

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.array.shape, "typestr": self.array.dtype.str, "version": 3,
                "data": (self.array.ctypes.data, False), "strides": None}


def test_cuda_array_interface_buffers(ring):
    rank = WORLD.Get_rank()
    send = numpy.arange(2, dtype="f8") + rank
    recv = numpy.full(2, -1.0)
    sparsecoll.wrap(ring, "direct").Neighbor_alltoall(HostCAI(send), HostCAI(recv))
    expected = numpy.full(2, -1.0)
    ring.Neighbor_alltoall(send, expected)
    assert recv.tobytes() == expected.tobytes()


def test_pickle_methods_match_mpi4py(open_line):
    rank = WORLD.Get_rank()
    wrapped = sparsecoll.wrap(open_line, "direct")
    objects = [{"from": rank, "dir": d} for d in ("down", "up")]
    assert wrapped.neighbor_allgather(("rank", rank)) == open_line.neighbor_allgather(("rank", rank))
    assert wrapped.neighbor_alltoall(objects) == open_line.neighbor_alltoall(objects)
    with pytest.raises(ValueError, match="sendobj"):
        wrapped.neighbor_alltoall([1, 2, 3])


def test_library_traffic_never_meets_user_traffic(ring):
    """A user receive for ANY_SOURCE/ANY_TAG posted first must not get library messages."""
    rank, size = WORLD.Get_rank(), WORLD.Get_size()
    wrapped = sparsecoll.wrap(ring, "direct")
    box = numpy.full(1, -1, dtype="i8")
    pending = ring.Irecv(box, MPI.ANY_SOURCE, MPI.ANY_TAG)
    send = numpy.arange(2, dtype="i8") + 10 * rank
    recv = numpy.zeros(2, dtype="i8")
    for _ in range(3):
        wrapped.Neighbor_alltoall(send, recv)
        wrapped.Ineighbor_allgather(send[:1], recv).Wait()
    WORLD.Barrier()
    status = MPI.Status()
    assert not pending.Test(status), (status.Get_source(), status.Get_tag(), box)
    WORLD.Barrier()  # nobody sends the user message before everyone has tested
    ring.Send(numpy.array([4242 + rank], dtype="i8"), (rank + 1) % size, tag=7)
    status = MPI.Status()
    pending.Wait(status)
    assert box[0] == 4242 + (rank - 1) % size and status.Get_tag() == 7


def test_overlapping_nonblocking_calls(ring):
    """Several outstanding calls on one communicator, completed in reverse order."""
    rank = WORLD.Get_rank()
    wrapped = sparsecoll.wrap(ring, "test_relay" if "test_relay" in sparsecoll.algorithms() else "direct")
    sends = [numpy.arange(2, dtype="i4") + 100 * rank + 10 * k for k in range(4)]
    recvs = [numpy.full(2, -1, dtype="i4") for _ in range(4)]
    requests = [wrapped.Ineighbor_alltoall(s, r) for s, r in zip(sends, recvs)]
    for request in reversed(requests):
        request.Wait()
    for s, r in zip(sends, recvs):
        expected = numpy.full(2, -1, dtype="i4")
        ring.Neighbor_alltoall(s, expected)
        assert r.tobytes() == expected.tobytes()


@pytest.mark.parametrize("algorithm", ["direct", "cartesian_trivial"])  # one stage, several
def test_requests_answer_as_mpi4py_requests(ring, algorithm):
    """A completed nonblocking request and a freed persistent one equal ``MPI.REQUEST_NULL`` (a
    ``while request != MPI.REQUEST_NULL`` loop never ended); ``Get_status`` leaves the request
    active; ``Cancel`` is refused (MPI makes cancelling a collective erroneous); a bad status or
    info is a TypeError naming it (both were ignored)."""
    rank = WORLD.Get_rank()
    wrapped = sparsecoll.cart_neighborhood_create(WORLD, [WORLD.Get_size()], [True], [(1,), (-1,)],
                                                  algorithm=algorithm) if algorithm != "direct" else \
        sparsecoll.wrap(ring, algorithm)
    send, recv = numpy.array([rank], "i4"), numpy.full(2, -1, "i4")
    expected = numpy.full(2, -1, "i4")
    ring.Neighbor_allgather(send, expected)
    request = wrapped.Ineighbor_allgather(send, recv)
    assert request != MPI.REQUEST_NULL
    with pytest.raises(TypeError, match="status"):
        request.Wait(5)
    with pytest.raises(RuntimeError, match="cannot be cancelled"):
        request.Cancel()
    while not request.Get_status(MPI.Status()):
        pass
    assert request != MPI.REQUEST_NULL and request.active  # complete, not yet completed by its owner
    assert request.wait() is None
    assert request == MPI.REQUEST_NULL and not request and recv.tolist() == expected.tolist()
    with pytest.raises(TypeError, match="info"):
        wrapped.Neighbor_allgather_init(send, recv, 5)
    with pytest.raises(TypeError, match="info"):  # as mpi4py's (the library's call under native or auto)
        wrapped.Neighbor_allgather_init(send, recv, None)
    persistent = wrapped.Neighbor_allgather_init(send, recv, MPI.INFO_NULL)
    recv[:] = -1
    persistent.Start()
    while not persistent.test()[0]:
        pass
    assert persistent != MPI.REQUEST_NULL and recv.tolist() == expected.tolist()  # inactive, not null
    persistent.Free()
    assert persistent == MPI.REQUEST_NULL
    if algorithm != "direct":
        wrapped.Free()


def _cheap_sparsecoll():
    """A profile under which sparsecoll's schedules win (auto then runs one, not the library)."""
    from sparsecoll.model.profile import BUILTIN, Load, Profile
    base = BUILTIN.loads[0]
    return Profile((Load(1.0, base.levels, dict.fromkeys(base.sparsecoll_per_call, 0.0), 0.0,
                         {form: 50 * seconds for form, seconds in base.native_per_call.items()}),))


@pytest.mark.timeout(60)  # without the fix the ranks that kept their buffers raised, the others waited
@pytest.mark.parametrize("algorithm", ["direct", "common_neighbor", "auto"])
def test_a_datatype_made_and_freed_around_each_call(ring, algorithm):
    """MPI-4.1 5.1.10: a datatype may be freed once the calls using it completed, and the next
    type made may get its handle. A schedule cached for the freed type served the new one (same
    handle, size and extents) and its executor read the freed type's size: 'Invalid datatype'
    at the second nonblocking call. Ranks differ: odd ranks keep their buffers, even ones
    make new ones each call; a persistent request outlives its type."""
    rank, size = WORLD.Get_rank(), WORLD.Get_size()
    comm = sparsecoll.wrap(ring, algorithm, **({"profile": _cheap_sparsecoll()} if algorithm == "auto" else {}))
    left, right = (rank - 1) % size, (rank + 1) % size
    expected = [10 * left + 2, 10 * left + 3, 10 * right, 10 * right + 1]  # block k of neighbor k's
    kept = (numpy.arange(4.0) + 10 * rank, numpy.zeros(4))
    forms = ("nonblocking",) * 10 + ("blocking",) * 4 + ("persistent",) * 2 + ("nonblocking", "blocking")
    for call, form in enumerate(forms):
        send, recv = kept if rank % 2 else (numpy.arange(4.0) + 10 * rank, numpy.zeros(4))
        pair = MPI.DOUBLE.Create_contiguous(2).Commit()
        if form == "blocking":
            comm.Neighbor_alltoall([send, 1, pair], [recv, 1, pair])
        elif form == "nonblocking":
            comm.Ineighbor_alltoall([send, 1, pair], [recv, 1, pair]).Wait()
        else:
            request = comm.Neighbor_alltoall_init([send, 1, pair], [recv, 1, pair])
            pair.Free()
            request.Start()
            request.Wait()
            request.Free()
        if not pair.is_predefined and pair != MPI.DATATYPE_NULL:
            pair.Free()
        assert recv.tolist() == expected, (call, recv.tolist())
        recv[:] = 0
    if algorithm == "auto":
        assert comm.plan_stats("alltoall", form="nonblocking", block_bytes=16)["algorithm"] != "native"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("algorithm", ["direct", "auto"])
def test_a_datatype_of_another_layout_made_where_a_freed_one_was(ring, algorithm):
    """The parse of a call is kept by its derived datatypes' objects and handles: a send type
    made and freed around each call, alternately two contiguous doubles and two doubles two
    apart (the next type made may get the freed one's handle), is read anew each time. Ranks
    differ: odd ranks keep their buffers, even ones make new ones each call."""
    rank, size = WORLD.Get_rank(), WORLD.Get_size()
    comm = sparsecoll.wrap(ring, algorithm, **({"profile": _cheap_sparsecoll()} if algorithm == "auto" else {}))
    left, right = (rank - 1) % size, (rank + 1) % size
    kept = (numpy.arange(6.0) + 10 * rank, numpy.zeros(4))
    for call in range(12):
        send, recv = kept if rank % 2 else (numpy.arange(6.0) + 10 * rank, numpy.zeros(4))
        spread = call % 2 == 1
        pair = (MPI.DOUBLE.Create_vector(2, 1, 2) if spread else MPI.DOUBLE.Create_contiguous(2)).Commit()
        # block k of a neighbor's: elements 2k, 2k+1 (contiguous) or 3k, 3k+2 (two apart, extent 3)
        expected = ([10 * left + 3, 10 * left + 5, 10 * right, 10 * right + 2] if spread
                    else [10 * left + 2, 10 * left + 3, 10 * right, 10 * right + 1])
        if call % 4 < 2:
            comm.Neighbor_alltoall([send, 1, pair], [recv, 2, MPI.DOUBLE])
        else:
            comm.Ineighbor_alltoall([send, 1, pair], [recv, 2, MPI.DOUBLE]).Wait()
        pair.Free()
        assert recv.tolist() == expected, (call, recv.tolist())
        recv[:] = 0


@pytest.mark.parametrize("algorithm", ["direct", "common_neighbor", "auto"])
def test_a_w_form_takes_a_list_of_datatype_objects_as_mpi4py_does(ring, algorithm):
    """mpi4py's ``Neighbor_alltoallw`` takes the datatypes as a sequence of ``MPI.Datatype``
    objects: one datatype for every block, or typecode strings, it refuses. sparsecoll's parse
    took both, so a program ran under ``direct`` and raised where ``auto`` ran the library's call
    (or at another size). Each raises a TypeError naming the argument, as the library's call
    does, on every rank before any message; a good call then runs."""
    comm = sparsecoll.wrap(ring, algorithm)
    rank, size = WORLD.Get_rank(), WORLD.Get_size()
    send, recv = numpy.arange(2.0) + 10 * rank, numpy.zeros(2)
    layout = [[1, 1], [0, 8]]
    for datatypes, match in ((MPI.DOUBLE, "one Datatype"), ("d", "one str"), (["d", "d"], "no typecode strings")):
        with pytest.raises((TypeError, ValueError)):  # the library's call refuses them too
            ring.Neighbor_alltoallw([send, *layout, datatypes], [recv, *layout, [MPI.DOUBLE] * 2])
        with pytest.raises(TypeError, match=f"sendbuf: .*{match}"):
            comm.Neighbor_alltoallw([send, *layout, datatypes], [recv, *layout, [MPI.DOUBLE] * 2])
    comm.Neighbor_alltoallw([send, *layout, [MPI.DOUBLE] * 2], [recv, *layout, [MPI.DOUBLE] * 2])
    assert recv.tolist() == [10 * ((rank - 1) % size) + 1, 10 * ((rank + 1) % size)]


@pytest.mark.parametrize("executor", ["steps", "rma", "rma_canary"])
def test_persistent_restarts_pick_up_new_contents(ring, executor):
    rank = WORLD.Get_rank()
    wrapped = sparsecoll.wrap(ring, "direct", executor=executor)
    send = numpy.zeros(2, dtype="i4")
    recv = numpy.full(2, -1, dtype="i4")
    request = wrapped.Neighbor_alltoall_init(send, recv)
    expected = numpy.empty(2, dtype="i4")
    for round_ in range(5):
        send[:] = [1000 * round_ + 10 * rank, 1000 * round_ + 10 * rank + 1]
        request.Start()
        assert request.Wait()
        ring.Neighbor_alltoall(send, expected)
        assert recv.tobytes() == expected.tobytes()
    with pytest.raises(RuntimeError):
        request.Start()
        request.Start()
    request.Wait()
    request.Free()
    with pytest.raises(RuntimeError):
        request.Start()


def test_free_releases_library_state():
    comm = WORLD.Create_cart([WORLD.Get_size()], periods=[True])
    wrapped = sparsecoll.wrap(comm, "direct")
    wrapped.Neighbor_allgather(numpy.zeros(1, "i4"), numpy.zeros(2, "i4"))
    runtime = wrapped.runtime
    assert runtime.private != MPI.COMM_NULL and runtime.cache_sizes()["blocking_executors"]
    wrapped.Free()
    assert wrapped == MPI.COMM_NULL
    assert runtime.private == MPI.COMM_NULL and not any(runtime.cache_sizes().values())


FREE_IN_FLIGHT = {  # algorithm, executor, collective, the request when Free comes
    "a nonblocking v call's size pass": ("common_neighbor", "steps", "alltoallv", "nonblocking"),
    "a nonblocking call on the RMA executor": ("direct", "rma", "allgather", "nonblocking"),
    "a persistent request on the RMA executor, started": ("direct", "rma", "allgather", "started"),
    "a persistent request on the RMA executor, started after": ("direct", "rma", "alltoallv", "inactive"),
    "a nonblocking call on the canary executor": ("direct", "rma_canary", "alltoall", "nonblocking"),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", sorted(FREE_IN_FLIGHT))
def test_requests_complete_normally_after_free(case):
    """MPI-4.1 section 7.4.3 (MPI_COMM_FREE): "Any pending operations that use this communicator
    will complete normally". A v call's size pass built its data executor on the freed private
    communicator ("Invalid communicator"), the RMA executors' windows were freed under their runs
    (MPICH: "Wrong synchronization of RMA calls", an assertion with the canary; Open MPI: invalid
    window, segfaults); now the release waits for the last request."""
    algorithm, executor, collective, when = FREE_IN_FLIGHT[case]
    size, rank = WORLD.Get_size(), WORLD.Get_rank()
    others = [peer for peer in range(size) if peer != rank]
    graph = WORLD.Create_dist_graph_adjacent(others, others)
    options = {"theta": 1} if algorithm == "common_neighbor" else {}  # combining: items in transit
    wrapped = sparsecoll.wrap(graph.Dup(), algorithm, executor=executor, **options)
    counts = [1 + (rank + peer) % 3 for peer in others]  # v: what rank sends peer, as peer receives it
    if collective == "alltoallv":
        send = numpy.array([100 * rank + peer for c, peer in zip(counts, others) for _ in range(c)], "i4")
        args = lambda out: ([send, counts], [out, counts])  # noqa: E731
        expected = numpy.full(sum(counts), -1, "i4")
    else:
        blocks = len(others) if collective == "alltoall" else 1
        send = numpy.arange(2 * blocks, dtype="i4") + 10 * rank
        args = lambda out: (send, out)  # noqa: E731
        expected = numpy.full(2 * len(others), -1, "i4")
    name = "Neighbor_" + collective
    getattr(graph, name)(*args(expected))
    received = numpy.full_like(expected, -1)
    if when == "nonblocking":
        request = getattr(wrapped, "Ineighbor_" + collective)(*args(received))
    else:
        request = getattr(wrapped, name + "_init")(*args(received))
        if when == "started":
            request.Start()
    runtime = wrapped.runtime
    if rank % 2 and when != "inactive":  # ranks differ: odd ones complete their request before Free
        request.Wait()
    wrapped.Free()
    if when == "inactive":
        request.Start()
    request.Wait()
    request.free()  # a completed nonblocking request is freed already (``Free`` would raise ERR_REQUEST)
    assert received.tolist() == expected.tolist()
    assert runtime.private == MPI.COMM_NULL  # released once the request was done
    graph.Free()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("pending", ["the program's Irecv and Isend", "auto's call given to the library"])
def test_the_librarys_requests_on_the_handle_complete_after_free(pending, monkeypatch):
    """MPI-4.1 section 7.4.3 for requests that are the MPI library's own on the wrapper's handle: the
    program's point-to-point calls on it, or a nonblocking call ``auto`` gives the library (here
    where its blocking calls run ``direct``). MPICH 5.0.2 runs a handle's attribute delete callbacks
    only once its last pending operation completes, inside that operation's ``MPI_Wait``, where
    sparsecoll's released the runtime (``MPI_Request_free`` of its executors' requests) and MPICH
    aborted ("pthread_mutex_lock: Resource deadlock avoided", mpir_request.h:569; Open MPI
    delivered). Ranks differ: odd ones complete their requests before ``Free``."""
    from sparsecoll.model import choice
    size, rank = WORLD.Get_size(), WORLD.Get_rank()
    others = [peer for peer in range(size) if peer != rank]
    graph = WORLD.Create_dist_graph_adjacent(others, others)
    if pending.startswith("auto"):  # blocking calls run direct, nonblocking ones the library
        monkeypatch.setattr(choice, "decide", lambda seconds, native_allowed=True:
                            [[name] * choice.CLASSES for name in ("direct", choice.NATIVE, choice.NATIVE)])
        wrapped = sparsecoll.wrap(graph.Dup(), verify_choice=False)
    else:
        wrapped = sparsecoll.wrap(graph.Dup(), "direct")
    send = numpy.arange(2, dtype="i4") + 10 * rank
    expected = numpy.full(2 * len(others), -1, "i4")
    graph.Neighbor_allgather(send, expected)
    wrapped.Neighbor_allgather(send, numpy.zeros_like(expected))  # sparsecoll's: its executor is kept
    runtime = wrapped.runtime
    assert runtime.cache_sizes()["blocking_executors"]
    received = numpy.full_like(expected, -1)
    if pending.startswith("auto"):
        requests = [wrapped.Ineighbor_allgather(send, received)]
        assert isinstance(requests[0], MPI.Request)  # the library's
    else:
        n = 1 << 18  # past the eager limits: the receive completes only in the Wait after Free
        received, out = numpy.full(n, -1, "i4"), numpy.full(n, rank, "i4")
        expected = numpy.full(n, (rank - 1) % size, "i4")
        requests = [wrapped.Irecv(received, (rank - 1) % size, 5), wrapped.Isend(out, (rank + 1) % size, 5)]
    if rank % 2:
        MPI.Request.Waitall(requests)
    wrapped.Free()
    MPI.Request.Waitall(requests)
    assert received.tolist() == expected.tolist()
    assert runtime.private == MPI.COMM_NULL
    graph.Free()


# -- bad input: every rank passes the same bad argument, so nobody waits -----------

BAD_CALLS = {
    "wrong number of blocks": ("Neighbor_alltoall", lambda n: (numpy.zeros(2 * n + 1, "i4"), numpy.zeros(2 * n, "i4")),
                               ValueError, "sendbuf"),
    "buffer too small": ("Neighbor_allgather", lambda n: (numpy.zeros(3, "i4"), [numpy.zeros(5, "i4"), 3, MPI.INT32_T]),
                         ValueError, "recvbuf"),
    "count list of the wrong length": ("Neighbor_alltoallv",
                                       lambda n: ([numpy.zeros(4, "i4"), [1, 1, 1]], [numpy.zeros(4, "i4"), [1, 1]]),
                                       ValueError, "sendbuf"),
    "negative count": ("Neighbor_allgatherv", lambda n: (numpy.zeros(1, "i4"), [numpy.zeros(4, "i4"), [1, -1]]),
                       ValueError, "recvbuf"),
    "uncommitted datatype": ("Neighbor_alltoall",
                             lambda n: ([numpy.zeros(8, "i4"), 1, MPI.INT32_T.Create_contiguous(2)],
                                        [numpy.zeros(8, "i4"), 1, MPI.INT32_T.Create_contiguous(2)]),
                             ValueError, "sendbuf"),
    "null datatype": ("Neighbor_allgather", lambda n: ([numpy.zeros(1, "i4"), 1, MPI.DATATYPE_NULL],
                                                       numpy.zeros(2, "i4")), ValueError, "sendbuf"),
    "read-only receive buffer": ("Neighbor_alltoall", lambda n: (numpy.zeros(2, "i4"), bytes(8)), TypeError,
                                 "recvbuf"),
    "not a buffer": ("Neighbor_allgather", lambda n: (object(), numpy.zeros(2, "i4")), TypeError, "sendbuf"),
    "in place": ("Neighbor_alltoall", lambda n: (MPI.IN_PLACE, numpy.zeros(2, "i4")), ValueError,
                 "sendbuf: MPI.IN_PLACE"),
    "non-native byte order": ("Neighbor_allgather", lambda n: (numpy.zeros(1, ">i4"), numpy.zeros(2, ">i4")),
                              ValueError, "sendbuf: buffer format '>i' has non-native byte order"),
    # legal for one edge, erroneous by the standard's rule for every pair of processes
    "allgather blocks unlike the receive blocks": ("Neighbor_allgather",
                                                   lambda n: (numpy.zeros(1, "i4"), numpy.zeros(4, "i4")),
                                                   ValueError, "recvbuf: blocks of 8 bytes where sendbuf's are 4"),
    "alltoall blocks unlike the receive blocks": ("Neighbor_alltoall",
                                                  lambda n: (numpy.zeros(4, "i4"), numpy.zeros(2, "i4")),
                                                  ValueError, "recvbuf: blocks of 4 bytes where sendbuf's are 8"),
}


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
@pytest.mark.parametrize("mode", ["blocking", "nonblocking", "persistent"])
def test_bad_input_raises_before_sending(ring, case, mode):
    method, args, error, argument = BAD_CALLS[case]
    wrapped = sparsecoll.wrap(ring, "direct")
    name = {"blocking": method, "nonblocking": "I" + method[0].lower() + method[1:],
            "persistent": method + "_init"}[mode]
    with pytest.raises(error, match=argument):
        getattr(wrapped, name)(*args(1))
    WORLD.Barrier()
    assert not wrapped.runtime.private.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG)


def test_an_algorithm_that_cannot_run_on_the_topology_is_refused_at_wrap(ring):
    for algorithm in ("cartesian", "cartesian_trivial"):  # an MPI Cartcomm matches its neighbors by position
        with pytest.raises(ValueError, match=f"algorithm: '{algorithm}' cannot run here: .*cart_neighborhood_create"):
            sparsecoll.wrap(ring, algorithm)
    sparsecoll.wrap(ring, "direct").Neighbor_alltoall(numpy.zeros(2, "i4"), numpy.zeros(2, "i4"))  # still usable


def test_bad_wrap_arguments(ring):
    with pytest.raises(TypeError, match="comm"):
        sparsecoll.wrap(MPI.Group())
    with pytest.raises(ValueError, match="algorithm"):
        sparsecoll.wrap(WORLD, "direct")  # an intracommunicator runs the hierarchical or the library's collectives
    with pytest.raises(TypeError, match="options"):
        sparsecoll.wrap(WORLD, no_such_option=1)
    with pytest.raises(ValueError, match="algorithm"):
        sparsecoll.wrap(ring, "no_such_algorithm")
    with pytest.raises(TypeError, match="option"):
        sparsecoll.wrap(ring, "direct", no_such_option=1)
    with pytest.raises(TypeError, match="algorithm"):
        sparsecoll.wrap(ring, 3)


def test_empty_and_zero_degree_graphs():
    rank, size = WORLD.Get_rank(), WORLD.Get_size()
    empty = WORLD.Create_dist_graph_adjacent([], [])
    # every other rank sends to rank 0, which sends nothing: zero out- or in-degree
    funnel = WORLD.Create_dist_graph_adjacent(list(range(1, size)) if rank == 0 else [],
                                              [0] if rank != 0 else [])
    expected = {id(empty): [], id(funnel): list(range(1, size)) if rank == 0 else []}
    for raw in (empty, funnel):
        wrapped = sparsecoll.wrap(raw, "direct")
        recv = numpy.full(raw.Get_dist_neighbors_count()[0], -1, "i4")
        wrapped.Neighbor_allgather(numpy.array([rank], "i4"), recv)
        assert recv.tolist() == expected[id(raw)]
        objects = wrapped.neighbor_alltoall([rank] * raw.Get_dist_neighbors_count()[1])
        assert objects == expected[id(raw)]
    empty.Free()
    funnel.Free()


@pytest.mark.timeout(60)  # without the fix: SIGFPE on every rank (mpi4py's Pack divides by the extent)
@pytest.mark.parametrize("algorithm", ["direct", "common_neighbor", "node_aware", "auto"])
def test_datatypes_of_extent_zero(algorithm):
    """Legal types of extent 0 in Neighbor_alltoallw: an empty block (``Create_contiguous(0)``)
    on one edge, and an int resized to extent 0 sent 3 times (the same int each time) on the
    other; every form gives what the library's call gives."""
    rank, size = WORLD.Get_rank(), WORLD.Get_size()
    left, right = (rank - 1) % size, (rank + 1) % size
    graph = WORLD.Create_dist_graph_adjacent([left, left], [right, right], reorder=False)
    empty = MPI.INT.Create_contiguous(0).Commit()
    same = MPI.INT.Create_resized(0, 0).Commit()
    send = numpy.arange(4, dtype="i4") + 100 * rank
    keywords = {"profile": _cheap_sparsecoll()} if algorithm == "auto" else {}
    comm = sparsecoll.wrap(graph, algorithm, **keywords)
    try:
        def arguments(recv):
            return ([send, ([3, 1], [4, 0]), [same, empty]], [recv, ([3, 1], [8, 0]), [MPI.INT, empty]])
        expected = numpy.full(6, -1, dtype="i4")
        graph.Neighbor_alltoallw(*arguments(expected))
        assert expected.tolist() == [-1, -1] + [100 * left + 1] * 3 + [-1]
        for form in ("blocking", "nonblocking", "persistent"):
            recv = numpy.full(6, -1, dtype="i4")
            if form == "blocking":
                comm.Neighbor_alltoallw(*arguments(recv))
            elif form == "nonblocking":
                comm.Ineighbor_alltoallw(*arguments(recv)).Wait()
            else:
                request = comm.Neighbor_alltoallw_init(*arguments(recv))
                request.Start()
                request.Wait()
                request.Free()
            assert recv.tolist() == expected.tolist(), form
    finally:
        comm.Free()  # the wrapper shares the graph's handle: this frees both
        empty.Free()
        same.Free()


@pytest.mark.timeout(60)  # without the fix: "Invalid datatype" from Wait on every rank
@pytest.mark.parametrize("collective", ["allgatherv", "alltoallv", "alltoallw"])
@pytest.mark.parametrize("executor", ["steps", "dag"])
def test_a_datatype_freed_while_its_nonblocking_call_runs(collective, executor):
    """MPI-4.1 5.1.10: freeing a datatype right after the nonblocking call that uses it started
    is legal ("any communication that is currently using this datatype will complete normally").
    A multi-step v/w call binds its data schedule only once its size pass arrived, after the
    program freed the type; odd ranks keep their arrays between calls, even ones make new ones."""
    rank, size = WORLD.Get_rank(), WORLD.Get_size()
    if size < 2:
        pytest.skip("node_aware's two sockets need two ranks")
    sources, destinations = [(rank - 1) % size, (rank - 2) % size], [(rank + 1) % size, (rank + 2) % size]
    graph = WORLD.Create_dist_graph_adjacent(sources, destinations, reorder=False)
    comm = sparsecoll.wrap(graph, "node_aware", executor=executor, ranks_per_socket=1, sockets_per_node=2)
    def start(comm, send, recv, pair):
        if collective == "alltoallv":
            return comm.Ineighbor_alltoallv([send, ([1, 1], [0, 2]), pair], [recv, ([1, 1], [2, 0]), pair])
        if collective == "alltoallw":
            return comm.Ineighbor_alltoallw([send, ([1, 1], [0, 16]), [pair, pair]],
                                            [recv, ([1, 1], [16, 0]), [pair, pair]])
        return comm.Ineighbor_allgatherv([send, 1, pair], [recv, ([1, 1], [2, 0]), pair])
    try:
        expected = numpy.full(8, -1, dtype="i4")
        pair = MPI.INT.Create_contiguous(2).Commit()
        start(graph, numpy.arange(8, dtype="i4") + 100 * rank, expected, pair).Wait()  # the library's
        pair.Free()
        kept = (numpy.arange(8, dtype="i4") + 100 * rank, numpy.full(8, -1, dtype="i4"))
        results = []
        for _ in range(3):
            send, recv = kept if rank % 2 else (numpy.arange(8, dtype="i4") + 100 * rank, numpy.full(8, -1, dtype="i4"))
            recv[:] = -1
            pair = MPI.INT.Create_contiguous(2).Commit()
            request = start(comm, send, recv, pair)
            pair.Free()
            request.Wait()
            results.append(recv.tolist())
        assert results == [expected.tolist()] * 3, results
        if size >= 4:  # distinct neighbors: the size pass and the bind come after the call returned
            assert WORLD.allreduce(comm.plan_stats(collective)["steps"], op=MPI.MAX) > 1
    finally:
        comm.Free()  # and the graph, whose handle the wrapper shares


@pytest.mark.timeout(60)  # without the fix: rank 0 waited in its call for rank 1's, which waited for rank 0
@pytest.mark.parametrize("algorithm", ["direct", "auto"])
@pytest.mark.parametrize("calls", [1, 70])
def test_nonblocking_calls_return_before_the_peers_start_theirs(algorithm, calls):
    """MPI's nonblocking calls are local. Rank 0 makes its first nonblocking calls (1, or more
    than the 64 channels of nonblocking calls) and only then sends rank 1 the message rank 1
    waits for before making its own; auto then decides at the first blocking call, and its
    later nonblocking calls run what it decided."""
    rank, size = WORLD.Get_rank(), WORLD.Get_size()
    if size < 2:
        pytest.skip("needs a second rank to wait for the first")
    left, right = (rank - 1) % size, (rank + 1) % size
    graph = WORLD.Create_dist_graph_adjacent([left, right], [left, right], reorder=False)
    keywords = {"profile": _cheap_sparsecoll()} if algorithm == "auto" else {}
    comm = sparsecoll.wrap(graph, algorithm, **keywords)
    try:
        sends = [numpy.array([1000 * rank + k, -1000 * rank - k], dtype="i4") for k in range(calls)]
        recvs = [numpy.full(2, -9, dtype="i4") for _ in range(calls)]
        requests = cases.started_after_rank_0(
            lambda: [comm.Ineighbor_alltoall(send, recv) for send, recv in zip(sends, recvs)])
        for request in reversed(requests) if rank % 2 else requests:
            request.Wait()
        library = MPI.Distgraphcomm.Neighbor_alltoall  # the library's own call on the handle
        expected = [numpy.full(2, -9, dtype="i4") for _ in range(calls)]
        for send, reference in zip(sends, expected):
            library(comm, send, reference)
        assert [recv.tolist() for recv in recvs] == [reference.tolist() for reference in expected]
        send, recv, reference = numpy.array([rank, -rank], dtype="i4"), numpy.full(2, -9, "i4"), numpy.zeros(2, "i4")
        comm.Neighbor_alltoall(send, recv)  # auto decides here
        comm.Ineighbor_alltoall(send, recv).Wait()
        library(comm, send, reference)
        assert recv.tolist() == reference.tolist()
        if algorithm == "auto":
            assert comm.plan_stats("alltoall", form="nonblocking")["algorithm"] == "direct"
    finally:
        comm.Free()  # and the graph, whose handle the wrapper shares


@pytest.mark.timeout(60)  # without the fix: rank 0's call waited in the size-pass allreduce for rank 1's
@pytest.mark.parametrize("algorithm, options", [
    ("common_neighbor", {}), ("distance_halving", {}),
    # direct's first call is collective too on the RMA executors (the window) and with coloring (its protocol)
    ("direct", {"executor": "rma"}), ("direct", {"executor": "rma_canary", "executor_options": {"rtr_tree": 2}}),
    ("direct", {"coloring": True})])
def test_after_pattern_a_first_nonblocking_call_is_local(algorithm, options):
    """The README's way to keep a first nonblocking call local where it sets something up collectively:
    ``pattern()`` on every rank first makes what that call would make (the pattern, its protocol, the
    size-pass agreement, an RMA executor's window and RTR trees). Rank 1 starts its call only after
    rank 0's has returned."""
    rank, size = WORLD.Get_rank(), WORLD.Get_size()
    if size < 2:
        pytest.skip("needs a second rank to wait for the first")
    left, right = (rank - 1) % size, (rank + 1) % size
    comm = sparsecoll.wrap(WORLD.Create_dist_graph_adjacent([left, right], [left, right], reorder=False), algorithm,
                           **options)
    try:
        comm.pattern("allgather")
        send, recv = numpy.array([float(rank)]), numpy.full(2, -1.0)
        request = cases.started_after_rank_0(lambda: comm.Ineighbor_allgather(send, recv))
        request.Wait()
        assert recv.tolist() == [float(left), float(right)]
    finally:
        comm.Free()


@pytest.mark.timeout(60)  # a rank in a set-up allreduce advances nothing: without the thread, the ranks waited
@pytest.mark.parametrize("case", ["first_call", "rma_init", "auto_init"])
def test_set_up_while_a_multi_step_request_is_in_flight(case):
    """Rank 0 starts a 2-step persistent request, then makes a call that sets something up collectively
    (the alltoall family's first call: pattern and size-pass allreduce; an RMA init: its window; auto's
    first init: its decision), then waits for the request; the other ranks complete the request before
    making that call. Legal MPI; rank 0's set-up is the library's own blocking calls, which do not
    advance sparsecoll's request, so the progress thread has to (README, "Progress of nonblocking calls")."""
    from sparsecoll.runtime.progress import ENGINE
    rank, size = WORLD.Get_rank(), WORLD.Get_size()
    if size < 2:
        pytest.skip("needs a second rank to wait for the first")
    if not ENGINE._allows_thread():
        pytest.skip("no progress thread here (SPARSECOLL_PROGRESS_THREAD=0 or MPI below THREAD_MULTIPLE)")
    moore = [(i, j) for i in (-1, 0, 1) for j in (-1, 0, 1) if (i, j) != (0, 0)]
    dims = MPI.Compute_dims(size, 2)
    first = sparsecoll.cart_neighborhood_create(WORLD, dims, [True, True], moore, algorithm="cartesian")
    algorithm, executor = {"first_call": ("cartesian", "steps"), "rma_init": ("cartesian", "rma"),
                           "auto_init": ("auto", "steps")}[case]
    other = sparsecoll.wrap(first, algorithm, executor=executor)
    try:
        send, recv = numpy.full(2, rank, dtype="i4"), numpy.full(16, -1, dtype="i4")
        request = first.Neighbor_allgather_init(send, recv)
        if WORLD.allreduce(first.plan_stats("allgather")["steps"], op=MPI.MAX) < 2:  # a grid of 5 x 1, ...
            request.Free()
            pytest.skip("the cartesian allgather takes one step on this grid")
        s2, r2 = numpy.full(16, rank, dtype="i4"), numpy.full(16, -1, dtype="i4")

        def set_up():
            if case == "first_call":
                other.Neighbor_alltoall(s2, r2)
            else:
                other.Neighbor_alltoall_init(s2, r2).Free()
        request.Start()
        if rank == 0:
            set_up()
            request.Wait()
        else:
            request.Wait()
            set_up()
        expected = numpy.full_like(recv, -1)
        MPI.Distgraphcomm.Neighbor_allgather(first, send, expected)
        assert recv.tolist() == expected.tolist()
        request.Free()
    finally:
        first.Free()


@pytest.mark.timeout(60)  # without the check: every rank waited in its first call for messages of another schedule
@pytest.mark.parametrize("case", ["algorithm", "auto_or_named", "option", "executor", "grid", "intracomm",
                                  "global_collectives", "node_options"])
def test_wrap_arguments_that_differ_between_ranks_raise_on_every_rank(ring, case):
    """``wrap``'s algorithm, options and executor decide every call's messages, so odd ranks giving
    other ones than even ranks is an error every rank reports at ``wrap`` (before any call)."""
    rank, size = WORLD.Get_rank(), WORLD.Get_size()
    if size < 2:
        pytest.skip("needs ranks that differ")
    odd = rank % 2 == 1
    if case == "intracomm":
        comm, arguments = WORLD.Dup(), {"ranks_per_node": 1 if odd else 2}
    else:
        comm = ring
        arguments = {"algorithm": {"algorithm": "native" if odd else "direct"},
                     # auto gives the comparison two more integers than a named algorithm
                     "auto_or_named": {"algorithm": "auto" if odd else "direct"},
                     "option": {"algorithm": "direct", "coloring": odd},
                     "executor": {"algorithm": "direct", "executor": "dag" if odd else "steps"},
                     "grid": {"algorithm": "direct", **({"grid": ([size], [True])} if odd else {})},
                     # the global collectives' algorithm and node structure (not checked before: a
                     # topology wrapper's global collectives then ran different messages per rank)
                     "global_collectives": {"algorithm": "direct",
                                            "global_collectives": "hierarchical" if odd else "library"},
                     "node_options": {"algorithm": "direct", "global_collectives": "hierarchical",
                                      "ranks_per_node": 1 if odd else 2}}[case]
    try:
        with pytest.raises(ValueError, match="algorithm: the ranks gave wrap different"):
            sparsecoll.wrap(comm, **arguments)
    finally:
        if case == "intracomm":
            comm.Free()
    same = sparsecoll.wrap(ring, "direct", coloring=True)  # equal arguments still wrap
    recv = numpy.zeros(2)
    same.Neighbor_allgather(numpy.array([float(rank)]), recv)
    assert recv.tolist() == [float((rank - 1) % size), float((rank + 1) % size)]


@pytest.mark.timeout(60)  # without the fix: the other ranks waited in wrap's allreduce for good
@pytest.mark.parametrize("refused, own", [({"ranks_per_node": 0}, "ranks_per_node"),
                                          ({"global_collectives": "bogus"}, "global_collectives"),
                                          ({"topology": "a path"}, "topology"),
                                          ({"executor": "bogus"}, "executor"),
                                          ({"algorithm": "no_such_algorithm"}, "algorithm"),
                                          ({"verify_choice": 1}, "verify_choice")])
def test_an_argument_refused_on_one_rank_raises_on_every_rank(ring, refused, own):
    """A wrap argument rank 0 alone refuses (each checked locally, before any message): rank 0
    raised its error before the ranks compared their arguments, and the others waited in that
    allreduce for good. Rank 0 now raises its own error and the others one saying so."""
    rank = WORLD.Get_rank()
    if WORLD.Get_size() < 2:
        pytest.skip("needs ranks that differ")
    with pytest.raises((TypeError, ValueError)) as raised:
        sparsecoll.wrap(ring, **(refused if rank == 0 else {}))
    expected = own if rank == 0 else "another rank refused its arguments"
    assert expected in str(raised.value), str(raised.value)
    comm = sparsecoll.wrap(ring, "direct")  # the handle still wraps: nothing was half made
    recv = numpy.zeros(2)
    comm.Neighbor_allgather(numpy.array([float(rank)]), recv)
    assert recv.tolist() == [float((rank - 1) % WORLD.Get_size()), float((rank + 1) % WORLD.Get_size())]


@pytest.mark.timeout(60)  # without the fix: Open MPI 5.0.11 segfaulted in its basic component
def test_auto_object_forms_avoid_a_library_that_fails_on_the_graph():
    """``auto``'s object forms run the library's own exchange, except where the library is known to
    fail on some rank's neighborhood: a distributed graph with PROC_NULL neighbors (as
    ``cart_neighborhood_create`` makes on a non-periodic grid) crashes Open MPI 5.0's."""
    rank, size = WORLD.Get_rank(), WORLD.Get_size()
    comm = sparsecoll.cart_neighborhood_create(WORLD, [size], [False], [(1,), (-1,)])
    try:
        right = rank + 1 if rank + 1 < size else None
        left = rank - 1 if rank > 0 else None
        assert comm.neighbor_allgather(rank) == [left, right]  # offset +1 receives from rank - 1
        assert comm.neighbor_alltoall([("to+1", rank), ("to-1", rank)]) == [
            None if left is None else ("to+1", left), None if right is None else ("to-1", right)]
    finally:
        comm.Free()


@pytest.mark.timeout(60)
def test_a_collective_the_algorithm_does_not_implement_raises_a_value_error(ring):
    """distance_halving implements the allgather family only: its first alltoall raises ValueError
    naming the argument on every rank, before any message (its allgather still runs)."""
    comm = sparsecoll.wrap(ring, "distance_halving")
    size = WORLD.Get_size()
    with pytest.raises(ValueError, match="algorithm: .*does not implement the alltoall family"):
        comm.plan_stats("alltoall")  # (it said the call would build the pattern: call it first)
    with pytest.raises(ValueError, match="algorithm: .*does not implement the alltoall family"):
        comm.Neighbor_alltoall(numpy.zeros(2), numpy.zeros(2))
    recv = numpy.zeros(2)
    comm.Neighbor_allgather(numpy.array([float(WORLD.Get_rank())]), recv)
    assert recv.tolist() == [float((WORLD.Get_rank() - 1) % size), float((WORLD.Get_rank() + 1) % size)]


@pytest.mark.timeout(60)
def test_auto_decides_for_every_wrapper_of_a_handle_at_the_same_call():
    """Ranks behave differently: rank 0 makes the deciding blocking call through a second wrapper of
    the handle, the others through the one their nonblocking calls use. What a nonblocking call
    runs depends on whether the handle's collective was decided, not on a wrapper's history, so
    every rank switches at the same call (else some would run the library's call, others direct's)."""
    rank, size = WORLD.Get_rank(), WORLD.Get_size()
    left, right = (rank - 1) % size, (rank + 1) % size
    graph = WORLD.Create_dist_graph_adjacent([left, right], [left, right], reorder=False)
    comm = sparsecoll.wrap(graph, profile=_cheap_sparsecoll())
    second = sparsecoll.wrap(graph, profile=_cheap_sparsecoll())
    try:
        send = numpy.array([rank, -rank], dtype="i4")
        reference = numpy.zeros(2, "i4")
        MPI.Distgraphcomm.Neighbor_alltoall(comm, send, reference)  # the library's own call on the handle
        for deciding in (False, True, False):
            if deciding:
                (second if rank == 0 else comm).Neighbor_alltoall(send, numpy.zeros(2, "i4"))
            requests, recvs = [], []
            for _ in range(3):
                recvs.append(numpy.full(2, -9, "i4"))
                requests.append(comm.Ineighbor_alltoall(send, recvs[-1]))
            for request in reversed(requests) if rank % 2 else requests:
                request.Wait()
            assert [recv.tolist() for recv in recvs] == [reference.tolist()] * 3
        assert comm.plan_stats("alltoall", form="nonblocking")["algorithm"] == "direct"
    finally:
        comm.Free()


@pytest.mark.parametrize("executor", ["steps", "dag"])
@pytest.mark.parametrize("block", [8, 1 << 16])
@pytest.mark.parametrize("collective", ["allgather", "alltoall"])
def test_plan_stats_counts_the_messages_that_go_on_the_wire(executor, block, collective):
    """``sends`` counts the schedule's messages; the executors join a step's messages to one peer
    (within the library's limits), so ``wire_sends`` says what goes on the wire, and it is what
    the executor made: the requests to other ranks of one run. A periodic grid of 2 x ranks/2
    repeats neighbors, so joining has something to join."""
    size = WORLD.Get_size()
    cart = WORLD.Create_cart(MPI.Compute_dims(size, 2), periods=[True, True])
    comm = sparsecoll.wrap(cart, "direct", executor=executor)
    try:
        degree = comm.neighborhood.indegree
        count = block // 8 * (degree if collective == "alltoall" else 1)
        send, recv = numpy.ones(count), numpy.zeros(block // 8 * degree)
        getattr(comm, f"Neighbor_{collective}")(send, recv)
        stats = comm.plan_stats(collective, block_bytes=block)
        schedule = comm.runtime.bind_uncached(comm.plan, collective, send, recv)
        made = comm.runtime.call_requests(comm.plan, collective, schedule)
        try:
            counted = made.counts()
        finally:
            made.free()
        assert stats["wire_sends"] == counted["wire_sends"] <= stats["sends_to_others"]
        assert counted["wire_recvs"] <= stats["recvs"]
    finally:
        comm.Free()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("form", ["nonblocking", "persistent"])
@pytest.mark.parametrize("algorithm", ["native", "auto"])
def test_the_library_s_allgatherw_holds_a_temporary_send_array(algorithm, form):
    """Requests hold their buffers (as mpi4py's do): the library's allgatherw (an alltoallw) read
    the send block by absolute address over MPI.BOTTOM, so a temporary send array was freed
    before a peer's rendezvous read it (MPICH: the receive blocks held other data)."""
    import gc
    import time
    rank, size = WORLD.Get_rank(), WORLD.Get_size()
    comm = sparsecoll.wrap(WORLD.Create_cart([size], periods=[True]), algorithm)
    n, degree = 200_000, 2  # 1.6 MB blocks: past every eager limit
    try:
        for _ in range(2):
            recv = numpy.full(degree * n, -1.0)
            spec = [recv, ([n] * degree, [8 * n * k for k in range(degree)]), [MPI.DOUBLE] * degree]
            if rank == 0:
                time.sleep(0.2)  # the others' sends wait for this rank's receives
            if form == "nonblocking":
                request = comm.Ineighbor_allgatherw(numpy.full(n, float(rank + 1)), spec)
            else:
                request = comm.Neighbor_allgatherw_init(numpy.full(n, float(rank + 1)), spec)
                request.Start()
            gc.collect()
            overwrite = [numpy.full(n, -5.0) for _ in range(20)]  # reuses the freed memory
            request.Wait()
            if form == "persistent":
                request.Free()
            del overwrite
            expected = numpy.concatenate([numpy.full(n, float((rank + shift) % size + 1)) for shift in (-1, 1)])
            assert recv.tobytes() == expected.tobytes()
    finally:
        comm.Free()


def _status_is_empty(status: MPI.Status) -> bool:
    return (status.Get_source() == MPI.ANY_SOURCE and status.Get_tag() == MPI.ANY_TAG
            and status.Get_error() == MPI.SUCCESS and status.Get_count(MPI.BYTE) == 0 and not status.Is_cancelled())


@pytest.mark.parametrize("algorithm", ["direct", "cartesian_trivial"])
def test_a_completed_or_inactive_request_gives_the_empty_status(ring, algorithm):
    """MPI gives the empty status (any source, any tag, no error, count 0) for an inactive request,
    as mpi4py's requests do; sparsecoll left whatever the status held. A completed collective's
    source and tag are undefined: the empty status too. The lowercase ``free``, ``cancel`` and
    ``get_status`` are mpi4py's names."""
    rank = WORLD.Get_rank()
    wrapped = sparsecoll.cart_neighborhood_create(WORLD, [WORLD.Get_size()], [True], [(1,), (-1,)],
                                                  algorithm=algorithm) if algorithm != "direct" else \
        sparsecoll.wrap(ring, algorithm)
    send, recv = numpy.array([rank], "i4"), numpy.full(2, -1, "i4")

    def stale() -> MPI.Status:
        status = MPI.Status()
        status.Set_source(3)
        status.Set_tag(77)
        status.Set_elements(MPI.BYTE, 5)
        return status

    persistent = wrapped.Neighbor_allgather_init(send, recv)
    for check in (lambda st: persistent.Wait(st), lambda st: persistent.Test(st), lambda st: persistent.Get_status(st),
                  lambda st: persistent.get_status(st)):
        status = stale()
        assert check(status) and _status_is_empty(status)  # inactive
    persistent.Start()
    status = stale()
    persistent.Wait(status)
    assert _status_is_empty(status)
    with pytest.raises(RuntimeError, match="cannot be cancelled"):
        persistent.Start()
        persistent.cancel()
    persistent.Wait()
    persistent.free()
    assert persistent == MPI.REQUEST_NULL


@pytest.mark.timeout(60)
def test_the_communicators_error_handler_reaches_sparsecolls_own_calls():
    """An error handler set on a wrapper after ``wrap`` is called for MPI errors inside sparsecoll's
    calls, as for the library's own collective (they ran on sparsecoll's private communicator,
    which kept the handler it had at ``wrap``). The program is erroneous on purpose: every rank
    receives 2 doubles where its peer sends 4 (truncation, which MPI's point-to-point detects on
    both libraries). After the handler returns, Open MPI raises and MPICH returns, as with
    their own calls; the handler was called either way. The node structure's communicators get
    the handler too."""
    size, rank = WORLD.Get_size(), WORLD.Get_rank()
    if size < 2:
        pytest.skip("needs 2 ranks: Open MPI 5.0.11 does not detect a truncated message to self (nor its own call)")
    graph = WORLD.Create_dist_graph_adjacent([(rank - 1) % size], [(rank + 1) % size])
    comm = sparsecoll.wrap(graph, "direct")
    intracomm = sparsecoll.wrap(WORLD.Dup(), ranks_per_node=2)  # a node structure (made at wrap)
    calls = []
    handler = MPI.Comm.Create_errhandler(lambda _, code: calls.append(code))
    try:
        comm.Set_errhandler(handler)
        intracomm.Set_errhandler(handler)
        with contextlib.suppress(MPI.Exception):
            comm.Neighbor_alltoallv([numpy.arange(4.0), [4], [0], MPI.DOUBLE],
                                    [numpy.zeros(4), [2], [0], MPI.DOUBLE])
        assert calls and all(MPI.Get_error_class(code) == MPI.ERR_TRUNCATE for code in calls)
        hidden = [comm.runtime.private] + [c for h in hierarchies(intracomm) for c in h.communicators()]
        assert len(hidden) >= 2 and all(c.Get_errhandler() == handler for c in hidden)
    finally:
        for wrapped in (comm, intracomm):
            wrapped.Set_errhandler(MPI.ERRORS_RETURN)
            wrapped.Free()
        handler.Free()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("wrapper_first", [True, False], ids=["set-after-wrap", "set-before-wrap"])
def test_the_error_handler_reaches_sparsecolls_messages_to_self(wrapper_first):
    """The program's error handler, set on the wrapper or on the communicator before ``wrap``,
    is called for MPI errors of every message of sparsecoll's. A message to self on a
    communicator of several ranks goes by a duplicate of ``COMM_SELF`` kept for the private
    communicator, which had ``COMM_SELF``'s handler; and a handler set before ``wrap`` reached
    none of sparsecoll's communicators (mpi4py gives every communicator it makes
    ``ERRORS_RETURN``). A truncated self-loop block (32 KiB sent, 16 KiB received: both
    libraries detect it) raised ``MPI.Exception`` without calling the handler. The node
    structure's communicators (the dynamic leaders' included) take the handler too."""
    size, rank = WORLD.Get_size(), WORLD.Get_rank()
    if size < 2:
        pytest.skip("needs 2 ranks: on a communicator of one rank messages to self go by itself")
    graph = WORLD.Create_dist_graph_adjacent([rank], [rank])
    world = WORLD.Dup()
    calls = []
    handler = MPI.Comm.Create_errhandler(lambda _, code: calls.append(code))
    if not wrapper_first:
        graph.Set_errhandler(handler)
        world.Set_errhandler(handler)
    comm = sparsecoll.wrap(graph, "direct")
    intracomm = sparsecoll.wrap(world, ranks_per_node=1, reduce="dynamic")
    try:
        if wrapper_first:
            comm.Set_errhandler(handler)
            intracomm.Set_errhandler(handler)
        n = 4096
        with contextlib.suppress(MPI.Exception):  # Open MPI raises after the handler, MPICH returns
            comm.Neighbor_alltoallv([numpy.arange(2.0 * n), [2 * n], [0], MPI.DOUBLE],
                                    [numpy.zeros(2 * n), [n], [0], MPI.DOUBLE])
        assert calls and all(MPI.Get_error_class(code) == MPI.ERR_TRUNCATE for code in calls)
        ours = comm.runtime.communicators()
        hidden = ours + [c for h in hierarchies(intracomm) for c in h.communicators()]
        assert len(ours) == 2 and len(hidden) >= 5 and all(c.Get_errhandler() == handler for c in hidden)
    finally:
        for wrapped in (comm, intracomm):
            wrapped.Set_errhandler(MPI.ERRORS_RETURN)
            wrapped.Free()
        handler.Free()


class HaloCart(MPI.Cartcomm):
    """A program's own communicator class."""

    def halo_width(self) -> int:
        return 1


def test_a_wrapper_keeps_the_programs_communicator_subclass():
    """``wrap`` of a subclass of mpi4py's classes keeps the subclass and its methods (it gave
    sparsecoll's plain class: the program's methods were gone, ``pkl5``'s pickle-based ones
    silently mpi4py's); sparsecoll's neighborhood collectives run, and ``Dup`` keeps both."""
    from mpi4py.util import pkl5
    size, rank = WORLD.Get_size(), WORLD.Get_rank()
    cart = HaloCart(WORLD.Create_cart([size], periods=[True]))
    comm = sparsecoll.wrap(cart, "direct")
    copy = comm.Dup()
    pickled = sparsecoll.wrap(pkl5.Intracomm(WORLD.Dup()))
    try:
        for wrapped in (comm, copy):
            assert isinstance(wrapped, HaloCart) and isinstance(wrapped, sparsecoll.comm.Cartcomm)
            assert wrapped.halo_width() == 1 and wrapped.algorithm == "direct"
            received = numpy.full(2, -1.0)
            wrapped.Neighbor_allgather(numpy.array([float(rank)]), received)
            assert received.tolist() == [float((rank - 1) % size), float((rank + 1) % size)]
            assert wrapped.plan_stats("allgather")["algorithm"] == "direct"
        assert isinstance(pickled, pkl5.Intracomm) and type(pickled).bcast is pkl5.Intracomm.bcast
        assert pickled.bcast("from 0" if rank == 0 else None) == "from 0"
        assert pickled.allreduce(1) == size
    finally:
        copy.Free()
        comm.Free()
        pickled.Free()


def test_a_wrapper_answers_mpi4pys_topology_queries_as_the_library_does():
    """``topology`` is mpi4py's topology type on a wrapper too (sparsecoll's view is
    ``neighborhood``), as are the degrees and edges of mpi4py's other properties."""
    size, rank = WORLD.Get_size(), WORLD.Get_rank()
    others = [(rank + 1) % size, (rank - 1) % size]
    raws = [WORLD.Create_cart([size], periods=[True]), WORLD.Create_graph(
        [2 * (r + 1) for r in range(size)], [peer for r in range(size) for peer in ((r + 1) % size, (r - 1) % size)]),
        WORLD.Create_dist_graph_adjacent(others, others)]
    try:
        for raw in raws:
            wrapped = sparsecoll.wrap(raw, "direct")
            for name in ("topology", "degrees", "indegree", "outdegree", "inedges", "outedges", "is_topo"):
                assert getattr(wrapped, name) == getattr(raw, name), name
            assert wrapped.neighborhood.indegree == raw.indegree
    finally:
        for raw in raws:
            raw.Free()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("algorithm", ["direct", "cartesian"])
def test_a_freed_request_refuses_what_mpi4pys_refuses(ring, algorithm):
    """A freed request (a completed nonblocking one too) is MPI's null request: ``Free``,
    ``Start`` and ``Cancel`` raise ``MPI.Exception`` with ``ERR_REQUEST``, as mpi4py's requests
    do (sparsecoll's freed twice silently and raised RuntimeError), except that a nonblocking
    call's request has no ``Start`` at all, as mpi4py's ``Request`` (it raised ERR_REQUEST, where
    mpi4py raises AttributeError, and an active one a RuntimeError); the lowercase ``free`` does
    nothing, ``Wait`` and ``Test`` return at once; a live request is neither copied nor pickled
    (mpi4py's ValueError: a copy would share the MPI requests), a freed one is MPI.REQUEST_NULL's."""
    import copy
    import pickle
    wrapped = sparsecoll.cart_neighborhood_create(WORLD, [WORLD.Get_size()], [True], [(1,), (-1,)],
                                                  algorithm=algorithm) if algorithm != "direct" else \
        sparsecoll.wrap(ring, algorithm)
    send, recv = numpy.array([WORLD.Get_rank()], "i4"), numpy.full(2, -1, "i4")
    persistent = wrapped.Neighbor_allgather_init(send, recv)
    for duplicate in (copy.copy, copy.deepcopy, pickle.dumps):
        with pytest.raises(ValueError, match="cannot serialize"):
            duplicate(persistent)
    persistent.Start()
    with pytest.raises(RuntimeError, match="active request"):
        persistent.Start()
    persistent.Free()  # completes it first
    nonblocking = wrapped.Ineighbor_allgather(send, recv)
    library = MPI.Topocomm.Ineighbor_allgather(wrapped, send, numpy.full(2, -1, "i4"))
    for request in (nonblocking, library):
        assert not hasattr(request, "Start")
        with pytest.raises(AttributeError, match="Start"):
            request.Start()
        request.Wait()
        with pytest.raises(AttributeError, match="Start"):
            request.Start()
    for request in (persistent, nonblocking):
        for refused in (request.Free, request.Cancel) + ((request.Start,) if request is persistent else ()):
            with pytest.raises(MPI.Exception) as caught:
                refused()
            assert caught.value.Get_error_class() == MPI.ERR_REQUEST
        request.free()
        assert request.Wait() and request.Test() and request == MPI.REQUEST_NULL
        for duplicate in (copy.copy, copy.deepcopy, lambda r: pickle.loads(pickle.dumps(r))):
            assert duplicate(request) == MPI.REQUEST_NULL  # as mpi4py's completed request


@pytest.mark.timeout(60)
@pytest.mark.parametrize("progress_thread", [False, True])
def test_waitall_of_a_receive_and_a_multi_step_collective(progress_thread, monkeypatch):
    """Rank 0 waits on a receive that rank 1 answers only once its own 2-step collective is done,
    which needs rank 0's collective to move on: ``sparsecoll.waitall([receive, collective])``
    waited in list order, blocked in the receive, and hung without the progress thread
    (``SPARSECOLL_PROGRESS_THREAD=0``, or below ``MPI_THREAD_MULTIPLE``); ``MPI.Request.Waitall``
    of the same program completes. Statuses come back one per request, as mpi4py's."""
    from sparsecoll.runtime.progress import ENGINE
    if WORLD.Get_size() < 4:
        pytest.skip("needs a 2 x 2 grid (a 2-step cartesian allgather)")
    if not progress_thread:
        ENGINE.stop()
        monkeypatch.setattr(ENGINE, "_thread_allowed", False)
    rank, size = WORLD.Get_rank(), WORLD.Get_size()
    moore = [(a, b) for a in (-1, 0, 1) for b in (-1, 0, 1) if (a, b) != (0, 0)]
    comm = sparsecoll.cart_neighborhood_create(WORLD, MPI.Compute_dims(size, 2), [True, True], moore,
                                               algorithm="cartesian")
    try:
        send, recv = numpy.array([rank], "i8"), numpy.full(8, -1, "i8")
        comm.Neighbor_allgather(send, recv)
        if comm.plan_stats("allgather")["steps"] < 2:  # (a grid of one row: one step)
            pytest.skip("needs a 2-step cartesian allgather")
        expected = numpy.full(8, -1, "i8")
        MPI.Distgraphcomm(comm).Neighbor_allgather(send, expected)
        recv[:] = -1
        request = comm.Ineighbor_allgather(send, recv)
        token = numpy.zeros(1, "i8")
        if rank == 0:
            statuses = []
            sparsecoll.waitall([WORLD.Irecv(token, source=1, tag=9), request], statuses)
            assert len(statuses) == 2 and statuses[0].Get_source() == 1 and _status_is_empty(statuses[1])
        else:
            request.Wait()
            if rank == 1:
                WORLD.Send(numpy.ones(1, "i8"), dest=0, tag=9)
        assert recv.tolist() == expected.tolist()
    finally:
        comm.Free()
        monkeypatch.undo()
        ENGINE._stopping = False  # the next request starts a progress thread again (stop() is for exit)

