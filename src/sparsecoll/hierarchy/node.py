"""Nodes of a communicator and the shared memory of each node: the structure under the
universal hierarchical algorithm (the paper on hierarchical shared-memory collectives and
imbalanced process arrival, section II "Universal Hierarchical Algorithm", Fig. 1): "a per node
communicator used for node synchronization, and a communicator with only the leaders [...] used
to call the MPI collective", plus the shared buffer (SharedBuff) of each node.

:class:`NodeLayout` splits a communicator into nodes (collective over it):

* by default with ``Split_type(COMM_TYPE_SHARED)``, the ranks that really share memory;
* with ``ranks_per_node=k`` (an option every rank passes alike), nodes of ``k`` consecutive
  ranks (the last one may be smaller), to emulate nodes on one machine;
* else with the placement override of :mod:`sparsecoll.topology.placement`
  (``SPARSECOLL_PLACEMENT=LxS``: ``L*S`` consecutive ranks per node).

Nodes are numbered in the order of their lowest rank; inside a node, ranks keep their order in
the communicator, and the lowest one is the node's leader. The leader communicator orders the
leaders by node index.

:class:`SharedWindow` is one ``Win.Allocate_shared`` window per node, grown (never shrunk)
by :meth:`SharedWindow.ensure`, collective over the node communicator. Memory model: the window
is locked once (``Lock_all`` with ``MODE_NOCHECK``) for its whole life and ranks access it with
loads and stores; :meth:`SharedWindow.sync` (``Win.Sync``, node ``Barrier``, ``Win.Sync``) is
the synchronization MPI-3 prescribes for shared windows, correct under the unified model (the one
MPICH and Open MPI report for shared windows, see :attr:`SharedWindow.memory_model`) and under
the separate model, where ``Win.Sync`` reconciles the public and private copies.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy
from mpi4py import MPI

from .. import reductions
from ..checks import positive_integer
from ..topology import placement as placement_module

#: Segment sizes are rounded up to a multiple of this many bytes (alignment of every segment).
ALIGNMENT = 64


@dataclass(eq=False)
class NodeLayout:
    """How the ranks of ``comm`` group into nodes (see the module docstring).

    ``node_comm``: the ranks of this rank's node; ``leader_comm``: one rank per node (the
    lowest), ``MPI.COMM_NULL`` on the other ranks; ``node``: this rank's node index;
    ``node_rank``: its rank in ``node_comm``; ``members``: per node, the ranks of ``comm``
    on it in order; ``node_of``: per rank of ``comm``, its node; ``source``: how the nodes
    were found.
    """

    comm: MPI.Intracomm
    node_comm: MPI.Intracomm
    leader_comm: MPI.Intracomm
    node: int
    node_rank: int
    members: tuple
    node_of: tuple
    source: str

    @classmethod
    def create(cls, comm: MPI.Intracomm, ranks_per_node=None) -> NodeLayout:
        """Split ``comm`` into nodes (collective over ``comm``; ``ranks_per_node`` alike on every rank)."""
        if not isinstance(comm, MPI.Intracomm) or comm == MPI.COMM_NULL:
            raise TypeError(f"comm: expected an mpi4py intracommunicator, got {type(comm).__name__}")
        size, rank = comm.Get_size(), comm.Get_rank()
        if ranks_per_node is not None:
            per_node = positive_integer(ranks_per_node, "ranks_per_node")
            source = f"option ranks_per_node={per_node}"
        else:
            forced = placement_module.agreed_override(comm)  # each rank's environment: compared
            per_node = None
            if forced is not None:
                per_node = forced.placement.L * forced.placement.S
                source = f"{forced.source}: {per_node} ranks per node"
        if per_node is not None:
            node_comm = comm.Split(rank // per_node, rank)
            node_of = tuple(r // per_node for r in range(size))
        else:
            node_comm, lowest = placement_module.split_nodes(comm)
            lowest_of = MPI.Intracomm.allgather(comm, lowest)  # the library's, on a wrapper too
            order = {low: index for index, low in enumerate(sorted(set(lowest_of)))}
            node_of = tuple(order[low] for low in lowest_of)
            source = "detected: Split_type(COMM_TYPE_SHARED)"
        node_rank = node_comm.Get_rank()
        leader_comm = comm.Split(0 if node_rank == 0 else MPI.UNDEFINED, rank)
        members = [[] for _ in range(max(node_of) + 1)]
        for r, n in enumerate(node_of):
            members[n].append(r)
        return cls(comm, node_comm, leader_comm, node_of[rank], node_rank,
                   tuple(tuple(m) for m in members), node_of, source)

    @property
    def nodes(self) -> int:
        """The number of nodes."""
        return len(self.members)

    @property
    def ranks_per_node(self) -> tuple:
        """Per node, how many ranks it holds."""
        return tuple(len(m) for m in self.members)

    @property
    def is_leader(self) -> bool:
        """Whether this rank is its node's leader (it takes part in the inter-node collective)."""
        return self.node_rank == 0

    @property
    def contiguous(self) -> bool:
        """Whether every node holds a consecutive range of ranks, nodes in rank order (what a
        non-commutative reduction over the leaders needs)."""
        return all(self.node_of[r] <= self.node_of[r + 1] for r in range(len(self.node_of) - 1))

    def position(self, rank: int) -> int:
        """The rank of ``comm``-rank ``rank`` inside its node."""
        return self.members[self.node_of[rank]].index(rank)

    def free(self) -> None:
        """Free the node and leader communicators (collective over ``comm``)."""
        if self.leader_comm != MPI.COMM_NULL:
            self.leader_comm.Free()
        if self.node_comm != MPI.COMM_NULL:
            self.node_comm.Free()
        self.node_comm = self.leader_comm = MPI.COMM_NULL


