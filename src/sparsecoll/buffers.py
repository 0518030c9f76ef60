"""mpi4py buffer specifications, parsed the way mpi4py parses them for neighborhood
collectives, into absolute block descriptions, with the checks MPI would make and a
few it cannot (buffer bounds).

Forms accepted (as in mpi4py 4.x):

* simple: ``buf``, ``(buf, count)``, ``(buf, datatype)``, ``(buf, count, datatype)``,
  ``(buf, (count, displ), datatype)``, ``(buf, count, displ, datatype)``;
* vector: ``buf``, ``(buf, counts)``, ``(buf, datatype)``, ``(buf, counts, datatype)``,
  ``(buf, (counts, displs), datatype)``, ``(buf, counts, displs, datatype)``, where a
  scalar ``counts`` repeats, a scalar ``displs`` is a stride, missing ``displs`` are
  contiguous and missing ``counts`` split the buffer evenly (remainder to the first);
* W: ``(buf, datatypes)``, ``(buf, (counts, displs), datatypes)``,
  ``(buf, counts, displs, datatypes)`` with displacements in bytes.

``buf`` is any object :func:`mpi4py.MPI.buffer` accepts (buffer protocol, DLPack,
``__cuda_array_interface__``), ``None`` inside a list spec for an empty buffer (a bare
``None`` is a TypeError, as in mpi4py), or ``MPI.BOTTOM`` with absolute displacements.
A datatype is an ``MPI.Datatype`` or a typecode string. Counts and displacements are read
as mpi4py reads them, through ``__index__``: ints, bools, numpy integers, 0-d integer arrays.
Every error is a ValueError or TypeError naming the argument.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace

from mpi4py import MPI

from .checks import mpi_index


@dataclass(frozen=True, eq=False)
class Blocks:
    """Where the blocks of one buffer argument live.

    Block ``i`` is ``counts[i]`` elements of ``types[i]`` at absolute address
    ``address + displs[i]`` (``displs`` in bytes). Blocks do not keep the user's buffer
    alive: whoever runs messages over them holds the buffer (as mpi4py's requests do).
    """

    address: int
    counts: tuple
    displs: tuple
    types: tuple

    def __len__(self) -> int:
        return len(self.counts)

    def piece(self, i: int) -> tuple:
        """``(absolute address, count, datatype)`` of block ``i``."""
        return (self.address + self.displs[i], self.counts[i], self.types[i])

    def key(self) -> tuple:
        """A hashable description: same key, same memory and layout."""
        keys = {}  # one datatype object usually serves every block
        return (self.address, self.counts, self.displs,
                tuple(keys[id(t)] if id(t) in keys else keys.setdefault(id(t), datatype_key(t))
                      for t in self.types))


def with_own_datatypes(send: Blocks, recv: Blocks) -> tuple:
    """``(send, recv, duplicates)``: the blocks with each derived datatype replaced by a duplicate
    of its own (``MPI_Type_dup``, committed as the original), for a call that makes its messages
    after it returned; the caller frees the duplicates when it is done with them.

    MPI lets a program free a datatype as soon as the call that uses it has started: "any
    communication that is currently using this datatype will complete normally" (MPI-4.1
    5.1.10), and mpi4py's ``Free`` turns the program's object into ``MPI_DATATYPE_NULL``.
    Predefined types are kept; without derived types nothing is duplicated.
    """
    duplicates: dict = {}

    def own(datatype):
        if datatype.is_predefined:
            return datatype
        copy = duplicates.get(id(datatype))
        if copy is None:
            copy = duplicates[id(datatype)] = datatype.Dup()
        return copy
    if all(t.is_predefined for blocks in (send, recv) for t in blocks.types):
        return send, recv, ()
    owned = [replace(blocks, types=tuple(own(t) for t in blocks.types)) for blocks in (send, recv)]
    return owned[0], owned[1], tuple(duplicates.values())


def datatype_key(datatype: MPI.Datatype) -> tuple:
    """Identify a datatype for schedule caching: a predefined one by its handle, a derived one
    by its object as well as its handle, size and extents.

    MPI reuses the handle of a freed type (MPICH gives the next type made the same one), so a
    program that makes and frees a type around each call passes a new type under an old
    handle; a schedule bound with the freed object (whose handle mpi4py then reads as
    ``MPI_DATATYPE_NULL``) must not serve it. A cached schedule keeps the object it was bound
    with alive, so no other object can have its ``id`` while the schedule is cached.
    """
    if datatype.is_predefined:
        return (datatype.handle,)
    return (id(datatype), datatype.handle, datatype.Get_size(), datatype.Get_extent(), datatype.Get_true_extent())


def predefined_leaves(datatype: MPI.Datatype) -> list:
    """The distinct predefined datatypes ``datatype`` is built of (itself if predefined)."""
    leaves: dict = {}
    _collect_leaves(datatype, leaves)
    return list(leaves.values())


def _collect_leaves(datatype: MPI.Datatype, leaves: dict) -> None:
    if datatype.is_predefined:
        leaves[datatype.handle] = datatype
        return
    first, _, params = datatype.decode()
    children = params.get("datatypes") or [first]
    for child in children:
        _collect_leaves(child, leaves)
    for child in {c.handle: c for c in list(children) + [first]}.values():
        if not child.is_predefined and child.handle != datatype.handle:
            child.Free()


#: Predefined pair types: the size of both their elements, 0 where the two differ.
_PAIR_ELEMENTS = {t.handle: size for t, size in ((MPI.TWOINT, 4), (MPI.FLOAT_INT, 4), (MPI.DOUBLE_INT, 0),
                                                  (MPI.LONG_INT, 0), (MPI.SHORT_INT, 0), (MPI.LONG_DOUBLE_INT, 0))}


def element_size(datatype: MPI.Datatype) -> int:
    """The size of every basic element of ``datatype``, or 0 where they differ (a struct of a
    char and a double, ``MPI_DOUBLE_INT``)."""
    sizes = {_PAIR_ELEMENTS.get(leaf.handle, leaf.Get_size()) for leaf in predefined_leaves(datatype)}
    return sizes.pop() if len(sizes) == 1 else 0


def mixes_basic_types(blocks: Blocks) -> bool:
    """Whether the blocks' datatypes hold basic elements of more than one size."""
    sizes = {element_size(t) for t in {id(t): t for t in blocks.types}.values()}
    return 0 in sizes or len(sizes) > 1


