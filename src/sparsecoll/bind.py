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
* receive blocks still unfilled after the last step are filled by local copies from
  the item's location (repeated sources served by one arrival, self loops).

The executor then turns each message into one derived datatype over absolute
addresses, so nothing is packed by hand.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy

from .buffers import Blocks, span
from .pattern import ALLGATHER, Pattern
from .topology import Topology

Piece = tuple  # (absolute address, count, MPI.Datatype)


@dataclass(frozen=True)
class BoundMessage:
    """A concrete message: the peer and the memory pieces it carries, in item order."""

    peer: int
    pieces: tuple


@dataclass
class Schedule:
    """Concrete messages per step, final local copies, and the temporary space they use."""

    steps: list
    copies: list = field(default_factory=list)
    temp: numpy.ndarray | None = None
    received: dict = field(default_factory=dict)  # item -> piece of its last arrival


def bind(pattern: Pattern, topology: Topology, send: Blocks, recv: Blocks,
         transit_size: Callable | None = None) -> Schedule:
    """Bind one rank's Pattern to the call's send and receive blocks.

    ``transit_size(item) -> (count, datatype)`` gives the layout of an item that is
    stored in temporary space (only needed by multi-step algorithms).
    """
    family = pattern.family
    origin = {}
    for k, item in enumerate(topology.send_items(family)):
        if item is not None and item not in origin:
            origin[item] = send.piece(0 if family == ALLGATHER else k)
    wanted = defaultdict(list)
    for i, item in enumerate(topology.recv_items(family)):
        if item is not None:
            wanted[item].append(i)

    home = dict(origin)          # item -> piece it is read from when sent
    filled = set()               # receive blocks written by an arrival
    temp_requests = []           # (message list, index, count, datatype) to resolve later
    steps = []
    for step in pattern.steps:
        sends = []
        for m in step.sends:
            sends.append(BoundMessage(m.peer, tuple(home[item] for item in m.items)))
        recvs = []
        for m in step.recvs:
            pieces = []
            for item in m.items:
                blocks = wanted.get(item, ())
                free = next((b for b in blocks if b not in filled), None)
                if free is not None:
                    filled.add(free)
                    piece = recv.piece(free)
                else:
                    if transit_size is None:
                        raise ValueError(f"bind: item {item} needs temporary space but its size is unknown")
                    count, datatype = transit_size(item)
                    piece = ("temp", len(temp_requests), count, datatype)
                    temp_requests.append((count, datatype))
                pieces.append(piece)
                home[item] = piece
            recvs.append([m.peer, pieces])
        steps.append((sends, recvs))

    copies = []
    for item, blocks in wanted.items():
        for b in blocks:
            if b not in filled:
                copies.append((home[item], recv.piece(b)))

    temp = None
    if temp_requests:
        offsets, total = [], 0
        for count, datatype in temp_requests:
            first, end = span(count, datatype)
            nbytes = end - first
            offsets.append(total - first)
            total += nbytes + (-nbytes) % 16
        temp = numpy.zeros(max(total, 1), dtype=numpy.uint8)
        base = temp.ctypes.data
        resolved = {i: (base + offsets[i], c, t) for i, (c, t) in enumerate(temp_requests)}

        def fix(piece):
            return resolved[piece[1]] if piece[0] == "temp" else piece
    else:
        def fix(piece):
            return piece

    bound_steps = []
    for sends, recvs in steps:
        bound_steps.append((
            [BoundMessage(m.peer, tuple(fix(p) for p in m.pieces)) for m in sends],
            [BoundMessage(peer, tuple(fix(p) for p in pieces)) for peer, pieces in recvs],
        ))
    copies = [(fix(src), fix(dst)) for src, dst in copies]
    received = {item: fix(home[item]) for step in pattern.steps for m in step.recvs for item in m.items}
    return Schedule(bound_steps, copies, temp, received)


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
