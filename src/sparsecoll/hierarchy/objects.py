"""mpi4py's lowercase (pickle-based) global collectives on the hierarchical buffer collectives.

Paper: the universal hierarchical algorithm (``../shared/papers/004_cda97251be10abd9.txt``), Fig. 1:
every object collective here is one or two of that paper's buffer collectives on the pickled
bytes, run by the communicator's own hierarchical methods (``Allgather``, ``Allgatherv``,
``Alltoall``, ``Alltoallv``, ``Bcast``, ``Gather``, ``Gatherv``, ``Scatter``, ``Scatterv``):
first the byte counts (an ``int64`` per rank, on the same collective's regular form), then the
bytes (its vector form). Objects are pickled with ``MPI.pickle`` (the pickler mpi4py's own
lowercase methods use, so a user's ``MPI.pickle.__init__(dumps, loads)`` applies here too).

Reductions combine the objects in mpi4py's own order, so a non-commutative or non-associative
``op`` (or floating-point addition) gives mpi4py's result bit for bit: ``reduce`` gathers the
objects at the root and ``allreduce`` on every rank, then :func:`combine` applies ``op`` in the
order of mpi4py's binomial tree (``mpi4py.rc.fast_reduce``, the default) or folds left in rank
order (mpi4py's naive reduction, when that option is off). ``op`` may be an ``MPI.Op`` (applied to the objects
as mpi4py applies it) or any callable of two objects.

Every argument is checked on the calling rank before its first message.
"""

from __future__ import annotations

import numpy
from mpi4py import MPI

from ..checks import mpi_index
from .offsets import exclusive_sum

BYTE = MPI.BYTE


def allgather(comm, sendobj) -> list:
    """``comm.allgather(sendobj)``: every rank's object, in rank order, on every rank."""
    data = _dumps(sendobj)
    sizes = numpy.empty(comm.Get_size(), numpy.int64)
    comm.Allgather(numpy.array([data.size], numpy.int64), sizes)
    received = numpy.empty(int(sizes.sum()), numpy.uint8)
    comm.Allgatherv([data, BYTE], [received, (sizes, exclusive_sum(sizes)), BYTE])
    return _loads(received, sizes)


def alltoall(comm, sendobj) -> list:
    """``comm.alltoall(sendobj)``: item k of ``sendobj`` goes to rank k; item k of the result came from rank k."""
    size = comm.Get_size()
    items = _sequence(sendobj, size, "sendobj")
    pieces = [_dumps(item) for item in items]
    send_sizes = numpy.array([piece.size for piece in pieces], numpy.int64)
    data = numpy.concatenate(pieces) if pieces else numpy.empty(0, numpy.uint8)
    recv_sizes = numpy.empty(size, numpy.int64)
    comm.Alltoall(send_sizes, recv_sizes)
    received = numpy.empty(int(recv_sizes.sum()), numpy.uint8)
    comm.Alltoallv([data, (send_sizes, exclusive_sum(send_sizes)), BYTE],
                   [received, (recv_sizes, exclusive_sum(recv_sizes)), BYTE])
    return _loads(received, recv_sizes)


def bcast(comm, obj, root: int):
    """``comm.bcast(obj, root)``: ``root``'s object on every rank (``obj`` is ignored elsewhere)."""
    root = _root(comm, root)
    is_root = comm.Get_rank() == root
    data = _dumps(obj) if is_root else None
    size = numpy.array([data.size if is_root else 0], numpy.int64)
    comm.Bcast(size, root)
    if not is_root:
        data = numpy.empty(int(size[0]), numpy.uint8)
    comm.Bcast([data, BYTE], root)
    return MPI.pickle.loads(data)  # a copy at the root too, as mpi4py's bcast returns


def gather(comm, sendobj, root: int):
    """``comm.gather(sendobj, root)``: every rank's object, in rank order, at ``root``; None elsewhere."""
    root = _root(comm, root)
    data = _dumps(sendobj)
    is_root = comm.Get_rank() == root
    sizes = numpy.empty(comm.Get_size(), numpy.int64) if is_root else None
    comm.Gather(numpy.array([data.size], numpy.int64), sizes, root)
    if not is_root:
        comm.Gatherv([data, BYTE], None, root)
        return None
    received = numpy.empty(int(sizes.sum()), numpy.uint8)
    comm.Gatherv([data, BYTE], [received, (sizes, exclusive_sum(sizes)), BYTE], root)
    return _loads(received, sizes)


