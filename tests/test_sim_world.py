"""The virtual-rank communicator: MPI matching, collectives, deadlock detection, counters."""

from __future__ import annotations

import pickle

import pytest
from mpi4py import MPI

from sparsecoll.sim import DeadlockError, RankError, SimulationError, World
from sparsecoll.topology import graph_topology
from sparsecoll.topology.generators import moore, random_sparse

pytestmark = pytest.mark.timeout(60)


def test_non_overtaking_with_wildcards():
    def fn(comm):
        if comm.rank == 0:
            for tag in (1, 2, 3, 2):
                comm.send(("a", tag), 1, tag)
            return None
        if comm.rank == 1:
            first = comm.recv(source=0, tag=3)  # skips the earlier tags
            rest = [comm.recv(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG) for _ in range(3)]
            return first, rest
    results = World(2).run(fn)
    assert results[1] == (("a", 3), [("a", 1), ("a", 2), ("a", 2)])


def test_envelope_index_keeps_arrival_order_for_every_kind_of_receive():
    """Receives naming source and tag (envelope index) and wildcard ones (arrival list) mix."""
    arrivals = [(1, 7), (2, 7), (1, 8), (1, 7), (2, 7), (1, 7), (2, 8)]  # (source, tag)

    def fn(comm):
        if comm.rank == 0:
            comm.barrier()  # every message has arrived
            got = [comm.recv(source=1, tag=7), comm.recv(source=2, tag=7),
                   comm.recv(source=MPI.ANY_SOURCE, tag=7)]
            status = MPI.Status()
            probed = comm.iprobe(source=1, tag=MPI.ANY_TAG, status=status)
            got.append(comm.recv(source=1, tag=MPI.ANY_TAG))
            got += [comm.recv(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG) for _ in range(3)]
            return probed, status.Get_tag(), got
        other = 3 - comm.rank
        for i, (source, tag) in enumerate(arrivals):  # a token orders the two senders' sends
            if source != comm.rank:
                continue
            if i > 0 and arrivals[i - 1][0] != comm.rank:
                comm.recv(source=other, tag=99)
            comm.send((source, tag, i), 0, tag)
            if i + 1 < len(arrivals) and arrivals[i + 1][0] != comm.rank:
                comm.send("token", other, 99)
        comm.barrier()
    probed, tag, got = World(3).run(fn)[0]
    assert probed and tag == 8
    assert got == [(1, 7, 0), (2, 7, 1), (1, 7, 3), (1, 8, 2), (2, 7, 4), (1, 7, 5), (2, 8, 6)]


def test_repeated_sends_of_one_object_carry_its_contents_at_each_send():
    """A list changed between two sends arrives changed; an immutable object is pickled once."""
    def fn(comm):
        if comm.rank == 0:
            rows = [1]
            comm.send(rows, 1, 0)
            rows.append(2)
            comm.send(rows, 1, 0)
            choice = (3, None)
            for _ in range(2):
                comm.send(choice, 1, 1)
            return None
        return [comm.recv(source=0, tag=0) for _ in range(2)] + [comm.recv(source=0, tag=1) for _ in range(2)]
    world = World(2)
    assert world.run(fn)[1] == [[1], [1, 2], (3, None), (3, None)]
    assert world.counters[0].messages == 4


def test_any_source_status_and_posted_order():
    def fn(comm):
        if comm.rank == 0:
            reqs = [comm.irecv(source=MPI.ANY_SOURCE, tag=5) for _ in range(3)]
            comm.barrier()
            out = []
            for req in reqs:
                status = MPI.Status()
                value = req.wait(status)
                out.append((value, status.Get_source(), status.Get_tag()))
            return out
        comm.barrier()
        if comm.rank > 1:
            comm.recv(source=comm.rank - 1, tag=1)  # a token orders the sends causally
        comm.send(comm.rank * 100, 0, 5)
        if comm.rank < comm.size - 1:
            comm.send("token", comm.rank + 1, 1)
    results = World(4).run(fn)
    # ranks 1..3 send in rank order; posted receives match in posting order
    assert results[0] == [(100, 1, 5), (200, 2, 5), (300, 3, 5)]


