"""The runtime's pure parts: tag channels, plan keys, option checks, the parse cache, auto's
reading of a call's block size."""

from __future__ import annotations

import gc
import weakref

import numpy
import pytest
from mpi4py import MPI

from sparsecoll.checks import GUARANTEED_TAG_UB
from sparsecoll.runtime.auto import library_shortcut, quick_size_class, spec_block_bytes
from sparsecoll.runtime.caches import LastArrays, ParseCache, call_signature
from sparsecoll.runtime.channels import NONBLOCKING_CHANNELS, Channels
from sparsecoll.runtime.plan import make_plan
from sparsecoll.runtime.progress import PersistentRequest


def _outstanding(one_stage: bool = True):
    """A started request (a message to self on COMM_SELF) whose messages complete only when
    someone waits for them: one stage MPI runs alone, or the same stage run by the engine as a
    multi-step call's (which may post messages after its start)."""
    buffer = numpy.zeros(1, "i4")
    stage = [MPI.COMM_SELF.Recv_init(buffer, 0, 7), MPI.COMM_SELF.Send_init(numpy.ones(1, "i4"), 0, 7)]
    request = PersistentRequest(**({"single": stage} if one_stage else {"program": lambda: [stage]}),
                               persistent=True, keep=(buffer,),
                               on_free=lambda _: [mpi_request.Free() for mpi_request in stage])
    request.Start()
    return request


def test_tags_stay_within_the_guaranteed_range():
    channels = Channels(GUARANTEED_TAG_UB)
    tags = [channels.take_nonblocking() for _ in range(3 * NONBLOCKING_CHANNELS)]
    assert sorted(set(tags)) == list(range(1, NONBLOCKING_CHANNELS + 1))
    persistent = []
    for _ in range(channels.persistent_channels + 5):
        channel = channels.take_persistent()
        persistent.append(channel)  # nothing holds it: reused after a full cycle
    assert min(persistent) == NONBLOCKING_CHANNELS + 1 and max(persistent) == GUARANTEED_TAG_UB
    assert Channels(None).tag_ub == GUARANTEED_TAG_UB  # an attribute MPI did not give


def _channels_one_cycle_after(request):
    """Channels whose first nonblocking call is ``request``, taken round once more up to that channel."""
    channels = Channels(GUARANTEED_TAG_UB)
    first = channels.take_nonblocking()
    channels.hold_nonblocking(first, request)
    for _ in range(NONBLOCKING_CHANNELS - 1):
        channels.take_nonblocking()
    return channels, first


def test_a_nonblocking_channel_is_reused_only_after_its_messages_completed():
    request = _outstanding(one_stage=False)
    channels, first = _channels_one_cycle_after(request)
    assert request._current is not None
    assert channels.take_nonblocking() == first  # the engine waited for the earlier call here
    assert request._current is None
    request.Wait()
    request.Free()


def test_a_one_stage_call_lends_its_channel_without_waiting():
    """A call that posted every message at its start never makes a later call wait (its peers may
    not have started it yet), and still keeps the communicator busy until its owner completes it."""
    request = _outstanding(one_stage=True)
    channels, first = _channels_one_cycle_after(request)
    assert channels.take_nonblocking() == first
    assert request._current is not None  # not waited for
    released = []
    channels.when_idle(lambda: released.append(True))
    assert channels.busy() and not released
    request.Wait()
    channels.release_nonblocking(first, request)
    assert released and not channels.busy()
    request.Free()


def test_a_live_persistent_request_keeps_its_channel():
    channels = Channels(NONBLOCKING_CHANNELS + 3)  # three persistent channels
    held = _outstanding()
    channel = channels.take_persistent()
    channels.hold_persistent(channel, held)
    channels.take_persistent(), channels.take_persistent()
    with pytest.raises(RuntimeError, match="still alive"):
        channels.take_persistent()
    channels.release_persistent(channel)
    assert channels.take_persistent() == channel + 1  # the count moved on; the next cycle may use it
    held.Free()


