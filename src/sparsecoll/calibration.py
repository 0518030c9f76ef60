"""Measure the Hockney parameters of a communicator: latency ``alpha`` and time per byte ``beta``.

The model charges ``alpha + beta * m`` seconds for a message of ``m`` bytes. Ranks pair
up (0-1, 2-3, ...; a lone rank times messages to itself) and ping-pong a small and a
large message; half the median round trip is the one-way time. The maximum over ranks
is returned on every rank, so choices made from it agree everywhere:
``sparsecoll.wrap(comm, "auto", **hockney_parameters(comm))``.
"""

from __future__ import annotations

import time

import numpy
from mpi4py import MPI

SMALL_BYTES = 8
LARGE_BYTES = 1 << 16
#: Floors that keep the model meaningful when timer noise makes a difference negative.
MIN_ALPHA = 1e-9
MIN_BETA = 1e-13


def _one_way_seconds(comm: MPI.Comm, partner: int, nbytes: int, repetitions: int) -> float:
    """Half the median round trip of ``nbytes`` between this rank and ``partner``."""
    buffer = numpy.zeros(nbytes, dtype=numpy.uint8)
    reply = numpy.empty_like(buffer)
    rank = comm.Get_rank()
    samples = []
    for _ in range(repetitions + 1):  # the first round trip warms the path up
        start = time.perf_counter()
        if partner == rank:
            comm.Sendrecv(buffer, rank, 0, reply, rank, 0)
        elif rank < partner:
            comm.Send(buffer, partner, 0)
            comm.Recv(reply, partner, 0)
        else:
            comm.Recv(reply, partner, 0)
            comm.Send(buffer, partner, 0)
        samples.append(time.perf_counter() - start)
    return float(numpy.median(samples[1:])) / 2


def hockney_parameters(comm: MPI.Comm, repetitions: int = 20) -> dict:
    """``{"alpha": seconds, "beta": seconds per byte}`` measured on ``comm`` (collective)."""
    if repetitions < 1:
        raise ValueError(f"repetitions: expected at least 1, got {repetitions}")
    comm = comm.Dup()
    try:
        rank, size = comm.Get_rank(), comm.Get_size()
        partner = rank ^ 1 if (rank ^ 1) < size else rank
        small = _one_way_seconds(comm, partner, SMALL_BYTES, repetitions)
        large = _one_way_seconds(comm, partner, LARGE_BYTES, repetitions)
        beta = max((large - small) / (LARGE_BYTES - SMALL_BYTES), MIN_BETA)
        alpha = max(small - beta * SMALL_BYTES, MIN_ALPHA)
        alpha, beta = comm.allreduce((alpha, beta), op=_pairwise_max)
    finally:
        comm.Free()
    return {"alpha": alpha, "beta": beta}


def _pairwise_max(a: tuple, b: tuple) -> tuple:
    return tuple(max(x, y) for x, y in zip(a, b))