def test_receive_gets_a_copy_and_counts_pickle_bytes():
    payload = {"x": [1, 2, 3]}

    def fn(comm):
        if comm.rank == 0:
            comm.send(payload, 1, 0)
            payload["x"].append(4)  # must not change what rank 1 receives
        else:
            return comm.recv(source=0)
    world = World(2)
    results = world.run(fn)
    assert results[1] == {"x": [1, 2, 3]}
    assert world.counters[0].messages == 1
    assert world.counters[0].bytes == len(pickle.dumps({"x": [1, 2, 3]}, pickle.HIGHEST_PROTOCOL))
    assert world.counters[1].messages == 0


def test_one_payload_to_many_peers_gives_each_its_own_copy():
    """Equal payloads share their bytes in flight; every receiver still unpickles its own object."""
    def fn(comm):
        if comm.rank == 0:
            rows = [1, 2, 3]
            for peer in (1, 2, 3):
                comm.isend(rows, peer, 4).wait()
            return None
        got = comm.recv(source=0, tag=4)
        got.append(comm.rank)  # must not show at the other receivers
        return got
    world = World(4)
    results = world.run(fn)
    assert results[1:] == [[1, 2, 3, 1], [1, 2, 3, 2], [1, 2, 3, 3]]
    assert world.counters[0].messages == 3
    assert world.counters[0].bytes == 3 * len(pickle.dumps([1, 2, 3], pickle.HIGHEST_PROTOCOL))


def test_probe_iprobe_sendrecv_and_proc_null():
    def fn(comm):
        n, r = comm.size, comm.rank
        got = comm.sendrecv(r, (r + 1) % n, 9, source=(r - 1) % n, recvtag=9)
        status = MPI.Status()
        if r == 0:
            comm.send("late", 1, 4)
        if r == 1:
            comm.probe(MPI.ANY_SOURCE, 4, status)
            assert comm.iprobe(0, 4)
            assert not comm.iprobe(0, 5)
            assert comm.recv(source=status.Get_source(), tag=status.Get_tag()) == "late"
        assert comm.recv(source=MPI.PROC_NULL) is None
        comm.send("nothing", MPI.PROC_NULL)
        return got
    assert World(3).run(fn) == [2, 0, 1]


def test_dup_has_its_own_matching_space():
    def fn(comm):
        dup = comm.Dup()
        if comm.rank == 0:
            dup.send("dup", 1, 0)
            comm.send("world", 1, 0)
        else:
            return comm.recv(source=MPI.ANY_SOURCE), dup.recv(source=MPI.ANY_SOURCE)
    assert World(2).run(fn)[1] == ("world", "dup")


@pytest.mark.parametrize("op, expected", [(MPI.SUM, 10), (MPI.MAX, 4), (MPI.MIN, 1),
                                          (MPI.LAND, True), (MPI.LOR, True)])
def test_allreduce_ops(op, expected):
    def fn(comm):
        value = comm.rank + 1 if op not in (MPI.LAND, MPI.LOR) else comm.rank >= 0
        return comm.allreduce(value, op=op)
    assert World(4).run(fn) == [expected] * 4


def test_collectives():
    def fn(comm):
        r, n = comm.rank, comm.size
        return {
            "bcast": comm.bcast([r] if r == 2 else None, root=2),
            "allgather": comm.allgather(r * r),
            "alltoall": comm.alltoall([(r, j) for j in range(n)]),
            "gather": comm.gather(r, root=1),
            "scatter": comm.scatter(list(range(10, 10 + n)) if r == 0 else None, root=0),
            "reduce": comm.reduce(r, MPI.SUM, root=0),
        }
    results = World(3).run(fn)
    for r, res in enumerate(results):
        assert res["bcast"] == [2]
        assert res["allgather"] == [0, 1, 4]
        assert res["alltoall"] == [(s, r) for s in range(3)]
        assert res["gather"] == ([0, 1, 2] if r == 1 else None)
        assert res["scatter"] == 10 + r
        assert res["reduce"] == (3 if r == 0 else None)
    # each rank's list is its own object
    results[0]["bcast"].append(9)
    assert results[1]["bcast"] == [2]


