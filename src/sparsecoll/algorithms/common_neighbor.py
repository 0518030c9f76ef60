"""``common_neighbor``: message combining over common neighborhoods in any distributed graph.

S. H. Mirsadeghi, J. L. Träff, P. Balaji, A. Afsahi, "Exploiting Common Neighborhoods to
Optimize MPI Neighborhood Collectives", HiPC 2017.

Phase 1 (once per topology, fully distributed: no rank ever holds more than its own
neighborhood, its friends and the in-neighbor lists of its out-neighbors):

* **Algorithm 1** (:func:`build`). Protocol *rounds*; in round ``r`` every rank that
  still has active edges

  A. refreshes the common-neighborhood matrix ``M`` (§IV-B1, IV-B3): each rank sends
     to each active in-neighbor its list of active in-neighbors (in round 0 the full
     list, with the edge labels for the alltoall family; afterwards only the ranks
     removed since), so ``M[n]`` at ``p`` lists who else still sends to ``n``
     (a sorted integer array: ``M`` holds degree^2 entries per rank);
  B. counts, from ``M``, the active out-neighbors it shares with every other rank;
     ranks sharing at least Θ (option ``theta``, default 4) are *friends*. With no
     friend left the rank is done: it notifies its active out-neighbors (``DONE``)
     and sends them its blocks directly in step ``2r``. Otherwise it pairs with one
     friend by Algorithm 2, splits the common neighbors ``CN`` consistently (sorted by
     rank, the lower rank onloads the first half, the higher rank the second, so that
     conditions 1-4 of §IV-B hold) and notifies each active out-neighbor whether it
     was onloaded, offloaded, or nothing happened;
  C. receives one notification from every active in-neighbor, records where the
     in-neighbor's blocks will arrive, and drops finished edges from its active
     in- and out-neighbor sets (§IV-B3).

  Every active edge carries exactly one ``M`` message and one notification per round,
  so neighboring ranks stay in step without any global synchronization. Every round in
  which some rank has a friend pairs at least the two ends of the heaviest friendship
  edge (Algorithm 2 pairs it in its first iteration), and a pair's common neighbors
  leave both active sets, so the number of active edges falls every such round and
  the loop ends. Finished ranks keep answering their active in-neighbors until those
  are done too (lines 28-30 of Algorithm 1).

* **Algorithm 2** (:func:`pair_friends`): Hoepman-style distributed matching on the
  friendship graph weighted by the number of common neighbors (ties broken by the
  ranks of the edge, so every edge has one key seen alike from both ends). First
  choice: the heaviest friend; later: stay with the previous choice if it is still
  open and has the higher rank; else accept an open lower-ranked friend that chose
  me; else drop the previous choice and take the heaviest remaining candidate, or
  become terminal when none is left (the printed line 14 reads "F ≠ ∅"; the text
  says a rank gives up when no friend is left to try). Two exchanges with all open friends per
  iteration: the choices, then the states (paired, terminal, open). Messages always
  go to every *open* friend (a symmetric set), while the candidates a rank still
  considers may shrink on one side only. Termination: in every iteration some rank
  pairs (the top of a chain of retries always finds a lower friend that chose it) or
  some candidate set shrinks.

Phase 2 is the Pattern itself (Algorithm 3): in round ``r``, step ``2r`` is the exchange
with the friend, step ``2r + 1`` the combined messages to the onloaded neighbors; a
done rank sends its remaining blocks directly in step ``2t`` (``t`` its last round), and
its out-neighbors learn ``t`` from the ``DONE`` notification. bind turns the Pattern
into zero-copy derived-datatype messages (the "build the combined message" and
"place" of Algorithm 3); the core binds once per ``*_init`` (persistent mode) or, with
``wrap(..., rebind=True)``, on every call (non-persistent mode).

Collective families. Allgather: the exchange carries my block to the friend, which
sends it together with its own to the neighbors it onloaded (if the friend already
holds my block because it is one of my out-neighbors served earlier, nothing is
sent). Alltoall (the extension of the paper's technical report): the exchange carries
my personalised blocks for every neighbor I offload, and the friend sends each
onloaded neighbor one message with its own block(s) and mine; ``M`` carries the edge
labels so that both friends name the forwarded items alike. In both families, if the
friend is itself one of my active out-neighbors, my blocks for it ride on the
exchange and that edge needs no message of its own. Self loops never need a message
(bind copies the block locally); repeated edges between two ranks travel in one
message (allgather: one block, filled into every receive block by local copies).
A graph in which no rank finds a friend degenerates to ``direct`` (one step of
single-block messages); ``Pattern.info["degenerate"]`` says so.

``Pattern.info``: ``theta``, ``friends`` (friends in round 0), ``friends_paired``
(friends this rank combined with), ``pairs_total`` (over all ranks), ``degenerate``,
``alg1_iterations`` (rounds in which this rank had friends), ``rounds`` (protocol rounds
this rank took part in), ``alg2_iterations`` (summed over its rounds) and
``phase1_messages`` (point-to-point messages it sent in Phase 1).
"""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy
from mpi4py import MPI