def as_datatype(obj, arg: str) -> MPI.Datatype:
    """Return a valid, committed MPI datatype for ``obj`` or raise naming ``arg``."""
    if isinstance(obj, str):
        try:
            return MPI.Datatype.fromcode(obj)
        except (KeyError, ValueError):
            raise ValueError(f"{arg}: cannot map typecode {obj!r} to an MPI datatype") from None
    if not isinstance(obj, MPI.Datatype):
        raise TypeError(f"{arg}: expected an MPI.Datatype or a typecode string, got {type(obj).__name__}")
    if obj == MPI.DATATYPE_NULL:
        raise ValueError(f"{arg}: datatype is MPI.DATATYPE_NULL")
    if not obj.is_predefined and not _is_committed(obj):
        raise ValueError(f"{arg}: datatype is not committed (call Commit() first) or invalid")
    return obj


def _is_committed(datatype: MPI.Datatype) -> bool:
    """MPI has no query for this: pack zero elements, which MPI refuses for uncommitted types.

    Zero elements need no memory, whatever the datatype's extent. Checked on every call,
    not cached by handle: MPI reuses the handles of freed types. A type of extent 0 (legal: an
    empty block, or a type resized to overlay its elements) is taken as committed: mpi4py's
    ``Pack`` divides the buffer's length by the extent (a SIGFPE), and neither library refuses
    an uncommitted type in a call that checks it without that division alike (MPICH 5.0.2 takes
    it in ``Sendrecv``, Open MPI 5.0.11 crashes in ``Pack_size``); MPI itself refuses one later.
    """
    if datatype.Get_extent()[1] == 0:
        return True
    try:
        datatype.Pack(_NO_BYTES, _NO_BYTES, 0, MPI.COMM_SELF)
    except MPI.Exception:
        return False
    return True


