"""Imbalance-aware Reduce and Allreduce with dynamic leaders (the paper on hierarchical shared-memory
collectives and imbalanced process arrival, section III "Imbalanced Arrival", Table II).

The paper: "When a process enters the collective, its buffer is immediately reduced into the
shared memory buffer. Unless the process is the root or the last process to arrive on its node,
it can exit the collective. The last process per node and the root are responsible for the
inter-node communication [...] Extra overhead is incurred by the dynamic leaders, due to control
messages used to discover other leaders. The node-to-node communication pattern remains the same
as static leaders, a binomial tree in this case, but at each invocation a different set of
leaders performs the reduction."

How this module does it, per call (``Reduce`` with root ``r`` on node ``R``):

* Node part, in the node's own :class:`~.node.SharedWindow` (a ring of :data:`SLOTS` slots, one
  per call modulo :data:`SLOTS`; each slot holds three int64 counters and an accumulator: the
  call's ``count`` x ``datatype`` packed, the same bytes whichever datatype handle each rank
  passed; a rank whose datatype is not contiguous reduces it in its own layout, unpacked into
  scratch memory and packed back). A rank takes an arrival *ticket* with an atomic
  ``Win.Fetch_and_op(SUM)`` on the slot's ticket counter: its arrival index on the node. It then
  waits until the slot's *reduced* counter equals its ticket (the contributions are reduced one
  at a time in ticket order: a ticket lock), copies (index 0) or ``Op.Reduce_local``-s its buffer
  into the accumulator, and increments *reduced*. A rank that is neither the root nor the last
  arriver (index ``P - 1`` of the node's ``P`` ranks) returns now. The last arriver copies the
  node's result out and increments the slot's *released* counter, which lets the call
  ``SLOTS`` later reuse the slot (a rank running that far ahead waits, polling, before its
  ticket, so tickets of two calls never mix). On the root's node the root takes the node's
  result instead: the last arriver, when it is not the root, sends the root a zero-byte
  control message and returns.
* Inter-node part: a binomial tree over the nodes rooted at ``R`` (node ``m`` is ``v = (m - R)
  mod N``; its parent clears ``v``'s lowest set bit), the same tree fixed leaders would use, but
  between this call's last arrivers. Leaders are discovered by control messages through the
  root, the one participant every rank knows: each non-root node's leader announces ``(node,
  rank)`` to the root; the root tells each leader whose parent node is not ``R`` the rank of
  its parent node's leader as soon as both are known. A leader receives its children's partial
  results with ``ANY_SOURCE`` on per-child-node tags (it never needs to know who they are),
  reduces them into its node result and sends that to its parent's leader.
* ``Allreduce``: the reduce above to rank 0, then a broadcast down the same tree of this call's
  leaders (each parent learned its children's leaders from their data messages), and from each
  leader to the other ranks of its node, which wait for it with ``ANY_SOURCE``. No rank leaves
  early (all need the result); what the dynamic leaders save is that each rank's share of the
  reduction is done when it arrives, and the inter-node tree starts as soon as a node is complete
  rather than when its fixed leader arrives.

Deadlock freedom: the root waits on all its receives at once (``Waitany``) and answers
announcements as they come; every leader posts its receives before blocking; announcements
depend only on the arrival of each node's last rank; data flows only up the tree. Tags come from
shared arguments only: the call's sequence number on this communicator (every rank counts its
calls alike) modulo a window that fits ``Comm.TAG_UB``, and node indices; *who* sends them is
dynamic. All messages travel on a private duplicate of the communicator. (A node that ran a full
tag window of calls, ``TAG_UB // (nodes + 4)`` calls, ahead of the root could be confused with
the current call; with the tag bounds of MPICH and Open MPI that is millions of calls.)

Memory model: the window is under one ``Lock_all`` epoch for its life (:class:`~.node.SharedWindow`).
The counters are touched only by MPI atomics (``Fetch_and_op``, flushed), the accumulators only
by loads and stores; a rank calls ``Win.Sync`` after its stores and before the atomic that
publishes them, and after the atomic (or message) that tells it of another rank's stores and
before its loads: the ``Win_sync`` memory-barrier rule of MPI's unified memory model, which
MPICH and Open MPI report for shared windows, and under the separate model ``Win_sync`` also
reconciles the public and private copies.

Operand order: a commutative op is evaluated in arrival order, which MPI allows for commutative
ops ("the operation may be evaluated in any order"); integer results equal the fixed-order ones
exactly, floating-point results differ by rounding: each result element is a sum (or other op)
of the ``size`` contributions in some order, so for sums it is within ``(size - 1) * eps *
sum(|x_i|)`` of the exact value, the bound of any summation order. A non-commutative op
(``Op.Is_commutative()`` false) falls back to the fixed-order reduction (the caller's, named in
:meth:`DynamicReduce.stats`), as arrival order would change the operand order. So does a call
of more than ``MAX_COUNT`` bytes (:func:`_past_mpis_int`): the fixed leaders' reductions keep
their counts inside MPI's int, piece by piece, where this module's one-message steps would not.

Every rank passes the same ``count`` and a datatype of the same type signature, as MPI asks; the
layouts may differ (``DOUBLE`` on one rank, a double resized to 16 bytes on another): the shared
accumulator and the window's size follow from the packed size, which every rank computes alike.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass

import numpy
from mpi4py import MPI

from ..buffers import is_in_place, parse_simple, predefined_leaves, reject_in_place, span
from ..checks import MAX_COUNT, mpi_index, reduction_op, tag_upper_bound
from .copying import at_origin, check_one_datatype, check_op_defined, is_contiguous, laid_out
from .node import ALIGNMENT, NodeLayout, SharedWindow

#: Slots in each node's ring: a rank may run this many calls ahead of its node's last arriver
#: before it waits for a slot.
SLOTS = 4
#: Bytes of one slot's counters: tickets, reduced, released (int64 each), padded.
_COUNTERS_BYTES = ALIGNMENT
_TICKETS, _REDUCED, _RELEASED = 0, 8, 16
#: Polling back-off when a rank waits for its turn or for a slot (seconds).
_FIRST_DELAY, _LONGEST_DELAY = 2e-6, 2.5e-4
#: Tags after the per-node data tags, per call.
_ANNOUNCE, _PARENT, _NODE_DONE, _RESULT, _TAGS_AFTER_NODES = 0, 1, 2, 3, 4

MODES = ("dynamic", "fixed")
DYNAMIC_LEADERS = "dynamic leaders"
#: Why a call ran the fixed-order reduction (:meth:`DynamicReduce.stats`'s ``last_call``).
NON_COMMUTATIVE, PAST_MPIS_INT = "non-commutative op", "data past MPI's int"


def binomial_parent(node: int, root_node: int, nodes: int) -> int:
    """The parent of ``node`` in the binomial tree over ``nodes`` nodes rooted at ``root_node``
    (-1 for the root node): relative index ``v = (node - root_node) mod nodes`` with its lowest
    set bit cleared."""
    v = (node - root_node) % nodes
    if v == 0:
        return -1
    return ((v & (v - 1)) + root_node) % nodes


def binomial_children(node: int, root_node: int, nodes: int) -> list:
    """The children of ``node`` in the same tree: ``v + 2**j`` for every ``2**j`` below ``v``'s lowest
    set bit (every power of two for the root) that is a node."""
    v = (node - root_node) % nodes
    lowest = v & -v if v else nodes
    children = []
    bit = 1
    while bit < lowest and v + bit < nodes:
        children.append((v + bit + root_node) % nodes)
        bit <<= 1
    return children


@dataclass(frozen=True)
class _Shape:
    """``count`` x ``datatype`` and the bytes it touches, ``first``..``end`` from its origin."""

    count: int
    datatype: MPI.Datatype
    first: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.first

    def message(self, origin: int) -> list:
        """A buffer spec for the data whose datatype origin is at absolute address ``origin`` (0 for
        ``MPI.BOTTOM``, below the data for scratch memory: :func:`.copying.at_origin`)."""
        return [at_origin(origin, max(self.end, 1)), self.count, self.datatype]

    def private(self) -> tuple:
        """A private scratch buffer: ``(array, message)``."""
        array = numpy.empty(max(self.nbytes, 1), dtype=numpy.uint8)
        return array, self.message(array.ctypes.data - self.first)


class DynamicReduce:
    """Reduce and Allreduce with dynamic leaders over ``comm`` split by ``layout`` (see the module
    docstring). Collective to make (duplicates ``comm``); :meth:`free` is collective too.

    ``fixed_reduce(sendbuf, recvbuf, op, root)`` and ``fixed_allreduce(sendbuf, recvbuf, op)`` run
    the fixed-order reduction that non-commutative ops fall back to; ``fixed_name`` names it in
    :meth:`stats`.
    """

    def __init__(self, comm: MPI.Intracomm, layout: NodeLayout, fixed_reduce, fixed_allreduce,
                 fixed_name: str = "fixed leaders"):
        """Set up on ``comm`` (collective: duplicates it; the shared window is made on first use)."""
        self.layout = layout
        self.fixed_reduce, self.fixed_allreduce, self.fixed_name = fixed_reduce, fixed_allreduce, fixed_name
        self.wire = comm.Dup()
        self.self_comm = MPI.COMM_SELF.Dup()
        self.shared = SharedWindow(layout.node_comm)
        self.rank = comm.Get_rank()
        nodes = layout.nodes
        self.tag_stride = nodes + _TAGS_AFTER_NODES
        tag_ub = tag_upper_bound(self.wire.Get_attr(MPI.TAG_UB))
        self.tag_window = (tag_ub + 1) // self.tag_stride
        if self.tag_window < 2:
            raise ValueError(f"layout: {nodes} nodes need tags above this MPI's TAG_UB {tag_ub}")
        self.seq = 0  # dynamic calls so far on this communicator (same on every rank)
        self.window_base = 0  # seq when the window was last (re)made: its counters count from there
        self.slot_bytes = 0
        self.counts = {"dynamic_calls": 0, "fixed_calls": 0, "leader_calls": 0, "root_calls": 0,
                       "control_sent": 0, "control_received": 0, "slot_waits": 0, "turn_waits": 0}
        self.last_call = None
        self._one = numpy.ones(1, dtype=numpy.int64)
        self._fetched = numpy.zeros(1, dtype=numpy.int64)

    # -- public ---------------------------------------------------------------------------------
    def reduce(self, sendbuf, recvbuf, op: MPI.Op, root: int) -> bool:
        """``Comm.Reduce`` with dynamic leaders (``sendbuf`` may be ``MPI.IN_PLACE`` or None at the
        root). A non-commutative op, or data past MPI's int, runs the fixed-order reduction; returns
        what that returns, else True."""
        size = self.wire.Get_size()
        index = mpi_index(root)  # as mpi4py reads it
        if index is None or not 0 <= index < size:
            raise ValueError(f"root: expected an integer in [0, {size}), got {root!r}")
        root = index
        reduction_op(op)
        is_root = self.rank == root
        in_place = is_in_place(sendbuf)
        if not is_root:
            reject_in_place(sendbuf, "sendbuf", "Reduce")
        if not op.Is_commutative():
            self._fixed(NON_COMMUTATIVE)
            return self.fixed_reduce(sendbuf, recvbuf, op, root)
        mine = self._parse(recvbuf if in_place else sendbuf, "recvbuf" if in_place else "sendbuf",
                           readonly=not in_place)
        result = self._parse(recvbuf, "recvbuf", readonly=False) if is_root else None
        if result is not None:
            _check_reduction_pair(mine, result)
        if _past_mpis_int(mine[1]):
            self._fixed(PAST_MPIS_INT)
            return self.fixed_reduce(sendbuf, recvbuf, op, root)
        self._dynamic(mine, result, op, root, broadcast=False)
        return True

    def allreduce(self, sendbuf, recvbuf, op: MPI.Op) -> bool:
        """``Comm.Allreduce`` with dynamic leaders: reduce to rank 0, broadcast down the same leaders
        (``sendbuf`` may be ``MPI.IN_PLACE`` or None). A non-commutative op, or data past MPI's
        int, runs the fixed-order reduction; returns what that returns, else True."""
        reduction_op(op)
        if not op.Is_commutative():
            self._fixed(NON_COMMUTATIVE)
            return self.fixed_allreduce(sendbuf, recvbuf, op)
        result = self._parse(recvbuf, "recvbuf", readonly=False)
        mine = result if is_in_place(sendbuf) else self._parse(sendbuf, "sendbuf", readonly=True)
        _check_reduction_pair(mine, result)
        if _past_mpis_int(mine[1]):
            self._fixed(PAST_MPIS_INT)
            return self.fixed_allreduce(sendbuf, recvbuf, op)
        self._dynamic(mine, result, op, 0, broadcast=True)
        return True

    def stats(self) -> dict:
        """What this rank did (local): the mode, the last call's algorithm, counts of dynamic and
        fallback calls, calls where this rank led its node or was the root, control messages,
        waits for a slot or a turn, slots and window bytes."""
        return {"reduce": "dynamic", "last_call": self.last_call, "fallback": self.fixed_name,
                "slots": SLOTS, "window_bytes": self.shared.region_bytes, **self.counts}

    def free(self) -> None:
        """Free the window and the private communicators (collective over ``comm``)."""
        self.shared.free()
        self.wire.Free()
        self.self_comm.Free()

    # -- one call -------------------------------------------------------------------------------
    def _fixed(self, reason: str):
        self.counts["fixed_calls"] += 1
        self.last_call = f"{self.fixed_name} ({reason})"

    def _parse(self, spec, arg: str, readonly: bool) -> tuple:
        """``(origin address, shape)`` of a one-block buffer spec."""
        blocks = parse_simple(spec, 1, readonly=readonly, arg=arg)
        address, count, datatype = blocks.piece(0)
        first, end = span(count, datatype)
        return address, _Shape(count, datatype, first, end)

    def _dynamic(self, mine: tuple, result, op: MPI.Op, root: int, broadcast: bool) -> None:
        origin, given = mine
        check_op_defined(op, given.datatype)
        self.counts["dynamic_calls"] += 1
        self.last_call = DYNAMIC_LEADERS
        if given.count == 0:
            return
        shape = _working_shape(given, op)
        own = given.message(origin)
        if shape is not given:  # a derived datatype under a predefined op: work on its elements
            flat = shape.private()
            self.self_comm.Sendrecv(own, 0, 0, flat[1], 0, 0)
            own = flat[1]
        seq = self._prepare(shape)
        nodes, node = self.layout.nodes, self.layout.node
        root_node = self.layout.node_of[root]
        per_node = len(self.layout.members[node])
        tags = (seq % self.tag_window) * self.tag_stride
        is_root = self.rank == root
        slot = (seq - self.window_base) % SLOTS
        use = (seq - self.window_base) // SLOTS
        takes_node_result = is_root or node != root_node
        index = self._arrive(own, shape, op, slot, use, per_node)
        last = index == per_node - 1
        accumulator = None
        if last and takes_node_result:
            accumulator = shape.private()
            self._take_node_result(shape, slot, accumulator[1])
        if is_root:
            self.counts["root_calls"] += 1
            if last:
                self.counts["leader_calls"] += 1
            accumulator, children = self._root(shape, op, slot, tags, accumulator, last, root_node)
            if broadcast:
                self._send_result(accumulator[1], children, tags)
            self.self_comm.Sendrecv(accumulator[1], 0, 0, result[1].message(result[0]), 0, 0)
        elif last and node != root_node:
            self.counts["leader_calls"] += 1
            parent, children = self._leader(shape, op, tags, accumulator, root, root_node)
            if broadcast:
                self.wire.Recv(accumulator[1], parent, tags + nodes + _RESULT)
                self._send_result(accumulator[1], children, tags)
                self.self_comm.Sendrecv(accumulator[1], 0, 0, result[1].message(result[0]), 0, 0)
        else:
            if last:  # on the root's node: the root takes the node's result
                self.wire.Send([None, 0, MPI.BYTE], root, tags + nodes + _NODE_DONE)
                self.counts["control_sent"] += 1
            if broadcast:
                self.wire.Recv(result[1].message(result[0]), MPI.ANY_SOURCE, tags + nodes + _RESULT)

    def _prepare(self, shape: _Shape) -> int:
        """This call's sequence number; grows the window first if the call needs more (collective
        over the node only then, decided from the call's count and datatype and the window's size,
        which every node rank knows alike).

        The slots' stride follows from the window's size, so it changes only when the window is
        remade, which every node rank does together, after its earlier calls."""
        packed = shape.count * shape.datatype.Get_size()
        needed = SLOTS * (_COUNTERS_BYTES + -(-packed // ALIGNMENT) * ALIGNMENT)
        per_rank = -(-needed // self.layout.node_comm.Get_size())
        seq = self.seq
        self.seq += 1
        if self.shared.ensure(per_rank, agreed=True):
            if self.layout.node_rank == 0:
                self.shared.region()[:SLOTS * _COUNTERS_BYTES] = 0
            self.shared.sync()
            self.window_base = seq
            room = (self.shared.region_bytes - SLOTS * _COUNTERS_BYTES) // SLOTS
            self.slot_bytes = room // ALIGNMENT * ALIGNMENT
        return seq

    def _counter(self, slot: int, which: int) -> int:
        return slot * _COUNTERS_BYTES + which

    def _accumulator(self, shape: _Shape, slot: int, write_back: bool = True):
        """The slot's accumulator as a message of ``shape`` (a context): the slot holds the data
        packed; a non-contiguous datatype's is unpacked into scratch memory in its layout and
        packed back on exit (``write_back``)."""
        region = self.shared.region()
        start = SLOTS * _COUNTERS_BYTES + slot * self.slot_bytes
        packed = region[start:start + shape.count * shape.datatype.Get_size()]
        if is_contiguous(shape.datatype):
            return nullcontext([packed, shape.count, shape.datatype])
        return laid_out(packed, shape.count, shape.datatype, write_back)

    def _fetch_add(self, displacement: int, op: MPI.Op = MPI.SUM) -> int:
        window = self.shared.window
        window.Fetch_and_op(self._one, self._fetched, 0, displacement, op)
        window.Flush(0)
        return int(self._fetched[0])

    def _wait_until(self, displacement: int, at_least: int, counter: str) -> None:
        if self._fetch_add(displacement, MPI.NO_OP) >= at_least:
            return
        self.counts[counter] += 1
        delay = _FIRST_DELAY
        while self._fetch_add(displacement, MPI.NO_OP) < at_least:
            time.sleep(delay)
            delay = min(2 * delay, _LONGEST_DELAY)

    def _arrive(self, mine: list, shape: _Shape, op: MPI.Op, slot: int, use: int, per_node: int) -> int:
        """Reduce this rank's buffer into the node's slot; its arrival index on the node."""
        self._wait_until(self._counter(slot, _RELEASED), use, "slot_waits")
        ticket = self._fetch_add(self._counter(slot, _TICKETS))
        index = ticket - use * per_node
        if not 0 <= index < per_node:
            raise RuntimeError(f"dynamic reduce: ticket {ticket} outside use {use} of slot {slot}")
        self._wait_until(self._counter(slot, _REDUCED), ticket, "turn_waits")
        window = self.shared.window
        window.Sync()
        with self._accumulator(shape, slot) as accumulator:
            if index == 0:
                self.self_comm.Sendrecv(mine, 0, 0, accumulator, 0, 0)
            else:
                op.Reduce_local(mine, accumulator)
        window.Sync()
        self._fetch_add(self._counter(slot, _REDUCED))
        return index

    def _take_node_result(self, shape: _Shape, slot: int, into: list) -> None:
        """Copy the node's complete result out of the slot and release the slot."""
        window = self.shared.window
        window.Sync()
        with self._accumulator(shape, slot, write_back=False) as accumulator:
            self.self_comm.Sendrecv(accumulator, 0, 0, into, 0, 0)
        window.Sync()
        self._fetch_add(self._counter(slot, _RELEASED))

    def _root(self, shape, op, slot, tags, accumulator, last, root_node) -> tuple:
        """The root: serve the leader directory, reduce its children's partial results and (unless
        it arrived last) its node's result; returns ``(accumulator, children leaders)``."""
        nodes = self.layout.nodes
        wire = self.wire
        requests, handlers = [], []
        scratch = []
        leader_of = {root_node: self.rank}
        waiting = {}  # parent node -> ranks of its children's leaders waiting for its leader's rank
        sends = []
        children = []
        state = {"accumulator": accumulator}

        def combine(message):
            if state["accumulator"] is None:
                state["accumulator"] = shape.private()
                self.self_comm.Sendrecv(message, 0, 0, state["accumulator"][1], 0, 0)
            else:
                op.Reduce_local(message, state["accumulator"][1])

        announcement = numpy.zeros(2, dtype=numpy.int64)
        announcements_left = [nodes - 1]

        def post_announcement():
            requests.append(wire.Irecv(announcement, MPI.ANY_SOURCE, tags + nodes + _ANNOUNCE))
            handlers.append(on_announcement)

        def tell(child_leader: int, parent_leader: int):
            reply = numpy.array([parent_leader], dtype=numpy.int64)
            scratch.append(reply)
            sends.append(wire.Isend(reply, child_leader, tags + nodes + _PARENT))
            self.counts["control_sent"] += 1

        def on_announcement(status):
            self.counts["control_received"] += 1
            node, leader = int(announcement[0]), int(announcement[1])
            leader_of[node] = leader
            parent = binomial_parent(node, root_node, nodes)
            if parent != root_node:
                if parent in leader_of:
                    tell(leader, leader_of[parent])
                else:
                    waiting.setdefault(parent, []).append(leader)
            for child_leader in waiting.pop(node, ()):
                tell(child_leader, leader)
            announcements_left[0] -= 1
            if announcements_left[0]:
                post_announcement()

        def on_child(buffer):
            def handler(status):
                children.append(status.Get_source())
                combine(buffer[1])
            return handler

        def on_node_done(status):
            self.counts["control_received"] += 1
            window = self.shared.window
            window.Sync()
            with self._accumulator(shape, slot, write_back=False) as accumulator:
                combine(accumulator)
            window.Sync()
            self._fetch_add(self._counter(slot, _RELEASED))

        if announcements_left[0]:
            post_announcement()
        for child in binomial_children(root_node, root_node, nodes):
            buffer = shape.private()
            scratch.append(buffer)
            requests.append(wire.Irecv(buffer[1], MPI.ANY_SOURCE, tags + child))
            handlers.append(on_child(buffer))
        if not last:
            requests.append(wire.Irecv([None, 0, MPI.BYTE], MPI.ANY_SOURCE, tags + nodes + _NODE_DONE))
            handlers.append(on_node_done)
        status = MPI.Status()
        pending = len(requests)
        while pending:
            index = MPI.Request.Waitany(requests, status)
            handler = handlers[index]
            handlers[index] = None
            pending -= 1
            before = len(requests)
            handler(status)
            pending += len(requests) - before
        MPI.Request.Waitall(sends)
        return state["accumulator"], children

    def _leader(self, shape, op, tags, accumulator, root, root_node) -> tuple:
        """A non-root node's last arriver: announce, reduce the children's partial results into the
        node's, send the sum to the parent node's leader; returns ``(parent leader, children leaders)``."""
        nodes, node = self.layout.nodes, self.layout.node
        wire = self.wire
        announcement = numpy.array([node, self.rank], dtype=numpy.int64)
        announce = wire.Isend(announcement, root, tags + nodes + _ANNOUNCE)
        self.counts["control_sent"] += 1
        parent_node = binomial_parent(node, root_node, nodes)
        requests, buffers = [], []
        for child in binomial_children(node, root_node, nodes):
            buffer = shape.private()
            buffers.append(buffer)
            requests.append(wire.Irecv(buffer[1], MPI.ANY_SOURCE, tags + child))
        parent_rank = numpy.array([root], dtype=numpy.int64)
        if parent_node != root_node:
            requests.append(wire.Irecv(parent_rank, root, tags + nodes + _PARENT))
        status = MPI.Status()
        children = []
        for _ in range(len(requests)):
            index = MPI.Request.Waitany(requests, status)
            if index < len(buffers):
                children.append(status.Get_source())
                op.Reduce_local(buffers[index][1], accumulator[1])
            else:
                self.counts["control_received"] += 1
        parent = int(parent_rank[0])
        wire.Send(accumulator[1], parent, tags + node)
        announce.Wait()
        return parent, children

    def _send_result(self, message: list, children: list, tags: int) -> None:
        """Allreduce: the result to the children's leaders and to the other ranks of this node."""
        node = self.layout.node
        targets = children + [r for r in self.layout.members[node] if r != self.rank]
        tag = tags + self.layout.nodes + _RESULT
        MPI.Request.Waitall([self.wire.Isend(message, target, tag) for target in targets])