from .. import reductions
from ..checks import positive_integer
from ..pattern import ALLGATHER, Message, Pattern, Step, gather_item, personal_item
from ..topology import PROC_NULL, Topology
from .base import Algorithm
from .protocol import ProtocolChannel, protocol_communicator

DEFAULT_THETA = 4

# Phase 1 runs on its own duplicate of the library's communicator; one tag per message kind.
TAG_M, TAG_CHOICE, TAG_STATE, TAG_NOTE = 1, 2, 3, 4

# Algorithm 2 states.
OPEN, PAIRED, TERMINAL = 0, 1, 2

# Algorithm 1 notifications to active out-neighbors.
NOTHING, ONLOADED, OFFLOADED, EXCHANGED, DONE = 0, 1, 2, 3, 4


def check_theta(theta) -> int:
    """Validate the friendship threshold Θ: an integer >= 1."""
    return positive_integer(theta, "theta")


def check_options(options: dict, size: int) -> dict:
    """Registry hook: validate this algorithm's options before any message is sent."""
    return {**options, "theta": check_theta(options.get("theta", DEFAULT_THETA))}


def split_common(me: int, friend: int, common) -> tuple:
    """Split the common neighbors between two friends: ``(onloaded, offloaded)`` at ``me``.

    Sorted by rank; the lower rank of the pair keeps the first half (the larger one when
    the count is odd), the higher rank the second. Evaluated at both friends, the halves
    are disjoint, cover ``common`` and swap roles (conditions 1-4 of §IV-B).
    """
    common = sorted(common)
    half = (len(common) + 1) // 2
    first, second = tuple(common[:half]), tuple(common[half:])
    return (first, second) if me < friend else (second, first)


def edge_items(family: str, origin: int, dest: int, labels) -> tuple:
    """The items ``origin``'s edges to ``dest`` carry (allgather: one block for all of them)."""
    if family == ALLGATHER:
        return (gather_item(origin),)
    return tuple(personal_item(origin, dest, label) for label in sorted(labels))


def _edge_labels(neighbors, labels, me: int) -> dict:
    """neighbor -> labels of its edges, without ``PROC_NULL`` and self loops."""
    out = defaultdict(list)
    for peer, label in zip(neighbors, labels):
        if peer != PROC_NULL and peer != me:
            out[peer].append(label)
    return {peer: tuple(ls) for peer, ls in out.items()}


def pair_friends(messenger: ProtocolChannel, me: int, weights: dict) -> tuple:
    """Algorithm 2: pair with one friend; returns ``(friend or None, iterations)``.

    ``weights[q]`` is the number of common neighbors with friend ``q``; the friendship
    relation and the weights must be symmetric (they are when computed from ``M``). The
    result is mutual: ``p`` pairs with ``q`` in iteration ``i`` iff ``q`` pairs with ``p``
    in iteration ``i``.
    """
    if not weights:
        return None, 0

    def key(q):
        return weights[q], -min(me, q), -max(me, q)

    active = set(weights)       # open friends: whom we exchange with (symmetric)
    candidates = set(weights)   # friends we may still choose (shrinks on our side only)
    chose_me: set = set()
    previous = None
    iterations = 0
    while True:
        iterations += 1
        terminal = False
        if iterations == 1:
            choice = max(candidates, key=key)
        elif previous in active and me < previous:
            choice = previous  # retry: the previous choice is still looking
        else:
            lower = [g for g in chose_me if g < me]
            if lower:
                choice = max(lower, key=key)  # it retries me, so we pair now
            else:
                candidates.discard(previous)
                candidates &= active
                choice = max(candidates, key=key) if candidates else None
                terminal = choice is None
        previous = choice
        peers = sorted(active)
        choices = messenger.exchange(dict.fromkeys(peers, choice), peers, TAG_CHOICE)
        paired = choice is not None and choices[choice] == me
        state = PAIRED if paired else TERMINAL if terminal else OPEN
        states = messenger.exchange(dict.fromkeys(peers, state), peers, TAG_STATE)
        active = {q for q in peers if states[q] == OPEN}
        chose_me = {q for q in active if choices[q] == me}
        if paired or terminal:
            return (choice if paired else None), iterations


