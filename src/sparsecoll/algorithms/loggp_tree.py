"""``loggp_tree``: out-degree balancing by tree transformations in a simplified LogGP model.

T. Hoefler, T. Schneider, "Optimization Principles for Collective Neighborhood
Communications", SC12, section II-B1 ("Tree Transformations", Fig. 4). Both collective
families, any topology (graph, distributed graph, Cartesian). The alltoall family is for
small blocks only (the paper: forwarding costs bandwidth, which must not be the
bottleneck); the allgather family for any block size.

The paper's step. Every message costs its sender an overhead ``o``. Step 1: find the rank
``p_m`` with the most outgoing messages ``m`` and the rank ``p_s`` with the fewest ``s``.
Step 2: if ``m - s > t``, ``p_m`` moves ``X`` of its messages to ``p_s``, which forwards
them; alltoall ``X = (m+s)/2 - s - ceil(L/o)``, allgather
``X = (m-s)/2 - ceil(L/(o + (k-1)G))`` (``k`` the block size in bytes): ``p_m`` keeps
sending while its hand-off travels (``L``). Repeated, proxies may become heavy in turn,
so the result is a multi-level tree (Fig. 4: a hot spot becomes a scatter tree).

What this module builds, and where it reads the paper:

* **Units and out-degree.** Each rank's outgoing traffic is a set of *messages*, one per
  ``(dest, step)``: the items it sends to ``dest`` in ``step`` (ready then). The
  out-degree is the number of such messages. It starts as the direct pattern
  (:mod:`.direct`): one message per distinct destination in step 0 (repeated edges to one
  rank travel together; self loops need no message, bind copies them).
* **All heavy/light pairs at once** (the paper's step generalised). One pair per
  iteration needs ``O(P)`` iterations on the hot spot, where the paper reports
  ``O(log P)``; so every iteration pairs *every* heavy rank with a light one, each pair
  doing exactly the paper's Step 2 with its own degrees. One iteration:

  1. an ``allreduce`` of ``(degree, degree, moved last iteration)`` gives the maximum
     ``m``, the minimum ``s`` and whether any rank moved messages last time; stop when
     ``m - s <= t`` (the paper's criterion) or when nothing moved (then nothing ever
     will: the degrees, and with them the pairs and their ``X``, are unchanged);
  2. *heavy*: ``d - s > t`` and ``d >= (m+s)/2`` (the upper half of the range, which on
     the first iteration is exactly the paper's ``p_m``); *light*: ``d - s <= t // 2``
     (at or next to the minimum, where the paper's ``p_s`` is); the two never overlap;
  3. an ``exscan`` of ``(heavy, light)`` numbers the heavy ranks and the light ranks in
     rank order, an ``allreduce`` counts them; the ``i``-th heavy pairs with the ``i``-th
     light for ``i < min(#heavy, #light)``. Both send their rank (the light also its
     degree) to *rendezvous* rank ``i``, which introduces the light to the heavy: no rank
     ever holds more than its own degree and its partner's;
  4. the heavy rank ``h`` (degree ``m_h``) and its light partner ``l`` (degree ``s_l``)
     apply Step 2: ``X = floor((m_h - s_l)/2 - lag)`` with ``lag = ceil(L/o)`` (alltoall;
     ``(m+s)/2 - s = (m-s)/2``) or ``lag = ceil(L/(o + (k-1)G))`` (allgather). ``h`` moves
     ``X`` messages only when ``X >= 2`` (moving one gains nothing: the hand-off itself is
     one message). ``h`` always answers ``l`` with one transfer (possibly empty).

  A move strictly lowers both ends below ``m_h`` (``m_h - X + 1 < m_h`` and
  ``s_l + X < m_h``), so the sorted degree vector falls lexicographically and the loop
  ends. Three collectives and at most four point-to-point messages per pair and
  iteration, each collective ``O(log P)`` rounds (an allgather of small objects:
  :mod:`sparsecoll.reductions` says why not mpi4py's reduction).
* **Which messages move.** Never one to ``l`` itself, never a *pinned* one (one that
  carries items a proxy forwards: moving it would delay the forwarding), and never one
  carrying an item that originates at ``l`` (it would travel back through ``h``). Of the
  rest, the earliest ready first, then the highest destination first.
  *Alltoall*: any such message (so proxies may hand on what they received: several tree
  levels); ``h`` sends ``l`` ONE hand-off message with all moved items in the step the
  latest of them is ready (``hs``), merged into ``h``'s own message to ``l`` of that step
  if there is one, and ``l`` sends each moved message one step after (``hs + 1``).
  *Allgather*: ``l`` must obtain every block of a moved message exactly once (a second
  copy is an error, and ``h`` cannot know what else ``l`` receives). So a message moves
  only if each of its blocks is one that ``h`` already sends ``l`` itself (that message
  is then pinned: the paper's "no extra volume if forwarding processes are neighbors of
  the source"), or ``h``'s own block where ``l`` gets it from nobody yet (``h`` knows
  which ranks its block reaches: its destinations and its earlier such hand-offs; the
  block is added to ``h``'s message to ``l`` in step 0). ``l`` forwards one step after
  the latest of those messages. A proxy thus hands a block further only to a rank it
  already serves (a deeper tree where the pairing allows it; on the hot spot the root's
  first proxies keep what they got, the allgather trees have two levels).
* **Assembling the Pattern.** Each rank's final messages are its sends. One notification
  exchange tells each destination which ``(step, items)`` it gets: every rank sends one
  notice per destination, and receives notices with ``ANY_SOURCE`` until every item it
  expects (its in-edges' items, plus the transit items its hand-offs announced) is
  accounted for. Within a step a pair exchanges at most one message, so MPI's
  non-overtaking order is met. Forwarding is a data dependency, derived from the items
  (:func:`sparsecoll.pattern.dependencies`); items in transit live in bind's temporary
  space.

Options: ``t`` (default 2, the paper's), the LogGP latency ``L`` (s), overhead ``o`` (s,
> 0) and gap per byte ``G`` (s/byte), and ``block_bytes`` (the allgather formula's ``k``,
default 16, the paper's Fig. 9 size). The defaults of ``L``, ``o``, ``G`` are this
machine's (:data:`DEFAULT_L` and below say how they were measured); ``loggp=PATH`` takes
them from a file of ``sparsecoll calibrate --model loggp`` instead
(:func:`sparsecoll.model.params.tree_rule_loggp` says how). The options shape the
messages, so the build first checks with one allreduce that every rank passed the same
(all ranks raise ``ValueError`` otherwise).

``Pattern.info``: ``balancing_iterations`` (pairing rounds; the same on every rank),
``moved`` (messages this rank handed off), ``forwarded`` (messages handed to it, which it
sends on), ``lag`` (the ``ceil`` term of ``X``), ``t``, ``L``, ``o``, ``G``,
``block_bytes`` and ``protocol_messages`` (point-to-point messages it sent building).
"""

