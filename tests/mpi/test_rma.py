"""The RMA executors (SC12 II-C, III-B): canary collisions, zero-size and staged messages,
restarts of persistent requests, nonblocking calls that never wait for a peer, the collective
fallback, and the deterministic counts of a run.

Runs on every rank (launched by ``tests/test_mpi.py``); conformance and the adversarial
programs cover the executors on every algorithm besides.
"""

from __future__ import annotations

import weakref

import numpy
import pytest
from mpi4py import MPI

import sparsecoll
from sparsecoll.execute import rma
from sparsecoll.runtime.progress import run_stages

from . import cases

WORLD = MPI.COMM_WORLD
RANK, SIZE = WORLD.Get_rank(), WORLD.Get_size()
RMA_EXECUTORS = ("rma", "rma_canary")
#: float64 whose bits are the canary word
CANARY_DOUBLE = numpy.array([rma.CANARY], dtype=numpy.uint64).view(numpy.float64)[0]


@pytest.fixture
def ring():
    """A periodic 1-D Cartesian communicator (2 neighbors per rank, one rank: itself twice)."""
    comm = WORLD.Create_cart([SIZE], periods=[True])
    yield comm
    comm.Free()


@pytest.fixture
def moore():
    """A periodic 2-D Moore neighborhood (8 offsets; multi-step on the cartesian algorithm)."""
    dims = MPI.Compute_dims(SIZE, 2)
    offsets = [(a, b) for a in (-1, 0, 1) for b in (-1, 0, 1) if (a, b) != (0, 0)]
    comm = sparsecoll.cart_neighborhood_create(WORLD, dims, [True, True], offsets, algorithm="direct")
    yield comm
    comm.Free()


def _blocks(comm, per_block: int, salt: int, canary_tail: bool):
    """A send array of one float64 block per out-edge, rank- and salt-unique values; with
    ``canary_tail`` the last element of every block has the canary's bits."""
    outdegree = comm.neighborhood.outdegree
    send = numpy.array([RANK * 1000 + k + salt * 0.5 for k in range(outdegree * per_block)], dtype=numpy.float64)
    if canary_tail and per_block:
        send[per_block - 1::per_block] = CANARY_DOUBLE
    return send


def _library_alltoall(comm, send, per_block: int):
    recv = numpy.full(comm.neighborhood.indegree * per_block, -1.0)
    plain = type(comm).__mro__[[c.__module__ for c in type(comm).__mro__].index("mpi4py.MPI")]
    plain(comm).Neighbor_alltoall(send, recv)
    return recv


def _alltoall_matches_library(comm, per_block: int) -> bool:
    """One blocking alltoall of :func:`_blocks` through ``comm``, compared with the library's."""
    send = _blocks(comm, per_block, 0, False)
    recv = numpy.full(comm.neighborhood.indegree * per_block, -1.0)
    comm.Neighbor_alltoall(send, recv)
    return recv.tobytes() == _library_alltoall(comm, send, per_block).tobytes()


def _agree(failures):
    everyone = WORLD.allgather(failures[:3])
    assert not any(everyone), everyone


@pytest.mark.parametrize("algorithm", ["direct", "cartesian"])
@pytest.mark.parametrize("per_block", [0, 1, 3])
def test_canary_collision_and_zero_size_blocks(moore, algorithm, per_block):
    """User data whose last 8 bytes equal the canary arrives (the flag word completes it) on
    every form, one-step (direct) and multi-step (cartesian) schedules, 0, 1 and 3 doubles."""
    comm = sparsecoll.wrap(moore, algorithm, executor="rma_canary")
    failures = []
    request = None
    for salt, canary_tail in enumerate((True, False, True)):
        send = _blocks(comm, per_block, salt, canary_tail)
        expected = _library_alltoall(comm, send, per_block)
        for form in ("blocking", "nonblocking", "persistent"):
            recv = numpy.full(comm.neighborhood.indegree * per_block, -1.0)
            if form == "blocking":
                comm.Neighbor_alltoall(send, recv)
            elif form == "nonblocking":
                comm.Ineighbor_alltoall(send, recv).Wait()
            else:
                request = comm.Neighbor_alltoall_init(send, recv)
                request.Start()
                while not request.Test():
                    pass
                request.Free()
            if recv.tobytes() != expected.tobytes():
                failures.append(f"{algorithm} {form} salt={salt} rank {RANK}: {recv} != {expected}")
    _agree(failures)


