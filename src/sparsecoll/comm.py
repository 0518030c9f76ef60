"""The wrapped communicators: mpi4py topology communicators whose Neighbor_* methods
run sparsecoll's schedules.

:func:`wrap` returns an instance of a Python subclass of the communicator's own
mpi4py class (``Cartcomm``, ``Graphcomm`` or ``Distgraphcomm``) sharing its handle,
as ``mpi4py.util.pkl5`` does, so every other method keeps working.

Per handle, sparsecoll keeps one shared state (stored as an MPI attribute on the
handle, so every wrapper of that handle finds it): a private duplicate communicator
that carries all library traffic, the rank's Topology, the Patterns built so far and
a small cache of bound schedules.

Errors: bad arguments raise ValueError or TypeError naming the argument on the rank
that passed them, before that rank sends anything. The other ranks, if they passed
good arguments, enter the collective and wait for the failing rank's messages, as
they would in MPI with an erroneous call; a program must treat such an error as
fatal (or agree on it before calling again).
"""

from __future__ import annotations

import ctypes
import functools
import time
from collections import OrderedDict

import numpy
from mpi4py import MPI

from . import algorithms
from .bind import bind, has_transit
from .buffers import Blocks, parse_simple, parse_vector, parse_w
from .execute.p2p import Executor, ScheduleRequest
from .pattern import family_of, stats
from .topology import PROC_NULL, Topology, from_comm
from .topology import cartesian as cartesian_topology

#: Tags per channel: a pattern may have at most STEP_SPAN - 1 steps (one more for copies).
STEP_SPAN = 1024
#: Channels cycled by nonblocking calls (1..NONBLOCKING_CHANNELS); persistent ones follow.
NONBLOCKING_CHANNELS = 64
#: Bound schedules (and executors of blocking calls) kept per communicator for repeated calls.
CACHE_SIZE = 32
#: Call keys whose idle nonblocking executors are kept (at most one per channel for each).
NONBLOCKING_KEYS = 4

_PARSERS = {
    # collective: (send parser, send blocks from outdegree?, recv parser)
    "allgather": (parse_simple, False, parse_simple),
    "allgatherv": (parse_simple, False, parse_vector),
    "allgatherw": (parse_simple, False, parse_w),
    "alltoall": (parse_simple, True, parse_simple),
    "alltoallv": (parse_vector, True, parse_vector),
    "alltoallw": (parse_w, True, parse_w),
}


class _Recent(OrderedDict):
    """A mapping that keeps the ``size`` (default CACHE_SIZE) most recently used entries."""

    def __init__(self, evict=None, size: int = CACHE_SIZE):
        super().__init__()
        self._evict = evict  # called with each value pushed out
        self._size = size

    def recall(self, key):
        """The value for ``key`` (or None), marked as just used."""
        value = self.get(key)
        if value is not None:
            self.move_to_end(key)
        return value

    def keep(self, key, value) -> None:
        """Store ``value``, pushing out the least recently used entries beyond the size."""
        self[key] = value
        while len(self) > self._size:
            old = self.popitem(last=False)[1]
            if self._evict is not None:
                self._evict(old)


