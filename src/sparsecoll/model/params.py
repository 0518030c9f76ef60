"""Machine parameters of the cost models, rank placement, and their JSON files.

* Hockney (R. W. Hockney, Parallel Computing 20, 1994; the model of Sharifian, Sojoodi
  and Afsahi 2023, §V): a message of ``m`` bytes costs ``alpha + m * beta`` (``beta`` in
  seconds per byte: the 2023 paper writes ``m / beta`` with ``beta`` a bandwidth).
* LogGP (Alexandrov et al., JPDC 44, 1997, as the SC12 paper of Hoefler and Schneider
  uses it, §III-B-1): latency ``L``, per-message CPU overhead ``o``, gap between
  injections ``g``, time per byte ``G``.

Parameters are given per pair class: ``socket`` (same socket), ``node`` (same node,
other socket) and ``network`` (other node); a class missing from a file falls back to the
nearest class present (``socket`` -> ``node`` -> ``network`` and back).

Placement ``LxS``: ranks are placed in order, ``L`` per socket and ``S`` sockets per
node (rank ``r`` is on socket ``r // L`` and node ``r // (L*S)``), as ``mpiexec`` fills
cores by default.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from ..topology.placement import (
    PAIR_CLASSES,
    Placement,  # noqa: F401  (re-exported: model users name it here)
)
from .profile import FileReader

HOCKNEY_FIELDS = ("alpha", "beta")
LOGGP_FIELDS = ("L", "o", "g", "G")
MODELS = {"hockney": HOCKNEY_FIELDS, "loggp": LOGGP_FIELDS}


@dataclass(frozen=True)
class Machine:
    """A cost model's parameters per pair class, and where they come from."""

    model: str
    classes: dict
    source: str = ""

    def __post_init__(self):
        if self.model not in MODELS:
            raise ValueError(f"model: expected one of {sorted(MODELS)}, got {self.model!r}")
        if not self.classes:
            raise ValueError("classes: at least one pair class needs parameters")
        for name, values in self.classes.items():
            if name not in PAIR_CLASSES:
                raise ValueError(f"classes: unknown pair class {name!r}; known: {list(PAIR_CLASSES)}")
            missing = [f for f in MODELS[self.model] if f not in values]
            if missing:
                raise ValueError(f"classes[{name!r}]: {self.model} needs {missing}")
            if any(float(values[f]) < 0 for f in MODELS[self.model]):
                raise ValueError(f"classes[{name!r}]: parameters must be non-negative")

    def params(self, pair_class: str) -> dict:
        """The parameters of ``pair_class`` (falling back to the nearest class present)."""
        if pair_class in self.classes:
            return self.classes[pair_class]
        i = PAIR_CLASSES.index(pair_class)
        for distance in range(1, len(PAIR_CLASSES)):
            for j in (i + distance, i - distance):
                if 0 <= j < len(PAIR_CLASSES) and PAIR_CLASSES[j] in self.classes:
                    return self.classes[PAIR_CLASSES[j]]
        raise KeyError(pair_class)  # unreachable: classes is not empty

    def to_json(self) -> dict:
        """A JSON-ready dict."""
        return {"model": self.model, "source": self.source, "classes": self.classes}

    @classmethod
    def from_json(cls, data: dict, path: str = "<parameters>") -> Machine:
        """Inverse of :meth:`to_json`; ValueError names ``path`` and the key where ``data`` is not one."""
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a JSON object, got {type(data).__name__}")
        if "model" not in data and "loads" in data:
            raise ValueError(f"{path}: is a sparsecoll profile (for auto), not a parameter file; write one with "
                             f"'sparsecoll calibrate --model hockney' or '--model loggp'")
        reader = FileReader(path, ValueError)
        reader.field(data, "model", "")
        classes = {}
        for name, values in reader.mapping(reader.field(data, "classes", ""), "classes").items():
            values = reader.mapping(values, f"classes.{name}")
            classes[name] = {field: reader.number(values, field, f"classes.{name}") for field in values}
        try:
            return cls(data["model"], classes, str(data.get("source", "")))
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None

    def save(self, path, measurements: dict | None = None) -> None:
        """Write the parameter file (directories created as needed), with the ``measurements`` the
        parameters were fitted to where given (``sparsecoll calibrate``; :meth:`load` ignores them)."""
        path = os.fspath(path)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        data = self.to_json() if measurements is None else {**self.to_json(), "measurements": measurements}
        with open(path, "w") as f:
            json.dump(data, f, indent=2)
            f.write("\n")

    @classmethod
    def load(cls, path) -> Machine:
        """Read a parameter file written by :meth:`save` or ``sparsecoll calibrate``; ValueError names
        the file (and the key) where it is not one."""
        path = os.fspath(path)
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path}: not a JSON parameter file ({exc})") from None
        return cls.from_json(data, path)


