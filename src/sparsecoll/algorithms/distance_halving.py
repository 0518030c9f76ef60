"""``distance_halving``: the topology- and load-aware distance-halving neighborhood allgather.

H. Sharifian, A. Sojoodi, A. Afsahi, "A Topology- and Load-Aware Design for Neighborhood
Allgather", 2023 (the paper in ``shared/papers/003_*``). Allgather family only.

Pattern creation (once per topology, collective over the communicator):

* **Algorithm 1** (``build_cp``): every rank halves its rank range ``h1`` until at most
  ``L`` ranks (one socket, :mod:`sparsecoll.topology.placement`) remain. In each halving
  step the lower half looks for agents in the upper half while the upper half answers as
  origins, then the roles swap. A rank that found an agent offloads its outgoing
  neighbors in ``h2`` (``O_off = O_on & h2``, ``O_on -= h2``) and hands the agent the
  descriptor ``D``: itself and every earlier origin with their outgoing neighbors in
  ``h2``; what stays in ``h1`` remains in ``O_org``. An origin's ``D`` is added to
  ``O_org``. Notifications keep ``I_on`` (who will deliver each in-neighbor's block) up
  to date.
* **Algorithms 2 and 3** (``find_agent`` / ``find_origin``): REQ / ACCEPT / DROP / EXIT
  signals received with ``ANY_SOURCE``; every pair of candidates exchanges exactly one
  signal each way, so counting signals lets every rank leave the loop.
* **Fig. 3** (matrix ``A``): rows are the candidates in ``h2``, columns this rank's
  outgoing neighbors in the half considered; ``A[i][j] = 1`` when ``O[j]`` is also an
  outgoing neighbor of ``C[i]``. Candidates are ranked by their row sums.

The collective (**Algorithm 4**) is the Pattern: in halving step ``t`` a rank sends its
main buffer (its own block and the blocks of its origins that still have targets on the
agent's side) to its agent and receives its origin's; blocks for its in-neighbors land in
the receive buffer as they arrive (bind). In the final, intra-socket step each rank sends
every destination in ``O_on`` and ``O_org`` one message with exactly the blocks it needs,
and receives one message from each rank of ``I_on``. The executor's struct datatypes
read the blocks where they lie, in place of the paper's copies into ``main_buf`` and
``buftemp``.

Readings and deviations (the pseudo-code is ambiguous or inconsistent in places):

1. The loop stops when ``h1`` holds at most ``L`` ranks (the text, §VI-B1); the
   pseudo-code's bound ``t <= ceil(log(n/L)) + 1`` would halve two more times. Ranges are
   split at ``(start + end) // 2`` (line 13), so halves may differ by one rank and two
   halves may stop after different numbers of steps; the final step is the same step on
   every rank (``halving_depth(n, L)``), earlier steps of ranks that stopped are empty.
2. Ties between candidates are broken by a key both ends of a pair compute alike
   (shared count, then closeness of the two ranks' positions in their halves, then the
   ranks): a strict order on pairs, so the heaviest open pair always completes and the
   negotiation cannot wait in a cycle (a on b, b on c, ... back to a), which orders the
   two ends disagree on (per-rank random tie-breaks) allow. Equal positions are the
   partners of the classic distance-halving exchange. Algorithm 3's tests
   ``selected_origin != -1`` (lines 31, 45) are read as ``== -1`` (no origin chosen yet),
   and each candidate gets exactly one signal from us (Algorithm 2 line 34 would send a
   second EXIT to a candidate that DROPs after our ACCEPT).
3. The main buffer carries an origin's block to the next agent only if that origin has
   outgoing neighbors on the agent's side (``D[o]`` not empty). The paper sends the
   whole buffer; blocks nobody on the far side needs would only cost bytes.
4. Notifications (line 30) go from every rank to each destination in ``h2`` it
   currently serves (its own ``O_on`` and the ``O_org`` lists) and carry the new agent or
   -1; each rank receives one from every current deliverer of its in-neighbors' blocks in
   ``h2`` (``I_on``). The paper notifies ``O`` and ``I``; with forwarding chains (Fig. 1's
   ``k``, served by ``x``, which may hand ``a``'s block on to its own agent) only the
   current deliverers know who takes over.
5. Matrix ``A`` needs every candidate's outgoing neighbors; they are obtained by one
   ``allgather`` of each rank's outgoing neighbors as a bit row (``n/8`` bytes per rank;
   the paper leaves ``calculate_A`` unspecified). A restricts to the step's halves.
6. Algorithm 4's final step (lines 21-27) sends to "each outgoing rank r in step.Oon"
   only; here a rank also sends to the destinations in its ``O_org`` lists, the
   out-neighbors of origins whose blocks it carries. Without them an origin's destination
   that is not the carrier's own out-neighbor would never get the block.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy
from mpi4py import MPI

from .. import reductions
from ..pattern import ALLGATHER, Message, Pattern, Step, gather_item
from ..topology import PROC_NULL, Topology
from ..topology.placement import check_options as check_placement_options
from ..topology.placement import resolve as resolve_placement
from .base import Algorithm
from .protocol import ProtocolChannel, protocol_communicator

# Signals of Algorithms 2 and 3.
REQ, ACCEPT, DROP, EXIT = 0, 1, 2, 3
# Candidate states.
ACTIVE, WAITING, SELECTED, INACTIVE = 0, 1, 2, 3
#: Tags per halving step: two negotiation phases, the descriptor D, notifications.
TAGS_PER_STEP = 4


def halving_depth(n: int, L: int) -> int:
    """Halving steps of the largest range: ranges of ``n`` ranks halve until ``<= L`` remain."""
    depth = 0
    while n > L:
        n = (n + 1) // 2  # the lower half [start, mid] is the larger one
        depth += 1
    return depth


def split(start: int, end: int, rank: int) -> tuple:
    """``(h1, h2, mid)``: Algorithm 1 lines 13-24 for ``rank`` in the range ``[start, end]``."""
    mid = (start + end) // 2
    if rank <= mid:
        return (start, mid), (mid + 1, end), mid
    return (mid + 1, end), (start, mid), mid


def out_bits(destinations, n: int) -> bytes:
    """A rank's outgoing neighbors as a packed bit row of length ``n``."""
    row = numpy.zeros(n, dtype=bool)
    row[list(destinations)] = True
    return numpy.packbits(row).tobytes()


