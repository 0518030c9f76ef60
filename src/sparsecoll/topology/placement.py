"""Where the ranks of a communicator run: nodes, sockets, ranks per socket.

Topology-aware algorithms (the distance-halving allgather of Sharifian, Sojoodi and
Afsahi, 2023, stops halving at ``L`` ranks per socket) read the placement from here.

Detection (collective over the communicator):

* nodes: ``Split_type(COMM_TYPE_SHARED)``, the MPI-3 way every MPI supports;
* sockets: the Linux CPU topology. Each rank reads the CPUs it may run on
  (``sched_getaffinity``) and their ``physical_package_id`` in
  ``/sys/devices/system/cpu``. A rank bound inside one package is on that socket; a rank
  whose affinity spans several packages (not bound, MPICH's default) cannot be placed,
  so its whole node counts as one socket, and the source says so.
  MPI-4 ``COMM_TYPE_HW_GUIDED`` was tried first and rejected: the MPICH 5.0 wheel returns
  ``COMM_NULL`` for every ``mpi_hw_resource_type`` ("Package", "NUMANode", "Socket", ...)
  and the Open MPI 5.0 wheel returns one-rank communicators for "NUMANode" and "Socket"
  when two ranks share the only package, so neither answer can be trusted.

Overrides, strongest first: the options ``ranks_per_socket`` and
``sockets_per_node``; the environment variable ``SPARSECOLL_PLACEMENT=LxS`` (``L`` ranks
per socket, ``S`` sockets per node, ranks placed in order as in
:class:`sparsecoll.model.params.Placement`). A communicator that cannot be split (the
simulator's virtual ranks) and has no override counts as one socket. The environment is each
process's own, so :func:`resolve` on an MPI communicator compares the ranks' overrides (one
allgather): ranks that read different ones, or a bad one, raise ValueError on every rank (one
rank set alone skipped the detection's collectives the others then waited in for good).
"""

from __future__ import annotations

import os
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy

from ..checks import positive_integer

ENVIRONMENT = "SPARSECOLL_PLACEMENT"
#: Where a message goes, nearest first: the pair classes of :meth:`Placement.pair_class`.
PAIR_CLASSES = ("socket", "node", "network")
SYS_CPU = Path("/sys/devices/system/cpu")


@dataclass(frozen=True)
class Placement:
    """``L`` ranks per socket, ``S`` sockets per node, filled in rank order."""

    L: int
    S: int = 1

    def __post_init__(self):
        if self.L < 1 or self.S < 1:
            raise ValueError(f"placement: expected L >= 1 and S >= 1, got L={self.L}, S={self.S}")

    @classmethod
    def parse(cls, text: str) -> Placement:
        """``"36x2"`` -> Placement(L=36, S=2); ``"36"`` -> one socket per node."""
        try:
            parts = [int(x) for x in str(text).lower().split("x")]
        except ValueError:
            parts = []
        if len(parts) not in (1, 2):
            raise ValueError(f"placement: expected 'LxS' (ranks per socket x sockets per node), got {text!r}")
        return cls(*parts)

    def socket(self, rank: int) -> int:
        """Global socket index of ``rank``."""
        return rank // self.L

    def node(self, rank: int) -> int:
        """Node index of ``rank``."""
        return rank // (self.L * self.S)

    def pair_class(self, a: int, b: int) -> str:
        """``"socket"``, ``"node"`` or ``"network"`` for a message between ranks ``a`` and ``b``."""
        return PAIR_CLASSES[int(self.pair_class_indices(a, b))]

    def pair_class_indices(self, src, dst):
        """:meth:`pair_class` as indices into :data:`PAIR_CLASSES`, element-wise for numpy arrays."""
        per_node = self.L * self.S
        same_socket = numpy.equal(numpy.floor_divide(src, self.L), numpy.floor_divide(dst, self.L))
        same_node = numpy.equal(numpy.floor_divide(src, per_node), numpy.floor_divide(dst, per_node))
        return numpy.where(same_socket, 0, numpy.where(same_node, 1, 2))

    def __str__(self) -> str:
        return f"{self.L}x{self.S}"


