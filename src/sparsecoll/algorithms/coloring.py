"""Schedule coloring: each step's sends ordered into rounds by a greedy edge coloring.

T. Hoefler, T. Schneider, "Optimization Principles for Collective Neighborhood
Communications", SC12, section II-A3 ("Communication Scheduling") and III-C1: the edges
of the communication graph are colored with the greedy heuristic of Welsh and Powell, a
color is a communication round, and the coloring adds dependencies between the send
vertices that make them execute in the order of their color. The paper's example: with
``for(i) send(i)`` every rank first sends to rank 0, then to rank 1, ..., so one receiver
takes all the traffic of a round; a proper coloring spreads every round over distinct
receivers (``send((r + i) % p)`` in the paper's Figure 3).

The graph. Per step ``s`` of a Pattern, the directed graph whose edges are the pairs
``u -> v`` with at least one message of step ``s`` (several messages of one pair form one
edge). A coloring is *proper* when no rank sends on two edges of one color and no rank
receives on two edges of one color, so in every round each rank sends at most one message
(stream) and receives at most one. The graph is bipartite (send ends, receive ends), so
``max_degree`` (the largest in- or out-degree of the step) colors are needed and suffice
(König); the greedy colorer uses at most ``2 * max_degree - 1``.

Welsh-Powell order. Edge ``e = (u, v)`` has degree ``outdeg(u) + indeg(v)`` in its step
(its line-graph degree plus 2); edges are taken by decreasing degree, ties by ``(u, v)``
ascending, and each takes the smallest color used by no earlier adjacent edge (an out-edge
of ``u`` or an in-edge of ``v``). :func:`greedy_colors` is that sequential definition (for
tests and for any one place that holds a whole graph); :func:`color` computes exactly the
same colors distributed.

The protocol (:func:`color`, collective over ``comm``; Jones-Plassmann order on the line
graph, message-driven). Every rank knows only its own edges of every step.

1. *Degrees*: one exchange with every step neighbor: a rank tells each peer its
   out-degree in the steps it sends to the peer and its in-degree in the steps it receives
   from it, so both ends of an edge know its priority.
2. *Coloring*: a rank's in-edges of a step are handled one at a time in priority order.
   When in-edge ``(u, v)`` becomes ``v``'s highest uncolored one, ``v`` sends ``u``
   ``READY`` with the colors of ``v``'s in-edges (all of higher priority, all colored). When
   out-edge ``(u, v)`` is ``u``'s highest uncolored one and ``v``'s ``READY`` has arrived,
   ``u`` gives it the smallest color taken neither by its own (higher-priority) out-edges
   nor in ``READY``, and sends ``v`` that ``COLOR``. Every step's graph is colored in the
   same run; messages carry the step.

Properness and equality with the greedy order: an edge is colored only when every
adjacent edge of higher priority is colored (it is the highest uncolored edge at both of
its ends) and while no adjacent edge of lower priority is (they wait for it), with the
smallest color free of exactly the higher-priority adjacent colors: the sequential greedy
choice, whatever the timing of the messages, so every run and every rank agree.
Termination: while edges are uncolored, the highest-priority uncolored edge of some step
is the highest at both ends, so its ``READY`` has been sent and its sender colors it on
arrival; each edge is colored once, so the loop ends after exactly two messages per edge
(plus the degree exchange: one message per neighbor pair and direction). A rank stops
when its own edges are colored; it has then sent every message its peers wait for.
*Rounds*: an edge's round is one more than the largest round of its higher-priority
adjacent edges (Jones-Plassmann rounds); ``coloring_rounds`` is the largest over all
edges, so the protocol's critical path is at most 1 + 2 * ``coloring_rounds`` message
latencies. One allreduce at the end gives every rank the global numbers below.

The transformed Pattern: each step's sends stably sorted by the color of their edge
(messages of one pair keep their order, so MPI's per-pair matching is unchanged, and the
receives are untouched), and ``Pattern.after`` chains them: a send of color ``c`` waits for
this rank's sends of the previous color it uses in that step. ``Pattern.info`` gets
``colors`` (the most colors any step uses, over all ranks: the rounds of the colored
schedule), ``max_degree`` (the largest in- or out-degree of any step, over all ranks: the
lower bound on ``colors``), ``coloring_rounds`` (over all ranks) and ``coloring_messages``
(protocol messages this rank sent).
"""

from __future__ import annotations

from collections import defaultdict, deque

from mpi4py import MPI

from .. import reductions
from ..pattern import SEND, Pattern, Step
from .protocol import ProtocolChannel, protocol_communicator

TAG_DEGREE, TAG_COLOR = 1, 2
READY, COLOR = 0, 1

#: The option that asks for the transformation (an option of every algorithm that builds a Pattern).
OPTION = "coloring"


def check_coloring(value) -> bool:
    """Validate the ``coloring`` option: a bool."""
    if not isinstance(value, bool):
        raise TypeError(f"coloring: expected a bool, got {type(value).__name__}")
    return value