def test_plan_keys_hold_every_option_by_value():
    a = make_plan("common_neighbor", {}, False, 4)
    b = make_plan("common_neighbor", {"theta": 1}, False, 4)
    c = make_plan("common_neighbor", {"theta": 4}, True, 4)
    assert a.key != b.key and a.key == c.key  # rebind changes no message
    assert not a.native and make_plan("native", {}, False, 4).native


@pytest.mark.parametrize("algorithm, options, error, name", [
    ("cartesian", {"alpha": 1e-6}, TypeError, "unknown option"),
    ("auto", {"theta": float("nan")}, TypeError, "theta"),
    ("distance_halving", {"ranks_per_socket": 0}, ValueError, "ranks_per_socket"),
    ("distance_halving", {"ranks_per_socket": 9}, ValueError, "ranks_per_socket"),
    ("common_neighbor", {"theta": 1.5}, TypeError, "theta"),
    ("direct", {"theta": 2}, TypeError, "unknown option"),
    ("direct", {}, TypeError, "rebind"),
    ("direct", {}, ValueError, "executor"),
])
def test_bad_options_raise_when_the_plan_is_made(algorithm, options, error, name):
    rebind = "yes" if name == "rebind" else False
    executor = "no_such_executor" if name == "executor" else "steps"
    with pytest.raises(error, match=name):
        make_plan(algorithm, options, rebind, 8, executor)


@pytest.mark.parametrize("executor, executor_options, error", [
    ("rma", {"rtr_tree": 0}, ValueError), ("rma_canary", {"rtr_tree": 1.5}, TypeError),
    ("rma", {"depth": 2}, ValueError), ("steps", {"rtr_tree": 2}, ValueError), ("rma", [2], TypeError)])
def test_bad_executor_options_raise_when_the_plan_is_made(executor, executor_options, error):
    with pytest.raises(error, match="executor_options"):
        make_plan("direct", {}, False, 8, executor, executor_options=executor_options)


def test_executor_options_are_part_of_the_plan_key():
    """They change the messages (SC12 II-C2's RTR tree), so plans differing in them never share caches."""
    keys = {make_plan("direct", {}, False, 8, "rma", executor_options=options).key
            for options in (None, {"rtr_tree": 2}, {"rtr_tree": 3})}
    assert len(keys) == 3
    assert make_plan("direct", {}, False, 8, "rma", executor_options={}).key == make_plan(
        "direct", {}, False, 8, "rma").key


def test_the_parse_cache_keeps_no_array_alive_and_never_confuses_a_reused_id():
    cache = ParseCache()
    send, recv = numpy.zeros(4, "i4"), numpy.zeros(8, "i4")
    signature = call_signature(send, recv)
    cache.keep(signature, send, recv, "parsed")
    assert cache.recall(signature, send, recv) == "parsed"
    ref = weakref.ref(recv)
    del recv
    gc.collect()
    assert ref() is None
    other = numpy.zeros(8, "i4")  # may get the dead array's id
    assert cache.recall(call_signature(send, other), send, other) is None


def test_a_spec_with_numpy_integer_displacements_has_a_signature():
    """``list(numpy.cumsum(counts) - counts)`` (numpy integers in a list, as users and the bench
    write displacements) is pinned by value like a list of ints: it had no signature, so every
    call was parsed again (MPICH, 8 ranks, 3-D stencil, direct's blocking alltoallv at 8 B: 882 us
    a call against 236 us with int displacements, the library's 281 us)."""
    counts = [2, 3, 1]
    as_numpy = list(numpy.cumsum(counts) - counts)
    assert all(isinstance(d, numpy.integer) for d in as_numpy)
    send, recv = numpy.zeros(6, "i4"), numpy.zeros(6, "i4")
    spec = [send, (counts, as_numpy), MPI.INT]
    signature = call_signature(spec, [recv, (counts, [0, 2, 5]), MPI.INT])
    assert signature is not None
    assert signature == call_signature([send, (counts, [0, 2, 5]), MPI.INT], [recv, (counts, [0, 2, 5]), MPI.INT])
    assert signature != call_signature([send, (counts, [0, 2, 4]), MPI.INT], [recv, (counts, [0, 2, 5]), MPI.INT])


