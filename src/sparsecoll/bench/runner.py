"""The measurement loop (runs on every rank of an mpiexec launch).

Method of Träff and Hunold (ICPP 2019, Appendix A) and the HiPC 2017
microbenchmark: warm-up calls; then repetitions in which the algorithms are
interleaved (their order rotates from one repetition to the next), each call after a
barrier, its time the maximum over ranks. Per algorithm: median and quartiles of
those times, and the median and quartiles of the per-repetition ratio to ``native``.
Pattern build time (Phase 1) and the time of the first call or ``*_init`` (Phase 2,
binding) are measured separately, as maxima over ranks. Results are checked: every
algorithm's receive buffer must equal ``native``'s, bit for bit.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy
from mpi4py import MPI

from ..algorithms import REGISTRY
from ..pattern import family_of
from .. import wrap
from .workloads import Workload

COLLECTIVES = ("allgather", "allgatherv", "alltoall", "alltoallv")


@dataclass
class Buffers:
    """Send and receive buffers and their mpi4py specs for one algorithm and size."""

    send: numpy.ndarray
    recv: numpy.ndarray
    sendspec: object
    recvspec: object


def supported(workload: Workload, family: str) -> list:
    """Registered algorithms (native first) that run ``family`` on this workload."""
    topology = workload.comm.topology
    names = ["native"] + [n for n in REGISTRY if n != "native" and not n.startswith("test_")]
    return [n for n in names if REGISTRY[n].unsupported_reason(topology, family) is None]


def make_buffers(workload: Workload, collective: str, size: int) -> Buffers:
    """Rank-unique payloads laid out for ``collective`` with ``size`` bytes per block/unit."""
    topology = workload.comm.topology
    rank = topology.rank
    family = family_of(collective)
    send_items = [i for i in topology.send_items(family)]
    recv_items = [i for i in topology.recv_items(family)]
    if collective in ("allgather", "alltoall"):
        nsend = 1 if family == "allgather" else len(send_items)
        send = (numpy.arange(nsend * size) + 7 * rank).astype(numpy.uint8)
        recv = numpy.zeros(len(recv_items) * size, dtype=numpy.uint8)
        return Buffers(send, recv, [send, size, MPI.BYTE], [recv, size, MPI.BYTE])

    def units(item):
        return 0 if item is None else workload.units(item)
    if family == "allgather":
        send_counts = [size * workload.units((rank,))]
    else:
        send_counts = [size * units(i) for i in send_items]
    recv_counts = [size * units(i) if i is not None else 0 for i in recv_items]
    send = (numpy.arange(max(sum(send_counts), 1)) + 7 * rank).astype(numpy.uint8)
    recv = numpy.zeros(max(sum(recv_counts), 1), dtype=numpy.uint8)
    recvspec = [recv, (recv_counts, list(numpy.cumsum(recv_counts) - recv_counts)), MPI.BYTE]
    if family == "allgather":
        return Buffers(send, recv, [send, send_counts[0], MPI.BYTE], recvspec)
    sendspec = [send, (send_counts, list(numpy.cumsum(send_counts) - send_counts)), MPI.BYTE]
    return Buffers(send, recv, sendspec, recvspec)


class Call:
    """One algorithm's way of running the collective in the chosen mode."""

    def __init__(self, comm, collective: str, buffers: Buffers, mode: str):
        self.buffers = buffers
        self.mode = mode
        self.request = None
        name = "Neighbor_" + collective
        start = time.perf_counter()
        if mode == "persistent":
            self.request = getattr(comm, name + "_init")(buffers.sendspec, buffers.recvspec)
            self.request.Start()
            self.request.Wait()
        elif mode == "nonblocking":
            self.method = getattr(comm, "I" + name[0].lower() + name[1:])
            self.method(buffers.sendspec, buffers.recvspec).Wait()
        else:
            self.method = getattr(comm, name)
            self.method(buffers.sendspec, buffers.recvspec)
        self.first_seconds = time.perf_counter() - start

    def __call__(self) -> None:
        if self.mode == "persistent":
            self.request.Start()
            self.request.Wait()
        elif self.mode == "nonblocking":
            self.method(self.buffers.sendspec, self.buffers.recvspec).Wait()
        else:
            self.method(self.buffers.sendspec, self.buffers.recvspec)

    def free(self) -> None:
        if self.request is not None:
            self.request.Free()


