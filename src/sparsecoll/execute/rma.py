"""The RMA executor: a Schedule run as one-sided puts, with the collective RTR or the canary RTE.

T. Hoefler, T. Schneider, "Optimization Principles for Collective Neighborhood
Communications", SC12: section II-C ("Persistent Communication Buffers": II-C1 static RDMA
regions, II-C2 the collective RTR protocol, II-C3 the canary RTE protocol) and section III-B
(RDMA transports; III-B1: the canary only where the network commits a message's bytes in
order), run over the dependency form of III-C step by step. Every RDMA transfer needs a
*ready to receive* (RTR: the receiver's memory may be written) and a *ready to exit* (RTE:
the data is there). Two executors are registered:

* ``rma`` (RTR and RTE by generalized active target): per step of the Schedule, a rank opens
  an exposure epoch for the ranks that put into it (``Win.Post``), tells each of them so (the
  RTR message), and each origin runs its access epoch once every target of the step is ready
  (``Win.Start``, the puts, ``Win.Complete``); the target sees the RTE as the end of its
  exposure epoch (``Win.Test``/``Win.Wait``).
* ``rma_canary`` (II-C3): one passive target epoch (``Win.Lock_all``) for the window's whole
  life; when a run begins (its turn, see below) the receiver writes a canary word ``C`` (:data:`CANARY`) into the
  last 8 bytes of each receive region and clears a flag word per message, and sends every RTR
  of the run at once (its regions are all ready: bind writes nothing twice). The origin puts
  all but the last 8 bytes, ``Win.Flush(target)``, then writes the last 8 bytes with
  ``Accumulate(MPI_REPLACE)``, and also sets the message's flag word when those bytes equal
  ``C``. The receiver sees the RTE when the canary word changed or the flag is set, reading both
  with ``Fetch_and_op(MPI_NO_OP)``. What this relies on: ``MPI_Win_flush`` completes the data put
  *at the target* before the tail write is issued (MPI-4.1 chapter 12, "Flush and Sync"), and
  accumulates to one location with one basic datatype are atomic with respect to each other
  ("Atomicity"),
  so the receiver never sees a torn tail and never sees the tail before the data; MPI does
  *not* promise that a put's last byte lands last, so the canary is never part of the data put
  (the paper could use it on Gemini only up to its 64-byte packets, III-B1, for the same
  reason). A message shorter than 8 bytes, or whose region does not end on an 8-byte
  boundary (atomics want aligned words), always uses the flag word.

Decisions, with their reasons:

* **One dynamic window per communicator and variant** (``Win.Create_dynamic``), created when the
  first call plan of the executor is made (:meth:`sparsecoll.runtime.communicator.CommRuntime.call_plan`,
  the first call of a collective with this executor, reached by every rank together: the
  point where the runtime already agrees collectively on the size pass), freed with the
  communicator; and one window per persistent request, made at its init (:class:`RequestWindows`,
  see "Concurrent runs"). Window creation is collective, and the runtime creates executors of blocking
  and nonblocking calls from *local* caches (one rank may reuse an executor while another
  binds anew), so no executor may create a window. Each run attaches its memory
  (``Win.Attach``, local) and detaches it at the end, so two executors over one receive
  buffer (two idle nonblocking executors) never attach the same memory to the window at the
  same time. Windows over each call's buffers, made and freed inside each call,
  would block ``Ineighbor_*`` in ``Win_create`` until every rank entered the call (a legal
  program deadlocks there, see below), so they are not used; nor is a ``static_buffers`` promise
  (the ``cdag_static_buffers`` info key) needed: no window is tied to a buffer, so ranks may pass
  new arrays on every call (the adversarial suite does), and the key can only save work.
* **Addresses travel in band** (II-C1's "keys exchanged along all communication edges"): the RTR
  message of a (step, origin) pair carries the target address of each of its messages (and,
  for the canary, of each flag word). Nothing is exchanged when an executor is created (which
  is not collective, see above); a bound Schedule holds absolute addresses, so an executor
  fills its RTR payloads once.
* **Data**: a message is bytes on both ends (both type signatures are ``MPI_BYTE``, so they match).
  The target region is the receive block itself where the message's pieces (adjacent ones
  joined) are one piece of a predefined datatype whose extent is its size (zero copy);
  otherwise a staging slot of the executor, unpacked into the pieces once its arrival is seen.
  The origin puts straight from its pieces where each is of such a datatype (a hindexed
  ``MPI_BYTE`` type over absolute addresses), else it packs the message into a staging slot
  first. Staging copies are messages to self of the private communicator (:func:`.p2p.route`) with ``MPI_PACKED`` on the
  slot's side (``MPI_PACKED`` matches any type signature); this relies on the native packed
  format being the plain bytes in type-map order on a homogeneous system, so packed bytes on
  one rank unpack into the same values on another (MPICH and Open MPI without external32).
* **Steps**: step ``s+1`` starts once step ``s`` has completed on this rank (its puts done and
  its arrivals seen), so a forwarded item is put from transit space only after its own RTE.
  Zero-byte messages put nothing and are not waited for; their ranks still exchange the
  step's RTR (both ends list the same peers).
* **Never blocking on another rank in** ``start()`` **or** ``test()``: ``Win.Start`` may block
  until every target posted (the standard allows it), so targets post with ``MPI_MODE_NOCHECK`` and send the
  RTR message after ``Win.Post`` returned; an origin calls ``Win.Start(MPI_MODE_NOCHECK)`` only
  once every RTR of the step arrived (``Testall``), so no epoch call waits for another rank's
  program to reach the collective; ``start()`` only posts, arms and sends RTRs.
  A run has no MPI request to wait on while it waits for an RTE, so it is *polled*
  (:attr:`RmaRun.polled`): the progress engine then tests every request in flight in turn
  instead of blocking in ``Waitany`` (two requests completed in different orders on two ranks
  could otherwise wait for each other).
* **Concurrent runs** (several nonblocking calls in flight on one communicator) share the
  window, and run one after the other in the order their calls were made, the same on every
  rank (:class:`EpochOrder`); a later run waits, without blocking, until the earlier ones
  ended. A persistent request runs on a window of its own: MPI does not order the ``Start``
  of persistent collectives across ranks (ranks may start two requests in opposite orders,
  which one window in start order deadlocked), and one request's runs never overlap. The
  order is what PSCW needs (one exposure and one access epoch per window at
  a time, matched in order); both variants need it for attached memory (Open MPI's osc/rdma
  attaches a limited number of regions per window, MCA parameter ``osc_rdma_max_attach``, so
  100 outstanding calls each attaching their own failed with ``MPI_ERR_RMA_ATTACH``). A run
  attaches its regions when its turn comes (a region starting in the page where the previous
  one ends is attached with it) and detaches them when it ends.
* **RTR messages**: by default one point-to-point message per (step, sender, receiver), the
  "traditional" protocol of the paper's Fig. 5(a); a rank that puts into itself reads its own
  addresses and sends itself nothing. With the executor option ``rtr_tree=k``
  (``wrap(..., executor_options={"rtr_tree": k})``) the RTR tree of II-C2 (Fig. 5(b)): per step,
  the receivers of each sender combine their RTRs along a ``k``-ary tree rooted at the sender
  (:mod:`.rtr_tree`: its shape, and the protocol that tells every receiver its place, run once per
  Pattern when the first call plan is made, collectively). A receiver's combined RTR leaves
  once its own region is ready (PSCW: its exposure epoch is open) and its children's arrived.
  The RTRs a rank sends one parent go in (step, sender) order and the parent posts its receives
  from one child in sender order, one by one (``MPI_Startall`` starts in an arbitrary order), so
  messages of one tag match; an RTR of step ``s`` can only wait on RTRs of its own tree's
  subtree and on earlier ones to the same parent, so no cycle of waits forms. A run forwards
  from ``start``, ``test`` and ``wait``, and every RTR of a step has left before the step
  waits for its RTEs (another rank's puts may need it).
* **Fallback**: where ``Win.Create_dynamic`` (or ``Lock_all``) raises on some rank, every rank
  learns it from one allreduce and runs the step executor; ``plan_stats`` reports
  ``"steps (rma fallback: <reason>)"``. Where every rank holds a window (a later step failed),
  the windows are freed together; where creation itself failed on some rank, the windows made
  elsewhere cannot be freed (``MPI_Win_free`` is collective over ranks that have none).
* **Errors**: a run that raises gives up its turn in the window's order and detaches its
  memory, so later runs are not held back behind it.

Library faults met (see README's section on library faults): Open MPI 5.0.11 prints
``osc_ucx_component.c:375 Error: OSC UCX component priority set inside component query failed``
at every window creation where UCX has no RMA transport (open-mpi/ompi#12517, #14086: a
harmless message, osc/rdma is then selected with btl/sm as its "alternate btl" and works);
osc/sm offers no dynamic windows (it is not selected for them). MPICH 5.0 runs dynamic windows
over active messages and rejects a second exposure epoch on a window with "Wrong
synchronization of RMA calls", as the standard says it may, hence :class:`EpochOrder`.
"""