class SharedWindow:
    """A shared-memory buffer of one node: one segment of ``segment_bytes`` per node rank,
    consecutive in node-rank order, all allocated by node rank 0 so the node region is one
    contiguous range every rank maps.

    Made empty; :meth:`ensure` grows it (collective over the node communicator).
    """

    def __init__(self, node_comm: MPI.Intracomm):
        """An empty window over ``node_comm`` (no communication until :meth:`ensure`)."""
        self.node_comm = node_comm
        self.segment_bytes = 0
        self.window = None
        self.memory_model = None
        self._region = numpy.zeros(0, dtype=numpy.uint8)
        self.regrowths = 0

    @property
    def region_bytes(self) -> int:
        """Bytes of the whole node region (all segments)."""
        return self.segment_bytes * self.node_comm.Get_size()

    def ensure(self, nbytes: int, *, agreed: bool = False) -> bool:
        """Make every segment at least ``nbytes`` long (collective over the node communicator).

        Without ``agreed`` the size is the largest ``nbytes`` of the node's ranks (one small
        allreduce on the node); with ``agreed=True`` the caller guarantees that every node rank
        passes the same ``nbytes`` (computed from arguments all ranks share) and nothing is
        communicated unless the window grows. Returns whether it grew; growing frees the old
        memory, so views taken before are invalid.
        """
        if not agreed:
            nbytes = reductions.allreduce(self.node_comm, int(nbytes), op=MPI.MAX)
        if nbytes <= self.segment_bytes:
            return False
        grown = max(int(nbytes), 2 * self.segment_bytes)
        grown = -(-grown // ALIGNMENT) * ALIGNMENT
        self._release()
        size = self.node_comm.Get_size()
        mine = grown * size if self.node_comm.Get_rank() == 0 else 0
        window = MPI.Win.Allocate_shared(mine, 1, comm=self.node_comm)
        memory, _ = window.Shared_query(0)
        self.window = window
        self.memory_model = window.Get_attr(MPI.WIN_MODEL)
        window.Lock_all(MPI.MODE_NOCHECK)
        self._region = numpy.frombuffer(memory, dtype=numpy.uint8, count=grown * size)
        self.segment_bytes = grown
        self.regrowths += 1
        return True

    def region(self) -> numpy.ndarray:
        """The whole node region as a writable uint8 array (every rank sees the same memory)."""
        return self._region

    def segment(self, node_rank: int) -> numpy.ndarray:
        """The segment of node rank ``node_rank`` as a writable uint8 array."""
        start = node_rank * self.segment_bytes
        return self._region[start:start + self.segment_bytes]

    def sync(self) -> None:
        """Node barrier that orders every rank's loads and stores in the window before it
        against every load and store after it (collective over the node communicator)."""
        if self.window is not None:
            self.window.Sync()
            self.node_comm.Barrier()
            self.window.Sync()
        else:
            self.node_comm.Barrier()

    def _release(self) -> None:
        if self.window is not None:
            self._region = numpy.zeros(0, dtype=numpy.uint8)
            self.window.Unlock_all()
            self.window.Free()
            self.window = None

    def free(self) -> None:
        """Free the window (collective over the node communicator)."""
        self._release()
        self.segment_bytes = 0