def matrix_a(rows, out: numpy.ndarray, candidates: tuple, columns: tuple) -> tuple:
    """Fig. 3: ``(C, A)`` for candidate ranks in ``candidates`` and neighbors in ``columns``.

    ``rows[r]`` is rank ``r``'s :func:`out_bits`; ``out`` this rank's sorted outgoing
    neighbors. ``A[i][j]`` is True when ``O[j]`` (restricted to ``columns``) is an outgoing
    neighbor of ``C[i]``; only ranks sharing at least one neighbor are kept in ``C``.
    """
    lo, hi = columns
    cols = out[(out >= lo) & (out <= hi)]
    if cols.size == 0:
        return numpy.empty(0, dtype=numpy.int64), numpy.empty((0, 0), dtype=bool)
    first, last = candidates
    block = numpy.frombuffer(b"".join(rows[first:last + 1]), dtype=numpy.uint8).reshape(last - first + 1, -1)
    A = ((block[:, cols // 8] >> (7 - cols % 8)) & 1).astype(bool)
    keep = numpy.flatnonzero(A.any(axis=1))
    return keep + first, A[keep]


def ranked(rank: int, C: numpy.ndarray, A: numpy.ndarray, h1: tuple, h2: tuple) -> list:
    """Candidates best first: by shared neighbors (row sums of A), ties by the pair key."""
    scores = A.sum(axis=1).tolist()
    mine_lower = h1[0] < h2[0]
    lower, upper = (h1[0], h2[0]) if mine_lower else (h2[0], h1[0])

    def key(item):
        candidate, score = item
        x, y = (rank, candidate) if mine_lower else (candidate, rank)
        return (-score, abs((x - lower) - (y - upper)), x, y)

    return [c for c, _ in sorted(zip(C.tolist(), scores), key=key)]


def find_agent(channel: ProtocolChannel, tag: int, candidates: list) -> int:
    """Algorithm 2: ask candidates best first until one ACCEPTs; -1 if none does."""
    if not candidates:
        return -1
    status = dict.fromkeys(candidates, ACTIVE)
    signalled = set()  # candidates that got our REQ or EXIT
    replies = 0
    agent = selected = -1
    next_index = 0
    find_new_agent = True
    while len(signalled) + replies < 2 * len(candidates):
        if find_new_agent:
            agent = -1
            while next_index < len(candidates):
                c = candidates[next_index]
                next_index += 1
                if status[c] == ACTIVE and c not in signalled:
                    agent = c
                    break
            if agent >= 0:
                channel.send(REQ, agent, tag)
                signalled.add(agent)
            find_new_agent = False
        if len(signalled) + replies == 2 * len(candidates):
            break
        signal, sender = channel.recv(MPI.ANY_SOURCE, tag)
        replies += 1
        if signal == ACCEPT:
            if sender != agent or selected >= 0:
                raise RuntimeError(f"distance_halving: unexpected ACCEPT from rank {sender}")
            selected = sender
            status[sender] = SELECTED
            for c in candidates:
                if c not in signalled:
                    channel.send(EXIT, c, tag)
                    signalled.add(c)
        elif signal == DROP:
            status[sender] = INACTIVE
            if sender == agent and selected < 0:
                find_new_agent = True
            elif sender not in signalled:
                channel.send(EXIT, sender, tag)
                signalled.add(sender)
        else:
            raise RuntimeError(f"distance_halving: find_agent got signal {signal} from rank {sender}")
    return selected


def find_origin(channel: ProtocolChannel, tag: int, candidates: list) -> int:
    """Algorithm 3: ACCEPT the best origin once it has asked, DROP every other; -1 if none."""
    if not candidates:
        return -1
    status = dict.fromkeys(candidates, ACTIVE)
    answered = set()  # origins that got our ACCEPT or DROP
    heard = 0
    selected = -1
    best = 0  # index of the best origin that is still ACTIVE or WAITING
    while len(answered) + heard < 2 * len(candidates):
        if selected < 0:
            while best < len(candidates) and status[candidates[best]] == INACTIVE:
                best += 1
            if best < len(candidates) and status[candidates[best]] == WAITING:
                selected = candidates[best]
                status[selected] = SELECTED
                channel.send(ACCEPT, selected, tag)
                answered.add(selected)
                for o in candidates:
                    if o not in answered:
                        channel.send(DROP, o, tag)
                        answered.add(o)
        if len(answered) + heard == 2 * len(candidates):
            break
        signal, sender = channel.recv(MPI.ANY_SOURCE, tag)
        heard += 1
        if selected >= 0:
            continue  # every origin was answered when we selected
        if signal == REQ:
            status[sender] = WAITING
        elif signal == EXIT:
            status[sender] = INACTIVE
            if sender not in answered:
                channel.send(DROP, sender, tag)
                answered.add(sender)
        else:
            raise RuntimeError(f"distance_halving: find_origin got signal {signal} from rank {sender}")
    return selected


@dataclass
class HalvingStep:
    """One halving step of one rank: its agent and origin (-1: none) and the blocks moved."""

    agent: int
    origin: int
    sent: tuple = ()      # origins whose blocks go to the agent (the main buffer)
    received: tuple = ()  # origins whose blocks come from the origin


@dataclass
class HalvingPlan:
    """What Algorithm 1 leaves one rank with (the ``cp`` of the paper)."""

    rank: int
    steps: list
    O_on: set
    O_org: dict                 # origin -> destinations this rank delivers its block to
    I_on: dict                  # deliverer -> in-neighbors whose blocks it delivers here
    protocol_messages: int = 0
    info: dict = field(default_factory=dict)

    def final_sends(self) -> dict:
        """Destination -> blocks of the intra-socket step (ascending origin order)."""
        out: dict = {}
        for r in self.O_on:
            out.setdefault(r, []).append(self.rank)
        for o, targets in self.O_org.items():
            for r in targets:
                out.setdefault(r, []).append(o)
        return {r: sorted(items) for r, items in out.items()}


def build_cp(topology: Topology, comm, L: int) -> HalvingPlan:
    """Algorithm 1 with Algorithms 2 and 3 (collective over ``comm``)."""
    n, p = comm.Get_size(), comm.Get_rank()
    O = sorted({d for d in topology.destinations if d != PROC_NULL and d != p})  # noqa: E741 (the paper's O)
    I = sorted({s for s in topology.sources if s != PROC_NULL and s != p})  # noqa: E741 (the paper's I)
    rows = comm.allgather(out_bits(O, n)) if n > L else None  # calculate_A's input
    out = numpy.asarray(O, dtype=numpy.int64)
    halving = _Halving(p, O, I, ProtocolChannel(comm))
    start, end = 0, n - 1
    while end - start + 1 > L:
        h1, h2, _ = split(start, end, p)
        tag = TAGS_PER_STEP * len(halving.steps)
        agents = ranked(p, *matrix_a(rows, out, h2, h2), h1, h2)
        origins = ranked(p, *matrix_a(rows, out, h2, h1), h1, h2)
        if h1[0] < h2[0]:  # lower half: find agents first
            agent = find_agent(halving.channel, tag, agents)
            origin = find_origin(halving.channel, tag + 1, origins)
        else:
            origin = find_origin(halving.channel, tag, origins)
            agent = find_agent(halving.channel, tag + 1, agents)
        halving.step(agent, origin, h2, tag)
        start, end = h1
    halving.I_on.pop(p, None)  # blocks that reached this rank during the halving
    return HalvingPlan(p, halving.steps, halving.O_on, halving.O_org, halving.I_on, halving.channel.sent)


class _Halving:
    """One rank's bookkeeping across the halving steps of Algorithm 1: ``O_on`` (destinations
    it still serves itself), ``O_org`` (blocks of other origins it now carries, with their
    destinations), ``I_on`` (for each rank that will deliver to it, the origins it brings)."""

    def __init__(self, p: int, O, I, channel: ProtocolChannel):  # noqa: E741 (the paper's O and I)
        self.p = p
        self.channel = channel
        self.O_on = set(O)
        self.O_org: dict = {}
        self.I_on: dict = {s: {s} for s in I}
        self.steps: list = []

    def step(self, agent: int, origin: int, h2: tuple, tag: int) -> None:
        """One halving step once the agent and origin are known (the far half is ``h2``)."""
        def far(r):
            return h2[0] <= r <= h2[1]

        self._announce(agent, far, tag + 3)
        step = HalvingStep(agent, origin)
        if agent >= 0:
            step.sent = self._hand_over(agent, far, tag + 2)
        self._follow_deliverers(far, tag + 3)
        if origin >= 0:
            step.received = self._take_over(origin, tag + 2)
        self.channel.finish()
        self.steps.append(step)

    def _announce(self, agent: int, far, tag: int) -> None:
        """Tell every destination in the far half that this rank serves who delivers from now on."""
        served = {r for r in self.O_on if far(r)}
        for targets in self.O_org.values():
            served.update(r for r in targets if far(r))
        for r in sorted(served):
            self.channel.send(agent, r, tag)

    def _hand_over(self, agent: int, far, tag: int) -> tuple:
        """Send the agent every block bound for the far half (mine and those I carry); their origins."""
        O_off = {r for r in self.O_on if far(r)}
        self.O_on -= O_off
        D = {self.p: sorted(O_off)}
        for o in list(self.O_org):
            list1 = {r for r in self.O_org[o] if far(r)}
            if list1:
                D[o] = sorted(list1)
                self.O_org[o] -= list1
                if not self.O_org[o]:
                    del self.O_org[o]
        self.channel.send(D, agent, tag)
        return tuple(D)

    def _follow_deliverers(self, far, tag: int) -> None:
        """Learn, from each far deliverer, the agent that delivers its origins to me from now on."""
        for deliverer in sorted(d for d in self.I_on if far(d)):
            new, _ = self.channel.recv(deliverer, tag)
            if new >= 0:
                self.I_on.setdefault(new, set()).update(self.I_on.pop(deliverer))

    def _take_over(self, origin: int, tag: int) -> tuple:
        """Receive the blocks my origin hands over (this rank is its agent); their origins."""
        D_in, _ = self.channel.recv(origin, tag)
        for o, targets in D_in.items():
            if o in self.O_org:
                raise RuntimeError(f"distance_halving: rank {self.p} received the block of {o} twice")
            rest = set(targets) - {self.p}
            if rest:
                self.O_org[o] = rest
        return tuple(D_in)


def pattern_of(plan: HalvingPlan, depth: int) -> Pattern:
    """Algorithm 4 as a Pattern: the halving steps, empty steps up to ``depth``, the final step."""
    steps = []
    for s in plan.steps:
        sends = (Message(s.agent, tuple(gather_item(o) for o in s.sent)),) if s.sent else ()
        recvs = (Message(s.origin, tuple(gather_item(o) for o in s.received)),) if s.received else ()
        steps.append(Step(sends, recvs))
    steps.extend(Step() for _ in range(depth - len(plan.steps)))
    sends = tuple(Message(r, tuple(gather_item(o) for o in items))
                  for r, items in sorted(plan.final_sends().items()))
    recvs = tuple(Message(d, tuple(gather_item(o) for o in sorted(items)))
                  for d, items in sorted(plan.I_on.items()))
    steps.append(Step(sends, recvs))
    return Pattern(ALLGATHER, plan.rank, tuple(steps), plan.info)


def build(topology: Topology, comm, options: dict, family: str) -> Pattern:
    """Registry entry point: placement, Algorithm 1 on a duplicate of ``comm``, Algorithm 4."""
    if family != ALLGATHER:
        raise NotImplementedError("distance_halving implements the allgather family only")
    placement = resolve_placement(comm, options.get("ranks_per_socket"), options.get("sockets_per_node"))
    L = placement.ranks_per_socket
    with protocol_communicator(comm) as protocol:
        plan = build_cp(topology, protocol, L)
        found = sum(1 for s in plan.steps if s.agent >= 0)
        with_agent = reductions.allreduce(protocol, 1 if found else 0)
    plan.info.update(placement.describe())
    plan.info.update({
        "halving_steps": len(plan.steps),
        "agents_found": found,
        "origins_found": sum(1 for s in plan.steps if s.origin >= 0),
        "ranks_with_agent": with_agent,
        "degenerate": with_agent == 0,
        "agents": tuple(s.agent for s in plan.steps),
        "origins": tuple(s.origin for s in plan.steps),
        "protocol_messages": plan.protocol_messages,
    })
    return pattern_of(plan, halving_depth(comm.Get_size(), L))


def check_options(options: dict, size: int) -> dict:
    """Registry hook: the placement options must fit a communicator of ``size`` ranks."""
    check_placement_options(size, options.get("ranks_per_socket"), options.get("sockets_per_node"))
    return options


ALGORITHM = Algorithm(
    name="distance_halving",
    summary="topology- and load-aware distance halving with agents (allgather family)",
    families=(ALLGATHER,),
    build=build,
    paper="Sharifian, Sojoodi, Afsahi: A Topology- and Load-Aware Design for Neighborhood Allgather, "
          "2023 (Algorithms 1-4)",
    options={"ranks_per_socket": None, "sockets_per_node": None},
    check=check_options,
    builds_locally=False,
)