class SharedState:
    """What sparsecoll keeps per communicator handle (shared by all its wrappers)."""

    def __init__(self, comm: MPI.Comm, topology: Topology | None = None):
        self.private = comm.Dup()  # collective
        self.topology = topology if topology is not None else from_comm(comm)
        self.patterns: dict = {}
        self.build_seconds: dict = {}
        self.size_pass: dict = {}
        # blocking calls run their executor to completion, so a cached one is never active
        self.executors = _Recent(evict=Executor.free)  # call key -> ready persistent requests
        self.schedules = _Recent()  # call key -> bound Schedule
        # nonblocking calls: call key -> {channel: idle executor}; an executor in flight is
        # out of its pool, so eviction never frees one in flight
        self.idle_executors = _Recent(evict=_free_executors, size=NONBLOCKING_KEYS)
        self.parsed = _Recent()  # signature of the buffer arguments -> parsed Blocks and their key
        self.nonblocking_calls = 0
        self.persistent_calls = 0
        self.schedules_bound = 0  # bind() calls for collective calls (read by the benchmark)
        tag_ub = self.private.Get_attr(MPI.TAG_UB) or 32767
        self.channels = max(tag_ub // STEP_SPAN, 2)

    # -- tags -----------------------------------------------------------------
    def next_channel(self, persistent: bool) -> int:
        """The channel of the next nonblocking or persistent call (same on every rank)."""
        if not persistent:
            self.nonblocking_calls += 1
            return 1 + (self.nonblocking_calls - 1) % NONBLOCKING_CHANNELS
        self.persistent_calls += 1
        room = max(self.channels - 1 - NONBLOCKING_CHANNELS, 1)
        return 1 + NONBLOCKING_CHANNELS + (self.persistent_calls - 1) % room

    def park(self, key, channel: int, executor: Executor) -> None:
        """Keep the executor of a completed nonblocking call for the next call of ``key`` on ``channel``."""
        if self.private == MPI.COMM_NULL:  # the communicator was freed while the call ran
            executor.free()
            return
        pool = self.idle_executors.recall(key)
        if pool is None:
            pool = {}
            self.idle_executors.keep(key, pool)
        earlier = pool.get(channel)
        if earlier is not None:  # (only if calls of these buffers overlapped, which MPI forbids)
            earlier.free()
        pool[channel] = executor

    def free(self) -> None:
        """Release cached schedules and the private communicator."""
        for executor in self.executors.values():
            executor.free()  # (blocking calls: none in flight)
        self.executors.clear()
        for pool in self.idle_executors.values():
            _free_executors(pool)
        self.idle_executors.clear()
        self.schedules.clear()
        self.parsed.clear()
        self.patterns.clear()
        if self.private != MPI.COMM_NULL:
            self.private.Free()


def _free_executors(pool: dict) -> None:
    for executor in pool.values():
        executor.free()


def _delete_state(comm, keyval, state):
    state.free()


_STATE_KEYVAL = MPI.Comm.Create_keyval(delete_fn=_delete_state)


def _state_of(comm: MPI.Comm, topology: Topology | None = None) -> SharedState:
    """The shared state of a handle, created (collectively) on first use."""
    state = comm.Get_attr(_STATE_KEYVAL)
    if state is None:
        state = SharedState(comm, topology)
        comm.Set_attr(_STATE_KEYVAL, state)
    return state


class NeighborhoodMixin:
    """sparsecoll's neighborhood collectives, mixed into the mpi4py topology classes."""

    _sc_algorithm = "auto"
    _sc_options: dict = {}
    _sc_rebind = False

    # -- plumbing ---------------------------------------------------------------
    @property
    def _sc_state(self) -> SharedState:
        state = self.__dict__.get("_sc_shared")
        if state is None:
            state = self.__dict__["_sc_shared"] = _state_of(self)
        return state

    @property
    def algorithm(self) -> str:
        """The algorithm this wrapper was asked for (``"auto"`` resolves per family)."""
        return self._sc_algorithm

    @property
    def topology(self) -> Topology:
        """This rank's Topology as sparsecoll sees it."""
        return self._sc_state.topology

    def resolved_algorithm(self, collective: str) -> str:
        """The algorithm that runs ``collective`` (``"auto"`` resolved once per family)."""
        if self._sc_algorithm != "auto":
            return self._sc_algorithm
        family = family_of(collective)
        chosen = self.__dict__.setdefault("_sc_chosen", {})  # topology and options are fixed per wrapper
        if family not in chosen:
            chosen[family] = algorithms.choose(self._sc_state.topology, family, self._sc_options)
        return chosen[family]

    def pattern(self, collective: str):
        """This rank's Pattern for the family of ``collective`` (built once, collectively)."""
        key = self._pattern_key(collective)
        name, _, family = key
        algorithm = algorithms.get(name)
        state = self._sc_state
        pattern = state.patterns.get(key)
        if pattern is None:
            reason = algorithm.unsupported_reason(state.topology, family)
            if reason is not None:
                raise NotImplementedError(reason)
            start = time.perf_counter()
            pattern = algorithm.build(state.topology, state.private, self._sc_options, family)
            state.build_seconds[key] = time.perf_counter() - start
            if len(pattern.steps) >= STEP_SPAN:
                raise NotImplementedError(
                    f"algorithm {name!r} built {len(pattern.steps)} steps; at most {STEP_SPAN - 1} are supported")
            state.patterns[key] = pattern
            # A size pass runs on every rank as soon as one rank needs it, so decide
            # it once, together: v/w calls need it when any rank stores an item in
            # transit; regular calls only when such a rank has no block of its own
            # to take the layout from (no edges at all in the alltoall family).
            transit = has_transit(pattern, state.topology)
            blind = transit and family == "alltoall" and not (state.topology.indegree or state.topology.outdegree)
            flags = state.private.allreduce(int(transit) | 2 * int(blind), op=MPI.BOR)
            state.size_pass[key] = (bool(flags & 1), bool(flags & 2))
        return pattern

    def _pattern_key(self, collective: str) -> tuple:
        name = self.resolved_algorithm(collective)
        name = "direct" if name == "native" else name
        return (name, repr(sorted(self._sc_options.items())), family_of(collective))

    def _needs_size_pass(self, collective: str) -> bool:
        """Whether binding ``collective`` needs the (collective) size pass."""
        vector_needs, regular_needs = self._sc_state.size_pass[self._pattern_key(collective)]
        return regular_needs if collective in ("allgather", "alltoall") else vector_needs

    def plan_stats(self, collective: str) -> dict:
        """Deterministic numbers of this rank's schedule for ``collective``'s family.

        Keys: ``algorithm``, ``family``, ``steps``, ``sends``, ``recvs``,
        ``send_items``, ``recv_items``, ``sends_to_others``, ``build_seconds`` and
        whatever the algorithm adds. For ``native`` the numbers are those of the
        one-step pattern MPI libraries use.
        """
        pattern = self.pattern(collective)
        result = {"algorithm": self.resolved_algorithm(collective), **stats(pattern),
                  "build_seconds": self._sc_state.build_seconds.get(self._pattern_key(collective), 0.0)}
        if self._sc_algorithm == "auto":
            result["auto"] = algorithms.explain_choice(self._sc_state.topology, family_of(collective),
                                                       self._sc_options)
        return result

    def _parse_uncached(self, collective: str, sendbuf, recvbuf):
        """``(send Blocks, recv Blocks)``: the buffer arguments checked and parsed."""
        topology = self._sc_state.topology
        send_parser, per_edge, recv_parser = _PARSERS[collective]
        send = send_parser(sendbuf, topology.outdegree if per_edge else 1, readonly=True, arg="sendbuf")
        recv = recv_parser(recvbuf, topology.indegree, readonly=False, arg="recvbuf")
        return send, recv

    def _parse(self, collective: str, sendbuf, recvbuf):
        """``(send Blocks, recv Blocks, key of both)``: the buffer arguments checked and parsed.

        Parsing costs several times the MPI call itself, so where both arguments have a
        cheap signature (:func:`_call_signature`: numpy arrays, alone or in a list spec with
        counts and predefined datatypes) the result is kept for the next call.
        """
        state = self._sc_state
        signature = _call_signature(sendbuf, recvbuf)
        if signature is not None:
            signature = (collective, *signature)
            parsed = state.parsed.recall(signature)
            if parsed is not None:
                return parsed
        send, recv = self._parse_uncached(collective, sendbuf, recvbuf)
        parsed = send, recv, (send.key(), recv.key())
        if signature is not None:
            state.parsed.keep(signature, parsed)
        return parsed

    @property
    def schedules_bound(self) -> int:
        """How many call schedules were bound on this handle so far (all its wrappers together)."""
        return self._sc_state.schedules_bound

    def _executor(self, schedule, channel: int) -> Executor:
        """Requests for a bound ``schedule`` on the private communicator, with ``channel``'s tags."""
        return Executor(self._sc_state.private, schedule, channel * STEP_SPAN)

    def _bind(self, collective: str, send, recv):
        """The Schedule of one call (Phase 2 of HiPC 2017): the Pattern bound to these buffers."""
        state = self._sc_state
        pattern = self.pattern(collective)
        transit_size = None
        if self._needs_size_pass(collective):
            sizes = self._size_pass(pattern, send)
            transit_size = lambda item: (sizes[item], MPI.BYTE)  # noqa: E731
        elif collective in ("allgather", "alltoall"):
            # regular collectives: every block has the local receive (else send) layout
            reference = recv if len(recv) else send
            if len(reference):
                layout = (reference.counts[0], reference.types[0])
                transit_size = lambda item: layout  # noqa: E731
        state.schedules_bound += 1
        return bind(pattern, state.topology, send, recv, transit_size)

    def _size_pass(self, pattern, send) -> dict:
        """Byte sizes of the items this rank receives, for v/w calls of multi-step patterns.

        An intermediate rank cannot know the size of an item it only forwards, so the
        same Pattern runs once on one int64 per item (the size its origin sends); a
        persistent request pays this once, at init.
        """
        state = self._sc_state
        topology = state.topology
        own = numpy.array([c * t.Get_size() for c, t in zip(send.counts, send.types)], dtype=numpy.int64)
        nrecv = max(topology.indegree, 1)
        arrived = numpy.zeros(nrecv, dtype=numpy.int64)
        send_sizes = Blocks(own.ctypes.data, (1,) * len(own), tuple(8 * k for k in range(len(own))),
                            (MPI.INT64_T,) * len(own), own)
        recv_sizes = Blocks(arrived.ctypes.data, (1,) * topology.indegree,
                            tuple(8 * k for k in range(topology.indegree)),
                            (MPI.INT64_T,) * topology.indegree, arrived)
        schedule = bind(pattern, topology, send_sizes, recv_sizes, lambda item: (1, MPI.INT64_T))
        executor = Executor(state.private, schedule, 0)
        try:
            executor.run()
            return {item: ctypes.c_int64.from_address(piece[0]).value
                    for item, piece in schedule.received.items()}
        finally:
            executor.free()

    def _cached_schedule(self, collective: str, send, recv, key):
        """The bound Schedule of the call, from the cache or bound now (and cached)."""
        schedules = self._sc_state.schedules
        schedule = schedules.recall(key)
        if schedule is None:
            schedule = self._bind(collective, send, recv)
            schedules.keep(key, schedule)
        return schedule

    def _call_key(self, collective: str, buffers) -> tuple:
        """What decides a call's schedule: collective, resolved algorithm, buffer layout."""
        return collective, self.resolved_algorithm(collective), buffers

    def _blocking(self, collective: str, sendbuf, recvbuf) -> None:
        send, recv, buffers = self._parse(collective, sendbuf, recvbuf)
        if self._sc_rebind:  # non-persistent mode: bind on every call
            self._run_once(collective, send, recv)
            return
        state = self._sc_state
        key = self._call_key(collective, buffers)
        executor = state.executors.recall(key)
        if executor is None:
            executor = self._executor(self._cached_schedule(collective, send, recv, key), 0)
            state.executors.keep(key, executor)
        executor.run()

    def _nonblocking(self, collective: str, sendbuf, recvbuf) -> ScheduleRequest:
        send, recv, buffers = self._parse(collective, sendbuf, recvbuf)
        state = self._sc_state
        channel = state.next_channel(persistent=False)
        # the call's tags are its channel's (channels cycle); the requests of an earlier call
        # of the same buffers on this channel are reused once it completed, else new ones are
        # made for the bound schedule of these buffers (non-persistent mode: bound per call).
        # Two outstanding calls share a schedule only if they share the receive buffer, which
        # MPI forbids.
        if self._sc_rebind:
            executor, release = self._executor(self._bind(collective, send, recv), channel), None
        else:
            key = self._call_key(collective, buffers)
            pool = state.idle_executors.recall(key)
            executor = pool.pop(channel, None) if pool is not None else None
            if executor is None:
                executor = self._executor(self._cached_schedule(collective, send, recv, key), channel)
            release = functools.partial(state.park, key, channel)
        request = ScheduleRequest(executor, persistent=False, release=release)
        request.Start()
        return request

    def _persistent(self, collective: str, sendbuf, recvbuf) -> ScheduleRequest:
        send, recv, _ = self._parse(collective, sendbuf, recvbuf)
        channel = self._sc_state.next_channel(persistent=True)
        executor = self._executor(self._bind(collective, send, recv), channel)
        return ScheduleRequest(executor, persistent=True)

    def _native(self, method: str, *args):
        return getattr(super(NeighborhoodMixin, self), method)(*args)

    def _allgatherw_as_alltoallw(self, sendbuf, recvbuf):
        """MPI has no allgatherw: express it as alltoallw with every send block at displacement 0."""
        send = parse_simple(sendbuf, 1, readonly=True, arg="sendbuf")
        outdegree = self._sc_state.topology.outdegree
        address, count, datatype = send.piece(0)
        return [MPI.BOTTOM, [count] * outdegree, [address] * outdegree, [datatype] * outdegree], recvbuf

    # -- pickle-based -----------------------------------------------------------------
    def neighbor_allgather(self, sendobj):
        """Gather a picklable object from every in-neighbor (None for PROC_NULL)."""
        if self._sc_algorithm == "native":
            return self._native("neighbor_allgather", sendobj)
        topology = self._sc_state.topology
        data = MPI.pickle.dumps(sendobj)
        sizes = numpy.zeros(topology.indegree, dtype=numpy.int64)
        self._uncached("allgather", [numpy.array([len(data)], dtype=numpy.int64), MPI.INT64_T],
                       [sizes, MPI.INT64_T])
        received = bytearray(int(sizes.sum()))
        displs = _displacements(sizes)
        self._uncached("allgatherv", [data, MPI.BYTE],
                       [received, (sizes.tolist(), displs.tolist()), MPI.BYTE])
        return [None if s == PROC_NULL else MPI.pickle.loads(bytes(received[d:d + n]))
                for s, d, n in zip(topology.sources, displs.tolist(), sizes.tolist())]

    def neighbor_alltoall(self, sendobj):
        """Send picklable object k to out-neighbor k; return one object per in-neighbor."""
        if self._sc_algorithm == "native":
            return self._native("neighbor_alltoall", sendobj)
        topology = self._sc_state.topology
        try:
            objects = list(sendobj)
        except TypeError:
            raise TypeError("sendobj: expected a sequence with one object per out-neighbor") from None
        if len(objects) != topology.outdegree:
            raise ValueError(f"sendobj: expected {topology.outdegree} objects (one per out-neighbor), "
                             f"got {len(objects)}")
        pickled = [MPI.pickle.dumps(obj) for obj in objects]
        send_sizes = numpy.array([len(p) for p in pickled], dtype=numpy.int64)
        recv_sizes = numpy.zeros(topology.indegree, dtype=numpy.int64)
        self._uncached("alltoall", [send_sizes, MPI.INT64_T], [recv_sizes, MPI.INT64_T])
        data = b"".join(pickled)
        received = bytearray(int(recv_sizes.sum()))
        recv_displs = _displacements(recv_sizes)
        send_displs = _displacements(send_sizes)
        self._uncached("alltoallv", [data, (send_sizes.tolist(), send_displs.tolist()), MPI.BYTE],
                       [received, (recv_sizes.tolist(), recv_displs.tolist()), MPI.BYTE])
        return [None if s == PROC_NULL else MPI.pickle.loads(bytes(received[d:d + n]))
                for s, d, n in zip(topology.sources, recv_displs.tolist(), recv_sizes.tolist())]

    def _uncached(self, collective: str, sendbuf, recvbuf) -> None:
        """A blocking call whose buffers are temporary: bind, run, free."""
        send, recv = self._parse_uncached(collective, sendbuf, recvbuf)
        self._run_once(collective, send, recv)

    def _run_once(self, collective: str, send, recv) -> None:
        """Bind, run and free a blocking call's executor (nothing cached)."""
        executor = self._executor(self._bind(collective, send, recv), 0)
        try:
            executor.run()
        finally:
            executor.free()

    # -- lifetime -----------------------------------------------------------------------
    def Free(self) -> None:
        """Free the communicator and everything sparsecoll attached to it (collective)."""
        self.__dict__.pop("_sc_shared", None)
        super().Free()  # deletes the attribute, which frees the shared state


_SUMMARIES = {
    "allgather": "gather one block from every in-neighbor (receive block i from source i)",
    "allgatherv": "allgather with a count and displacement per receive block",
    "allgatherw": "allgather with a count, byte displacement and datatype per receive block "
                  "(not in MPI; proposed by Träff and Hunold, ICPP 2019; recvbuf takes the W forms)",
    "alltoall": "send block k to out-neighbor k, receive block i from in-neighbor i",
    "alltoallv": "alltoall with counts and displacements per block",
    "alltoallw": "alltoall with counts, byte displacements and datatypes per block",
}


def _collective_method(collective: str, kind: str):
    """The mpi4py-named method for one collective and kind (blocking/nonblocking/persistent).

    With ``algorithm="native"`` it calls mpi4py's own method (for allgatherw, MPI's
    alltoallw with every send block at displacement 0); otherwise sparsecoll's schedule.
    """
    stem = {"blocking": "Neighbor_{}", "nonblocking": "Ineighbor_{}", "persistent": "Neighbor_{}_init"}[kind]
    name = stem.format(collective)
    native_name = stem.format("alltoallw" if collective == "allgatherw" else collective)
    run = {"blocking": NeighborhoodMixin._blocking, "nonblocking": NeighborhoodMixin._nonblocking,
           "persistent": NeighborhoodMixin._persistent}[kind]

    def method(self, sendbuf, recvbuf, *info):
        if self._sc_algorithm == "native":
            if collective == "allgatherw":
                sendbuf, recvbuf = self._allgatherw_as_alltoallw(sendbuf, recvbuf)
            return self._native(native_name, sendbuf, recvbuf, *info)
        return run(self, collective, sendbuf, recvbuf)

    returns = {"blocking": "", "nonblocking": "; returns a request (Wait/Test/Free)",
               "persistent": "; returns a persistent request (Start/Wait/Test/Free), restartable"}[kind]
    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"{kind.capitalize()} neighborhood {collective}: {_SUMMARIES[collective]}{returns}."
    if kind == "persistent":
        method.__doc__ += " ``info`` is passed to MPI for ``native`` and otherwise ignored."
    return method


for _collective in _SUMMARIES:
    for _kind in ("blocking", "nonblocking", "persistent"):
        _method = _collective_method(_collective, _kind)
        setattr(NeighborhoodMixin, _method.__name__, _method)
del _collective, _kind, _method


def _call_signature(sendbuf, recvbuf):
    """What pins the parse of two buffer arguments, or None where nothing cheap does.

    Covered: a plain numpy array, or a list or tuple spec whose first entry is one; the
    array by identity, dtype, shape, strides and writability (the parsed Blocks keep it
    alive, so an identity is not reused while it is kept), the rest of the spec (ints,
    ``None``, predefined datatypes, (nested) lists of ints, numpy arrays of counts or
    displacements) by value. Anything else (other buffer objects, derived datatypes) is
    parsed on every call.
    """
    signature = (_argument_signature(sendbuf), _argument_signature(recvbuf))
    return None if _UNPINNED in signature else signature


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


def _array_identity(array: numpy.ndarray) -> tuple:
    return (id(array), array.dtype, array.shape, array.strides, array.flags.writeable)


def _value_signature(spec, depth: int):
    """Counts, displacements and datatypes by value (their contents decide the layout)."""
    kind = type(spec)
    if kind is int or spec is None:
        return spec
    if kind is numpy.ndarray:
        return ("array", spec.dtype.str, spec.shape, spec.tobytes())
    if kind is list or kind is tuple:
        if depth == 3:
            return _UNPINNED
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
    return _UNPINNED


_PREDEFINED_HANDLES: set = set()  # handles of the predefined datatypes met so far


def _displacements(sizes: numpy.ndarray) -> numpy.ndarray:
    """Contiguous displacements of blocks of the given sizes."""
    return (numpy.cumsum(sizes) - sizes).astype(numpy.int64)


class Cartcomm(NeighborhoodMixin, MPI.Cartcomm):
    """A Cartesian communicator with sparsecoll's neighborhood collectives."""


class Graphcomm(NeighborhoodMixin, MPI.Graphcomm):
    """An MPI-1 graph communicator with sparsecoll's neighborhood collectives."""


class Distgraphcomm(NeighborhoodMixin, MPI.Distgraphcomm):
    """A distributed graph communicator with sparsecoll's neighborhood collectives."""


_WRAPPERS = ((MPI.Cartcomm, Cartcomm), (MPI.Graphcomm, Graphcomm), (MPI.Distgraphcomm, Distgraphcomm))


def wrap(comm, algorithm: str = "auto", *, topology: Topology | None = None, rebind: bool = False,
         **options):
    """Wrap an mpi4py topology communicator so its Neighbor_* methods use sparsecoll.

    Collective over ``comm`` the first time a handle is wrapped (it duplicates the
    communicator for library traffic). The result is an instance of ``comm``'s own
    mpi4py class sharing its handle. Wrapping a wrapped communicator returns a new
    wrapper with the new algorithm on the same handle and shared state.
    ``algorithm`` is ``"auto"`` or a name from :func:`sparsecoll.algorithms`;
    ``options`` are the algorithm's options; ``grid=(dims, periods)`` (or the
    ``MPI.Cartcomm`` a distributed graph was built on) asks to detect whether the
    neighborhoods are translations of one offset list on that grid, which enables the
    Cartesian algorithms (collective; the result is a ``CartNeighborhoodComm``).
    ``rebind=True`` binds the schedule anew on every blocking and nonblocking call
    instead of caching it (the non-persistent mode of the HiPC 2017 paper's
    evaluation); ``*_init`` requests always bind once.
    """
    algorithms.check_name(algorithm)
    if not isinstance(rebind, bool):
        raise TypeError(f"rebind: expected a bool, got {type(rebind).__name__}")
    options = algorithms.check_options(algorithm, options)
    for mpi_class, wrapper_class in _WRAPPERS:
        if isinstance(comm, mpi_class):
            break
    else:
        raise TypeError("comm: expected an mpi4py topology communicator (Cartcomm, Graphcomm or "
                        f"Distgraphcomm), got {type(comm).__name__}")
    if comm == MPI.COMM_NULL:
        raise ValueError("comm: is MPI.COMM_NULL")
    if isinstance(comm, NeighborhoodMixin):
        wrapper_class = type(comm)  # keeps subclasses such as CartNeighborhoodComm
    state = comm.__dict__.get("_sc_shared") if isinstance(comm, NeighborhoodMixin) else None
    if state is None:
        state = _state_of(comm, topology)
    if options.get(cartesian_topology.GRID_OPTION) is not None and state.topology.offsets is None:
        state.topology = cartesian_topology.detect(state.private, state.topology, options[cartesian_topology.GRID_OPTION])
    if wrapper_class is Distgraphcomm and cartesian_topology.is_cartesian(state.topology):
        from .cartcomm import CartNeighborhoodComm
        wrapper_class = CartNeighborhoodComm
    wrapped = wrapper_class(comm)
    wrapped.__dict__["_sc_shared"] = state
    wrapped._sc_algorithm = algorithm
    wrapped._sc_options = options
    wrapped._sc_rebind = rebind
    return wrapped
