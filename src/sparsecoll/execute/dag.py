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
  absolute addresses, created once; the final local copies (receive blocks filled from
  an item that arrived once) are messages to self in a last stage after the DAG, as in the
  step executor: run inside the DAG, on the arrival they read, they made every run with
  copies a dynamic one, which measured 2-5x slower on this oversubscribed machine;
* edges are the Pattern's dependency form (:func:`sparsecoll.pattern.dependencies`, carried
  by the Schedule): a send waits for the receives that brought the items it forwards and
  for the sends a transformation ordered before it (schedule coloring);
* every receive is a root: bind gives every arrival its own location (a receive block or
  a slot of temporary space) and nothing is written twice, so all receives are posted at
  the start, in step order;
* MPI matches messages between two ranks in the order they are posted (non-overtaking),
  so a send also waits until the previous send to the same peer has *started*: the n-th
  message to a peer still meets the n-th receive its peer posted for this rank. Sends
  released together are started by one ``Startall`` in that order, as the step executor
  starts a step (MPI-4.1 section 3.9 lets ``Startall`` start its array "in some arbitrary
  order"; MPICH and Open MPI start it in array order, which both executors rely on for
  several messages to one peer).

A run of the executor is one :class:`DagRun` (the executor's single stage); the progress
engine (:mod:`sparsecoll.runtime.progress`) drives it with ``Testsome``/``Waitsome`` over
its active queue, and tells it about a request of its queue that a ``Waitany`` over several
collectives completed.
"""

from __future__ import annotations

from mpi4py import MPI

from ..bind import Schedule
from ..pattern import RECV, SEND
from .p2p import (
    copy_requests,
    free_executor,
    message_buffer,
    message_bytes,
    recv_init,
    send_init,
    wire_counts,
    wire_runs,
)
from .waiting import waitsome

_Startall = MPI.Prequest.Startall
_Testsome = MPI.Request.Testsome
_Testall = MPI.Request.Testall
_Waitall = MPI.Request.Waitall


class DagRun:
    """The active queue over one executor's requests: ``start``, ``test``, ``wait``, ``completed``.

    Requests ``0 .. receives-1`` are the receives (started together at ``start``); the rest
    are sends, each started when ``waiting[k]`` of its own reaches 0: one count per
    dependency, plus one for the previous send to the same peer (released when that one
    starts, through ``successor``).

    Only a completion that releases a send needs to be seen as it happens: requests with
    dependents are *watched* (``Testsome``/``Waitsome``); the others only have to be complete
    by the end (one ``Testall``/``Waitall``), so a run waits about once per dependency level,
    as the step executor waits once per step. Once nothing is watched every send has
    started (an unstarted send waits, directly or through its same-peer predecessors, for
    a watched request in flight).
    """

    __slots__ = ("requests", "receives", "waiting", "dependents", "successor", "roots", "watched",
                 "watch", "watch_ids", "rest", "started", "_counts", "_watched_receives", "_other_receives")

    def __init__(self, requests, receives: int, waiting, dependents, successor):
        self.requests = requests
        self.receives = receives
        self.waiting = waiting        # per request: what a send waits for before it may start (receives: 0)
        self.dependents = dependents  # per request: the sends its completion releases
        self.successor = successor    # per request: the next send to the same peer, or -1
        # sends with nothing to wait for; none has an earlier send to its peer, so their peers differ
        self.roots = [k for k in range(receives, len(requests)) if waiting[k] == 0]
        self.watched = [bool(d) for d in dependents]
        self._watched_receives = [k for k in range(receives) if self.watched[k]]
        self._other_receives = [requests[k] for k in range(receives) if not self.watched[k]]
        self.watch = []               # watched requests in flight (the active queue) ...
        self.watch_ids = []           # ... and their indices
        self.rest = []                # started requests nothing waits for
        self.started = 0              # requests started in the current run
        self._counts = None

    @property
    def handles(self) -> list:
        """The requests in flight, watched ones first (what a wait over several collectives waits on)."""
        return self.watch + self.rest

    def start(self) -> None:
        """Post every receive, then start every send with nothing to wait for."""
        self._counts = list(self.waiting)
        requests = self.requests
        self.watch_ids = list(self._watched_receives)
        self.watch = [requests[k] for k in self.watch_ids]
        self.rest = list(self._other_receives)
        self.started = self.receives
        if self.receives:
            _Startall(requests[:self.receives])
        if self.roots:
            self._start_sends(self.roots)

    def _start_sends(self, ready) -> None:
        """Start the sends ``ready`` and, right behind each, the sends to its peer that waited only
        for it to start: one ``Startall`` in that order (the order the step executor relies on
        too: MPICH and Open MPI start a ``Startall`` array in array order)."""
        counts, requests, successor, watched = self._counts, self.requests, self.successor, self.watched
        order = []
        for k in ready:
            while True:
                order.append(k)
                k = successor[k]
                if k < 0:
                    break
                counts[k] -= 1
                if counts[k] != 0:
                    break
        batch = [requests[k] for k in order]
        if len(batch) > 2:
            _Startall(batch)
        else:
            for request in batch:
                request.Start()
        self.started += len(batch)
        watch, watch_ids, rest = self.watch, self.watch_ids, self.rest
        for k, request in zip(order, batch):
            if watched[k]:
                watch.append(request)
                watch_ids.append(k)
            else:
                rest.append(request)

    def _finished(self, positions) -> None:
        """The watched requests at ``positions`` completed: release their dependents."""
        ids = self.watch_ids
        done = [ids[p] for p in positions]
        for p in sorted(positions, reverse=True):
            del self.watch[p]
            del ids[p]
        counts, dependents = self._counts, self.dependents
        ready = []  # released now; each had its same-peer predecessor started already, so their peers differ
        for k in done:
            for d in dependents[k]:
                counts[d] -= 1
                if counts[d] == 0:
                    ready.append(d)
        if ready:
            self._start_sends(ready)

    def completed(self, position: int) -> None:
        """The request at ``position`` of :attr:`handles` was completed by a wait outside this run."""
        if position < len(self.watch):
            self._finished((position,))
        # an unwatched request completed: the final Testall/Waitall sees it as complete

    def test(self) -> bool:
        """Progress the active queue without blocking; True once every message has completed."""
        while self.watch:
            positions = _Testsome(self.watch)
            if not positions:
                return False
            self._finished(positions)
        return _Testall(self.rest)

    def wait(self) -> None:
        """Block until every message has completed."""
        while self.watch:
            self._finished(waitsome(self.watch))
        _Waitall(self.rest)


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

    __slots__ = ("steps", "_datatypes", "_schedule", "_rank")

    def __init__(self, comm: MPI.Comm, schedule: Schedule, tag: int):
        self._schedule = schedule  # keeps its temporary space alive
        self._datatypes = []
        self.steps = []
        self._rank = comm.Get_rank()
        recvs, sends = [], []  # (peer, pieces, message references) per wire message
        wire_of = {}           # (kind, step, index) of a Pattern message -> (kind, wire index)
        for s, (step_sends, step_recvs) in enumerate(schedule.steps):
            for kind, messages, out in ((RECV, step_recvs, recvs), (SEND, step_sends, sends)):
                for run in wire_runs([m.peer for m in messages], [message_bytes(m.pieces) for m in messages]):
                    for i in run:
                        wire_of[(kind, s, i)] = (kind, len(out))
                    out.append((messages[run[0]].peer, tuple(p for i in run for p in messages[i].pieces),
                                [(s, i) for i in run]))
        datatypes = self._datatypes
        copies = copy_requests(comm, schedule, tag, datatypes)  # one last stage, as the step executor runs them
        if not recvs and not sends:
            self.steps = [copies] if copies else []
            return
        requests = [recv_init(comm, message_buffer(pieces, datatypes), peer, tag) for peer, pieces, _ in recvs]
        requests += [send_init(comm, message_buffer(pieces, datatypes), peer, tag) for peer, pieces, _ in sends]
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
                needs.update(index(ref) for ref in schedule.after.get(member, ()))
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
        if copies:
            self.steps.append(copies)

    def counts(self) -> dict:
        """The messages one run sends to and receives from other ranks (:func:`.p2p.wire_counts`)."""
        return wire_counts(self._schedule, self._rank)

    def free(self) -> None:
        """Release requests and datatypes (no run may be in flight; idempotent)."""
        free_executor(self)