def test_a_list_of_counts_is_pinned_only_when_every_entry_is_an_integer():
    """Counts and displacements are signed at C speed through ``__index__`` (8-byte integers), as
    the parse reads them: a float among them (which the parse refuses), or an int past 64 bits,
    leaves the spec without a signature, so it is parsed (and refused) on every call."""
    send = numpy.zeros(8, "i4")
    assert call_signature([send, [1, 2], MPI.INT], send) is not None
    assert call_signature([send, [1, numpy.uint8(2)], MPI.INT], send) == call_signature([send, [1, 2], MPI.INT], send)
    assert call_signature([send, [1, 2.0], MPI.INT], send) is None
    assert call_signature([send, [1, numpy.float64(2)], MPI.INT], send) is None
    assert call_signature([send, ([1, 1], [0, 2 ** 70]), MPI.INT], send) == call_signature(
        [send, ([1, 1], [0, 2 ** 70]), MPI.INT], send)  # by value, entry by entry
    assert call_signature([send, ([1, 1], [0, 2 ** 70]), MPI.INT], send) != call_signature(
        [send, ([1, 1], [0, 2 ** 70 + 1]), MPI.INT], send)


def test_counts_in_a_numpy_object_array_are_not_pinned_by_its_bytes():
    """An object array's bytes are pointers to its entries, not their values: displacements
    kept in one (``numpy.array(..., dtype=object)``, which mpi4py reads as ints) and set anew
    between calls put a new int at a freed one's address, so two calls with other values had one
    signature and direct's calls placed the blocks at an earlier call's displacements."""
    send = numpy.zeros(4000, "i4")
    displs = numpy.array([0, 0], dtype=object)
    seen = {}
    for call in range(20):
        displs[0], displs[1] = 1000 + 7 * call, 2000 + 7 * call  # new int objects, old ones freed
        signature = call_signature([send, ([1, 1], displs), MPI.INT], send)
        assert signature is None or seen.setdefault(signature, call) == call, (call, seen[signature])
    assert call_signature([send, ([1, 1], displs), MPI.INT], send) is None
    integers = call_signature([send, ([1, 1], numpy.array([1007, 2007])), MPI.INT], send)
    assert integers is not None  # an integer array is pinned by its values


def test_bool_counts_are_pinned_as_the_ints_they_equal():
    """mpi4py reads ``True`` as the count 1 (``__index__``), and so does the parse: a spec of bool
    counts has a signature (else it was parsed on every call), the one of its ints."""
    array = numpy.zeros(6, "i4")
    bools = [array, ([True, False, True], [0, 2, 4]), MPI.INT]
    assert call_signature(bools, array) is not None
    assert call_signature(bools, array) == call_signature([array, ([1, 0, 1], [0, 2, 4]), MPI.INT], array)
    assert call_signature([array, True, MPI.INT], array) == call_signature([array, 1, MPI.INT], array)


def test_lists_of_predefined_datatypes_are_pinned_by_their_handles():
    """A w call's list of predefined types (read at C speed once each type was met): the same
    types give the same signature, other types another."""
    array = numpy.zeros(6, "i4")
    doubles = [array, ([1, 1, 1], [0, 8, 16]), [MPI.DOUBLE] * 3]
    call_signature(doubles, doubles)  # meets MPI.DOUBLE
    assert call_signature(doubles, doubles) == call_signature(list(doubles), list(doubles)) is not None
    ints = [array, ([1, 1, 1], [0, 8, 16]), [MPI.DOUBLE, MPI.INT, MPI.DOUBLE]]
    call_signature(ints, ints)
    assert call_signature(ints, ints) != call_signature(doubles, doubles)