def _working_shape(given: _Shape, op: MPI.Op) -> _Shape:
    """The shape the reduction works on: ``given``, or for a derived datatype under a predefined
    op (which ``Reduce_local`` applies to predefined datatypes only) its elements, contiguous."""
    if given.datatype.is_predefined or not op.is_predefined:
        return given
    element = _element_type(given.datatype)
    if element is None:
        raise ValueError("sendbuf: a predefined op needs a datatype made of one predefined type")
    count = given.count * given.datatype.Get_size() // element.Get_size()
    first, end = span(count, element)
    return _Shape(count, element, first, end)


def _element_type(datatype: MPI.Datatype):
    """The one predefined datatype ``datatype`` is made of, or None if it mixes several."""
    leaves = predefined_leaves(datatype)
    return leaves[0] if len(leaves) == 1 else None




def _past_mpis_int(shape: _Shape) -> bool:
    """Whether a call's data has more than ``MAX_COUNT`` bytes: its messages, its shared slot and its
    ``Reduce_local`` could then pass MPI's int, so it runs the fixed-order reduction, which cuts
    them into pieces. The packed size is the type signature's, the same on every rank (MPI asks
    for one signature), so every rank decides alike whatever datatype handle each one passed."""
    return shape.count * shape.datatype.Get_size() > MAX_COUNT


def _check_reduction_pair(mine: tuple, result: tuple) -> None:
    if mine is not result:
        check_one_datatype(mine[1].datatype, result[1].datatype)
    if mine[1].count != result[1].count:
        raise ValueError(f"recvbuf: holds {result[1].count} elements but the data has {mine[1].count}")