class _Steps:
    """Sends and receives per step index, turned into a Pattern at the end."""

    def __init__(self):
        self.sends = defaultdict(list)
        self.recvs = defaultdict(list)

    def send(self, step: int, peer: int, items) -> None:
        """Add a message ``peer`` receives in ``step`` (nothing if no items)."""
        if items:
            self.sends[step].append(Message(peer, tuple(sorted(items))))

    def recv(self, step: int, peer: int, items) -> None:
        """Add a message this rank receives from ``peer`` in ``step``."""
        if items:
            self.recvs[step].append(Message(peer, tuple(sorted(items))))

    def steps(self) -> tuple:
        """The ordered Steps (empty ones kept so that indices agree across ranks)."""
        last = max([*self.sends, *self.recvs], default=-1)
        return tuple(Step(tuple(sorted(self.sends.get(s, ()), key=lambda m: m.peer)),
                          tuple(sorted(self.recvs.get(s, ()), key=lambda m: m.peer)))
                     for s in range(last + 1))


def build(topology: Topology, comm, options: dict, family: str) -> Pattern:
    """Registry entry point: Algorithm 1 (with Algorithm 2) over ``comm``; collective."""
    theta = check_theta(options.get("theta", DEFAULT_THETA))
    with protocol_communicator(comm) as private:
        run = _Algorithm1(topology, family, theta, ProtocolChannel(private))
        while not run.done or run.in_active:
            run.refresh_m()
            covered = run.pair_and_notify() if not run.done else set()
            run.take_notes(covered)
        pairs_total = reductions.allreduce(private, run.info["friends_paired"], op=MPI.SUM) // 2
    info = run.info
    return Pattern(family, topology.rank, run.steps.steps(), info={
        "theta": theta,
        "friends": info["friends"],
        "friends_paired": info["friends_paired"],
        "pairs_total": pairs_total,
        "degenerate": pairs_total == 0,
        "alg1_iterations": info["alg1_iterations"],
        "rounds": run.round,
        "alg2_iterations": info["alg2_iterations"],
        "phase1_messages": run.channel.sent,
    })


class _Algorithm1:
    """One rank's state in Algorithm 1; each round runs :meth:`refresh_m` (A), then
    :meth:`pair_and_notify` (B) until this rank is done, then :meth:`take_notes` (C)."""

    def __init__(self, topology: Topology, family: str, theta: int, channel: ProtocolChannel):
        self.me = me = topology.rank
        self.family = family
        self.theta = theta
        self.channel = channel
        self.out_labels = _edge_labels(topology.destinations, topology.out_labels, me)
        self.in_labels = _edge_labels(topology.sources, topology.in_labels, me)
        self.steps = _Steps()
        self.out_active, self.in_active = set(self.out_labels), set(self.in_labels)
        # M: active out-neighbor n -> sorted array of the other ranks still sending to n, in the
        # smallest unsigned type that holds every rank (M holds degree^2 entries per rank, which
        # decides how many virtual ranks fit in one process)
        self.rank_type = numpy.min_scalar_type(topology.size - 1)
        self.M: dict = {}
        self.labels_to: dict = {}  # alltoall family: n -> {rank sending to n: its edge labels}
        self.kept = numpy.ones(topology.size, dtype=bool)  # scratch of an M update: False marks dropped ranks
        self.removed: list = []    # in-neighbors dropped since the last M message
        self.done = False
        self.info = Counter()
        self.round = 0

    def mine(self, n) -> tuple:
        """The items of my edges to ``n``."""
        return edge_items(self.family, self.me, n, self.out_labels[n])

    def arriving(self, q) -> tuple:
        """The items of ``q``'s edges to me."""
        return edge_items(self.family, q, self.me, self.in_labels[q])

    def refresh_m(self) -> None:
        """A: my active in-neighbors learn whom I dropped (round 0: everything; the edge
        labels only for the alltoall family, where forwarded items name them); I learn theirs."""
        if self.round == 0:
            payload = (tuple(sorted(self.in_active)) if self.family == ALLGATHER
                       else tuple(sorted((q, self.in_labels[q]) for q in self.in_active)))
        else:
            payload = tuple(self.removed)
        self.removed = []
        self.channel.post(dict.fromkeys(self.in_active, payload), TAG_M)
        if self.round == 0:
            self.M = self.channel.collect(self.out_active, TAG_M, apply=self._first_row)
            return
        M, kept = self.M, self.kept
        for n, update in self.channel.collect(self.out_active, TAG_M).items():
            if update:
                dropped = numpy.array(update, dtype=self.rank_type)
                kept[dropped] = False
                M[n] = M[n][kept[M[n]]]
                kept[dropped] = True

    def _first_row(self, n, update):
        """Round 0: the whole list of who sends to ``n``, made compact on arrival."""
        if self.family != ALLGATHER:
            self.labels_to[n] = dict(update)
            update = tuple(self.labels_to[n])
        senders = numpy.array(update, dtype=self.rank_type)
        return senders[senders != self.me]

    def pair_and_notify(self) -> set:
        """B: pair with a friend (Algorithm 2), split our common neighbors, tell every active
        out-neighbor what to expect; returns the out-neighbors this round covers."""
        weights = _friends(self.M, self.out_active, self.theta)
        if self.round == 0:
            self.info["friends"] = len(weights)
        covered = set()
        if not weights:
            self.done = True
            for n in self.out_active:
                self.steps.send(2 * self.round, n, self.mine(n))
            notes = dict.fromkeys(self.out_active, (DONE,))
            covered = set(self.out_active)
        else:
            self.info["alg1_iterations"] += 1
            friend, iterations = pair_friends(self.channel, self.me, weights)
            self.info["alg2_iterations"] += iterations
            notes = dict.fromkeys(self.out_active, (NOTHING,))
            if friend is not None:
                self.info["friends_paired"] += 1
                covered = _combine(self.me, friend, self.family, self.out_labels, self.in_labels,
                                   self.out_active, self.in_active, self.M, self.labels_to, self.round,
                                   self.steps, notes)
        self.channel.post(notes, TAG_NOTE)
        return covered

    def take_notes(self, covered: set) -> None:
        """C: the notes of my active in-neighbors become receives; drop what this round settled."""
        for q, note in self.channel.collect(self.in_active, TAG_NOTE).items():
            kind = note[0]
            if kind == NOTHING:
                continue
            if kind == ONLOADED:
                self.steps.recv(2 * self.round + 1, q, self.arriving(q) + self.arriving(note[1]))
            elif kind == DONE:
                self.steps.recv(2 * self.round, q, self.arriving(q))
            self.in_active.discard(q)
            self.removed.append(q)
        self.channel.finish()
        self.out_active -= covered
        for n in covered:
            self.M.pop(n, None)
            self.labels_to.pop(n, None)
        self.round += 1


