"""What a wrapper asks for (:class:`Plan`) and what one collective of it runs (:class:`CallPlan`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType

from .. import algorithms, execute
from ..model.choice import explain_choice
from ..topology.cartesian import GRID_OPTION


@dataclass(frozen=True)
class Plan:
    """A wrapper's request: algorithm (``"auto"`` or registered), checked options, rebind, executor.

    ``key`` identifies everything that shapes the messages, by value, so it is the same
    on every rank: the algorithm, every option but ``grid`` (which only shapes the
    handle's Topology, kept by the runtime) and the executor.
    """

    algorithm: str
    options: MappingProxyType
    rebind: bool = False
    executor: str = execute.DEFAULT_EXECUTOR
    key: tuple = field(init=False)
    native: bool = field(init=False)

    def __post_init__(self):
        shaping = tuple((name, repr(value)) for name, value in sorted(self.options.items()) if name != GRID_OPTION)
        object.__setattr__(self, "key", (self.algorithm, shaping, self.executor))
        runs_library = self.algorithm != algorithms.AUTO and algorithms.get(self.algorithm).runs_library
        object.__setattr__(self, "native", runs_library)


def explain_plan(plan: Plan, topology, family: str) -> dict:
    """The algorithm ``plan`` runs for ``family`` on ``topology``, with reasons (local; ``auto``
    asks the model, from arguments every rank shares)."""
    if plan.algorithm == algorithms.AUTO:
        return explain_choice(topology, family, dict(plan.options))
    return {"algorithm": plan.algorithm}


def make_plan(algorithm: str, options: dict, rebind: bool, size: int,
              executor: str = execute.DEFAULT_EXECUTOR) -> Plan:
    """Check a wrapper's arguments (raising before any message is sent) and make its Plan."""
    algorithms.check_name(algorithm)
    execute.get(executor)
    if not isinstance(rebind, bool):
        raise TypeError(f"rebind: expected a bool, got {type(rebind).__name__}")
    checked = algorithms.check_options(algorithm, options, size)
    return Plan(algorithm, MappingProxyType(dict(checked)), rebind, executor)


@dataclass(frozen=True, slots=True, eq=False)
class CallPlan:
    """One collective of one Plan on one communicator: the pattern and whether calls need a size pass.

    ``size_pass`` is agreed by every rank when the pattern is first used by a collective
    call. The runtime makes one CallPlan per Plan key (algorithm and options), rebind and
    collective, so the object itself (compared by identity) keys its caches.
    """

    collective: str
    algorithm: str
    pattern: object
    size_pass: bool
    rebind: bool
    runtime: object
    executor: type