def test_a_spec_with_derived_datatypes_has_a_signature_by_object_and_handle():
    """A halo exchange's subarray or vector types (``Neighbor_alltoallw``) were parsed on every
    call (direct's blocking call: 178 us against the library's 54 at 4 ranks on MPICH). They are
    pinned by object and handle: the same object gives the same signature, another object of
    the same layout another one, and the object freed (mpi4py nulls its handle) another one."""
    column = MPI.DOUBLE.Create_vector(4, 1, 6).Commit()
    same_layout = MPI.DOUBLE.Create_vector(4, 1, 6).Commit()
    array = numpy.zeros(24)
    spec = [array, ([1, 1], [0, 8]), [column, MPI.DOUBLE]]
    first = call_signature(spec, spec)
    assert first is not None and first == call_signature(list(spec), list(spec))
    assert first != call_signature([array, ([1, 1], [0, 8]), [same_layout, MPI.DOUBLE]], spec)
    same_layout.Free()
    column.Free()
    assert call_signature(spec, spec) != first


def _parse_cache_by_arrays():
    """``(keep, recall, clear)`` of the parse cache's array entries (``other`` asks for another collective)."""
    cache = ParseCache()
    return (lambda send, recv: cache.keep_arrays("alltoall", send, recv, "found"),
            lambda send, recv, other=False: cache.recall_arrays("allgather" if other else "alltoall", send, recv),
            cache.clear)


def _last_arrays():
    """``(keep, recall, clear)`` of :class:`LastArrays` (``other`` asks for another call plan)."""
    last = LastArrays()
    return (lambda send, recv: last.keep("plan", send, recv, "found"),
            lambda send, recv, other=False: last.recall("other plan" if other else "plan", send, recv),
            last.clear)


@pytest.mark.parametrize("cache", [_parse_cache_by_arrays, _last_arrays], ids=["ParseCache", "LastArrays"])
def test_the_array_caches_find_only_the_very_same_unchanged_arrays(cache):
    """Both caches keyed by two arrays check them the same way (``array_layouts``)."""
    keep, recall, clear = cache()
    send, recv = numpy.zeros(4, "i4"), numpy.zeros(8, "i4")
    keep(send, recv)
    assert recall(send, recv) == "found"
    assert recall(send, recv, other=True) is None
    assert recall(recv, send) is None
    assert recall(send, recv.copy()) is None
    assert recall(send, [recv, MPI.INT]) is None  # a spec is not the array
    send.flags.writeable = False  # a read-only send buffer parses the same
    assert recall(send, recv) == "found"
    for attribute, changed, back in (("shape", (2, 4), (8,)), ("dtype", "f4", "i4")):
        setattr(recv, attribute, changed)
        assert recall(send, recv) is None, attribute
        setattr(recv, attribute, back)
        assert recall(send, recv) == "found"
    view = recv[::2]
    assert recall(send, view) is None
    del view
    recv.flags.writeable = False
    assert recall(send, recv) is None
    recv.flags.writeable = True
    assert recall(send, recv) == "found"
    ref = weakref.ref(recv)
    del recv
    gc.collect()
    assert ref() is None
    other = numpy.zeros(8, "i4")  # may get the dead array's id
    assert recall(send, other) is None
    keep(send, other)
    clear()
    assert recall(send, other) is None


@pytest.mark.parametrize("form", ["blocking", "nonblocking"])
def test_a_repeated_call_whose_arrays_changed_is_parsed_again(form):
    """The call after one with the same arrays skips parsing only while they are unchanged: a receive
    array made read-only since is refused, one viewed as another dtype moves the same bytes."""
    import sparsecoll
    graph = MPI.COMM_SELF.Create_dist_graph_adjacent([0, 0], [0, 0])
    comm = sparsecoll.wrap(graph, "direct")
    try:
        send, recv = numpy.arange(4, dtype="i4"), numpy.zeros(4, "i4")

        def call():
            if form == "blocking":
                comm.Neighbor_alltoall(send, recv)
            else:
                comm.Ineighbor_alltoall(send, recv).Wait()
        for _ in range(NONBLOCKING_CHANNELS + 2):  # an idle executor on every nonblocking channel
            recv[:] = -1
            call()
            assert recv.tolist() == [0, 1, 2, 3]
        recv.flags.writeable = False
        with pytest.raises(Exception, match="recvbuf.*read-only"):
            call()
        recv.flags.writeable = True
        recv.dtype = "u1"  # 16 bytes now: blocks of 8 bytes, the same bytes moved
        recv[:] = 0
        call()
        assert recv.view("i4").tolist() == [0, 1, 2, 3]
        send.shape = (2, 2)
        recv.dtype = "i4"
        recv[:] = -1
        call()
        assert recv.tolist() == [0, 1, 2, 3]
    finally:
        comm.Free()


