"""Argument checks shared by sparsecoll's entry points.

Python counts ``True`` and ``False`` as integers; an MPI argument that takes a count, a
rank or a size does not, so every integer check here excludes bools. numpy integers are
accepted wherever Python integers are.
"""

from __future__ import annotations

import math
from numbers import Integral, Real


def is_integer(value) -> bool:
    """Whether ``value`` is a Python or numpy integer (bools are not)."""
    return isinstance(value, Integral) and not isinstance(value, bool)


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