def test_the_flag_word_is_set_exactly_for_colliding_tails(ring):
    """A run counts the flag words it set: every message on canary tails, none otherwise."""
    comm = sparsecoll.wrap(ring, "direct", executor="rma_canary")
    for canary_tail, expected in ((True, 2), (False, 0)):
        send = _blocks(comm, 2, 0, canary_tail)
        recv = numpy.full(4, -1.0)
        executor = comm.runtime.requests_for(comm.runtime.bind_uncached(comm.plan, "alltoall", send, recv),
                                             "rma_canary")
        try:
            run_stages(executor.steps)
            assert executor.steps[0].flagged == expected
            assert recv.tobytes() == _library_alltoall(comm, send, 2).tobytes()
        finally:
            executor.free()


@pytest.mark.parametrize("executor", RMA_EXECUTORS)
def test_counts_of_a_run_are_deterministic(ring, executor):
    """One step, one RTR per distinct peer, one put per neighbor, every byte put once."""
    comm = sparsecoll.wrap(ring, "direct", executor=executor)
    send, recv = numpy.zeros(2 * 3), numpy.zeros(2 * 3)
    built = comm.runtime.requests_for(comm.runtime.bind_uncached(comm.plan, "alltoall", send, recv), executor)
    try:
        counts = built.counts()
    finally:
        built.free()
    peers = len({(RANK - 1) % SIZE, (RANK + 1) % SIZE} - {RANK})  # a rank sends itself no RTR
    assert counts["steps"] == 1 and counts["puts"] == 2 and counts["bytes_put"] == 2 * 3 * 8
    assert counts["rtr_sent"] == counts["rtr_received"] == peers
    assert counts["rtr_tree_depth"] == (1 if peers else 0)
    assert counts["staged_receives"] == counts["staged_sends"] == 0
    if executor == "rma":
        assert counts["epochs"] == 2
    else:
        assert counts["flag_only_receives"] == 0
    stats = comm.plan_stats("alltoall")
    assert stats["executor"] == executor
    names = ("rtr_sent", "rtr_received", "rtr_received_as_sender", "rtr_tree_depth")
    assert {key: stats[key] for key in names} == {key: counts[key] for key in names}


def _complete_graph():
    """Every rank sends to every rank, itself included (an alltoall: the widest RTR fan-in)."""
    return WORLD.Create_dist_graph_adjacent(list(range(SIZE)), list(range(SIZE)))


@pytest.mark.parametrize("executor", RMA_EXECUTORS)
@pytest.mark.parametrize("degree", [1, 2, 3])
def test_rtr_tree_counts_and_results(executor, degree):
    """SC12 II-C2 on the complete graph: a sender receives min(degree, P-1) RTR messages instead
    of P-1, its tree is as deep as a complete degree-ary tree over P-1 receivers, every rank
    sends one RTR per sender that puts into it, and what is sent is what is received."""
    raw = _complete_graph()
    comm = sparsecoll.wrap(raw, "direct", executor=executor, executor_options={"rtr_tree": degree})
    try:
        send = _blocks(comm, 3, 5, executor == "rma_canary")
        recv = numpy.full(SIZE * 3, -1.0)
        comm.Neighbor_alltoall(send, recv)
        assert recv.tobytes() == _library_alltoall(comm, send, 3).tobytes()
        stats = comm.plan_stats("alltoall")
        others = SIZE - 1
        depth, reach, width = 0, 0, 1
        while reach < others:
            width *= degree
            reach += width
            depth += 1
        assert stats["rtr_tree_depth"] == depth and stats["rtr_tree"] == degree and stats["rtr_trees_built"]
        other = sparsecoll.wrap(raw, "direct", executor=executor, executor_options={"rtr_tree": degree + 1})
        early = other.plan_stats("alltoall")  # before its first call: the degree, not the trees' numbers
        assert early["rtr_tree"] == degree + 1 and early["rtr_trees_built"] is False and "rtr_sent" not in early
        assert stats["rtr_sent"] == others and stats["rtr_received_as_sender"] == min(degree, others)
        everyone = WORLD.allgather((stats["rtr_sent"], stats["rtr_received"]))
        assert sum(sent for sent, _ in everyone) == sum(received for _, received in everyone) == SIZE * others
        built = comm.runtime.requests_for(comm.runtime.bind_uncached(comm.plan, "alltoall", send, recv), executor)
        try:
            assert built.counts()["rtr_received"] == others  # without the tree: one per receiver
        finally:
            built.free()
    finally:
        comm.Free()  # the handle (shared with raw) and sparsecoll's duplicate