def test_auto_reads_the_block_size_of_every_argument_shape_mpi4py_splits():
    """The bytes of one of 4 receive blocks, as mpi4py's parse would split them (-1: parse it)."""
    array = numpy.zeros(64, "u1")
    resized = MPI.BYTE.Create_resized(0, 2).Commit()  # 1 byte of data every 2 bytes
    try:
        assert quick_size_class(array, 4) == 5  # 16 B blocks: class [16, 32)
        assert spec_block_bytes([array, 3, MPI.INT], 4) == 12
        assert spec_block_bytes((array, MPI.BYTE), 4) == 16
        assert spec_block_bytes([array, resized], 4) == 8  # 8 datatypes of 1 byte each
        assert spec_block_bytes([array.view("f8"), MPI.DOUBLE], 4) == 16
        assert quick_size_class([array, 3, MPI.INT], 4) == 4  # 12 B
        for unread in ([array, -1, MPI.BYTE], [array, 8, MPI.DATATYPE_NULL], [array, MPI.DATATYPE_NULL],
                       [array[:-1], MPI.BYTE], [array, MPI.BYTE, 0], [array[::2], MPI.BYTE], [array, 8.0, MPI.BYTE]):
            assert spec_block_bytes(unread, 4) == -1, unread
        assert quick_size_class(array[:-1], 4) == quick_size_class(array[::2], 4) == quick_size_class(array, 0) == -1
    finally:
        resized.Free()


def test_progress_thread_backs_off_while_calls_drive_progress_and_returns_when_it_steps_in():
    """Each look that finds nothing to do doubles the wait up to the longest; stepping in resets it."""
    from sparsecoll.runtime.progress import PROGRESS_INTERVAL, PROGRESS_INTERVAL_MAX, next_look
    interval, waits = PROGRESS_INTERVAL, []
    for _ in range(12):
        interval = next_look(interval, stepped_in=False)
        waits.append(interval)
    assert waits[0] == 2 * PROGRESS_INTERVAL and waits == sorted(waits) and waits[-1] == PROGRESS_INTERVAL_MAX
    assert next_look(PROGRESS_INTERVAL_MAX, stepped_in=True) == PROGRESS_INTERVAL


@pytest.mark.parametrize("asked", [True, False])
def test_a_test_that_finds_the_collective_incomplete_yields_only_where_the_user_asked(monkeypatch, asked):
    """``while not request.Test()`` must not spin on a shared core when the user asked MPI to yield."""
    from sparsecoll.execute import waiting
    yields = []
    monkeypatch.setattr(waiting, "YIELDING", asked)
    monkeypatch.setattr(waiting, "_yield", lambda: yields.append(1))
    inbox, outbox = numpy.zeros(2), numpy.ones(1)
    receives = [MPI.COMM_SELF.Recv_init(inbox[i:i + 1], source=0, tag=7 + i) for i in range(2)]
    for stages in ([receives[:1]], [receives[:1], receives[1:]]):  # MPI alone; the engine
        single = stages[0] if len(stages) == 1 else None
        request = PersistentRequest(lambda stages=stages: iter(stages), single=single, persistent=True)
        request.Start()
        assert not request.Test() and not request.Test()
        sends = [MPI.COMM_SELF.Isend(outbox, dest=0, tag=7 + i) for i in range(len(stages))]
        assert request.Wait() and inbox[:len(stages)].tolist() == [1.0] * len(stages)
        MPI.Request.Waitall(sends)
        inbox[:] = 0.0
        request.Free()
    for receive in receives:
        receive.Free()
    assert len(yields) == (4 if asked else 0)


