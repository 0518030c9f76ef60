"""Persistence levels: the info keys of Hoefler and Schneider, SC12, section II (A-C).

T. Hoefler, T. Schneider, "Optimization Principles for Collective Neighborhood
Communications", SC12. Section II defines three *persistence levels*, promises a user makes
about the calls on a topology communicator, passed as info keys (the ``cdag`` prefix is the
paper's). An implementation that does not know a key ignores it; a user must not "lie"
(the code must stay within what it promised); and the keys are collective: every process
gives the same set. This module is the one place that knows them:

* ``cdag_strict_communication`` (II-A, persistent topology): communication on this
  communicator happens only along the topology's edges, by neighborhood collectives.
* ``cdag_exact_byte_communications`` (II-B, persistent topology and sizes): the edge weights
  of the (weighted) topology are the exact bytes of every call: an out-edge's weight is what
  this rank sends along it per call, an in-edge's weight what it receives.
* ``cdag_static_buffers`` (II-C, persistent buffers): every call of a collective on this
  communicator uses the same buffers.

:func:`parse` reads an ``info`` argument (an ``MPI.Info`` or a dict), :func:`from_comm` the keys
the MPI library kept in the communicator's own info, :func:`agree` checks with one allreduce
that every rank gave the same level (and, for exact bytes, that the topology is weighted),
:class:`ExactBytesCheck` holds calls to the weights, and :func:`enabled` says what a level
buys a plan (what ``plan_stats`` reports). What each level enables is described in
:func:`sparsecoll.wrap`'s docstring and the README.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy
from mpi4py import MPI

from ..topology import PROC_NULL
from .caches import Recent

STRICT = "cdag_strict_communication"
EXACT_BYTES = "cdag_exact_byte_communications"
STATIC_BUFFERS = "cdag_static_buffers"
#: The info keys, in the order of the :class:`Persistence` fields.
KEYS = (STRICT, EXACT_BYTES, STATIC_BUFFERS)


@dataclass(frozen=True)
class Persistence:
    """The persistence level in force: one flag per info key (all False: no promise)."""

    strict: bool = False
    exact_bytes: bool = False
    static_buffers: bool = False

    def flags(self) -> tuple:
        """The flags in the order of :data:`KEYS`."""
        return (self.strict, self.exact_bytes, self.static_buffers)

    def keys(self) -> list:
        """The info keys set to true."""
        return [key for key, flag in zip(KEYS, self.flags()) if flag]


NONE = Persistence()


def _flag(key: str, value) -> bool:
    """An info value: "true"/"false" (any case, surrounding blanks ignored) or a Python bool."""
    if isinstance(value, (bool, numpy.bool_)):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError(f"{key}: expected \"true\" or \"false\", got {value!r}")


def parse(info) -> dict:
    """``{key: bool}`` of the persistence keys ``info`` gives (local; raises before any message).

    ``info``: None, an ``MPI.Info`` (``MPI.INFO_NULL`` included) or a dict. Keys other than
    :data:`KEYS` are ignored, as MPI ignores keys it does not know; a key of :data:`KEYS`
    with another value than "true"/"false" (or a bool) raises ValueError naming it.
    """
    if info is None:
        return {}
    if isinstance(info, MPI.Info):
        if info == MPI.INFO_NULL:
            return {}
        found = {key: info.Get(key) for key in KEYS}
        return {key: _flag(key, value) for key, value in found.items() if value is not None}
    if isinstance(info, dict):
        return {key: _flag(key, info[key]) for key in KEYS if key in info}
    raise TypeError(f"info: expected an MPI.Info, a dict or None, got {type(info).__name__}")


def from_comm(comm: MPI.Comm) -> dict:
    """``{key: bool}`` of the persistence keys the MPI library kept in ``comm``'s own info (local).

    MPICH 5.0.2 and Open MPI 5.0.11 drop keys they do not know from a communicator's info
    (``Set_info``, ``Dup_with_info``), so there this is usually empty. ``wrap(info=...)`` is the
    portable path.
    """
    info = comm.Get_info()
    try:
        return parse(info)
    finally:
        info.Free()


def level(info=None, comm: MPI.Comm | None = None) -> Persistence:
    """The level of ``info`` over the communicator's own keys (``info`` wins per key; local)."""
    given = from_comm(comm) if comm is not None else {}
    given.update(parse(info))
    return Persistence(*(given.get(key, False) for key in KEYS))


def is_weighted(topology) -> bool:
    """Whether ``topology`` has edge weights (a rank without edges counts as weighted)."""
    if not (topology.indegree or topology.outdegree):
        return True
    return topology.source_weights is not None and topology.dest_weights is not None


def key_fingerprint(key: tuple) -> int:
    """A number for a key of values (a Plan's ``key``, a wrapper's options) that is the same on
    every rank holding an equal key: ranks compare keys by one allreduce of it."""
    return zlib.crc32(repr(key).encode())