_NO_BYTES = bytearray(0)
#: Format prefixes of a byte order other than this machine's (``!`` is big-endian).
_FOREIGN_ORDER = ">!" if sys.byteorder == "little" else "<"


def _format_datatype(obj, arg: str) -> MPI.Datatype:
    """The datatype implied by a buffer's format (mpi4py's rule when none is given)."""
    fmt = None
    try:
        fmt = memoryview(obj).format
    except TypeError:
        import numpy
        cai = getattr(obj, "__cuda_array_interface__", None)
        if cai is not None:
            fmt = numpy.dtype(cai["typestr"]).char
        elif hasattr(obj, "__dlpack__"):
            try:
                fmt = numpy.from_dlpack(obj).dtype.char
            except (TypeError, RuntimeError, BufferError):
                fmt = None
    if fmt is None:
        raise TypeError(f"{arg}: cannot infer a datatype from {type(obj).__name__}; pass one explicitly")
    if fmt and fmt[0] in "@=<>!":
        if fmt[0] in _FOREIGN_ORDER:  # as mpi4py: MPI moves the bytes of the machine's own order
            raise ValueError(f"{arg}: buffer format {fmt!r} has non-native byte order; convert it "
                             f"(numpy: .astype(dtype.newbyteorder('='))) or pass a datatype explicitly")
        fmt = fmt[1:]
    try:  # as mpi4py: format "B" (bytes, bytearray, numpy uint8) is MPI.UNSIGNED_CHAR, which reductions take
        return MPI.Datatype.fromcode(fmt)
    except (KeyError, ValueError):
        raise ValueError(f"{arg}: cannot map buffer format {fmt!r} to an MPI datatype") from None


class UnusableBufferError(BufferError, TypeError):
    """A buffer MPI cannot use (not contiguous, or read-only where data is received): the
    ``BufferError`` mpi4py raises there, and a ``TypeError`` as sparsecoll's other bad arguments."""


def _buffer(obj, readonly: bool, arg: str):
    """(mpi4py buffer or None, address, nbytes) of a user buffer object (None: empty)."""
    if obj is None:
        return None, 0, 0
    try:
        buf = MPI.buffer(obj)
    except BufferError as exc:  # a buffer, but not one MPI can take (not contiguous)
        raise UnusableBufferError(f"{arg}: {type(obj).__name__} cannot be used as an MPI buffer ({exc})") from None
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{arg}: expected a buffer-like object, got {type(obj).__name__} ({exc})") from None
    if not readonly and buf.readonly:
        raise UnusableBufferError(f"{arg}: buffer is read-only")
    return buf, buf.address, buf.nbytes


def _index(value, arg: str, what: str) -> int:
    index = mpi_index(value)
    if index is None:
        raise TypeError(f"{arg}: {what} must be an integer, got {value!r}")
    if index < 0:
        raise ValueError(f"{arg}: negative {what} {index}")
    return index


def _per_neighbor(values, n: int, arg: str, what: str, kind: str) -> list:
    """`values` as a list of exactly `n` items (one per neighbor), or an error naming `arg`."""
    try:
        values = list(values)
    except TypeError:
        raise TypeError(f"{arg}: {what} must be a sequence of {kind}") from None
    if len(values) != n:
        raise ValueError(f"{arg}: expected {n} {what} (one per neighbor), got {len(values)}")
    return values


def _int_list(values, n: int, arg: str, what: str) -> tuple:
    values = _per_neighbor(values, n, arg, what, "integers")
    return tuple(_index(v, arg, what[:-1] if what.endswith("s") else what) for v in values)


