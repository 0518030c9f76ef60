"""Caches of one communicator: they save local work only, and keep no user buffer alive.

* :class:`Recent`: a bounded least-recently-used mapping (bound schedules, executors).
* :class:`LastArrays`: per call plan, the key of its last call of two plain arrays.
* :class:`ParseCache`: parsed buffer arguments, keyed by a cheap signature of the call's
  arguments: numpy arrays by identity (checked through a weak reference, so a freed
  array whose ``id`` is reused is never mistaken for it), counts, displacements, predefined
  datatypes and typecode strings by value, derived datatypes by object and handle (the parse kept
  holds the object, so its ``id`` is not reused meanwhile). Two plain arrays, the usual call, are found by their
  ``id`` alone and then checked (identity, dtype, shape, strides, the receive array's
  writability), which costs less than hashing their signature.

Nothing here decides what goes on the wire: a hit and a miss give the same messages.
"""

from __future__ import annotations

import array
import weakref
from collections import OrderedDict
from operator import attrgetter

import numpy
from mpi4py import MPI

#: Entries kept per cache and communicator.
CACHE_SIZE = 32


class Recent(OrderedDict):
    """A mapping that keeps the ``size`` most recently used entries."""

    def __init__(self, evict=None, size: int = CACHE_SIZE):
        super().__init__()
        self._evict = evict  # called with each value pushed out
        self._size = size

    def recall(self, key):
        """The value for ``key`` (or None), marked as just used."""
        value = self.get(key)
        if value is not None:
            try:
                self.move_to_end(key)
            except KeyError:  # dropped by another thread meanwhile (the value is still what was kept)
                pass
        return value

    def keep(self, key, value) -> None:
        """Store ``value``, pushing out the least recently used entries beyond the size."""
        self[key] = value
        while len(self) > self._size:
            old = self.popitem(last=False)[1]
            if self._evict is not None:
                self._evict(old)

    def drop_all(self) -> None:
        """Empty the cache, evicting every entry."""
        while self:
            old = self.popitem(last=False)[1]
            if self._evict is not None:
                self._evict(old)


class ParseCache:
    """Parsed buffer arguments of recent calls (see the module docstring)."""

    def __init__(self, size: int = CACHE_SIZE):
        self._entries = Recent(size=size)
        self._arrays = Recent(size=size)  # (collective, id, id) -> (weak refs, layout, parse)

    def recall_arrays(self, collective: str, sendbuf: numpy.ndarray, recvbuf: numpy.ndarray, extra=None):
        """The parse kept by :meth:`keep_arrays` if these are the very arrays, their layout unchanged
        (``extra``: what else the arguments said, by value: see :func:`simple_spec`)."""
        key = (collective, id(sendbuf), id(recvbuf), extra)
        entry = self._arrays.get(key)
        if entry is None:
            return None
        send_ref, recv_ref, layout, parsed = entry
        if send_ref() is not sendbuf or recv_ref() is not recvbuf or layout != array_layouts(sendbuf, recvbuf):
            return None
        self._arrays.move_to_end(key)
        return parsed

    def keep_arrays(self, collective: str, sendbuf: numpy.ndarray, recvbuf: numpy.ndarray, parsed,
                    extra=None) -> None:
        """Remember ``parsed`` for two arrays (weakly referring to them; the send array's
        writability is left out: a read-only send buffer parses the same)."""
        self._arrays.keep((collective, id(sendbuf), id(recvbuf), extra),
                          (weakref.ref(sendbuf), weakref.ref(recvbuf), array_layouts(sendbuf, recvbuf), parsed))

    def recall(self, signature, sendbuf, recvbuf):
        """The parse kept for ``signature`` if its arrays are still the very objects passed."""
        entry = self._entries.recall(signature)
        if entry is None:
            return None
        send_ref, recv_ref, parsed = entry
        if send_ref() is not _array_of(sendbuf) or recv_ref() is not _array_of(recvbuf):
            del self._entries[signature]
            return None
        return parsed

    def keep(self, signature, sendbuf, recvbuf, parsed) -> None:
        """Remember ``parsed`` for ``signature`` (weakly referring to the arrays)."""
        self._entries.keep(signature, (weakref.ref(_array_of(sendbuf)), weakref.ref(_array_of(recvbuf)), parsed))

    def __len__(self) -> int:
        return len(self._entries) + len(self._arrays)

    def clear(self) -> None:
        """Forget every parse."""
        self._entries.clear()
        self._arrays.clear()