@pytest.mark.parametrize("bad, error", [({"rtr_tree": 0}, ValueError), ({"rtr_tree": "2"}, TypeError),
                                        ({"rtr_depth": 2}, ValueError), ([("rtr_tree", 2)], TypeError)])
def test_bad_executor_options_raise_at_wrap(ring, bad, error):
    with pytest.raises(error, match="executor_options"):
        sparsecoll.wrap(ring, "direct", executor="rma", executor_options=bad)
    with pytest.raises(ValueError, match="executor_options"):
        sparsecoll.wrap(ring, "direct", executor="steps", executor_options={"rtr_tree": 2})


def test_a_run_that_raises_gives_up_its_turn(ring, monkeypatch):
    """A run whose puts raise (on every rank) detaches and ends its turn: the next call on the
    window runs instead of waiting forever behind it."""
    comm = sparsecoll.wrap(ring, "direct", executor="rma_canary")
    send = _blocks(comm, 2, 0, False)
    recv = numpy.full(comm.neighborhood.indegree * 2, -1.0)
    comm.Neighbor_alltoall(send, recv)  # the window exists

    def refuse(run, step):
        raise MPI.Exception(MPI.ERR_RMA_SYNC)
    monkeypatch.setattr(rma.RmaRun, "_put", refuse)
    with pytest.raises(MPI.Exception):
        comm.Neighbor_alltoall(send, numpy.full(comm.neighborhood.indegree * 2, -1.0))
    monkeypatch.undo()
    WORLD.Barrier()
    again = numpy.full(comm.neighborhood.indegree * 2, -1.0)
    comm.Neighbor_alltoall(_blocks(comm, 2, 1, False), again)
    assert again.tobytes() == _library_alltoall(comm, _blocks(comm, 2, 1, False), 2).tobytes()


@pytest.mark.parametrize("executor", RMA_EXECUTORS)
def test_restarts_and_two_requests_over_one_receive_buffer(moore, executor):
    """Persistent requests restarted with new contents; two of them over the same receive
    array alive at once and run in turn (each run attaches its memory, so they never attach
    the same memory together)."""
    comm = sparsecoll.wrap(moore, "cartesian", executor=executor)
    per_block = 2
    send_a, send_b = _blocks(comm, per_block, 0, False), _blocks(comm, per_block, 1, False)
    recv = numpy.full(comm.neighborhood.indegree * per_block, -1.0)
    first = comm.Neighbor_alltoall_init(send_a, recv)
    second = comm.Neighbor_alltoall_init(send_b, recv)
    failures = []
    try:
        for salt in range(6):
            request, send = (first, send_a) if salt % 2 == 0 else (second, send_b)
            send[:] = _blocks(comm, per_block, salt, salt == 3)
            request.Start()
            request.Wait()
            if recv.tobytes() != _library_alltoall(comm, send, per_block).tobytes():
                failures.append(f"restart {salt} rank {RANK}")
    finally:
        first.Free()
        second.Free()
    _agree(failures)


