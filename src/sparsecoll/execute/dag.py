"""The DAG executor: every message starts as soon as the messages it depends on have completed.

T. Hoefler, T. Schneider, "Optimization Principles for Collective Neighborhood
Communications", SC12, section III-C ("Dependency Graph Communication"): each send and
receive is a vertex of a dependency graph; the scheduler puts the roots into an *active
queue*, tests the operations in it, and on every completion removes that vertex's
dependencies and starts the vertices left without any, moving through the schedule as a
wavefront. Here:

* vertices are the wire messages of a bound Schedule (small messages of one step to one
  peer joined as in the step executor, :func:`sparsecoll.execute.p2p.wire_runs`, so both
  executors put the same messages on the wire), each one persistent request over
  absolute addresses, created once; the final local copies are messages to self;
* edges are the Pattern's dependency form (:func:`sparsecoll.pattern.dependencies`, carried
  by the Schedule): a send waits for the receives that brought the items it forwards and
  for the sends a transformation ordered before it (schedule coloring);
* every receive is a root: bind gives every arrival its own location (a receive block or
  a slot of temporary space) and nothing is written twice, so all receives are posted at
  the start, in step order;
* MPI matches messages between two ranks in the order they are posted (non-overtaking),
  so a send also waits until the previous send to the same peer has *started*: the n-th
  message to a peer still meets the n-th receive its peer posted for this rank.

A run of the executor is one :class:`DagRun` (the executor's single stage); the progress
engine (:mod:`sparsecoll.runtime.progress`) drives it with ``Testsome``/``Waitsome`` over
its active queue, and tells it about a request of its queue that a ``Waitany`` over several
collectives completed.
"""

from __future__ import annotations

from mpi4py import MPI

from ..bind import Schedule
from ..pattern import RECV, SEND
from .p2p import message_buffer, message_bytes, wire_runs

_Startall = MPI.Prequest.Startall
_Testsome = MPI.Request.Testsome
_Waitsome = MPI.Request.Waitsome


class DagRun:
    """The active queue over one executor's requests: ``start``, ``test``, ``wait``, ``completed``.

    Requests ``0 .. receives-1`` are the receives (started together at ``start``); the rest
    are sends, each started when ``waiting[k]`` of its own reaches 0: one count per
    dependency, plus one for the previous send to the same peer (released when that one
    starts, through ``successor``).
    """

    __slots__ = ("requests", "receives", "waiting", "dependents", "successor", "roots",
                 "active", "active_ids", "started", "_counts", "_remaining")

    def __init__(self, requests, receives: int, waiting, dependents, successor):
        self.requests = requests
        self.receives = receives
        self.waiting = waiting        # per request: what a send waits for before it may start (receives: 0)
        self.dependents = dependents  # per request: the sends its completion releases
        self.successor = successor    # per request: the next send to the same peer, or -1
        self.roots = [k for k in range(receives, len(requests)) if waiting[k] == 0]
        self.active = []              # the requests in flight (the active queue) ...
        self.active_ids = []          # ... and their indices
        self.started = 0              # requests started in the current run
        self._counts = None
        self._remaining = 0

    @property
    def handles(self) -> list:
        """The requests in flight (what a wait over several collectives waits on)."""
        return self.active

    def start(self) -> None:
        """Post every receive, then start every send with nothing to wait for."""
        self._counts = list(self.waiting)
        self._remaining = len(self.requests)
        receives = self.requests[:self.receives]
        self.active = list(receives)
        self.active_ids = list(range(self.receives))
        self.started = self.receives
        if receives:
            _Startall(receives)
        for k in self.roots:
            self._start_send(k)

    def _start_send(self, k: int) -> None:
        counts, requests, successor = self._counts, self.requests, self.successor
        while k >= 0:
            requests[k].Start()
            self.active.append(requests[k])
            self.active_ids.append(k)
            self.started += 1
            k = successor[k]
            if k >= 0:
                counts[k] -= 1
                if counts[k] != 0:
                    return

    def _finished(self, positions) -> None:
        """The requests at ``positions`` of the active queue completed: release their dependents."""
        ids = self.active_ids
        done = [ids[p] for p in positions]
        for p in sorted(positions, reverse=True):
            del self.active[p]
            del ids[p]
        self._remaining -= len(done)
        counts, dependents = self._counts, self.dependents
        for k in done:
            for d in dependents[k]:
                counts[d] -= 1
                if counts[d] == 0:
                    self._start_send(d)

    def completed(self, position: int) -> None:
        """The request at ``position`` of :attr:`handles` was completed by a wait outside this run."""
        self._finished((position,))

    def test(self) -> bool:
        """Progress the active queue without blocking; True once every message has completed."""
        while self.active:
            positions = _Testsome(self.active)
            if not positions:
                break
            self._finished(positions)
        return self._remaining == 0

    def wait(self) -> None:
        """Block until every message has completed."""
        while self._remaining:
            positions = _Waitsome(self.active)
            self._finished(positions)

    @property
    def done(self) -> bool:
        """Whether every message of the run has completed (as far as this run has seen)."""
        return self._remaining == 0


