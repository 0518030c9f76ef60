"""Argument checks shared by sparsecoll's entry points.

Python counts ``True`` and ``False`` as integers; an MPI argument that takes a count, a
rank or a size does not, so every integer check here excludes bools. numpy integers are
accepted wherever Python integers are.
"""

from __future__ import annotations

from numbers import Integral


def is_integer(value) -> bool:
    """Whether ``value`` is a Python or numpy integer (bools are not)."""
    return isinstance(value, Integral) and not isinstance(value, bool)


def positive_integer(value, arg: str) -> int:
    """``value`` as an ``int`` >= 1: TypeError naming ``arg`` for a non-integer, ValueError below 1."""
    if not is_integer(value):
        raise TypeError(f"{arg}: expected a positive integer, got {value!r}")
    if value < 1:
        raise ValueError(f"{arg}: expected a positive integer, got {value}")
    return int(value)
