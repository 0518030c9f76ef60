"""Virtual ranks in one process: greenlets behind the mpi4py lowercase ``Comm`` interface.

A :class:`World` holds N virtual ranks. :meth:`World.run` calls a function on every rank
with that rank's :class:`VirtualComm`; each call runs in its own greenlet and switches
back to the driver only when it must wait (a receive, probe or collective that cannot
complete yet), so a purely local function never switches at all.

Semantics follow MPI (MPI-4.1 §3.5, §3.8):

* point-to-point matching by (communicator, source, tag), ``ANY_SOURCE`` and
  ``ANY_TAG`` included; a receive takes the earliest arrived matching message and an
  arriving message the earliest posted matching receive, so messages between one pair
  never overtake each other;
* ``send``/``isend`` are eager (buffered): they complete at once. ``issend``
  completes when matched. Deadlocks that only a rendezvous protocol would expose are
  therefore not reported for ``send``;
* payloads travel pickled (protocol 5, as mpi4py does), so the receiver gets a copy and
  the byte counters are the exact pickle lengths; collective results made only of
  immutable objects are unpickled once and shared;
* collectives match by call order per communicator and check that every rank calls the
  same one (with the same root);
* ``Dup`` gives a communicator with its own matching space (deterministic context ids,
  so no synchronization is needed).

Counters per rank (:class:`Counters`): point-to-point messages and bytes sent,
collective calls and the bytes this rank contributed to them, and the *protocol depth*:
a Lamport clock that counts communication rounds on the longest causal chain. A
message carries the sender's clock + 1 and a completed receive lifts the receiver's
clock to at least that; a collective lifts every participant to (maximum over the
participants) + 1. A purely local build has depth 0, one exchange 1, request-reply 2.

Deadlock: when no virtual rank can run and some have not finished, :meth:`World.run`
raises :class:`DeadlockError` listing, for each waiting rank, what it waits for and on
which ranks.

Portability note for builders: wait on a list of requests with
``[r.wait() for r in requests]`` (works on mpi4py and here); ``MPI.Request.waitall``
cannot take simulated requests.
"""

from __future__ import annotations

import gc
import pickle
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from greenlet import getcurrent, greenlet
from mpi4py import MPI

from ..checks import positive_integer

ANY_SOURCE = MPI.ANY_SOURCE
ANY_TAG = MPI.ANY_TAG
PROC_NULL = MPI.PROC_NULL
TAG_UB = 2 ** 30 - 1
#: Builders allocate millions of long-lived objects at scale; a larger first-generation
#: threshold during a run keeps the collector from rescanning them constantly.
GC_THRESHOLD = 100_000
_PROTOCOL = pickle.HIGHEST_PROTOCOL


class SimulationError(RuntimeError):
    """An error in the simulated program (bad arguments, mismatched collectives)."""


class DeadlockError(SimulationError):
    """Every unfinished virtual rank waits and nothing can be delivered.

    ``waits`` maps each waiting rank to ``(description, ranks it waits on or None for any)``.
    """

    def __init__(self, message: str, waits: dict):
        super().__init__(message)
        self.waits = waits


class RankError(SimulationError):
    """A virtual rank raised; the original exception is the ``__cause__``."""

    def __init__(self, rank: int, exc: BaseException):
        super().__init__(f"virtual rank {rank} raised {type(exc).__name__}: {exc}")
        self.rank = rank


@dataclass
class Counters:
    """What one virtual rank spent on communication (see the module docstring)."""

    messages: int = 0
    bytes: int = 0
    collectives: int = 0
    collective_bytes: int = 0
    depth: int = 0

    def as_dict(self) -> dict:
        """The counters as a plain dict."""
        return {"messages": self.messages, "bytes": self.bytes, "collectives": self.collectives,
                "collective_bytes": self.collective_bytes, "depth": self.depth}


class _Message:
    """A message in flight: envelope, pickled payload, sender's clock + 1, issend request."""

    __slots__ = ("source", "tag", "data", "stamp", "sync", "taken")

    def __init__(self, source: int, tag: int, data: bytes, stamp: int, sync: Request | None = None):
        self.source = source
        self.tag = tag
        self.data = data
        self.stamp = stamp
        self.sync = sync
        self.taken = False  # received through the mailbox's envelope index


@dataclass
class _Waiting:
    description: str
    on: frozenset | None  # ranks waited on; None: any rank