from __future__ import annotations

import ctypes
import os

import numpy
from mpi4py import MPI

from ..bind import Schedule
from ..checks import MAX_COUNT
from .p2p import Executor as StepExecutor
from .p2p import (
    copy_requests,
    free_executor,
    joined,
    message_buffer,
    message_bytes,
    message_datatype,
    recv_init,
    send_init,
)
from .rtr_tree import OPTION as RTR_TREE
from .rtr_tree import build as build_trees
from .rtr_tree import check_degree, flat_roles
from .rtr_tree import counts as rtr_counts

#: The canary word of ``rma_canary`` (II-C3): the last 8 bytes of every receive region hold it
#: until the data arrives.
CANARY = 0x5CA9A7A5C0FFEE5C
#: Bytes of the canary word (and of the flag words).
WORD = 8
#: Persistent requests of one communicator and variant that get a window of their own at once;
#: later ones run on the step executor. Every window takes a communicator context from the
#: library: MPICH 5.0.2 has about 2000 for the whole program and hung (no error) in
#: ``Win.Create_dynamic`` once they were spent (2000 live requests on one communicator).
MAX_REQUEST_WINDOWS = 256

_Startall = MPI.Prequest.Startall
_Testall = MPI.Request.Testall
_Waitall = MPI.Request.Waitall


def dense_segment(piece):
    """``(address, bytes)`` if ``piece`` is plain bytes in memory (a predefined datatype whose
    extent is its size), else None."""
    address, count, datatype = piece
    size = datatype.Get_size()
    if not datatype.is_predefined or datatype.Get_extent() != (0, size):
        return None
    return address, count * size


def dense_segments(pieces):
    """The byte segments of a message's pieces (adjacent ones joined), or None if one is not dense."""
    segments = []
    for piece in joined(pieces):
        segment = dense_segment(piece)
        if segment is None:
            return None
        if segment[1]:
            segments.append(segment)
    return segments


def bytes_datatype(segments, limit: int):
    """A committed hindexed ``MPI_BYTE`` type over the first ``limit`` bytes of ``segments``."""
    lengths, addresses = [], []
    for address, nbytes in segments:
        take = min(nbytes, limit)
        if take <= 0:
            break
        limit -= take
        while take > 0:  # block lengths are ints (Open MPI 5.0 has no large counts)
            length = min(take, MAX_COUNT)
            lengths.append(length)
            addresses.append(address)
            address += length
            take -= length
    return MPI.BYTE.Create_hindexed(lengths, addresses).Commit()