def test_neighbor_exchanges_follow_edge_matching():
    # rank 0 sends twice to 1 (repeated edge), once to 2; 2 sends to 0; 1 has no out-edges
    sources = [[2], [0, 0], [0]]
    destinations = [[1, 2, 1], [], [0]]
    topologies = [graph_topology(r, 3, sources[r], destinations[r]) for r in range(3)]

    def fn(comm):
        assert comm.Get_dist_neighbors()[:2] == (sources[comm.rank], destinations[comm.rank])
        assert comm.Get_dist_neighbors_count()[:2] == (len(sources[comm.rank]), len(destinations[comm.rank]))
        gathered = comm.neighbor_allgather(f"from{comm.rank}")
        personal = comm.neighbor_alltoall([f"{comm.rank}->{d}#{k}" for k, d in enumerate(destinations[comm.rank])])
        return gathered, personal
    results = World(3, topologies).run(fn)
    assert results[0] == (["from2"], ["2->0#0"])
    assert results[1] == (["from0", "from0"], ["0->1#0", "0->1#2"])
    assert results[2] == (["from0"], ["0->2#1"])


def test_nbx_protocol_with_issend_iprobe_ibarrier():
    """Hoefler's NBX: a polling loop must let other ranks progress."""
    def fn(comm):
        r, n = comm.rank, comm.size
        targets = [(r + 1) % n, (r + 3) % n]
        reqs = [comm.issend(r, t, 7) for t in targets]
        got, barrier = [], None
        status = MPI.Status()
        while True:
            if comm.iprobe(MPI.ANY_SOURCE, 7, status):
                got.append(comm.recv(source=status.Get_source(), tag=7))
            if barrier is None:
                if all(req.test()[0] for req in reqs):
                    barrier = comm.ibarrier()
            elif barrier.test()[0]:
                return sorted(got)
    n = 6
    results = World(n).run(fn)
    assert results == [sorted([(r - 1) % n, (r - 3) % n]) for r in range(n)]


def test_deadlock_names_who_waits_on_whom():
    def fn(comm):
        comm.recv(source=(comm.rank + 1) % comm.size, tag=3)
    with pytest.raises(DeadlockError) as info:
        World(3).run(fn)
    message = str(info.value)
    assert "cycle 0 -> 1 -> 2 -> 0" in message
    assert "rank 1 waits in recv(source=2, tag=3)" in message
    assert info.value.waits[2][1] == frozenset([0])


def test_deadlock_in_collective_names_missing_ranks():
    def fn(comm):
        if comm.rank != 2:
            comm.barrier()
        else:
            comm.recv(source=0)
    with pytest.raises(DeadlockError) as info:
        World(4).run(fn)
    assert "barrier on comm 0: ranks [2] have not called it" in str(info.value)


def test_livelock_of_pollers_is_reported():
    def fn(comm):
        while not comm.iprobe(MPI.ANY_SOURCE, 1):
            pass
    with pytest.raises(DeadlockError, match="polling"):
        World(2).run(fn)


def test_collective_mismatch_and_rank_errors():
    def mismatch(comm):
        comm.barrier() if comm.rank == 0 else comm.allgather(1)
    with pytest.raises(RankError) as info:
        World(2).run(mismatch)
    assert isinstance(info.value.__cause__, SimulationError)
    assert "collective mismatch" in str(info.value)

    def bad_dest(comm):
        comm.send(1, 5)
    with pytest.raises(RankError, match="out of range"):
        World(2).run(bad_dest)


def test_protocol_depth_counts_rounds():
    def fn(comm):
        if comm.rank == 0:
            comm.send("request", 1)
            return comm.recv(source=1)
        if comm.rank == 1:
            comm.send(comm.recv(source=0) + "-reply", 0)
    world = World(3)
    assert world.run(fn)[0] == "request-reply"
    assert [c.depth for c in world.counters] == [2, 1, 0]
    world.run(lambda comm: comm.barrier())
    assert [c.depth for c in world.counters] == [3, 3, 3]
    assert [c.collectives for c in world.counters] == [1, 1, 1]


@pytest.mark.parametrize("size, error", [(0, ValueError), (-3, ValueError), (2.0, TypeError), ("4", TypeError),
                                         (True, TypeError)])
def test_sizes_must_be_positive_integers(size, error):
    for make in (World, lambda n: random_sparse(n, 0.5), lambda n: moore(n, 2, 1)):
        with pytest.raises(error, match="size: expected a positive integer"):
            make(size)


@pytest.mark.parametrize("D, R, error",
                         [(0, 1, ValueError), (2, 0, ValueError), (2.5, 1, TypeError), (2, "1", TypeError)])
def test_moore_dimension_and_radius_must_be_positive_integers(D, R, error):
    with pytest.raises(error, match="[DR]: expected a positive integer"):
        moore(16, D, R)
