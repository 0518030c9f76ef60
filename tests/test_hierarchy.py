"""SetupInter arithmetic and the alltoall placement of Fig. 2 (universal hierarchical algorithm):
pure functions of byte sizes, checked on small layouts by hand and against a brute-force model."""

from __future__ import annotations

import itertools

import numpy
import pytest

from sparsecoll.hierarchy.offsets import (
    aligned,
    alltoall_receive_placement,
    alltoall_send_placement,
    element_slices,
    exclusive_sum,
    gather_placement,
)

#: three nodes of uneven size, the middle one not a consecutive rank range
MEMBERS = ((0, 1, 2), (3, 5), (4,))


def test_exclusive_sum():
    assert exclusive_sum([3, 0, 2]).tolist() == [0, 3, 3]
    assert exclusive_sum([]).tolist() == []


def test_gather_placement_groups_nodes():
    sizes = [1, 2, 3, 4, 5, 6]
    offsets, counts, displs = gather_placement(sizes, MEMBERS)
    # node order: ranks 0, 1, 2 | 3, 5 | 4
    assert offsets.tolist() == [0, 1, 3, 6, 16, 10]
    assert counts.tolist() == [6, 10, 5]
    assert displs.tolist() == [0, 6, 16]


def test_gather_placement_zero_sizes():
    offsets, counts, displs = gather_placement([0, 0, 4, 0, 0, 0], MEMBERS)
    assert counts.tolist() == [4, 0, 0] and displs.tolist() == [0, 4, 4]
    assert offsets[2] == 0


def test_fig2_send_placement_by_hand():
    """Two nodes of two ranks, blocks of one byte: the four blocks for node 1 lie together,
    source by source (Fig. 2)."""
    members = ((0, 1), (2, 3))
    sizes = numpy.ones((2, 4), dtype=numpy.int64)
    offsets, counts, displs = alltoall_send_placement(sizes, members)
    assert offsets.tolist() == [[0, 1, 4, 5], [2, 3, 6, 7]]
    assert counts.tolist() == [4, 4] and displs.tolist() == [0, 4]


def _model(send, recv, members):
    """Brute force: run the inter-node alltoallv on the placements and check every block arrives."""
    nodes = len(members)
    placed = {}
    for n, ranks in enumerate(members):
        offsets, counts, displs = alltoall_send_placement(send[n], members)
        buffer = [None] * int(counts.sum())
        for p, r in itertools.product(range(len(ranks)), range(send[n].shape[1])):
            for b in range(int(send[n][p, r])):
                buffer[int(offsets[p, r]) + b] = (ranks[p], r, b)
        placed[n] = (buffer, counts, displs)
    for m, ranks in enumerate(members):
        offsets, counts, displs = alltoall_receive_placement(recv[m], members)
        received = []
        for n in range(nodes):
            buffer, send_counts, send_displs = placed[n]
            assert send_counts[m] == counts[n]  # both ends agree on the chunk sizes
            received += buffer[int(send_displs[m]):int(send_displs[m] + send_counts[m])]
        for q, r in itertools.product(range(len(ranks)), range(recv[m].shape[1])):
            got = received[int(offsets[q, r]):int(offsets[q, r] + recv[m][q, r])]
            assert got == [(r, ranks[q], b) for b in range(int(recv[m][q, r]))]


@pytest.mark.parametrize("seed", range(5))
def test_fig2_alltoallv_placement_delivers_every_block(seed):
    rng = numpy.random.default_rng(seed)
    size = 6
    counts = rng.integers(0, 3, size=(size, size))  # counts[s][d]: bytes s sends to d (zeros included)
    send = {n: counts[list(ranks), :] for n, ranks in enumerate(MEMBERS)}
    recv = {n: counts[:, list(ranks)].T for n, ranks in enumerate(MEMBERS)}
    _model(send, recv, MEMBERS)


def test_element_slices():
    assert element_slices(7, 3) == [(0, 3), (3, 5), (5, 7)]
    assert element_slices(1, 3) == [(0, 1), (1, 1), (1, 1)]
    assert element_slices(0, 2) == [(0, 0), (0, 0)]


def test_aligned():
    assert aligned(0) == 0 and aligned(1) == 64 and aligned(64) == 64 and aligned(65, 8) == 72