def _bytes_at_target(nbytes: int, datatypes: list) -> tuple:
    """``(count, datatype)`` of a put's ``nbytes`` bytes at its target: ``MPI_BYTE`` where the count
    fits MPI's int, else one type of pieces that do (Open MPI 5.0 has no large counts), appended
    to ``datatypes`` (freed with the executor's)."""
    if nbytes <= MAX_COUNT:
        return nbytes, MPI.BYTE
    datatype = bytes_datatype([(0, nbytes)], nbytes)
    datatypes.append(datatype)
    return 1, datatype


def _local_copy(comm: MPI.Comm, destination, source, tag: int) -> list:
    """A copy as a pair of persistent messages to self of ``comm``, sparsecoll's private
    communicator, with the call's tag (receive first; routed as :func:`.p2p.route` says). Not on
    ``MPI_COMM_SELF``: that is the program's, whose receives (``ANY_TAG``, or the tag of a
    blocking call) took these messages."""
    me = comm.Get_rank()
    return [recv_init(comm, destination, me, tag), send_init(comm, source, me, tag)]


def _run_copies(requests) -> None:
    if requests:
        _Startall(requests)
        _Waitall(requests)


class _Staging:
    """One executor's staging slots: each ends on an 8-byte boundary (its tail is an aligned word)."""

    def __init__(self):
        self.layout = []  # (offset, bytes) per slot
        self.total = 0
        self.array = None

    def slot(self, nbytes: int) -> int:
        """Reserve a slot of ``nbytes``; returns its number."""
        offset = self.total + (-(self.total + nbytes)) % WORD
        self.layout.append((offset, nbytes))
        self.total = offset + nbytes
        return len(self.layout) - 1

    def allocate(self) -> None:
        """Make the memory (after every slot was reserved)."""
        self.array = numpy.zeros(max(self.total, 1) + WORD, dtype=numpy.uint8)
        base = self.array.ctypes.data
        shift = (-base) % WORD
        self.base = base + shift

    def address(self, number: int) -> int:
        """The absolute address of a slot."""
        return self.base + self.layout[number][0]


class _Receive:
    """A message this rank receives: its target region, the unpack copy, the canary words."""

    __slots__ = ("peer", "region", "nbytes", "pieces", "slot", "unpack", "tail", "flag")

    def __init__(self, peer, pieces, staging: _Staging):
        self.peer = peer
        self.pieces = pieces
        self.nbytes = message_bytes(pieces)
        segments = dense_segments(pieces)
        self.slot = None
        if segments is not None and len(segments) <= 1:
            self.region = segments[0][0] if segments else 0
        else:
            self.slot = staging.slot(self.nbytes)
            self.region = None
        self.unpack = []
        self.tail = None  # address of the canary word, where the region allows one
        self.flag = None  # index of the flag word


class _Send:
    """A message this rank puts: its origin bytes (its pieces or a packed slot)."""

    __slots__ = ("peer", "position", "nbytes", "pieces", "segments", "slot", "pack", "body", "whole", "at_target",
                 "body_at_target")

    def __init__(self, peer, position, pieces, staging: _Staging):
        self.peer = peer
        self.position = position  # among this step's messages to the peer
        self.pieces = pieces
        self.nbytes = message_bytes(pieces)
        self.segments = dense_segments(pieces)
        self.slot = None if self.segments is not None else staging.slot(self.nbytes)
        self.pack = []
        self.body = None   # datatype of all but the tail word (canary)
        self.whole = None  # datatype of every byte
        self.at_target = self.body_at_target = None  # (count, datatype) of those bytes at the target


class _RtrOut:
    """An RTR message this rank sends in one sender's tree: to ``parent``, once ``waits`` (the
    receives from its children there) completed."""

    __slots__ = ("parent", "sender", "send", "waits", "payload", "step")

    def __init__(self, parent, sender, send, waits, payload):
        self.parent = parent
        self.sender = sender
        self.send = send
        self.waits = waits
        self.payload = payload
        self.step = 0  # position of its step in the run


