"""The RTR tree of SC12 II-C2 (:mod:`sparsecoll.execute.rtr_tree`): its shape, and that the
combined payloads of every tree deliver each receiver's block to the sender where the sender
looks for it. Pure: the roles a sender would send are handed over in-process."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsecoll.execute import rtr_tree
from sparsecoll.execute.rtr_tree import check_degree, kary_tree, sender_tree


def _levels(n: int, degree: int) -> int:
    """Levels below the root of a complete tree of ``n`` nodes under the root."""
    depth, capacity, width = 0, 0, 1
    while capacity < n:
        width *= degree
        capacity += width
        depth += 1
    return depth


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 7, 8, 13, 40])
@pytest.mark.parametrize("degree", [1, 2, 3, 4])
def test_kary_tree_is_a_complete_tree_of_logarithmic_depth(n, degree):
    parent, children, depth = kary_tree(list(range(100, 100 + n)), degree)
    assert sorted(parent) == list(range(1, n + 1))
    assert all(len(c) <= degree for c in children.values())
    assert sorted(c for cs in children.values() for c in cs) == list(range(1, n + 1))
    assert all(parent[c] == p for p, cs in children.items() for c in cs)
    assert depth == _levels(n, degree)
    assert len(children[0]) == min(n, degree)  # the sender gets at most `degree` RTR messages


def test_the_paper_example_four_receivers_two_messages():
    """Fig. 5(b): process 0 of the 2-D Cartesian example, four receivers, two RTRs to the root."""
    roles, children, blocks, depth = sender_tree(0, {1: 1, 2: 1, 3: 1, 4: 1}, 2)
    assert [c for c, _ in children] == [1, 2]
    assert depth == 2
    assert roles[1][0] == roles[2][0] == 0 and roles[3][0] == roles[4][0] == 1
    assert blocks[1] == [(1, 1), (3, 1), (4, 1)] and blocks[2] == [(2, 1)]


def _payload(node: int, roles: dict, messages: dict) -> list:
    """What ``node`` sends its parent in one sender's tree: its block, then its children's payloads."""
    out = [(node, j) for j in range(messages[node])]
    claimed = roles[node][1]
    for child, subtree in claimed:
        part = _payload(child, roles, messages)
        assert len(part) == subtree  # the parent receives exactly what it expects
        out.extend(part)
    return out


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.integers(0, 30), st.integers(1, 3), max_size=25), st.integers(1, 5), st.integers(0, 30))
def test_every_block_reaches_the_sender_where_it_looks(sends, degree, sender):
    """Simulate one tree: every receiver other than the sender appears exactly once, and the
    sender's block table points each receiver at its own addresses."""
    roles, children, blocks, depth = sender_tree(sender, sends, degree)
    receivers = sorted(p for p in sends if p != sender)
    assert sorted(roles) == receivers
    order = [r for r in receivers if r > sender] + [r for r in receivers if r < sender]  # cyclic, after the sender
    assert [receiver for child, _ in children for receiver, _ in blocks[child]][:1] == order[:1]
    assert list(blocks) == [c for c, _ in children]
    seen = []
    for child, subtree in children:
        payload = _payload(child, roles, sends)
        assert len(payload) == subtree
        offset = 0
        for receiver, count in blocks[child]:
            assert payload[offset:offset + count] == [(receiver, j) for j in range(count)]
            offset += count
            seen.append(receiver)
        assert offset == len(payload)
    assert sorted(seen) == receivers
    assert depth == _levels(len(receivers), degree)


def test_flat_roles_are_one_message_per_peer():
    class M:
        def __init__(self, peer):
            self.peer = peer
    roles = rtr_tree.flat_roles(2, [M(0), M(0), M(2), M(5)], [M(5), M(2), M(1)])
    assert roles.parent == {5: 5, 1: 1}
    assert roles.children[2] == [(5, 1), (0, 2)]  # in rank order after the sender
    assert roles.blocks == {0: [(0, 2)], 5: [(5, 1)]}
    assert rtr_tree.counts([roles]) == {"rtr_sent": 2, "rtr_received": 2, "rtr_received_as_sender": 2,
                                        "rtr_tree_depth": 1}


@pytest.mark.parametrize("bad, error", [(0, ValueError), (-2, ValueError), (2.0, TypeError), (True, TypeError)])
def test_bad_degrees_name_the_option(bad, error):
    with pytest.raises(error, match="executor_options: rtr_tree"):
        check_degree(bad)
