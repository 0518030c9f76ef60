"""CopyIn and CopyOut of the universal hierarchical algorithm (the paper on hierarchical
shared-memory collectives and imbalanced process arrival, section II, Fig. 1): moving a block of
a user buffer (any count and MPI datatype) into and out of a node's shared buffer.

A block is stored *packed*: its elements' bytes one after another (``count * Get_size()``
bytes), so non-contiguous user data becomes contiguous for the inter-node phase, as the paper
says of the vector collectives. Contiguous datatypes are copied with numpy; others with
``Datatype.Pack`` / ``Unpack``, which in a homogeneous run produce exactly the element bytes.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy
from mpi4py import MPI

from ..buffers import predefined_leaves, span

_UINT8 = numpy.uint8


def is_contiguous(datatype: MPI.Datatype) -> bool:
    """Whether ``count`` elements of ``datatype`` are ``count * size`` consecutive bytes at the
    address, in that order: a predefined datatype whose extent is its size. A derived one is
    never taken for that: its bounds can say so while its type map takes the bytes in another
    order (a transpose: a column vector resized to one element, ``n`` of them, resized to the
    whole matrix), and MPI moves elements in type-map order; ``Pack`` / ``Unpack`` copy those."""
    if not datatype.is_predefined:
        return False
    lb, extent = datatype.Get_extent()
    true_lb, true_extent = datatype.Get_true_extent()
    size = datatype.Get_size()
    return lb == 0 and true_lb == 0 and extent == size and true_extent == size


def check_one_datatype(sent: MPI.Datatype, received: MPI.Datatype) -> None:
    """mpi4py's rule for reductions: the send and receive buffers' datatype is one handle (an
    int32 array reduced into a float32 one is a ValueError there, not a reinterpretation)."""
    if sent != received:
        raise ValueError(f"sendbuf: datatype {sent.Get_name() or 'derived'} differs from recvbuf's "
                         f"({received.Get_name() or 'derived'}); a reduction takes one datatype")


def packed_size(count: int, datatype: MPI.Datatype) -> int:
    """Bytes ``count`` elements of ``datatype`` take packed."""
    return int(count) * datatype.Get_size()


def pack(address: int, count: int, datatype: MPI.Datatype, out: numpy.ndarray, offset: int,
         contiguous=None) -> int:
    """Copy ``count`` x ``datatype`` at ``address`` into ``out[offset:]`` packed; returns the bytes written.
    ``contiguous``: :func:`is_contiguous` of ``datatype`` if the caller knows it."""
    nbytes = packed_size(count, datatype)
    if nbytes == 0:
        return 0
    if is_contiguous(datatype) if contiguous is None else contiguous:
        out[offset:offset + nbytes] = numpy.frombuffer(MPI.memory.fromaddress(address, nbytes, readonly=True),
                                                       dtype=_UINT8)
    else:
        memory, layout = _datatype_memory(address, count, datatype, readonly=True)
        try:
            layout.Pack(memory, out[offset:offset + nbytes], 0, MPI.COMM_SELF)
        finally:
            if layout is not datatype:
                layout.Free()
    return nbytes


def unpack(source: numpy.ndarray, offset: int, address: int, count: int, datatype: MPI.Datatype,
           contiguous=None) -> int:
    """Copy the packed ``count`` x ``datatype`` at ``source[offset:]`` to ``address``; returns the bytes read.
    ``contiguous``: :func:`is_contiguous` of ``datatype`` if the caller knows it."""
    nbytes = packed_size(count, datatype)
    if nbytes == 0:
        return 0
    if is_contiguous(datatype) if contiguous is None else contiguous:
        numpy.frombuffer(MPI.memory.fromaddress(address, nbytes), dtype=_UINT8)[:] = source[offset:offset + nbytes]
    else:
        memory, layout = _datatype_memory(address, count, datatype, readonly=False)
        try:
            layout.Unpack(source[offset:offset + nbytes], 0, memory, MPI.COMM_SELF)
        finally:
            if layout is not datatype:
                layout.Free()
    return nbytes


def at_origin(origin: int, nbytes: int):
    """The buffer of a spec ``[buffer, count, datatype]`` whose datatype's displacements count from
    the address ``origin``, which need not lie in the data: ``scratch - first`` for scratch memory
    holding the bytes ``first..end`` of the datatype, below the scratch (and, for absolute
    addresses under ``MPI.BOTTOM``, below address 0: taken modulo the address space, as C's pointer
    arithmetic does); ``MPI.BOTTOM`` itself for address 0, where mpi4py makes no memory."""
    origin %= 2**64
    return MPI.BOTTOM if origin == 0 else MPI.memory.fromaddress(origin, nbytes)


@contextmanager
def laid_out(packed: numpy.ndarray, count: int, datatype: MPI.Datatype, write_back: bool = True):
    """The packed ``count`` x ``datatype`` at the start of ``packed``, unpacked into scratch memory in
    ``datatype``'s own layout, as the buffer spec ``[buffer, count, datatype]`` (MPI calls a user-defined
    op with the program's datatype, on data in its layout); packed back into ``packed`` on exit
    (``write_back``). The scratch holds the bytes the data spans (from ``0`` or the true lower bound,
    whichever is lower, to ``count`` extents or the true upper bound, whichever is higher), but only
    those of the data where its lower bound lies past ``count`` extents: a datatype of absolute
    addresses (``MPI.BOTTOM``) asked for scratch from address 0 to the data, tebibytes."""
    extent = datatype.Get_extent()[1]
    first, end = span(count, datatype)
    low, high = min(first, 0), max(end, count * extent)
    if first > count * extent:  # absolute addresses, or a lower bound far past the origin
        low, high = first, end
    nbytes = max(high - low, 1)
    scratch = numpy.zeros(nbytes, dtype=_UINT8)
    origin = scratch.ctypes.data - low
    unpack(packed, 0, origin, count, datatype)
    yield [at_origin(origin, nbytes), count, datatype]
    if write_back:
        pack(origin, count, datatype, packed, 0)


def _datatype_memory(address: int, count: int, datatype: MPI.Datatype, readonly: bool) -> tuple:
    """``(memory, layout)`` that ``Pack``/``Unpack`` read ``count`` x ``datatype`` at ``address`` through
    (mpi4py's take ``len(memory) // extent(layout)`` elements of ``layout`` from the memory's start).

    Usually ``count * extent`` bytes at ``address`` and ``datatype`` itself. Where the data starts
    before ``address`` or lies outside that range (``MPI.BOTTOM`` with absolute addresses: address
    0; a negative lower bound), the memory is the bytes the data spans and the layout one element:
    ``count`` x ``datatype`` placed at ``address`` relative to the memory's start, resized to it
    (a datatype made per call, freed by the caller). ``address`` may be below 0 (the origin of
    scratch memory for absolute addresses, :func:`laid_out`): only the data's bytes are used."""
    extent = datatype.Get_extent()[1]
    first, end = span(count, datatype)
    if address > 0 and first >= 0 and end <= count * extent:
        return MPI.memory.fromaddress(address, count * extent, readonly=readonly), datatype
    placed = MPI.Datatype.Create_struct([count], [-first], [datatype])
    layout = placed.Create_resized(0, end - first).Commit()
    placed.Free()
    return MPI.memory.fromaddress(address + first, end - first, readonly=readonly), layout