def hockney(alpha: float, beta: float, source: str = "", pair_class: str | None = None) -> Machine:
    """A Hockney Machine with the same ``alpha``, ``beta`` for one class (or all)."""
    names = PAIR_CLASSES if pair_class is None else (pair_class,)
    return Machine("hockney", {c: {"alpha": alpha, "beta": beta} for c in names}, source)


def loggp(L: float, o: float, g: float, G: float, source: str = "", pair_class: str | None = None) -> Machine:
    """A LogGP Machine with the same parameters for one class (or all)."""
    names = PAIR_CLASSES if pair_class is None else (pair_class,)
    return Machine("loggp", {c: {"L": L, "o": o, "g": g, "G": G} for c in names}, source)


def tree_rule_loggp(machine: Machine, pair_class: str = "network") -> dict:
    """``{L, o, G}`` as the SC12 tree rule reads LogGP (``o > g``, so a sender pays ``o`` per
    message; ``loggp_tree``), from ``pair_class``'s parameters (with the usual fallback).

    A file with ``o > 0`` (what ``sparsecoll calibrate --model loggp`` writes) is taken as it
    is. A file with ``o = 0`` and ``g > 0`` is a fit of step times that folds the overheads into
    ``g`` and ``L`` (steps in which every rank sends *and* receives each message): its per-message
    slope ``g`` is then two overheads (``o = g / 2``) and its one-message time ``L`` holds a send
    and a receive overhead (``L - 2o``, at least 0).
    """
    if machine.model != "loggp":
        raise ValueError(f"loggp: expected a LogGP parameter file, got a {machine.model} one")
    params = machine.params(pair_class)
    L, o, G = float(params["L"]), float(params["o"]), float(params["G"])
    if o == 0:
        o = float(params["g"]) / 2
        L = max(L - 2 * o, 0.0)
    if o <= 0:
        raise ValueError("loggp: the parameter file gives no per-message overhead (o and g are 0)")
    return {"L": L, "o": o, "G": G}


#: The option naming a LogGP parameter file whose ``L``, ``o``, ``G`` (:func:`tree_rule_loggp`)
#: become ``loggp_tree``'s options; read here, by ``wrap`` and the simulator (algorithms read no files).
LOGGP_FILE_OPTION = "loggp"


def with_loggp_file(options: dict) -> dict:
    """``options`` with ``L``, ``o``, ``G`` from the file named by ``loggp=`` (if any); raises
    ValueError or TypeError naming ``loggp`` (before any message is sent)."""
    path = options.get(LOGGP_FILE_OPTION)
    if path is None:
        return options
    given = sorted(name for name in ("L", "o", "G") if name in options)
    if given:
        raise ValueError(f"loggp: give a parameter file or {', '.join(given)}, not both")
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"loggp: expected the path of a parameter file, got {type(path).__name__}")
    try:
        machine = Machine.load(path)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"loggp: cannot read a LogGP parameter file from {os.fspath(path)!r}: {exc}") from None
    return {**options, **tree_rule_loggp(machine)}
