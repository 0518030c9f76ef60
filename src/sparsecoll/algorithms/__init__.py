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
:mod:`sparsecoll.runtime.auto` from :mod:`sparsecoll.model.choice`'s predictions (whose
estimators of protocol candidates, :data:`~sparsecoll.model.choice.ESTIMATORS`, are keyed by
these names).

Transformations of a built Pattern are options of every algorithm that builds one
(:data:`SHARED_OPTIONS`, checked here, not listed in each entry): ``coloring=True`` orders
each step's sends by a greedy edge coloring (:mod:`.coloring`). :func:`build_pattern` is
the one place that builds a Pattern and applies them.
"""

from __future__ import annotations

from collections.abc import Mapping

from . import cartesian, coloring, common_neighbor, direct, distance_halving, loggp_tree, native, node_aware
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
    node_aware.ALGORITHM,
)}
AUTO = "auto"  # the name that asks the cost model (not an entry)

#: Options of every algorithm that builds a Pattern (not ``native``), with their defaults:
#: the transformations :func:`build_pattern` applies after the algorithm's ``build``.
SHARED_OPTIONS = {coloring.OPTION: False}

__all__ = ["Algorithm", "REGISTRY", "AUTO", "SHARED_OPTIONS", "get", "register", "check_name", "check_options",
           "build_pattern", "builds_locally", "parse_variant"]


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
        if not algorithm.runs_library:
            known.update(SHARED_OPTIONS)
    unknown = sorted(set(options) - set(known))
    if name != AUTO and get(name).runs_library and set(SHARED_OPTIONS) & set(options):
        shared = sorted(set(SHARED_OPTIONS) & set(options))[0]
        raise TypeError(f"{shared}: algorithm {name!r} runs the MPI library's own call; it builds no pattern "
                        f"to transform")
    if unknown:
        raise TypeError(f"options: unknown option(s) {unknown} for algorithm {name!r}; known: {sorted(known)}")
    merged = {**known, **options}
    for algorithm in candidates:
        if algorithm.check is not None:
            merged.update(algorithm.check({key: merged[key] for key in algorithm.options}, size))
    if coloring.OPTION in merged:
        coloring.check_coloring(merged[coloring.OPTION])
    return merged


def builds_locally(name: str, options: dict) -> bool:
    """Whether :func:`build_pattern` builds ``name``'s Pattern with ``options`` without
    communicating (the algorithm builds locally and no transformation runs a protocol)."""
    return get(name).builds_locally and not options.get(coloring.OPTION, False)


def without_protocol_transformations(options: Mapping) -> dict:
    """``options`` less the transformations that run a protocol (``coloring``, which only orders
    sends): with them, an algorithm that builds locally builds without communicating."""
    return {name: value for name, value in options.items() if name != coloring.OPTION}


def _option_value(text: str):
    """An option value written on a command line: true/false, an int, a float, else the text."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_variant(text: str) -> tuple:
    """``NAME[+OPTION[=VALUE]]...`` (e.g. ``direct+coloring``, ``distance_halving+ranks_per_socket=4``)
    -> ``(name, options)``; an option without a value is ``True``. Checks the name, not the options
    (:func:`check_options` does, for the communicator size)."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"algorithms: expected NAME[+OPTION[=VALUE]]..., got {text!r}")
    name, *parts = [part.strip() for part in text.strip().split("+")]
    check_name(name)
    options = {}
    for part in parts:
        key, eq, value = part.partition("=")
        if not key or (eq and not value):
            raise ValueError(f"algorithms: bad option {part!r} in {text!r}; expected OPTION or OPTION=VALUE")
        options[key] = _option_value(value) if eq else True
    return name, options


def build_pattern(name: str, topology, comm, options: dict, family: str):
    """Build ``name``'s Pattern for ``family``, then apply the transformations its options ask
    for (collective over ``comm`` unless :func:`builds_locally`)."""
    pattern = get(name).build(topology, comm, options, family)
    if options.get(coloring.OPTION, False):
        pattern = coloring.color(pattern, comm)
    return pattern
