"""A cost model of the universal hierarchical algorithm and of imbalance-aware reductions at scale.

The paper on hierarchical shared-memory collectives and imbalanced process arrival (the source of
:mod:`sparsecoll.hierarchy`) measures on a Cray XE6: Table I, the speedup of the universal
hierarchical algorithm (section II, Fig. 1; alltoall with the placement of Fig. 2) over the MPI
library's flat collectives at 32k ranks; Table II, the speedup of the imbalance-aware reduction
with dynamic leaders (section III) over MPICH in the mean time each rank spends inside a Reduce,
8k ranks, with a micro-kernel of 0-800 ms before each call. This module predicts both:

* :func:`flat` / :func:`hierarchical`: Hockney costs (``alpha + bytes * beta``) per level,
  intra-node (``alpha_s``, ``beta_s``) and inter-node (``alpha_n``, ``beta_n``), with one link per
  node: in a round where ``k`` ranks of a node send off the node, their bytes serialise on that
  link (``alpha_n + k * bytes * beta_n``). The flat algorithms are MPICH's defaults as selected
  by its classic thresholds (``MPIR_CVAR_*`` defaults of MPICH 3.x, kept by the default selection
  of later versions; assumed, not read from the installed library), see :data:`MPICH_THRESHOLDS`.
  The hierarchical cost is Fig. 1's critical path: copy-in, node barrier, the leaders' MPICH
  collective over ``N`` ranks (one per node) at inter-node parameters, barrier, copy-out;
  reductions add the node reduction of :mod:`sparsecoll.hierarchy` (each rank reduces its share of
  the elements over the node's ranks between two barriers).
* :func:`times_inside` / :func:`mean_times_inside`: the time each rank spends inside the
  collective when ranks arrive at seeded random times, for the MPI library (MPICH's binomial tree
  or Rabenseifner reduce-scatter + gather; recursive doubling or Rabenseifner for Allreduce),
  fixed leaders (as :mod:`sparsecoll.hierarchy` runs them: everyone waits at the node barriers for
  its node's last arrival and, at the last barrier, for its leader's inter-node part) and dynamic
  leaders (section III: a rank reduces its buffer into shared memory on arrival and leaves unless it
  is its node's last arrival or the root; the last arrival of each node joins the binomial tree
  between nodes, paying control messages to find its parent's current leader). Concurrent
  deposits pipeline through the shared buffer in locked chunks of ``deposit_chunk`` bytes. For
  Allreduce (not in the paper) each node's last arrival runs the library's Allreduce with the other
  nodes' (paying the control messages once per recursive-doubling step) and every rank waits on its
  node for the result.

Everything here is arithmetic on numbers (no MPI); all ranks are powers of two.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy

#: MPICH's default algorithm thresholds in bytes as this model assumes them (MPICH 3.x CVAR defaults)
MPICH_THRESHOLDS = {
    "allgather_long": 524288,        # total bytes below: recursive doubling (power of two ranks), else ring
    "alltoall_short": 256,           # block bytes up to: Bruck (with at least 8 ranks)
    "alltoall_medium": 32768,        # block bytes up to: scattered isend/irecv, else pairwise exchange
    "bcast_short": 12288,            # bytes below: binomial tree
    "bcast_long": 524288,            # bytes below: scatter + recursive-doubling allgather, else + ring
    "reduce_short": 2048,            # bytes up to (or count < ranks): binomial, else Rabenseifner
    "allreduce_short": 2048,         # bytes up to (or count < ranks): recursive doubling, else Rabenseifner
    "redscat_long": 524288,          # total bytes below: recursive halving, else pairwise exchange
}
#: the collectives of Table I, in the issue's order
COLLECTIVES = ("Allgather", "Allgatherv", "Alltoall", "Alltoallv", "Bcast", "Scatter", "Gather", "Reduce",
               "Allreduce", "Reduce_scatter")
ELEMENT = 8  # bytes of one element of a reduction (a double)


@dataclass(frozen=True)
class Params:
    """Model parameters in seconds and seconds per byte (defaults: a typical InfiniBand cluster)."""

    alpha_n: float = 1.5e-6        # inter-node latency
    beta_n: float = 0.1e-9         # inter-node seconds per byte (10 GB/s, one link per node)
    alpha_s: float = 0.3e-6        # intra-node message latency (the MPI library's shared-memory path)
    beta_s: float = 0.05e-9        # intra-node message seconds per byte (20 GB/s)
    copy: float = 0.1e-9           # shared-memory copy-in/out seconds per byte (10 GB/s per rank)
    gamma: float = 0.1e-9          # seconds per byte of reduction arithmetic
    eager_limit: int = 65536       # bytes up to which a send completes without its receiver
    control_messages: int = 2      # per inter-node tree edge of dynamic leaders (a request and a reply)
    deposit_chunk: int = 8192      # bytes a dynamic-leader deposit holds the shared buffer's lock for

    def __post_init__(self):
        for name, value in self.__dict__.items():
            if value < 0:
                raise ValueError(f"{name}: must be non-negative, got {value!r}")


@dataclass(frozen=True)
class Nodes:
    """``count`` nodes of ``ranks_per_node`` consecutive ranks (both powers of two)."""

    count: int
    ranks_per_node: int

    def __post_init__(self):
        for name in ("count", "ranks_per_node"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1 or value & (value - 1):
                raise ValueError(f"{name}: expected a power of two >= 1, got {value!r}")

    @property
    def ranks(self) -> int:
        """All ranks."""
        return self.count * self.ranks_per_node

    def leaders(self) -> Nodes:
        """One rank per node: where the hierarchy's inter-node collective runs."""
        return Nodes(self.count, 1)