def test_the_inlined_size_class_is_the_model_s():
    """quick_size_class inlines model.choice.size_class (a call costs 0.1 us on the settled path);
    both must give every block size the same class, past the last class too."""
    from sparsecoll.model.choice import CLASSES, size_class
    sizes = sorted({0, 1, 2, 3} | {2 ** k + d for k in range(CLASSES + 2) for d in (-1, 0, 1)} - {-1})
    for block in sizes:
        for indegree in (1, 3):
            # a spec's class comes from its count (the array's size matters to the call, not here)
            assert quick_size_class([numpy.zeros(1), block, MPI.BYTE], indegree) == size_class(block), block
            if block <= 2 ** 22:
                array = numpy.zeros(block * indegree, dtype=numpy.uint8)
                assert quick_size_class(array, indegree) == size_class(block), (block, indegree)


class _Executor:
    """An idle executor of a pool: records its release; ``on_free`` plays another thread's step."""

    def __init__(self, freed, on_free=None):
        self._freed, self._on_free = freed, on_free

    def free(self):
        self._freed.append(self)
        if self._on_free is not None:
            self._on_free()


def test_freeing_a_pool_leaves_alone_an_executor_a_call_took_meanwhile():
    """Pools are used without the engine's lock: a call may pop an executor while another thread
    frees the pool (``release_caches``); the executor it took is its own, never freed under it."""
    from sparsecoll.runtime.communicator import _free_pool

    freed, taken = [], []
    pool = {}
    pool[1] = _Executor(freed, on_free=lambda: taken.append(pool.pop(2)))  # the call pops channel 2
    pool[2] = _Executor(freed, on_free=lambda: taken.append(pool.pop(1)))  # or channel 1
    _free_pool(pool)
    assert len(freed) == 1 and len(taken) == 1 and taken[0] not in freed and not pool


def test_a_recall_survives_the_entry_dropped_by_another_thread():
    """``Recent.recall`` runs without the engine's lock on the usual nonblocking call: an entry
    dropped between its look-up and its move to the end still gives the value it found."""
    from sparsecoll.runtime.caches import Recent

    class DroppedMeanwhile(Recent):
        def get(self, key, default=None):
            value = super().get(key, default)
            self.pop(key, None)  # another thread's release_caches, between the two steps
            return value

    cache = DroppedMeanwhile()
    cache.keep("key", "value")
    assert cache.recall("key") == "value"


def test_a_nonblocking_call_in_flight_keeps_its_executor_through_release_caches():
    """A call running an executor of the idle pool when the pool is dropped completes, delivers,
    and frees that executor (it is not parked in a dropped pool); the next call binds afresh."""
    import sparsecoll

    graph = MPI.COMM_SELF.Create_dist_graph_adjacent([0, 0], [0, 0])
    comm = sparsecoll.wrap(graph, "direct")
    try:
        send, recv = numpy.arange(4, dtype="i4"), numpy.zeros(4, "i4")
        for _ in range(2 * NONBLOCKING_CHANNELS):  # every channel has an idle executor
            comm.Ineighbor_alltoall(send, recv).Wait()
        runtime = comm._sc_runtime
        assert runtime.cache_sizes()["idle_executors"] == NONBLOCKING_CHANNELS
        request = comm.Ineighbor_alltoall(send + 10, recv)
        comm.release_caches()
        assert runtime.cache_sizes()["idle_executors"] == 0
        request.Wait()
        assert recv.tolist() == [10, 11, 12, 13]
        assert runtime.cache_sizes()["idle_executors"] == 0
        bound = comm.schedules_bound
        comm.Ineighbor_alltoall(send, recv).Wait()
        assert recv.tolist() == [0, 1, 2, 3] and comm.schedules_bound == bound + 1
    finally:
        comm.Free()


