"""The benchmark's and the calibration's equal conditions (sparsecoll.tools.fair_timing)."""

from __future__ import annotations

import platform

from sparsecoll.tools.fair_timing import MMAP_THRESHOLD, call_orders, fix_malloc_threshold


def test_call_orders_are_fresh_permutations_that_every_rank_draws_alike():
    first, second = call_orders(6), call_orders(6)
    orders = [next(first) for _ in range(20)]
    assert orders == [next(second) for _ in range(20)]  # the same sequence in every process
    assert all(sorted(order) == list(range(6)) for order in orders)
    assert len({tuple(order) for order in orders}) > 10  # redrawn, not rotated
    followers = {order[order.index(0) + 1] for order in orders if order.index(0) < 5}
    assert len(followers) > 2  # variant 0 is not always followed by the same variant


def test_the_malloc_threshold_is_fixed_where_libc_is_glibc():
    setting = fix_malloc_threshold()
    if platform.libc_ver()[0] == "glibc":
        assert setting == {"malloc_mmap_threshold": MMAP_THRESHOLD}
    else:
        assert setting == {}


def test_fresh_buffers_are_page_aligned_writable_copies():
    import numpy

    from sparsecoll.tools.fair_timing import fresh_buffer
    values = (numpy.arange(5000) % 251).astype(numpy.uint8)
    buffer = fresh_buffer(values)
    assert buffer.ctypes.data % 4096 == 0 and buffer.flags.writeable
    assert numpy.array_equal(buffer, values) and not numpy.shares_memory(buffer, values)
    assert fresh_buffer(values[:0]).size == 0


def test_creation_order_is_a_permutation_drawn_from_the_row():
    from sparsecoll.tools.fair_timing import creation_order
    first = creation_order(10, "stencil", "alltoall", 8)
    assert sorted(first) == list(range(10))
    assert first == creation_order(10, "stencil", "alltoall", 8)  # every rank draws the same
    rows = {tuple(creation_order(10, "stencil", "alltoall", size)) for size in (8, 256, 4096, 65536)}
    assert len(rows) > 1  # and rows differ


def test_interleaved_medians_call_each_once_per_repetition_in_the_shared_order_then_the_work_between_then_the_hook():
    """Every repetition makes every timed call once, in ``call_orders``' order, then the untimed
    ones; the medians are per call (a call that sleeps longer has the larger one)."""
    import time

    from mpi4py import MPI

    from sparsecoll.tools.fair_timing import interleaved_medians
    made = []

    def timed(name, seconds):
        def call():
            made.append(name)
            time.sleep(seconds)
        return call
    medians = interleaved_medians(MPI.COMM_SELF, [timed(0, 0.0), timed(1, 0.002)], 5, (timed("between", 0.0),),
                                  after_repetition=lambda done: made.append(("done", done)))
    orders = call_orders(2)
    assert made == [name for rep in range(5) for name in (*next(orders), "between", ("done", rep + 1))]
    assert len(medians) == 2 and medians[1] > medians[0] + 0.001