@dataclass(frozen=True)
class PlacementInfo:
    """The placement an algorithm uses: ``L`` per socket, ``S`` per node, and its source.

    ``contiguous``: every socket holds a contiguous range of ranks (what rank-range
    halving assumes for its locality; correctness never depends on it).
    ``node_index``: where the node of every rank was detected, its index (nodes numbered in
    the order of their lowest rank); None where the placement is an override (ranks fill
    the nodes of ``L * S`` ranks in rank order).
    """

    placement: Placement
    source: str
    contiguous: bool = True
    node_index: tuple | None = None

    @property
    def ranks_per_socket(self) -> int:
        """``L``."""
        return self.placement.L

    @property
    def sockets_per_node(self) -> int:
        """``S``."""
        return self.placement.S

    def nodes(self, size: int) -> tuple:
        """The node index of each of ``size`` ranks (the same on every rank that resolved this placement)."""
        if self.node_index is not None:
            return self.node_index
        return tuple(self.placement.node(rank) for rank in range(size))

    def describe(self) -> dict:
        """The entries algorithms put into ``plan_stats``."""
        return {"placement": str(self.placement), "placement_source": self.source,
                "placement_contiguous": self.contiguous}


def check_override(L, S, size: int, what: str = "") -> Placement:
    """Validate ``L`` ranks per socket and ``S`` sockets per node for ``size`` ranks."""
    prefix = f"{what}: " if what else ""
    L = positive_integer(L, f"{prefix}ranks_per_socket")
    S = positive_integer(S, f"{prefix}sockets_per_node")
    if L > size:
        raise ValueError(f"{prefix}ranks_per_socket: {L} is larger than the communicator ({size} ranks)")
    sockets = -(-size // L)
    if S > sockets:
        raise ValueError(f"{prefix}sockets_per_node: {S} sockets per node, but {size} ranks fill only "
                         f"{sockets} socket(s) of {L} ranks")
    return Placement(L, S)


def override(size: int, ranks_per_socket=None, sockets_per_node=None) -> PlacementInfo | None:
    """The placement the options or ``SPARSECOLL_PLACEMENT`` impose (None: detect)."""
    if ranks_per_socket is not None or sockets_per_node is not None:
        if ranks_per_socket is None:
            raise ValueError("sockets_per_node: given without ranks_per_socket")
        S = 1 if sockets_per_node is None else sockets_per_node
        return PlacementInfo(check_override(ranks_per_socket, S, size), "option")
    text = os.environ.get(ENVIRONMENT)
    if text:
        try:
            parsed = Placement.parse(text)
        except ValueError as exc:
            raise ValueError(f"{ENVIRONMENT}={text!r}: {exc}") from None
        L, S = parsed.L, parsed.S
        return PlacementInfo(check_override(L, S, size, f"{ENVIRONMENT}={text!r}"), f"environment {ENVIRONMENT}")
    return None


def process_cpus() -> set:
    """The CPUs this process may run on (its affinity; every CPU where that cannot be read)."""
    try:
        return set(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return set(range(os.cpu_count() or 1))


def usable_cores() -> int:
    """Cores this process may run on (the launcher's view, before any rank exists; a job's ranks
    on a node may run on :func:`node_cores`)."""
    return len(process_cpus())


def cpu_packages(cpus=None) -> set:
    """Physical package ids of ``cpus`` (default: this process's affinity); empty if unknown."""
    cpus = process_cpus() if cpus is None else cpus
    packages = set()
    for cpu in cpus:
        try:
            packages.add(int((SYS_CPU / f"cpu{cpu}" / "topology" / "physical_package_id").read_text()))
        except (OSError, ValueError):
            return set()
    return packages


def node_cores(comm) -> int:
    """The cores the ranks of ``comm`` on this rank's node may run on, together (collective).

    The union of their CPU affinities (``sched_getaffinity``): a library that binds each rank
    to one core (Open MPI's default when every rank has a core) leaves every rank an affinity of
    one core, which is not the node's. A communicator that cannot be split (the simulator's
    virtual ranks) counts this process's own affinity."""
    mine = sorted(process_cpus())
    if getattr(comm, "Split_type", None) is None:
        return len(mine)
    node_comm, _ = split_nodes(comm)
    try:
        together = node_comm.allgather(mine)
    finally:
        node_comm.Free()
    return len(set().union(*together))


def from_keys(keys) -> PlacementInfo:
    """Placement from every rank's ``(node, socket or None)`` (``None``: unknown socket)."""
    keys = list(keys)
    unknown_nodes = {node for node, socket in keys if socket is None}
    socket_of = [(node, None if node in unknown_nodes else socket) for node, socket in keys]
    members = defaultdict(list)
    for rank, key in enumerate(socket_of):
        members[key].append(rank)
    per_node = defaultdict(set)
    for node, socket in members:
        per_node[node].add(socket)
    L = max(len(ranks) for ranks in members.values())
    S = max(len(sockets) for sockets in per_node.values())
    contiguous = all(ranks[-1] - ranks[0] + 1 == len(ranks) for ranks in members.values())
    source = f"detected: {len(per_node)} node(s), {len(members)} socket(s)"
    if unknown_nodes:
        source += f"; ranks not bound to one package on {len(unknown_nodes)} node(s): node = socket"
    first_rank: dict = {}
    for rank, (node, _) in enumerate(keys):
        first_rank.setdefault(node, rank)
    order = {node: index for index, node in enumerate(sorted(first_rank, key=first_rank.get))}
    return PlacementInfo(Placement(L, S), source, contiguous, tuple(order[node] for node, _ in keys))


def split_nodes(comm) -> tuple:
    """This rank's node: the ranks of ``comm`` that share its memory, as a communicator
    (``Split_type(COMM_TYPE_SHARED)``, ranks in ``comm``'s order), and the node's lowest rank of
    ``comm``, the name of the node every rank on it agrees on (collective over ``comm``). Nodes
    numbered in the order of these names are numbered in the order of their first ranks."""
    from mpi4py import MPI
    node_comm = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    return node_comm, MPI.Intracomm.bcast(node_comm, comm.Get_rank(), root=0)  # the library's, on a wrapper too


def detect(comm) -> PlacementInfo:
    """Detect the placement of ``comm``'s ranks (collective; see the module docstring)."""
    if getattr(comm, "Split_type", None) is None:
        return PlacementInfo(Placement(comm.Get_size(), 1),
                             "none: the communicator reports no placement (one socket)")
    node_comm, node = split_nodes(comm)
    node_comm.Free()
    packages = cpu_packages()
    socket = next(iter(packages)) if len(packages) == 1 else None
    return from_keys(comm.allgather((node, socket)))


def agreed_override(comm, ranks_per_socket=None, sockets_per_node=None) -> PlacementInfo | None:
    """:func:`override` for ``comm``, the same on every rank: collective where ``comm`` is an MPI
    communicator (one allgather, the library's on a wrapper too), where each rank reads its own
    ``SPARSECOLL_PLACEMENT``; ValueError on every rank where some rank's is bad (that rank's own
    error there) or the ranks' differ."""
    try:
        forced, error = override(comm.Get_size(), ranks_per_socket, sockets_per_node), None
    except (ValueError, TypeError) as exc:
        forced, error = None, exc
    MPI = sys.modules.get("mpi4py.MPI")  # not imported: comm is not an MPI communicator
    if MPI is None or not isinstance(comm, MPI.Comm):  # the simulator's virtual ranks share one environment
        if error is not None:
            raise error
        return forced
    mine = None if forced is None else (forced.placement.L, forced.placement.S)
    every = MPI.Comm.allgather(comm, (mine, error is not None))
    if error is not None:
        raise error
    if any(failed for _, failed in every):
        raise ValueError(f"{ENVIRONMENT}: another rank's value is bad (its error names it); the placement "
                         f"decides the messages, so no rank runs")
    if len({placement for placement, _ in every}) > 1:
        seen = sorted({"unset" if p is None else f"{p[0]}x{p[1]}" for p, _ in every})
        raise ValueError(f"{ENVIRONMENT}: the ranks read different placements ({', '.join(seen)}); set it alike "
                         f"on every rank (or on none)")
    return forced


def resolve(comm, ranks_per_socket=None, sockets_per_node=None) -> PlacementInfo:
    """The override if one is given, else :func:`detect` (collective either way: :func:`agreed_override`)."""
    forced = agreed_override(comm, ranks_per_socket, sockets_per_node)
    return forced if forced is not None else detect(comm)


def check_options(size: int, ranks_per_socket=None, sockets_per_node=None) -> None:
    """Check the placement options against ``size`` ranks where given (no communication; the
    environment's override is checked where the placement is resolved, on every rank alike)."""
    if ranks_per_socket is not None or sockets_per_node is not None:
        override(size, ranks_per_socket, sockets_per_node)