def pack_block(blocks, index: int, out: numpy.ndarray, offset: int) -> int:
    """:func:`pack` block ``index`` of a :class:`sparsecoll.buffers.Blocks`."""
    return pack(blocks.address + blocks.displs[index], blocks.counts[index], blocks.types[index], out, offset)


def unpack_block(source: numpy.ndarray, offset: int, blocks, index: int) -> int:
    """:func:`unpack` into block ``index`` of a :class:`sparsecoll.buffers.Blocks`."""
    return unpack(source, offset, blocks.address + blocks.displs[index], blocks.counts[index], blocks.types[index])


def pack_blocks(blocks, out: numpy.ndarray, offsets, base: int = 0) -> None:
    """:func:`pack` every block ``i`` of a :class:`sparsecoll.buffers.Blocks` at ``base + offsets[i]``."""
    contiguous = {}
    for i, (count, displ, datatype) in enumerate(zip(blocks.counts, blocks.displs, blocks.types)):
        if count:
            known = contiguous.get(id(datatype))
            if known is None:
                known = contiguous[id(datatype)] = is_contiguous(datatype)
            pack(blocks.address + displ, count, datatype, out, base + int(offsets[i]), known)


def unpack_blocks(source: numpy.ndarray, offsets, blocks, base: int = 0) -> None:
    """:func:`unpack` every block ``i`` of a :class:`sparsecoll.buffers.Blocks` from ``base + offsets[i]``."""
    contiguous = {}
    for i, (count, displ, datatype) in enumerate(zip(blocks.counts, blocks.displs, blocks.types)):
        if count:
            known = contiguous.get(id(datatype))
            if known is None:
                known = contiguous[id(datatype)] = is_contiguous(datatype)
            unpack(source, base + int(offsets[i]), blocks.address + displ, count, datatype, known)