@pytest.mark.parametrize("waits", ["together", "in start order"])
@pytest.mark.parametrize("executor", RMA_EXECUTORS)
def test_persistent_requests_started_in_different_orders_on_different_ranks(moore, executor, waits):
    """Even ranks start A then B, odd ranks B then A, and wait together or each in its own start
    order: legal (MPI-4.1 section 7.4.4 lets an implementation assume one start order only under
    the info key mpi_assert_strict_persistent_collective_ordering). Both runs shared the
    handle's window, in start order, and hung; each request now has a window of its own."""
    comm = sparsecoll.wrap(moore, "cartesian", executor=executor)
    per_block = 2
    send_a, send_b = _blocks(comm, per_block, 0, False), _blocks(comm, per_block, 1, True)
    recv_a, recv_b = (numpy.full(comm.neighborhood.indegree * per_block, -1.0) for _ in range(2))
    first_made, second_made = comm.Neighbor_alltoall_init(send_a, recv_a), comm.Neighbor_alltoall_init(send_b, recv_b)
    order = (first_made, second_made) if RANK % 2 == 0 else (second_made, first_made)
    try:
        for _ in range(3):
            for request in order:
                request.Start()
            if waits == "together":
                sparsecoll.waitall(list(order))
            else:
                for request in order:
                    request.Wait()
    finally:
        first_made.Free()
        second_made.Free()
    failures = [name for name, send, recv in (("A", send_a, recv_a), ("B", send_b, recv_b))
                if recv.tobytes() != _library_alltoall(comm, send, per_block).tobytes()]
    _agree(failures)


@pytest.mark.parametrize("executor", RMA_EXECUTORS)
def test_a_persistent_start_and_a_nonblocking_call_in_different_orders(ring, executor):
    """Rank 0 starts its persistent request before its nonblocking call, the others after: the
    persistent run has its own window, so neither waits behind the other."""
    comm = sparsecoll.wrap(ring, "direct", executor=executor)
    send_p, send_n = _blocks(comm, 3, 2, False), _blocks(comm, 3, 3, False)
    recv_p, recv_n = (numpy.full(comm.neighborhood.indegree * 3, -1.0) for _ in range(2))
    comm.Neighbor_alltoall(send_n, recv_n)  # the first call of a collective agrees on its plan
    persistent = comm.Neighbor_alltoall_init(send_p, recv_p)
    if RANK == 0:
        persistent.Start()
        call = comm.Ineighbor_alltoall(send_n, recv_n)
    else:
        call = comm.Ineighbor_alltoall(send_n, recv_n)
        persistent.Start()
    persistent.Wait()
    call.Wait()
    persistent.Free()
    assert recv_p.tobytes() == _library_alltoall(comm, send_p, 3).tobytes()
    assert recv_n.tobytes() == _library_alltoall(comm, send_n, 3).tobytes()


@pytest.mark.parametrize("executor", RMA_EXECUTORS)
def test_request_windows_are_freed_once_every_rank_freed_its_request(ring, executor):
    """``Request.Free`` is local and ``Win_free`` collective: a freed request's window is freed at
    the next init after every rank freed it. Rank 0 frees each request before the next init, the
    others after it, so each window outlives one init and no more."""
    comm = sparsecoll.wrap(ring, "direct", executor=executor)
    windows = comm.runtime.prepared_executor(executor).factory.requests
    send = _blocks(comm, 1, 4, False)
    recv = numpy.full(comm.neighborhood.indegree, -1.0)
    earlier, open_after_init, failures = None, [], []
    for _ in range(5):
        if earlier is not None and RANK == 0:
            earlier.Free()
        request = comm.Neighbor_alltoall_init(send, recv)
        open_after_init.append(len(windows.entries))
        if earlier is not None and RANK != 0:
            earlier.Free()
        request.Start()
        request.Wait()
        if recv.tobytes() != _library_alltoall(comm, send, 1).tobytes():
            failures.append("data")
        earlier = request
    earlier.Free()
    expected = [1, 2, 2, 2, 2] if SIZE > 1 else [1, 1, 1, 1, 1]
    if open_after_init != expected:
        failures.append(f"windows open after each init {open_after_init}, expected {expected}")
    _agree(failures)


