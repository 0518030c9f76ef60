r"""Adversarial MPI programs: legal uses of the public API that sparsecoll must run
exactly as the MPI library does.

Every expected result comes from the MPI library itself: mpi4py's own method
(the unwrapped communicator, i.e. ``algorithm="native"``) on the same communicator,
with the same send data and the same initial receive contents, compared bit for bit.
Only the public API is used (``wrap``, ``cart_neighborhood_create``, ``algorithms``,
the mpi4py-named methods, ``plan_stats``, ``release_caches``, ``algorithm``, ``options``).

Cases:

1. cache state that differs across ranks (rank 0 reuses its arrays, the others do not);
2. options belong to the wrapper (two wrappers of one handle, one array);
3. more than 64 outstanding nonblocking calls; thousands of persistent requests;
4. progress of multi-step nonblocking calls (opposite wait orders, a peer blocked in Recv);
5. datatypes of large extent (MPI.BOTTOM with absolute-address structs, an extent of 2**40);
6. ``plan_stats`` is local, not collective;
7. Dup/Clone, ``None`` buffers, option checks at wrap time, extra positional
   arguments and ``info``, caches that do not pin user memory;
8. randomized programs (hypothesis): topologies, wrappers, blocking/nonblocking/
   persistent calls, buffer reuse and wait orders per rank, user point-to-point traffic.

Runs on every rank (launched by ``tests/test_mpi.py``); every test ends all ranks
together (failures are combined with an allgather before anything is asserted), and a
test that hangs is ended by its timeout.

Running it::

    SPARSECOLL_TEST_RANKS=4 SPARSECOLL_MPI_MODULES=test_adversarial.py .venv/bin/python -m pytest tests/test_mpi.py -q
    SPARSECOLL_TEST_RANKS=1,2,3,4,5,8 SPARSECOLL_MPI_MODULES=test_adversarial.py \
        .venv-ompi/bin/python -m pytest tests/test_mpi.py -q
    # a long run of the randomized programs alone (tests/test_mpi.py stops a launch after 840 s)
    SPARSECOLL_ADVERSARIAL_EXAMPLES=5000 .venv/bin/mpiexec -n 4 .venv/bin/python -m pytest \
        tests/mpi/test_adversarial.py -k random_programs -q -p no:cacheprovider

Environment of the randomized programs (case 8):

* ``SPARSECOLL_ADVERSARIAL_EXAMPLES``: programs to generate (default 40; thousands for a
  long run, with ``SPARSECOLL_ADVERSARIAL_TIMEOUT`` seconds for the whole test, default
  120 + 15 per program); one more runs for each algorithm none of them called;
* ``SPARSECOLL_ADVERSARIAL_PROGRAM_TIMEOUT``: seconds one program may run before every
  rank prints its stacks (rank 0 the program) and exits (default 60);
* ``SPARSECOLL_ADVERSARIAL_ALGORITHMS``: a comma list narrowing the algorithms
  (``auto`` included only if listed).
"""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import os
import random
import sys
import threading
import time
import weakref
from dataclasses import dataclass

import numpy
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from mpi4py import MPI

import sparsecoll
from sparsecoll.model.profile import BUILTIN
from sparsecoll.runtime import progress
from sparsecoll.runtime.online_check import CheckedRequest

from . import cases

pytestmark = pytest.mark.timeout(120)

WORLD = MPI.COMM_WORLD
RANK = WORLD.Get_rank()
SIZE = WORLD.Get_size()
OPEN_MPI = "Open MPI" in MPI.Get_library_version()

#: the 8 offsets of a 2-D Moore neighborhood
MOORE = [(dx, dy) for dx in (-1, 0, 1) for dy in (-1, 0, 1) if (dx, dy) != (0, 0)]
#: the four diagonal offsets: on the 2x2 grid the Cartesian allgather relays blocks through
#: ranks that do not want them (with the Moore neighborhood there every rank wants every block)
DIAGONALS = [(1, 1), (1, -1), (-1, 1), (-1, -1)]

REGULAR = ("allgather", "alltoall")
COLLECTIVES = ("allgather", "allgatherv", "alltoall", "alltoallv", "alltoallw")
#: the 18 mpi4py-named buffer methods sparsecoll provides (allgatherw is sparsecoll's own)
ALL_COLLECTIVES = ("allgather", "allgatherv", "allgatherw", "alltoall", "alltoallv", "alltoallw")
KINDS = ("blocking", "nonblocking", "persistent")

STRIDED = cases.strided_int()  # one int32 every 8 bytes


@pytest.fixture(scope="module", autouse=True)
def _free_module_datatypes():
    yield
    STRIDED.Free()


# ---------------------------------------------------------------------------------
# communicators


def cart_neighborhood(offsets, **wrap_options):
    """A periodic 2-D Cartesian neighborhood of ``offsets`` (the 2x2 grid at 4 ranks), wrapped."""
    dims = MPI.Compute_dims(SIZE, 2)
    return sparsecoll.cart_neighborhood_create(WORLD, dims, [True, True], offsets, **wrap_options)


def moore_neighborhood(**wrap_options):
    """A periodic 2-D Moore neighborhood (8 offsets), wrapped."""
    return cart_neighborhood(MOORE, **wrap_options)


def graph_from_edges(edges):
    """A distributed graph whose neighbors follow the order of ``edges`` (a list of (a, b))."""
    sources = [a for a, b in edges if b == RANK]
    destinations = [b for a, b in edges if a == RANK]
    return WORLD.Create_dist_graph_adjacent(sources, destinations)


def complete_graph():
    """Every rank to every other rank (no neighbors at 1 rank)."""
    return graph_from_edges([(a, b) for a in range(SIZE) for b in range(SIZE) if a != b])


def ring_graph():
    """One in- and one out-neighbor per rank (a self loop at 1 rank)."""
    return graph_from_edges([(a, (a + 1) % SIZE) for a in range(SIZE)])


def chord_graph():
    """A ring with chords and a repeated edge; every rank has in- and out-neighbors."""
    edges = [(a, (a + 1) % SIZE) for a in range(SIZE)] + [(a, (a + 3) % SIZE) for a in range(SIZE)]
    edges += [(a, (a + 1) % SIZE) for a in range(0, SIZE, 2)]
    return graph_from_edges(edges)


#: wrapped communicators whose schedules take 2 or more steps at 4 ranks (common_neighbor
#: needs theta=1 to find friends on so few ranks, distance_halving one rank per socket,
#: node_aware nodes of two ranks), two of them also on the RMA executors (a forwarded item is
#: put once its own arrival was seen)
MULTI_STEP = {
    "cartesian": lambda: moore_neighborhood(algorithm="cartesian"),
    "cartesian[rma]": lambda: moore_neighborhood(algorithm="cartesian", executor="rma"),
    # SC12 II-C2: the RTR messages of each sender combined along a chain (a tree of degree 1)
    "cartesian[rma,rtr_tree=1]": lambda: moore_neighborhood(algorithm="cartesian", executor="rma",
                                                            executor_options={"rtr_tree": 1}),
    "common_neighbor": lambda: sparsecoll.wrap(chord_graph(), "common_neighbor", theta=1),
    "common_neighbor[rma_canary]": lambda: sparsecoll.wrap(chord_graph(), "common_neighbor", theta=1,
                                                           executor="rma_canary"),
    "distance_halving": lambda: moore_neighborhood(algorithm="distance_halving", ranks_per_socket=1),
    "node_aware": lambda: sparsecoll.wrap(chord_graph(), "node_aware", ranks_per_socket=min(2, SIZE)),
}


def plain(comm):
    """The unwrapped mpi4py view of ``comm``'s handle: its Neighbor_* are the MPI library's."""
    for cls in (MPI.Cartcomm, MPI.Graphcomm, MPI.Distgraphcomm):
        if isinstance(comm, cls):
            return cls(comm)
    raise TypeError(f"not a topology communicator: {comm!r}")


# ---------------------------------------------------------------------------------
# agreeing on the outcome


def agree(failures: list) -> None:
    """End all ranks together: everyone learns every rank's first failures, then asserts."""
    everyone = WORLD.allgather([str(f)[:600] for f in failures[:3]])
    seen = [f"rank {r}: {f}" for r, fs in enumerate(everyone) for f in fs]
    assert not seen, "\n".join(seen)


@contextlib.contextmanager
def agreed_failures():
    """A list to record this rank's failures in; on leaving, an exception of the block is recorded
    too, and every rank ends together (:func:`agree`)."""
    failures = []
    try:
        yield failures
    except Exception as exc:  # noqa: BLE001
        failures.append(describe(exc))
    agree(failures)


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def expect_error(failures: list, label: str, error, words: str, call, finish=None) -> None:
    """Record a failure unless ``call()`` raises ``error`` with ``words`` in its message.

    ``finish(result)`` completes whatever a call that did not raise returned (a request).
    """
    try:
        result = call()
    except error as exc:
        if words not in str(exc):
            failures.append(f"{label}: {type(exc).__name__} does not mention {words!r}: {exc}")
        return
    except Exception as exc:  # noqa: BLE001 - any other outcome is the failure to report
        failures.append(f"{label}: raised {describe(exc)} instead of {error.__name__}")
        return
    failures.append(f"{label}: did not raise {error.__name__}")
    if finish is not None:
        finish(result)


# ---------------------------------------------------------------------------------
# buffers: one rank's arrays and mpi4py specs for one collective


@dataclass(frozen=True)
class Neighborhood:
    """This rank's neighbors in MPI's block order and the labels that match repeated edges."""

    rank: int
    sources: list
    destinations: list
    in_labels: list
    out_labels: list


def neighborhood(comm) -> Neighborhood:
    sources, destinations = cases.neighbors(comm)
    in_labels, out_labels = cases.edge_labels(comm)
    return Neighborhood(comm.Get_rank(), sources, destinations, in_labels, out_labels)


#: largest count per block; blocks of v/w calls sit SLOTS elements apart, so the same
#: arrays serve any counts up to MAX_COUNT (also strided ones) with a gap between blocks
MAX_COUNT = 3
SLOTS = 2 * MAX_COUNT + 2
ELEMENT = {"i4": numpy.int32, "f8": numpy.float64, "strided": numpy.int32}


def family(collective: str) -> str:
    return "allgather" if collective.startswith("allgather") else "alltoall"


