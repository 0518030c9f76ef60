"""Executors run bound Schedules; the table below lists them (``wrap(comm, algorithm, executor=name)``).

* ``steps`` (:mod:`.p2p`, the default): persistent point-to-point requests over absolute
  addresses, one ``Startall`` per step once the previous step has completed.
* ``dag`` (:mod:`.dag`, SC12 section III-C): the same messages, each started as soon as the
  messages it depends on have completed (an active queue driven by ``Testsome``/``Waitsome``).
* ``rma`` and ``rma_canary`` (:mod:`.rma`, SC12 sections II-C and III-B): the same messages as
  one-sided puts into a dynamic window, with ready-to-receive messages and generalized
  active target epochs (``rma``) or the canary completion word (``rma_canary``).

An executor is a class ``Executor(comm, schedule, tag)`` with ``steps`` and ``free()``.
``steps`` are the stages run one after the other: a list of persistent MPI requests
(started together, complete when all are), or an object with ``start()``, ``test()``,
``wait()``, ``handles`` and ``completed(position)`` that decides itself what to start
next (:class:`.dag.DagRun`); :mod:`sparsecoll.runtime.progress` runs both kinds. An executor
that needs collective set-up per communicator (a window) has a class method ``prepare(comm)``
returning a :class:`.rma.Prepared` (the factory the runtime calls instead of the class, the
label ``plan_stats`` shows, and ``close()``); :func:`prepare` gives one for every executor.
An executor that takes options (``wrap(..., executor_options={...})``; today the RMA
executors' ``rtr_tree``) has a class method ``check_options(options)``; :func:`check_options`
checks them for any executor.
"""

from __future__ import annotations

from .dag import Executor as DagExecutor
from .p2p import Executor as StepExecutor
from .rma import CanaryExecutor as RmaCanaryExecutor
from .rma import Executor as RmaExecutor
from .rma import Prepared

#: Every executor, by name.
EXECUTORS: dict = {"steps": StepExecutor, "dag": DagExecutor, "rma": RmaExecutor, "rma_canary": RmaCanaryExecutor}
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


def check_options(name: str, options) -> dict:
    """The executor ``name``'s ``options`` checked (errors name ``executor_options``); executors
    without a ``check_options`` take none."""
    cls = get(name)
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise TypeError(f"executor_options: expected a dict, got {type(options).__name__}")
    checker = getattr(cls, "check_options", None)
    if checker is None:
        if options:
            raise ValueError(f"executor_options: the {name!r} executor takes no options, got {sorted(options)}")
        return {}
    return checker(options)


def prepare(name: str, comm) -> Prepared:
    """What ``comm`` runs for the executor ``name``: collective for executors with a ``prepare``
    (they open a window), else the class itself, labelled ``name``."""
    cls = get(name)
    prepare_on = getattr(cls, "prepare", None)
    if prepare_on is None:
        return Prepared(cls, name)
    return prepare_on(comm)