@pytest.mark.parametrize("executor", RMA_EXECUTORS)
def test_requests_past_the_window_limit_run_on_the_step_executor(moore, executor, monkeypatch):
    """Each window takes a communicator context (MPICH hung once about 2000 were spent), so past
    MAX_REQUEST_WINDOWS live requests the next ones run on the step executor; started in
    different orders on different ranks, every request still delivers; ``plan_stats`` counts them."""
    monkeypatch.setattr(rma, "MAX_REQUEST_WINDOWS", 2)
    comm = sparsecoll.wrap(moore, "cartesian", executor=executor)
    windows = comm.runtime.prepared_executor(executor).factory.requests
    sends = [_blocks(comm, 2, salt, False) for salt in range(4)]
    recvs = [numpy.full(comm.neighborhood.indegree * 2, -1.0) for _ in range(4)]
    requests = [comm.Neighbor_alltoall_init(send, recv) for send, recv in zip(sends, recvs)]
    try:
        assert len(windows.entries) == 2
        assert comm.plan_stats("alltoall")["request_windows"] == {"open": 2, "requests_on_steps": 2, "limit": 2}
        for request in requests if RANK % 2 == 0 else requests[::-1]:
            request.Start()
        sparsecoll.waitall(requests)
    finally:
        for request in requests:
            request.Free()
    failures = [k for k, (send, recv) in enumerate(zip(sends, recvs))
                if recv.tobytes() != _library_alltoall(comm, send, 2).tobytes()]
    _agree(failures)


def test_a_request_window_failing_on_one_rank_runs_that_request_on_the_step_executor(ring, monkeypatch):
    """Where one request's window cannot be made on some rank, every rank runs that request on
    the step executor (the handle's window and its calls are untouched)."""
    comm = sparsecoll.wrap(ring, "direct", executor="rma")
    assert _alltoall_matches_library(comm, 2)  # the handle's window exists
    if RANK == SIZE - 1:
        made = rma.create_window

        def refuse(comm):
            made(comm)
            raise MPI.Exception(MPI.ERR_WIN)
        monkeypatch.setattr(rma, "create_window", refuse)
    send = _blocks(comm, 2, 5, False)
    recv = numpy.full(comm.neighborhood.indegree * 2, -1.0)
    request = comm.Neighbor_alltoall_init(send, recv)
    request.Start()
    request.Wait()
    request.Free()
    assert recv.tobytes() == _library_alltoall(comm, send, 2).tobytes()
    assert comm.runtime.prepared_executor("rma").factory.requests.entries == []
    monkeypatch.undo()
    assert _alltoall_matches_library(comm, 2)


@pytest.mark.parametrize("form", ["nonblocking", "persistent"])
@pytest.mark.parametrize("executor", RMA_EXECUTORS)
def test_start_and_test_never_wait_for_a_peer(ring, executor, form):
    """Rank 0 starts the call, tests it once and only then sends to rank 1, which receives
    before it makes the call: ``Ineighbor``/``Start`` and ``Test`` must not wait for rank 1."""
    if SIZE < 2:
        pytest.skip("needs 2 ranks")
    comm = sparsecoll.wrap(ring, "direct", executor=executor)
    send = _blocks(comm, 4, 7, False)
    recv = numpy.full(comm.neighborhood.indegree * 4, -1.0)
    comm.Neighbor_alltoall(send, recv)  # the first call of a collective agrees on its plan
    token = numpy.zeros(1 << 17)  # 1 MiB: the library's rendezvous, not an eager send
    request = comm.Neighbor_alltoall_init(send, recv) if form == "persistent" else None
    if RANK == 0:
        request = comm.Ineighbor_alltoall(send, recv) if request is None else request
        if form == "persistent":
            request.Start()
        request.Test()
        WORLD.Send(token, dest=1, tag=77)
        request.Wait()
    else:
        if RANK == 1:
            WORLD.Recv(token, source=0, tag=77)
        request = comm.Ineighbor_alltoall(send, recv) if request is None else request
        if form == "persistent":
            request.Start()
        request.Wait()
    if form == "persistent":
        request.Free()
    assert recv.tobytes() == _library_alltoall(comm, send, 4).tobytes()


def _completions_seen_one_test_late():
    """``MPI.Request.Testall`` that reports every list of requests incomplete once at the first test
    that completes it (the next test finds them inactive, so complete): what a loaded rank sees
    when a request's completion is processed in the test that reports it (Open MPI's ``Testall``
    progresses, then answers from what it found before)."""
    late = set()

    def testall(requests):
        if not MPI.Request.Testall(requests):
            return False
        key = tuple(id(request) for request in requests)
        if key in late:
            late.discard(key)
            return True
        late.add(key)
        return False
    return testall


