"""One node structure per communicator handle and options, kept on the handle and freed with it.

A :class:`~.collectives.Hierarchy` holds two communicators and two shared windows. Kept on a
wrapper object, it would outlive the handle when the handle is freed through another object (the
user's own, a second wrapper) and be made anew by every ``wrap`` of a handle the program never
frees (``MPI.COMM_WORLD``): MPICH runs out of communicators after about 680 of either. So it is an
attribute of the handle, like the neighborhood runtime (:mod:`sparsecoll.runtime.communicator`):
every wrapper of the handle with equal options takes the same one, and ``MPI_Comm_free`` of the
handle, through any object, frees it (the attribute's delete callback, run by every rank inside
that collective call).

Whether one exists is collective knowledge: structures are made at calls every rank makes
together, for options the ranks agreed on (``wrap`` checks them with one allreduce), and dropped
only with the handle, so every rank finds one, or makes one, at the same call.
"""

from __future__ import annotations

from mpi4py import MPI

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


def _free_all(comm, keyval, structures: dict) -> None:
    for hierarchy in structures.values():
        hierarchy.free()
    structures.clear()


_KEYVAL = MPI.Comm.Create_keyval(delete_fn=_free_all)


def hierarchy_of(comm: MPI.Intracomm, options) -> Hierarchy:
    """The node structure of ``comm``'s handle for ``options`` (made, collectively, the first time)."""
    structures = comm.Get_attr(_KEYVAL)
    if structures is None:
        structures = {}
        comm.Set_attr(_KEYVAL, structures)
    key = options_key(options)
    hierarchy = structures.get(key)
    if hierarchy is None:
        hierarchy = structures[key] = Hierarchy(comm, **dict(options))
    return hierarchy


def structures_made(comm: MPI.Comm) -> int:
    """How many node structures ``comm``'s handle holds (local)."""
    structures = comm.Get_attr(_KEYVAL)
    return 0 if structures is None else len(structures)