class Exchange:
    """One rank's send and receive arrays for calls of one collective.

    ``kind``: ``"i4"`` (int32), ``"f8"`` (float64) or ``"strided"`` (one int32 every
    8 bytes); alltoallw with ``"i4"`` alternates contiguous and strided blocks (the same
    type signature, other layouts). Counts come per call from ``count_of(origin, dest,
    label)`` (``dest`` and ``label`` are None in the allgather family), so the sender's
    and the receiver's counts of an edge always agree.
    """

    def __init__(self, nbh: Neighborhood, collective: str, kind: str = "i4"):
        self.nbh, self.collective, self.kind = nbh, collective, kind
        nsend = 1 if family(collective) == "allgather" else len(nbh.destinations)
        self.send = numpy.full(max(nsend, 1) * SLOTS, -3, ELEMENT[kind])
        self.recv = numpy.full(max(len(nbh.sources), 1) * SLOTS, -7, ELEMENT[kind])

    def fresh(self) -> Exchange:
        """New arrays with the same layout."""
        return Exchange(self.nbh, self.collective, self.kind)

    def _datatype(self, block: int):
        if self.kind == "f8":
            return MPI.DOUBLE
        if self.kind == "strided" or (self.collective == "alltoallw" and block % 2):
            return STRIDED
        return MPI.INT32_T

    def _layout(self, counts, regular_count):
        """Per block: (first element, count, element stride, datatype)."""
        layout = []
        for i, count in enumerate(counts):
            datatype = self._datatype(i)
            stride = 2 if datatype is STRIDED else 1
            first = i * regular_count * stride if regular_count is not None else i * SLOTS
            layout.append((first, count, stride, datatype))
        return layout

    def _spec(self, array, layout, regular_count):
        if regular_count is not None:
            return [array, regular_count, self._datatype(0)]
        counts = [count for _, count, _, _ in layout]
        if self.collective.endswith("w"):
            return [array, (counts, [first * array.itemsize for first, _, _, _ in layout]),
                    [datatype for _, _, _, datatype in layout]]
        return [array, (counts, [first // stride for first, _, stride, _ in layout]), self._datatype(0)]

    def prepare(self, count_of, salt: int):
        """Write this call's send data; return (send spec, function: receive array -> spec)."""
        nbh, collective = self.nbh, self.collective
        me = nbh.rank
        if family(collective) == "allgather":
            send_counts = [count_of(me, None, None)]
            recv_counts = [count_of(s, None, None) for s in nbh.sources]
        else:
            send_counts = [count_of(me, d, label) for d, label in zip(nbh.destinations, nbh.out_labels)]
            recv_counts = [count_of(s, me, label) for s, label in zip(nbh.sources, nbh.in_labels)]
        regular = count_of(None, None, None) if collective in REGULAR else None
        send_layout = self._layout(send_counts, regular)
        recv_layout = self._layout(recv_counts, regular)
        for k, (first, count, stride, _) in enumerate(send_layout):
            for j in range(count):
                self.send[first + j * stride] = cases.value(me, k, j, salt)
        if family(collective) == "allgather" and regular is None:  # allgatherv: a simple send spec
            send_spec = [self.send, send_counts[0], self._datatype(0)]
        else:
            send_spec = self._spec(self.send, send_layout, regular)
        return send_spec, lambda array: self._spec(array, recv_layout, regular)


def uniform(count: int):
    """count_of for regular collectives: ``count`` on every edge."""
    return lambda origin, dest, label: count


def varied(salt: int):
    """count_of for v/w collectives: 0..MAX_COUNT, depending on the edge and ``salt``."""
    def count_of(origin, dest, label):
        if origin is None:
            return salt % (MAX_COUNT + 1)
        if dest is None:
            return (3 * origin + salt) % (MAX_COUNT + 1)
        return (3 * origin + 5 * dest + label + salt) % (MAX_COUNT + 1)
    return count_of


def count_function(collective: str, salt: int):
    return uniform(salt % (MAX_COUNT + 1)) if collective in REGULAR else varied(salt)


def native_result(comm, collective: str, send_spec, recv_spec_of, before: numpy.ndarray) -> numpy.ndarray:
    """What the MPI library delivers for this call into a copy of ``before``."""
    expected = before.copy()
    getattr(plain(comm), "Neighbor_" + collective)(send_spec, recv_spec_of(expected))
    return expected


def compare(failures: list, label: str, got: numpy.ndarray, expected: numpy.ndarray) -> None:
    if got.tobytes() != expected.tobytes():
        failures.append(f"{label}: rank {RANK} got {got.tolist()} expected {expected.tolist()}")


@dataclass
class Started:
    """A started sparsecoll call and what is needed to check it against the MPI library."""

    label: str
    comm: object
    collective: str
    exchange: Exchange
    send_spec: object
    recv_spec_of: object
    before: numpy.ndarray
    request: object = None

    def check(self, failures: list) -> None:
        expected = native_result(self.comm, self.collective, self.send_spec, self.recv_spec_of, self.before)
        compare(failures, self.label, self.exchange.recv, expected)


def start(comm, collective: str, exchange: Exchange, count_of, salt: int, label: str, how: str = "I") -> Started:
    """Start (``how="I"``) or run (``how="blocking"``) one call on ``exchange``'s arrays."""
    send_spec, recv_spec_of = exchange.prepare(count_of, salt)
    call = Started(label, comm, collective, exchange, send_spec, recv_spec_of, exchange.recv.copy())
    if how == "blocking":
        getattr(comm, "Neighbor_" + collective)(send_spec, recv_spec_of(exchange.recv))
    else:
        call.request = getattr(comm, "Ineighbor_" + collective)(send_spec, recv_spec_of(exchange.recv))
    return call


def complete_by_polling(requests, order) -> None:
    """Test every pending request, sweeping them in ``order``, until all are complete."""
    pending = [requests[i] for i in order]
    while pending:
        pending = [request for request in pending if not request.Test()]


def rank_order(n: int, rank: int = RANK) -> list:
    """Rank 0: reverse; rank 1: shuffled; the others: forward."""
    order = list(range(n))
    if rank == 0:
        order.reverse()
    elif rank == 1:
        random.Random(20240601).shuffle(order)
    return order


# ---------------------------------------------------------------------------------
# case 1: cache state that differs across ranks

CALLS = 8
CASE1_WRAPS = {"default": {}, "cartesian": {"algorithm": "cartesian"},
               "common_neighbor": {"algorithm": "common_neighbor", "theta": 1},
               # windows are not tied to buffers: ranks may pass new arrays while rank 0 keeps its own
               "cartesian[rma]": {"algorithm": "cartesian", "executor": "rma"},
               "direct[rma_canary]": {"algorithm": "direct", "executor": "rma_canary"},
               "direct[rma,rtr_tree=2]": {"algorithm": "direct", "executor": "rma",
                                          "executor_options": {"rtr_tree": 2}}}


def counts_around_rank0(collective: str, call: int, rank0_sources):
    """Counts that change with ``call`` except where rank 0 would see the change.

    alltoall family: edges touching rank 0 keep their counts. allgather family: an origin's
    count reaches all its out-neighbors, so only origins that are neither rank 0 nor one
    of rank 0's sources change theirs. Both ends of every edge compute the same count.
    """
    fixed = varied(0)

    def count_of(origin, dest, label):
        if origin is None:
            return fixed(origin, dest, label)
        if dest is None:
            moving = origin != 0 and origin not in rank0_sources
        else:
            moving = 0 not in (origin, dest)
        return varied(call)(origin, dest, label) if moving else fixed(origin, dest, label)
    return count_of


#: (algorithm, collective, topology): the Moore neighborhood for every collective, and for
#: allgatherv also topologies where blocks pass through ranks that do not want them
CASE1 = [(algorithm, collective, "moore") for algorithm in sorted(CASE1_WRAPS)
         for collective in ("alltoallv", "alltoallw", "allgatherv")]
CASE1 += [("default", "allgatherv", "diagonals"), ("cartesian", "allgatherv", "diagonals"),
          ("common_neighbor", "allgatherv", "chord-graph")]


def case1_comm(algorithm: str, topology: str):
    if topology == "chord-graph":
        return sparsecoll.wrap(chord_graph(), **CASE1_WRAPS[algorithm])
    return cart_neighborhood(MOORE if topology == "moore" else DIAGONALS, **CASE1_WRAPS[algorithm])


@pytest.mark.parametrize("counts", ["same-counts", "changing-counts"])
@pytest.mark.parametrize("algorithm,collective,topology", CASE1)
def test_rank0_reuses_its_arrays_while_the_others_pass_fresh_ones(algorithm, collective, topology, counts):
    """Case 1: repeated blocking v/w calls (Moore neighborhood; for allgatherv also the four
    diagonals and a chord graph); rank 0 passes the same send and receive arrays (and counts)
    every call, every other rank new arrays; data changes every call and, in the
    changing-counts variant, counts on edges away from rank 0 too."""
    comm = case1_comm(algorithm, topology)
    try:
        with agreed_failures() as failures:
            nbh = neighborhood(comm)
            rank0_sources = set(WORLD.bcast(nbh.sources if RANK == 0 else None))
            kept = Exchange(nbh, collective)
            for call in range(CALLS):
                exchange = kept if RANK == 0 else kept.fresh()
                count_of = counts_around_rank0(collective, call if counts == "changing-counts" else 0, rank0_sources)
                done = start(comm, collective, exchange, count_of, salt=call, label=f"call {call}", how="blocking")
                done.check(failures)
    finally:
        comm.Free()


# ---------------------------------------------------------------------------------
# case 2: options belong to the wrapper


@pytest.mark.parametrize("collective", ["alltoall", "allgather"])
def test_two_wrappers_with_different_options_alternate_on_the_same_arrays(collective):
    """Case 2: on a complete graph, ``wrap(g, "common_neighbor")`` and ``wrap(g,
    "common_neighbor", theta=1)`` (one handle) alternate; every rank keeps its send array,
    rank 0 also its receive array, the others pass a fresh receive array each call."""
    raw = complete_graph()
    try:
        with agreed_failures() as failures:
            a = sparsecoll.wrap(raw, "common_neighbor")
            b = sparsecoll.wrap(raw, "common_neighbor", theta=1)
            kept = Exchange(neighborhood(raw), collective)
            for call, comm in enumerate([a, b, a, b, a, b]):
                exchange = kept
                if RANK != 0:
                    exchange = kept.fresh()
                    exchange.send = kept.send
                done = start(comm, collective, exchange, uniform(2), salt=call, label=f"call {call}", how="blocking")
                done.check(failures)
    finally:
        raw.Free()


# ---------------------------------------------------------------------------------
# case 3: many outstanding nonblocking calls, many persistent requests

OUTSTANDING = 100


@pytest.mark.timeout(180)
@pytest.mark.parametrize("algorithm", ["cartesian", "common_neighbor", "cartesian[rma]", "common_neighbor[rma_canary]",
                                       "cartesian[rma,rtr_tree=1]"])
def test_more_than_64_outstanding_nonblocking_calls(algorithm):
    """Case 3: 100 outstanding Ineighbor_allgather/Ineighbor_alltoall calls of a multi-step
    schedule on one communicator, each with its own arrays and data, completed by Test
    sweeps in reverse order on rank 0, shuffled on rank 1, forward elsewhere (after a
    barrier, so that every rank has started every call before anyone polls)."""
    comm = MULTI_STEP[algorithm]()
    try:
        with agreed_failures() as failures:
            nbh = neighborhood(comm)
            calls = []
            for k in range(OUTSTANDING):
                collective = REGULAR[k % 2]
                calls.append(start(comm, collective, Exchange(nbh, collective), uniform(1 + k % MAX_COUNT),
                                   salt=k, label=f"call {k} ({collective})"))
            WORLD.Barrier()
            complete_by_polling([c.request for c in calls], rank_order(len(calls)))
            for call in calls:
                call.check(failures)
    finally:
        comm.Free()


PERSISTENT_REQUESTS = 3000


@pytest.mark.timeout(240)
def test_thousands_of_persistent_requests_in_a_row():
    """Case 3 (tags stay legal): 3000 persistent requests of a multi-step schedule, each
    started once, waited and freed, while one long-lived persistent request is restarted
    beside every 100th of them (both active at once, completed in rank-dependent orders);
    results stay equal to the MPI library's."""
    comm = MULTI_STEP["cartesian"]()
    long_lived = None
    try:
        with agreed_failures() as failures:
            nbh = neighborhood(comm)
            exchanges = {c: Exchange(nbh, c) for c in REGULAR}
            keeper = Exchange(nbh, "allgather")
            keeper_send, keeper_recv_of = keeper.prepare(uniform(2), salt=0)
            long_lived = comm.Neighbor_allgather_init(keeper_send, keeper_recv_of(keeper.recv))
            for k in range(PERSISTENT_REQUESTS):
                collective = REGULAR[k % 2]
                exchange = exchanges[collective]
                send_spec, recv_spec_of = exchange.prepare(uniform(1 + k % 2), salt=k)
                before = exchange.recv.copy()
                request = getattr(comm, f"Neighbor_{collective}_init")(send_spec, recv_spec_of(exchange.recv))
                if k % 100 == 99:  # the long-lived request runs beside this one
                    keeper_send, _ = keeper.prepare(uniform(2), salt=k)  # new data, same layout
                    keeper_before = keeper.recv.copy()
                    long_lived.Start()
                    request.Start()
                    complete_by_polling([long_lived, request], rank_order(2))
                    expected = native_result(comm, "allgather", keeper_send, keeper_recv_of, keeper_before)
                    compare(failures, f"long-lived request beside request {k}", keeper.recv, expected)
                else:
                    request.Start()
                    request.Wait()
                request.Free()
                if k % 10 == 0 or k % 100 == 99 or k == PERSISTENT_REQUESTS - 1:
                    expected = native_result(comm, collective, send_spec, recv_spec_of, before)
                    compare(failures, f"request {k} ({collective})", exchange.recv, expected)
                if failures:
                    break
    finally:
        if long_lived is not None:
            long_lived.Free()
        comm.Free()


#: a block of 1000 struct{char, double}: 9 KiB of data over an extent of 16 KiB
STRUCT_COUNT, STRUCT_EXTENT = 1000, 16


def struct_specs(collective: str, nbh: Neighborhood, unit: MPI.Datatype, send, recv) -> tuple:
    """``(sendspec, recvspec)`` of ``collective`` with blocks of STRUCT_COUNT ``unit``, in order."""
    def vector(degree):
        return [STRUCT_COUNT] * degree, [STRUCT_COUNT * i for i in range(degree)]
    indegree, outdegree = len(nbh.sources), len(nbh.destinations)
    if collective in ("allgather", "alltoall"):
        return [send, STRUCT_COUNT, unit], [recv, STRUCT_COUNT, unit]
    if collective == "allgatherv":
        return [send, STRUCT_COUNT, unit], [recv, vector(indegree), unit]
    if collective == "alltoallv":
        return [send, vector(outdegree), unit], [recv, vector(indegree), unit]
    in_counts, in_displs = vector(indegree)
    out_counts, out_displs = vector(outdegree)
    return ([send, (out_counts, [STRUCT_EXTENT * d for d in out_displs]), [unit] * outdegree],
            [recv, (in_counts, [STRUCT_EXTENT * d for d in in_displs]), [unit] * indegree])


@pytest.mark.timeout(120)  # without the fix: MPICH raised "signature does not match" on the relaying
@pytest.mark.parametrize("collective", ["allgather", "allgatherv", "alltoall", "alltoallv", "alltoallw"])
@pytest.mark.parametrize("algorithm", sorted(MULTI_STEP))  # ranks' receivers; the others waited for good
def test_struct_blocks_relayed_between_ranks(algorithm, collective):
    """Blocks of a struct{char, double} through schedules that relay them: a relaying rank that
    does not know the datatype holds a block as ``MPI_PACKED`` bytes, and its receiver takes a
    relayed block as bytes where its datatype mixes basic types of different sizes (MPICH 5.0.2
    fails a message of bytes received into such a type where a segment ends inside an element:
    node_aware's v/w calls at 4 ranks every time). Every form gives the library's bytes, the
    gaps of the struct untouched; at 4 ranks some rank receives a relayed block."""
    comm = MULTI_STEP[algorithm]()
    unit = MPI.Datatype.Create_struct([1, 1], [0, 8], [MPI.CHAR, MPI.DOUBLE]).Commit()
    try:
        if algorithm.startswith("distance_halving") and collective.startswith("alltoall"):
            pytest.skip("distance_halving implements the allgather family only")
        with agreed_failures() as failures:
            nbh = neighborhood(comm)
            blocks = 1 if collective.startswith("allgather") else len(nbh.destinations)
            send = (numpy.arange(max(blocks, 1) * STRUCT_COUNT * STRUCT_EXTENT) * 13 + 7 * RANK).astype(numpy.uint8)
            expected = numpy.full(max(len(nbh.sources), 1) * STRUCT_COUNT * STRUCT_EXTENT, 0xA5, numpy.uint8)
            getattr(plain(comm), f"Neighbor_{collective}")(*struct_specs(collective, nbh, unit, send, expected))
            for form in ("blocking", "nonblocking", "persistent"):
                got = numpy.full_like(expected, 0xA5)
                cases.run_call(comm, collective, form, *struct_specs(collective, nbh, unit, send, got))
                if got.tobytes() != expected.tobytes():
                    failures.append(f"{form}: {int((got != expected).sum())} bytes differ from the library's")
            pattern = comm.runtime.call_plan(comm.plan, collective).pattern
            relayed = sum(item[0] != m.peer for step in pattern.steps for m in step.recvs for item in m.items)
        if SIZE == 4:  # where every MULTI_STEP schedule takes 2 or more steps
            assert WORLD.allreduce(relayed) > 0, "no rank receives a relayed block: the case tests nothing"
    finally:
        comm.Free()
        unit.Free()


@pytest.mark.timeout(60)
def test_plan_stats_counts_the_size_pass():
    """node_aware (nodes of two ranks) relays through ranks that hold blocks in transit, so its v/w
    calls run a size pass: plan_stats gives its messages and bytes (16 per item: bytes and element
    size) where every rank agreed to run it, None for a regular call and for direct."""
    comm = MULTI_STEP["node_aware"]()
    direct = sparsecoll.wrap(plain(comm), "direct")
    try:
        nbh = neighborhood(comm)
        send = numpy.zeros(max(len(nbh.destinations), 1))
        recv = numpy.zeros(max(len(nbh.sources), 1))
        for wrapped in (comm, direct):
            wrapped.Neighbor_alltoallv([send, [1] * len(nbh.destinations)], [recv, [1] * len(nbh.sources)])
            wrapped.Neighbor_alltoall([send, 1, MPI.DOUBLE], [recv, 1, MPI.DOUBLE])
        stats = comm.plan_stats("alltoallv")
        runs = comm.runtime.call_plan(comm.plan, "alltoallv").size_pass
        if runs:
            assert stats["size_pass"]["bytes_sent"] == 16 * stats["send_items"]
            assert stats["size_pass"]["sends"] == stats["sends"]
        else:
            assert stats["size_pass"] is None
        assert WORLD.allreduce(int(runs)) in (0, SIZE)  # agreed
        if SIZE == 4:
            assert runs  # nodes of two ranks: leaders hold their node's blocks in transit
        assert comm.plan_stats("alltoall")["size_pass"] is None
        assert direct.plan_stats("alltoallv")["size_pass"] is None
    finally:
        comm.Free()


def parity_blocks(ranks: list, owner_parity_of) -> tuple:
    """``(counts, byte displacements, datatypes, total bytes)`` of one block per rank of ``ranks``:
    1001 doubles where ``owner_parity_of(rank)`` is even, else 3001 int32 (12004 bytes, not a
    multiple of 8), 4 bytes apart."""
    counts, displs, types, total = [], [], [], 0
    for rank in ranks:
        count, datatype = (1001, MPI.DOUBLE) if owner_parity_of(rank) % 2 == 0 else (3001, MPI.INT32_T)
        counts.append(count)
        displs.append(total)
        types.append(datatype)
        total += count * datatype.Get_size() + 4
    return counts, displs, types, total


@pytest.mark.timeout(120)  # without the fix: MPICH raised "signature does not match" on the even ranks
@pytest.mark.parametrize("algorithm", sorted(name for name in MULTI_STEP if not name.startswith("distance_halving")))
def test_relayed_blocks_beside_blocks_of_another_element_size(algorithm):
    """Neighbor_alltoallw where even ranks receive doubles and odd ranks int32 (odd counts): a
    rank relays both in one message, as bytes, so a receiver of doubles only must still take a
    relayed block as bytes (a segment may end inside a double). Every form gives the library's
    bytes."""
    comm = MULTI_STEP[algorithm]()
    try:
        with agreed_failures() as failures:
            nbh = neighborhood(comm)
            out_counts, out_displs, out_types, out_bytes = parity_blocks(nbh.destinations, lambda dest: dest)
            in_counts, in_displs, in_types, in_bytes = parity_blocks(nbh.sources, lambda source: RANK)
            send = (numpy.arange(max(out_bytes, 1)) * 7 + RANK).astype(numpy.uint8)

            def specs(recv):
                return [send, (out_counts, out_displs), out_types], [recv, (in_counts, in_displs), in_types]
            expected = numpy.full(max(in_bytes, 1), 0xA5, numpy.uint8)
            plain(comm).Neighbor_alltoallw(*specs(expected))
            for form in ("blocking", "nonblocking", "persistent"):
                got = numpy.full_like(expected, 0xA5)
                cases.run_call(comm, "alltoallw", form, *specs(got))
                if got.tobytes() != expected.tobytes():
                    failures.append(f"{form}: {int((got != expected).sum())} bytes differ from the library's")
    finally:
        comm.Free()


# ---------------------------------------------------------------------------------
# case 4: progress


@pytest.mark.timeout(60)
@pytest.mark.parametrize("waits", ["blocking in MPI", "testing"])
@pytest.mark.parametrize("algorithm", sorted(MULTI_STEP))
def test_two_outstanding_calls_waited_in_opposite_orders(algorithm, waits, monkeypatch):
    """Case 4a: two outstanding multi-step Ineighbor_allgather calls; even ranks wait the
    first then the second, odd ranks the second then the first (MPI must complete both).
    A wait blocks in MPI through the engine where the program has no other thread, and tests
    and yields where it has (this test's timeout is a thread: both ways are forced here)."""
    monkeypatch.setattr(progress, "other_threads_may_call_in", lambda: waits == "testing")
    comm = MULTI_STEP[algorithm]()
    try:
        with agreed_failures() as failures:
            nbh = neighborhood(comm)
            first = start(comm, "allgather", Exchange(nbh, "allgather"), uniform(2), salt=1, label="first")
            second = start(comm, "allgather", Exchange(nbh, "allgather"), uniform(2), salt=2, label="second")
            for call in (first, second) if RANK % 2 == 0 else (second, first):
                call.request.Wait()
            for call in (first, second):
                call.check(failures)
    finally:
        comm.Free()


def on_two_threads(comms, body) -> None:
    """Run ``body(comm, report)`` in one thread per communicator of ``comms`` (two), thread 0
    first on even ranks and thread 1 first on odd ones, after one allgather on each (their
    patterns); what the threads report, and their exceptions, fail the test on every rank.
    Frees ``comms``."""
    try:
        with agreed_failures() as failures:
            for comm in comms:
                comm.Neighbor_allgather(numpy.zeros(1), numpy.zeros(len(neighborhood(comm).sources)))
            failures.extend(_run_threads(comms, body))
    finally:
        for comm in comms:
            comm.Free()


def _run_threads(comms, body) -> list:
    errors = []

    def worker(index):
        def report(text):
            errors.append(f"thread {index}: {text}")
        try:
            if (RANK % 2 == 0) != (index == 0):
                time.sleep(0.3)
            body(comms[index], report)
        except Exception as exc:  # noqa: BLE001
            report(describe(exc))

    threads = [threading.Thread(target=worker, args=(index,)) for index in range(len(comms))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def check_allgather(comm, send, recv, report) -> None:
    """Report where ``recv`` differs from the library's allgather of ``send`` on ``comm``'s handle."""
    expected = numpy.full_like(recv, -1)
    plain(comm).Neighbor_allgather(send, expected)
    if recv.tobytes() != expected.tobytes():
        report(f"got {recv.tolist()} expected {expected.tolist()}")


@pytest.mark.timeout(90)
@pytest.mark.parametrize("how", ["nonblocking", "persistent", "blocking"])
@pytest.mark.parametrize("algorithm", ["cartesian", "cartesian[rma]", "common_neighbor"])
def test_two_threads_per_rank_on_two_communicators(algorithm, how):
    """Case 4c (MPI_THREAD_MULTIPLE): two threads per rank, each running multi-step collectives on
    a communicator of its own; on even ranks thread 0 starts first, on odd ranks thread 1. A wait
    held sparsecoll's process-wide lock while it blocked in MPI, so a rank's other thread could
    not start the collective its peer's waiting thread needed: every rank hung."""
    if MPI.Query_thread() != MPI.THREAD_MULTIPLE:
        pytest.skip("needs MPI_THREAD_MULTIPLE")
    if OPEN_MPI and "rma" in algorithm and how == "persistent":
        pytest.skip("Open MPI 5.0.11 aborts creating windows from two threads at once (raw mpi4py too; README)")
    comms = [MULTI_STEP[algorithm]() for _ in range(2)]

    def body(comm, report):
        for repetition in range(5):
            send = numpy.array([RANK * 100 + repetition], dtype="i8")
            recv = numpy.full(len(neighborhood(comm).sources), -1, dtype="i8")
            cases.run_call(comm, "allgather", how, send, recv)
            check_allgather(comm, send, recv, report)
    on_two_threads(comms, body)


@pytest.mark.timeout(120)
def test_two_threads_per_rank_each_with_more_outstanding_calls_than_channels():
    """As above, each thread with 70 outstanding multi-step ``Ineighbor_allgather`` calls (one
    channel per 64), then ``sparsecoll.waitall``: the 65th call waited for the 1st one's
    messages in MPI holding the process-wide lock, so the rank's other thread could not move
    the call its peer's thread waited for (hung on both libraries; raw mpi4py completes)."""
    from sparsecoll.runtime.channels import NONBLOCKING_CHANNELS
    if MPI.Query_thread() != MPI.THREAD_MULTIPLE:
        pytest.skip("needs MPI_THREAD_MULTIPLE")
    comms = [MULTI_STEP["cartesian"]() for _ in range(2)]

    def body(comm, report):
        degree = len(neighborhood(comm).sources)
        calls = []
        for k in range(NONBLOCKING_CHANNELS + 6):
            send = numpy.array([RANK * 1000 + k], dtype="i8")
            recv = numpy.full(degree, -1, dtype="i8")
            calls.append((send, recv, comm.Ineighbor_allgather(send, recv)))
        sparsecoll.waitall([request for _, _, request in calls])
        for send, recv, _ in calls:
            check_allgather(comm, send, recv, report)
    on_two_threads(comms, body)


#: wrapped communicators whose first call of a collective builds its pattern by a protocol
PROTOCOL_BUILDS = {
    "common_neighbor": MULTI_STEP["common_neighbor"],
    "distance_halving": MULTI_STEP["distance_halving"],
    "node_aware": MULTI_STEP["node_aware"],
    "loggp_tree": lambda: sparsecoll.wrap(chord_graph(), "loggp_tree"),
    "direct+coloring": lambda: sparsecoll.wrap(chord_graph(), "direct", coloring=True),
}


@pytest.mark.timeout(90)
@pytest.mark.parametrize("algorithm", sorted(PROTOCOL_BUILDS))
def test_two_threads_per_rank_build_patterns_at_once(algorithm):
    """MPI_THREAD_MULTIPLE: two threads per rank, each making copies of a communicator of its own
    and a first call on each copy (its pattern protocol), at once. The protocols combined their
    results with mpi4py's ``allreduce`` of Python objects, whose first call on a communicator
    duplicates it holding the GIL: a rank's other thread could not run the protocol a peer's
    thread waited for, and every rank hung (both libraries; raw mpi4py too, see
    :mod:`sparsecoll.agreement`)."""
    if MPI.Query_thread() != MPI.THREAD_MULTIPLE:
        pytest.skip("needs MPI_THREAD_MULTIPLE")
    comms = [PROTOCOL_BUILDS[algorithm]() for _ in range(2)]

    def body(comm, report):
        for repetition in range(8):
            copy = comm.Dup()
            try:
                send = numpy.array([RANK * 100 + repetition], dtype="i8")
                recv = numpy.full(len(neighborhood(copy).sources), -1, dtype="i8")
                copy.Neighbor_allgather(send, recv)
                check_allgather(copy, send, recv, report)
            finally:
                copy.Free()
    try:
        with agreed_failures() as failures:
            failures.extend(_run_threads(comms, body))
    finally:
        for comm in comms:
            comm.Free()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("algorithm", sorted(MULTI_STEP))
def test_wait_completes_while_a_peer_is_blocked_in_recv(algorithm):
    """Case 4b: rank 0 starts a multi-step Ineighbor_allgather and blocks in WORLD.Recv from
    rank 1 before waiting; rank 1 waits its call, then sends to rank 0 (MPI completes both).
    Calls the rank waits itself come first, so the progress thread has backed off (looks
    seldom) when rank 0 blocks: it still steps in."""
    if SIZE < 2:
        pytest.skip("needs 2 ranks")
    comm = MULTI_STEP[algorithm]()
    try:
        with agreed_failures() as failures:
            exchange = Exchange(neighborhood(comm), "allgather")
            for _ in range(30):  # ~40 ms of requests in flight, each waited 1 ms after its start
                driven = start(comm, "allgather", exchange, uniform(2), salt=5, label="driven")
                time.sleep(0.001)
                driven.request.Wait()
            call = start(comm, "allgather", exchange, uniform(2), salt=3, label="call")
            token = numpy.full(1, -1, dtype="i4")
            if RANK == 0:
                WORLD.Recv(token, source=1, tag=404)
                call.request.Wait()
                if token[0] != 4242:
                    failures.append(f"user message: got {token[0]}, expected 4242")
            elif RANK == 1:
                call.request.Wait()
                WORLD.Send(numpy.array([4242], dtype="i4"), dest=0, tag=404)
            else:
                call.request.Wait()
            call.check(failures)
    finally:
        comm.Free()


# ---------------------------------------------------------------------------------
# case 5: large-extent datatypes

CASE5_WRAPS = {"direct": {"algorithm": "direct"}, "default": {}}


class AbsoluteBlocks:
    """Per block, two separate numpy arrays (2 int32, 1 float64) and a struct datatype over
    their absolute addresses: the canonical use of MPI.BOTTOM."""

    def __init__(self, nblocks: int, fill=None):
        self.parts = []
        self.types = []
        for k in range(nblocks):
            if fill is None:
                ints, reals = numpy.full(2, -7, dtype="i4"), numpy.full(1, -7.0)
            else:
                ints = numpy.array([cases.value(RANK, k, 0, fill), cases.value(RANK, k, 1, fill)], dtype="i4")
                reals = numpy.array([cases.value(RANK, k, 2, fill) + 0.25])
            self.parts.append((ints, reals))
            datatype = MPI.Datatype.Create_struct([2, 1], [MPI.Get_address(ints), MPI.Get_address(reals)],
                                                  [MPI.INT32_T, MPI.DOUBLE])
            self.types.append(datatype.Commit())

    def spec(self):
        n = len(self.types)
        return [MPI.BOTTOM, [1] * n, [0] * n, self.types]

    def tobytes(self) -> bytes:
        return b"".join(ints.tobytes() + reals.tobytes() for ints, reals in self.parts)

    def free(self) -> None:
        for datatype in self.types:
            datatype.Free()


@pytest.mark.parametrize("mode", ["blocking", "persistent"])
@pytest.mark.parametrize("algorithm", sorted(CASE5_WRAPS))
def test_alltoallw_from_bottom_with_absolute_address_structs(algorithm, mode):
    """Case 5: Neighbor_alltoallw with MPI.BOTTOM as both buffers, counts 1, displacements 0
    and one struct datatype per block built from MPI.Get_address of separate arrays."""
    comm = moore_neighborhood(**CASE5_WRAPS[algorithm])
    owned = []
    try:
        with agreed_failures() as failures:
            nbh = neighborhood(comm)
            send = AbsoluteBlocks(len(nbh.destinations), fill=5)
            got = AbsoluteBlocks(len(nbh.sources))
            want = AbsoluteBlocks(len(nbh.sources))
            owned += [send, got, want]
            if mode == "blocking":
                comm.Neighbor_alltoallw(send.spec(), got.spec())
            else:
                request = comm.Neighbor_alltoallw_init(send.spec(), got.spec())
                request.Start()
                request.Wait()
                request.Free()
            plain(comm).Neighbor_alltoallw(send.spec(), want.spec())
            if got.tobytes() != want.tobytes():
                failures.append(f"received {got.parts} expected {want.parts}")
    finally:
        for blocks in owned:
            blocks.free()
        comm.Free()


@pytest.mark.parametrize("collective", ["alltoallw", "alltoallv"])
@pytest.mark.parametrize("algorithm", sorted(CASE5_WRAPS))
def test_datatype_resized_to_an_extent_of_2_to_the_40(algorithm, collective):
    """Case 5: ``MPI.INT.Create_resized(0, 2**40)``, count 1 per block. alltoallw: byte
    displacements 4*k on both sides; alltoallv: every send block at displacement 0 (send
    blocks may overlap), received as MPI.INT at displacements 0, 1, 2, ..."""
    comm = moore_neighborhood(**CASE5_WRAPS[algorithm])
    huge = MPI.INT.Create_resized(0, 2**40).Commit()
    try:
        with agreed_failures() as failures:
            nbh = neighborhood(comm)
            nsend, nrecv = len(nbh.destinations), len(nbh.sources)
            send = numpy.array([cases.value(RANK, k, 0, 9) for k in range(max(nsend, 1))], dtype="i")
            results = []
            for run in (comm, plain(comm)):
                recv = numpy.full(max(nrecv, 1), -7, dtype="i")
                if collective == "alltoallw":
                    run.Neighbor_alltoallw([send, [1] * nsend, [4 * k for k in range(nsend)], [huge] * nsend],
                                           [recv, [1] * nrecv, [4 * i for i in range(nrecv)], [huge] * nrecv])
                else:
                    run.Neighbor_alltoallv([send, [1] * nsend, [0] * nsend, huge],
                                           [recv, [1] * nrecv, list(range(nrecv)), MPI.INT])
                results.append(recv)
            compare(failures, collective, *results)
    finally:
        huge.Free()
        comm.Free()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["blocking", "nonblocking", "persistent"])
@pytest.mark.parametrize("executor", ["steps", "dag", "rma"])
@pytest.mark.parametrize("collective", ["alltoall", "allgather"])
def test_a_forwarder_without_receives_whose_send_datatype_reads_an_element_twice(collective, executor, how):
    """Case 5: MPI lets a send datatype name one element twice (only receiving through one is
    erroneous). Edges 0->1, 1->3, 2->3, nodes of two ranks under ``node_aware``: ranks 0 and 2
    receive nothing but carry their node's blocks, and send 4 ints read at offsets 0, 1, 1, 2;
    the others send 4 contiguous ints (one type signature). A block in transit was stored
    through the forwarder's send datatype, so one element landed twice and one never."""
    if SIZE < 4:
        pytest.skip("needs ranks 0-3")
    edges = [(0, 1), (1, 3), (2, 3)]
    graph = graph_from_edges(edges)
    comm = sparsecoll.wrap(graph, "node_aware", executor=executor, ranks_per_socket=2, sockets_per_node=1)
    overlapping = (MPI.INT.Create_vector(2, 2, 1) if RANK in (0, 2) else MPI.INT.Create_contiguous(4)).Commit()
    try:
        with agreed_failures() as failures:
            destinations = [b for a, b in edges if a == RANK]
            sources = [a for a, b in edges if b == RANK]
            send = numpy.array([1000 * RANK + i for i in range(4 * max(len(destinations), 1) + 1)], dtype="i")
            results = []
            for run in (comm, graph):
                recv = numpy.full(max(4 * len(sources), 1), -7, dtype="i")
                cases.run_call(run, collective, how, [send, 1, overlapping], [recv, 4, MPI.INT])
                results.append(recv)
            compare(failures, collective, *results)
    finally:
        overlapping.Free()
        comm.Free()


# ---------------------------------------------------------------------------------
# case 6: plan_stats is local


@pytest.mark.timeout(60)
def test_plan_stats_after_free_says_the_communicator_was_freed():
    """It said nothing was built yet and to call Neighbor_alltoall, which a freed communicator cannot."""
    comm = moore_neighborhood(algorithm="direct")
    comm.Neighbor_alltoall(numpy.zeros(8), numpy.zeros(8))
    assert comm.plan_stats("alltoall")["steps"] == 1
    comm.Free()
    with pytest.raises(RuntimeError, match="was freed"):
        comm.plan_stats("alltoall")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("algorithm", ["distance_halving", "common_neighbor"])
def test_plan_stats_is_local(algorithm):
    """Case 6: before any collective call, ``plan_stats`` on rank 0 alone raises RuntimeError
    promptly, naming the call to make first; after one Neighbor_allgather on every rank it
    returns a dict with "steps" on rank 0 alone, which then joins a final collective."""
    raw = chord_graph()
    try:
        with agreed_failures() as failures:
            comm = sparsecoll.wrap(raw, algorithm)
            if RANK == 0:
                began = time.monotonic()
                expect_error(failures, "plan_stats before any call", RuntimeError, "Neighbor_allgather",
                             lambda: comm.plan_stats("allgather"))
                if time.monotonic() - began > 10:
                    failures.append(f"plan_stats took {time.monotonic() - began:.1f}s to answer")
            WORLD.Barrier()
            done = start(comm, "allgather", Exchange(neighborhood(raw), "allgather"), uniform(2), salt=6,
                         label="Neighbor_allgather", how="blocking")
            done.check(failures)
            if RANK == 0:
                try:
                    stats = comm.plan_stats("allgather")
                    if not isinstance(stats, dict) or "steps" not in stats:
                        failures.append(f"plan_stats after a call returned {stats!r}")
                except Exception as exc:  # noqa: BLE001
                    failures.append(f"plan_stats after a call: {describe(exc)}")
    finally:
        raw.Free()


# ---------------------------------------------------------------------------------
# case 7: Dup/Clone, None buffers, wrap-time option checks, signatures, memory

CASE7_COMMS = {
    "graph-common_neighbor": (lambda: sparsecoll.wrap(complete_graph(), "common_neighbor", theta=1),
                              "common_neighbor", {"theta": 1}),
    "moore-cartesian": (lambda: moore_neighborhood(algorithm="cartesian"), "cartesian", {}),
}


def duplicate(comm, how: str):
    """``comm``'s copy by mpi4py's method ``how`` (a nonblocking one completed)."""
    if how.startswith("Idup"):
        copy, request = comm.Idup() if how == "Idup" else comm.Idup_with_info(MPI.INFO_NULL)
        request.Wait()
        return copy
    return comm.Dup_with_info(MPI.INFO_NULL) if how == "Dup_with_info" else getattr(comm, how)()


@pytest.mark.timeout(60)  # without the fix: rank 0's query made the copy's runtime, a Dup the others never made
@pytest.mark.parametrize("algorithm", ["direct", "auto"])
def test_an_idup_copy_answers_local_queries_on_one_rank(algorithm):
    """A copy made by ``Idup`` gets its runtime without communicating, so a local query made on one
    rank only (``runtime.cache_sizes()``) does not turn into a collective there; a second copy
    never used is freed (its private duplicate completed)."""
    rank, size = WORLD.Get_rank(), WORLD.Get_size()
    comm = sparsecoll.wrap(WORLD.Create_dist_graph_adjacent([(rank - 1) % size], [(rank + 1) % size]), algorithm)
    copy, request = comm.Idup()
    unused, unused_request = comm.Idup_with_info(MPI.INFO_NULL)
    try:
        request.Wait()
        if rank == 0:
            assert copy.runtime.cache_sizes()["schedules"] == 0
        copy.Barrier()  # every rank, in the same order; rank 0 alone made the query
        got = numpy.zeros(1)
        copy.Neighbor_allgather(numpy.array([float(rank)]), got)
        assert got.tolist() == [float((rank - 1) % size)]
        unused_request.Wait()
    finally:
        unused.Free()
        copy.Free()
        comm.Free()


@pytest.mark.timeout(60)
def test_an_idup_copy_sends_its_errors_to_the_handler_set_on_it():
    """The private duplicate of an ``Idup`` copy is made by a second ``Idup`` of the original,
    beside the copy, so it took the original's error handler of then: one set on the copy before
    its runtime was made did not reach the communicator sparsecoll's MPI errors arise on
    (``Dup``, made when the runtime is, copies the handle's). It does now."""
    rank, size = WORLD.Get_rank(), WORLD.Get_size()
    comm = sparsecoll.wrap(WORLD.Create_dist_graph_adjacent([(rank - 1) % size], [(rank + 1) % size]), "direct")
    copy, request = comm.Idup()
    request.Wait()
    try:
        copy.Set_errhandler(MPI.ERRORS_ABORT)
        got = numpy.zeros(1)
        copy.Neighbor_allgather(numpy.array([float(rank)]), got)  # makes the copy's runtime
        assert got.tolist() == [float((rank - 1) % size)]
        handlers = [c.Get_errhandler() for c in (copy, copy.runtime.private)]
        assert handlers[0] == handlers[1] == MPI.ERRORS_ABORT
        for handler in handlers:
            handler.Free()
        copy.Set_errhandler(MPI.ERRORS_RETURN)
    finally:
        copy.Free()
        comm.Free()


@pytest.mark.parametrize("how", ["Dup", "Clone", "Dup_with_info", "Idup", "Idup_with_info"])
@pytest.mark.parametrize("name", sorted(CASE7_COMMS))
def test_dup_and_clone_keep_algorithm_and_options(name, how):
    """Case 7a: ``wrapped.Dup()``, ``Clone()`` and the other copies keep ``.algorithm`` and
    ``.options`` (the options in force, a dict) and the copy computes what the MPI library
    computes (``Idup_with_info`` lost both: mpi4py's method, not overridden, made an ``auto`` copy)."""
    make, algorithm, options = CASE7_COMMS[name]
    comm = make()
    copy = None
    try:
        with agreed_failures() as failures:
            copy = duplicate(comm, how)
            if not sparsecoll.is_wrapped(copy):
                failures.append(f"{how}() returned an unwrapped {type(copy).__name__}")
            for label, wrapper in (("original", comm), ("copy", copy)):
                if getattr(wrapper, "algorithm", None) != algorithm:
                    failures.append(f"{label}.algorithm is {getattr(wrapper, 'algorithm', None)!r}, not {algorithm!r}")
                in_force = getattr(wrapper, "options", None)
                if not isinstance(in_force, dict) or any(in_force.get(k) != v for k, v in options.items()):
                    failures.append(f"{label}.options is {in_force!r}, expected a dict with {options}")
            if getattr(copy, "options", None) != getattr(comm, "options", None):
                copied, original = getattr(copy, "options", None), getattr(comm, "options", None)
                failures.append(f"copy.options {copied!r} != {original!r}")
            nbh = neighborhood(copy)
            for collective in ("alltoallv", "allgather"):
                exchange = Exchange(nbh, collective)
                count_of = count_function(collective, 2)
                start(copy, collective, exchange, count_of, salt=7, label=f"copy {collective}",
                      how="blocking").check(failures)
                call = start(copy, collective, exchange.fresh(), count_of, salt=8, label=f"copy I{collective}")
                call.request.Wait()
                call.check(failures)
    finally:
        if copy is not None:
            copy.Free()
        comm.Free()


def good_specs(nbh: Neighborhood, collective: str):
    """(send spec, receive spec) of a valid call with one int per block."""
    nsend = 1 if family(collective) == "allgather" else len(nbh.destinations)
    nrecv = len(nbh.sources)
    send = numpy.arange(max(nsend, 1), dtype="i") + 100 * RANK
    recv = numpy.full(max(nrecv, 1), -7, dtype="i")
    if collective in REGULAR:
        return [send, 1, MPI.INT], [recv, 1, MPI.INT]
    simple_send = [send, 1, MPI.INT]
    vector = lambda buf, n: [buf, [1] * n, list(range(n)), MPI.INT]  # noqa: E731
    w = lambda buf, n: [buf, [1] * n, [4 * i for i in range(n)], [MPI.INT] * n]  # noqa: E731
    return {
        "allgatherv": (simple_send, vector(recv, nrecv)),
        "allgatherw": (simple_send, w(recv, nrecv)),
        "alltoallv": (vector(send, nsend), vector(recv, nrecv)),
        "alltoallw": (w(send, nsend), w(recv, nrecv)),
    }[collective]


def empty_specs(nbh: Neighborhood, collective: str):
    """(send spec, receive spec) that move nothing, with ``None`` as the buffer."""
    nsend = 1 if family(collective) == "allgather" else len(nbh.destinations)
    nrecv = len(nbh.sources)
    simple = [None, 0, MPI.INT]
    vector = lambda n: [None, [0] * n, [0] * n, MPI.INT]  # noqa: E731
    w = lambda n: [None, [0] * n, [0] * n, [MPI.INT] * n]  # noqa: E731
    return {
        "allgather": (simple, simple),
        "alltoall": (simple, simple),
        "allgatherv": (simple, vector(nrecv)),
        "allgatherw": (simple, w(nrecv)),
        "alltoallv": (vector(nsend), vector(nrecv)),
        "alltoallw": (w(nsend), w(nrecv)),
    }[collective]


def method_name(collective: str, kind: str) -> str:
    return {"blocking": "Neighbor_{}", "nonblocking": "Ineighbor_{}", "persistent": "Neighbor_{}_init"}[kind].format(
        collective)


def finisher(kind: str):
    """How to complete what a call of ``kind`` returned when it should have raised."""
    if kind == "nonblocking":
        return lambda request: request.Wait()
    if kind == "persistent":
        return lambda request: request.Free()
    return None


def run_to_completion(comm, collective: str, kind: str, send_spec, recv_spec) -> None:
    result = getattr(comm, method_name(collective, kind))(send_spec, recv_spec)
    if kind == "nonblocking":
        result.Wait()
    elif kind == "persistent":
        result.Start()
        result.Wait()
        result.Free()


def test_none_as_a_whole_buffer_is_a_type_error():
    """Case 7b: ``None`` as a whole buffer argument raises TypeError in all 18 methods, as
    mpi4py's raise ("message: expecting buffer or list/tuple"; alltoallw: "object of type
    'NoneType' has no len()"); ``[None, 0, MPI.INT]`` and the other empty specs stay legal."""
    raw = ring_graph()
    try:
        with agreed_failures() as failures:
            comm = sparsecoll.wrap(raw, "direct")
            nbh = neighborhood(raw)
            for collective in ALL_COLLECTIVES:
                send_empty, recv_empty = empty_specs(nbh, collective)
                for kind in KINDS:
                    name = method_name(collective, kind)
                    method = getattr(comm, name)
                    expect_error(failures, f"{name}(None, empty)", TypeError, "",
                                 lambda method=method, recv_empty=recv_empty: method(None, recv_empty),
                                 finisher(kind))
                    expect_error(failures, f"{name}(empty, None)", TypeError, "",
                                 lambda method=method, send_empty=send_empty: method(send_empty, None),
                                 finisher(kind))
                    if collective != "allgatherw":  # what mpi4py itself does: a TypeError (its message
                        # differs between the buffer-spec forms: "expecting buffer or list/tuple", or for
                        # the W forms "object of type 'NoneType' has no len()")
                        expect_error(failures, f"mpi4py {name}(None, empty)", TypeError, "",
                                     lambda name=name, empty=recv_empty: getattr(plain(raw), name)(None, empty),
                                     finisher(kind))
                    try:
                        run_to_completion(comm, collective, kind, send_empty, recv_empty)
                    except Exception as exc:  # noqa: BLE001
                        failures.append(f"{name} with empty specs {send_empty}, {recv_empty}: {describe(exc)}")
    finally:
        raw.Free()


def test_bad_options_raise_at_wrap_time():
    """Case 7c: option values are checked by ``wrap`` itself (before any call), naming the option."""
    raw = ring_graph()
    cart = WORLD.Create_cart([SIZE], periods=[True])
    try:
        with agreed_failures() as failures:
            expect_error(failures, "ranks_per_socket=0", ValueError, "ranks_per_socket",
                         lambda: sparsecoll.wrap(raw, "distance_halving", ranks_per_socket=0))
            expect_error(failures, "theta=2 for cartesian", TypeError, "theta",
                         lambda: sparsecoll.wrap(cart, "cartesian", theta=2))
            expect_error(failures, "a missing profile file", ValueError, "no-such-profile.json",
                         lambda: sparsecoll.wrap(cart, profile="no-such-profile.json"))
            expect_error(failures, "verify_choice=1", TypeError, "verify_choice",
                         lambda: sparsecoll.wrap(cart, verify_choice=1))
            # arguments that would change nothing are refused, not dropped (they were ignored)
            expect_error(failures, "a profile for direct", TypeError, "profile: only algorithm='auto'",
                         lambda: sparsecoll.wrap(cart, "direct", profile=BUILTIN))
            expect_error(failures, "verify_choice for direct", TypeError, "verify_choice: only algorithm='auto'",
                         lambda: sparsecoll.wrap(cart, "direct", verify_choice=True))
            for name, value in (("executor", "bogus"), ("rebind", True), ("profile", BUILTIN),
                                ("verify_choice", True), ("executor_options", {}), ("topology", object()),
                                ("global_collectives", "hierarchical"), ("info", {})):
                expect_error(failures, f"{name} for an intracommunicator", TypeError,
                             f"{name}: is for topology communicators",
                             lambda name=name, value=value: sparsecoll.wrap(WORLD, **{name: value}))
    finally:
        cart.Free()
        raw.Free()


def test_methods_reject_extra_positional_arguments_and_persistent_ones_take_info():
    """Case 7d: the 18 methods raise TypeError for an extra positional argument, as mpi4py's
    do; the persistent ones accept ``info`` positionally and as ``info=``."""
    raw = ring_graph()
    try:
        with agreed_failures() as failures:
            comm = sparsecoll.wrap(raw, "direct")
            nbh = neighborhood(raw)
            for collective in ALL_COLLECTIVES:
                for kind in KINDS:
                    name = method_name(collective, kind)
                    send_spec, recv_spec = good_specs(nbh, collective)
                    extra = (MPI.INFO_NULL, 5) if kind == "persistent" else (5,)
                    expect_error(failures, f"{name}(s, r, {', '.join(map(str, extra))})", TypeError, "",
                                 lambda name=name, send_spec=send_spec, recv_spec=recv_spec, extra=extra:
                                 getattr(comm, name)(send_spec, recv_spec, *extra), finisher(kind))
            for collective in ("alltoall", "allgatherv", "alltoallw"):
                name = method_name(collective, "persistent")
                for how, call in (("positional", lambda s, r, name=name: getattr(comm, name)(s, r, MPI.INFO_NULL)),
                                  ("keyword", lambda s, r, name=name: getattr(comm, name)(s, r, info=MPI.INFO_NULL))):
                    try:
                        send_spec, recv_spec = good_specs(nbh, collective)
                        before = recv_spec[0].copy()
                        request = call(send_spec, recv_spec)
                        request.Start()
                        request.Wait()
                        request.Free()
                        expected = before.copy()
                        getattr(plain(raw), "Neighbor_" + collective)(send_spec, [expected, *recv_spec[1:]])
                        compare(failures, f"{name} info {how}", recv_spec[0], expected)
                    except Exception as exc:  # noqa: BLE001
                        failures.append(f"{name} with info {how}: {describe(exc)}")
    finally:
        raw.Free()


@pytest.mark.parametrize("algorithm", ["direct", "cartesian"])
def test_caches_do_not_keep_user_arrays_alive(algorithm):
    """Case 7e: after a blocking call, a completed nonblocking call and a freed persistent
    request, the user's arrays die with their last reference; ``release_caches()`` is local
    (rank 0 alone calls it) and the communicator keeps working."""
    comm = moore_neighborhood(algorithm=algorithm)
    try:
        with agreed_failures() as failures:
            nbh = neighborhood(comm)
            for kind in KINDS:
                collective = "alltoall" if kind != "nonblocking" else "allgather"
                exchange = Exchange(nbh, collective)
                send_spec, recv_spec_of = exchange.prepare(uniform(2), salt=11)
                refs = [weakref.ref(exchange.send), weakref.ref(exchange.recv)]
                if kind == "persistent":
                    request = comm.Neighbor_alltoall_init(send_spec, recv_spec_of(exchange.recv))
                    request.Start()
                    request.Wait()
                    request.Free()
                else:
                    run_to_completion(comm, collective, kind, send_spec, recv_spec_of(exchange.recv))
                    request = None
                del exchange, send_spec, recv_spec_of, request
                gc.collect()
                if any(ref() is not None for ref in refs):
                    failures.append(f"{kind} {collective}: the user's arrays outlived their last reference")
            if RANK == 0:
                try:
                    comm.release_caches()
                except Exception as exc:  # noqa: BLE001
                    failures.append(f"release_caches() on rank 0 alone: {describe(exc)}")
            for collective in ("alltoall", "allgatherv"):
                start(comm, collective, Exchange(nbh, collective), count_function(collective, 5), salt=12,
                      label=f"{collective} after release_caches", how="blocking").check(failures)
    finally:
        comm.Free()


# ---------------------------------------------------------------------------------
# case 8: randomized programs (hypothesis)

DEFAULT_EXAMPLES = 40
EXAMPLES = int(os.environ.get("SPARSECOLL_ADVERSARIAL_EXAMPLES", DEFAULT_EXAMPLES))
#: seconds one program may run before this rank prints it with every thread's stack and exits
PROGRAM_TIMEOUT = float(os.environ.get("SPARSECOLL_ADVERSARIAL_PROGRAM_TIMEOUT", 60))
PROPERTY_TIMEOUT = float(os.environ.get("SPARSECOLL_ADVERSARIAL_TIMEOUT", 120 + 15 * EXAMPLES))

#: every registered algorithm; the Cartesian ones need cart_neighborhood_create's
#: communicators, distance_halving implements the allgather family only
ALGORITHMS = sorted(name for name in sparsecoll.algorithms() if name != "auto")
if os.environ.get("SPARSECOLL_ADVERSARIAL_ALGORITHMS"):  # narrow the programs (when chasing one failure)
    ALGORITHMS = sorted(set(ALGORITHMS) & set(os.environ["SPARSECOLL_ADVERSARIAL_ALGORITHMS"].split(",")))
CARTESIAN_ONLY = {"cartesian", "cartesian_trivial"}
ALLGATHER_ONLY = {"distance_halving"}
MULTI_STEP_NAMES = {"cartesian", "common_neighbor", "distance_halving", "loggp_tree", "node_aware"}
WITH_AUTO = "auto" in os.environ.get("SPARSECOLL_ADVERSARIAL_ALGORITHMS", "auto")
#: Timed pairs of the online check of auto's persistent requests in these programs (one, so that a
#: request started :data:`CHECKED_STARTS` times has agreed on its verdict and runs the winner).
CHECKED_PAIRS = 1
CHECKED_STARTS = 2 * (3 + CHECKED_PAIRS) + 2  # auto.CHECK_WARMUP = 3 pairs untimed; one start past the verdict
#: What a program "used" when one of auto's persistent requests agreed on its check.
AUTO_CHECK_AGREED = "auto: a persistent request's check agreed"
SHAPES = ("graph", "graph", "cart_neighborhood", "cart_neighborhood", "cartcomm")


def candidate_algorithms(shape: str) -> list:
    """The algorithms a program on ``shape`` may wrap with (the multi-step ones twice as often)."""
    names = []
    for name in ALGORITHMS + (["auto"] if WITH_AUTO else []) + sorted(MULTI_STEP_NAMES & set(ALGORITHMS)):
        if name in CARTESIAN_ONLY and shape != "cart_neighborhood":
            continue
        if name == "native" and OPEN_MPI and shape == "cartcomm":
            continue  # Open MPI 5.0.x matches duplicate Cartesian edges wrongly (open-mpi/ompi#14430)
        names.append(name)
    return names


def collectives_for(algorithm: str, persistent: bool) -> list:
    names = ["allgather", "allgatherv"] if algorithm in ALLGATHER_ONLY else list(COLLECTIVES)
    if persistent and algorithm == "native":
        names.remove("alltoallw")  # MPICH 5.0.2: persistent Neighbor_alltoallw hangs with repeated neighbors
    return names


def per_rank(strategy, size: int):
    return st.lists(strategy, min_size=size, max_size=size)


@st.composite
def graph_topologies(draw, size: int):
    """A distributed graph as an edge list (its order is the neighbor order) of some density,
    with repeated edges, self loops and (at low density) ranks without neighbors."""
    density = draw(st.sampled_from([0.1, 0.3, 0.6, 0.9]))
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    edges = []
    for a in range(size):
        for b in range(size):
            if rng.random() < density:
                edges += [(a, b)] * (2 if rng.random() < 0.25 else 1)
    rng.shuffle(edges)
    if OPEN_MPI:  # Open MPI 5.0.x hangs where exactly one of in- and out-degree is 0 (open-mpi/ompi#14452)
        for r in range(size):
            if (any(b == r for _, b in edges)) != (any(a == r for a, _ in edges)):
                edges.append((r, r))
    return ("graph", edges)


@st.composite
def cartesian_topologies(draw, size: int, neighborhood: bool):
    """A Cartesian communicator, or a Cartesian neighborhood of 1-6 offsets (repeats, zero)."""
    ndims = draw(st.integers(1, 3))
    dims = list(draw(st.permutations(MPI.Compute_dims(size, ndims))))
    if neighborhood and OPEN_MPI:
        periods = [True] * ndims  # Open MPI 5.0.11: blocking calls crash on a graph with PROC_NULL
    else:
        periods = draw(st.lists(st.booleans(), min_size=ndims, max_size=ndims))
    if not neighborhood:
        return ("cartcomm", dims, periods)
    offsets = draw(st.lists(st.tuples(*[st.integers(-2, 2)] * ndims), min_size=1, max_size=6))
    return ("cart_neighborhood", dims, periods, offsets)


@st.composite
def wrappers(draw, names: list, size: int):
    name = draw(st.sampled_from(names))
    options = {}
    if name == "common_neighbor":
        theta = draw(st.sampled_from([None, 1, 1, 2]))
        if theta is not None:
            options["theta"] = theta
    elif name in ("distance_halving", "node_aware"):  # node_aware: nodes of ranks_per_socket ranks
        ranks_per_socket = draw(st.sampled_from([None, 1, 1, 2]))
        if ranks_per_socket is not None and ranks_per_socket <= size:
            options["ranks_per_socket"] = ranks_per_socket
    elif name == "loggp_tree" and draw(st.booleans()):
        options.update(L=0.0, t=0)  # hands off wherever X >= 2
    elif name == "auto" and draw(st.booleans()):
        options["verify_choice"] = True  # every persistent request checked (the test widens TRIAL_BAND)
    if name != "native":
        # SC12 III-C: messages start as their dependencies complete; II-C: one-sided puts
        executor = draw(st.sampled_from([None, None, "dag", "dag", "rma", "rma_canary"]))
        if executor is not None:
            options["executor"] = executor
        if executor in ("rma", "rma_canary"):  # SC12 II-C2: RTR trees of degree 1 (a chain) to 3
            rtr_tree = draw(st.sampled_from([None, 1, 2, 3]))
            if rtr_tree is not None:
                options["executor_options"] = {"rtr_tree": rtr_tree}
    return (name, options)


@st.composite
def call_templates(draw, wrapper_list: list):
    """(wrapper index, collective, element kind, layout): one call of the program's repertoire.

    Few layouts (counts per edge) and a small repertoire, so that calls repeat as in an
    application's loop: a rank that reuses its arrays then meets its cached schedule
    while the others bind new ones."""
    w = draw(st.integers(0, len(wrapper_list) - 1))
    collective = draw(st.sampled_from(collectives_for(wrapper_list[w][0], persistent=False)))
    return (w, collective, draw(st.sampled_from(["i4", "i4", "f8", "strided"])), draw(st.sampled_from([0, 0, 1, 2])))


@st.composite
def calls(draw, wrapper_list: list, menu: list, persistent: bool = False):
    """(wrapper index, collective, element kind, layout, salt of the data): a call of the
    repertoire, sometimes on another wrapper of the same handle, with new data."""
    w, collective, kind, layout = draw(st.sampled_from(menu))
    others = [i for i, (name, _) in enumerate(wrapper_list) if collective in collectives_for(name, persistent)]
    if draw(st.integers(0, 2)) == 0 or w not in others:
        w = draw(st.sampled_from(others))
    return (w, collective, kind, layout, draw(st.integers(0, 99)))


@st.composite
def operations(draw, wrapper_list: list, menu: list, size: int):
    op = draw(st.sampled_from(["blocking", "nonblocking", "nonblocking", "persistent", "ring"]))
    if op == "ring":
        return {"op": op, "salt": draw(st.integers(0, 99))}
    if op == "persistent" and not any(c in collectives_for(name, True)
                                      for name, _ in wrapper_list for _, c, _, _ in menu):
        op = "blocking"  # (only native wrappers and alltoallw calls)
    reuse = draw(per_rank(st.booleans(), size))
    if op == "blocking":
        return {"op": op, "call": draw(calls(wrapper_list, menu)), "reuse": reuse}
    n = draw(st.integers(1, 4 if op == "nonblocking" else 2))
    persistent = op == "persistent"
    usable = [t for t in menu if any(t[1] in collectives_for(name, persistent) for name, _ in wrapper_list)]
    step = {"op": op, "calls": [draw(calls(wrapper_list, usable, persistent)) for _ in range(n)], "reuse": reuse,
            "orders": draw(per_rank(st.permutations(range(n)), size)),
            "completion": draw(per_rank(st.sampled_from(["wait", "test"]), size))}
    if op == "nonblocking":
        step["ring_during"] = draw(st.booleans())
    else:
        step["starts"] = draw(st.sampled_from([1, 2, 3, CHECKED_STARTS]))
    return step


@st.composite
def programs(draw, size: int, require=None, check: bool = False):
    """One whole program: topology, wrappers of its handle, a repertoire of calls and the
    operations, with per-rank choices (buffer reuse, completion order and method) indexed
    by rank. ``require``: an algorithm the first wrapper has and the first operation calls.
    ``check``: a distributed graph whose first wrapper is auto with ``verify_choice=True``,
    and whose first operation starts one or two of its persistent requests until their checks
    have agreed."""
    shapes = [shape for shape in SHAPES if require is None or require in candidate_algorithms(shape)]
    if check:
        shapes = ["graph"]  # (Open MPI's library may not run on some Cartesian neighborhoods: no check)
    shape = draw(st.sampled_from(shapes))
    if shape == "graph":
        topology = draw(graph_topologies(size))
    else:
        topology = draw(cartesian_topologies(size, shape == "cart_neighborhood"))
    names = candidate_algorithms(shape)
    wrapper_list = draw(st.lists(wrappers(names, size), min_size=1, max_size=4))
    if require is not None:
        wrapper_list[0] = draw(wrappers([require], size))
    menu = draw(st.lists(call_templates(wrapper_list), min_size=1, max_size=3))
    ops = draw(st.lists(operations(wrapper_list, menu, size), min_size=2, max_size=8))
    if require is not None:
        first = (0, *draw(call_templates(wrapper_list[:1]))[1:], draw(st.integers(0, 99)))
        ops.insert(0, {"op": "blocking", "call": first, "reuse": draw(per_rank(st.booleans(), size))})
    if check:
        wrapper_list[0] = ("auto", {**wrapper_list[0][1], "verify_choice": True})
        n = draw(st.integers(1, 2))
        regular = [(0, c, kind, layout) for c in ("allgather", "alltoall") for kind in ("i4", "f8")
                   for layout in (0, 1)]
        ops.insert(0, {"op": "persistent", "calls": [(*draw(st.sampled_from(regular)), draw(st.integers(0, 99)))
                                                     for _ in range(n)],
                       "reuse": draw(per_rank(st.booleans(), size)),
                       "orders": draw(per_rank(st.permutations(range(n)), size)),
                       "completion": draw(per_rank(st.sampled_from(["wait", "test"]), size)),
                       "starts": CHECKED_STARTS})
    return {"topology": topology, "wrappers": wrapper_list, "ops": ops}


def layout_counts(collective: str, layout: int):
    """count_of of one of the program layouts (counts 0-3 per edge; regular: 2, 1 or 0)."""
    return uniform((2, 1, 0)[layout]) if collective in REGULAR else varied(layout)


def build_topology(topology):
    shape = topology[0]
    if shape == "graph":
        return graph_from_edges(topology[1])
    if shape == "cartcomm":
        return WORLD.Create_cart(topology[1], periods=topology[2])
    return sparsecoll.cart_neighborhood_create(WORLD, topology[1], topology[2], topology[3])


class ProgramRun:
    """One program on this rank: its communicator, wrappers, buffer pool and failures."""

    def __init__(self, program: dict):
        self.program = program
        self.failures = []
        self.used = set()  # algorithms that ran at least one call
        self.pool = {}  # (collective, kind, slot) -> Exchange reused by this rank

    def run(self) -> None:
        handle = build_topology(self.program["topology"])
        try:
            self.nbh = neighborhood(handle)
            self.wrapped = [sparsecoll.wrap(handle, name, **options) for name, options in self.program["wrappers"]]
            for index, op in enumerate(self.program["ops"]):
                getattr(self, "_" + op["op"])(index, op)
        except Exception as exc:  # noqa: BLE001
            self.failures.append(describe(exc))
        finally:
            handle.Free()

    def _label(self, index: int, op: str, call) -> str:
        w, collective, kind, layout, salt = call
        name, options = self.program["wrappers"][w]
        return f"op {index} {op} {name}{options or ''} {collective} {kind} layout={layout} salt={salt}"

    def _exchange(self, collective: str, kind: str, slot, reuse: bool) -> Exchange:
        if not reuse:
            return Exchange(self.nbh, collective, kind)
        key = (collective, kind, slot)
        if key not in self.pool:
            self.pool[key] = Exchange(self.nbh, collective, kind)
        return self.pool[key]

    def _comm(self, call):
        name, options = self.program["wrappers"][call[0]]
        self.used.add(name)
        if "executor" in options:
            self.used.add(f"{name}[{options['executor']}]")
        return self.wrapped[call[0]]

    def _complete(self, requests, op) -> None:
        order = op["orders"][RANK]
        if op["completion"][RANK] == "wait":
            for i in order:
                requests[i].Wait()
        else:
            complete_by_polling(requests, order)

    def _blocking(self, index: int, op: dict) -> None:
        call = op["call"]
        _, collective, kind, layout, salt = call
        exchange = self._exchange(collective, kind, "blocking", op["reuse"][RANK])
        start(self._comm(call), collective, exchange, layout_counts(collective, layout), salt,
              self._label(index, "blocking", call), how="blocking").check(self.failures)

    def _nonblocking(self, index: int, op: dict) -> None:
        started = []
        for slot, call in enumerate(op["calls"]):
            _, collective, kind, layout, salt = call
            exchange = self._exchange(collective, kind, ("nonblocking", slot), op["reuse"][RANK])
            started.append(start(self._comm(call), collective, exchange, layout_counts(collective, layout), salt,
                                 self._label(index, "nonblocking", call)))
        if op["ring_during"]:
            self._ring(index, {"salt": index})
        self._complete([s.request for s in started], op)
        for s in started:
            s.check(self.failures)

    def _persistent(self, index: int, op: dict) -> None:
        requests = []
        try:
            made = []
            for slot, call in enumerate(op["calls"]):
                _, collective, kind, layout, salt = call
                exchange = self._exchange(collective, kind, ("persistent", slot), op["reuse"][RANK])
                count_of = layout_counts(collective, layout)
                send_spec, recv_spec_of = exchange.prepare(count_of, salt)
                request = getattr(self._comm(call), f"Neighbor_{collective}_init")(send_spec,
                                                                                  recv_spec_of(exchange.recv))
                requests.append(request)
                made.append((call, exchange, count_of, request))
            for round_ in range(op["starts"]):
                started = []
                for call, exchange, count_of, request in made:
                    collective, salt = call[1], call[4]
                    send_spec, recv_spec_of = exchange.prepare(count_of, 100 * salt + round_ + 1)  # new data
                    started.append(Started(f"{self._label(index, 'persistent', call)} start {round_}",
                                           self.wrapped[call[0]], collective, exchange, send_spec, recv_spec_of,
                                           exchange.recv.copy(), request))
                for s in started:  # persistent collectives start in the same order everywhere
                    s.request.Start()
                self._complete([s.request for s in started], op)
                for s in started:
                    s.check(self.failures)
        finally:
            for request in requests:
                if isinstance(request, CheckedRequest) and request.winner is not None:
                    self.used.add(AUTO_CHECK_AGREED)
                request.Free()

    def _ring(self, index: int, op: dict) -> None:
        """User point-to-point traffic on WORLD: a ring Sendrecv."""
        out = numpy.array([1000 * op["salt"] + RANK], dtype="i8")
        got = numpy.full(1, -1, dtype="i8")
        WORLD.Sendrecv(out, (RANK + 1) % SIZE, 99, got, (RANK - 1) % SIZE, 99)
        if got[0] != 1000 * op["salt"] + (RANK - 1) % SIZE:
            self.failures.append(f"op {index} ring: got {got[0]}")


_CAPTURE = {}  # the pytest capture manager, so that a hang report reaches the terminal


def _hung(program: dict) -> None:
    manager = _CAPTURE.get("manager")
    if manager is not None:
        manager.suspend(in_=True)
    shown = f":\n{program!r}" if RANK == 0 else " (rank 0 prints it)"
    sys.stderr.write(f"\nadversarial: rank {RANK} still runs a program after {PROGRAM_TIMEOUT:.0f}s "
                     f"(SPARSECOLL_ADVERSARIAL_PROGRAM_TIMEOUT){shown}\n")
    sys.stderr.flush()
    faulthandler.dump_traceback(all_threads=True)
    os._exit(1)


def run_everywhere(program: dict):
    """Run ``program`` on this rank; return (every rank's first failures, algorithms used).

    A program that hangs is printed with every thread's stack, then the process exits.
    """
    watchdog = threading.Timer(PROGRAM_TIMEOUT, _hung, args=(program,))
    watchdog.daemon = True
    watchdog.start()
    try:
        run = ProgramRun(program)
        run.run()
    finally:
        watchdog.cancel()
    everyone = WORLD.allgather([str(f)[:600] for f in run.failures[:3]])
    return [f"rank {r}: {f}" for r, fs in enumerate(everyone) for f in fs], run.used


def drive_examples() -> dict:
    """Rank 0: generate programs with hypothesis and broadcast each one to every rank.

    EXAMPLES programs, then one more for each algorithm none of them called (so every
    algorithm runs at every size, whatever the number of examples), and one more where no
    persistent request of auto agreed on its check."""
    summary = {"programs": 0, "used": set(), "error": None}

    def run(strategy, count: int) -> None:
        @settings(derandomize=True, database=None, deadline=None, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck), max_examples=count, report_multiple_bugs=False)
        @given(program=strategy)
        def check(program):
            WORLD.bcast(program, root=0)
            summary["programs"] += 1
            failures, used = run_everywhere(program)
            summary["used"] |= used
            assert not failures, "\n".join(failures)
        check()

    try:
        run(programs(SIZE), EXAMPLES)
        for name in sorted(set(ALGORITHMS + (["auto"] if WITH_AUTO else [])) - summary["used"]):
            run(programs(SIZE, require=name), 1)
        if WITH_AUTO and AUTO_CHECK_AGREED not in summary["used"]:
            run(programs(SIZE, require="auto", check=True), 1)
    except Exception as exc:  # noqa: BLE001 - reported to every rank below
        summary["error"] = exc
    finally:
        WORLD.bcast(None, root=0)
    return summary


@pytest.mark.timeout(PROPERTY_TIMEOUT)
def test_random_programs_match_the_mpi_library(capsys, request, monkeypatch):
    """Case 8: hypothesis-generated programs (rank 0 generates, every rank runs the same
    program): random topologies, several wrappers of one handle, blocking, nonblocking and
    persistent calls with per-rank buffer reuse and completion orders, user point-to-point
    traffic; every result bit for bit against the MPI library.
    ``SPARSECOLL_ADVERSARIAL_EXAMPLES`` sets the number of programs. auto's persistent requests
    are checked against the library's in short checks (:data:`CHECKED_PAIRS`), of every built
    candidate where a wrapper passed ``verify_choice=True``."""
    from sparsecoll.runtime import auto
    assert auto.CHECK_WARMUP == 3, "CHECKED_STARTS counts on it"
    monkeypatch.setattr(auto, "PERSISTENT_TRIALS", CHECKED_PAIRS)
    monkeypatch.setattr(auto, "TRIAL_BAND", 1e9)
    _CAPTURE["manager"] = request.config.pluginmanager.getplugin("capturemanager")
    if RANK == 0:
        summary = drive_examples()
        error = summary["error"]
        problem = None if error is None else f"{type(error).__name__}: {error}"[:4000]
        missing = set(ALGORITHMS + (["auto"] if WITH_AUTO else [])) - summary["used"]
        if problem is None and missing:
            problem = f"no program called {sorted(missing)}"
        if problem is None and WITH_AUTO and AUTO_CHECK_AGREED not in summary["used"]:
            problem = "no persistent request of auto agreed on its check"
        if problem is None and not any(name.endswith("[dag]") for name in summary["used"]):
            problem = "no program ran the dag executor"
        if problem is None and not any(name.endswith(("[rma]", "[rma_canary]")) for name in summary["used"]):
            problem = "no program ran an rma executor"
        WORLD.bcast(problem, root=0)
        with capsys.disabled():
            print(f"\nadversarial: {summary['programs']} random programs ran at {SIZE} ranks; "
                  f"algorithms used: {sorted(summary['used'])}", flush=True)
        if error is not None:
            raise error
        assert problem is None, problem
    else:
        while True:
            program = WORLD.bcast(None, root=0)
            if program is None:
                break
            run_everywhere(program)
        problem = WORLD.bcast(None, root=0)
        assert problem is None, f"rank 0 reports: {problem}"
