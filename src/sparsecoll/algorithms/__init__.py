"""The algorithm registry: one table of every algorithm sparsecoll offers.

An algorithm has a name, the collective families it supports, a ``build`` function
``build(topology, comm, options, family) -> Pattern`` (collective over ``comm`` when it runs a
protocol, flagged by ``builds_locally=False``), an optional ``supports(topology) -> reason or
None`` check, its options with defaults, and an optional ``check(options, size) -> options``
that validates them for a communicator of ``size`` ranks (called by :func:`check_options` at
``wrap``, so bad values raise before any message is sent). ``runs_library=True`` marks the
entry whose calls go straight to the MPI library (``native``); its ``build`` gives the
one-step pattern the library uses, which ``plan_stats`` reports.
``"auto"`` is resolved by :func:`choose`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

from ..pattern import FAMILIES


@dataclass(frozen=True)
class Algorithm:
    """One registered algorithm."""

    name: str
    summary: str
    families: tuple = FAMILIES
    build: Optional[Callable] = None
    paper: Optional[str] = None
    supports: Optional[Callable] = None
    options: dict = field(default_factory=dict)
    check: Optional[Callable] = None
    builds_locally: bool = True
    runs_library: bool = False

    def unsupported_reason(self, topology, family: str) -> Optional[str]:
        """Why this algorithm cannot run ``family`` on ``topology`` (None if it can)."""
        if family not in self.families:
            return f"algorithm {self.name!r} does not implement the {family} family"
        if self.supports is not None:
            return self.supports(topology)
        return None


REGISTRY: dict = {}


def register(algorithm: Algorithm) -> Algorithm:
    """Add an algorithm to the registry (names are unique)."""
    if algorithm.name in REGISTRY or algorithm.name == "auto":
        raise ValueError(f"algorithm: name {algorithm.name!r} is already taken")
    REGISTRY[algorithm.name] = algorithm
    return algorithm


def get(name: str) -> Algorithm:
    """The registered algorithm called ``name``."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"algorithm: expected 'auto' or one of {sorted(REGISTRY)}, got {name!r}") from None


def check_name(name) -> str:
    """Validate an ``algorithm=`` argument (``"auto"`` or a registered name)."""
    if not isinstance(name, str):
        raise TypeError(f"algorithm: expected a string, got {type(name).__name__}")
    if name != "auto":
        get(name)
    return name


def choose(topology, family: str, options: dict) -> str:
    """The algorithm ``"auto"`` runs for this topology and family."""
    return explain_choice(topology, family, options)["algorithm"]


def explain_choice(topology, family: str, options: dict) -> dict:
    """The choice of ``"auto"`` with its reasons (``plan_stats`` reports it under ``"auto"``).

    Isomorphic (Cartesian) neighborhoods: the Hockney model decides between message
    combining and one message per neighbor (:func:`.cartesian.auto_choice`). Others: ``direct``.
    """
    if _cartesian.unsupported(topology) is None:
        return _cartesian.auto_choice(topology, family, options)
    return {"algorithm": "direct"}


def check_options(name: str, options: dict, size: int) -> dict:
    """Reject options no candidate algorithm knows, and bad values; fill in defaults.

    ``size`` is the number of ranks of the communicator the options are for.
    """
    known = {}
    candidates = REGISTRY.values() if name == "auto" else [get(name)]
    for algorithm in candidates:
        known.update(algorithm.options)
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise TypeError(f"options: unknown option(s) {unknown} for algorithm {name!r}; known: {sorted(known)}")
    merged = {**known, **options}
    for algorithm in candidates:
        if algorithm.check is not None:
            merged.update(algorithm.check({key: merged[key] for key in algorithm.options}, size))
    return merged


from . import direct as _direct  # noqa: E402,F401  (registers)
from . import native as _native  # noqa: E402,F401  (registers)
from . import cartesian as _cartesian  # noqa: E402  (registers)
from . import common_neighbor as _common_neighbor  # noqa: E402,F401  (registers)
from . import distance_halving as _distance_halving  # noqa: E402,F401  (registers)
