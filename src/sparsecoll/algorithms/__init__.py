"""The algorithm registry: one table of every algorithm sparsecoll offers.

An algorithm has a name, the collective families it supports, a ``build`` function
``build(topology, comm, options, family) -> Pattern`` (collective over ``comm`` when it runs a
protocol, flagged by ``builds_locally=False``), an optional ``supports(topology) -> reason or
None`` check, its options with defaults, and an optional ``check(options, size) -> options``
that validates them for a communicator of ``size`` ranks (called by :func:`check_options` at
``wrap``, so bad values raise before any message is sent). ``runs_library=True`` marks the
entry whose calls go straight to the MPI library (``native``); its ``build`` gives the
one-step pattern the library uses, which ``plan_stats`` reports.
The table below is the only place an algorithm is listed; ``"auto"`` is resolved by
:mod:`sparsecoll.model.choice`.
"""

from __future__ import annotations

from . import cartesian, common_neighbor, direct, distance_halving, loggp_tree, native
from .base import Algorithm

#: Every algorithm, by name (the order of ``sparsecoll.algorithms()``).
REGISTRY: dict = {algorithm.name: algorithm for algorithm in (
    direct.ALGORITHM,
    native.ALGORITHM,
    cartesian.TRIVIAL,
    cartesian.COMBINING,
    common_neighbor.ALGORITHM,
    distance_halving.ALGORITHM,
    loggp_tree.ALGORITHM,
)}
AUTO = "auto"  # the name that asks the cost model (not an entry)

__all__ = ["Algorithm", "REGISTRY", "AUTO", "get", "register", "check_name", "check_options"]


def register(algorithm: Algorithm) -> Algorithm:
    """Add an algorithm defined outside the library (a test's, a user's) to the table."""
    if algorithm.name in REGISTRY or algorithm.name == AUTO:
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
    if name != AUTO:
        get(name)
    return name


def check_options(name: str, options: dict, size: int) -> dict:
    """Reject options no candidate algorithm knows, and bad values; fill in defaults.

    ``size`` is the number of ranks of the communicator the options are for.
    """
    known = {}
    candidates = REGISTRY.values() if name == AUTO else [get(name)]
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