class _Step:
    """One step: its messages, the RTR messages and the groups of its epochs."""

    def __init__(self, comm, tag, sends, recvs, staging, canary, flags_base, roles):
        me = comm.Get_rank()
        self.roles = roles
        self.recvs = [_Receive(m.peer, m.pieces, staging) for m in recvs]
        count = {}
        self.sends = []
        for m in sends:
            position = count.get(m.peer, 0)
            count[m.peer] = position + 1
            self.sends.append(_Send(m.peer, position, m.pieces, staging))
        self.in_peers = sorted({r.peer for r in self.recvs})
        self.out_peers = sorted({s.peer for s in self.sends})
        self.flags_base = flags_base
        self.canary = canary
        self.me = me
        self.comm = comm
        self.tag = tag
        self.to_peer = {p: count[p] for p in self.out_peers}
        self.from_peer = {}
        for r in self.recvs:
            self.from_peer[r.peer] = self.from_peer.get(r.peer, 0) + 1

    def finish(self, staging: _Staging, datatypes: list, flag_address) -> None:
        """Resolve staging addresses, make the datatypes, copies and RTR requests (after allocation)."""
        comm, tag, canary = self.comm, self.tag, self.canary
        for k, r in enumerate(self.recvs):
            if r.slot is not None:
                r.region = staging.address(r.slot)
                if r.nbytes:
                    datatype = message_datatype(r.pieces)
                    datatypes.append(datatype)
                    r.unpack = _local_copy(comm, [MPI.BOTTOM, 1, datatype],
                                           message_buffer([(r.region, r.nbytes, MPI.PACKED)], datatypes), tag)
            if canary:
                r.flag = self.flags_base + k
                end = r.region + r.nbytes
                if r.nbytes >= WORD and end % WORD == 0:
                    r.tail = end - WORD
        for s in self.sends:
            if s.slot is not None:
                address = staging.address(s.slot)
                if s.nbytes:
                    datatype = message_datatype(s.pieces)
                    datatypes.append(datatype)
                    s.pack = _local_copy(comm, message_buffer([(address, s.nbytes, MPI.PACKED)], datatypes),
                                         [MPI.BOTTOM, 1, datatype], tag)
                s.segments = [(address, s.nbytes)] if s.nbytes else []
            if s.nbytes:
                s.whole = bytes_datatype(s.segments, s.nbytes)
                datatypes.append(s.whole)
                s.at_target = _bytes_at_target(s.nbytes, datatypes)
                if canary and s.nbytes > WORD:
                    s.body = bytes_datatype(s.segments, s.nbytes - WORD)
                    datatypes.append(s.body)
                    s.body_at_target = _bytes_at_target(s.nbytes - WORD, datatypes)
        # RTR messages (II-C2): per tree this rank belongs to, its own block (the target address of
        # each message it receives from the tree's sender, and for the canary each flag word)
        # followed by its children's payloads, received straight into place; its own tree's
        # children deliver the blocks the puts need (:mod:`.rtr_tree`).
        width = 2 if canary else 1
        roles = self.roles
        self.rtr_outs = []
        incoming = []  # (sender, child, request)
        for sender in sorted(roles.parent):
            children = roles.children.get(sender, [])
            own = width * self.from_peer[sender]
            payload = numpy.zeros(own + width * sum(m for _, m in children), dtype=numpy.int64)
            self._own_block(sender, payload[:own], flag_address)
            offset, waits = own, []
            for child, messages in children:
                part = payload[offset:offset + width * messages]
                request = comm.Recv_init([part, len(part), MPI.INT64_T], child, tag)
                incoming.append((sender, child, request))
                waits.append(request)
                offset += len(part)
            send = comm.Send_init([payload, len(payload), MPI.INT64_T], roles.parent[sender], tag)
            self.rtr_outs.append(_RtrOut(roles.parent[sender], sender, send, waits, payload))
        self.rtr_arrived = {}
        self.rtr_root = []  # the receives of this rank's own tree
        self._root_buffers = []
        for child, messages in roles.children.get(self.me, []):
            buffer = numpy.zeros(width * messages, dtype=numpy.int64)
            self._root_buffers.append(buffer)
            request = comm.Recv_init([buffer, len(buffer), MPI.INT64_T], child, tag)
            incoming.append((self.me, child, request))
            self.rtr_root.append(request)
            offset = 0
            for receiver, count in roles.blocks[child]:
                self.rtr_arrived[receiver] = buffer[width * offset:width * (offset + count)]
                offset += count
        if self.me in self.to_peer:  # messages to itself: its own addresses, no RTR message
            block = numpy.zeros(width * self.from_peer[self.me], dtype=numpy.int64)
            self._own_block(self.me, block, flag_address)
            self.rtr_arrived[self.me] = block
        # posted one by one in sender order: two receives from one rank match in the order posted
        # (MPI_Startall starts its requests in an arbitrary order)
        self.rtr_recvs = [request for _, _, request in sorted(incoming, key=lambda x: (x[0], x[1]))]
        self.rtr_sends = [out.send for out in self.rtr_outs]
        self.relays = sum(1 for out in self.rtr_outs if out.waits)
        self.unsent = 0
        group = comm.Get_group()
        self.in_group = group.Incl(self.in_peers) if self.in_peers else None
        self.out_group = group.Incl(self.out_peers) if self.out_peers else None
        group.Free()
        self.waiting = [r for r in self.recvs if r.nbytes]  # messages whose RTE is awaited

    def _own_block(self, sender: int, block, flag_address) -> None:
        """Fill ``block`` with the target addresses (then flag words) of the messages from ``sender``."""
        mine = [r for r in self.recvs if r.peer == sender]
        for k, r in enumerate(mine):
            block[k] = r.region
            if self.canary:
                block[len(mine) + k] = flag_address(r.flag)

    def target_address(self, s: _Send) -> int:
        """Where ``s`` goes (from the RTR that arrived)."""
        return int(self.rtr_arrived[s.peer][s.position])

    def flag_address(self, s: _Send) -> int:
        """The flag word of ``s`` at its target."""
        return int(self.rtr_arrived[s.peer][self.to_peer[s.peer] + s.position])

    def free(self) -> None:
        """Release requests and groups."""
        for request in self.rtr_sends + self.rtr_recvs:
            request.Free()
        for r in self.recvs:
            for request in r.unpack:
                request.Free()
        for s in self.sends:
            for request in s.pack:
                request.Free()
        for group in (self.in_group, self.out_group):
            if group is not None:
                group.Free()
        self.rtr_sends = self.rtr_recvs = []


#: Ranges closer than the end of this page size are attached as one (the gap lies in a page the
#: previous range already touches, so it is mapped memory).
PAGE = 4096


def _merged_ranges(ranges) -> list:
    """``(address, bytes)`` ranges to attach: overlapping ones merged, and a range that starts in
    the page where the previous one ends joined to it (fewer attached regions: Open MPI limits
    them); empty ones dropped."""
    out = []
    for address, nbytes in sorted(r for r in ranges if r[1] > 0):
        if out and address <= out[-1][0] + out[-1][1] + (-(out[-1][0] + out[-1][1])) % PAGE:
            last = out[-1]
            last[1] = max(last[1], address + nbytes - last[0])
        else:
            out.append([address, nbytes])
    return [tuple(r) for r in out]


_ONE = numpy.ones(1, dtype=numpy.uint64)  # the flag word's value once set
_NOTHING = numpy.zeros(1, dtype=numpy.uint64)  # the origin of a read (MPI_NO_OP ignores it)