@dataclass
class Cost:
    """A predicted critical path: seconds, and what crosses the busiest node's link."""

    seconds: float = 0.0
    link_messages: int = 0
    link_bytes: int = 0
    algorithm: list = field(default_factory=list)

    def round(self, p: Params, nbytes: float, off_node: int, reduced: float = 0.0) -> None:
        """One round in which every rank sends ``nbytes``, ``off_node`` ranks of a node off it."""
        if off_node:
            self.seconds += p.alpha_n + off_node * nbytes * p.beta_n
            self.link_messages += off_node
            self.link_bytes += int(off_node * nbytes)
        else:
            self.seconds += p.alpha_s + nbytes * p.beta_s
        self.seconds += reduced * p.gamma

    def add(self, other: Cost) -> None:
        """Append ``other``'s path."""
        self.seconds += other.seconds
        self.link_messages += other.link_messages
        self.link_bytes += other.link_bytes
        self.algorithm += other.algorithm


def _log2(n: int) -> int:
    return n.bit_length() - 1


def _xor_off(nodes: Nodes, distance: int) -> int:
    """Ranks of a node whose partner ``rank ^ distance`` is on another node."""
    return 0 if distance < nodes.ranks_per_node else nodes.ranks_per_node


def _shift_off(nodes: Nodes, distance: int) -> int:
    """Ranks of a node whose partner ``rank + distance`` is on another node."""
    d, per_node = distance % nodes.ranks, nodes.ranks_per_node
    return per_node - max(0, per_node - d) - max(0, d + per_node - nodes.ranks)


def _tree_off(nodes: Nodes, distance: int) -> int:
    """Senders of a node in a binomial-tree round at ``distance`` (one every ``2 * distance`` ranks)."""
    return 0 if distance < nodes.ranks_per_node else 1


# -- the flat MPICH algorithms ------------------------------------------------------------------------
def _recursive_doubling_allgather(c, p, nodes, block):
    for k in range(_log2(nodes.ranks)):
        c.round(p, (1 << k) * block, _xor_off(nodes, 1 << k))


def _ring_allgather(c, p, nodes, block):
    for _ in range(nodes.ranks - 1):
        c.round(p, block, _shift_off(nodes, 1))