def step_edges(pattern: Pattern) -> tuple:
    """``(out, in)``: per step, the distinct receivers of this rank's sends and the distinct
    senders of its receives, each in order of first appearance."""
    out = tuple(tuple(dict.fromkeys(m.peer for m in step.sends)) for step in pattern.steps)
    into = tuple(tuple(dict.fromkeys(m.peer for m in step.recvs)) for step in pattern.steps)
    return out, into


def priority(sender: int, receiver: int, outdegree: int, indegree: int) -> tuple:
    """Sort key of an edge in Welsh-Powell order: higher degree first, then ranks ascending."""
    return (-(outdegree + indegree), sender, receiver)


def smallest_free(taken: int) -> int:
    """The smallest color whose bit is not set in the bitmask ``taken``."""
    free = ~taken & (taken + 1)
    return free.bit_length() - 1


def greedy_colors(edges) -> dict:
    """Sequential Welsh-Powell coloring of one step's edges ``[(sender, receiver), ...]``:
    ``{edge: color}`` (the result :func:`color` computes distributed)."""
    edges = list(dict.fromkeys(edges))
    outdeg, indeg = defaultdict(int), defaultdict(int)
    for u, v in edges:
        outdeg[u] += 1
        indeg[v] += 1
    sent, received = defaultdict(int), defaultdict(int)  # rank -> bitmask of colors taken
    colors = {}
    for u, v in sorted(edges, key=lambda e: priority(e[0], e[1], outdeg[e[0]], indeg[e[1]])):
        c = colors[(u, v)] = smallest_free(sent[u] | received[v])
        sent[u] |= 1 << c
        received[v] |= 1 << c
    return colors


class _EdgeColoring:
    """One rank's side of the coloring protocol over all steps of its Pattern."""

    def __init__(self, me: int, out_peers: tuple, in_peers: tuple, channel: ProtocolChannel):
        self.me, self.channel = me, channel
        self.out_peers, self.in_peers = out_peers, in_peers
        self.out_colors = {}  # (step, receiver) -> color of my out-edge
        self.in_colors = {}   # (step, sender) -> color of my in-edge
        self.rounds = 0       # the largest Jones-Plassmann round of my edges
        nsteps = len(out_peers)
        self.sent_taken = [0] * nsteps      # per step: bitmask of my out-edges' colors
        self.received_taken = [0] * nsteps  # per step: bitmask of my in-edges' colors
        self.sent_round = [0] * nsteps      # per step: largest round of my colored out-edges
        self.received_round = [0] * nsteps
        self.out_order = self.in_order = None  # per step: peers in priority order
        self.out_next = [0] * nsteps
        self.in_next = [0] * nsteps
        self.ready = {}  # (step, receiver) -> (taken bitmask, round) from its READY
        self.local = deque()  # messages to myself (self loops), delivered without MPI

    def exchange_degrees(self) -> None:
        """Step 1: learn the other end's degree of every edge; order the edges by priority."""
        outgoing = defaultdict(lambda: ([], []))
        for s, (outs, ins) in enumerate(zip(self.out_peers, self.in_peers)):
            for v in outs:
                outgoing[v][0].append((s, len(outs)))
            for u in ins:
                outgoing[u][1].append((s, len(ins)))
        me = self.me
        mine = outgoing.pop(me, None)
        received = self.channel.exchange(dict(outgoing), list(outgoing), TAG_DEGREE)
        if mine is not None:
            received[me] = mine
        indegree_at, outdegree_at = {}, {}  # (step, peer) -> the peer's degree
        for peer, (peer_out, peer_in) in received.items():
            for s, degree in peer_out:
                outdegree_at[(s, peer)] = degree
            for s, degree in peer_in:
                indegree_at[(s, peer)] = degree
        self.out_order, self.in_order = [], []
        for s, (outs, ins) in enumerate(zip(self.out_peers, self.in_peers)):
            out_keys = {v: priority(me, v, len(outs), indegree_at[(s, v)]) for v in outs}
            in_keys = {u: priority(u, me, outdegree_at[(s, u)], len(ins)) for u in ins}
            self.out_order.append(sorted(outs, key=out_keys.__getitem__))
            self.in_order.append(sorted(ins, key=in_keys.__getitem__))

    def _send(self, message: tuple, peer: int) -> None:
        if peer == self.me:
            self.local.append(message)
        else:
            self.channel.send(message, peer, TAG_COLOR)

    def _announce(self, s: int) -> None:
        """Send READY for step ``s``'s highest uncolored in-edge, if any."""
        if self.in_next[s] < len(self.in_order[s]):
            sender = self.in_order[s][self.in_next[s]]
            self._send((READY, s, self.received_taken[s], self.received_round[s]), sender)

    def _color_ready(self, s: int) -> None:
        """Color step ``s``'s out-edges in priority order while the next one's READY is here."""
        order = self.out_order[s]
        while self.out_next[s] < len(order) and (s, order[self.out_next[s]]) in self.ready:
            receiver = order[self.out_next[s]]
            taken, their_round = self.ready.pop((s, receiver))
            c = smallest_free(self.sent_taken[s] | taken)
            round_ = 1 + max(self.sent_round[s], their_round)
            self.out_colors[(s, receiver)] = c
            self.sent_taken[s] |= 1 << c
            self.sent_round[s] = round_
            self.rounds = max(self.rounds, round_)
            self.out_next[s] += 1
            self._send((COLOR, s, c, round_), receiver)

    def _handle(self, message: tuple, source: int) -> None:
        kind, s, value, round_ = message
        if kind == READY:
            self.ready[(s, source)] = (value, round_)
            self._color_ready(s)
        else:
            expected = self.in_order[s][self.in_next[s]]
            if source != expected:
                raise RuntimeError(f"coloring: step {s} color from rank {source}, expected rank {expected}")
            self.in_colors[(s, source)] = value
            self.received_taken[s] |= 1 << value
            self.received_round[s] = max(self.received_round[s], round_)
            self.in_next[s] += 1
            self._announce(s)

    def run(self) -> None:
        """Step 2: color every edge of every step at this rank (returns when all are colored)."""
        for s in range(len(self.in_order)):
            self._announce(s)
        edges = sum(map(len, self.out_order)) + sum(map(len, self.in_order))
        while len(self.out_colors) + len(self.in_colors) < edges:
            if self.local:
                self._handle(self.local.popleft(), self.me)
            else:
                self._handle(*self.channel.recv(MPI.ANY_SOURCE, TAG_COLOR))
        self.channel.finish()


