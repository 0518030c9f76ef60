"""Conformance: every collective x {blocking, nonblocking, persistent} x algorithm,
bit for bit against the MPI standard's equivalent code and the MPI library's own
blocking result, on every topology of ``cases.TOPOLOGIES``, with counts 0, 1 and
many, and int32, float64 and a non-contiguous derived datatype.

Runs on every rank (launched by ``tests/test_mpi.py``). Every registered algorithm
is checked on the collectives of each family it supports on a topology (and with the
option sets of ``VARIANTS``), so new algorithms are covered without new code.
"""

from __future__ import annotations

import numpy
import pytest
from mpi4py import MPI

import sparsecoll
from sparsecoll.algorithms import REGISTRY
from sparsecoll.execute import DEFAULT_EXECUTOR, EXECUTORS
from sparsecoll.pattern import family_of

from . import cases, relay  # noqa: F401  (registers the test-only relay algorithm)

COLLECTIVES = ("allgather", "allgatherv", "allgatherw", "alltoall", "alltoallv", "alltoallw")
#: (base count, element kind): counts 0, 1 and many; int32, float64 and a non-contiguous
#: derived datatype (v/w variants add 0-2 per block, so their counts vary per edge)
CASES = ((0, "strided"), (1, "i4"), (1, "f8"), (5, "strided"), (5, "i4"))
#: The cases the executors other than the default run (CI time): zero-size blocks, and 5-7 int32
#: per block (the w variants alternate contiguous and strided blocks: zero-copy and staged
#: regions, tails that do and do not end on an 8-byte word). The datatypes are bind's work, which
#: every executor shares and the default executor runs on every case; the others differ in when
#: they start the same messages. (With all five cases on ``dag`` the suite at 8 ranks took 130 s
#: of CI's 25 minutes, on MPICH alone.)
OTHER_EXECUTOR_CASES = ((0, "strided"), (5, "i4"))
#: Executors that run each on every other topology of the sorted list
#: (every algorithm still runs on both, on about half of the topologies each).
RMA_EXECUTORS = ("rma", "rma_canary")
#: The RTR tree degree (SC12 II-C2) of the RMA executors, rotating with the topologies as the
#: executors do (None: one RTR message per peer): each executor runs with and without a tree.
RTR_TREES = (None, None, 2, 1)
OPEN_MPI = "Open MPI" in MPI.Get_library_version()

_STRIDED = cases.strided_int()


def _numpy_and_types(kind: str, nblocks: int, w_variant: bool):
    if kind == "f8":
        return numpy.float64, [MPI.DOUBLE] * nblocks
    if kind == "strided":
        return numpy.int32, [_STRIDED] * nblocks
    if w_variant:  # alternate contiguous and strided blocks: same signature, other layouts
        return numpy.int32, [MPI.INT32_T if i % 2 == 0 else _STRIDED for i in range(nblocks)]
    return numpy.int32, [MPI.INT32_T] * nblocks


class Case:
    """Buffers, specs and expected counts for one (collective, base count, kind) on one rank."""

    def __init__(self, comm, collective: str, base: int, kind: str):
        self.collective = collective
        self.family = family_of(collective)
        rank = comm.Get_rank()
        sources, destinations = cases.neighbors(comm)
        in_labels, out_labels = cases.edge_labels(comm)
        w_variant = collective.endswith("w")
        vector = collective[-1] in "vw"

        def size_of(origin, dest, label):
            if not vector:
                return base
            if self.family == "allgather":
                return base + (origin % 2 if origin != MPI.PROC_NULL else 0)
            if origin == MPI.PROC_NULL or dest == MPI.PROC_NULL:
                return base
            return base + (origin + 2 * dest + label) % 3

        if self.family == "allgather":
            send_counts = [size_of(rank, None, None)]
        else:
            send_counts = [size_of(rank, d, L) for d, L in zip(destinations, out_labels)]
        recv_counts = [size_of(s, rank, L) for s, L in zip(sources, in_labels)]
        ntype, send_types = _numpy_and_types(kind, len(send_counts), w_variant and self.family == "alltoall")
        _, recv_types = _numpy_and_types(kind, len(recv_counts), w_variant)
        gap = (2 if kind == "strided" else 1) if vector else 0
        self.ntype = ntype
        self.send = cases.make_layout(send_counts, send_types, ntype, fill=-3, gap=gap)
        self.recv_template = cases.make_layout(recv_counts, recv_types, ntype, fill=-7, gap=gap)
        self.rank = rank

    def fill(self, salt: int) -> None:
        """(Re)write the send buffer in place with rank-unique values."""
        cases.fill_blocks(self.send, lambda k: [cases.value(self.rank, k, j, salt) for j in range(10)])

    def fresh_recv(self) -> cases.Layout:
        return cases.Layout(self.recv_template.array.copy(), self.recv_template.blocks)

    def specs(self, recv: cases.Layout):
        """mpi4py buffer specs for the send buffer and ``recv``."""
        return _spec(self.collective, self.send, is_send=True), _spec(self.collective, recv, is_send=False)