class _Recorded:
    """A persistent request that records its calls in a shared log and completes at once."""

    def __init__(self, name: str, log: list):
        self.name, self.log = name, log

    def Start(self):
        self.log.append(("Start", self.name))

    def Wait(self, status=None):
        self.log.append(("Wait", self.name))
        return True

    def Test(self, status=None):
        self.log.append(("Test", self.name))
        return True

    def Get_status(self, status=None):
        return True

    def Free(self):
        self.log.append(("Free", self.name))


@pytest.mark.parametrize("win, winner", [(1e9, "choice"), (0.0, "library")])
def test_a_checked_request_alternates_then_keeps_the_winner(win, winner):
    """The online check of a persistent request: its warm-up and timed runs alternate the choice and
    the library (choice first), this rank's times of the timed runs alone are agreed at the next
    start, which runs the library's request; then the loser is freed and the request calls the
    winner's methods directly."""
    from sparsecoll.runtime.online_check import CheckedRequest, Verdict

    log, posted = [], []

    def post(times):
        posted.append(list(times))
        return Verdict(MPI.COMM_SELF, times, win, 3, "choice", tag=1)
    requests = [_Recorded("choice", log), _Recorded("library", log)]
    request = CheckedRequest(requests, post, warmup_pairs=1, timed_pairs=2)
    runs = []
    for run in range(7):
        request.Start()
        runs.append(log[-1][1])
        if run % 2:
            assert request.Test()
        else:
            request.Wait()
    assert runs == ["choice", "library"] * 3 + ["library"]
    assert len(posted) == 1 and len(posted[0]) == 4 and all(t >= 0 for t in posted[0])
    assert request.verdict.done and request.winner == (0 if winner == "choice" else 1)
    loser = "library" if winner == "choice" else "choice"
    assert log[-1] == ("Free", loser)
    kept = requests[0 if winner == "choice" else 1]
    assert request.Start.__self__ is kept and request.Wait.__self__ is kept  # no frame of the check
    request.Start()
    request.Wait()
    assert log[-2:] == [("Start", winner), ("Wait", winner)]
    request.Free()
    assert log[-1] == ("Free", winner) and request == MPI.REQUEST_NULL and not request
    with pytest.raises(MPI.Exception):
        request.Free()


def test_a_checked_request_refuses_a_second_start_and_frees_both_before_its_verdict():
    """Start on an active run raises; Free of an active run completes it, then frees both requests;
    Wait on an inactive request returns at once, with MPI's empty status, and a status that is not
    one is refused by name. The rest of the request protocol is ScheduleRequest's: Cancel refused,
    a live request neither copied nor pickled, a freed one MPI.REQUEST_NULL's equal whose Free,
    Start and Cancel raise ERR_REQUEST and whose lowercase ``free`` does nothing."""
    import copy
    import pickle

    from sparsecoll.runtime.online_check import CheckedRequest

    log = []
    request = CheckedRequest([_Recorded("choice", log), _Recorded("library", log)], None, 1, 1)
    status = MPI.Status()
    assert request.Wait(status) and status.Get_source() == MPI.ANY_SOURCE
    with pytest.raises(TypeError, match="status"):
        request.Test(status=3)
    request.Start()
    with pytest.raises(RuntimeError, match="active"):
        request.Start()
    with pytest.raises(RuntimeError, match="cannot be cancelled"):
        request.Cancel()
    for duplicate in (copy.copy, pickle.dumps):
        with pytest.raises(ValueError, match="serialize"):
            duplicate(request)
    request.Free()
    assert log == [("Start", "choice"), ("Wait", "choice"), ("Free", "choice"), ("Free", "library")]
    for refused in (request.Free, request.Start, request.Cancel):
        with pytest.raises(MPI.Exception) as caught:
            refused()
        assert caught.value.Get_error_class() == MPI.ERR_REQUEST
    request.free()
    assert request == MPI.REQUEST_NULL and copy.deepcopy(request) == MPI.REQUEST_NULL