class _LazyWaiting:
    """A :class:`_Waiting` computed only when asked (deadlock reports, livelock checks).

    Blocking happens millions of times in a large build and is almost never reported,
    so the description (string formatting, the set of missing ranks) waits until needed.
    """

    __slots__ = ("_describe", "_value")

    def __init__(self, describe: Callable[[], _Waiting]):
        self._describe = describe
        self._value = None

    def _get(self) -> _Waiting:
        if self._value is None:
            self._value = self._describe()
        return self._value

    @property
    def description(self) -> str:
        """What the rank waits in."""
        return self._get().description

    @property
    def on(self) -> frozenset | None:
        """Ranks waited on; None: any rank."""
        return self._get().on


_POLLING = _Waiting("a polling loop (test/iprobe)", None)


def _envelope(source: int, tag: int) -> int:
    """One int for ``(source, tag)``: the key of the mailbox's envelope index."""
    return (tag << 32) | source


class _Mailbox:
    """One rank's matching state on one communicator (MPI-4.1 §3.5 ordering).

    Arrived, unmatched messages are indexed twice. ``by_envelope`` maps each
    :func:`_envelope` value to its messages in arrival order (one message alone, several in
    a list), so a receive naming source and tag finds its message in O(1): common_neighbor's
    Algorithm 2 receives from thousands of friends in rank order while their messages
    arrive in the order the ranks ran, which made a scan of one arrival-ordered list the
    largest cost of its builds at 2160 ranks. ``arrivals`` keeps every message in arrival
    order for the wildcard receives; a message taken through ``by_envelope`` stays there
    marked ``taken`` until the list is compacted (when taken ones outnumber the others).
    ``posted`` holds the pending receives in posting order as ``(source, tag, request)``.
    A receive takes the first matching arrived message and an arriving message the first
    matching posted receive, so messages between one pair never overtake each other.
    """

    __slots__ = ("by_envelope", "arrivals", "taken", "posted")

    def __init__(self):
        self.by_envelope: dict = {}
        self.arrivals: list = []
        self.taken = 0           # messages in ``arrivals`` already received
        self.posted: list = []

    def add_unexpected(self, msg: _Message) -> None:
        """Queue a message no posted receive matched."""
        self.arrivals.append(msg)
        key = _envelope(msg.source, msg.tag)
        queued = self.by_envelope.get(key)
        if queued is None:
            self.by_envelope[key] = msg
        elif type(queued) is list:
            queued.append(msg)
        else:
            self.by_envelope[key] = [queued, msg]

    def find(self, source: int, tag: int, take: bool) -> _Message | None:
        """The earliest arrived message matching ``(source, tag)``; removed if ``take``."""
        if source != ANY_SOURCE and tag != ANY_TAG:
            key = _envelope(source, tag)
            queued = self.by_envelope.get(key)
            if queued is None:
                return None
            if type(queued) is list:
                msg = queued[0]
                if take:
                    del queued[0]
                    if len(queued) == 1:
                        self.by_envelope[key] = queued[0]
            else:
                msg = queued
                if take:
                    del self.by_envelope[key]
            if take:
                self._mark_taken(msg)
            return msg
        for msg in self.arrivals:
            if msg.taken:
                continue
            if (source == ANY_SOURCE or msg.source == source) and (tag == ANY_TAG or msg.tag == tag):
                if take:
                    # the earliest matching arrival is the head of its envelope's queue
                    self.find(msg.source, msg.tag, True)
                return msg
        return None

    def _mark_taken(self, msg: _Message) -> None:
        msg.taken = True
        self.taken += 1
        arrivals = self.arrivals
        if 2 * self.taken > len(arrivals):
            self.arrivals = [m for m in arrivals if not m.taken]
            self.taken = 0

    def post(self, req: Request) -> None:
        """Queue a receive no unexpected message matched."""
        self.posted.append((req.source, req.tag, req))

    def match_posted(self, source: int, tag: int) -> Request | None:
        """Remove and return the earliest posted receive that matches ``(source, tag)``."""
        posted = self.posted
        for i, (want_source, want_tag, req) in enumerate(posted):
            if (want_source == source or want_source == ANY_SOURCE) and (want_tag == tag or want_tag == ANY_TAG):
                del posted[i]
                return req
        return None


class _RankState:
    __slots__ = ("rank", "glet", "waiting", "queued", "done", "result", "counters", "last_payload",
                 "last_object", "last_immutable")

    def __init__(self, rank: int):
        self.rank = rank
        self.glet = None
        self.waiting = None
        self.queued = False
        self.done = False
        self.result = None
        self.counters = Counters()
        self.last_payload = b""  # the last point-to-point payload sent, shared by equal ones
        self.last_object = None  # the object it was pickled from
        self.last_immutable = None  # whether that object is immutable (None: not yet asked)