def _spec(collective: str, layout: cases.Layout, is_send: bool):
    blocks = layout.blocks
    arr = layout.array
    if collective.startswith("allgather") and is_send:
        offset, count, datatype = blocks[0]
        return [arr, count, datatype]
    counts = [c for _, c, _ in blocks]
    if collective in ("allgather", "alltoall"):
        datatype = blocks[0][2] if blocks else MPI.INT32_T
        return [arr, counts[0] if counts else 0, datatype]
    if collective in ("allgatherv", "alltoallv"):
        datatype = blocks[0][2] if blocks else MPI.INT32_T
        extent = datatype.Get_extent()[1]
        return [arr, (counts, [o // extent for o, _, _ in blocks]), datatype]
    return [arr, (counts, [o for o, _, _ in blocks]), [t for _, _, t in blocks]]


def _same(a: numpy.ndarray, b: numpy.ndarray) -> bool:
    return a.tobytes() == b.tobytes()


def _known_native_bug(comm, algorithm: str, mode: str) -> bool:
    """Open MPI 5.0.x libnbc matches duplicate Cartesian edges wrongly (open-mpi/ompi#14430)."""
    if algorithm != "native" or mode == "blocking" or not OPEN_MPI or not isinstance(comm, MPI.Cartcomm):
        return False
    dims, periods, _ = comm.Get_topo()
    return any(p and d <= 2 for d, p in zip(dims, periods))


def _native_broken_for_graph(raw) -> bool:
    """Open MPI 5.0.x neighborhood collectives hang or truncate on a distributed graph
    where some rank has exactly one of in- and out-degree zero (open-mpi/ompi#14452), and
    its blocking ones crash (SIGSEGV) where a neighbor is ``PROC_NULL`` (5.0.11; the
    nonblocking and persistent ones deliver)."""
    if not OPEN_MPI or not isinstance(raw, MPI.Distgraphcomm):
        return False
    sources, destinations, _ = raw.Get_dist_neighbors()
    one_sided = (len(sources) == 0) != (len(destinations) == 0)
    proc_null = MPI.PROC_NULL in sources or MPI.PROC_NULL in destinations
    return raw.allreduce(one_sided or proc_null, op=MPI.LOR)


def _run(comm, case: Case, recv: cases.Layout, mode: str, salt: int, request_box: dict):
    sendspec, recvspec = case.specs(recv)
    name = case.collective
    if mode == "blocking":
        getattr(comm, "Neighbor_" + name)(sendspec, recvspec)
    elif mode == "nonblocking":
        request = getattr(comm, "Ineighbor_" + name)(sendspec, recvspec)
        if salt == 0:
            request.Wait()
        else:
            while not request.Test():
                pass
    else:
        request = request_box.get("request")
        if request is None:
            request = request_box["request"] = getattr(comm, f"Neighbor_{name}_init")(sendspec, recvspec)
        request.Start()
        if salt == 0:
            request.Wait()
        else:
            while not request.Test():
                pass


#: Option sets each algorithm also runs with (besides its defaults), where they fit the size.
VARIANTS = {
    # several halving steps on a small machine: one or two ranks per socket
    "distance_halving": ({"ranks_per_socket": 1}, {"ranks_per_socket": 2, "sockets_per_node": 2}),
    # schedule coloring (SC12 II-A3): sends reordered into rounds, on a one-step and a multi-step pattern
    "direct": ({"coloring": True},),
    "common_neighbor": ({"coloring": True},),
    # no latency and no tolerance: hands messages off wherever X >= 2 (uneven graphs from 5 ranks on)
    "loggp_tree": ({"L": 0.0, "t": 0},),
    # nodes of 2 ranks (the last one alone at 3 and 5 ranks): gather, one message per node pair, scatter
    "node_aware": ({"ranks_per_socket": 2},),
}


#: Algorithms whose default options give another algorithm's Pattern on this one-node machine, so
#: that only their VARIANTS run (node_aware on one node is direct; CI time).
VARIANTS_ONLY = {"node_aware"}


def _fits(options: dict, size: int) -> bool:
    L, S = options.get("ranks_per_socket", 1), options.get("sockets_per_node", 1)
    return L <= size and S <= -(-size // L)


def wrapped_algorithms(raw, topology, rma_executors=RMA_EXECUTORS, rtr_tree=None) -> list:
    """``(label, name, wrapped communicator, families, executor)`` per registered algorithm and variant,
    each algorithm that runs sparsecoll's schedules once on every executor (None: the default;
    of :data:`RMA_EXECUTORS` only ``rma_executors``, with RTR trees of degree ``rtr_tree``)."""
    out = []
    for name, alg in REGISTRY.items():
        families = tuple(f for f in ("allgather", "alltoall") if alg.unsupported_reason(topology, f) is None)
        if not families:
            continue
        others = sorted(set(EXECUTORS) - {DEFAULT_EXECUTOR} - (set(RMA_EXECUTORS) - set(rma_executors)))
        executors = [None] if alg.runs_library else [None, *others]
        defaults = () if name in VARIANTS_ONLY else ({},)
        for options in (*defaults, *(v for v in VARIANTS.get(name, ()) if _fits(v, raw.Get_size()))):
            for executor in executors:
                chosen = {**options, **({"executor": executor} if executor else {})}
                if executor in RMA_EXECUTORS and rtr_tree is not None:
                    chosen["executor_options"] = {"rtr_tree": rtr_tree}
                label = name + (f"{chosen}" if chosen else "")
                out.append((label, name, sparsecoll.wrap(raw, name, **chosen), families, executor))
    return out


def check_topology(raw, only=None, rma_executors=(), rtr_tree=None) -> list:
    """Run every case on one topology communicator; return failure descriptions.

    ``only``: the algorithm names to check (default: every registered one that fits);
    ``rma_executors``: the executors of :data:`RMA_EXECUTORS` to run besides the others, with
    RTR trees of degree ``rtr_tree`` (None: none).
    """
    failures = []
    topology = sparsecoll.wrap(raw, "direct").neighborhood
    native_broken = _native_broken_for_graph(raw)
    wrapped = [w for w in wrapped_algorithms(raw, topology, rma_executors, rtr_tree)
               if not (native_broken and w[1] == "native") and (only is None or w[1] in only)]
    for collective in COLLECTIVES:
        for base, kind in CASES:
            case = Case(raw, collective, base, kind)
            label = f"{collective} count={base} {kind}"
            expected = {}
            for salt in (0, 1):
                case.fill(salt)
                recv = case.fresh_recv()
                cases.reference_exchange(raw, case.family, case.send, recv)
                expected[salt] = recv.array
            case.fill(0)
            native_recv = case.fresh_recv()
            if collective != "allgatherw" and not native_broken:
                getattr(raw, "Neighbor_" + collective)(*case.specs(native_recv))
                if not _same(native_recv.array, expected[0]):
                    failures.append(f"{label}: the MPI library's blocking result differs from the standard")
            for label_alg, name, comm, families, executor in wrapped:
                if case.family not in families or (executor is not None and (base, kind) not in OTHER_EXECUTOR_CASES):
                    continue
                for mode in ("blocking", "nonblocking", "persistent"):
                    if _known_native_bug(raw, name, mode):
                        continue  # the library errs or misplaces blocks: nothing to compare with
                    box = {}
                    recv = case.fresh_recv()
                    for salt in (0, 1):
                        case.fill(salt)
                        _run(comm, case, recv, mode, salt, box)
                        if not _same(recv.array, expected[salt]):
                            failures.append(f"{label} {label_alg} {mode} salt={salt}: rank {raw.Get_rank()} got "
                                            f"{recv.array.tolist()} expected {expected[salt].tolist()}")
                    if box.get("request") is not None:
                        box["request"].Free()
    return failures


@pytest.mark.parametrize("topology_name", sorted(cases.TOPOLOGIES))
def test_conformance(topology_name):
    world = MPI.COMM_WORLD
    raw = cases.TOPOLOGIES[topology_name](world)
    position = sorted(cases.TOPOLOGIES).index(topology_name)
    rma_executor = RMA_EXECUTORS[position % len(RMA_EXECUTORS)]
    try:
        failures = check_topology(raw, rma_executors=(rma_executor,), rtr_tree=RTR_TREES[position % len(RTR_TREES)])
    finally:
        raw.Free()
    everyone_ok = world.allreduce(not failures, op=MPI.LAND)
    assert not failures, "\n".join(failures[:10])
    assert everyone_ok, "another rank saw a mismatch"
