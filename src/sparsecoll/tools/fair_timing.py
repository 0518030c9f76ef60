"""Equal conditions for every variant the benchmark and the calibration time side by side.

* **Call order.** Every repetition calls every variant once, in a random order drawn anew
  each repetition from one seed, the same on every rank (so every rank makes the same
  calls). A fixed or rotating order would make each variant always follow the same other
  variant, and whatever that one leaves behind (a multi-step request's progress-thread
  wake-ups, a cache it filled) would always land on the same column.
* **Creation order.** Identical persistent requests made one after another ran 2-3 % faster
  for each later place while glibc's mmap threshold still moved (see below); the benchmark makes
  a row's variants in an order drawn from the row (:func:`creation_order`), so that no column
  is always made first or last.
* **Memory.** glibc's ``malloc`` serves a large block from a fresh ``mmap`` until a block
  that large is freed, then raises its threshold and serves blocks of that size from the
  heap (the dynamic mmap threshold). Which kind of memory a variant's buffers get then
  depends on when they were allocated: measured here (8 ranks on 2 cores, Moore D=2 R=1,
  64 KiB persistent alltoall, four identical library requests created one after another,
  300 interleaved repetitions, six runs), the library's own request ran at 0.55-1.71x of an
  identical one created first, on both libraries; with the threshold fixed, at 0.97-1.03x.
  :func:`fix_malloc_threshold` fixes it at glibc's initial value before any buffer exists,
  and the benchmark gives each of its buffers a fresh anonymous mapping of its own
  (:func:`fresh_buffer`): page-aligned, and the same kind of memory for every variant
  whatever its size or the moment it was made (a buffer below the threshold would come
  from the heap, at a place that depends on what was allocated before).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import platform
import time
import zlib

import numpy

#: Seed of the repetitions' call order.
ORDER_SEED = 20171218
#: ``mallopt``'s parameter number for the mmap threshold (glibc ``malloc.h``: ``M_MMAP_THRESHOLD``).
M_MMAP_THRESHOLD = -3
#: glibc's initial mmap threshold (bytes): blocks from this size up always get their own mmap.
MMAP_THRESHOLD = 128 * 1024


def call_orders(count: int):
    """Endless permutations of ``range(count)``, one per repetition, the same on every rank."""
    rng = numpy.random.default_rng(ORDER_SEED)
    while True:
        yield rng.permutation(count).tolist()


def interleaved_medians(comm, calls: list, reps: int, between: tuple = (), after_repetition=None) -> list:
    """Per call of ``calls``, the median over ``reps`` repetitions of the maximum over ranks of one
    call's time: every repetition makes every call once in :func:`call_orders`' order, each after
    a barrier, then each of ``between`` (untimed, each after a barrier: other work a program does
    between them). Collective over ``comm`` (one allreduce per repetition); every rank gets the list.
    ``after_repetition(done)``, if given, is called with the number of repetitions done after each."""
    from mpi4py import MPI
    samples = numpy.zeros((reps, len(calls)))
    local = numpy.zeros(len(calls))
    orders = call_orders(len(calls))
    for rep in range(reps):
        for i in next(orders):
            comm.Barrier()
            start = time.perf_counter()
            calls[i]()
            local[i] = time.perf_counter() - start
        for call in between:
            comm.Barrier()
            call()
        comm.Allreduce(local, samples[rep], op=MPI.MAX)
        if after_repetition is not None:
            after_repetition(rep + 1)
    return numpy.median(samples, axis=0).tolist()


def creation_order(count: int, *row) -> list:
    """A permutation of ``range(count)`` drawn from ``row`` (values every rank holds alike, such as
    the workload's name, the collective and the block size): the same on every rank, different
    from row to row."""
    row_seed = zlib.crc32(repr(row).encode())
    return numpy.random.default_rng([ORDER_SEED, row_seed]).permutation(count).tolist()


def fix_malloc_threshold() -> dict:
    """Fix glibc's mmap threshold at :data:`MMAP_THRESHOLD` (which also turns off its dynamic
    adjustment); returns the setting for the results' record (empty where libc is not glibc or
    refuses)."""
    if platform.libc_ver()[0] != "glibc":
        return {}
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    if libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) != 1:
        return {}
    return {"malloc_mmap_threshold": MMAP_THRESHOLD}


def fresh_buffer(values: numpy.ndarray) -> numpy.ndarray:
    """A copy of the uint8 array ``values`` in a fresh anonymous mapping of its own (page-aligned)."""
    mapping = mmap.mmap(-1, max(values.size, 1))
    buffer = numpy.frombuffer(mapping, dtype=numpy.uint8)[:values.size]
    buffer[:] = values
    return buffer