def key_differs(comm: MPI.Comm, key: tuple) -> bool:
    """Whether some rank of ``comm`` holds another ``key`` than this rank (collective: one allreduce;
    every rank gets the same answer)."""
    mine = key_fingerprint(key)
    highest = numpy.empty(2, dtype=numpy.int64)
    comm.Allreduce(numpy.array([mine, -mine], dtype=numpy.int64), highest, op=MPI.MAX)
    return bool(highest[0] != -highest[1])


#: The most integers a plan gives :func:`agree` (:meth:`sparsecoll.runtime.plan.Plan.decision_inputs`).
DECISION_INPUTS = 2


def agree(private: MPI.Comm, persistence: Persistence, topology, plan_key: tuple = (),
          decision_inputs: tuple = (), refused: int = 0) -> tuple:
    """Check, with one allreduce over ``private``, that every rank gave the same level and the
    same ``plan_key`` (the algorithm, options and executor: :attr:`~sparsecoll.runtime.plan.Plan.key`),
    collectively, and gather the range of ``decision_inputs`` (integers ranks may hold
    differently: :meth:`~sparsecoll.runtime.plan.Plan.decision_inputs`).

    A key set to "false" counts as not given (the level is what matters). If the ranks differ,
    every rank raises ValueError naming the keys that differ (or saying the algorithm, options or
    executor differ: ranks running different schedules would wait for each other's messages);
    if ``cdag_exact_byte_communications`` is set and some rank's topology has no weights, every
    rank raises ValueError naming the key. Either way no other message was sent. Returns, the same
    on every rank, under exact bytes the largest out-edge weight over all ranks (the largest block
    of any call), else None; the lowest and highest of each decision input over the ranks; and the
    highest ``refused`` (a code of an argument this rank refused, 0 for none: a rank that refused
    one holds a stand-in plan, so where a rank refused, nothing else is compared or raised here).
    """
    flags = numpy.array(persistence.flags(), dtype=numpy.int64)
    # padded to one length on every rank: ranks that gave different algorithms (auto's plan has
    # inputs, a named one's none) must still pass equal counts to the allreduce that finds it
    inputs = numpy.zeros(DECISION_INPUTS, dtype=numpy.int64)
    inputs[:len(decision_inputs)] = decision_inputs
    weighted = is_weighted(topology)
    unweighted = int(persistence.exact_bytes and not weighted)
    largest = max((w for d, w in zip(topology.destinations, topology.dest_weights or ()) if d != PROC_NULL),
                  default=0) if persistence.exact_bytes and weighted else 0
    plan = key_fingerprint(plan_key)
    local = numpy.concatenate([flags, -flags, [unweighted, largest, plan, -plan], inputs, -inputs, [refused]])
    agreed = numpy.empty_like(local)
    private.Allreduce(local, agreed, op=MPI.MAX)
    refused_highest = int(agreed[-1])
    agreed = agreed[:-1]
    inputs_highest, inputs_lowest = numpy.split(agreed[2 * len(KEYS) + 4:], 2)
    ranges = tuple((int(-low), int(high)) for low, high in zip(inputs_lowest, inputs_highest))[:len(decision_inputs)]
    if refused_highest:
        return None, ranges, refused_highest
    count = len(KEYS)
    highest, lowest = agreed[:count], -agreed[count:2 * count]
    differ = [key for key, high, low in zip(KEYS, highest, lowest) if high != low]
    if differ:
        raise ValueError(f"info: the ranks gave different values of {', '.join(differ)}; info keys are "
                         f"collective: every rank must give the same set")
    some_unweighted, largest_over_ranks, plan_highest, plan_lowest = agreed[2 * count:2 * count + 4]
    if plan_highest != -plan_lowest:
        raise ValueError("algorithm: the ranks gave wrap different algorithms, options or executors; they "
                         "decide every call's messages, so every rank must give the same")
    if some_unweighted:
        raise ValueError(f"{EXACT_BYTES}: the topology has no edge weights on some rank; the key says the "
                         f"weights are the exact bytes per edge, so it needs a weighted distributed graph")
    return (int(largest_over_ranks) if persistence.exact_bytes else None), ranges, 0