class RmaRun:
    """One run of an RMA executor's steps: ``start``, ``test``, ``wait``, ``handles``, ``completed``.

    A step moves through: (target) post or arm, RTR sent; (origin) every RTR of the step
    arrived, then the puts; (target) every RTE seen, staged regions unpacked. The next step
    starts once all three are done.
    """

    #: The progress engine must poll this stage (its RTEs are not MPI requests).
    polled = True

    def __init__(self, window, steps, ranges, canary: bool, flags, results, order=None):
        self.window = window
        self.order = order  # the EpochOrder of the window
        self.ticket = None
        self.reserved = None  # a ticket taken when the call was made, before this run could start
        self.entered = False
        self.steps_ = steps
        self.ranges = ranges  # memory attached during a run
        self.canary = canary
        self.flags = flags
        self.results = results
        self.step = 0
        self.put_done = False
        self.attached = []
        self.flagged = 0  # flag words this rank set in the current run (canary: colliding or short tails)
        # the RTR messages to each parent, in (step, sender) order: the order they are sent in, so
        # that they match the parent's receives (posted in sender order step by step)
        by_parent = {}
        for position, step in enumerate(steps):
            for out in step.rtr_outs:
                out.step = position
                by_parent.setdefault(out.parent, []).append(out)
        self.to_parents = list(by_parent.values())
        self.queues = []

    # -- the stage interface ------------------------------------------------------------
    @property
    def handles(self) -> list:
        """The MPI requests in flight (the RTR messages of the current step)."""
        if self.step >= len(self.steps_):
            return []
        step = self.steps_[self.step]
        return step.rtr_recvs + step.rtr_sends

    def completed(self, position: int) -> None:
        """A handle completed in a wait outside the run: the next test sees it complete (persistent
        requests stay complete), nothing to do now."""

    def start(self) -> None:
        """Take the run's turn and, if it is its turn, attach and enter the first step (posts,
        canaries and RTR sends only: never blocks)."""
        self.step = 0
        self.flagged = 0
        self.ticket = self.order.take() if self.reserved is None else self.reserved
        self.reserved = None
        self.entered = False
        self.queues = [list(reversed(outs)) for outs in self.to_parents]  # next message last
        for step in self.steps_:
            step.unsent = len(step.rtr_outs)
        try:
            self._try_enter()
        except BaseException:
            self._abandon()
            raise

    def _try_enter(self) -> bool:
        """Once every earlier run on the window has ended: attach the memory, enter the first step."""
        if self.order.ready(self.ticket):
            window = self.window
            for address, nbytes in self.ranges:
                memory = MPI.buffer.fromaddress(address, nbytes)
                try:
                    window.Attach(memory)
                except MPI.Exception as error:
                    self._detach()
                    raise RuntimeError(
                        f"rma: the MPI library refused to attach {len(self.ranges)} memory regions to the "
                        f"window ({error}); Open MPI limits them (MCA parameter osc_rdma_max_attach)") from error
                self.attached.append(memory)
            if self.canary:
                self._arm_all()
            self._enter()
            self.entered = True
        return self.entered

    def _arm_all(self) -> None:
        """Canary: write ``C`` into every tail word and clear every flag, then send every RTR."""
        self.flags[:] = 0
        for step in self.steps_:
            for r in step.recvs:
                if r.tail is not None:
                    ctypes.c_uint64.from_address(r.tail).value = CANARY
        self.window.Sync()

    def _enter(self) -> None:
        """Start the current step (skipping empty ones at the end)."""
        self.put_done = False
        if self.step >= len(self.steps_):
            return
        step = self.steps_[self.step]
        for request in step.rtr_recvs:
            request.Start()
        if not self.canary and step.in_group is not None:
            self.window.Post(step.in_group, MPI.MODE_NOCHECK)
        self._pump()

    def _pump(self) -> None:
        """Send every RTR message whose turn has come: this rank is ready for its step (PSCW: the
        step's exposure epoch is open; canary: every region was armed at the start), the
        children's messages it combines arrived, and the earlier messages to its parent left."""
        current = self.step
        for queue in self.queues:
            while queue:
                out = queue[-1]
                if out.waits:
                    if out.step != current or not _Testall(out.waits):
                        break
                elif out.step != current and not self.canary:
                    break
                out.send.Start()
                queue.pop()
                self.steps_[out.step].unsent -= 1

    def _put(self, step: _Step) -> None:
        """Every RTR of the step arrived: pack, put, end the access epoch (or flush and tail)."""
        window = self.window
        for s in step.sends:
            _run_copies(s.pack)
        if not self.canary:
            if step.out_group is None:
                return
            window.Start(step.out_group, MPI.MODE_NOCHECK)
            for s in step.sends:
                if s.nbytes:
                    window.Put([MPI.BOTTOM, 1, s.whole], s.peer, [step.target_address(s), *s.at_target])
            window.Complete()
            return
        tails = []
        for s in step.sends:
            if not s.nbytes:
                continue
            target = step.target_address(s)
            end = target + s.nbytes
            if s.nbytes >= WORD and end % WORD == 0:
                if s.body is not None:
                    window.Put([MPI.BOTTOM, 1, s.body], s.peer, [target, *s.body_at_target])
                tails.append(s)
            else:
                window.Put([MPI.BOTTOM, 1, s.whole], s.peer, [target, *s.at_target])
                tails.append(s)
        for peer in step.out_peers:
            window.Flush(peer)
        # the tail words stay alive until the Flush_all below completes their accumulates (an
        # origin buffer must not be reused before that; one array per word was freed as the
        # next was made, and a later tail's bytes landed in an earlier message's tail)
        words = numpy.zeros(len(tails), dtype=numpy.uint64)
        for k, s in enumerate(tails):
            target = step.target_address(s)
            end = target + s.nbytes
            if s.nbytes >= WORD and end % WORD == 0:
                word = words[k:k + 1]
                _copy_last_bytes(s.segments, word.ctypes.data)
                window.Accumulate([word, 1, MPI.UINT64_T], s.peer, [end - WORD, 1, MPI.UINT64_T], MPI.REPLACE)
                if int(word[0]) != CANARY:
                    continue
            self.flagged += 1
            window.Accumulate([_ONE, 1, MPI.UINT64_T], s.peer, [step.flag_address(s), 1, MPI.UINT64_T],
                              MPI.REPLACE)
        if tails:
            window.Flush_all()

    def _arrived(self, step: _Step) -> bool:
        """Whether every RTE of the step was seen (without blocking)."""
        if not self.canary:
            return step.in_group is None or self.window.Test()
        if not step.waiting:
            return True
        window, results, me = self.window, self.results, step.me
        for k, r in enumerate(step.waiting):
            if r.tail is not None:
                window.Fetch_and_op([_NOTHING, 1, MPI.UINT64_T], [results[2 * k:2 * k + 1], 1, MPI.UINT64_T],
                                    me, r.tail, MPI.NO_OP)
            window.Fetch_and_op([_NOTHING, 1, MPI.UINT64_T], [results[2 * k + 1:2 * k + 2], 1, MPI.UINT64_T],
                                me, self._flag(r), MPI.NO_OP)
        window.Flush_local(me)
        still = []
        for k, r in enumerate(step.waiting):
            changed = r.tail is not None and int(results[2 * k]) != CANARY
            if not (changed or results[2 * k + 1]):
                still.append(r)
        step.waiting = still
        if still:
            return False
        window.Sync()  # the public copy, complete, becomes what local loads see
        return True

    def _flag(self, r: _Receive) -> int:
        return self.flags.ctypes.data + WORD * r.flag

    def _advance(self, block: bool) -> bool:
        """Move through the steps; True once the run is complete. A run that raises gives up its
        turn (its memory detached), so later runs on the window are not held back by it."""
        try:
            return self._steps(block)
        except BaseException:
            self._abandon()
            raise

    def _steps(self, block: bool) -> bool:
        window = self.window
        if not self.entered and not self._try_enter():
            if block:
                raise RuntimeError("internal: an earlier RMA run on this communicator never ended its epochs")
            return False
        while self.step < len(self.steps_):
            step = self.steps_[self.step]
            if not self.put_done:
                self._pump()
                if block and not step.relays:
                    _Waitall(step.rtr_root)  # nothing to forward in this step: MPI may block
                while not _Testall(step.rtr_root):
                    if not block:
                        return False
                    os.sched_yield()  # forwarding: other ranks' RTRs pass through this one
                    self._pump()
                self._put(step)
                self.put_done = True
            # every RTR of the step leaves before its RTEs are awaited: other ranks' puts may need them
            self._pump()
            while step.unsent:
                if not block:
                    return False
                os.sched_yield()
                self._pump()
            if block:
                if self.canary:
                    while not self._arrived(step):
                        os.sched_yield()  # ranks may outnumber cores: let the writer run
                elif step.in_group is not None:
                    window.Wait()
                _Waitall(step.rtr_sends)
            else:
                # the RTR sends first (complete requests test complete again): the RTEs last, as
                # PSCW's exposure epoch ends at the one Win.Test that succeeds and a later test
                # of this step would call it again outside any epoch (MPI_ERR_RMA_SYNC)
                if not _Testall(step.rtr_sends):
                    return False
                if not self._arrived(step):
                    return False
            if self.canary:
                step.waiting = [r for r in step.recvs if r.nbytes]
            for r in step.recvs:
                _run_copies(r.unpack)
            self.step += 1
            self._enter()
        self._detach()
        if self.ticket is not None:
            self.order.finish(self.ticket)
            self.ticket = None
        return True

    def _abandon(self) -> None:
        """After an error: detach the memory and give up the turn (later runs may go)."""
        try:
            self._detach()
        finally:
            if self.ticket is not None:
                self.order.finish(self.ticket)
                self.ticket = None

    def _detach(self) -> None:
        for memory in self.attached:
            self.window.Detach(memory)
        self.attached = []

    def test(self) -> bool:
        """Progress without blocking; True once every message of the run has arrived and left."""
        return self._advance(block=False)

    def wait(self) -> None:
        """Block until the run is complete."""
        self._advance(block=True)