from __future__ import annotations

import math
import os
from collections import defaultdict

from mpi4py import MPI

from .. import reductions
from ..checks import is_integer, nonnegative_number, positive_integer
from ..pattern import ALLGATHER, Message, Pattern, Step
from ..topology import PROC_NULL, Topology
from .base import Algorithm
from .protocol import ProtocolChannel, protocol_communicator

DEFAULT_T = 2
#: LogGP defaults, from ``sparsecoll calibrate --model loggp --np 2`` on the project's 2-core
#: machine with nothing else running (MPICH 5.0.2, three runs, persistent requests as the
#: executors use): a burst costs 0.63-0.66 us per further message each way (a send and a receive
#: overhead, ``o = 0.32-0.33 us``), half a round trip of 0 bytes 0.92-0.96 us (``o + L + o``, so
#: ``L = 0.27-0.30 us``): ``ceil(L/o) = 1``. (Open MPI 5.0.11 on the same machine: ``o = 0.077 us``,
#: ``L = 0.06 us``, also ``ceil(L/o) = 1``.) :mod:`sparsecoll.model.calibrate` gives the method.
DEFAULT_L = 0.29e-6
DEFAULT_O = 0.33e-6
DEFAULT_G = 0.060e-9
#: The allgather formula's block size ``k`` (bytes): the paper's Fig. 9 size.
DEFAULT_BLOCK_BYTES = 16