def _max_over_ranks(world, value: float) -> float:
    return world.allreduce(value, op=MPI.MAX)


def plan_numbers(world, workload: Workload, comm, collective: str, size: int) -> dict:
    """Deterministic numbers over all ranks: steps, messages and bytes sent per rank."""
    stats = comm.plan_stats(collective)
    pattern = comm.pattern(collective)
    me = comm.topology.rank
    multiplier = (lambda item: 1) if collective in ("allgather", "alltoall") else workload.units
    sent_bytes = sum(size * multiplier(item) for step in pattern.steps for m in step.sends if m.peer != me
                     for item in m.items)
    rows = world.allgather((stats["steps"], stats["sends_to_others"], stats["send_items"], sent_bytes))
    steps, messages, items, nbytes = (numpy.array(column) for column in zip(*rows))
    extra = {k: v for k, v in stats.items() if k not in ("algorithm", "family", "steps", "sends", "recvs",
                                                           "send_items", "recv_items", "sends_to_others",
                                                           "build_seconds") and isinstance(v, (int, float, str))}
    return {"steps_max": int(steps.max()), "messages_max": int(messages.max()),
            "messages_mean": float(messages.mean()), "items_max": int(items.max()),
            "bytes_max": int(nbytes.max()), "bytes_mean": float(nbytes.mean()),
            "rank0_info": extra}


def measure(world, workload: Workload, collective: str, size: int, algorithms: list, *, mode: str,
            reps: int, warmup: int, on_progress=None) -> dict:
    """Interleaved measurement of ``algorithms`` for one workload, collective and size."""
    family = family_of(collective)
    comms, build_seconds, calls, plans = {}, {}, {}, {}
    for name in algorithms:
        world.Barrier()
        start = time.perf_counter()
        comm = wrap(workload.comm, name)
        if name != "native":
            comm.pattern(collective)
        build_seconds[name] = _max_over_ranks(world, time.perf_counter() - start)
        comms[name] = comm
        plans[name] = plan_numbers(world, workload, comm, collective, size)
    for name, comm in comms.items():
        world.Barrier()
        calls[name] = Call(comm, collective, make_buffers(workload, collective, size), mode)
    first = {name: _max_over_ranks(world, call.first_seconds) for name, call in calls.items()}
    for _ in range(warmup):
        for call in calls.values():
            call()
    samples = {name: numpy.empty(reps) for name in algorithms}
    timer = MPI.Wtime
    for rep in range(reps):
        shift = rep % len(algorithms)
        for name in algorithms[shift:] + algorithms[:shift]:
            call = calls[name]
            world.Barrier()
            t0 = timer()
            call()
            samples[name][rep] = timer() - t0
    result = {"workload": workload.spec, "topology": workload.name, "collective": collective,
              "family": family, "size": size, "mode": mode, "reps": reps, "algorithms": {}}
    reference = calls["native"].buffers.recv if "native" in calls else None
    for name in algorithms:
        worst = numpy.empty(reps)
        world.Allreduce(samples[name], worst, op=MPI.MAX)
        agree = True if reference is None else bool(numpy.array_equal(calls[name].buffers.recv, reference))
        agree = world.allreduce(agree, op=MPI.LAND)
        result["algorithms"][name] = {"samples": worst.tolist(), "build_seconds": build_seconds[name],
                                      "first_call_seconds": first[name], "agrees_with_native": agree,
                                      "plan": plans[name]}
        if on_progress is not None:
            on_progress()
    for call in calls.values():
        call.free()
    return result