def _dumps(obj) -> bytes:
    return pickle.dumps(obj, _PROTOCOL)


_IMMUTABLE = (int, float, complex, str, bytes, bool, type(None), frozenset)


def _immutable(obj, depth: int = 0) -> bool:
    """Whether ``obj`` can be shared between ranks (immutable all the way down, shallow check)."""
    if isinstance(obj, _IMMUTABLE):
        return True
    if isinstance(obj, tuple) and depth < 3:
        return all(_immutable(x, depth + 1) for x in obj)
    return False


class _Context:
    """One communicator across all ranks: mailboxes and collective slots."""

    def __init__(self, world: World, cid, topologies):
        n = world.size
        self.world = world
        self.cid = cid
        self.topologies = topologies
        self.mailboxes = [_Mailbox() for _ in range(n)]
        self.coll_calls = [0] * n
        self.slots: dict = {}
        self.dups = [0] * n
        self.label_index: dict = {}

    def out_index(self, sender: int) -> dict:
        """(dest, label) -> out-edge index of ``sender`` (for neighbor_alltoall)."""
        index = self.label_index.get(sender)
        if index is None:
            topo = self.topologies[sender]
            index = {(d, label): k for k, (d, label) in enumerate(zip(topo.destinations, topo.out_labels))}
            self.label_index[sender] = index
        return index


class _Slot:
    """One collective call across all ranks."""

    __slots__ = ("kind", "root", "data", "arrived", "done", "stamp", "shared", "extra", "requests")

    def __init__(self, kind: str, root, n: int):
        self.kind = kind
        self.root = root
        self.data = [None] * n
        self.arrived = 0
        self.done = False
        self.stamp = 0
        self.shared = None
        self.extra = None
        self.requests = []


class Request:
    """A simulated request with mpi4py's lowercase ``wait``/``test`` (and ``Wait``/``Test``)."""

    __slots__ = ("comm", "complete", "message", "value", "source", "tag", "kind", "observed", "slot")

    def __init__(self, comm: VirtualComm, kind: str, source=PROC_NULL, tag=ANY_TAG):
        self.comm = comm
        self.kind = kind
        self.complete = False
        self.message = None
        self.value = None
        self.source = source
        self.tag = tag
        self.observed = False
        self.slot = None

    def _finish(self, status):
        """Deliver the result once (clock, status, unpickling)."""
        msg = self.message
        if not self.observed:
            self.observed = True
            if msg is not None:
                self.value = _unpack(self.comm._state.counters, msg)
                self.message = None
                self.source, self.tag = msg.source, msg.tag
            elif self.slot is not None:
                self.comm._collect(self.slot)
        if status is not None:
            status.Set_source(self.source)
            status.Set_tag(self.tag)
        return self.value

    def wait(self, status=None):
        """Block until complete; return the received object (None for sends)."""
        if not self.complete:
            state = self.comm._state
            driver = self.comm._world._driver
            while not self.complete:
                state.waiting = self  # described lazily: see description/on
                driver.switch()
            state.waiting = None
        return self._finish(status)

    def test(self, status=None):
        """``(flag, object)``; an incomplete test lets the other ranks run (MPI progress)."""
        if not self.complete:
            self.comm._poll()
        if not self.complete:
            return False, None
        return True, self._finish(status)

    def Wait(self, status=None) -> bool:
        """Block until complete."""
        self.wait(status)
        return True

    def Test(self, status=None) -> bool:
        """Whether complete."""
        return self.test(status)[0]

    def Free(self) -> None:
        """Nothing to release."""

    @property
    def description(self) -> str:
        """What a rank blocked in :meth:`wait` on this request waits in (deadlock reports)."""
        return self._describe().description

    @property
    def on(self) -> frozenset | None:
        """Ranks a rank blocked on this request waits on; None: any rank."""
        return self._describe().on

    def _describe(self) -> _Waiting:
        if self.kind == "recv":
            on = None if self.source == ANY_SOURCE else frozenset([self.source])
            return _Waiting(f"recv(source={_src(self.source)}, tag={_tag(self.tag)}) on comm {self.comm._ctx.cid}", on)
        if self.kind == "ssend":
            return _Waiting(f"issend to rank {self.source} (tag {self.tag}) on comm {self.comm._ctx.cid} "
                            "not yet matched", frozenset([self.source]))
        return self.comm._slot_waiting(self.slot)