def _extent(datatype: MPI.Datatype, arg: str) -> int:
    lb, extent = datatype.Get_extent()
    if extent <= 0:
        raise ValueError(f"{arg}: datatype extent {extent} cannot place consecutive blocks")
    return extent


def _is_datatype(obj) -> bool:
    return isinstance(obj, (MPI.Datatype, str))


def span(count: int, datatype: MPI.Datatype) -> tuple:
    """(first, end): the bytes ``count`` x ``datatype`` touch, as offsets from its address."""
    if count == 0:
        return 0, 0
    _, extent = datatype.Get_extent()
    true_lb, true_extent = datatype.Get_true_extent()
    stretch = (count - 1) * extent
    return true_lb + min(stretch, 0), true_lb + true_extent + max(stretch, 0)


def _check_bounds(blocks: Blocks, nbytes: int, arg: str) -> None:
    """Every block must lie inside the buffer (unless the buffer is MPI.BOTTOM)."""
    spans = {}  # blocks usually repeat one (count, datatype): ask MPI once
    for i, (count, displ, datatype) in enumerate(zip(blocks.counts, blocks.displs, blocks.types)):
        key = (count, id(datatype))
        if key not in spans:
            spans[key] = span(count, datatype)
        first, end = spans[key]
        if count and (displ + first < 0 or displ + end > nbytes):
            raise ValueError(
                f"{arg}: block {i} ({count} x datatype of extent {datatype.Get_extent()[1]} at byte {displ}) "
                f"needs bytes {displ + first}..{displ + end} but the buffer has {nbytes}")


def _split(spec, arg: str, pair_types: tuple):
    """(buf, count, displ, datatype) of a 1-4 element spec, as mpi4py unpacks it.

    ``pair_types`` are the container types read as ``(count, displ)`` in the second
    position (mpi4py: tuple or list for simple messages, tuple only for vectors).
    """
    if spec is None:
        raise TypeError(f"{arg}: expected a buffer or a list/tuple spec, got None (mpi4py: "
                        f"'message: expecting buffer or list/tuple'; use [None, 0, datatype] for nothing)")
    if isinstance(spec, (list, tuple)):
        n = len(spec)
        buf = count = displ = datatype = None
        if n == 2:
            buf, count = spec
            if _is_datatype(count):
                count, datatype = None, count
            elif isinstance(count, pair_types):
                count, displ = count
        elif n == 3:
            buf, count, datatype = spec
            if isinstance(count, pair_types):
                count, displ = count
        elif n == 4:
            buf, count, displ, datatype = spec
        else:
            raise ValueError(f"{arg}: expected a buffer or a list/tuple of 2 to 4 items, got {n} items")
        return buf, count, displ, datatype
    return spec, None, None, None


def buffer_object(spec):
    """The buffer object of a buffer argument (a spec's first entry, else the argument itself),
    without checks: :func:`parse_simple` and friends check it."""
    return spec[0] if isinstance(spec, (list, tuple)) and spec else spec


def _buffer_and_datatype(buf_obj, datatype, readonly: bool, arg: str) -> tuple:
    """(is MPI.BOTTOM, address, nbytes, checked datatype) of a simple or vector spec."""
    bottom = buf_obj is MPI.BOTTOM
    if bottom:
        if datatype is None:
            raise ValueError(f"{arg}: MPI.BOTTOM requires an explicit datatype")
        buf, address, nbytes = None, 0, 0
    else:
        buf, address, nbytes = _buffer(buf_obj, readonly, arg)
    if datatype is None:
        datatype = MPI.BYTE if buf is None else _format_datatype(buf_obj, arg)
    else:
        datatype = as_datatype(datatype, arg)
    return bottom, address, nbytes, datatype