#: The numbers the balancing rule reads (``Pattern.info`` reports them).
PARAMETERS = {"t": DEFAULT_T, "L": DEFAULT_L, "o": DEFAULT_O, "G": DEFAULT_G, "block_bytes": DEFAULT_BLOCK_BYTES}
#: ``loggp``: a LogGP parameter file whose ``L``, ``o``, ``G`` replace the defaults (read by ``wrap``
#: and the simulator: :func:`sparsecoll.model.params.with_loggp_file`).
OPTIONS = {**PARAMETERS, "loggp": None}

# One tag per message kind of the protocol (on its own duplicate communicator).
TAG_HEAVY, TAG_LIGHT, TAG_PARTNER, TAG_TRANSFER, TAG_NOTICE = 1, 2, 3, 4, 5


def check_options(options: dict, size: int) -> dict:
    """Registry hook: validate ``t``, ``L``, ``o``, ``G`` and ``block_bytes`` before any message is sent."""
    t = options.get("t", DEFAULT_T)
    if not is_integer(t) or t < 0:
        raise ValueError(f"t: expected a non-negative integer, got {t!r}")
    checked = {"t": int(t)}
    for name in ("L", "o", "G"):
        try:
            checked[name] = nonnegative_number(options.get(name, PARAMETERS[name]), name)
        except TypeError as error:
            raise ValueError(str(error)) from None
    if checked["o"] <= 0:
        raise ValueError(f"o: the per-message overhead must be positive, got {checked['o']!r}")
    try:
        checked["block_bytes"] = positive_integer(options.get("block_bytes", DEFAULT_BLOCK_BYTES), "block_bytes")
    except TypeError as error:
        raise ValueError(str(error)) from None
    path = options.get("loggp")
    if path is not None and not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"loggp: expected the path of a LogGP parameter file, got {type(path).__name__}")
    return {**options, **checked}


def lag(family: str, options: dict) -> int:
    """The messages a heavy rank sends while its hand-off travels: ``ceil(L/o)`` (alltoall) or
    ``ceil(L/(o + (k-1)G))`` (allgather), rounded to 9 digits first so that exact ratios stay exact."""
    per_message = options["o"]
    if family == ALLGATHER:
        per_message += (options["block_bytes"] - 1) * options["G"]
    return math.ceil(round(options["L"] / per_message, 9))


def moved_count(heavy_degree: int, light_degree: int, lag_messages: int) -> int:
    """The paper's ``X``: ``floor((m - s)/2 - lag)`` messages (0 when that is below 2)."""
    x = (heavy_degree - light_degree - 2 * lag_messages) // 2
    return x if x >= 2 else 0


def _extremes(a: tuple, b: tuple) -> tuple:
    """Reduction of ``(max degree, min degree, moved)`` triples."""
    return max(a[0], b[0]), min(a[1], b[1]), a[2] or b[2]


def _same(a, b):
    """Reduction that keeps a value all ranks share (None once two differ)."""
    return a if a == b else None


def _add(a: tuple, b: tuple) -> tuple:
    """Elementwise sum of two count tuples."""
    return tuple(x + y for x, y in zip(a, b))