#: Unpickled small immutable payloads (choices, states, notifications), by their bytes;
#: ``_MUTABLE`` marks payloads that must be unpickled for every receiver.
_SMALL_OBJECTS: dict = {}
_SMALL_PAYLOAD = 64
_SMALL_OBJECTS_MAX = 4096
_MUTABLE, _UNSEEN = object(), object()


def _unpack(counters: Counters, msg: _Message):
    """The object of a received message; the receiver's clock moves past the send.

    Every receiver gets its own object, except that equal small immutable payloads
    unpickle once (sharing an immutable object cannot be observed, as with small ints).
    """
    if msg.stamp > counters.depth:
        counters.depth = msg.stamp
    data = msg.data
    if len(data) > _SMALL_PAYLOAD:
        return pickle.loads(data)
    obj = _SMALL_OBJECTS.get(data, _UNSEEN)
    if obj is _UNSEEN:
        obj = pickle.loads(data)
        if len(_SMALL_OBJECTS) >= _SMALL_OBJECTS_MAX:
            _SMALL_OBJECTS.clear()
        _SMALL_OBJECTS[data] = obj if _immutable(obj) else _MUTABLE
        return obj
    return pickle.loads(data) if obj is _MUTABLE else obj


#: What ``isend`` returns: sends are eager, so every one is complete when posted.
_SENT = Request(None, "send")
_SENT.complete = _SENT.observed = True


def _src(source) -> str:
    return "ANY_SOURCE" if source == ANY_SOURCE else str(source)


def _tag(tag) -> str:
    return "ANY_TAG" if tag == ANY_TAG else str(tag)