def parse_simple(spec, blocks: int, *, readonly: bool, arg: str) -> Blocks:
    """A message of ``blocks`` equal blocks; without a count, the buffer is split evenly.

    For a single block (the allgather send buffer) pass ``blocks=1``.
    """
    buf_obj, count, displ, datatype = _split(spec, arg, (tuple, list))
    bottom, address, nbytes, datatype = _buffer_and_datatype(buf_obj, datatype, readonly, arg)
    offset = 0
    length = nbytes
    if displ is not None:
        displ = _index(displ, arg, "displacement")
        if displ > 0:
            extent = _extent(datatype, arg)
            if not bottom and displ * extent > length:
                raise ValueError(f"{arg}: displacement {displ} out of bounds "
                                 f"({length // extent} entries in the buffer)")
            offset = displ * extent
            length -= offset
    if count is not None:
        count = _index(count, arg, "count")
        if count > 0 and buf_obj is None:
            raise ValueError(f"{arg}: buffer is None but count is {count}")
    elif length > 0:
        extent = _extent(datatype, arg)
        if length % extent:
            raise ValueError(f"{arg}: buffer length {length} is not a multiple of the datatype extent {extent}")
        entries = length // extent
        if blocks >= 2 and entries % blocks:
            raise ValueError(f"{arg}: {entries} entries cannot be split into {blocks} blocks (one per neighbor)")
        count = entries // blocks if blocks >= 2 else entries
    else:
        count = 0
    step = count * _extent(datatype, arg) if (count and blocks > 1) else 0
    result = Blocks(address, (count,) * blocks,
                    tuple(offset + i * step for i in range(blocks)),
                    (datatype,) * blocks)
    if not bottom:
        _check_bounds(result, nbytes, arg)
    return result


