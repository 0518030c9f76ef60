"""Reductions of small Python objects over a communicator, as sparsecoll's set-up makes them.

mpi4py's own ``allreduce``, ``reduce``, ``scan`` and ``exscan`` of Python objects (with
``mpi4py.rc.fast_reduce``, the default) run point to point on a duplicate of the communicator
that the first such call on a communicator makes, and mpi4py makes it (``MPI_Comm_dup``,
collective) *holding the GIL*. While one thread waits there for its peers, no other thread of the
process runs Python; where a peer's matching thread in turn waits for one of those threads, every
rank waits for good. Raw mpi4py 4.1.2 hangs so on MPICH 5.0.2 and on Open MPI 5.0.11: 3 ranks, 3
threads per rank, each duplicating a communicator of its own, ``allreduce`` on the copy and
``Free`` in a loop (``Allreduce`` of arrays, or ``mpi4py.rc.fast_reduce = False``, completes).
sparsecoll's pattern protocols run on a fresh duplicate each, so two threads building patterns
at once on two communicators hung every rank.

These gather every rank's object with ``allgather`` (whose waits release the GIL) and combine
them in rank order, as mpi4py's reductions combine them; ``op`` is an ``MPI.Op`` (applied to the
objects as mpi4py applies it) or any function of two objects. Set-up traffic only: the objects
are small, and each call is one ``allgather`` (mpi4py's: two MPI collectives), though of ``P``
objects to every rank where mpi4py's reduction moves ``O(log P)``; at thousands of ranks a
``loggp_tree`` build (three per balancing iteration) pays that in bytes, not in rounds.

A virtual communicator of :mod:`sparsecoll.sim` (not an ``MPI.Comm``: one thread, its ranks
greenlets) keeps its own reduction, which combines the objects once for all ranks: gathering
them to every virtual rank made a ``loggp_tree`` build on a 2048-rank hot spot 5x slower.
"""

from __future__ import annotations

from functools import reduce

from mpi4py import MPI


def allreduce(comm, obj, op=MPI.SUM):
    """``comm.allreduce(obj, op)``'s result without mpi4py's reduction (collective over ``comm``)."""
    if not isinstance(comm, MPI.Comm):  # a virtual communicator: its own
        return comm.allreduce(obj, op=op)
    return reduce(op, comm.allgather(obj))


def exscan(comm, obj, op=MPI.SUM):
    """``comm.exscan(obj, op)``'s result without mpi4py's reduction: the objects of the lower ranks
    combined in rank order, None on rank 0 (collective over ``comm``)."""
    if not isinstance(comm, MPI.Comm):  # a virtual communicator: its own
        return comm.exscan(obj, op=op)
    lower = comm.allgather(obj)[:comm.Get_rank()]
    return reduce(op, lower) if lower else None