class VirtualComm:
    """One virtual rank's communicator: the subset of mpi4py's ``Comm`` builders use."""

    def __init__(self, world: World, ctx: _Context, rank: int):
        self._world = world
        self._ctx = ctx
        self._rank = rank
        self._state = world._ranks[rank]

    # -- identity ------------------------------------------------------------------
    def Get_rank(self) -> int:
        """This virtual rank."""
        return self._rank

    def Get_size(self) -> int:
        """Number of virtual ranks."""
        return self._world.size

    rank = property(Get_rank)
    size = property(Get_size)

    def Is_inter(self) -> bool:
        """Always False."""
        return False

    def Get_attr(self, keyval):
        """``MPI.TAG_UB`` only."""
        if keyval == MPI.TAG_UB:
            return TAG_UB
        return None

    def Dup(self) -> VirtualComm:
        """A communicator over the same ranks and topology with its own matching space."""
        ctx = self._ctx
        k = ctx.dups[self._rank]
        ctx.dups[self._rank] += 1
        cid = (ctx.cid, k)
        child = self._world._contexts.get(cid)
        if child is None:
            child = self._world._contexts[cid] = _Context(self._world, cid, ctx.topologies)
        return VirtualComm(self._world, child, self._rank)

    def Free(self) -> None:
        """Nothing to release."""

    # -- topology queries ------------------------------------------------------------
    @property
    def topology(self):
        """This rank's Topology (None when the world has none)."""
        topologies = self._ctx.topologies
        if topologies is None:
            return None
        return topologies[self._rank]

    def _topo(self):
        topo = self.topology
        if topo is None:
            raise SimulationError("this virtual communicator has no topology")
        return topo

    def Get_topology(self) -> int:
        """``MPI.DIST_GRAPH`` when the world has topologies, else ``MPI.UNDEFINED``."""
        return MPI.UNDEFINED if self._ctx.topologies is None else MPI.DIST_GRAPH

    def Get_dist_neighbors_count(self) -> tuple:
        """``(indegree, outdegree, weighted)``."""
        topo = self._topo()
        return topo.indegree, topo.outdegree, topo.source_weights is not None

    def Get_dist_neighbors(self) -> tuple:
        """``(sources, destinations, weights or None)`` as mpi4py returns them."""
        topo = self._topo()
        weights = None
        if topo.source_weights is not None:
            weights = (list(topo.source_weights), list(topo.dest_weights))
        return list(topo.sources), list(topo.destinations), weights

    @property
    def indegree(self) -> int:
        """Number of sources."""
        return self._topo().indegree

    @property
    def outdegree(self) -> int:
        """Number of destinations."""
        return self._topo().outdegree

    # -- blocking --------------------------------------------------------------------
    def _block(self, ready: Callable[[], bool], waiting: _Waiting) -> None:
        state = self._state
        world = self._world
        while not ready():
            state.waiting = waiting
            world._driver.switch()
        state.waiting = None

    def _poll(self) -> None:
        """A failed test or iprobe: let the other ranks run once before answering."""
        world = self._world
        world._polls += 1
        state = self._state
        state.waiting = _POLLING
        state.queued = True
        world._ready.append(self._rank)
        world._driver.switch()
        state.waiting = None

    def _check_peer(self, peer, name: str, wildcard: bool) -> None:
        if type(peer) is int and 0 <= peer < self._world.size:
            return
        if peer == PROC_NULL or (wildcard and peer == ANY_SOURCE):
            return
        if not isinstance(peer, int) or not 0 <= peer < self._world.size:
            raise SimulationError(f"{name}: rank {peer!r} out of range for {self._world.size} ranks")

    def _check_tag(self, tag, wildcard: bool) -> None:
        if type(tag) is int and 0 <= tag <= TAG_UB:
            return
        if wildcard and tag == ANY_TAG:
            return
        if not isinstance(tag, int) or not 0 <= tag <= TAG_UB:
            raise SimulationError(f"tag: expected 0..{TAG_UB}{' or ANY_TAG' if wildcard else ''}, got {tag!r}")

    # -- point to point --------------------------------------------------------------
    def _post_send(self, obj, dest: int, tag: int, sync: Request | None) -> None:
        self._check_peer(dest, "dest", False)
        self._check_tag(tag, False)
        if dest == PROC_NULL:
            if sync is not None:
                sync.complete = True
            return
        state = self._state
        if obj is state.last_object:
            if state.last_immutable is None:  # asked once per object, when it is sent again
                state.last_immutable = _immutable(obj)
            same = state.last_immutable
        else:
            state.last_object, state.last_immutable, same = obj, None, False
        if same:
            # the same immutable object to many peers (a choice to every friend): pickled once
            data = state.last_payload
        else:
            data = _dumps(obj)
            if data == state.last_payload:
                # equal payloads to many peers: the peers share one copy of the bytes, as
                # the memory of a large build is mostly messages in flight
                data = state.last_payload
            else:
                state.last_payload = data
        self._world._polls = 0
        counters = state.counters
        counters.messages += 1
        counters.bytes += len(data)
        msg = _Message(self._rank, tag, data, counters.depth + 1, sync)
        mailbox = self._ctx.mailboxes[dest]
        req = mailbox.match_posted(self._rank, tag) if mailbox.posted else None
        if req is not None:
            self._world._deliver(req, msg)
            return
        mailbox.add_unexpected(msg)
        self._world._notify(dest)

    def send(self, obj, dest: int, tag: int = 0) -> None:
        """Eager standard-mode send of a Python object."""
        self._post_send(obj, dest, tag, None)

    def isend(self, obj, dest: int, tag: int = 0) -> Request:
        """Nonblocking send (complete at once: eager)."""
        self._post_send(obj, dest, tag, None)
        return _SENT

    def ssend(self, obj, dest: int, tag: int = 0) -> None:
        """Synchronous send: returns when the receiver has matched it."""
        self.issend(obj, dest, tag).wait()

    def issend(self, obj, dest: int, tag: int = 0) -> Request:
        """Nonblocking synchronous send: completes when matched."""
        req = Request(self, "ssend", dest, tag)
        self._post_send(obj, dest, tag, req)
        return req

    def irecv(self, buf=None, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> Request:
        """Nonblocking receive; ``wait`` returns the object."""
        self._check_peer(source, "source", True)
        self._check_tag(tag, True)
        req = Request(self, "recv", source, tag)
        if source == PROC_NULL:
            req.complete = True
            req.tag = ANY_TAG
            return req
        mailbox = self._ctx.mailboxes[self._rank]
        msg = mailbox.find(source, tag, True)
        if msg is not None:
            self._world._deliver(req, msg)
            return req
        mailbox.post(req)
        return req

    def recv(self, buf=None, source: int = ANY_SOURCE, tag: int = ANY_TAG, status=None):
        """Blocking receive of a Python object."""
        if type(source) is int and source >= 0 and type(tag) is int and tag >= 0:
            # fast path of a receive naming both, when its message has arrived: no request
            # (a message exists only for a valid envelope; otherwise irecv checks and raises)
            msg = self._ctx.mailboxes[self._rank].find(source, tag, True)
            if msg is not None:
                self._world._matched(msg)
                if status is not None:
                    status.Set_source(msg.source)
                    status.Set_tag(msg.tag)
                return _unpack(self._state.counters, msg)
        return self.irecv(buf, source, tag).wait(status)

    def sendrecv(self, sendobj, dest: int, sendtag: int = 0, recvbuf=None,
                 source: int = ANY_SOURCE, recvtag: int = ANY_TAG, status=None):
        """Send and receive in one call."""
        req = self.irecv(recvbuf, source, recvtag)
        self.send(sendobj, dest, sendtag)
        return req.wait(status)

    def _find(self, source, tag):
        return self._ctx.mailboxes[self._rank].find(source, tag, False)

    def iprobe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status=None) -> bool:
        """Whether a matching message can be received now (fills ``status``)."""
        self._check_peer(source, "source", True)
        self._check_tag(tag, True)
        if source == PROC_NULL:
            msg = _Message(PROC_NULL, ANY_TAG, b"", 0)
        else:
            msg = self._find(source, tag)
            if msg is None:
                self._poll()
                msg = self._find(source, tag)
        if msg is None:
            return False
        if status is not None:
            status.Set_source(msg.source)
            status.Set_tag(msg.tag)
        return True

    def probe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status=None) -> bool:
        """Block until a matching message can be received (fills ``status``)."""
        if not self.iprobe(source, tag, status):
            on = None if source == ANY_SOURCE else frozenset([source])
            self._block(lambda: self._find(source, tag) is not None,
                        _Waiting(f"probe(source={_src(source)}, tag={_tag(tag)}) on comm {self._ctx.cid}", on))
            msg = self._find(source, tag)
            if status is not None:
                status.Set_source(msg.source)
                status.Set_tag(msg.tag)
        return True

    # -- collectives -----------------------------------------------------------------
    def _enter(self, kind: str, contribution, root=None, nbytes: int = 0) -> _Slot:
        ctx = self._ctx
        n = self._world.size
        if root is not None:
            self._check_peer(root, "root", False)
        seq = ctx.coll_calls[self._rank]
        ctx.coll_calls[self._rank] += 1
        slot = ctx.slots.get(seq)
        if slot is None:
            slot = ctx.slots[seq] = _Slot(kind, root, n)
        elif slot.kind != kind or slot.root != root:
            first = next(r for r in range(n) if slot.data[r] is not None or r == self._rank)
            raise SimulationError(
                f"collective mismatch on comm {ctx.cid}, call #{seq}: rank {self._rank} calls "
                f"{kind}(root={root}) but rank {first} called {slot.kind}(root={slot.root})")
        counters = self._state.counters
        counters.collectives += 1
        counters.collective_bytes += nbytes
        slot.data[self._rank] = (contribution,)
        slot.stamp = max(slot.stamp, counters.depth)
        slot.arrived += 1
        self._world._polls = 0
        if slot.arrived == n:
            slot.done = True
            slot.stamp += 1
            del ctx.slots[seq]
            for req in slot.requests:
                req.complete = True
            for r in range(n):
                if r != self._rank:
                    self._world._notify(r)
        return slot

    def _collect(self, slot: _Slot) -> None:
        counters = self._state.counters
        counters.depth = max(counters.depth, slot.stamp)

    def _slot_waiting(self, slot: _Slot) -> _Waiting:
        missing = frozenset(r for r in range(self._world.size) if slot.data[r] is None)
        shown = sorted(missing)[:8]
        more = f" and {len(missing) - 8} more" if len(missing) > 8 else ""
        return _Waiting(f"{slot.kind} on comm {self._ctx.cid}: ranks {shown}{more} have not called it", missing)

    def _collective(self, kind: str, contribution, root=None, nbytes: int = 0) -> _Slot:
        slot = self._enter(kind, contribution, root, nbytes)
        if not slot.done:
            self._block(lambda: slot.done, _LazyWaiting(lambda: self._slot_waiting(slot)))
        self._collect(slot)
        return slot

    def _shared(self, slot: _Slot, make: Callable):
        """A value computed once per collective; copied per rank unless immutable."""
        if slot.shared is None:
            value = make()
            slot.shared = (value, True) if _immutable(value) else (_dumps(value), False)
        value, immutable = slot.shared
        return value if immutable else pickle.loads(value)

    def _contrib(self, slot: _Slot, r: int):
        return slot.data[r][0]

    def barrier(self) -> None:
        """Wait until every rank has called barrier."""
        self._collective("barrier", None)

    Barrier = barrier

    def ibarrier(self) -> Request:
        """Nonblocking barrier."""
        slot = self._enter("ibarrier", None)
        req = Request(self, "collective")
        req.slot = slot
        req.complete = slot.done
        slot.requests.append(req)
        return req

    def bcast(self, obj, root: int = 0):
        """Broadcast ``obj`` from ``root``."""
        data = _dumps(obj) if self._rank == root else None
        slot = self._collective("bcast", data, root, len(data) if data is not None else 0)
        return pickle.loads(self._contrib(slot, root))

    def _gather_values(self, slot: _Slot) -> list:
        if slot.extra is None:
            slot.extra = [pickle.loads(self._contrib(slot, r)) for r in range(self._world.size)]
        return slot.extra

    def allreduce(self, sendobj, op=MPI.SUM):
        """Reduce in rank order with an mpi4py ``Op`` (or any binary callable); all get the result."""
        data = _dumps(sendobj)
        slot = self._collective("allreduce", data, None, len(data))
        return self._shared(slot, lambda: _reduce(self._gather_values(slot), op))

    def reduce(self, sendobj, op=MPI.SUM, root: int = 0):
        """Reduce in rank order to ``root`` (others get None)."""
        data = _dumps(sendobj)
        slot = self._collective("reduce", data, root, len(data))
        return self._shared(slot, lambda: _reduce(self._gather_values(slot), op)) if self._rank == root else None

    def exscan(self, sendobj, op=MPI.SUM):
        """Reduce the objects of the lower ranks in rank order (rank 0 gets None, as in mpi4py)."""
        data = _dumps(sendobj)
        slot = self._collective("exscan", data, None, len(data))
        if self._rank == 0:
            return None
        return pickle.loads(_dumps(_reduce(self._gather_values(slot)[:self._rank], op)))

    def allgather(self, sendobj) -> list:
        """Every rank's object, in rank order."""
        data = _dumps(sendobj)
        slot = self._collective("allgather", data, None, len(data))
        return list(self._shared(slot, lambda: tuple(self._gather_values(slot))))

    def gather(self, sendobj, root: int = 0):
        """Every rank's object at ``root`` (others get None)."""
        data = _dumps(sendobj)
        slot = self._collective("gather", data, root, len(data))
        return [pickle.loads(self._contrib(slot, r)) for r in range(self._world.size)] if self._rank == root else None

    def scatter(self, sendobj, root: int = 0):
        """Item ``r`` of root's sequence to rank ``r``."""
        data = None
        if self._rank == root:
            if len(sendobj) != self._world.size:
                raise SimulationError(f"scatter: expected {self._world.size} items, got {len(sendobj)}")
            data = [_dumps(x) for x in sendobj]
        slot = self._collective("scatter", data, root, sum(map(len, data)) if data else 0)
        return pickle.loads(self._contrib(slot, root)[self._rank])

    def alltoall(self, sendobj) -> list:
        """Item ``j`` of rank ``i``'s sequence goes to rank ``j``."""
        n = self._world.size
        if len(sendobj) != n:
            raise SimulationError(f"alltoall: expected {n} items, got {len(sendobj)}")
        data = [_dumps(x) for x in sendobj]
        slot = self._collective("alltoall", data, None, sum(map(len, data)))
        me = self._rank
        return [pickle.loads(self._contrib(slot, r)[me]) for r in range(n)]

    def neighbor_allgather(self, sendobj) -> list:
        """The object of every source, in source order (None for ``PROC_NULL``)."""
        topo = self._topo()
        data = _dumps(sendobj)
        real = sum(1 for d in topo.destinations if d != PROC_NULL)
        slot = self._collective("neighbor_allgather", data, None, len(data) * real)
        return [None if s == PROC_NULL else pickle.loads(self._contrib(slot, s)) for s in topo.sources]

    def neighbor_alltoall(self, sendobj) -> list:
        """Item ``k`` goes along out-edge ``k``; one object per in-edge, in source order."""
        topo = self._topo()
        if len(sendobj) != topo.outdegree:
            raise SimulationError(f"neighbor_alltoall: expected {topo.outdegree} items, got {len(sendobj)}")
        data = [None if d == PROC_NULL else _dumps(x) for d, x in zip(topo.destinations, sendobj)]
        slot = self._collective("neighbor_alltoall", data, None, sum(len(x) for x in data if x is not None))
        me = self._rank
        out = []
        for s, label in zip(topo.sources, topo.in_labels):
            if s == PROC_NULL:
                out.append(None)
                continue
            k = self._ctx.out_index(s).get((me, label))
            if k is None:
                raise SimulationError(f"neighbor_alltoall: rank {me} lists source {s}, "
                                      "which has no matching edge to it")
            out.append(pickle.loads(self._contrib(slot, s)[k]))
        return out