def parse_vector(spec, blocks: int, *, readonly: bool, arg: str) -> Blocks:
    """A message of ``blocks`` blocks with their own counts and displacements (in elements)."""
    buf_obj, counts, displs, datatype = _split(spec, arg, (tuple,))
    bottom, address, nbytes, datatype = _buffer_and_datatype(buf_obj, datatype, readonly, arg)
    if counts is None:
        total = 0
        if nbytes > 0:
            extent = _extent(datatype, arg)
            if nbytes % extent:
                raise ValueError(f"{arg}: buffer length {nbytes} is not a multiple of the datatype extent {extent}")
            total = nbytes // extent
        counts = tuple(total // blocks + (total % blocks > i) for i in range(blocks)) if blocks else ()
    elif mpi_index(counts) is not None:
        counts = (_index(counts, arg, "count"),) * blocks
    else:
        counts = _int_list(counts, blocks, arg, "counts")
    if displs is None:
        acc, out = 0, []
        for c in counts:
            out.append(acc)
            acc += c
        displs = tuple(out)
    elif mpi_index(displs) is not None:
        stride = _index(displs, arg, "displacement")
        displs = tuple(stride * i for i in range(blocks))
    else:
        displs = _int_list(displs, blocks, arg, "displacements")
    extent = datatype.Get_extent()[1]
    if any(d for d in displs) and extent <= 0:
        raise ValueError(f"{arg}: datatype extent {extent} cannot place displaced blocks")
    result = Blocks(address, counts, tuple(d * extent for d in displs), (datatype,) * blocks)
    if not bottom:
        _check_bounds(result, nbytes, arg)
    return result


def parse_w(spec, blocks: int, *, readonly: bool, arg: str) -> Blocks:
    """A message of ``blocks`` blocks each with its own count, byte displacement and datatype."""
    if not isinstance(spec, (list, tuple)):
        raise TypeError(f"{arg}: expected (buf, datatypes), (buf, (counts, displs), datatypes) "
                        f"or (buf, counts, displs, datatypes)")
    n = len(spec)
    if n == 2:
        buf_obj, datatypes = spec
        counts = displs = None
    elif n == 3:
        buf_obj, cd, datatypes = spec
        try:
            counts, displs = cd
        except (TypeError, ValueError):
            raise ValueError(f"{arg}: expected (counts, displs) as the second item") from None
    elif n == 4:
        buf_obj, counts, displs, datatypes = spec
    else:
        raise ValueError(f"{arg}: expected a list/tuple of 2 to 4 items, got {n} items")
    bottom = buf_obj is MPI.BOTTOM
    if bottom:
        if counts is None or displs is None:
            raise ValueError(f"{arg}: MPI.BOTTOM requires counts and displacements")
        address, nbytes = 0, 0
    else:
        _, address, nbytes = _buffer(buf_obj, readonly, arg)
    if counts is None and displs is None:
        counts, displs = (1,) * blocks, (0,) * blocks
    else:
        counts = _int_list(counts, blocks, arg, "counts")
        displs = _per_neighbor(displs, blocks, arg, "displacements", "integers")
        indices = tuple(map(mpi_index, displs))
        if None in indices:
            raise TypeError(f"{arg}: displacements must be integers (bytes), got {displs!r}")
        displs = indices
    if isinstance(datatypes, (MPI.Datatype, str)):  # mpi4py refuses one for all blocks: so does the library's call
        raise TypeError(f"{arg}: expected a sequence of MPI datatypes, one per block, got one "
                        f"{type(datatypes).__name__}")
    datatypes = _per_neighbor(datatypes, blocks, arg, "datatypes", "MPI datatypes")
    checked = {}  # a datatype object repeated across blocks is checked once
    types = tuple(checked[id(t)] if id(t) in checked
                  else checked.setdefault(id(t), _w_datatype(t, f"{arg}: datatypes[{i}]"))
                  for i, t in enumerate(datatypes))
    result = Blocks(address, counts, displs, types)
    if not bottom:
        _check_bounds(result, nbytes, arg)
    return result


def _w_datatype(obj, arg: str) -> MPI.Datatype:
    """A datatype of a w form's list, which must be an ``MPI.Datatype`` (:func:`as_datatype`): mpi4py
    takes no typecode string there, so the library's call would refuse what sparsecoll's took."""
    if isinstance(obj, str):
        raise TypeError(f"{arg}: expected an MPI.Datatype (the w forms take no typecode strings), got {obj!r}")
    return as_datatype(obj, arg)


def check_regular_blocks(send: Blocks, recv: Blocks, collective: str) -> None:
    """The MPI standard's rule for ``Neighbor_allgather`` and ``Neighbor_alltoall``: the type
    signature of a process's send block equals that of the receive blocks at every other
    process, "independently of whether the topology graph is connected or not" (its rationale:
    for optimization). sparsecoll's schedules rely on it: a rank that forwards another rank's
    block sizes it by its own receive block. A rank whose send and receive blocks differ in
    bytes (both present) breaks it whatever the others pass: a ValueError naming ``recvbuf``."""
    if len(send) and len(recv):
        sent = send.counts[0] * send.types[0].Get_size()
        received = recv.counts[0] * recv.types[0].Get_size()
        if sent != received:
            raise ValueError(
                f"recvbuf: blocks of {received} bytes where sendbuf's are {sent}: in Neighbor_{collective} "
                f"the MPI standard requires every process's send block to have the type signature of "
                f"the receive blocks at all other processes (use the v form for blocks of different sizes)")


def is_in_place(buf) -> bool:
    """Whether a send (or root's receive) argument asks for in-place operation: ``MPI.IN_PLACE``,
    or None as mpi4py reads it."""
    return buf is None or buf is MPI.IN_PLACE


def reject_in_place(buf, arg: str, collective: str) -> None:
    """ValueError naming ``arg`` where a rank other than the root passes ``MPI.IN_PLACE`` (or None) to
    ``collective``: the MPI standard allows it at the root only."""
    if is_in_place(buf):
        raise ValueError(f"{arg}: MPI.IN_PLACE (or None) is valid only at the root of {collective}")