@pytest.mark.timeout(60)
@pytest.mark.parametrize("form", ["nonblocking", "persistent"])
@pytest.mark.parametrize("degree", [None, 1])
def test_a_step_whose_rtes_arrived_before_its_rtr_sends_completed(ring, form, degree, monkeypatch):
    """A PSCW step's exposure epoch ends at the first ``Win.Test`` that succeeds; a test of the
    run that then found the step's RTR sends incomplete returned, and the next test called
    ``Win.Test`` again with no epoch open: ``MPI_ERR_RMA_SYNC`` on that rank, which then left the
    collective (in the conformance suite under Open MPI at 4 ranks, the other ranks hung). Here
    every completion is seen one test late."""
    options = {} if degree is None else {"executor_options": {"rtr_tree": degree}}
    comm = sparsecoll.wrap(ring, "direct", executor="rma", **options)
    send = _blocks(comm, 2, 0, False)
    recv = numpy.full(comm.neighborhood.indegree * 2, -1.0)
    comm.Neighbor_alltoall(send, recv)  # the first call of a collective agrees on its plan
    request = comm.Neighbor_alltoall_init(send, recv) if form == "persistent" else None
    failures = []
    try:
        with monkeypatch.context() as late:  # undone before the Free below, leaving the autouse fixtures' patches
            late.setattr(rma, "_Testall", _completions_seen_one_test_late())
            for salt in range(3):
                send[:] = _blocks(comm, 2, salt, False)
                recv[:] = -1.0
                if form == "persistent":
                    request.Start()
                else:
                    request = comm.Ineighbor_alltoall(send, recv)
                try:
                    while not request.Test():
                        pass
                except MPI.Exception as error:
                    failures.append(f"salt {salt} rank {RANK}: {error.Get_error_string()}")
                    break
                if recv.tobytes() != _library_alltoall(comm, send, 2).tobytes():
                    failures.append(f"salt {salt} rank {RANK}: {recv}")
    finally:
        if form == "persistent":
            request.Free()
    _agree(failures)


def test_a_window_failing_on_one_rank_falls_back_on_every_rank(ring, monkeypatch):
    """Where the window cannot be made on some rank, every rank runs the step executor and
    says so in plan_stats."""
    if RANK == SIZE - 1:
        made = rma.create_window

        def refuse(comm):
            made(comm)  # creation is collective: take part, then fail as a library would
            raise MPI.Exception(MPI.ERR_WIN)
        monkeypatch.setattr(rma, "create_window", refuse)
    comm = sparsecoll.wrap(ring, "direct", executor="rma")
    assert _alltoall_matches_library(comm, 2)
    label = comm.plan_stats("alltoall")["executor"]
    assert label.startswith("steps (rma fallback: "), label
    assert WORLD.allgather(label.startswith("steps")) == [True] * SIZE


class _LockRefused:
    """A window whose ``Lock_all`` fails as a library's could (everything else: the window's)."""

    def __init__(self, window):
        self.window = window

    def Lock_all(self):
        raise MPI.Exception(MPI.ERR_WIN)

    def __getattr__(self, name):
        return getattr(self.window, name)


def test_windows_made_everywhere_are_freed_when_a_later_step_fails(ring, monkeypatch):
    """The canary's window is made on every rank and ``Lock_all`` fails on one: every rank
    falls back and the windows are freed together (not left behind)."""
    made = rma.create_window
    windows = []

    def create(comm):
        windows.append(made(comm))
        return _LockRefused(windows[-1]) if RANK == SIZE - 1 else windows[-1]
    monkeypatch.setattr(rma, "create_window", create)
    comm = sparsecoll.wrap(ring, "direct", executor="rma_canary")
    assert _alltoall_matches_library(comm, 2)
    assert comm.plan_stats("alltoall")["executor"].startswith("steps (rma_canary fallback: ")
    assert len(windows) == 1 and windows[0] == MPI.WIN_NULL


