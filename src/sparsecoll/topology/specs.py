"""Topology SPEC strings: one parser and one SPEC -> process graph dispatch.

The benchmark (:mod:`sparsecoll.tools.bench.workloads`), the simulator
(:func:`sparsecoll.sim.simulate.simulate`, ``sparsecoll simulate``) and the research
scripts name their workloads with the same strings:

* ``random:density=D[,seed=S]``, ``sparse-alltoall:p=P[,seed=S]``, ``moore:D=d,R=r``,
  ``cross:d=D``: the generators of :mod:`.generators` (HiPC 2017, the 2023 paper, SC12;
  ``cross`` is SC12's ``2d+1``-point stencil, one neighbor each way per dimension, as an
  offset list: ``cart:d=D``'s neighborhoods where every dimension has 3 ranks or more);
* ``hotspot[:root=R]``: rank ``R`` (default 0) sends to every other rank, nobody else sends
  (the SC12 paper's Fig. 4 hot spot; :func:`.generators.hotspot`);
* ``stencil:d=D,n=N,f=F``: the ICPP 2019 neighborhoods (every ``d``-vector with
  coordinates in ``f .. f+n-1`` except zero) on a periodic ``Compute_dims`` grid;
* ``cart:d=D``: a plain MPI Cartesian communicator (periodic, ``Compute_dims``); its
  neighbor matching differs from an offset list's, so it has no process graph here;
* ``matrix:PATH``: row-block partition of a Matrix Market matrix (empty PATH: the bundled
  SuiteSparse matrix ``dwt_193``); rank ``i`` receives the x entries owned by the ranks
  whose columns its rows touch (:func:`matrix_partition`; reading needs scipy).

:func:`parse` checks a SPEC and fills in the defaults; :func:`generate` gives the
:class:`~.generators.Adjacency` (every rank's sources and destinations) that the
simulator runs on and the benchmark turns into a communicator.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy

from ..checks import positive_integer
from . import generators
from .generators import Adjacency, stencil_offsets

__all__ = ["Spec", "KINDS", "SYNTAX", "BUNDLED_MATRIX", "parse", "generate", "matrix_partition", "stencil_offsets"]

BUNDLED_MATRIX = Path(__file__).parent / "data" / "dwt_193.mtx"


@dataclass(frozen=True)
class Kind:
    """One kind of SPEC: its parameters with types, their defaults, and its syntax."""

    types: dict
    defaults: dict
    syntax: str


KINDS = {
    "random": Kind({"density": float, "seed": int}, {"seed": 0}, "random:density=D[,seed=S]"),
    "sparse-alltoall": Kind({"p": float, "seed": int}, {"seed": 0}, "sparse-alltoall:p=P[,seed=S]"),
    "moore": Kind({"D": int, "R": int}, {"D": 2, "R": 1}, "moore:D=d,R=r"),
    "cross": Kind({"d": int}, {"d": 2}, "cross:d=D"),
    "hotspot": Kind({"root": int}, {"root": 0}, "hotspot[:root=R]"),
    "stencil": Kind({"d": int, "n": int, "f": int}, {"d": 2, "n": 3, "f": -1}, "stencil:d=D,n=N,f=F"),
    "cart": Kind({"d": int}, {"d": 2}, "cart:d=D"),
    "matrix": Kind({"path": str}, {"path": ""}, "matrix:PATH"),
}

#: The SPEC syntax in one line, for command-line help.
SYNTAX = " | ".join(kind.syntax for kind in KINDS.values()) + " (empty PATH: a bundled SuiteSparse matrix)"


@dataclass(frozen=True)
class Spec:
    """A checked SPEC: its kind, every parameter (defaults filled in) and the text it came from."""

    kind: str
    params: dict
    text: str


def parse(text, graph: bool = False) -> Spec:
    """``"kind:key=value,..."`` -> :class:`Spec`; ``ValueError`` (one line, naming the problem) if bad.

    ``matrix:PATH`` takes the rest of the string as the path and checks that the file
    exists (``FileNotFoundError`` otherwise). ``graph=True`` also rejects the kinds that
    have no process graph (``cart``: a plain Cartesian communicator's neighbor matching
    differs from an offset list's, so virtual ranks cannot model it).
    """
    if isinstance(text, Spec):
        spec = text
    else:
        spec = _parse(text)
    if graph and spec.kind == "cart":
        raise ValueError(f"spec: {spec.text!r} is a plain Cartesian communicator; virtual ranks model "
                         "offset lists and graphs only")
    return spec


def _parse(text) -> Spec:
    if not isinstance(text, str) or not text:
        raise ValueError(f"topology: expected a SPEC like 'random:density=0.2', got {text!r}")
    name, _, rest = text.partition(":")
    if name not in KINDS:
        raise ValueError(f"topology: unknown generator {name!r} in {text!r}; known: {', '.join(sorted(KINDS))} "
                         f"({SYNTAX})")
    kind = KINDS[name]
    if name == "matrix":
        path = Path(rest) if rest else BUNDLED_MATRIX
        if not path.exists():
            raise FileNotFoundError(f"topology: matrix file {str(path)!r} not found")
        return Spec(name, {"path": str(path)}, text)
    params = {}
    for part in filter(None, rest.split(",")):
        key, eq, value = part.partition("=")
        key = key.strip()
        if not eq or key not in kind.types:
            raise ValueError(f"topology: bad parameter {part!r} for {name!r}; known: {sorted(kind.types)}")
        if key in params:  # the last one won silently: stencil:d=2,n=3,d=3 ran d=3
            raise ValueError(f"topology: parameter {key!r} of {name!r} given twice in {text!r}")
        try:
            params[key] = kind.types[key](value)
        except ValueError:
            raise ValueError(f"topology: parameter {key!r} of {name!r} expects {kind.types[key].__name__}, "
                             f"got {value!r}") from None
    if params.get("seed", 0) < 0:
        raise ValueError(f"topology: parameter 'seed' of {name!r} expects a non-negative int, got {params['seed']}")
    missing = [key for key in kind.types if key not in params and key not in kind.defaults]
    if missing:
        raise ValueError(f"topology: {name!r} needs {', '.join(missing)} ({kind.syntax}), got {text!r}")
    if name == "cart":  # no generator checks it (cart:d=0 made a grid of one rank and left the others waiting)
        positive_integer(params.get("d", kind.defaults["d"]), "d")
    return Spec(name, {**kind.defaults, **params}, text)


def generate(spec, size: int) -> Adjacency:
    """The :class:`~.generators.Adjacency` a SPEC (string or :class:`Spec`) names, for ``size`` ranks.

    ``cart`` raises ``ValueError`` (see :func:`parse`).
    """
    spec = parse(spec, graph=True)
    p = spec.params
    if spec.kind in generators.GENERATORS:
        return generators.GENERATORS[spec.kind][0](size, **p)
    if spec.kind == "stencil":
        offsets = stencil_offsets(p["d"], p["n"], p["f"])
        return generators.isomorphic(size, generators.compute_dims(size, p["d"]), offsets, name="stencil",
                                     params=dict(p))
    if spec.kind == "matrix":
        sources, destinations, _, _ = matrix_partition(p["path"], size)
        return Adjacency(size, tuple(sources), tuple(destinations), name="matrix", params={"path": p["path"]})
    raise AssertionError(f"topology: no process graph for {spec.kind!r}")  # parse(graph=True) rejected it


def matrix_partition(path, size: int):
    """Row-block partition of a Matrix Market file for ``size`` ranks (needs scipy).

    Returns ``(sources, destinations, needed, rows)``: per rank the ranks it receives x
    entries from and sends to (ascending), ``needed[(owner, rank)]`` = number of
    distinct columns owned by ``owner`` that ``rank``'s rows touch, and the rows each
    rank owns.
    """
    import scipy.io
    import scipy.sparse
    try:
        matrix = scipy.io.mmread(str(path), spmatrix=False)
    except ValueError as error:  # scipy's message ("Line 1: Not a Matrix Market file") names no file
        raise ValueError(f"topology: matrix:{path}: {error}") from None
    matrix = scipy.sparse.csr_matrix(matrix)
    nrows, ncols = matrix.shape
    row_owner = numpy.minimum(numpy.arange(nrows) * size // max(nrows, 1), size - 1)
    col_owner = numpy.minimum(numpy.arange(ncols) * size // max(ncols, 1), size - 1)
    rows = numpy.bincount(row_owner, minlength=size).tolist()
    needed = {}
    for rank in range(size):
        mine = numpy.flatnonzero(row_owner == rank)
        if len(mine) == 0:
            continue
        columns = numpy.unique(matrix[mine].indices)
        owners, counts = numpy.unique(col_owner[columns], return_counts=True)
        for owner, count in zip(owners.tolist(), counts.tolist()):
            if owner != rank:
                needed[(owner, rank)] = count
    sources = [sorted(o for (o, r) in needed if r == rank) for rank in range(size)]
    destinations = [sorted(r for (o, r) in needed if o == rank) for rank in range(size)]
    return sources, destinations, needed, rows