def _copy_last_bytes(segments, destination: int) -> None:
    """Copy the last :data:`WORD` bytes of a message's segments (they may span several) to ``destination``."""
    need = WORD
    for address, nbytes in reversed(segments):
        take = min(need, nbytes)
        need -= take
        ctypes.memmove(destination + need, address + nbytes - take, take)
        if need == 0:
            return


def open_window(comm: MPI.Comm, canary: bool):
    """``(window, None)`` or ``(None, reason)``: the dynamic window of one variant, agreed by every rank.

    Collective. Where creating it raised on some rank, every rank falls back (one allreduce); the
    windows are freed where every rank made one, else left unused (freeing one is collective
    over ranks that have none).
    """
    window, reason, locked = None, None, False
    try:
        window = create_window(comm)
        if canary:
            window.Lock_all()
            locked = True
    except MPI.Exception as error:
        reason = f"{type(error).__name__}: {error}".replace("\n", " ")[:200]
    anywhere = numpy.array([reason is not None, window is None], dtype=numpy.int32)
    comm.Allreduce(MPI.IN_PLACE, anywhere, op=MPI.MAX)
    failed, one_missing = bool(anywhere[0]), bool(anywhere[1])
    if failed:
        if not one_missing:  # a later step failed somewhere: free the windows together
            if locked:
                window.Unlock_all()
            window.Free()
        return None, reason or "another rank could not create its window"
    return window, None


def _nothing() -> None:
    pass


def create_window(comm: MPI.Comm) -> MPI.Win:
    """A dynamic window on ``comm`` (collective)."""
    return MPI.Win.Create_dynamic(MPI.INFO_NULL, comm)


def close_window(window: MPI.Win, canary: bool) -> None:
    """Free a window of :func:`open_window` (collective)."""
    if canary:
        window.Unlock_all()
    window.Free()


