"""Executors run bound Schedules; the table below lists them (``wrap(comm, algorithm, executor=name)``).

* ``steps`` (:mod:`.p2p`, the default): persistent point-to-point requests over absolute
  addresses, one ``Startall`` per step once the previous step has completed.
* ``dag`` (:mod:`.dag`, SC12 section III-C): the same messages, each started as soon as the
  messages it depends on have completed (an active queue driven by ``Testsome``/``Waitsome``).

An executor is a class ``Executor(comm, schedule, tag)`` with ``steps`` and ``free()``.
``steps`` are the stages run one after the other: a list of persistent MPI requests
(started together, complete when all are), or an object with ``start()``, ``test()``,
``wait()``, ``handles`` and ``completed(position)`` that decides itself what to start
next (:class:`.dag.DagRun`); :mod:`sparsecoll.runtime.progress` runs both kinds.
"""

from __future__ import annotations

from .dag import Executor as DagExecutor
from .p2p import Executor as StepExecutor

#: Every executor, by name.
EXECUTORS: dict = {"steps": StepExecutor, "dag": DagExecutor}
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
