"""The cost model of the universal hierarchical algorithm and of dynamic-leader reductions (no MPI)."""

from __future__ import annotations

import numpy
import pytest

from sparsecoll.model.hierarchy import (
    COLLECTIVES,
    Nodes,
    Params,
    barrier,
    flat,
    hierarchical,
    mean_times_inside,
    speedup,
    times_inside,
)

P = Params()


@pytest.mark.parametrize("collective", COLLECTIVES)
def test_one_node_hierarchy_is_only_copies_and_barriers(collective):
    nodes = Nodes(1, 16)
    cost = hierarchical(collective, nodes, 1024, P)
    assert cost.link_messages == 0 and cost.link_bytes == 0
    assert cost.seconds >= 2 * barrier(nodes, P) + 2 * 1024 * P.copy
    assert flat(collective, nodes, 1024, P).link_messages == 0


@pytest.mark.parametrize("collective", ["Bcast", "Scatter", "Gather", "Reduce"])
def test_one_node_tree_collectives_cost_more_hierarchically(collective):
    nodes = Nodes(1, 32)
    assert hierarchical(collective, nodes, 8, P).seconds > flat(collective, nodes, 8, P).seconds


@pytest.mark.parametrize("count,per_node,block", [(16, 8, 8), (64, 32, 1024), (8, 4, 65536)])
def test_fig2_alltoall_sends_one_message_per_node_pair(count, per_node, block):
    nodes = Nodes(count, per_node)
    assert hierarchical("Alltoall", nodes, block, P).link_messages == count - 1
    assert hierarchical("Alltoallv", nodes, block, P).link_messages == count - 1
    # the flat pairwise/scattered exchange: every rank sends to every rank of the other nodes
    assert flat("Alltoallv", nodes, block, P).link_messages == per_node * (nodes.ranks - per_node)


def test_recursive_doubling_allgather_crosses_each_link_with_R_times_the_bytes():
    nodes = Nodes(64, 16)
    assert flat("Allgather", nodes, 8, P).algorithm == ["recursive doubling"]
    assert flat("Allgather", nodes, 8, P).link_bytes == 16 * hierarchical("Allgather", nodes, 8, P).link_bytes


@pytest.mark.parametrize("collective", ["Allgather", "Alltoallv", "Reduce_scatter"])
def test_small_message_speedup_grows_with_ranks_per_node(collective):
    ratios = [speedup(collective, Nodes(64, r), 8, P) for r in (4, 8, 16, 32)]
    assert ratios == sorted(ratios) and ratios[-1] > 2 * ratios[0]


def test_binomial_reduce_without_imbalance_matches_the_closed_form():
    nodes, nbytes = Nodes(8, 4), 128
    spent = times_inside("Reduce", nodes, nbytes, numpy.zeros(32), P)["MPI library"]
    root = 2 * (P.alpha_s + nbytes * P.beta_s) + 3 * (P.alpha_n + nbytes * P.beta_n) + 5 * nbytes * P.gamma
    assert spent[0] == pytest.approx(root)
    assert spent[1] == pytest.approx(P.alpha_s + nbytes * P.beta_s)  # a leaf sends once and leaves


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("nbytes", [128, 2048, 32768, 524288])
def test_dynamic_leaders_never_slower_than_fixed_under_imbalance(seed, nbytes):
    arrivals = numpy.random.default_rng(seed).uniform(0, 0.05, 512)
    spent = times_inside("Reduce", Nodes(32, 16), nbytes, arrivals, P)
    assert spent["dynamic leaders"].mean() <= spent["fixed leaders"].mean()
    assert spent["dynamic leaders"].mean() < spent["MPI library"].mean()


@pytest.mark.parametrize("seed", range(3))
def test_nobody_leaves_an_allreduce_before_the_last_arrival(seed):
    arrivals = numpy.random.default_rng(seed).uniform(0, 0.01, 256)
    for collective in ("Allreduce", "Reduce"):
        for method, spent in times_inside(collective, Nodes(16, 16), 2048, arrivals, P).items():
            must_wait = arrivals.max() - arrivals
            if collective == "Reduce":  # only the root must see every contribution
                assert spent[0] >= must_wait[0], method
            else:
                assert numpy.all(spent >= must_wait), method


def test_dynamic_leaders_deposit_and_leave():
    arrivals = numpy.random.default_rng(7).uniform(0, 0.1, 64)
    nodes, nbytes = Nodes(4, 16), 2048
    spent = times_inside("Reduce", nodes, nbytes, arrivals, P)["dynamic leaders"].reshape(4, 16)
    deposit = nbytes * (P.copy + P.gamma)
    leaders = arrivals.reshape(4, 16).argmax(axis=1)
    for n in range(1, 4):
        others = numpy.delete(spent[n], leaders[n])
        assert numpy.allclose(others, deposit)  # sparse arrivals: no one waits for the shared buffer
    assert spent[0, 0] >= arrivals.max() - arrivals[0]


def test_zero_control_messages_make_dynamic_leaders_cheaper_by_exactly_the_control_cost():
    arrivals = numpy.random.default_rng(3).uniform(0, 0.01, 128)
    nodes = Nodes(8, 16)
    with_control = times_inside("Reduce", nodes, 128, arrivals, P)["dynamic leaders"]
    without = times_inside("Reduce", nodes, 128, arrivals, Params(control_messages=0))["dynamic leaders"]
    root_extra = with_control[0] - without[0]
    assert 0 < root_extra <= 3 * 2 * P.alpha_n + 1e-12  # at most log2(8) edges of two control messages


def test_means_are_seeded_and_validated():
    a = mean_times_inside("Reduce", Nodes(4, 4), 128, 0.01, repetitions=3, seed=1)
    assert a == mean_times_inside("Reduce", Nodes(4, 4), 128, 0.01, repetitions=3, seed=1)
    assert a != mean_times_inside("Reduce", Nodes(4, 4), 128, 0.01, repetitions=3, seed=2)
    with pytest.raises(ValueError, match="count"):
        Nodes(3, 4)
    with pytest.raises(ValueError, match="collective"):
        flat("Allgatherw", Nodes(2, 2), 8)
    with pytest.raises(ValueError, match="arrivals"):
        times_inside("Reduce", Nodes(2, 2), 8, [0.0, 0.0])
    with pytest.raises(ValueError, match="alpha_n"):
        Params(alpha_n=-1.0)


def test_a_rendezvous_send_waits_for_its_receiver_an_eager_one_does_not():
    arrivals = [1.0, 0.0]  # the root's node arrives one second after the other node
    nodes = Nodes(2, 1)
    eager = times_inside("Reduce", nodes, P.eager_limit, arrivals, P)["dynamic leaders"]
    rendezvous = times_inside("Reduce", nodes, 2 * P.eager_limit, arrivals, P)["dynamic leaders"]
    assert eager[1] < 1e-3
    assert rendezvous[1] > 1.0
