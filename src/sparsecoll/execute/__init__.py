"""Executors run bound Schedules; the table below lists them (``wrap(comm, algorithm, executor=name)``).

* ``steps`` (:mod:`.p2p`, the default): persistent point-to-point requests over absolute
  addresses, one ``Startall`` per step once the previous step has completed.

An executor is a class ``Executor(comm, schedule, tag)`` with ``steps`` (lists of persistent
MPI requests, started one list after the other) and ``free()``.
"""

from __future__ import annotations

from .p2p import Executor as StepExecutor

#: Every executor, by name.
EXECUTORS: dict = {"steps": StepExecutor}
#: The executor of ``wrap`` without ``executor=``.
DEFAULT_EXECUTOR = "steps"


def get(name) -> type:
    """The executor class registered as ``name`` (ValueError naming the argument otherwise)."""
    if not isinstance(name, str):
        raise TypeError(f"executor: expected a string, got {type(name).__name__}")
    try:
        return EXECUTORS[name]
    except KeyError:
        raise ValueError(f"executor: expected one of {sorted(EXECUTORS)}, got {name!r}") from None
