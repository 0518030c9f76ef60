"""bind: Pattern + the call's buffers -> Schedule of concrete, zero-copy messages.

For every message, bind lists the pieces ``(absolute address, count, datatype)`` of
the items it carries:

* an item that originates here is read from the send buffer (allgather family: the
  one send block; alltoall family: the send block of its out-edge);
* the n-th arrival of an item this rank needs is written straight into the n-th
  receive block that wants it (in block order); any later arrival, or an item only
  passing through, gets a slot in temporary space;
* an item is forwarded from wherever it last arrived (so combining algorithms send
  from the receive buffer where they can);
* where ``relayed_as_bytes(message)`` says so, an item of that message that comes from a rank
  other than its origin is stored in temporary space as ``MPI_PACKED`` bytes, never straight
  in a receive block (see :func:`bind`);
* receive blocks still unfilled after the last step are filled by local copies from
  the item's location (repeated sources served by one arrival, self loops).

The executor then turns each message into one derived datatype over absolute
addresses, so nothing is packed by hand. The Schedule keeps the Pattern's message
positions and carries its dependency graph (:func:`sparsecoll.pattern.dependencies`)
for executors that run messages as their dependencies complete.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy
from mpi4py import MPI

from .buffers import Blocks, span
from .pattern import ALLGATHER, Pattern, dependencies
from .topology import Topology


@dataclass(frozen=True)
class BoundMessage:
    """A concrete message: the peer and the memory pieces it carries, in item order."""

    peer: int
    pieces: tuple


@dataclass
class Schedule:
    """Concrete messages per step, final local copies, and the temporary space they use.

    ``after[(step, index)]``: the message references ``(kind, step, index)`` the send waits
    for (:func:`sparsecoll.pattern.dependencies`).
    """

    steps: list
    copies: list = field(default_factory=list)
    temp: numpy.ndarray | None = None
    received: dict = field(default_factory=dict)  # item -> piece of its last arrival
    after: dict = field(default_factory=dict)


def bind(pattern: Pattern, topology: Topology, send: Blocks, recv: Blocks,
         transit_size: Callable | None = None, relayed_as_bytes: Callable | None = None) -> Schedule:
    """Bind one rank's Pattern to the call's send and receive blocks.

    ``transit_size(item) -> (count, datatype)`` gives the layout of an item that is
    stored in temporary space (only needed by multi-step algorithms). Three phases:
    place every arrival (:class:`_Placement`), fill the rest by local copies, then lay out
    the temporary space and resolve the pieces that live there.

    ``relayed_as_bytes(message)`` (asked for each received message that carries an item from a
    rank other than its origin): whether those items are received as ``MPI_PACKED`` bytes into
    temporary space (the receive blocks that want them are then filled by local copies). A
    relaying rank may hold an item as bytes (where it does not know the program's datatype) and
    then sends it as bytes; MPI lets those be received in the program's datatype, but MPICH
    5.0.2 unpacks a message's segments whole basic elements at a time and fails ("signature does
    not match") where a segment ends inside one: a segment of bytes can end anywhere unless every
    element of the message has one size. An item from its origin comes in the origin's
    datatype, whose elements the receive datatype's match one for one, and is received as before.
    """
    placement = _Placement(pattern, topology, send, recv, transit_size, relayed_as_bytes)
    steps = [placement.step(step) for step in pattern.steps]
    copies = placement.copies()
    temp, fix = _temporary_space(placement.temp_layouts)
    bound_steps = [([BoundMessage(m.peer, tuple(fix(p) for p in m.pieces)) for m in sends],
                    [BoundMessage(m.peer, tuple(fix(p) for p in m.pieces)) for m in recvs])
                   for sends, recvs in steps]
    received = {item: fix(placement.home[item]) for step in pattern.steps for m in step.recvs for item in m.items}
    return Schedule(bound_steps, [(fix(src), fix(dst)) for src, dst in copies], temp, received,
                    dependencies(pattern))


class _Placement:
    """Where each item is read from and written to, step by step (pieces in temporary space
    are ``("temp", index, count, datatype)`` until :func:`_temporary_space` resolves them)."""

    def __init__(self, pattern: Pattern, topology: Topology, send: Blocks, recv: Blocks, transit_size,
                 relayed_as_bytes: Callable | None = None):
        family = pattern.family
        self.recv = recv
        self.transit_size = transit_size
        self.relayed_as_bytes = relayed_as_bytes
        self.home = {}           # item -> piece it is read from when sent (first: its origin)
        for k, item in enumerate(topology.send_items(family)):
            if item is not None and item not in self.home:
                self.home[item] = send.piece(0 if family == ALLGATHER else k)
        self.wanted = defaultdict(list)  # item -> receive blocks that want it, in block order
        for i, item in enumerate(topology.recv_items(family)):
            if item is not None:
                self.wanted[item].append(i)
        self.filled = set()      # receive blocks written by an arrival
        self.temp_layouts = []   # (count, datatype) of each temporary piece

    def step(self, step) -> tuple:
        """``(sends, recvs)`` of one step as messages of (possibly temporary) pieces."""
        sends = [BoundMessage(m.peer, tuple(self.home[item] for item in m.items)) for m in step.sends]
        recvs = []
        for m in step.recvs:
            relayed = [item[0] != m.peer for item in m.items]
            as_bytes = any(relayed) and self.relayed_as_bytes is not None and bool(self.relayed_as_bytes(m))
            recvs.append(BoundMessage(m.peer, tuple(self._arrival(item, as_bytes and from_relay)
                                                    for item, from_relay in zip(m.items, relayed))))
        return sends, recvs

    def _arrival(self, item, as_bytes: bool):
        """The piece an arrival of ``item`` is written to: its next unfilled receive block, else
        (or ``as_bytes``) temporary space."""
        free = None if as_bytes else next((b for b in self.wanted.get(item, ()) if b not in self.filled), None)
        if free is not None:
            self.filled.add(free)
            piece = self.recv.piece(free)
        else:
            count, datatype = self._slot_layout(item, as_bytes)
            piece = ("temp", len(self.temp_layouts), count, datatype)
            self.temp_layouts.append((count, datatype))
        self.home[item] = piece
        return piece

    def _slot_layout(self, item, as_bytes: bool) -> tuple:
        """``(count, datatype)`` of a temporary slot for ``item``: its transit layout, or as bytes
        the size of a receive block that wants it."""
        if self.transit_size is not None:
            count, datatype = self.transit_size(item)
        elif as_bytes and self.wanted.get(item):
            _, count, datatype = self.recv.piece(self.wanted[item][0])
        else:
            raise ValueError(f"bind: item {item} needs temporary space but its size is unknown")
        if as_bytes and datatype != MPI.PACKED:
            count, datatype = count * datatype.Get_size(), MPI.PACKED
        return count, datatype

    def copies(self) -> list:
        """``(source, destination)`` local copies for the receive blocks no arrival filled."""
        return [(self.home[item], self.recv.piece(b))
                for item, blocks in self.wanted.items() for b in blocks if b not in self.filled]


def _temporary_space(layouts) -> tuple:
    """``(buffer or None, fix)``: one 16-byte aligned slot per temporary piece, and the function
    that turns a temporary piece into its absolute ``(address, count, datatype)``."""
    if not layouts:
        return None, lambda piece: piece
    offsets, total = [], 0
    for count, datatype in layouts:
        first, end = span(count, datatype)
        nbytes = end - first
        offsets.append(total - first)
        total += nbytes + (-nbytes) % 16
    temp = numpy.zeros(max(total, 1), dtype=numpy.uint8)
    base = temp.ctypes.data
    resolved = [(base + offset, count, datatype) for offset, (count, datatype) in zip(offsets, layouts)]

    def fix(piece):
        return resolved[piece[1]] if piece[0] == "temp" else piece
    return temp, fix


def has_transit(pattern: Pattern, topology: Topology) -> bool:
    """Whether some arrival of an item must be stored outside the receive blocks."""
    wanted = defaultdict(int)
    for item in topology.recv_items(pattern.family):
        if item is not None:
            wanted[item] += 1
    for step in pattern.steps:
        for m in step.recvs:
            for item in m.items:
                if wanted[item] == 0:
                    return True
                wanted[item] -= 1
    return False


def final_copies(pattern: Pattern, recv_items) -> int:
    """How many receive blocks no arrival of ``pattern`` fills (``recv_items``: the topology's,
    :meth:`~sparsecoll.topology.Topology.recv_items` of ``pattern.family``): :func:`bind` fills
    them by local copies after the last step, which the executors run as one more step."""
    wanted = Counter(item for item in recv_items if item is not None)
    arrived = Counter(item for step in pattern.steps for message in step.recvs for item in message.items)
    return sum(max(count - arrived[item], 0) for item, count in wanted.items())
