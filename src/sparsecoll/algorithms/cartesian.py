"""Cartesian collective communication: schedules for isomorphic stencil neighborhoods.

Träff and Hunold, "Cartesian Collective Communication", ICPP 2019, section 3:

* ``cartesian_trivial``: Listing 4, one send-receive round per offset ``N[i]`` (send block
  ``i`` to ``R + N[i]``, receive block ``i`` from ``R - N[i]``).
* ``cartesian``: message combining with dimension-wise path expansion. The block for
  ``N[i]`` travels via ``R + (n0,0,..)``, ``R + (n0,n1,0,..)``, ... ; phase ``k`` moves every
  block along dimension ``k``, one round per distinct non-zero ``k``-th coordinate, all
  blocks with that coordinate combined in one message (rounds of a phase run
  concurrently, as in Listing 5).

  - alltoall: Algorithm 1; ``C = sum_k C_k`` rounds, volume ``V = sum_i z_i`` blocks.
  - allgather: Algorithm 2; the allgather tree built dimension by dimension in order of
    increasing ``C_k``; a block crosses each tree edge once, so ``V`` = edges of the tree.
    ``C_k`` orders the dimensions as section 3.2 and Proposition 3.3 define it, "the number
    of different kth coordinates", zero included (a zero coordinate is a child of its own
    in the tree, so it counts in the branching the order keeps low; over 19,698 random
    small neighborhoods this order gave the smaller tree 3,166 times, counting non-zero
    coordinates only, as Proposition 3.2 does for alltoall's rounds, 123 times). The
    rounds of a phase are the distinct non-zero coordinates, as the section's schedule
    text says; Proposition 3.3's ``C = sum C_i`` counts those.

Blocks for the zero vector never travel: :func:`sparsecoll.bind.bind` fills those
receive blocks by local copies (the paper's local copy phase), and it places blocks that
pass through a rank in temporary space and blocks that arrive at their target straight in
the receive buffer, so nothing is packed by hand (the paper's buffer alternation).

Schedules are computed locally in ``O(t d)`` from the offset list; every rank derives
the same rounds, so no communication is needed. In a non-periodic mesh a block whose
origin or target lies outside the mesh is simply left out of the messages.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from ..pattern import ALLTOALL, Message, Pattern, Step, gather_item, personal_item
from ..topology import PROC_NULL, Topology
from ..topology.cartesian import GRID_OPTION, Grid, grid_of, is_cartesian, routes
from .base import Algorithm

PAPER = "Träff and Hunold, Cartesian Collective Communication, ICPP 2019"

@dataclass(frozen=True)
class Round:
    """One combined message per rank: every block moves by ``shift`` along ``dim``.

    ``members`` are route indices (alltoall) or ``(parent, child, leaves)`` tree edges
    (allgather: the block at tree node ``parent`` moves to ``child``; ``leaves`` are the
    route indices of the child's subtree).
    """

    dim: int
    shift: int
    members: tuple


@dataclass(frozen=True)
class CombiningSchedule:
    """The phases (one per dimension, in ``order``) of a message-combining schedule."""

    order: tuple
    phases: tuple
    volume: int

    @property
    def rounds(self) -> int:
        """Number of communication rounds ``C``."""
        return sum(len(phase) for phase in self.phases)


def distinct_coordinates(offsets, dim: int) -> int:
    """``C_k`` of section 3.2: the number of distinct coordinates of ``offsets`` in ``dim``,
    zero included (the children of a tree node at that level)."""
    return len({n[dim] for n in offsets})


def increasing_c_order(offsets, ndim: int) -> tuple:
    """The allgather tree's dimension order: increasing ``C_k`` (ties by dimension index)."""
    return tuple(sorted(range(ndim), key=lambda k: (distinct_coordinates(offsets, k), k)))


def _bucket(indices, offsets, dim: int) -> dict:
    """Group ``indices`` by their offsets' coordinate ``dim`` (order kept inside a group)."""
    groups = defaultdict(list)
    for i in indices:
        groups[offsets[i][dim]].append(i)
    return groups


def alltoall_schedule(offsets, ndim: int, order: tuple | None = None) -> CombiningSchedule:
    """Algorithm 1: phase per dimension, round per distinct non-zero coordinate.

    Round members are the indices ``i`` with ``offsets[i][dim] == shift``; every such
    block is sent once in this phase, so the volume is ``sum_i z_i``.
    """
    order = tuple(range(ndim)) if order is None else tuple(order)
    phases, volume = [], 0
    for dim in order:
        groups = _bucket(range(len(offsets)), offsets, dim)
        phase = tuple(Round(dim, shift, tuple(groups[shift])) for shift in sorted(groups) if shift != 0)
        volume += sum(len(r.members) for r in phase)
        phases.append(phase)
    return CombiningSchedule(order, tuple(phases), volume)


def allgather_schedule(offsets, ndim: int, order: tuple | None = None) -> CombiningSchedule:
    """Algorithm 2: the allgather tree, level by level in ``order`` (default increasing ``C_k``).

    A tree node is the offset prefix reached so far (coordinates of the processed
    dimensions, zero elsewhere). A node's children at the next level group its leaves by
    their coordinate in the next dimension; every child with a non-zero coordinate is an
    edge, sent in the round of that coordinate.
    """
    order = increasing_c_order(offsets, ndim) if order is None else tuple(order)
    nodes = {(0,) * ndim: list(range(len(offsets)))}
    phases, volume = [], 0
    for dim in order:
        by_shift = defaultdict(list)
        children = {}
        for parent, leaves in nodes.items():
            groups = _bucket(leaves, offsets, dim)
            for shift in sorted(groups):
                child = parent[:dim] + (shift,) + parent[dim + 1:]
                children[child] = groups[shift]
                if shift != 0:
                    by_shift[shift].append((parent, child, tuple(groups[shift])))
        phase = tuple(Round(dim, shift, tuple(by_shift[shift])) for shift in sorted(by_shift))
        volume += sum(len(r.members) for r in phase)
        phases.append(phase)
        nodes = children
    return CombiningSchedule(order, tuple(phases), volume)


def combining_schedule(family: str, offsets, ndim: int) -> CombiningSchedule:
    """The message-combining schedule of ``family`` for ``offsets``."""
    if family == ALLTOALL:
        return alltoall_schedule(offsets, ndim)
    return allgather_schedule(offsets, ndim)


# -- per-rank patterns --------------------------------------------------------------------

def _restricted(vector, dims) -> tuple:
    """``vector`` with every coordinate outside ``dims`` set to zero."""
    return tuple(n if k in dims else 0 for k, n in enumerate(vector))


class _RankView:
    """Rank-local arithmetic for building one rank's Pattern from a schedule."""

    def __init__(self, topology: Topology):
        self.grid: Grid = grid_of(topology)
        self.rank = topology.rank
        self.coords = self.grid.coords(self.rank)
        self.routes = routes(self.grid, topology.offsets)
        self.offsets = [offset for offset, _ in self.routes]

    def peer(self, dim: int, shift: int) -> int:
        """The rank ``shift`` steps along ``dim`` (``PROC_NULL`` off the mesh)."""
        step = tuple(shift if k == dim else 0 for k in range(self.grid.ndim))
        return self.grid.shift(self.rank, step)

    def origin(self, travelled) -> tuple | None:
        """Coordinates of the origin of a block that reached this rank after ``travelled``."""
        return self.grid.moved(self.coords, travelled, -1)

    def personal(self, route: int, done) -> tuple | None:
        """The alltoall item of ``route`` held here after moving along the dimensions ``done``."""
        offset, label = self.routes[route]
        origin = self.origin(_restricted(offset, done))
        if origin is None:
            return None
        target = self.grid.moved(origin, offset)
        if target is None:
            return None
        return personal_item(self.grid.rank_at(origin), self.grid.rank_at(target), label)

    def gathered(self, node, leaves) -> tuple | None:
        """The allgather item at tree ``node`` here, if some leaf under it lies on the mesh."""
        origin = self.origin(node)
        if origin is None:
            return None
        if not any(self.grid.moved(origin, self.offsets[i]) is not None for i in leaves):
            return None
        return gather_item(self.grid.rank_at(origin))


def _message(peer: int, items) -> list:
    items = tuple(item for item in items if item is not None)
    return [Message(peer, items)] if items and peer != PROC_NULL else []


def combining_pattern(topology: Topology, family: str) -> Pattern:
    """This rank's message-combining Pattern: one Step per phase, one message per round."""
    view = _RankView(topology)
    schedule = combining_schedule(family, view.offsets, view.grid.ndim)
    steps, done = [], set()
    for dim, phase in zip(schedule.order, schedule.phases):
        sends, recvs = [], []
        for rnd in phase:
            arrived = done | {dim}
            if family == ALLTOALL:
                out_items = [view.personal(i, done) for i in rnd.members]
                in_items = [view.personal(i, arrived) for i in rnd.members]
            else:
                out_items = [view.gathered(parent, leaves) for parent, _, leaves in rnd.members]
                in_items = [view.gathered(child, leaves) for _, child, leaves in rnd.members]
            sends += _message(view.peer(dim, rnd.shift), out_items)
            recvs += _message(view.peer(dim, -rnd.shift), in_items)
        done.add(dim)
        if phase:  # every rank skips the same empty phases
            steps.append(Step(tuple(sends), tuple(recvs)))
    info = {"rounds": schedule.rounds, "volume": schedule.volume,
            "dimension_order": schedule.order, "neighbors": len(view.routes)}
    return Pattern(family, topology.rank, tuple(steps), info)


def trivial_pattern(topology: Topology, family: str) -> Pattern:
    """Listing 4: one Step per non-zero offset, sending its block straight to ``R + N[i]``."""
    view = _RankView(topology)
    zero = (0,) * view.grid.ndim
    steps = []
    for route, (offset, _label) in enumerate(view.routes):
        if offset == zero:
            continue  # local copy, done by bind
        if family == ALLTOALL:
            out_item = view.personal(route, ())
            in_item = view.personal(route, range(view.grid.ndim))
        else:
            out_item = view.gathered(zero, (route,))
            in_item = view.gathered(offset, (route,))
        dest = view.grid.shift(view.rank, offset, +1)
        source = view.grid.shift(view.rank, offset, -1)
        steps.append(Step(tuple(_message(dest, [out_item])), tuple(_message(source, [in_item]))))
    info = {"rounds": len(steps), "volume": len(steps), "neighbors": len(view.routes)}
    return Pattern(family, topology.rank, tuple(steps), info)


# -- registry -----------------------------------------------------------------------------

def unsupported(topology: Topology) -> str | None:
    """Why the Cartesian algorithms cannot run on ``topology`` (None if they can)."""
    if is_cartesian(topology):
        return None
    reason = topology.extra.get("cartesian")
    if reason:
        return f"Cartesian algorithms: {reason}"
    return ("Cartesian algorithms need an isomorphic neighborhood: create the communicator with "
            f"sparsecoll.cart_neighborhood_create, or wrap a distributed graph with {GRID_OPTION}=(dims, periods)")


OPTIONS: dict = {}  # wrap's grid= (any algorithm) detects the Cartesian neighborhoods they need


def _build_combining(topology: Topology, comm, options: dict, family: str) -> Pattern:
    """Registry entry point of ``cartesian`` (purely local)."""
    return combining_pattern(topology, family)


def _build_trivial(topology: Topology, comm, options: dict, family: str) -> Pattern:
    """Registry entry point of ``cartesian_trivial`` (purely local)."""
    return trivial_pattern(topology, family)


TRIVIAL = Algorithm(
    name="cartesian_trivial",
    summary="Cartesian neighborhoods: one send-receive round per offset (Träff-Hunold Listing 4)",
    build=_build_trivial, paper=f"{PAPER} (Listing 4)", supports=unsupported, options=OPTIONS,
)

COMBINING = Algorithm(
    name="cartesian",
    summary="Cartesian neighborhoods: dimension-wise message combining (Träff-Hunold Algorithms 1, 2)",
    build=_build_combining, paper=f"{PAPER} (Algorithms 1 and 2)", supports=unsupported, options=OPTIONS,
)
