"""One node structure per communicator handle and options, kept on the handle and freed with it.

A :class:`~.collectives.Hierarchy` holds two communicators and two shared windows. Kept on a
wrapper object, it would outlive the handle when the handle is freed through another object (the
user's own, a second wrapper) and be made anew by every ``wrap`` of a handle the program never
frees (``MPI.COMM_WORLD``): MPICH runs out of communicators after about 680 of either. So it is an
attribute of the handle, like the neighborhood runtime (:mod:`sparsecoll.runtime.communicator`):
every wrapper of the handle with equal options (an ``inter_node`` callable: the same object)
takes the same one, and ``MPI_Comm_free`` of the handle, through any object, frees it (the
attribute's delete callback, run by every rank inside that collective call).

Whether one exists is collective knowledge: structures are made at calls every rank makes
together, for options the ranks agreed on (``wrap`` checks them with one allreduce), and dropped
only with the handle, so every rank finds one, or makes one, at the same call.
"""

from __future__ import annotations

from mpi4py import MPI

from .. import reductions
from .collectives import Hierarchy


def options_key(options) -> tuple:
    """``wrap``'s node-structure options as a key that is equal on ranks that passed equal options.

    A callable (``inter_node``) counts by its module and qualified name: its ``repr`` holds its
    address, which differs between processes."""
    return tuple(sorted((name, _describe(value)) for name, value in dict(options).items()))


def _describe(value) -> str:
    if callable(value) and hasattr(value, "__qualname__"):
        return f"{getattr(value, '__module__', '?')}.{value.__qualname__}"
    return repr(value)


def _free_all(comm, keyval, registry: dict) -> None:
    for hierarchy, _ in registry["shared"].values():
        hierarchy.free()
    for hierarchy in registry["own"]:
        hierarchy.free()
    registry["shared"].clear()
    registry["own"].clear()


_KEYVAL = MPI.Comm.Create_keyval(delete_fn=_free_all)


def _registry(comm) -> dict:
    registry = comm.Get_attr(_KEYVAL)
    if registry is None:
        registry = {"shared": {}, "own": []}  # key -> (structure, its inter_node); structures of one wrapper
        comm.Set_attr(_KEYVAL, registry)
    return registry


def hierarchies(comm) -> list:
    """Every node structure made on ``comm``'s handle (local)."""
    registry = comm.Get_attr(_KEYVAL)
    if registry is None:
        return []
    return [hierarchy for hierarchy, _ in registry["shared"].values()] + list(registry["own"])


def hierarchy_of(comm: MPI.Intracomm, options) -> Hierarchy:
    """The node structure of ``comm``'s handle for ``options`` (made, collectively, the first time).

    An ``inter_node`` callable is compared by name across ranks (:func:`options_key`), so two
    different callables of one name give one key: a later wrapper shares the structure only if
    every rank passed the very object the structure was made with (one allreduce says so), else
    it gets a structure of its own (freed with the handle too)."""
    registry = _registry(comm)
    options = dict(options)
    key = options_key(options)
    found = registry["shared"].get(key)
    if found is None:
        hierarchy = Hierarchy(comm, **options)
        registry["shared"][key] = (hierarchy, options.get("inter_node"))
        return hierarchy
    hierarchy, inter_node = found
    if options.get("inter_node") is not None:
        library = MPI.Intracomm(comm)  # the library's allgather, not a wrapper's hierarchical one
        same = reductions.allreduce(library, inter_node is options["inter_node"], op=MPI.LAND)
        if not same:
            hierarchy = Hierarchy(comm, **options)
            registry["own"].append(hierarchy)
    return hierarchy


def structures_made(comm: MPI.Comm) -> int:
    """How many node structures ``comm``'s handle holds (local)."""
    registry = comm.Get_attr(_KEYVAL)
    return 0 if registry is None else len(registry["shared"]) + len(registry["own"])