def _elementwise_max(a: tuple, b: tuple) -> tuple:
    """The reduction of the final allreduce: the maximum of each field."""
    return tuple(map(max, a, b))


def edge_colors(pattern: Pattern, comm) -> tuple:
    """Run the coloring protocol (collective): ``(out_colors, in_colors, info)``.

    ``out_colors[(step, receiver)]`` and ``in_colors[(step, sender)]`` are the colors of this
    rank's edges; ``info`` holds ``colors``, ``max_degree``, ``coloring_rounds`` (all three
    over every rank) and ``coloring_messages`` (this rank's).
    """
    out_peers, in_peers = step_edges(pattern)
    with protocol_communicator(comm) as private:
        coloring = _EdgeColoring(pattern.rank, out_peers, in_peers, ProtocolChannel(private))
        coloring.exchange_degrees()
        coloring.run()
        local = (
            max((c + 1 for c in coloring.out_colors.values()), default=0),
            max((max(len(outs), len(ins)) for outs, ins in zip(out_peers, in_peers)), default=0),
            coloring.rounds,
        )
        colors, max_degree, rounds = reductions.allreduce(private, local, op=_elementwise_max)
    info = {"colors": colors, "max_degree": max_degree, "coloring_rounds": rounds,
            "coloring_messages": coloring.channel.sent}
    return coloring.out_colors, coloring.in_colors, info


def color(pattern: Pattern, comm) -> Pattern:
    """The Pattern with every step's sends ordered and chained by the greedy edge coloring
    (collective over ``comm``: every rank calls it with its own Pattern of one family; the step
    graphs come from the Pattern itself). See the module docstring for the protocol and
    ``Pattern.info``.
    """
    out_colors, _, info = edge_colors(pattern, comm)
    steps, after = _ordered(pattern, out_colors)
    return Pattern(pattern.family, pattern.rank, steps, info={**pattern.info, **info}, after=after)


def _ordered(pattern: Pattern, out_colors: dict) -> tuple:
    """``(steps, after)``: sends stably sorted by color, chained color after color.

    The Pattern's own ordering dependencies are carried over with their send indices
    renumbered; one that would point forward after the reordering is an error.
    """
    steps, renumber, after = [], {}, {}
    for s, step in enumerate(pattern.steps):
        order = sorted(range(len(step.sends)), key=lambda i: out_colors[(s, step.sends[i].peer)])
        renumber.update(((s, old), new) for new, old in enumerate(order))
        steps.append(Step(tuple(step.sends[i] for i in order), step.recvs))
        previous, current, current_color = (), [], None
        for new, old in enumerate(order):
            c = out_colors[(s, step.sends[old].peer)]
            if c != current_color:
                previous, current, current_color = tuple(current), [], c
            current.append((SEND, s, new))
            if previous:
                after[(s, new)] = previous
    for (s, old), refs in pattern.after.items():
        new = renumber[(s, old)]
        moved = []
        for kind, rs, ri in refs:
            if kind == SEND:
                ri = renumber[(rs, ri)]
                if (rs, ri) >= (s, new):
                    raise ValueError(f"pattern: send {old} of step {s} depends on send {ri} of step {rs}, "
                                     f"which the coloring orders after it")
            moved.append((kind, rs, ri))
        after[(s, new)] = tuple(dict.fromkeys(after.get((s, new), ()) + tuple(moved)))
    return tuple(steps), after