class EpochOrder:
    """The order in which the runs on one window go: the order of their calls.

    A window has at most one exposure and one access epoch at a time, and epochs match in the
    order they are opened, so concurrent PSCW runs (several nonblocking calls in flight) must
    open theirs in one order on every rank; attached memory is limited (Open MPI), so runs
    attach theirs in turn. MPI requires collective calls in the same order on every rank, so
    each run takes a ticket when its call is made and begins once every earlier ticket has
    finished: the same order on every rank, so a run never waits for one that waits for it.
    The ``Start`` of persistent requests is not so ordered (MPI-4.1 section 7.4.4: only the info
    key ``mpi_assert_strict_persistent_collective_ordering`` lets an implementation assume one
    start order), so each persistent request runs on a window of its own
    (:class:`RequestWindows`), whose runs are one after the other by definition.
    """

    __slots__ = ("issued", "serving", "finished")

    def __init__(self):
        self.issued = 0
        self.serving = 0
        self.finished = set()

    def take(self) -> int:
        """The next ticket (when a call is made)."""
        self.issued += 1
        return self.issued - 1

    def ready(self, ticket: int) -> bool:
        """Whether every earlier ticket has finished."""
        return ticket == self.serving

    def finish(self, ticket: int) -> None:
        """``ticket``'s run closed its last epoch (or never had one)."""
        self.finished.add(ticket)
        while self.serving in self.finished:
            self.finished.remove(self.serving)
            self.serving += 1


class RequestWindows:
    """The windows of one variant's persistent requests on one communicator, one per request.

    Made at the request's init (collective, in the same order on every rank, as MPI requires of
    inits). ``MPI_Request_free`` is local and ``MPI_Win_free`` collective, so a freed request only
    marks its window released; the next init of such a request, and the communicator's release,
    free together the windows every rank released (one allreduce over the list, which is the
    same on every rank: entries are added at inits and removed only by that agreement).
    """

    __slots__ = ("canary", "entries", "on_steps")

    def __init__(self, canary: bool):
        self.canary = canary
        self.entries = []  # [window, released here] per request window, in creation order
        self.on_steps = 0  # persistent requests that got no window (the same on every rank)

    def open(self, comm: MPI.Comm):
        """``(window, entry)`` for a new request (collective), or ``(None, None)`` where a rank
        could not make one, or :data:`MAX_REQUEST_WINDOWS` are open (the same count on every rank):
        every rank then runs the request on the step executor."""
        self.sweep(comm)
        window = None
        if len(self.entries) < MAX_REQUEST_WINDOWS:
            window, _ = open_window(comm, self.canary)
        if window is None:
            self.on_steps += 1
            return None, None
        entry = [window, False]
        self.entries.append(entry)
        return window, entry

    def sweep(self, comm: MPI.Comm) -> None:
        """Free the windows every rank released (collective; nothing where there are none)."""
        if not self.entries:
            return
        released = numpy.array([entry[1] for entry in self.entries], dtype=numpy.int32)
        comm.Allreduce(MPI.IN_PLACE, released, op=MPI.MIN)
        kept = []
        for entry, everywhere in zip(self.entries, released.tolist()):
            if everywhere:
                close_window(entry[0], self.canary)
            else:
                kept.append(entry)
        self.entries = kept

    def close(self) -> None:
        """Free every window (collective: with the communicator, once no request uses them)."""
        for window, _ in self.entries:
            close_window(window, self.canary)
        self.entries = []


class _Factory:
    """Makes the executors of one window; ``reserve``/``release`` serve calls that make their
    executor after the call (the size pass of v/w calls runs first)."""

    __slots__ = ("cls", "window", "order", "trees", "requests")

    def __init__(self, cls, window, order, trees=None, requests: RequestWindows | None = None):
        self.cls = cls
        self.window = window
        self.order = order
        self.trees = trees  # the RTR tree roles per step of the Pattern (None: one RTR per peer)
        self.requests = requests  # where persistent requests get their own windows

    def __call__(self, comm, schedule, tag):
        return self.cls(comm, schedule, tag, window=self.window, order=self.order, trees=self.trees)

    def with_trees(self, trees) -> _Factory:
        """The factory of schedules bound from the Pattern whose RTR tree roles are ``trees``."""
        return _Factory(self.cls, self.window, self.order, trees, self.requests)

    def for_persistent_request(self, comm: MPI.Comm):
        """``(factory, release)`` for one persistent request: a factory over a window of its own
        (collective, at the init: :class:`RequestWindows`), and what its ``Free`` calls (local)."""
        window, entry = self.requests.open(comm)
        if window is None:
            return StepExecutor, _nothing

        def release():
            entry[1] = True
        return _Factory(self.cls, window, EpochOrder(), self.trees), release

    def reserve(self) -> int:
        """A ticket for a call whose executor comes later."""
        return self.order.take()

    def release(self, ticket) -> None:
        """Give back a reserved ticket no run used."""
        if ticket is not None:
            self.order.finish(ticket)


class Prepared:
    """What a communicator runs for an executor name: a factory ``(comm, schedule, tag)``, the label
    ``plan_stats`` shows, and what to release with the communicator.

    :meth:`factory_for` and :meth:`counts` serve executor options that depend on the Pattern
    (the RTR tree of the RMA executors); without a window they are the plain factory and nothing.
    """

    __slots__ = ("factory", "label", "_window", "_canary", "_trees")

    def __init__(self, factory, label: str, window=None, canary: bool = False):
        self.factory = factory
        self.label = label
        self._window = window
        self._canary = canary
        self._trees = {}  # (pattern key, degree) -> RTR tree roles per step

    def factory_for(self, key, pattern, options, comm):
        """The factory for schedules bound from ``pattern`` (cached under ``key``) with the
        executor ``options``; collective where it builds the pattern's RTR trees (the first time
        for ``key``, reached by every rank together)."""
        degree = options.get(RTR_TREE)
        if self._window is None or degree is None:
            return self.factory
        trees = self._trees.get((key, degree))
        if trees is None:
            trees = self._trees[(key, degree)] = build_trees(pattern, comm, degree)
        return self.factory.with_trees(trees)

    def counts(self, key, pattern, options, rank: int) -> dict:
        """The RTR numbers of one run of ``pattern`` on ``rank`` (:func:`.rtr_tree.counts`) and the
        persistent requests' windows (``request_windows``: open now, requests run on the step
        executor because none could be opened, the limit); empty where no window runs it. Never
        communicates: before the first call has built the RTR trees (collectively) only the degree
        is known, and ``rtr_trees_built`` says so."""
        if self._window is None:
            return {}
        requests = self.factory.requests
        windows = {"request_windows": {"open": len(requests.entries), "requests_on_steps": requests.on_steps,
                                       "limit": MAX_REQUEST_WINDOWS}}
        degree = options.get(RTR_TREE)
        if degree is None:
            return {**rtr_counts([flat_roles(rank, step.sends, step.recvs) for step in pattern.steps]), **windows}
        trees = self._trees.get((key, degree))
        if trees is None:
            return {RTR_TREE: degree, "rtr_trees_built": False, **windows}
        return {**rtr_counts(trees), RTR_TREE: degree, "rtr_trees_built": True, **windows}

    def close(self) -> None:
        """Free the windows (collective; idempotent)."""
        if self._window is not None:
            close_window(self._window, self._canary)
            self._window = None
            self.factory.requests.close()


