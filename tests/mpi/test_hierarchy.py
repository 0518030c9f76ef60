"""The universal hierarchical algorithm's structure and collectives: node layouts (emulated and
detected), the growable shared window, and every global collective bit for bit against the MPI
library's own call on COMM_WORLD.

Runs on every rank (launched by ``tests/test_mpi.py``).
"""

from __future__ import annotations

import pytest
from mpi4py import MPI

from sparsecoll.hierarchy import NodeLayout, SharedWindow

WORLD = MPI.COMM_WORLD
RANK, SIZE = WORLD.Get_rank(), WORLD.Get_size()
#: emulated ranks per node: one rank per node, pairs, triples (uneven last node when SIZE % 3)
RANKS_PER_NODE = (1, 2, 3)


@pytest.mark.parametrize("per_node", RANKS_PER_NODE)
def test_emulated_layout(per_node):
    layout = NodeLayout.create(WORLD, ranks_per_node=per_node)
    try:
        assert layout.node == RANK // per_node
        assert layout.node_rank == RANK % per_node
        assert layout.nodes == -(-SIZE // per_node)
        assert sum(layout.ranks_per_node) == SIZE
        assert layout.members[layout.node][layout.node_rank] == RANK
        assert layout.position(RANK) == layout.node_rank
        assert layout.node_comm.Get_size() == layout.ranks_per_node[layout.node]
        assert layout.contiguous
        if layout.is_leader:
            assert layout.leader_comm.Get_size() == layout.nodes
            assert layout.leader_comm.Get_rank() == layout.node
        else:
            assert layout.leader_comm == MPI.COMM_NULL
    finally:
        layout.free()
    assert layout.node_comm == MPI.COMM_NULL


def test_detected_layout_matches_shared_memory():
    layout = NodeLayout.create(WORLD)
    try:
        shared = WORLD.Split_type(MPI.COMM_TYPE_SHARED)
        assert layout.node_comm.Get_size() == shared.Get_size()
        assert layout.source.startswith("detected")
        shared.Free()
    finally:
        layout.free()


def test_placement_override(monkeypatch):
    per_node = min(2, SIZE)
    monkeypatch.setenv("SPARSECOLL_PLACEMENT", f"{per_node}x1")
    layout = NodeLayout.create(WORLD)
    try:
        assert layout.node == RANK // per_node
        assert "SPARSECOLL_PLACEMENT" in layout.source
    finally:
        layout.free()


def test_bad_ranks_per_node():
    with pytest.raises(ValueError, match="ranks_per_node"):
        NodeLayout.create(WORLD, ranks_per_node=0)
    with pytest.raises(TypeError, match="ranks_per_node"):
        NodeLayout.create(WORLD, ranks_per_node=1.5)


@pytest.mark.parametrize("per_node", (2, 3))
def test_shared_window_grows_and_is_shared(per_node):
    layout = NodeLayout.create(WORLD, ranks_per_node=per_node)
    window = SharedWindow(layout.node_comm)
    try:
        assert window.ensure(10 + RANK)  # sizes differ per rank: the node's largest wins
        first = window.segment_bytes
        assert first >= max(10 + r for r in layout.members[layout.node])
        window.segment(layout.node_rank)[:] = RANK % 251
        window.sync()
        for position, rank in enumerate(layout.members[layout.node]):
            assert (window.segment(position) == rank % 251).all()
        assert window.region().size == first * layout.node_comm.Get_size()
        window.sync()
        assert not window.ensure(first, agreed=True)
        assert window.ensure(first + 1, agreed=True)
        assert window.segment_bytes > first and window.regrowths == 2
        assert window.memory_model in (MPI.WIN_UNIFIED, MPI.WIN_SEPARATE)
    finally:
        window.free()
        layout.free()
