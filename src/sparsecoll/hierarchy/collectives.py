"""The universal hierarchical algorithm for MPI's global collectives (the paper on hierarchical
shared-memory collectives and imbalanced process arrival, section II, Fig. 1 and Fig. 2).

Every collective runs the steps of Fig. 1 on the node structure of :mod:`.node`:

1. for the vector collectives whose counts are not known everywhere (``Alltoallv``,
   ``Scatterv``, ``Gatherv``) ``ExchangeCntData``: each rank writes its counts into a count
   table in shared memory (SharedCnts) and the node synchronizes; counts are never made global
   (the root of ``Scatterv``/``Gatherv`` writes the per-node totals only its node's leader needs);
2. ``CopyIn``: each rank packs its data into the node's shared buffer (:mod:`.copying`), at
   offsets computed by ``SetupInter`` (:mod:`.offsets`; ``Alltoall(v)`` with the placement of
   Fig. 2, blocks for one destination node adjacent);
3. node barrier; the leaders alone call the MPI library's own collective on the leader
   communicator with the counts and displacements of ``SetupInter`` (``Allgatherv``,
   ``Alltoallv``, ``Bcast``, ``Gatherv``, ``Scatterv``, ``Reduce``, ``Allreduce``,
   ``Reduce_scatter``) on bytes (MPI.BYTE), or on the datatype's one basic element for reductions,
   with every count and displacement inside MPI's int (:mod:`.leaders`: chunks that would pass it
   go in pieces, point to point between two leaders where only those two know their size);
4. node barrier; ``CopyOut``: each rank unpacks its result from the shared buffer.

Reductions (``Reduce``, ``Allreduce``, ``Reduce_scatter(_block)``) use fixed leaders: after
copy-in every node rank reduces its share of the elements over the node's ranks in rank order
(``x0 op (x1 op (... op x_{k-1}))``, so a non-commutative operation keeps MPI's order), then
the leaders reduce across nodes in node order. Fallback, decided from arguments every rank
shares: a reduction runs the library's own collective on the whole communicator when the
datatype's type signature is not one contiguous predefined type, or when a non-commutative
operation meets nodes that are not consecutive rank ranges. MPI calls a user-defined operation's
function with the program's datatype, on data in that datatype's layout: a rank whose datatype
is derived reduces whole elements of it, unpacked into its layout and packed back (a resized
double with padding was reduced as packed doubles once). Which handle a rank passes is its own
(``DOUBLE`` on one rank, a duplicate of it on another, is one signature), so it decides
nothing: that did once, and ranks passing such handles ran different algorithms and hung.

Buffers: the shared buffer and the count table are used in two halves, alternating per call
(every rank makes the same calls in the same order), so a rank that leaves a collective early
and enters the next one never writes over data a slower rank of its node is still copying out.
Growth (:meth:`node.SharedWindow.ensure`) is decided from sizes every node rank computes alike
(counts every rank knows, or the shared count table), never from a rank-local cache.

Errors: argument errors raise ValueError or TypeError naming the argument before this rank
takes part in any synchronization. By default they are local checks (no communication is added),
so as in MPI the other ranks of an erroneous call may wait. With ``check_arguments=True`` (an
option of :func:`sparsecoll.wrap`) every call first makes one small allreduce (``4 + 3 * size``
int64) on the communicator that compares the roots, the bytes every rank moves and, for
``Gatherv`` / ``Scatterv``, the root's count for each rank with that rank's own (for
``Reduce_scatter``, every rank's ``recvcounts`` with every other's); a disagreement
raises the same ValueError on every rank before anything else is sent. A rank whose own
arguments fail their local checks takes part in that allreduce as failed and raises its own
error; the others raise a ValueError naming it (``Reduce_scatter`` without ``recvcounts``, whose
counts are gathered first, and the dynamic leaders' reductions excepted). ``Alltoallv``'s
pairwise counts are not compared.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from functools import partial

import numpy
from mpi4py import MPI

from ..buffers import is_in_place, parse_simple, parse_vector, reject_in_place
from ..checks import mpi_index, reduction_op
from ..execute.p2p import take_errhandler
from . import leaders
from .copying import (
    check_one_datatype,
    check_op_defined,
    laid_out,
    pack,
    pack_block,
    pack_blocks,
    packed_size,
    reduction_element,
    unpack,
    unpack_block,
    unpack_blocks,
    whole_elements,
)
from .node import NodeLayout, SharedWindow
from .offsets import (
    aligned,
    alltoall_receive_placement,
    alltoall_send_placement,
    element_slices,
    exclusive_sum,
    gather_placement,
    within_node,
)
from .reduce_dynamic import DYNAMIC_LEADERS, DynamicReduce
from .reduce_dynamic import MODES as REDUCE_MODES

BYTE = MPI.BYTE
#: What :meth:`Hierarchy.record` names a call that ran this module's algorithm.
HIERARCHICAL = "universal hierarchical"
#: The global collectives (method names) this module runs, with mpi4py's lowercase object forms.
GLOBAL_COLLECTIVES = ("Allgather", "Allgatherv", "Alltoall", "Alltoallv", "Bcast", "Gather", "Gatherv", "Scatter",
                      "Scatterv", "Reduce", "Allreduce", "Reduce_scatter_block", "Reduce_scatter",
                      "allgather", "alltoall", "bcast", "gather", "scatter", "reduce", "allreduce")


def global_collective_name(collective) -> str:
    """``collective`` checked against :data:`GLOBAL_COLLECTIVES` (ValueError naming it otherwise)."""
    if collective not in GLOBAL_COLLECTIVES:
        raise ValueError(f"collective: expected one of {', '.join(GLOBAL_COLLECTIVES)}, got {collective!r}")
    return collective


#: what the leaders call between nodes by default (reported by :meth:`Hierarchy.stats`)
INTER_NODE = "the MPI library's collective on the leader communicator"


class Hierarchy:
    """The universal hierarchical collectives of one communicator (collective to make and free).

    ``ranks_per_node``: emulate nodes of that many consecutive ranks (see
    :meth:`NodeLayout.create`); every rank must pass the same value. ``reduce``: ``"fixed"``
    (fixed leaders, below) or ``"dynamic"`` (``Reduce`` and ``Allreduce`` with dynamic leaders,
    :mod:`.reduce_dynamic`, falling back to the fixed leaders for non-commutative ops and for data
    past MPI's int). Under dynamic leaders the arguments are checked locally only, whatever
    ``check_arguments`` says, since an agreement over the communicator would make every rank wait
    for the last, which dynamic leaders avoid; their leaders talk point to point along the
    paper's binomial tree, not through ``inter_node``.
    """

    def __init__(self, comm: MPI.Intracomm, ranks_per_node=None, check_arguments: bool = False,
                 inter_node=None, reduce: str = "fixed"):
        """Split ``comm`` into nodes and leaders (collective over ``comm``); shared memory comes on first use.

        ``check_arguments``: before every call, one small allreduce checks that the ranks agree on the
        root, on the bytes they move and on the counts the root of ``Gatherv`` / ``Scatterv`` gives
        for each rank; a disagreement raises the same ValueError, naming the argument, on every rank
        before anything else is sent (without it the checks are local only, see the module docstring).
        ``inter_node``: a callable that takes the leader communicator (on the leaders only) and
        returns the communicator whose ``Allgatherv``, ``Alltoallv``, ``Bcast``, ``Gatherv``,
        ``Scatterv``, ``Reduce``, ``Allreduce`` and ``Reduce_scatter`` the leaders call, and its
        ``Isend`` / ``Irecv`` for chunks past MPI's int (:mod:`.leaders`) (an
        mpi4py ``Intracomm`` or subclass on the same group, e.g. one running other algorithms);
        default: the leader communicator itself, i.e. the MPI library's collectives. Every rank
        must pass the same callable; what it returns is not freed here.
        ``reduce``: see the class docstring.
        """
        if inter_node is not None and not callable(inter_node):
            raise TypeError(f"inter_node: expected a callable taking the leader communicator, got {inter_node!r}")
        if not isinstance(check_arguments, bool):
            raise TypeError(f"check_arguments: expected True or False, got {check_arguments!r}")
        self.check_arguments = check_arguments
        self.comm = comm
        self.layout = NodeLayout.create(comm, ranks_per_node)
        self.data = SharedWindow(self.layout.node_comm)
        self.table = SharedWindow(self.layout.node_comm)
        self.size, self.rank = comm.Get_size(), comm.Get_rank()
        self.members = self.layout.members
        self.node_size = len(self.members[self.layout.node])
        self.position = self.layout.node_rank
        self.leader = self.layout.leader_comm if self.layout.is_leader else None
        self.inter_node = INTER_NODE
        if inter_node is not None:
            name = getattr(inter_node, "__qualname__", type(inter_node).__name__)
            self.inter_node = f"{name} on the leader communicator"
            if self.leader is not None:
                self.leader = inter_node(self.leader)
        self.calls = 0
        self.library_calls = 0
        self.library_reason = None  # why the last reduction_plan sent a call to the library
        self.runs: dict = {}  # global collective (method name) -> what its last call ran (see record)
        self._half = 0
        if reduce not in REDUCE_MODES:
            raise ValueError(f"reduce: expected one of {REDUCE_MODES}, got {reduce!r}")
        self.dynamic = None
        if reduce == "dynamic":
            self.dynamic = DynamicReduce(MPI.Intracomm(comm), self.layout, partial(self.reduce, fixed=True),
                                         partial(self.allreduce, fixed=True), "fixed leaders")
        take_errhandler(comm, self.communicators())

    # -- introspection and lifetime ---------------------------------------------------------------
    def stats(self) -> dict:
        """Node count, ranks per node, shared bytes, the inter-node collective and call counts (local)."""
        model = self.data.memory_model
        return {"nodes": self.layout.nodes, "ranks_per_node": list(self.layout.ranks_per_node),
                "node": self.layout.node, "node_source": self.layout.source,
                "window_bytes": self.data.region_bytes, "count_table_bytes": self.table.region_bytes,
                "window_regrowths": self.data.regrowths,
                "memory_model": {MPI.WIN_UNIFIED: "unified", MPI.WIN_SEPARATE: "separate"}.get(model),
                "inter_node": self.inter_node, "calls": self.calls, "library_calls": self.library_calls,
                "reduce": "fixed" if self.dynamic is None else "dynamic",
                **({} if self.dynamic is None else {"dynamic_reduce": self.dynamic.stats()})}

    def record(self, name: str, ran: bool) -> None:
        """Note what the last call of the method ``name`` ran: this structure (``ran``) or the library."""
        dynamic = self.dynamic.last_call if name in ("Reduce", "Allreduce") and self.dynamic is not None else None
        if not ran:
            reason = self.library_reason
            if dynamic is not None and dynamic != DYNAMIC_LEADERS:  # dynamic -> fixed order -> the library
                reason = f"{dynamic}, which passes it to the library: {reason}"
            self.runs[name] = {"algorithm": "library", "reason": reason}
        elif dynamic is not None:
            self.runs[name] = {"algorithm": dynamic}
        else:
            self.runs[name] = {"algorithm": HIERARCHICAL}

    def communicators(self) -> list:
        """The communicators this structure made (node, leader, the dynamic leaders' copy and their
        channel to self): what the error handler of the communicator it serves must reach (local)."""
        made = [self.layout.node_comm, self.layout.leader_comm]
        if self.dynamic:
            made += [self.dynamic.wire, self.dynamic.self_comm]
        return [comm for comm in made if comm != MPI.COMM_NULL]

    def free(self) -> None:
        """Free the shared windows and the node and leader communicators (collective)."""
        if self.dynamic is not None:
            self.dynamic.free()
        self.table.free()
        self.data.free()
        self.layout.free()

    # -- shared memory of one call --------------------------------------------------------------
    def _begin(self) -> None:
        self.calls += 1
        self._half = self.calls % 2

    def _shared(self, nbytes: int) -> numpy.ndarray:
        """This call's half of the node buffer, at least ``nbytes`` long (every node rank passes the same)."""
        return _half_of(self.data, self._half, nbytes, self.node_size)

    def _count_table(self, entries: int) -> numpy.ndarray:
        """This call's half of the count table as int64 (every node rank passes the same ``entries``)."""
        return _half_of(self.table, self._half, 8 * entries, self.node_size)[:8 * entries].view(numpy.int64)

    @contextmanager
    def _leaders_then_barrier(self):
        """The leaders' library call (the block), then the node barrier, at which every node rank
        learns whether its leader's call raised and raises too: a leader's error (Open MPI 5.0
        refuses counts above MPI's int, e.g. a Gather whose root's last node starts past 2 GiB) left
        the node's other ranks waiting in the barrier for good. One int is reduced over the node
        instead of a barrier's nothing."""
        error = None
        try:
            yield
        except Exception as exc:  # noqa: BLE001 (raised below, on every rank of the node)
            error = exc
        failed_on_node = self._barrier(failed=error is not None)
        if error is not None:
            raise error
        if failed_on_node:
            raise RuntimeError("the node's leader failed in the MPI library's collective between nodes "
                               "(it raised the library's error); this call did not complete")

    def _barrier(self, failed: bool | None = None) -> bool:
        """Node barrier over both windows (see :meth:`node.SharedWindow.sync`); with ``failed``
        (this rank's), a reduction of it over the node instead: whether any node rank failed."""
        windows = [w.window for w in (self.data, self.table) if w.window is not None]
        for window in windows:
            window.Sync()
        any_failed = False
        if failed is None:
            self.layout.node_comm.Barrier()
        else:
            flag = numpy.array([failed], dtype=numpy.int32)
            self.layout.node_comm.Allreduce(MPI.IN_PLACE, flag, op=MPI.MAX)
            any_failed = bool(flag[0])
        for window in windows:
            window.Sync()
        return any_failed

    def _agree(self, arg: str, nbytes=None, root=None, mine=None, expected=None, failed: bool = False) -> None:
        """With ``check_arguments``: one Allreduce(MAX) over the communicator comparing ``root``,
        ``nbytes`` (each given on every rank or on none) and this rank's byte count ``mine`` with
        the root's ``expected`` per-rank byte counts; every rank raises the same error. ``failed``:
        this rank's own arguments failed their local checks (:meth:`_arguments`), which raises them;
        the others raise an error naming it. The vector: root, bytes, each rank's bytes as the rank
        and as the root see them (each also negated), then one entry per rank that failed."""
        if not self.check_arguments:
            return
        p = self.size
        vector = numpy.full(4 + 3 * p, numpy.iinfo(numpy.int64).min, dtype=numpy.int64)
        if failed:
            vector[4 + 2 * p + self.rank] = 1
        if root is not None:
            vector[0:2] = root, -root
        if nbytes is not None:
            vector[2:4] = nbytes, -nbytes
        if mine is not None:
            vector[4 + self.rank], vector[4 + p + self.rank] = mine, -mine
        if expected is not None:
            expected = numpy.asarray(expected, dtype=numpy.int64)
            vector[4:4 + p] = numpy.maximum(vector[4:4 + p], expected)
            vector[4 + p:4 + 2 * p] = numpy.maximum(vector[4 + p:4 + 2 * p], -expected)
        MPI.Intracomm.Allreduce(self.comm, MPI.IN_PLACE, vector, op=MPI.MAX)
        if failed:
            return
        failures = numpy.flatnonzero(vector[4 + 2 * p:] == 1).tolist()
        if failures:
            raise ValueError(f"{arg}: rank(s) {failures} raised on their arguments of this call (each names its "
                             f"argument; check_arguments made every rank raise)")
        if root is not None and vector[0] != -vector[1]:
            raise ValueError(f"root: the ranks passed different roots ({-vector[1]} to {vector[0]})")
        if nbytes is not None and vector[2] != -vector[3]:
            raise ValueError(f"{arg}: the ranks' buffers hold different numbers of bytes "
                             f"({-vector[3]} to {vector[2]})")
        if mine is not None:
            bad = numpy.flatnonzero(vector[4:4 + p] != -vector[4 + p:4 + 2 * p]).tolist()
            if bad:
                if root is not None:
                    raise ValueError(f"{arg}: the root's counts disagree with those of rank(s) {bad}")
                raise ValueError(f"{arg}: the ranks disagree about the counts of rank(s) {bad}")

    @contextmanager
    def _arguments(self):
        """The local argument checks of a call that agrees (:meth:`_agree`) next, with no message
        in between: with ``check_arguments`` an error raised here first takes part in the
        agreement, as a failure, so the other ranks raise too instead of waiting; then it is raised."""
        try:
            yield
        except (ValueError, TypeError):
            self._agree("", failed=True)
            raise

    def _check_root(self, root) -> int:
        index = mpi_index(root)  # as mpi4py reads it
        if index is None or not 0 <= index < self.size:
            raise ValueError(f"root: expected a rank in [0, {self.size}), got {root!r}")
        return index

    def _root_node(self, root: int) -> int:
        return self.layout.node_of[root]

    # -- the gather family: blocks of every rank, nodes' chunks contiguous -------------------------
    def allgather(self, sendbuf, recvbuf, vector: bool) -> None:
        """``Allgather`` / ``Allgatherv`` (mpi4py's arguments)."""
        with self._arguments():
            received = _parse(recvbuf, self.size, vector, False, "recvbuf")
            source, index = self._own_block(sendbuf, received, self.rank, "sendbuf")
        sizes = _block_sizes(received)
        offsets, counts, displs = gather_placement(sizes, self.members)
        self._agree("recvbuf", nbytes=int(sizes.sum()), mine=packed_size(source.counts[index], source.types[index]),
                    expected=sizes)
        self._begin()
        shared = self._shared(int(sizes.sum()))
        pack_block(source, index, shared, int(offsets[self.rank]))
        self._barrier()
        with self._leaders_then_barrier():
            if self.leader is not None:
                leaders.allgatherv(self.leader, shared, counts, displs)
        unpack_blocks(shared, offsets, received)

    def gather(self, sendbuf, recvbuf, root) -> None:
        """``Gather`` (mpi4py's arguments)."""
        with self._arguments():
            root = self._check_root(root)
            received, source, index = self._gathered_at_root(sendbuf, recvbuf, root, parse_simple)
        block = packed_size(source.counts[index], source.types[index])
        offsets, counts, displs = gather_placement(numpy.full(self.size, block, numpy.int64), self.members)
        self._agree("sendbuf", root=root, mine=block, expected=None if received is None else _block_sizes(received))
        self._begin()
        shared = self._shared(block * self.size)
        pack_block(source, index, shared, int(offsets[self.rank]))
        self._gather_inter(shared, root, counts, displs)
        if received is not None:
            unpack_blocks(shared, offsets, received)

    def gatherv(self, sendbuf, recvbuf, root) -> None:
        """``Gatherv`` (mpi4py's arguments): ExchangeCntData, counts known at the root only."""
        with self._arguments():
            root = self._check_root(root)
            received, source, index = self._gathered_at_root(sendbuf, recvbuf, root, parse_vector)
        mine = packed_size(source.counts[index], source.types[index])
        self._agree("recvbuf", root=root, mine=mine,
                    expected=None if received is None else _block_sizes(received))
        self._begin()
        table, totals, base = self._exchange_counts(mine, root, received)
        node_totals = totals
        offset = base + int(within_node(table)[self.position])
        shared = self._shared(int(node_totals.sum()) if node_totals is not None else int(table.sum()))
        pack_block(source, index, shared, offset)
        displs = None if node_totals is None else exclusive_sum(node_totals)
        self._gather_inter(shared, root, node_totals, displs, int(table.sum()))
        if received is not None:
            offsets, _, _ = gather_placement(_block_sizes(received), self.members)
            unpack_blocks(shared, offsets, received)

    def _gathered_at_root(self, sendbuf, recvbuf, root: int, parse_received) -> tuple:
        """``(received, source, index)`` of a gather: the root's ``recvbuf`` parsed by ``parse_received``
        (None elsewhere) and where this rank's own block is (the root's may be IN_PLACE)."""
        if self.rank != root:
            reject_in_place(sendbuf, "sendbuf", "Gather")
            return None, parse_simple(sendbuf, 1, readonly=True, arg="sendbuf"), 0
        received = parse_received(recvbuf, self.size, readonly=False, arg="recvbuf")
        return (received, *self._own_block(sendbuf, received, root, "sendbuf"))

    def _gather_inter(self, shared, root: int, counts, displs, own_total=None) -> None:
        """Barrier, the leaders' Gatherv to the root's node, barrier."""
        self._barrier()
        with self._leaders_then_barrier():
            if self.leader is not None:
                root_node = self._root_node(root)
                if self.layout.node == root_node:
                    leaders.gatherv(self.leader, shared, root_node, counts, displs)
                else:
                    if own_total is None:
                        start, own_total = int(displs[self.layout.node]), int(counts[self.layout.node])
                    else:
                        start = 0
                    leaders.gatherv(self.leader, shared, root_node, own=(start, own_total))

    def scatter(self, sendbuf, recvbuf, root) -> None:
        """``Scatter`` (mpi4py's arguments)."""
        with self._arguments():
            root = self._check_root(root)
            target = self._scatter_target(recvbuf, root)
            sent = None
            if self.rank == root:
                sent = parse_simple(sendbuf, self.size, readonly=True, arg="sendbuf")
                block = packed_size(sent.counts[0], sent.types[0])
                if not self.check_arguments:  # (else the agreement raises it on every rank)
                    _check_same_bytes(target, block, "recvbuf", "sendbuf's block")
            else:
                block = packed_size(target.counts[0], target.types[0])
        offsets, counts, displs = gather_placement(numpy.full(self.size, block, numpy.int64), self.members)
        mine = block if target is None else packed_size(target.counts[0], target.types[0])
        self._agree("recvbuf", root=root, mine=mine, expected=None if sent is None else _block_sizes(sent))
        self._begin()
        shared = self._shared(block * self.size)
        if sent is not None:
            pack_blocks(sent, shared, offsets)
        node = self.layout.node
        self._scatter_inter(shared, root, counts, displs, int(displs[node]), int(counts[node]))
        if target is not None:
            unpack_block(shared, int(offsets[self.rank]), target, 0)

    def scatterv(self, sendbuf, recvbuf, root) -> None:
        """``Scatterv`` (mpi4py's arguments): ExchangeCntData, counts known at the root only."""
        with self._arguments():
            root = self._check_root(root)
            target = self._scatter_target(recvbuf, root)
            sent = None
            if self.rank == root:
                sent = parse_vector(sendbuf, self.size, readonly=True, arg="sendbuf")
                mine = packed_size(sent.counts[root], sent.types[root])
                if not self.check_arguments:  # (else the agreement raises it on every rank)
                    _check_same_bytes(target, mine, "recvbuf", f"sendbuf's block {root}")
                elif target is not None:
                    mine = packed_size(target.counts[0], target.types[0])
            else:
                mine = packed_size(target.counts[0], target.types[0])
        self._agree("sendbuf", root=root, mine=mine,
                    expected=None if sent is None else _block_sizes(sent))
        self._begin()
        table, totals, base = self._exchange_counts(mine, root, sent)
        node_totals = totals
        offset = base + int(within_node(table)[self.position])
        shared = self._shared(int(node_totals.sum()) if node_totals is not None else int(table.sum()))
        if sent is not None:
            offsets, _, _ = gather_placement(_block_sizes(sent), self.members)
            pack_blocks(sent, shared, offsets)
        displs = None if node_totals is None else exclusive_sum(node_totals)
        own = int(table.sum())
        self._scatter_inter(shared, root, node_totals, displs, 0, own)
        if target is not None:
            unpack_block(shared, offset, target, 0)

    def _scatter_target(self, recvbuf, root: int):
        if self.rank == root and is_in_place(recvbuf):
            return None
        reject_in_place(recvbuf, "recvbuf", "Scatter")
        return parse_simple(recvbuf, 1, readonly=False, arg="recvbuf")

    def _scatter_inter(self, shared, root: int, counts, displs, start: int, own_total: int) -> None:
        """Barrier, the leaders' Scatterv from the root's node, barrier."""
        self._barrier()
        with self._leaders_then_barrier():
            if self.leader is not None:
                root_node = self._root_node(root)
                if self.layout.node == root_node:
                    leaders.scatterv(self.leader, shared, root_node, counts, displs)
                else:
                    leaders.scatterv(self.leader, shared, root_node, own=(start, own_total))

    def _exchange_counts(self, mine: int, root: int, root_blocks):
        """ExchangeCntData for the rooted vector collectives.

        The table holds each node rank's byte count, then (written by the root) the bytes of every
        node and the offset of the root node's own chunk. Returns copies of the node's counts, the
        node totals and that offset as the root wrote them (None off the root's node).
        """
        nodes = self.layout.nodes
        table = self._count_table(self.node_size + nodes + 1)
        table[self.position] = mine
        if root_blocks is not None:
            _, node_totals, node_displs = gather_placement(_block_sizes(root_blocks), self.members)
            table[self.node_size:self.node_size + nodes] = node_totals
            table[-1] = node_displs[self.layout.node]
        self._barrier()
        counts = table[:self.node_size].copy()
        if self.layout.node != self._root_node(root):
            return counts, None, 0
        return counts, table[self.node_size:self.node_size + nodes].copy(), int(table[-1])

    # -- alltoall (Fig. 2) ----------------------------------------------------------------------
    def alltoall(self, sendbuf, recvbuf) -> None:
        """``Alltoall`` (mpi4py's arguments)."""
        with self._arguments():
            received = parse_simple(recvbuf, self.size, readonly=False, arg="recvbuf")
            sent = received if is_in_place(sendbuf) else parse_simple(sendbuf, self.size, readonly=True,
                                                                       arg="sendbuf")
            block = packed_size(sent.counts[0], sent.types[0])
            if block != packed_size(received.counts[0], received.types[0]):
                raise ValueError(f"sendbuf: blocks of {block} bytes, but recvbuf's blocks hold "
                                 f"{packed_size(received.counts[0], received.types[0])} bytes")
        sizes = numpy.full((self.node_size, self.size), block, dtype=numpy.int64)
        self._agree("sendbuf", nbytes=block)
        self._begin()
        self._alltoall_packed(sizes, sizes, sent, received)

    def alltoallv(self, sendbuf, recvbuf) -> None:
        """``Alltoallv`` (mpi4py's arguments): ExchangeCntData through the shared count table."""
        with self._arguments():
            received = parse_vector(recvbuf, self.size, readonly=False, arg="recvbuf")
            sent = received if is_in_place(sendbuf) else parse_vector(sendbuf, self.size, readonly=True,
                                                                       arg="sendbuf")
        self._agree("sendbuf or recvbuf")  # (the pairwise counts are not compared: only a rank's failure)
        self._begin()
        k, p = self.node_size, self.size
        table = self._count_table(2 * k * p)
        table[self.position * p:(self.position + 1) * p] = _block_sizes(sent)
        table[(k + self.position) * p:(k + self.position + 1) * p] = _block_sizes(received)
        self._barrier()
        sizes = table.reshape(2 * k, p).copy()
        self._alltoall_packed(sizes[:k], sizes[k:], sent, received)

    def _alltoall_packed(self, send_sizes, recv_sizes, sent, received) -> None:
        send_offsets, send_counts, send_displs = alltoall_send_placement(send_sizes, self.members)
        recv_offsets, recv_counts, recv_displs = alltoall_receive_placement(recv_sizes, self.members)
        send_total = aligned(int(send_counts.sum()))
        recv_total = int(recv_counts.sum())
        shared = self._shared(send_total + recv_total)
        q = self.position
        pack_blocks(sent, shared, send_offsets[q])
        self._barrier()
        with self._leaders_then_barrier():
            if self.leader is not None:
                leaders.alltoallv(self.leader, shared[:send_total], send_counts, send_displs,
                                  shared[send_total:send_total + recv_total], recv_counts, recv_displs)
        unpack_blocks(shared, recv_offsets[q], received, send_total)

    # -- broadcast ------------------------------------------------------------------------------
    def bcast(self, buf, root) -> None:
        """``Bcast`` (mpi4py's arguments)."""
        with self._arguments():
            root = self._check_root(root)
            blocks = parse_simple(buf, 1, readonly=self.rank == root, arg="buf")
        nbytes = packed_size(blocks.counts[0], blocks.types[0])
        self._agree("buf", nbytes=nbytes, root=root)
        self._begin()
        shared = self._shared(nbytes)
        if self.rank == root:
            pack_block(blocks, 0, shared, 0)
        self._barrier()
        with self._leaders_then_barrier():
            if self.leader is not None:
                leaders.bcast(self.leader, shared, nbytes, self._root_node(root))
        if self.rank != root:
            unpack_block(shared, 0, blocks, 0)

    # -- reductions (fixed leaders) -------------------------------------------------------------
    def reduction_plan(self, datatype: MPI.Datatype, op: MPI.Op):
        """``(basic, per_element)`` to reduce packed ``datatype`` data on, or None for the library's
        collective (see the module docstring); depends only on arguments every rank shares."""
        reduction_op(op)
        element = reduction_element(datatype)  # from the type signature, which every rank shares
        if element is not None:  # (else the library's call checks op)
            check_op_defined(op, element[0])
        reason = None
        if element is None:
            reason = "the datatype is not built of one predefined contiguous type"
        elif not op.is_commutative and not self.layout.contiguous:
            reason = "a non-commutative op, and the nodes are not consecutive rank ranges (MPI's order)"
        self.library_reason = reason
        return None if reason is not None else element

    def reduce(self, sendbuf, recvbuf, op, root, *, fixed: bool = False) -> bool:
        """``Reduce`` (mpi4py's arguments); False when the library must run it (see :meth:`reduction_plan`).
        With ``reduce="dynamic"`` (unless ``fixed``) the dynamic leaders' reduce runs it."""
        if self.dynamic is not None and not fixed:
            return self.dynamic.reduce(sendbuf, recvbuf, op, root)
        with self._arguments():
            root = self._check_root(root)
            target = None
            if self.rank == root:
                target = parse_simple(recvbuf, 1, readonly=False, arg="recvbuf")
                source = target if is_in_place(sendbuf) else parse_simple(sendbuf, 1, readonly=True,
                                                                           arg="sendbuf")
                _check_reduction_pair(source, target)
            else:
                reject_in_place(sendbuf, "sendbuf", "Reduce")
                source = parse_simple(sendbuf, 1, readonly=True, arg="sendbuf")
        count, datatype = source.counts[0], source.types[0]
        self._agree("sendbuf", nbytes=packed_size(count, datatype), root=root)
        reduced = self._reduced_on_node(source, count, datatype, op)
        if reduced is None:
            return False
        result, elements, basic = reduced
        with self._leaders_then_barrier():
            if self.leader is not None:
                root_node = self._root_node(root)
                with _reduction_specs(result, elements, basic, count, datatype, op) as specs:
                    for spec in specs:
                        if self.layout.node == root_node:
                            self.leader.Reduce(MPI.IN_PLACE, spec, op, root=root_node)
                        else:
                            self.leader.Reduce(spec, None, op, root=root_node)
        if target is not None:
            unpack(result, 0, target.address + target.displs[0], count, datatype)
        return True

    def _reduced_on_node(self, source, count: int, datatype, op):
        """``(result, elements, basic)``: the node's reduction, in rank order, of every rank's ``count`` x
        ``datatype`` at ``source`` as ``elements`` of the basic type ``basic``; None (counted as a library
        call) when the library must run the call (:meth:`reduction_plan`)."""
        plan = self.reduction_plan(datatype, op)
        if plan is None:
            self.library_calls += 1
            return None
        basic, per = plan
        self._begin()
        result = self._node_reduce([(source.address + source.displs[0], count, datatype)], count * per, basic, op,
                                   element=(per, datatype))
        return result, count * per, basic

    def allreduce(self, sendbuf, recvbuf, op, *, fixed: bool = False) -> bool:
        """``Allreduce`` (mpi4py's arguments); False when the library must run it.
        With ``reduce="dynamic"`` (unless ``fixed``) the dynamic leaders' allreduce runs it."""
        if self.dynamic is not None and not fixed:
            return self.dynamic.allreduce(sendbuf, recvbuf, op)
        with self._arguments():
            target = parse_simple(recvbuf, 1, readonly=False, arg="recvbuf")
            source = target if is_in_place(sendbuf) else parse_simple(sendbuf, 1, readonly=True, arg="sendbuf")
            _check_reduction_pair(source, target)
        count, datatype = target.counts[0], target.types[0]
        self._agree("sendbuf", nbytes=packed_size(count, datatype))
        reduced = self._reduced_on_node(source, count, datatype, op)
        if reduced is None:
            return False
        result, elements, basic = reduced
        with self._leaders_then_barrier():
            if self.leader is not None:
                with _reduction_specs(result, elements, basic, count, datatype, op) as specs:
                    for spec in specs:
                        self.leader.Allreduce(MPI.IN_PLACE, spec, op)
        unpack(result, 0, target.address + target.displs[0], count, datatype)
        return True

    def reduce_scatter(self, sendbuf, recvbuf, recvcounts, op, block: bool) -> bool:
        """``Reduce_scatter_block`` (``block``) or ``Reduce_scatter`` (mpi4py's arguments); False when
        the library must run it."""
        in_place = is_in_place(sendbuf)
        # (recvcounts None: mpi4py's allgather of the counts comes first, so no failure can be agreed)
        with self._arguments() if block or recvcounts is not None else nullcontext():
            if block:
                target = parse_simple(recvbuf, self.size if in_place else 1, readonly=False, arg="recvbuf")
                counts = [target.counts[0]] * self.size
            else:
                target = parse_simple(recvbuf, 1, readonly=False, arg="recvbuf")
                counts = self._recvcounts(recvcounts, target, in_place)
            datatype = target.types[0]
            if in_place:
                base, source_type = target.address + target.displs[0], datatype
            else:
                source = parse_simple(sendbuf, self.size if block else 1, readonly=True, arg="sendbuf")
                base, source_type = source.address + source.displs[0], source.types[0]
                check_one_datatype(source_type, datatype)
                sent = source.counts[0] * (self.size if block else 1)
                if sent != sum(counts):
                    raise ValueError(f"sendbuf: {sent} elements of {source_type.Get_size()} bytes, but the receive "
                                     f"counts add up to {sum(counts)} elements of {datatype.Get_size()} bytes")
        block_bytes = numpy.fromiter((packed_size(c, datatype) for c in counts), dtype=numpy.int64, count=len(counts))
        self._agree("recvcounts", nbytes=packed_size(sum(counts), datatype), mine=int(block_bytes[self.rank]),
                    expected=block_bytes)  # every rank passes every rank's count: they must agree
        plan = self.reduction_plan(datatype, op)
        if plan is None:
            self.library_calls += 1
            return False
        basic, per = plan
        extent = source_type.Get_extent()[1]
        starts = exclusive_sum(counts)
        pieces = [(base + int(starts[r]) * extent, counts[r], source_type) for r in range(self.size)]
        elements = numpy.asarray(counts, dtype=numpy.int64) * per
        offsets, node_counts, node_displs = gather_placement(elements, self.members)
        self._begin()
        total = int(elements.sum())
        result = self._node_reduce(pieces, total, basic, op, offsets, element=(per, datatype))
        node = self.layout.node
        esize = basic.Get_size()
        with self._leaders_then_barrier():
            if self.leader is not None:
                # not in place: MPICH 5.0.2's in-place Reduce_scatter moves a block larger than its offset
                # to the buffer's start by an overlapping memcpy and aborts (counts 17500, 35000, 52500,
                # 70000 int64 on 2 nodes of 2); the node's share is copied to the result's start after
                first, size = int(node_displs[node]) * esize, int(node_counts[node]) * esize
                if op.is_predefined:
                    share = numpy.empty(size, dtype=numpy.uint8)
                    # in windows of at most MAX_COUNT elements (every leader knows the node counts):
                    # each node's share of a window is the next part of its share
                    ends = node_displs + node_counts
                    for low, high in leaders.pieces(total):
                        parts = numpy.clip(ends, low, high) - numpy.clip(node_displs, low, high)
                        at = (int(numpy.clip(node_displs[node], low, high)) - int(node_displs[node])) * esize
                        part = int(parts[node])
                        self.leader.Reduce_scatter([result[low * esize:high * esize], high - low, basic],
                                                   [share[at:at + part * esize], part, basic], parts.tolist(), op)
                else:
                    # MPICH 5.0.2's Reduce_scatter(_block) with a user-defined op on a resized datatype fails
                    # an assertion or writes past its buffers (4 ranks, no sparsecoll): with a user-defined
                    # op the leaders reduce the whole vector and keep their node's share
                    with _reduction_specs(result, total, basic, whole_elements(total, per), datatype, op) as specs:
                        for spec in specs:
                            self.leader.Allreduce(MPI.IN_PLACE, spec, op)
                    share = result[first:first + size].copy()
                result[:size] = share
        start = int(offsets[self.rank] - node_displs[node]) * esize
        unpack(result, start, target.address + target.displs[0], counts[self.rank], datatype)
        return True

    def _recvcounts(self, recvcounts, target, in_place: bool) -> list:
        if recvcounts is None:
            if in_place:
                raise ValueError("recvcounts: required when sendbuf is MPI.IN_PLACE")
            return [int(c) for c in MPI.Intracomm.allgather(self.comm, target.counts[0])]  # what mpi4py does
        try:
            counts = list(recvcounts)
        except TypeError:
            raise TypeError(f"recvcounts: expected a sequence of {self.size} integers") from None
        counts = [mpi_index(c) for c in counts]  # as mpi4py reads them
        if len(counts) != self.size or not all(c is not None and c >= 0 for c in counts):
            raise ValueError(f"recvcounts: expected {self.size} non-negative integers, got {recvcounts!r}")
        expected = sum(counts) if in_place else counts[self.rank]
        if target.counts[0] != expected:
            raise ValueError(f"recvbuf: holds {target.counts[0]} elements, expected {expected} "
                             f"({'sum(recvcounts)' if in_place else f'recvcounts[{self.rank}]'})")
        return counts

    def _node_reduce(self, pieces, elements: int, basic: MPI.Datatype, op: MPI.Op, element_offsets=None,
                     element=(1, None)):
        """CopyIn of this rank's ``pieces`` (``(address, count, datatype)``, at ``element_offsets``
        in basic elements, else one after another), barrier, the node reduction in rank order of
        this rank's share of the elements, barrier, and for leaders nothing more: returns the
        node's result (in shared memory, ``elements`` basic elements).

        ``element``: ``(per, datatype)``, the program's datatype and the basic elements in one of
        it; a user-defined op reduces whole elements of it, in its layout (:func:`_reduction_specs`).
        """
        esize = basic.Get_size()
        slot = aligned(elements * esize)
        k, q = self.node_size, self.position
        shared = self._shared(k * slot)
        mine = shared[q * slot:(q + 1) * slot]
        offset = 0
        for index, (address, count, datatype) in enumerate(pieces):
            if element_offsets is not None:
                offset = int(element_offsets[index]) * esize
            offset += pack(address, count, datatype, mine, offset)
        self._barrier()
        per, datatype = element if not op.is_predefined else (1, None)
        start, stop = (per * end for end in element_slices(whole_elements(elements, per), k)[q])  # whole elements
        if k > 1 and stop > start:
            first, last = start * esize, stop * esize
            accumulator = shared[(k - 1) * slot + first:(k - 1) * slot + last]
            count = (stop - start) // per
            with _reduction_specs(accumulator, stop - start, basic, count, datatype, op) as targets:
                for i in range(k - 2, -1, -1):  # x_i op (x_{i+1} op ...): MPI's rank order
                    with _reduction_specs(shared[i * slot + first:i * slot + last], stop - start, basic, count,
                                          datatype, op, write_back=False) as sources:
                        for source, target in zip(sources, targets):
                            op.Reduce_local(source, target)
        self._barrier()
        return shared[(k - 1) * slot:(k - 1) * slot + elements * esize]

    # -- helpers --------------------------------------------------------------------------------
    def _own_block(self, sendbuf, received, index: int, arg: str):
        """``(blocks, index)`` of the data this rank contributes: ``sendbuf``, or with IN_PLACE block
        ``index`` of the receive buffer; checks that its packed size matches that block."""
        if is_in_place(sendbuf):
            return received, index
        source = parse_simple(sendbuf, 1, readonly=True, arg=arg)
        expected = packed_size(received.counts[index], received.types[index])
        sent = packed_size(source.counts[0], source.types[0])
        if sent != expected and not self.check_arguments:  # (else the agreement raises it on every rank)
            raise ValueError(f"{arg}: {sent} bytes, but recvbuf's block {index} holds {expected} bytes")
        return source, 0