def array_layouts(sendbuf: numpy.ndarray, recvbuf: numpy.ndarray) -> tuple:
    """What of two arrays, besides their identity, their parse depends on: each one's dtype, shape
    and strides, and whether the receive array is writable (the send array's writability is left
    out: a read-only send buffer parses the same)."""
    return (sendbuf.dtype, sendbuf.shape, sendbuf.strides,
            recvbuf.dtype, recvbuf.shape, recvbuf.strides, recvbuf.flags.writeable)


class LastArrays:
    """Per call plan, the call key of its last call whose arguments were two plain arrays.

    A call with the very same arrays, their :func:`array_layouts` unchanged, has the same parse
    and so the same key: blocking and nonblocking calls that find it skip parsing and the key's
    making (:meth:`.CommRuntime.blocking`). That is the usual call of a loop, and what it saves
    (the parse cache's lookup, a key to hash and move) is most of sparsecoll's own work per call.
    A key only names a cache entry; one evicted since is simply not found.
    """

    def __init__(self):
        self._entries: dict = {}  # call plan -> (weak refs, layouts, call key)

    def recall(self, call, sendbuf, recvbuf):
        """The key of ``call``'s last call if it had these very arrays, their layouts unchanged, else None."""
        entry = self._entries.get(call)
        if entry is None:
            return None
        send_ref, recv_ref, layouts, key = entry
        if send_ref() is sendbuf and recv_ref() is recvbuf and layouts == array_layouts(sendbuf, recvbuf):
            return key
        return None

    def keep(self, call, sendbuf: numpy.ndarray, recvbuf: numpy.ndarray, key) -> None:
        """Remember ``key`` for ``call`` with these two arrays (weakly referred to)."""
        self._entries[call] = (weakref.ref(sendbuf), weakref.ref(recvbuf), array_layouts(sendbuf, recvbuf), key)

    def clear(self) -> None:
        """Forget every call."""
        self._entries.clear()


def _array_of(spec) -> numpy.ndarray:
    return spec if type(spec) is numpy.ndarray else spec[0]


def simple_spec(spec):
    """``(array, count, datatype handle)`` of a ``[numpy array, int count, predefined datatype]``
    buffer spec (the commonest one after a plain array), else None: with the array's identity
    and layout, these three pin its parse, and are cheaper to check than :func:`call_signature`."""
    kind = type(spec)
    if (kind is list or kind is tuple) and len(spec) == 3 and type(spec[0]) is numpy.ndarray \
            and type(spec[1]) is int and type(spec[2]) is _Datatype:
        handle = spec[2].handle
        if handle in _PREDEFINED_HANDLES or spec[2].is_predefined:
            _PREDEFINED_HANDLES.add(handle)  # a predefined handle is never given to a derived datatype
            return spec[0], spec[1], handle
    return None


def call_signature(sendbuf, recvbuf):
    """What pins the parse of two buffer arguments, or None where nothing cheap does.

    Covered: a plain numpy array, or a list or tuple spec whose first entry is one; the
    array by identity, dtype, shape, strides and writability, the rest of the spec (ints, bools
    and numpy integers, ``None``, predefined datatypes and typecode strings, (nested) lists of
    them, ranges and numpy integer arrays of counts or displacements) by value, derived datatypes
    by object and handle. Anything else (other buffer objects, numpy object arrays, whose bytes
    are pointers to their entries) is parsed on every call.
    """
    send = _argument_signature(sendbuf)
    if send is _UNPINNED:
        return None
    recv = _argument_signature(recvbuf)
    if recv is _UNPINNED:
        return None
    return send, recv