def _reduce(values: list, op):
    result = values[0]
    for value in values[1:]:
        result = op(result, value)
    return result


class World:
    """N virtual ranks; :meth:`run` drives a function on all of them."""

    def __init__(self, size: int, topologies=None):
        size = positive_integer(size, "size")
        if topologies is not None:
            topologies = list(topologies)
            if len(topologies) != size:
                raise ValueError(f"topologies: expected {size}, got {len(topologies)}")
        self.size = size
        self._ranks = [_RankState(r) for r in range(size)]
        self._contexts = {0: _Context(self, 0, topologies)}
        self._ready: deque = deque()
        self._driver = None
        self._polls = 0
        self.seconds = 0.0

    @property
    def counters(self) -> list:
        """Per-rank :class:`Counters`."""
        return [s.counters for s in self._ranks]

    def comm(self, rank: int) -> VirtualComm:
        """Rank ``rank``'s communicator on the world context."""
        return VirtualComm(self, self._contexts[0], rank)

    def _notify(self, rank: int) -> None:
        state = self._ranks[rank]
        if state.waiting is not None and not state.queued:
            state.queued = True
            self._ready.append(rank)

    def _deliver(self, req: Request, msg: _Message) -> None:
        self._matched(msg)
        req.message = msg
        req.complete = True
        self._notify(req.comm._rank)

    def _matched(self, msg: _Message) -> None:
        """A receive took ``msg``: progress was made, and an issend of it completes."""
        self._polls = 0
        if msg.sync is not None:
            msg.sync.complete = True
            self._notify(msg.sync.comm._rank)

    def _switch_to(self, state: _RankState, *args):
        try:
            return state.glet.switch(*args)
        except BaseException as exc:  # noqa: BLE001 - re-raised with the rank
            raise RankError(state.rank, exc) from exc

    def run(self, fn: Callable, *args) -> list:
        """Call ``fn(comm, *args)`` on every virtual rank; return the per-rank results."""
        start = time.perf_counter()
        self._driver = getcurrent()
        thresholds = gc.get_threshold()
        gc.set_threshold(max(thresholds[0], GC_THRESHOLD), *thresholds[1:])
        try:
            return self._run(fn, args, start)
        finally:
            gc.set_threshold(*thresholds)

    def _run(self, fn: Callable, args: tuple, start: float) -> list:
        for state in self._ranks:
            comm = self.comm(state.rank)

            def body(comm=comm, state=state):
                state.result = fn(comm, *args)
                state.done = True
                self._polls = 0

            state.glet = greenlet(body)
            state.done = False
            self._polls = 0
            self._switch_to(state)
            self._drain()
        self._drain()
        unfinished = [s for s in self._ranks if not s.done]
        if unfinished:
            raise self._deadlock(unfinished)
        results = [s.result for s in self._ranks]
        for state in self._ranks:
            state.glet = None
            state.result = None
        self.seconds += time.perf_counter() - start
        return results

    def _drain(self) -> None:
        while self._ready:
            if self._polls > 2 * len(self._ready) + 2 and all(
                    self._ranks[r].waiting is not None and self._ranks[r].waiting.on is None
                    and self._ranks[r].waiting.description.startswith("a polling") for r in self._ready):
                return  # only polling ranks remain and none made progress: a livelock
            rank = self._ready.popleft()
            state = self._ranks[rank]
            state.queued = False
            if state.glet is not None and not state.done:
                self._switch_to(state)

    def _deadlock(self, unfinished) -> DeadlockError:
        waits = {}
        for state in unfinished:
            waiting = state.waiting or _Waiting("(not started)", None)
            waits[state.rank] = (waiting.description, waiting.on)
        lines = []
        for rank, (description, on) in list(waits.items())[:32]:
            target = "any rank" if on is None else "ranks " + ", ".join(map(str, sorted(on)[:8])) + (
                " ..." if len(on) > 8 else "")
            lines.append(f"  rank {rank} waits in {description} -> waits on {target}")
        if len(waits) > 32:
            lines.append(f"  ... and {len(waits) - 32} more ranks")
        cycle = _find_cycle({r: on for r, (_, on) in waits.items()})
        head = f"deadlock: {len(waits)} of {self.size} virtual ranks wait and no message can be delivered"
        if cycle:
            head += "; cycle " + " -> ".join(map(str, cycle + [cycle[0]]))
        return DeadlockError(head + "\n" + "\n".join(lines), waits)


def _find_cycle(on: dict) -> list:
    """A cycle in the waits-on graph restricted to single-rank waits (empty if none)."""
    graph = {r: next(iter(t)) for r, t in on.items() if t is not None and len(t) == 1}
    for start in graph:
        seen, r = [], start
        while r in graph and r not in seen:
            seen.append(r)
            r = graph[r]
        if r in seen:
            return seen[seen.index(r):]
    return []