class ExactBytesCheck:
    """Holds the calls of one collective to the weights (``cdag_exact_byte_communications``).

    Called with a call's buffer arguments before anything is sent; raises ValueError naming
    the key and the first edge whose bytes differ from its weight (out-edges first, then
    in-edges; ``PROC_NULL`` edges carry nothing and are not checked). The runtime parses the
    arguments anyway and caches the parse by array identity; a layout that passed is
    remembered by its layout number, so a repeated call costs one parse-cache lookup and one
    set lookup. Plain calls (key not set) never reach this.
    """

    def __init__(self, runtime, collective: str, per_edge_send: bool):
        self._runtime = runtime
        self.collective = collective
        self._per_edge_send = per_edge_send  # alltoall family: one send block per out-edge
        self._passed = Recent(size=64)  # layout numbers that matched the weights

    def __call__(self, sendbuf, recvbuf) -> None:
        send, recv, layout = self._runtime.parse(self.collective, sendbuf, recvbuf)
        if self._passed.recall(layout) is None:
            self._check(send, recv)
            self._passed.keep(layout, True)

    def _check(self, send, recv) -> None:
        topology = self._runtime.topology
        for k, (dest, weight) in enumerate(zip(topology.destinations, topology.dest_weights or ())):
            if dest == PROC_NULL:
                continue
            block = k if self._per_edge_send else 0
            nbytes = send.counts[block] * send.types[block].Get_size()
            if nbytes != weight:
                raise ValueError(f"{EXACT_BYTES}: sendbuf: out-edge {k} (to rank {dest}) carries {nbytes} bytes in "
                                 f"this Neighbor_{self.collective} call, but its weight says {weight}")
        for i, (source, weight) in enumerate(zip(topology.sources, topology.source_weights or ())):
            if source == PROC_NULL:
                continue
            nbytes = recv.counts[i] * recv.types[i].Get_size()
            if nbytes != weight:
                raise ValueError(f"{EXACT_BYTES}: recvbuf: in-edge {i} (from rank {source}) carries {nbytes} bytes "
                                 f"in this Neighbor_{self.collective} call, but its weight says {weight}")


class CheckedRuntime:
    """Runs a call plan's calls through :class:`ExactBytesCheck` first, then the runtime's own path.

    It stands in for the runtime in a CallPlan of a plan with ``cdag_exact_byte_communications``
    (the wrapper calls ``call.runtime.<form>(call, ...)``), so plans without the key keep the
    runtime's path untouched.
    """

    def __init__(self, runtime, check: ExactBytesCheck):
        self._runtime = runtime
        self._check = check

    def blocking(self, call, sendbuf, recvbuf) -> None:
        """A blocking call, checked."""
        self._check(sendbuf, recvbuf)
        self._runtime.blocking(call, sendbuf, recvbuf)

    def nonblocking(self, call, sendbuf, recvbuf):
        """A nonblocking call, checked; returns its request."""
        self._check(sendbuf, recvbuf)
        return self._runtime.nonblocking(call, sendbuf, recvbuf)

    def persistent(self, call, sendbuf, recvbuf, info=None):
        """A persistent request, checked at init."""
        self._check(sendbuf, recvbuf)
        return self._runtime.persistent(call, sendbuf, recvbuf, info)


def checked_method(method, check):
    """``method`` (a library call taking ``(sendbuf, recvbuf, *rest)``) run after ``check(sendbuf, recvbuf)``."""
    def call(sendbuf, recvbuf, *rest):
        check(sendbuf, recvbuf)
        return method(sendbuf, recvbuf, *rest)
    call.__doc__ = getattr(method, "__doc__", None)
    return call


def weight_bytes(topology) -> int | None:
    """This rank's exact bytes per block as ``auto`` classes a call: the mean out-edge weight,
    else the mean in-edge weight (None without edges or weights)."""
    for weights in (topology.dest_weights, topology.source_weights):
        if weights:
            return sum(weights) // len(weights)
    return None


#: The option by which an algorithm's build assumes a block size (``loggp_tree``'s allgather ``k``):
#: under exact bytes, :meth:`sparsecoll.runtime.Plan.sized` fills it from the weights.
BLOCK_BYTES_OPTION = "block_bytes"


def enabled(persistence: Persistence, *, native: bool, auto: bool, strict_built=(), auto_class=None,
            block_bytes=None) -> list:
    """What the level buys a plan, in short phrases (``plan_stats``'s ``persistence["enabled"]``)."""
    notes = []
    if persistence.strict:
        if native:
            notes.append(f"{STRICT}: nothing to prepare (the library runs the calls)")
        elif auto:
            notes.append(f"{STRICT}: auto's cost models of both families made at wrap")
        elif strict_built:
            notes.append(f"{STRICT}: patterns and size-pass decisions of {', '.join(strict_built)} made at wrap")
        else:
            notes.append(f"{STRICT}: nothing to prepare (the algorithm supports no family here)")
    if persistence.exact_bytes:
        notes.append(f"{EXACT_BYTES}: every call checked against the edge weights before sending")
        if block_bytes is not None:
            notes.append(f"{EXACT_BYTES}: the build assumes blocks of {block_bytes} bytes "
                         f"(the weights' largest, unless {BLOCK_BYTES_OPTION}= was given)")
        if auto:
            where = "" if auto_class is None else f" (size class {auto_class})"
            notes.append(f"{EXACT_BYTES}: auto chooses by the weights' bytes, one choice for every call{where}")
    if persistence.static_buffers:
        if auto:
            notes.append(f"{STATIC_BUFFERS}: auto also considers every candidate's schedule on the rma executor "
                         f"for persistent requests (where the profile has rma costs)")
        else:
            notes.append(f"{STATIC_BUFFERS}: recorded for executors that keep buffer registrations "
                         f"(the point-to-point executors send the same messages either way)")
    return notes