class _Outgoing:
    """One rank's outgoing messages during balancing: ``(dest, step) -> items``."""

    def __init__(self, topology: Topology, family: str):
        self.me = me = topology.rank
        self.family = family
        self.messages: dict = defaultdict(list)
        self.pinned: set = set()
        for dest, item in zip(topology.destinations, topology.send_items(family)):
            if dest == PROC_NULL or dest == me:
                continue
            if item not in self.messages[(dest, 0)]:
                self.messages[(dest, 0)].append(item)
        # allgather: the ranks my block reaches (my destinations and the lights I handed it to)
        self.reached = {dest for dest, _ in self.messages}
        self.moved = 0
        self.forwarded = 0
        self.transit: set = set()

    @property
    def degree(self) -> int:
        """Out-degree: the number of distinct ``(dest, step)`` messages."""
        return len(self.messages)

    def movable(self, light: int) -> list:
        """The messages that may move to ``light``, in the order they move (module docstring)."""
        keys = [key for key, items in self.messages.items()
                if key[0] != light and key not in self.pinned and all(item[0] != light for item in items)]
        return sorted(keys, key=lambda key: (key[1], -key[0]))

    def _delivered(self, light: int, item) -> int | None:
        """The first step in which I send ``item`` to ``light`` myself (None: I do not)."""
        steps = [step for (dest, step), items in self.messages.items() if dest == light and item in items]
        return min(steps, default=None)

    def hand_off(self, light: int, count: int) -> dict:
        """Move up to ``count`` messages to ``light`` (at least 2, else none); the transfer it receives."""
        if self.family == ALLGATHER:
            return self._hand_off_blocks(light, count)
        keys = self.movable(light)[:count]
        if len(keys) < 2:
            return {"units": (), "transit": ()}
        moved = [(dest, tuple(self.messages.pop((dest, step)))) for dest, step in keys]
        self.moved += len(moved)
        step = max(s for _, s in keys)
        items = [item for _, moved_items in moved for item in moved_items]
        self.messages[(light, step)].extend(items)
        self.pinned.add((light, step))
        return {"units": tuple((dest, moved_items, step + 1) for dest, moved_items in moved),
                "transit": tuple(items)}

    def _hand_off_blocks(self, light: int, count: int) -> dict:
        """Allgather: a message moves when ``light`` gets each of its blocks exactly once, from me
        (module docstring): a block I already send it (that message is pinned), or my own block
        if it gets my block from nobody (added to my message to it in step 0)."""
        own = (self.me,)
        adds_own = False
        chosen = []  # (key, ready step at light, steps of my messages to light it relies on)
        for key in self.movable(light):
            if len(chosen) == count:
                break
            ready, relies, needs_own = 0, set(), False
            for item in self.messages[key]:
                step = self._delivered(light, item)
                if step is None and item == own and light not in self.reached:
                    step, needs_own = 0, True  # my own block, handed over in step 0 (added below)
                if step is None:
                    break
                ready, relies = max(ready, step + 1), relies | {step}
            else:
                chosen.append((key, ready, relies))
                adds_own = adds_own or needs_own
        if len(chosen) < 2:
            return {"units": (), "transit": ()}
        transit = ()
        if adds_own:
            self.messages[(light, 0)].append(own)
            self.reached.add(light)
            transit = (own,)
        units = []
        for key, ready, relies in chosen:
            items = tuple(self.messages.pop(key))
            units.append((key[0], items, ready))
            self.pinned.update((light, step) for step in relies)
        self.moved += len(units)
        return {"units": tuple(units), "transit": transit}

    def take(self, transfer: dict) -> None:
        """Adopt the messages a heavy rank handed to me."""
        for dest, items, ready in transfer["units"]:
            self.messages[(dest, ready)].extend(items)
            self.forwarded += 1
        self.transit.update(transfer["transit"])


def _balance(outgoing: _Outgoing, channel: ProtocolChannel, family: str, options: dict) -> int:
    """The balancing iterations (module docstring); returns how many pairing rounds ran."""
    comm, me = channel.comm, outgoing.me
    t, lag_messages = options["t"], lag(family, options)
    moved_last, iterations = True, 0
    while True:
        d = outgoing.degree
        m, s, moved_any = reductions.allreduce(comm, (d, d, moved_last), op=_extremes)
        if m - s <= t or not moved_any:
            return iterations
        iterations += 1
        heavy = d - s > t and 2 * d >= m + s
        light = d - s <= t // 2
        flags = (int(heavy), int(light))
        index = reductions.exscan(comm, flags, op=_add) or (0, 0)
        pairs = min(reductions.allreduce(comm, flags, op=_add))
        heavy_index, light_index = index
        paired_heavy = heavy and heavy_index < pairs
        paired_light = light and light_index < pairs
        if paired_heavy:
            channel.send(me, heavy_index, TAG_HEAVY)
        if paired_light:
            channel.send((me, d), light_index, TAG_LIGHT)
        if me < pairs:  # rendezvous of pair `me`: introduce the light rank to the heavy one
            heavy_rank, _ = channel.recv(MPI.ANY_SOURCE, TAG_HEAVY)
            light_info, _ = channel.recv(MPI.ANY_SOURCE, TAG_LIGHT)
            channel.send(light_info, heavy_rank, TAG_PARTNER)
        moved_last = False
        if paired_heavy:
            (partner, partner_degree), _ = channel.recv(heavy_index, TAG_PARTNER)
            transfer = outgoing.hand_off(partner, moved_count(d, partner_degree, lag_messages))
            moved_last = bool(transfer["units"])
            channel.send(transfer, partner, TAG_TRANSFER)
        if paired_light:
            transfer, _ = channel.recv(MPI.ANY_SOURCE, TAG_TRANSFER)
            outgoing.take(transfer)
        channel.finish()