@pytest.mark.timeout(60)
@pytest.mark.parametrize("form", ["blocking", "nonblocking", "persistent"])
@pytest.mark.parametrize("executor", RMA_EXECUTORS)
def test_staging_copies_never_meet_the_programs_receives_on_comm_self(ring, executor, form):
    """A strided datatype makes the executors stage (pack and unpack through messages to self).
    Those went over the program's ``MPI.COMM_SELF``, where a receive it had posted (``ANY_TAG``)
    took one of them and the collective hung; they now go over sparsecoll's private communicator,
    and the program's receive gets the program's message."""
    strided = MPI.INT64_T.Create_vector(2, 1, 2).Commit()  # two int64 with a gap: staged
    comm = sparsecoll.wrap(ring, "direct", executor=executor)
    mailbox = numpy.full(4, -1, dtype="i8")
    posted = MPI.COMM_SELF.Irecv(mailbox, MPI.ANY_SOURCE, MPI.ANY_TAG)
    try:
        send = numpy.arange(8, dtype="i8") + 100 * RANK
        received = []
        for run in (comm, ring):
            recv = numpy.full(8, -1, dtype="i8")
            cases.run_call(run, "alltoallw", "blocking" if run is ring else form,
                           [send, [1, 1], [0, 32], [strided] * 2], [recv, [1, 1], [0, 32], [strided] * 2])
            received.append(recv)
        assert received[0].tobytes() == received[1].tobytes()
        assert not posted.Test()  # nothing of sparsecoll's reached the program's receive
        MPI.COMM_SELF.Send(numpy.array([7, 8, 9, 10], dtype="i8"), 0, 5)
        posted.Wait()
        assert mailbox.tolist() == [7, 8, 9, 10]
    finally:
        if not posted.Test():
            posted.Cancel()
            posted.Wait()
        strided.Free()  # (the fixture frees the handle, and sparsecoll's communicators with it)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("executor", RMA_EXECUTORS + ("steps",))
def test_large_struct_blocks_staged_by_messages_to_self(ring, executor):
    """Blocks of 1000 struct{char, double} (9 KiB): the RMA executors stage them by a message to
    self sent as ``MPI_PACKED`` and received as the struct type, which MPICH 5.0.2 refuses on a
    communicator of several ranks past about 8 KiB ("signature does not match"; a raw
    ``Sendrecv`` to self on ``COMM_WORLD`` fails alike) though MPI allows it; such messages go
    over a one-rank duplicate of ``COMM_SELF`` now. Every rank raised. The data is the library's."""
    unit = MPI.Datatype.Create_struct([1, 1], [0, 8], [MPI.CHAR, MPI.DOUBLE]).Commit()
    try:
        count = 1000
        send = (numpy.arange(count * 16) * 13 + 7 * RANK).astype(numpy.uint8)
        expected = numpy.full(2 * count * 16, 0xA5, numpy.uint8)
        ring.Neighbor_allgather([send, count, unit], [expected, count, unit])
        comm = sparsecoll.wrap(ring, "direct", executor=executor)
        got = numpy.full_like(expected, 0xA5)
        comm.Neighbor_allgather([send, count, unit], [got, count, unit])
        assert got.tobytes() == expected.tobytes()
    finally:
        unit.Free()


class _WindowWithASmallCountLimit(MPI.Win):
    """A window whose ``Put`` refuses a target count above ``LIMIT``, as Open MPI 5.0's refuses one
    above MPI's int (it has no large-count calls); every target count is recorded in ``COUNTS``."""

    LIMIT = 24
    COUNTS: list = []

    def Put(self, origin, target_rank, target=None):
        count = target[1]
        self.COUNTS.append(count)
        if count > self.LIMIT:
            raise MPI.Exception(MPI.ERR_COUNT)
        return super().Put(origin, target_rank, target)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("form", ["blocking", "persistent"])