@contextmanager
def _reduction_specs(packed: numpy.ndarray, elements: int, basic: MPI.Datatype, count: int, datatype,
                     op: MPI.Op, write_back: bool = True):
    """The buffer specs, one reduction call each, a reduction by ``op`` acts on for the packed data
    at ``packed``: ``elements`` of ``basic`` for a predefined op or datatype, in pieces of at most
    ``MAX_COUNT`` elements (a derived datatype's basic elements can pass MPI's int where the
    program's count does not; the pieces follow from ``elements``, which every leader knows); for a
    user-defined op on a derived datatype the data as ``count`` x ``datatype`` in that datatype's
    layout (:func:`.copying.laid_out`), since MPI calls the op's function with the program's
    datatype. Ranks may pass different handles of one type signature (``DOUBLE`` on one, a
    duplicate on another): each calls the op with its own."""
    if _in_own_layout(op, datatype):
        with laid_out(packed, count, datatype, write_back) as spec:
            yield [spec]
        return
    esize = basic.Get_size()
    yield [[packed[start * esize:stop * esize], stop - start, basic] for start, stop in leaders.pieces(elements)]


def _in_own_layout(op: MPI.Op, datatype) -> bool:
    """Whether a reduction by ``op`` on ``datatype`` runs on the data in ``datatype``'s layout
    (a user-defined op on a derived datatype) rather than on packed basic elements."""
    return not op.is_predefined and datatype is not None and not datatype.is_predefined