def _expected(topology: Topology, family: str, transit) -> set:
    """The items this rank receives: its in-edges' (self loops excepted) and those it forwards."""
    me = topology.rank
    wanted = {item for item in topology.recv_items(family) if item is not None and item[0] != me}
    return wanted | set(transit)


def _assemble(topology: Topology, family: str, outgoing: _Outgoing, channel: ProtocolChannel) -> tuple:
    """Sends from the final messages; receives from one notification exchange (module docstring)."""
    sends = defaultdict(list)
    notices = defaultdict(list)
    for (dest, step), items in sorted(outgoing.messages.items()):
        items = tuple(sorted(items))
        sends[step].append(Message(dest, items))
        notices[dest].append((step, items))
    channel.post(dict(notices), TAG_NOTICE)
    recvs = defaultdict(list)
    pending = _expected(topology, family, outgoing.transit)
    while pending:
        notice, source = channel.recv(MPI.ANY_SOURCE, TAG_NOTICE)
        for step, items in notice:
            unexpected = [item for item in items if item not in pending]
            if unexpected:
                raise RuntimeError(f"loggp_tree: rank {topology.rank} was sent items {unexpected} "
                                   f"by rank {source} that it does not expect")
            pending.difference_update(items)
            recvs[step].append(Message(source, items))
    channel.finish()
    last = max([*sends, *recvs], default=-1)
    return tuple(Step(tuple(sorted(sends.get(s, ()), key=lambda m: m.peer)),
                      tuple(sorted(recvs.get(s, ()), key=lambda m: m.peer)))
                 for s in range(last + 1))


def build(topology: Topology, comm, options: dict, family: str) -> Pattern:
    """Registry entry point: balance the out-degrees, then assemble the Pattern; collective over ``comm``."""
    options = check_options(options, topology.size)
    with protocol_communicator(comm) as private:
        parameters = tuple(options[name] for name in PARAMETERS)
        if reductions.allreduce(private, parameters, op=_same) is None:  # every rank raises alike, before the protocol
            raise ValueError(f"options: ranks passed different values of {', '.join(PARAMETERS)} "
                             "(or LogGP files that differ); every rank must pass the same")
        channel = ProtocolChannel(private)
        outgoing = _Outgoing(topology, family)
        iterations = _balance(outgoing, channel, family, options)
        steps = _assemble(topology, family, outgoing, channel)
    return Pattern(family, topology.rank, steps, info={
        "balancing_iterations": iterations,
        "moved": outgoing.moved,
        "forwarded": outgoing.forwarded,
        "lag": lag(family, options),
        **{name: options[name] for name in PARAMETERS},
        "protocol_messages": channel.sent,
    })


ALGORITHM = Algorithm(
    name="loggp_tree",
    summary="out-degree balancing into forwarding trees by a LogGP rule, any topology; "
            "alltoall for small blocks only (SC12)",
    build=build,
    paper="Hoefler, Schneider: Optimization Principles for Collective Neighborhood Communications, SC12 "
          "(section II-B1, tree transformations)",
    options=dict(OPTIONS),
    check=check_options,
    builds_locally=False,
)