def _allgather(c, p, nodes, block):
    if block * nodes.ranks < MPICH_THRESHOLDS["allgather_long"]:
        c.algorithm.append("recursive doubling")
        _recursive_doubling_allgather(c, p, nodes, block)
    else:
        c.algorithm.append("ring")
        _ring_allgather(c, p, nodes, block)


def _alltoall(c, p, nodes, block, vector=False):
    ranks = nodes.ranks
    if not vector and block <= MPICH_THRESHOLDS["alltoall_short"] and ranks >= 8:
        c.algorithm.append("Bruck")
        c.seconds += 2 * ranks * block * p.copy  # the local rotations before and after
        for k in range(_log2(ranks)):
            c.round(p, ranks // 2 * block, _shift_off(nodes, 1 << k))
    elif vector or block <= MPICH_THRESHOLDS["alltoall_medium"]:
        c.algorithm.append("scattered isend/irecv")  # charged like pairwise: alpha per message
        for i in range(1, ranks):
            c.round(p, block, _shift_off(nodes, i))
    else:
        c.algorithm.append("pairwise exchange")
        for i in range(1, ranks):
            c.round(p, block, _xor_off(nodes, i))


def _binomial(c, p, nodes, sizes):
    """A binomial tree from the root: ``sizes(distance)`` bytes per round, largest distance first."""
    for k in reversed(range(_log2(nodes.ranks))):
        c.round(p, sizes(1 << k), _tree_off(nodes, 1 << k))


def _bcast(c, p, nodes, nbytes):
    ranks = nodes.ranks
    if nbytes < MPICH_THRESHOLDS["bcast_short"] or ranks < 8:
        c.algorithm.append("binomial")
        _binomial(c, p, nodes, lambda d: nbytes)
        return
    piece = nbytes / ranks
    _binomial(c, p, nodes, lambda d: d * piece)
    if nbytes < MPICH_THRESHOLDS["bcast_long"]:
        c.algorithm.append("scatter + recursive doubling allgather")
        _recursive_doubling_allgather(c, p, nodes, piece)
    else:
        c.algorithm.append("scatter + ring allgather")
        _ring_allgather(c, p, nodes, piece)


def _recursive_halving(c, p, nodes, total):
    """Reduce-scatter by recursive halving of ``total`` bytes (partner distance largest first)."""
    for k in range(1, _log2(nodes.ranks) + 1):
        size = total / (1 << k)
        c.round(p, size, _xor_off(nodes, nodes.ranks >> k), reduced=size)


def _reduce(c, p, nodes, nbytes):
    ranks = nodes.ranks
    if nbytes <= MPICH_THRESHOLDS["reduce_short"] or nbytes // ELEMENT < ranks:
        c.algorithm.append("binomial")
        _binomial(c, p, nodes, lambda d: nbytes)
        c.seconds += _log2(ranks) * nbytes * p.gamma
        return
    c.algorithm.append("Rabenseifner (recursive halving + binomial gather)")
    _recursive_halving(c, p, nodes, nbytes)
    _binomial(c, p, nodes, lambda d: d * nbytes / ranks)


def _allreduce(c, p, nodes, nbytes):
    ranks = nodes.ranks
    if nbytes <= MPICH_THRESHOLDS["allreduce_short"] or nbytes // ELEMENT < ranks:
        c.algorithm.append("recursive doubling")
        for k in range(_log2(ranks)):
            c.round(p, nbytes, _xor_off(nodes, 1 << k), reduced=nbytes)
        return
    c.algorithm.append("Rabenseifner (recursive halving + recursive doubling)")
    _recursive_halving(c, p, nodes, nbytes)
    _recursive_doubling_allgather(c, p, nodes, nbytes / ranks)


def _reduce_scatter(c, p, nodes, block):
    total = block * nodes.ranks
    if total < MPICH_THRESHOLDS["redscat_long"]:
        c.algorithm.append("recursive halving")
        _recursive_halving(c, p, nodes, total)
    else:
        c.algorithm.append("pairwise exchange")
        for i in range(1, nodes.ranks):
            c.round(p, block, _shift_off(nodes, i), reduced=block)


def flat(collective: str, nodes: Nodes, block: int, params: Params = Params()) -> Cost:
    """The MPI library's collective (MPICH's default algorithm) on all ranks of ``nodes``.

    ``block``: bytes per rank (Allgather, Gather, Scatter, Reduce_scatter), per pair (Alltoall) or
    of the whole buffer (Bcast, Reduce, Allreduce).
    """
    if collective not in COLLECTIVES:
        raise ValueError(f"collective: expected one of {COLLECTIVES}, got {collective!r}")
    if block < 0:
        raise ValueError(f"block: expected a non-negative byte count, got {block!r}")
    c, p = Cost(), params
    if nodes.ranks == 1:
        return c
    if collective in ("Allgather", "Allgatherv"):
        _allgather(c, p, nodes, block)
    elif collective in ("Alltoall", "Alltoallv"):
        _alltoall(c, p, nodes, block, vector=collective == "Alltoallv")
    elif collective == "Bcast":
        _bcast(c, p, nodes, block)
    elif collective in ("Scatter", "Gather"):
        c.algorithm.append("binomial")
        _binomial(c, p, nodes, lambda d: d * block)
    elif collective == "Reduce":
        _reduce(c, p, nodes, block)
    elif collective == "Allreduce":
        _allreduce(c, p, nodes, block)
    else:
        _reduce_scatter(c, p, nodes, block)
    return c


def barrier(nodes: Nodes, params: Params = Params()) -> float:
    """A node barrier (dissemination): ``log2(R)`` shared-memory latencies."""
    return _log2(nodes.ranks_per_node) * params.alpha_s


def hierarchical(collective: str, nodes: Nodes, block: int, params: Params = Params()) -> Cost:
    """The universal hierarchical algorithm (Fig. 1): copies, barriers and the leaders' collective.

    The leaders call the same MPICH collective over ``N`` ranks with node-sized blocks (``R`` blocks;
    ``R * R`` blocks per node pair for Alltoall(v), Fig. 2).
    """
    p, ranks, per_node = params, nodes.ranks, nodes.ranks_per_node
    copy_in, copy_out, inter_block = block, block, block
    reduction = 0.0
    barriers = 2
    if collective in ("Allgather", "Allgatherv"):
        copy_out, inter_block = ranks * block, per_node * block
    elif collective in ("Alltoall", "Alltoallv"):
        copy_in = copy_out = ranks * block
        inter_block = per_node * per_node * block
    elif collective == "Scatter":
        copy_in, inter_block = ranks * block, per_node * block
    elif collective == "Gather":
        copy_out, inter_block = ranks * block, per_node * block
    elif collective in ("Reduce", "Allreduce"):
        reduction, barriers = (per_node - 1) * block / per_node, 3
    elif collective == "Reduce_scatter":
        copy_in, inter_block, barriers = ranks * block, per_node * block, 3
        reduction = (per_node - 1) * ranks * block / per_node
    leaders = flat(collective, nodes.leaders(), inter_block, params)
    c = Cost(algorithm=[f"leaders: {', '.join(leaders.algorithm) or 'none (one node)'}"])
    if collective == "Alltoallv":  # ExchangeCntData: counts into the shared table, one more barrier
        barriers += 1
        c.seconds += ranks * 8 * p.copy
    c.seconds += (copy_in + copy_out) * p.copy + reduction * p.gamma + barriers * barrier(nodes, p)
    c.add(leaders)
    return c


def speedup(collective: str, nodes: Nodes, block: int, params: Params = Params()) -> float:
    """Flat time over hierarchical time (Table I's measure)."""
    return flat(collective, nodes, block, params).seconds / hierarchical(collective, nodes, block, params).seconds


# -- Table II: imbalanced arrival ---------------------------------------------------------------------
def _message_time(p: Params, nbytes: float, inter: bool) -> float:
    return (p.alpha_n + nbytes * p.beta_n) if inter else (p.alpha_s + nbytes * p.beta_s)


def _binomial_reduce(p, nodes, ready, nbytes, edge_extra=0.0):
    """MPICH's binomial reduce to rank 0 from ``ready`` times: returns each rank's exit time.

    A parent receives its children in increasing distance; an eager child leaves once its message
    is sent, a rendezvous child (above ``eager_limit``) waits until its parent posts the receive.
    """
    ready = numpy.array(ready, dtype=float)
    exits = ready.copy()
    ranks = nodes.ranks
    distance = 1
    while distance < ranks:
        parents = numpy.arange(0, ranks, 2 * distance)
        children = parents + distance
        inter = distance >= nodes.ranks_per_node
        cost = _message_time(p, nbytes, inter) + edge_extra
        start = ready[children]
        if nbytes > p.eager_limit:  # the receiver's ready-to-send answer first
            start = numpy.maximum(start, ready[parents]) + (p.alpha_n if inter else p.alpha_s)
        arrived = start + cost
        exits[children] = arrived
        ready[parents] = numpy.maximum(ready[parents], arrived) + nbytes * p.gamma
        distance *= 2
    exits[0] = ready[0]
    return exits


def _butterfly(p, nodes, ready, sizes, reduced):
    """Pairwise exchanges with ``rank ^ distance``; ``sizes`` maps each distance (in order) to bytes."""
    ready = numpy.array(ready, dtype=float)
    index = numpy.arange(nodes.ranks)
    for distance, nbytes in sizes:
        cost = _message_time(p, nbytes, distance >= nodes.ranks_per_node)
        ready = numpy.maximum(ready, ready[index ^ distance]) + cost + (nbytes * p.gamma if reduced else 0.0)
    return ready


def _mpi_reduce(p, nodes, ready, nbytes):
    ranks = nodes.ranks
    if nbytes <= MPICH_THRESHOLDS["reduce_short"] or nbytes // ELEMENT < ranks:
        return _binomial_reduce(p, nodes, ready, nbytes)
    halving = [(ranks >> k, nbytes / (1 << k)) for k in range(1, _log2(ranks) + 1)]
    ready = _butterfly(p, nodes, ready, halving, reduced=True)
    exits = ready.copy()  # then a binomial gather of the pieces to rank 0
    distance = 1
    while distance < ranks:
        parents = numpy.arange(0, ranks, 2 * distance)
        children = parents + distance
        arrived = numpy.maximum(ready[children], ready[parents]) + _message_time(
            p, distance * nbytes / ranks, distance >= nodes.ranks_per_node)
        exits[children] = arrived
        ready[parents] = arrived
        distance *= 2
    exits[0] = ready[0]
    return exits


def _mpi_allreduce(p, nodes, ready, nbytes):
    ranks = nodes.ranks
    if nbytes <= MPICH_THRESHOLDS["allreduce_short"] or nbytes // ELEMENT < ranks:
        return _butterfly(p, nodes, ready, [(1 << k, nbytes) for k in range(_log2(ranks))], reduced=True)
    halving = [(ranks >> k, nbytes / (1 << k)) for k in range(1, _log2(ranks) + 1)]
    doubling = [(1 << k, (1 << k) * nbytes / ranks) for k in range(_log2(ranks))]
    return _butterfly(p, nodes, _butterfly(p, nodes, ready, halving, reduced=True), doubling, reduced=False)


def _node_view(nodes, arrivals):
    return numpy.asarray(arrivals, dtype=float).reshape(nodes.count, nodes.ranks_per_node)


def _fixed_leaders(p, nodes, arrivals, nbytes, allreduce):
    """Exit times under :mod:`sparsecoll.hierarchy`'s fixed leaders (three node barriers)."""
    per_node = nodes.ranks_per_node
    b = barrier(nodes, p)
    node_ready = (_node_view(nodes, arrivals) + nbytes * p.copy).max(axis=1) + 2 * b \
        + (per_node - 1) * nbytes / per_node * p.gamma
    inter = _mpi_allreduce if allreduce else _mpi_reduce
    leader_exit = inter(p, nodes.leaders(), node_ready, nbytes)
    exits = numpy.repeat(leader_exit + b, per_node)
    if allreduce:
        return exits + nbytes * p.copy
    exits[0] += nbytes * p.copy  # the root copies out
    return exits


def _dynamic_leaders(p, nodes, arrivals, nbytes, allreduce):
    """Exit times with dynamic leaders (section III): deposit on arrival, the last arrival leads."""
    view = _node_view(nodes, arrivals)
    deposit = nbytes * (p.copy + p.gamma)
    piece = min(nbytes, p.deposit_chunk) * (p.copy + p.gamma)
    order = numpy.argsort(view, axis=1, kind="stable")
    exits = numpy.empty_like(view)
    node_ready = numpy.empty(nodes.count)
    for n in range(nodes.count):  # deposits pipeline chunk by chunk through the node's shared buffer
        done = -numpy.inf
        for i in order[n]:
            done = max(view[n, i] + deposit, done + piece)
            exits[n, i] = done
        node_ready[n] = done
    control = p.control_messages * p.alpha_n
    if allreduce:  # every rank waits for the result, which the node's last arrival fetches
        leaders = _mpi_allreduce(p, nodes.leaders(), node_ready, nbytes) + control * _log2(nodes.count)
        return (numpy.maximum(exits, leaders[:, None]) + nbytes * p.copy).ravel()
    leader_exit = _binomial_reduce(p, nodes.leaders(), node_ready, nbytes, edge_extra=control)
    last = order[1:, -1]  # other nodes: the last arrival leads; the root's node: the root
    exits[numpy.arange(1, nodes.count), last] = leader_exit[1:]
    exits[0, 0] = leader_exit[0] + nbytes * p.copy  # the root stays for the result
    return exits.ravel()


METHODS = ("MPI library", "fixed leaders", "dynamic leaders")


def times_inside(collective: str, nodes: Nodes, nbytes: int, arrivals, params: Params = Params()) -> dict:
    """Seconds each rank spends inside ``collective`` ("Reduce" to rank 0 or "Allreduce") per method
    of :data:`METHODS`, when rank ``r`` enters at ``arrivals[r]`` seconds."""
    if collective not in ("Reduce", "Allreduce"):
        raise ValueError(f"collective: expected 'Reduce' or 'Allreduce', got {collective!r}")
    arrivals = numpy.asarray(arrivals, dtype=float)
    if arrivals.shape != (nodes.ranks,):
        raise ValueError(f"arrivals: expected {nodes.ranks} times, got shape {arrivals.shape}")
    allreduce = collective == "Allreduce"
    mpi = (_mpi_allreduce if allreduce else _mpi_reduce)(params, nodes, arrivals, nbytes)
    exits = {"MPI library": mpi,
             "fixed leaders": _fixed_leaders(params, nodes, arrivals, nbytes, allreduce),
             "dynamic leaders": _dynamic_leaders(params, nodes, arrivals, nbytes, allreduce)}
    return {name: exit - arrivals for name, exit in exits.items()}


def mean_times_inside(collective: str, nodes: Nodes, nbytes: int, imbalance_seconds: float,
                      repetitions: int = 10, seed: int = 0, params: Params = Params()) -> dict:
    """Mean over ranks and repetitions of :func:`times_inside`, arrivals uniform in
    ``[0, imbalance_seconds]`` (a fresh draw per repetition from ``numpy.random.default_rng(seed)``)."""
    if imbalance_seconds < 0 or not math.isfinite(imbalance_seconds):
        raise ValueError(f"imbalance_seconds: expected a finite non-negative time, got {imbalance_seconds!r}")
    if repetitions < 1:
        raise ValueError(f"repetitions: expected at least 1, got {repetitions!r}")
    rng = numpy.random.default_rng(seed)
    sums = dict.fromkeys(METHODS, 0.0)
    for _ in range(repetitions):
        arrivals = rng.uniform(0.0, imbalance_seconds, nodes.ranks)
        for name, spent in times_inside(collective, nodes, nbytes, arrivals, params).items():
            sums[name] += spent.mean() / repetitions
    return sums
