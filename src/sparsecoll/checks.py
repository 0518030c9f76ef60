"""Argument checks shared by sparsecoll's entry points.

Python counts ``True`` and ``False`` as integers; sparsecoll's own arguments that take a count,
a rank or a size do not, so :func:`is_integer` and the checks built on it exclude bools. numpy
integers are accepted wherever Python integers are. The arguments of an MPI call that sparsecoll
runs in mpi4py's place (counts, displacements, roots) are read as mpi4py reads them instead:
through ``__index__`` (:func:`mpi_index`).
"""

from __future__ import annotations

import math
import operator
from numbers import Integral, Real


def is_integer(value) -> bool:
    """Whether ``value`` is a Python or numpy integer (bools are not)."""
    return isinstance(value, Integral) and not isinstance(value, bool)


def mpi_index(value) -> int | None:
    """``value`` as mpi4py reads a count, displacement or root of an MPI call, or None where it
    reads none: through ``__index__`` (``operator.index``), so ints, bools, numpy integers, 0-d
    integer arrays and any object with ``__index__`` are taken, and floats, numpy bools and longer
    arrays are not."""
    try:
        return operator.index(value)
    except TypeError:
        return None


def _integer_from(value, arg: str, low: int, what: str) -> int:
    """``value`` as an ``int`` >= ``low``: TypeError naming ``arg`` for a non-integer, ValueError below."""
    if not is_integer(value):
        raise TypeError(f"{arg}: expected a {what} integer, got {value!r}")
    if value < low:
        raise ValueError(f"{arg}: expected a {what} integer, got {value}")
    return int(value)


def positive_integer(value, arg: str) -> int:
    """``value`` as an ``int`` >= 1: TypeError naming ``arg`` for a non-integer, ValueError below 1."""
    return _integer_from(value, arg, 1, "positive")


def nonnegative_integer(value, arg: str) -> int:
    """``value`` as an ``int`` >= 0: TypeError naming ``arg`` for a non-integer, ValueError below 0."""
    return _integer_from(value, arg, 0, "non-negative")


def nonnegative_number(value, arg: str) -> float:
    """``value`` as a finite ``float`` >= 0: TypeError naming ``arg`` for a non-number, ValueError below 0."""
    if not isinstance(value, Real) or isinstance(value, bool):
        raise TypeError(f"{arg}: expected a non-negative number, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{arg}: expected a finite non-negative number, got {value}")
    return float(value)


def reduction_op(op) -> None:
    """The ``op`` of a reduction (``Reduce``, ``Allreduce``, ...): TypeError naming it unless an
    ``MPI.Op`` other than ``OP_NULL``, ValueError for ``REPLACE`` and ``NO_OP`` (the standard
    defines them for one-sided accumulates only); checked on every rank before anything is sent,
    where every rank passes the same op."""
    from mpi4py import MPI
    if not isinstance(op, MPI.Op) or op == MPI.OP_NULL:
        raise TypeError(f"op: expected an MPI.Op, got {op!r}")
    if op == MPI.REPLACE or op == MPI.NO_OP:
        raise ValueError("op: MPI.REPLACE and MPI.NO_OP are for one-sided accumulates, not reductions")


#: Tags MPI guarantees on every communicator.
GUARANTEED_TAG_UB = 32767

#: The largest count MPI's ``int`` arguments hold: Open MPI 5.0 has no large-count calls and
#: refuses more (``MPI_ERR_ARG``; MPICH 5.0.2 moves it), so sparsecoll never passes a larger one.
MAX_COUNT = 2**31 - 1


def tag_upper_bound(attribute) -> int:
    """The largest tag, from a communicator's ``TAG_UB`` attribute (``Get_attr(MPI.TAG_UB)``): the
    32767 MPI guarantees where the library gives none (Open MPI 5.0.11's Cartesian communicators)."""
    return int(attribute) if attribute else GUARANTEED_TAG_UB