@pytest.mark.parametrize("recv, expected", [
    (numpy.zeros(63, dtype="u1"), "library"),          # a plain array under the limit
    (numpy.zeros(64, dtype="u1"), "method"),           # at the limit: the class the library does not hold
    (numpy.zeros((4, 8), dtype="f8"), "method"),       # 256 bytes, whatever the shape
    (numpy.zeros((2, 3), dtype="f8"), "library"),      # 48 bytes
    ([numpy.zeros(8, dtype="u1"), MPI.BYTE], "library"),           # a buffer spec: 2 blocks of 4 bytes
    ((numpy.zeros(100, dtype="u1"), 8, MPI.BYTE), "library"),      # its count says 2 x 8 bytes, whatever the array
    ((numpy.zeros(100, dtype="u1"), 32, MPI.BYTE), "method"),      # 2 x 32 bytes: at the limit
    ((numpy.zeros(8, dtype="u1"), 2048, MPI.BYTE), "method"),      # blocks past a small array: their size decides
    ([MPI.BOTTOM, 8, MPI.BYTE], "library"),            # absolute addresses: the count says
    ([numpy.zeros(64, dtype="u1"), (8, 0), MPI.BYTE], "method"),   # a spec the rule cannot read: the parse
    (bytearray(8), "method"),                          # not an array: the parse decides
    ([], "method"),
    ([bytearray(8), MPI.BYTE], "method"),
])
def test_the_library_shortcut_sends_only_calls_receiving_under_its_limit_to_the_library(recv, expected):
    """A call goes to the library's method only where it receives fewer bytes than the limit: a
    NumPy receive array's bytes, or a buffer spec's block bytes (:func:`spec_block_bytes`) times the
    in-degree (2 here); anything else takes the parse. A spec's array used to decide: a rank whose
    2 KiB blocks reach past an 8-byte view ran the library while ranks that passed the whole array
    ran the table's choice for 2 KiB, and every rank waited for good (auto, 3 ranks)."""
    ran = []
    shortcut = library_shortcut({"blocking": 64, "nonblocking": 0}, "blocking",
                                lambda s, r: ran.append(("library", s, r)), lambda s, r: ran.append(("method", s, r)),
                                indegree=2)
    send = numpy.ones(8, dtype="u1")
    shortcut(send, recv)
    assert len(ran) == 1 and ran[0][0] == expected and ran[0][1] is send and ran[0][2] is recv


@pytest.mark.parametrize("text", ["abc", "nan", "inf", "-1", "-0.5", "0"])
def test_a_bad_progress_interval_is_a_value_error_naming_the_variable(text):
    """``float()`` raised an unnamed ValueError at ``import sparsecoll`` for text, and took ``nan``,
    ``inf`` and ``-1`` (the thread never stepped in: a wait of -1 is forever, nan compares false)
    and other negative values (the thread spun without sleeping)."""
    from sparsecoll.runtime.progress import interval_setting
    with pytest.raises(ValueError, match="SPARSECOLL_PROGRESS_INTERVAL"):
        interval_setting(text)
    assert interval_setting(None) == interval_setting(" ") == 0.002 and interval_setting("0.01") == 0.01


@pytest.mark.parametrize("text", ["off", "OFF", "False", "No", " 0 ", "2", "abc"])
def test_progress_thread_setting_takes_the_usual_spellings_or_names_the_variable(text):
    """``SPARSECOLL_PROGRESS_THREAD``: only ``0``, ``false`` and ``no`` turned the thread off; ``off``,
    ``False``, ``NO`` or `` 0 `` silently left it on, as did any other text."""
    from sparsecoll.runtime.progress import thread_setting
    if text.strip().lower() in ("off", "false", "no", "0"):
        assert thread_setting(text) is False
    else:
        with pytest.raises(ValueError, match="SPARSECOLL_PROGRESS_THREAD"):
            thread_setting(text)
    assert thread_setting(None) is thread_setting("") is thread_setting("1") is thread_setting("On") is True
