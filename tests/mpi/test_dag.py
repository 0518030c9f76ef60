"""The DAG executor (SC12 section III-C): a send starts once its own dependencies have
completed, not when its whole step has, and ordering dependencies hold on the wire.

Runs on every rank (launched by ``tests/test_mpi.py``); the wavefront test needs 3 ranks.
"""

from __future__ import annotations

import contextlib
import time

import numpy
import pytest
from mpi4py import MPI

import sparsecoll
from sparsecoll.algorithms import REGISTRY, Algorithm, register
from sparsecoll.pattern import SEND, Message, Pattern, Step

WORLD = MPI.COMM_WORLD
RANK, SIZE = WORLD.Get_rank(), WORLD.Get_size()
WAVEFRONT = "test_wavefront"


def _wavefront_build(topology, comm, options, family):
    """Allgather on edges 0->2 and 2->1: rank 0's block reaches rank 2 through rank 1.

    Rank 1's step 0 receives from 0 and from 2; its step 1 forwards 0's block to 2. With
    whole steps the forward waits for rank 2's block too; in the DAG only for rank 0's.
    """
    me = topology.rank
    steps = {0: (Step((Message(1, ((0,),)),), ()),),
             1: (Step((), (Message(0, ((0,),)), Message(2, ((2,),)))), Step((Message(2, ((0,),)),), ())),
             2: (Step((Message(1, ((2,),)),), ()), Step((), (Message(1, ((0,),)),)))}
    return Pattern(family, me, steps.get(me, ()))


@contextlib.contextmanager
def registered(algorithm: Algorithm):
    """``algorithm`` in the registry for the block only: ``auto`` considers every registered
    algorithm, so a test algorithm left there (these fit one graph) would be a candidate of
    every later test in the process (it made ``test_auto``'s choices raise on one rank)."""
    register(algorithm)
    try:
        yield algorithm.name
    finally:
        REGISTRY.pop(algorithm.name, None)


def _wavefront_graph():
    sources = {1: [2], 2: [0]}.get(RANK, [])
    destinations = {0: [2], 2: [1]}.get(RANK, [])
    return WORLD.Create_dist_graph_adjacent(sources, destinations, reorder=False)


def _forward_started_before_rank_2_arrives(executor: str) -> bool:
    """Rank 1 starts the call while rank 2 holds back; True on rank 1 if its forward started
    before rank 2 joined. Every rank returns the same value (broadcast from rank 1)."""
    raw = _wavefront_graph()
    wavefront = Algorithm(WAVEFRONT, "test only: a forward that need not wait for its whole step",
                          families=("allgather",), build=_wavefront_build)
    try:
        with registered(wavefront):
            comm = sparsecoll.wrap(raw, WAVEFRONT, executor=executor)
            send = numpy.array([RANK + 100], dtype="i4")
            recv = numpy.full(raw.Get_dist_neighbors_count()[0], -1, dtype="i4")
            request = comm.Neighbor_allgather_init(send, recv)
            forwarded_early = False
            if RANK == 2:
                WORLD.recv(source=1, tag=77)  # hold back until rank 1 has looked
            request.Start()
            if RANK == 1:
                run = request._current  # the DagRun (dag) or the step's request list (steps)
                deadline = time.monotonic() + 2.0
                while time.monotonic() < deadline:
                    request.Test()
                    if not isinstance(run, list) and run.started > run.receives:
                        forwarded_early = True
                        break
                    time.sleep(0.001)
                WORLD.send(None, dest=2, tag=77)
            request.Wait()
            expected = {1: [102], 2: [100]}.get(RANK, [])
            assert recv.tolist() == expected, f"rank {RANK}: got {recv.tolist()}, expected {expected}"
            request.Free()
            return WORLD.bcast(forwarded_early, root=1)
    finally:
        raw.Free()


@pytest.mark.skipif(SIZE < 3, reason="needs 3 ranks")
def test_dag_forwards_as_soon_as_its_own_dependency_arrived():
    assert _forward_started_before_rank_2_arrives("dag")


@pytest.mark.skipif(SIZE < 3, reason="needs 3 ranks")
def test_steps_wait_for_the_whole_step():
    assert not _forward_started_before_rank_2_arrives("steps")


def test_every_algorithm_runs_on_the_dag_executor_with_steps_derived():
    """plan_stats is the same on both executors (the steps are a view of the same DAG)."""
    raw = WORLD.Create_dist_graph_adjacent([(RANK - 1) % SIZE, (RANK + 1) % SIZE],
                                           [(RANK + 1) % SIZE, (RANK - 1) % SIZE])
    try:
        for name in ("direct", "common_neighbor"):
            steps = sparsecoll.wrap(raw, name)
            dag = sparsecoll.wrap(raw, name, executor="dag")
            send = numpy.arange(2, dtype="i4") + 10 * RANK
            a, b = numpy.zeros(2, "i4"), numpy.ones(2, "i4")
            steps.Neighbor_alltoall(send, a)
            dag.Neighbor_alltoall(send, b)
            assert a.tolist() == b.tolist()
            on_steps, on_dag = steps.plan_stats("alltoall"), dag.plan_stats("alltoall")
            assert (on_steps["executor"], on_dag["executor"]) == ("steps", "dag")
            assert {k: v for k, v in on_steps.items() if k not in ("executor", "build_seconds")} == \
                {k: v for k, v in on_dag.items() if k not in ("executor", "build_seconds")}
    finally:
        raw.Free()


def test_unknown_executor_is_a_value_error_naming_the_argument():
    raw = WORLD.Create_dist_graph_adjacent([], [])
    try:
        with pytest.raises(ValueError, match="executor"):
            sparsecoll.wrap(raw, "direct", executor="wavefront")
    finally:
        raw.Free()


def test_chained_sends_deliver_what_the_library_delivers():
    """A Pattern whose second send waits for its first (as coloring orders them): both
    arrive, at every rank, on the dag executor, bit for bit like the library."""
    def build(topology, comm, options, family):
        pattern = REGISTRY["direct"].build(topology, comm, options, family)
        sends = pattern.steps[0].sends
        after = {(0, i): ((SEND, 0, i - 1),) for i in range(1, len(sends))}
        return Pattern(family, topology.rank, pattern.steps, after=after)
    raw = WORLD.Create_dist_graph_adjacent([(RANK - k) % SIZE for k in (1, 2, 3)],
                                           [(RANK + k) % SIZE for k in (1, 2, 3)])
    try:
        with registered(Algorithm("test_ordered_direct", "test only: direct with chained sends", build=build)) as name:
            comm = sparsecoll.wrap(raw, name, executor="dag")
            send = numpy.arange(3, dtype="f8") + RANK
            got, expected = numpy.zeros(3), numpy.zeros(3)
            raw.Neighbor_alltoall(send, expected)
            request = comm.Ineighbor_alltoall(send, got)
            request.Wait()
            assert got.tolist() == expected.tolist()
    finally:
        raw.Free()