class Executor:
    """An RMA run of one bound Schedule (``rma``: PSCW; the subclass :class:`CanaryExecutor`: canary).

    ``steps`` is ``[run]`` (an :class:`RmaRun`), followed by the final local copies as a list
    stage of messages to self, as in the step executor; no messages at all: ``[]``.
    """

    canary = False
    name = "rma"

    __slots__ = ("steps", "_datatypes", "_schedule", "_parts", "_keep")

    #: The executor options (``wrap(..., executor_options={...})``): the RTR tree's degree.
    OPTIONS = (RTR_TREE,)

    def __init__(self, comm: MPI.Comm, schedule: Schedule, tag: int, *, window: MPI.Win, order=None, trees=None):
        canary = self.canary
        me = comm.Get_rank()
        if trees is not None and len(trees) != len(schedule.steps):
            raise ValueError(f"trees: {len(trees)} steps of RTR tree roles for a schedule of {len(schedule.steps)}")
        self._schedule = schedule  # keeps its temporary space alive
        self._datatypes = datatypes = []
        staging = _Staging()
        parts = []
        flags_used = 0
        for index, (sends, recvs) in enumerate(schedule.steps):
            if not sends and not recvs:
                continue
            roles = trees[index] if trees is not None else flat_roles(me, sends, recvs)
            parts.append(_Step(comm, tag, sends, recvs, staging, canary, flags_used, roles))
            flags_used += len(recvs)
        staging.allocate()
        flags = numpy.zeros(max(flags_used, 1), dtype=numpy.uint64)
        for part in parts:
            part.finish(staging, datatypes, lambda k: flags.ctypes.data + WORD * k)
        self._parts = parts
        ranges = [(r.region, r.nbytes) for part in parts for r in part.recvs if r.slot is None]
        ranges.append((staging.array.ctypes.data, staging.array.nbytes))
        if canary:
            ranges.append((flags.ctypes.data, flags.nbytes))
        widest = max((len(part.recvs) for part in parts), default=0)
        results = numpy.zeros(max(2 * widest, 1), dtype=numpy.uint64)
        self._keep = (staging, flags, results)
        self.steps = [RmaRun(window, parts, _merged_ranges(ranges), canary, flags, results, order)] if parts else []
        copies = copy_requests(comm, schedule, tag, datatypes)
        if copies:
            self.steps.append(copies)

    @classmethod
    def check_options(cls, options: dict) -> dict:
        """``options`` checked (``rtr_tree``: the RTR tree's degree, an int >= 1), else an error
        naming ``executor_options``."""
        unknown = sorted(set(options) - set(cls.OPTIONS))
        if unknown:
            raise ValueError(f"executor_options: {cls.name} takes {list(cls.OPTIONS)}, got {unknown}")
        return {name: check_degree(value) for name, value in options.items()}

    @classmethod
    def prepare(cls, comm: MPI.Comm) -> Prepared:
        """Open this variant's window on ``comm`` (collective), or fall back to the step executor."""
        window, reason = open_window(comm, cls.canary)
        if window is None:
            return Prepared(StepExecutor, f"steps ({cls.name} fallback: {reason})")

        return Prepared(_Factory(cls, window, EpochOrder(), requests=RequestWindows(cls.canary)), cls.name, window,
                        cls.canary)

    def use_ticket(self, ticket) -> bool:
        """Run with a ticket reserved when the call was made (:meth:`_Factory.reserve`); False if
        this executor has no run to use it (the caller then releases it)."""
        if self.steps and type(self.steps[0]) is RmaRun:
            self.steps[0].reserved = ticket
            return True
        return False

    def counts(self) -> dict:
        """Deterministic numbers of one run: epochs, RTR messages sent and received and the depth of
        this rank's RTR trees, puts and bytes put by this rank."""
        parts = self._parts
        puts = sum(1 for part in parts for s in part.sends if s.nbytes)
        out = {"steps": len(parts),
               **rtr_counts([part.roles for part in parts]),
               "puts": puts,
               "bytes_put": sum(s.nbytes for part in parts for s in part.sends),
               "staged_receives": sum(1 for part in parts for r in part.recvs if r.slot is not None and r.nbytes),
               "staged_sends": sum(1 for part in parts for s in part.sends if s.slot is not None and s.nbytes)}
        if self.canary:
            out["flag_only_receives"] = sum(1 for part in parts for r in part.recvs if r.nbytes and r.tail is None)
        else:
            out["epochs"] = sum((part.in_group is not None) + (part.out_group is not None) for part in parts)
        return out

    def free(self) -> None:
        """Release requests, groups and datatypes (no run may be in flight; idempotent)."""
        for part in self._parts:
            part.free()
        self._parts = []
        self.steps = [stage for stage in self.steps if type(stage) is list]
        free_executor(self)
        self._keep = None


class CanaryExecutor(Executor):
    """The ``rma_canary`` variant (II-C3): passive target, canary word and flag word per message."""

    canary = True
    name = "rma_canary"
    __slots__ = ()