def _half_of(window: SharedWindow, half: int, nbytes: int, node_size: int) -> numpy.ndarray:
    """Half ``half`` (0 or 1) of ``window``, grown so each half holds ``nbytes`` (agreed on the node)."""
    need = 2 * aligned(nbytes)
    window.ensure(aligned(-(-need // node_size)), agreed=True)
    region = window.region()
    length = (region.size // 2) // 64 * 64
    return region[half * length:half * length + length]


def _parse(spec, blocks: int, vector: bool, readonly: bool, arg: str):
    return (parse_vector if vector else parse_simple)(spec, blocks, readonly=readonly, arg=arg)


def _block_sizes(blocks) -> numpy.ndarray:
    """Packed bytes of every block of a :class:`sparsecoll.buffers.Blocks`."""
    first = blocks.types[0] if blocks.types else None
    if all(t is first for t in blocks.types):
        return numpy.asarray(blocks.counts, dtype=numpy.int64) * (first.Get_size() if first is not None else 0)
    return numpy.fromiter((packed_size(c, t) for c, t in zip(blocks.counts, blocks.types)),
                          dtype=numpy.int64, count=len(blocks.counts))


def _check_same_bytes(target, nbytes: int, arg: str, what: str) -> None:
    if target is not None:
        have = packed_size(target.counts[0], target.types[0])
        if have != nbytes:
            raise ValueError(f"{arg}: holds {have} bytes, but {what} has {nbytes}")


def _check_reduction_pair(source, target) -> None:
    """mpi4py's rule for reductions: same datatype (handle) and count in sendbuf and recvbuf (an
    int32 array reduced into a float32 one is a ValueError there, not a reinterpretation)."""
    if source is target:
        return
    check_one_datatype(source.types[0], target.types[0])
    if source.counts[0] != target.counts[0]:
        raise ValueError(f"sendbuf: {source.counts[0]} elements, but recvbuf holds {target.counts[0]}")