def scatter(comm, sendobj, root: int):
    """``comm.scatter(sendobj, root)``: item k of ``root``'s ``sendobj`` on rank k (ignored elsewhere)."""
    root = _root(comm, root)
    is_root = comm.Get_rank() == root
    data = sizes = None
    if is_root:
        pieces = [_dumps(item) for item in _sequence(sendobj, comm.Get_size(), "sendobj")]
        sizes = numpy.array([piece.size for piece in pieces], numpy.int64)
        data = numpy.concatenate(pieces) if pieces else numpy.empty(0, numpy.uint8)
    mine = numpy.empty(1, numpy.int64)
    comm.Scatter(sizes, mine, root)
    received = numpy.empty(int(mine[0]), numpy.uint8)
    comm.Scatterv(None if data is None else [data, (sizes, exclusive_sum(sizes)), BYTE], [received, BYTE], root)
    return MPI.pickle.loads(received)


def reduce(comm, sendobj, op, root: int):
    """``comm.reduce(sendobj, op, root)``: every rank's object combined by ``op`` (:func:`combine`), at ``root``."""
    op = _op(op)
    items = gather(comm, sendobj, root)
    return None if items is None else combine(items, op)


def allreduce(comm, sendobj, op):
    """``comm.allreduce(sendobj, op)``: every rank's object combined by ``op`` (:func:`combine`), on every rank."""
    op = _op(op)
    return combine(allgather(comm, sendobj), op)


def _dumps(obj) -> numpy.ndarray:
    return numpy.frombuffer(MPI.pickle.dumps(obj), numpy.uint8)


def _loads(received: numpy.ndarray, sizes: numpy.ndarray) -> list:
    starts = exclusive_sum(sizes)
    return [MPI.pickle.loads(received[start:start + size]) for start, size in zip(starts.tolist(), sizes.tolist())]


def _sequence(obj, size: int, arg: str) -> list:
    """``obj``'s ``size`` items; ``None`` is ``size`` Nones, as mpi4py takes it."""
    if obj is None:
        return [None] * size
    try:
        items = list(obj)
    except TypeError:
        raise TypeError(f"{arg}: expected a sequence of {size} objects (one per rank), "
                        f"got {type(obj).__name__}") from None
    if len(items) != size:
        raise ValueError(f"{arg}: {len(items)} objects, but the communicator has {size} ranks")
    return items


def _root(comm, root) -> int:
    index = mpi_index(root)  # as mpi4py reads it
    if index is None:
        raise TypeError(f"root: expected a rank number, got {root!r}")
    if not 0 <= index < comm.Get_size():
        raise ValueError(f"root: {root} is not a rank of this communicator (size {comm.Get_size()})")
    return index


def _op(op):
    unusable = op == MPI.OP_NULL if isinstance(op, MPI.Op) else not callable(op)
    if unusable:
        raise TypeError(f"op: expected an MPI.Op or a callable of two objects, got {op!r}")
    return op


def combine(items: list, op):
    """Rank 0's result of mpi4py's pickle reduction of ``items`` (item k from rank k).

    With ``mpi4py.rc.fast_reduce`` (mpi4py's default): its binomial tree, in which at distance
    ``d = 1, 2, 4, ...`` every rank ``r`` that is a multiple of ``2d`` combines
    ``op(partial[r], partial[r + d])``; without it: ``op`` folded left in rank order.
    """
    import mpi4py

    if not getattr(mpi4py.rc, "fast_reduce", True):
        result = items[0]
        for item in items[1:]:
            result = op(result, item)
        return result
    partial, distance = list(items), 1
    while distance < len(partial):
        for rank in range(0, len(partial) - distance, 2 * distance):
            partial[rank] = op(partial[rank], partial[rank + distance])
        distance *= 2
    return partial[0]