def _friends(M: dict, out_active, theta: int) -> dict:
    """Friends from ``M``: rank -> number of active out-neighbors shared with it, if >= Θ."""
    if not out_active:
        return {}
    counts = numpy.bincount(numpy.concatenate([M[n] for n in out_active]))
    ranks = numpy.flatnonzero(counts >= theta)
    return dict(zip(ranks.tolist(), counts[ranks].tolist()))


def _combine(me, friend, family, out_labels, in_labels, out_active, in_active, M, labels_to, round_, steps,
             notes) -> set:
    """Record one combining round with ``friend`` (lines 7-18 of Algorithm 1); return the covered out-neighbors."""
    common = [n for n in out_active if numpy.any(M[n] == friend)]

    def friends_items(n):  # the items the friend's edges to n carry
        return edge_items(family, friend, n, () if family == ALLGATHER else labels_to[n][friend])

    onloaded, offloaded = split_common(me, friend, common)
    to_friend = friend in out_active      # my edge to the friend rides on the exchange
    from_friend = friend in in_active     # and the friend's edge to me
    if family == ALLGATHER:
        # one block each way; skipped when the friend already holds it (an earlier round)
        give = bool(offloaded or to_friend) and not (friend in out_labels and not to_friend)
        take = bool(onloaded or from_friend) and not (friend in in_labels and not from_friend)
        outgoing = (gather_item(me),) if give else ()
        incoming = (gather_item(friend),) if take else ()
    else:
        outgoing = [item for n in offloaded for item in edge_items(family, me, n, out_labels[n])]
        incoming = [item for n in onloaded for item in friends_items(n)]
        if to_friend:
            outgoing += edge_items(family, me, friend, out_labels[friend])
        if from_friend:
            incoming += edge_items(family, friend, me, in_labels[friend])
    steps.send(2 * round_, friend, outgoing)
    steps.recv(2 * round_, friend, incoming)
    for n in onloaded:
        steps.send(2 * round_ + 1, n, edge_items(family, me, n, out_labels[n]) + friends_items(n))
        notes[n] = (ONLOADED, friend)
    for n in offloaded:
        notes[n] = (OFFLOADED,)
    covered = set(onloaded) | set(offloaded)
    if to_friend:
        notes[friend] = (EXCHANGED,)
        covered.add(friend)
    return covered


ALGORITHM = Algorithm(
    name="common_neighbor",
    summary="message combining over common neighborhoods of friend pairs, any graph (HiPC 2017)",
    build=build,
    paper="Mirsadeghi, Träff, Balaji, Afsahi: Exploiting Common Neighborhoods to Optimize MPI "
          "Neighborhood Collectives, HiPC 2017 (Algorithms 1-3)",
    options={"theta": DEFAULT_THETA},
    check=check_options,
    builds_locally=False,
)