_UNPINNED = object()  # a spec part without a cheap signature


def _argument_signature(spec):
    """One buffer argument's signature: its array by identity, the rest by value."""
    kind = type(spec)
    if kind is numpy.ndarray:
        return _array_identity(spec)
    if (kind is list or kind is tuple) and spec and type(spec[0]) is numpy.ndarray:
        rest = _value_signature(spec[1:], 0)
        return _UNPINNED if rest is _UNPINNED else (_array_identity(spec[0]), rest)
    return _UNPINNED


def _array_identity(arr: numpy.ndarray) -> tuple:
    return (id(arr), arr.dtype, arr.shape, arr.strides, arr.flags.writeable)


def _value_signature(spec, depth: int):
    """Counts, displacements and datatypes by value (their contents decide the layout)."""
    kind = type(spec)
    if kind is int or kind is bool or spec is None:  # a bool counts as the int it equals, as in the parse
        return spec
    if isinstance(spec, numpy.integer):  # displacements from numpy.cumsum, listed: mpi4py reads them as ints
        return int(spec)
    if kind is str:  # a typecode: MPI.Datatype.fromcode reads it as the same predefined type every time
        return ("typecode", spec)
    if kind is range:  # counts or displacements as a range: immutable, read as its values
        return ("range", spec.start, spec.stop, spec.step)
    if kind is numpy.ndarray:  # integers by their bytes; an object array's bytes are pointers, not values
        return ("array", spec.dtype.str, spec.shape, spec.tobytes()) if spec.dtype.kind in "iu" else _UNPINNED
    if kind is list or kind is tuple:
        if depth == 3:
            return _UNPINNED
        if not spec or type(spec[0]) in _INTEGERS:
            # counts or displacements (numpy integers too: a listed cumsum), read at C speed through
            # __index__ as the parse reads them (a w call's four lists of 8 went through this
            # function 58 times: 8 us a call); a list with anything else is read entry by entry
            try:  # "q": 8-byte signed integers, each read through __index__
                return (kind, array.array("q", spec).tobytes())
            except (TypeError, OverflowError):
                pass
        kinds = set(map(type, spec))
        if kinds == _DATATYPE_ONLY:
            handles = tuple(map(_handle_of, spec))
            if _PREDEFINED_HANDLES.issuperset(handles):  # predefined types, each met before
                return (kind, "datatypes", handles)
        parts = []
        for part in spec:
            signature = _value_signature(part, depth + 1)
            if signature is _UNPINNED:
                return _UNPINNED
            parts.append(signature)
        return (kind, tuple(parts))
    if isinstance(spec, MPI.Datatype):
        handle = spec.handle
        if handle in _PREDEFINED_HANDLES:
            return ("datatype", handle)
        if spec.is_predefined:  # a predefined handle is never given to a derived datatype
            _PREDEFINED_HANDLES.add(handle)
            return ("datatype", handle)
        # a derived one by its object and handle: the parse kept under this signature holds the
        # object (its blocks' types), so no other object has its id while the entry lives; MPI
        # reuses a freed type's handle, but mpi4py's Free turns this object's to the null handle
        # (:func:`sparsecoll.buffers.datatype_key`'s reasoning)
        return ("derived", id(spec), handle)
    return _UNPINNED


_PREDEFINED_HANDLES: set = set()  # handles of the predefined datatypes met so far
_Datatype = MPI.Datatype
_DATATYPE_ONLY = {_Datatype}
_INTEGERS = frozenset({int, bool} | {numpy.dtype(code).type for code in numpy.typecodes["AllInteger"]})
_handle_of = attrgetter("handle")