def reduction_element(datatype: MPI.Datatype):
    """The one predefined, contiguous datatype ``datatype`` is built of, and how many of it one
    ``datatype`` element holds: ``(basic, per_element)``; None when there is no such single type.

    Packed data of ``datatype`` is then ``count * per_element`` consecutive ``basic`` elements, on
    which a predefined reduction acts element by element as it does on ``datatype``. A datatype of
    no bytes (``INT.Create_contiguous(0)``) has ``per_element`` 0 (:func:`whole_elements` divides).
    """
    leaves = predefined_leaves(datatype)
    if len(leaves) != 1:
        return None
    (basic,) = leaves
    if not is_contiguous(basic) or basic.Get_size() == 0:
        return None
    size = datatype.Get_size()
    if size % basic.Get_size():
        return None
    return basic, size // basic.Get_size()


#: ``(op, datatype)`` handles of predefined ops :func:`check_op_defined` found defined on a predefined type
_DEFINED: set = set()


def check_op_defined(op: MPI.Op, datatype: MPI.Datatype) -> None:
    """ValueError naming ``op`` where a predefined ``op`` is not defined for a predefined type
    ``datatype`` is built of (MPI-4.1 6.9.2: ``MPI.BAND`` on doubles, ``MPI.MAXLOC`` on a type that
    is not a pair): the library's reductions raise ``MPI_ERR_OP`` on every rank, where the
    hierarchy's apply the op only on the ranks with a share of the elements, and the others waited.
    Local, before anything is sent: ``Op.Reduce_local`` on one zeroed element of each such type
    (every rank passes the op and the type signature, so every rank raises); a pair found
    defined is not checked again (local work only)."""
    if not op.is_predefined:
        return
    for leaf in predefined_leaves(datatype):
        key = (op.handle, leaf.handle)
        if key in _DEFINED:
            continue
        extent = max(leaf.Get_extent()[1], leaf.Get_true_extent()[1], 1)
        scratch = numpy.zeros(2 * extent, dtype=_UINT8)
        try:
            op.Reduce_local([scratch[:extent], 1, leaf], [scratch[extent:], 1, leaf])
        except MPI.Exception as exc:
            raise ValueError(f"op: this predefined operation is not defined for datatype "
                             f"{leaf.Get_name() or 'predefined'} (MPI-4.1 6.9.2)") from exc
        _DEFINED.add(key)


def whole_elements(basic_count: int, per_element: int) -> int:
    """How many whole elements ``basic_count`` basic elements make, ``per_element`` to an element
    (:func:`reduction_element`); 0 for a datatype of no bytes (``per_element`` 0: no elements)."""
    return basic_count // per_element if per_element else 0