@pytest.mark.parametrize("executor", RMA_EXECUTORS)
def test_a_put_past_mpis_int_names_its_target_bytes_by_a_datatype(ring, executor, form, monkeypatch):
    """A message of 2**31 + 8 bytes (2**28 + 1 doubles: the program's count fits) raised
    MPI_ERR_ARG on Open MPI 5.0 on every rank: the put's target side was one count of bytes.
    It is one element of a type of pieces that fit now. Here MPI's int is 24 for the puts (and
    for the pieces): blocks of 5 doubles arrive as the library's, and no put counted more."""
    monkeypatch.setattr(rma, "MAX_COUNT", _WindowWithASmallCountLimit.LIMIT)
    monkeypatch.setattr(rma, "create_window",
                        lambda comm: _WindowWithASmallCountLimit(MPI.Win.Create_dynamic(MPI.INFO_NULL, comm)))
    monkeypatch.setattr(_WindowWithASmallCountLimit, "COUNTS", [])
    comm = sparsecoll.wrap(ring.Dup(), "direct", executor=executor)
    try:
        send = _blocks(comm, 5, 1, executor == "rma_canary")
        recv = numpy.full(comm.neighborhood.indegree * 5, -1.0)
        if form == "blocking":
            comm.Neighbor_alltoall(send, recv)
        else:
            request = comm.Neighbor_alltoall_init(send, recv)
            request.Start()
            request.Wait()
            request.Free()
        assert recv.tobytes() == _library_alltoall(comm, send, 5).tobytes()
        counts = _WindowWithASmallCountLimit.COUNTS
        assert counts and max(counts) <= _WindowWithASmallCountLimit.LIMIT
    finally:
        comm.Free()


class _WindowThatChecksItsOrigins(MPI.Win):
    """A window that records a weak reference to the array behind the origin buffer of each
    ``Accumulate``, and counts in ``DEAD`` those already gone at the ``Flush_all`` that completes
    them: MPI may read an origin buffer at any time until then (MPI-4.1 12.7), as MPICH did when
    its shared-memory queue was full of large puts."""

    DEAD: list = []

    def Accumulate(self, origin, target_rank, target=None, op=MPI.SUM):
        owner = origin[0]
        while getattr(owner, "base", None) is not None:
            owner = owner.base
        self.__dict__.setdefault("origins", []).append(weakref.ref(owner))
        return super().Accumulate(origin, target_rank, target, op)

    def Flush_all(self):
        origins = self.__dict__.pop("origins", [])
        self.DEAD.append(sum(1 for ref in origins if ref() is None))
        return super().Flush_all()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("form", ["blocking", "persistent"])
def test_canary_tail_words_live_until_their_accumulates_complete(form, monkeypatch):
    """The canary's tail write of each message (an ``Accumulate`` of its last 8 bytes) read its
    origin from an array that was freed as the next message's was made, before the
    ``Flush_all`` that completes them. MPICH read such origins late under 1-3 MiB puts: an
    ``Neighbor_alltoallv`` of vector-typed blocks on a graph with repeated edges (3 ranks) got
    the last element of one block from another message. Here every origin must still be alive
    at the flush, with two messages per rank (itself and the next rank)."""
    monkeypatch.setattr(rma, "create_window",
                        lambda comm: _WindowThatChecksItsOrigins(MPI.Win.Create_dynamic(MPI.INFO_NULL, comm)))
    monkeypatch.setattr(_WindowThatChecksItsOrigins, "DEAD", [])
    graph = WORLD.Create_dist_graph_adjacent([RANK, (RANK - 1) % SIZE], [RANK, (RANK + 1) % SIZE])
    comm = sparsecoll.wrap(graph, "direct", executor="rma_canary")
    try:
        failures = []
        send, recv = numpy.zeros(2 * 3), numpy.zeros(2 * 3)
        request = comm.Neighbor_alltoall_init(send, recv) if form == "persistent" else None
        for salt in range(3):
            send[:] = [RANK * 1000 + k + salt * 0.5 for k in range(2 * 3)]
            recv[:] = -1.0
            if request is None:
                comm.Neighbor_alltoall(send, recv)
            else:
                request.Start()
                request.Wait()
            if recv.tobytes() != _library_alltoall(comm, send, 3).tobytes():
                failures.append(f"{form} salt={salt} rank {RANK}: {recv}")
        if request is not None:
            request.Free()
        dead = sum(_WindowThatChecksItsOrigins.DEAD)
        if dead:
            failures.append(f"rank {RANK}: {dead} tail origins freed before their flush")
        _agree(failures)
    finally:
        comm.Free()  # the graph's handle too