class Executor:
    """Persistent requests for every wire message of a Schedule, run as one :class:`DagRun`.

    ``steps`` is ``[run]`` (no messages: ``[]``; no dependencies at all, as in a one-step
    schedule: ``[requests]``, receives first, a stage MPI progresses alone), the interface
    every executor offers.

    Joined small messages (one wire message) wait for the union of their members'
    dependencies. Receives are always earlier than sends and data dependencies point at
    receives, so only ordering dependencies between sends can point at a later wire
    message (when a transformation ordered sends A < B < C and A, C go to one peer and
    are joined); such an order cannot hold anyway, since A and C leave as one message, and
    it is dropped: the joined message leaves at its first member's turn.
    """

    __slots__ = ("steps", "_datatypes", "_schedule")

    def __init__(self, comm: MPI.Comm, schedule: Schedule, tag: int):
        self._schedule = schedule  # keeps its temporary space alive
        self._datatypes = []
        self.steps = []
        recvs, sends = [], []  # (peer, pieces, message references) per wire message
        wire_of = {}           # (kind, step, index) of a Pattern message -> (kind, wire index)
        for s, (step_sends, step_recvs) in enumerate(schedule.steps):
            for kind, messages, out in ((RECV, step_recvs, recvs), (SEND, step_sends, sends)):
                for run in wire_runs([m.peer for m in messages], [message_bytes(m.pieces) for m in messages]):
                    for i in run:
                        wire_of[(kind, s, i)] = (kind, len(out))
                    out.append((messages[run[0]].peer, tuple(p for i in run for p in messages[i].pieces),
                                [(s, i) for i in run]))
        me = comm.Get_rank()
        copies = []
        for n, (src, dst) in enumerate(schedule.copies):  # the final copies: messages to self, last
            recvs.append((me, (dst,), []))
            copies.append(len(sends))
            sends.append((me, (src,), [("copy", n)]))
        if not recvs and not sends:
            return
        datatypes = self._datatypes
        requests = [comm.Recv_init(message_buffer(pieces, datatypes), peer, tag) for peer, pieces, _ in recvs]
        requests += [comm.Send_init(message_buffer(pieces, datatypes), peer, tag) for peer, pieces, _ in sends]
        nrecv = len(recvs)

        def index(ref) -> int:
            kind, wire = wire_of[ref]
            return wire if kind == RECV else nrecv + wire

        waiting = [0] * len(requests)
        dependents = [[] for _ in requests]
        successor = [-1] * len(requests)
        last_to_peer = {}
        for w, (peer, _, members) in enumerate(sends):
            k = nrecv + w
            needs = set()
            for member in members:
                if member[0] == "copy":
                    ref = schedule.copy_after[member[1]]
                    refs = () if ref is None else (ref,)
                else:
                    refs = schedule.after.get(member, ())
                needs.update(index(ref) for ref in refs)
            needs = {d for d in needs if d < k}  # see the class docstring: joined messages leave together
            for d in needs:
                dependents[d].append(k)
            waiting[k] = len(needs)
            earlier = last_to_peer.get(peer)
            if earlier is not None:
                successor[earlier] = k
                waiting[k] += 1
            last_to_peer[peer] = k
        if not any(dependents):  # no send waits for anything: the whole DAG is one stage MPI runs alone
            self.steps = [requests]
        else:
            self.steps = [DagRun(requests, nrecv, waiting, dependents, successor)]

    def free(self) -> None:
        """Release requests and datatypes (no run may be in flight; idempotent)."""
        for stage in self.steps:
            for request in (stage if type(stage) is list else stage.requests):
                request.Free()
        for datatype in self._datatypes:
            datatype.Free()
        self.steps = []
        self._datatypes = []
        self._schedule = None
