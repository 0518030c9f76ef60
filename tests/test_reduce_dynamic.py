"""The dynamic leaders' inter-node tree (pure): the binomial tree over nodes rooted anywhere."""

from sparsecoll.hierarchy.reduce_dynamic import binomial_children, binomial_parent


def test_binomial_tree_shape():
    for nodes in range(1, 20):
        for root_node in range(nodes):
            seen = []
            for node in range(nodes):
                for child in binomial_children(node, root_node, nodes):
                    assert binomial_parent(child, root_node, nodes) == node
                    seen.append(child)
            assert sorted(seen) == sorted(set(range(nodes)) - {root_node})
            assert binomial_parent(root_node, root_node, nodes) == -1


def test_binomial_tree_depth_is_logarithmic():
    for nodes in (1, 2, 5, 8, 33):
        for root_node in (0, nodes - 1):
            for node in range(nodes):
                depth, current = 0, node
                while current != root_node:
                    current = binomial_parent(current, root_node, nodes)
                    depth += 1
                assert depth <= max(1, (nodes - 1).bit_length())
