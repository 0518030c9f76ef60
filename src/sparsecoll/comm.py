"""The wrapped communicators: mpi4py topology communicators whose Neighbor_* methods run
sparsecoll's schedules, and intracommunicators whose global collectives (as well as the
topology communicators') run the universal hierarchical algorithm (:mod:`sparsecoll.hierarchy`).

:func:`wrap` returns an instance of a Python subclass of the communicator's own mpi4py
class (``Cartcomm``, ``Graphcomm`` or ``Distgraphcomm``) sharing its handle, as
``mpi4py.util.pkl5`` does, so every other method keeps working. Each mpi4py-named method
below is written out: with the ``native`` algorithm it calls mpi4py's own method, otherwise
it hands the call to the handle's runtime (:mod:`sparsecoll.runtime`), which owns caching,
tags, binding, progress and ``auto``'s decisions. This module decides none of that: a wrapper
keeps the runtime's answer per collective (``_sc_calls``) and, for ``auto``, installs the
methods the runtime gives it (:func:`sparsecoll.runtime.auto.wrapper_methods`), so settled
calls skip the wrapper's frames.

Errors: bad arguments raise ValueError or TypeError naming the argument on the rank that
passed them, before that rank sends anything. The other ranks, if they passed good
arguments, enter the collective and wait for the failing rank's messages, as they would in
MPI with an erroneous call; a program must treat such an error as fatal (or agree on it
before calling again).
"""

from __future__ import annotations

import weakref
from types import MappingProxyType

import numpy
from mpi4py import MPI

from .buffers import buffer_object, parse_simple
from .checks import is_integer, nonnegative_integer, positive_integer
from .execute import DEFAULT_EXECUTOR
from .hierarchy import GLOBAL_COLLECTIVES, Hierarchy, global_collective_name, objects
from .hierarchy.handles import hierarchies, hierarchy_of, options_key
from .hierarchy.offsets import exclusive_sum
from .hierarchy.reduce_dynamic import MODES as REDUCE_MODES
from .model import choice as model_choice
from .model.profile import FORMS, library_name
from .pattern import family_of
from .runtime import CommRuntime, PendingPrivate, Plan, auto, existing_runtime, make_plan, release_runtime, runtime_of
from .runtime import persistence as levels
from .topology import PROC_NULL, Topology, from_comm
from .topology import cartesian as cartesian_topology
from .topology.cartesian import Grid, check_offsets, grid_of

#: The mpi4py method name of each collective and form.
METHOD_NAMES = {collective: {"blocking": f"Neighbor_{collective}", "nonblocking": f"Ineighbor_{collective}",
                             "persistent": f"Neighbor_{collective}_init"}
                for collective in ("allgather", "allgatherv", "allgatherw", "alltoall", "alltoallv", "alltoallw")}


class GlobalCollectivesMixin:
    """MPI's global collectives run by the universal hierarchical algorithm
    (:mod:`sparsecoll.hierarchy.collectives`), mixed into every wrapper class.

    Blocking ``Allgather(v)``, ``Alltoall(v)``, ``Reduce_scatter(_block)``, ``Bcast``,
    ``Scatter(v)``, ``Gather(v)``, ``Reduce`` and ``Allreduce`` keep mpi4py's signatures and
    semantics, and so do mpi4py's lowercase pickle-based ``allgather``, ``alltoall``, ``bcast``,
    ``gather``, ``scatter``, ``reduce`` and ``allreduce``, which run on them
    (:mod:`sparsecoll.hierarchy.objects`). The node structure (node and leader communicators, shared windows) is made by
    :func:`wrap` for an intracommunicator, else by the first global collective (collective, as
    every rank makes that call). Everything else, the nonblocking and persistent forms, ``Alltoallw``,
    ``barrier`` and the scans included, stays the MPI library's own.
    """

    _sc_hierarchy: Hierarchy | None = None
    _sc_hierarchy_options = MappingProxyType({})
    _sc_global_native = False  # the library's own global collectives (wrap(intracomm, "native"))
    _sc_global_reason = "algorithm='native': the library's own global collectives"  # why, when they are

    def hierarchy_stats(self) -> dict:
        """Node count, ranks per node, shared window bytes, the inter-node collective and call counts (local).

        RuntimeError before the node structure was made (by :func:`wrap` for an intracommunicator,
        by the first global collective on a topology communicator)."""
        hierarchy = self.__dict__.get("_sc_hierarchy")
        if hierarchy is None and self._sc_global_native:
            raise RuntimeError(f"hierarchy_stats(): this communicator's global collectives are the library's "
                               f"({self._sc_global_reason})")
        if self._sc_global_native:  # the node structure was made, but the library runs the calls
            return {**hierarchy.stats(), "library": self._sc_global_reason}
        if hierarchy is None:
            raise RuntimeError("hierarchy_stats(): no node structure on this communicator yet; "
                               "call a global collective (e.g. Allreduce) on every rank first")
        return hierarchy.stats()

    def Set_errhandler(self, errhandler: MPI.Errhandler) -> None:
        """Set the communicator's error handler, and that of the communicators sparsecoll made
        for its handle (their MPI errors are this communicator's: ``ERRORS_ARE_FATAL`` aborts, a
        user's handler is called, as for the library's own collectives). Local."""
        super().Set_errhandler(errhandler)
        runtime = existing_runtime(self)
        hidden = runtime.communicators() if runtime is not None else []
        for hierarchy in hierarchies(self):
            hidden += hierarchy.communicators()
        for comm in hidden:
            if comm != MPI.COMM_NULL:
                comm.Set_errhandler(errhandler)

    def _sc_hier(self) -> Hierarchy | None:
        """The node structure (made collectively on first use); None for the library's collectives."""
        if self._sc_global_native:
            return None
        hierarchy = self.__dict__.get("_sc_hierarchy")
        if hierarchy is None:
            hierarchy = self.__dict__["_sc_hierarchy"] = hierarchy_of(self, self._sc_hierarchy_options)
        return hierarchy

    def _sc_free_hierarchy(self) -> None:
        """Drop this wrapper's reference: the handle's ``Free`` frees the structure (:mod:`.hierarchy.handles`)."""
        self.__dict__.pop("_sc_hierarchy", None)

    def _sc_bind_library_globals(self) -> None:
        """Where this wrapper keeps the library's global collectives, give the instance the
        library's own methods for them, so that their calls run no sparsecoll code (the mixin's
        method costs 0.5 us more per ``Allreduce`` at 2 ranks, 4 us at 8 ranks on 2 cores).
        Local, made once the choice is final (at :func:`wrap` and when a copy is adopted)."""
        if self._sc_global_native:
            library = super()
            for name in GLOBAL_COLLECTIVES:
                self.__dict__[name] = getattr(library, name)

    def _sc_global(self, name: str, run, *args):
        """Run the global collective ``name`` through ``run(hierarchy)`` (False: the library must run
        it), else the library's method with ``args``; records what ran for :meth:`plan_stats`."""
        hierarchy = self._sc_hier()
        if hierarchy is not None:
            ran = run(hierarchy)
            hierarchy.record(name, ran is not False)
            if ran is not False:
                return None
        return getattr(super(), name)(*args)

    def Allgather(self, sendbuf, recvbuf) -> None:
        """Gather one block from every rank into every rank's ``recvbuf`` (``sendbuf`` may be IN_PLACE)."""
        self._sc_global("Allgather", lambda h: h.allgather(sendbuf, recvbuf, vector=False), sendbuf, recvbuf)

    def Allgatherv(self, sendbuf, recvbuf) -> None:
        """Allgather with per-rank counts and displacements in ``recvbuf``."""
        self._sc_global("Allgatherv", lambda h: h.allgather(sendbuf, recvbuf, vector=True), sendbuf, recvbuf)

    def Alltoall(self, sendbuf, recvbuf) -> None:
        """Send block k of ``sendbuf`` to rank k, receive block k of ``recvbuf`` from rank k."""
        self._sc_global("Alltoall", lambda h: h.alltoall(sendbuf, recvbuf), sendbuf, recvbuf)

    def Alltoallv(self, sendbuf, recvbuf) -> None:
        """Alltoall with per-rank counts and displacements (known only to the ranks that pass them)."""
        self._sc_global("Alltoallv", lambda h: h.alltoallv(sendbuf, recvbuf), sendbuf, recvbuf)

    def Bcast(self, buf, root: int = 0) -> None:
        """Broadcast ``buf`` from ``root`` to every rank."""
        self._sc_global("Bcast", lambda h: h.bcast(buf, root), buf, root)

    def Gather(self, sendbuf, recvbuf, root: int = 0) -> None:
        """Gather one block from every rank at ``root`` (``sendbuf`` may be IN_PLACE at the root)."""
        self._sc_global("Gather", lambda h: h.gather(sendbuf, recvbuf, root), sendbuf, recvbuf, root)

    def Gatherv(self, sendbuf, recvbuf, root: int = 0) -> None:
        """Gather with per-rank counts and displacements known at ``root``."""
        self._sc_global("Gatherv", lambda h: h.gatherv(sendbuf, recvbuf, root), sendbuf, recvbuf, root)

    def Scatter(self, sendbuf, recvbuf, root: int = 0) -> None:
        """Send block k of ``root``'s ``sendbuf`` to rank k (``recvbuf`` may be IN_PLACE at the root)."""
        self._sc_global("Scatter", lambda h: h.scatter(sendbuf, recvbuf, root), sendbuf, recvbuf, root)

    def Scatterv(self, sendbuf, recvbuf, root: int = 0) -> None:
        """Scatter with per-rank counts and displacements known at ``root``."""
        self._sc_global("Scatterv", lambda h: h.scatterv(sendbuf, recvbuf, root), sendbuf, recvbuf, root)

    def Reduce(self, sendbuf, recvbuf, op=MPI.SUM, root: int = 0) -> None:
        """Reduce every rank's ``sendbuf`` with ``op`` into ``root``'s ``recvbuf`` (IN_PLACE at the root)."""
        self._sc_global("Reduce", lambda h: h.reduce(sendbuf, recvbuf, op, root), sendbuf, recvbuf, op, root)

    def Allreduce(self, sendbuf, recvbuf, op=MPI.SUM) -> None:
        """Reduce every rank's ``sendbuf`` with ``op`` into every rank's ``recvbuf`` (``sendbuf`` may be IN_PLACE)."""
        self._sc_global("Allreduce", lambda h: h.allreduce(sendbuf, recvbuf, op), sendbuf, recvbuf, op)

    def Reduce_scatter_block(self, sendbuf, recvbuf, op=MPI.SUM) -> None:
        """Reduce, then scatter equal blocks: rank k gets block k of the result."""
        self._sc_global("Reduce_scatter_block", lambda h: h.reduce_scatter(sendbuf, recvbuf, None, op, block=True),
                        sendbuf, recvbuf, op)

    def Reduce_scatter(self, sendbuf, recvbuf, recvcounts=None, op=MPI.SUM) -> None:
        """Reduce, then scatter blocks of ``recvcounts[k]`` elements: rank k gets block k of the result."""
        self._sc_global("Reduce_scatter",
                        lambda h: h.reduce_scatter(sendbuf, recvbuf, recvcounts, op, block=False),
                        sendbuf, recvbuf, recvcounts, op)

    def global_stats(self, collective: str) -> dict:
        """What the last call of the global collective ``collective`` (``"Reduce"``, ``"allgather"``, ...)
        on this rank ran and why, with :meth:`hierarchy_stats` (local; RuntimeError before any).

        ``algorithm``: ``"universal hierarchical"``, ``"dynamic leaders"``, the fixed leaders that
        dynamic leaders fall back to (a non-commutative op, or data past MPI's int), or
        ``"library"`` (with ``reason``); ``"library"`` for every collective where the wrapper keeps
        the library's."""
        name = global_collective_name(collective)
        if self._sc_global_native:
            return {"collective": name, "algorithm": "library", "reason": self._sc_global_reason}
        hierarchy = self.__dict__.get("_sc_hierarchy")
        last = None if hierarchy is None else hierarchy.runs.get(name)
        if last is None:
            raise RuntimeError(f"global_stats({collective!r}): no {name} call on this communicator yet")
        return {"collective": name, **last, "hierarchy": hierarchy.stats()}

    # -- mpi4py's lowercase (pickle-based) forms, on the methods above (hierarchy.objects) --------
    def _sc_objects(self, name: str, *args):
        """``hierarchy.objects.<name>(self, *args)``, recorded for :meth:`global_stats`; the library's
        lowercase method where this wrapper keeps the library's collectives."""
        hierarchy = self._sc_hier()
        if hierarchy is None:
            return getattr(super(), name)(*args)
        result = getattr(objects, name)(self, *args)
        hierarchy.record(name, True)
        return result

    def allgather(self, sendobj):
        """Every rank's object, in rank order, on every rank (pickled; the hierarchical Allgather(v))."""
        return self._sc_objects("allgather", sendobj)

    def alltoall(self, sendobj):
        """Item k of ``sendobj`` to rank k; item k of the result from rank k (the hierarchical Alltoall(v))."""
        return self._sc_objects("alltoall", sendobj)

    def bcast(self, obj, root: int = 0):
        """``root``'s object on every rank (pickled; the hierarchical Bcast)."""
        return self._sc_objects("bcast", obj, root)

    def gather(self, sendobj, root: int = 0):
        """Every rank's object, in rank order, at ``root`` (None elsewhere; the hierarchical Gather(v))."""
        return self._sc_objects("gather", sendobj, root)

    def scatter(self, sendobj, root: int = 0):
        """Item k of ``root``'s sequence ``sendobj`` on rank k (the hierarchical Scatter(v))."""
        return self._sc_objects("scatter", sendobj, root)

    def reduce(self, sendobj, op=MPI.SUM, root: int = 0):
        """Every rank's object combined by ``op`` at ``root`` (None elsewhere), in mpi4py's order."""
        return self._sc_objects("reduce", sendobj, op, root)

    def allreduce(self, sendobj, op=MPI.SUM):
        """Every rank's object combined by ``op`` on every rank, in mpi4py's order."""
        return self._sc_objects("allreduce", sendobj, op)


class _DefaultPlan:
    """The plan of a wrapper instance made without :func:`wrap`: ``auto`` with default options for
    its size, made when read (a non-data descriptor: an instance's own plan, which :func:`wrap`
    sets, is found first, so calls never reach this). Not made at import, where an environment
    placement override could not be checked against a communicator."""

    def __get__(self, instance, owner):
        return self if instance is None else make_plan("auto", {}, False, instance.Get_size())


class NeighborhoodMixin(GlobalCollectivesMixin):
    """sparsecoll's neighborhood collectives, mixed into the mpi4py topology classes."""

    _sc_plan: Plan = _DefaultPlan()  # wrap() sets the instance's own
    _sc_runtime: CommRuntime | None = None  # made at wrap (lazily after Idup)
    # global collectives: the library's unless wrap(..., global_collectives="hierarchical") asked
    _sc_global_native = True
    _sc_global_reason = ("a topology communicator keeps the library's global collectives "
                         "(wrap it with global_collectives='hierarchical' for the hierarchical ones)")
    _sc_topology: Topology | None = None  # given to wrap, used when the runtime is made lazily
    _sc_calls = MappingProxyType({})  # collective -> CallPlan, per wrapper (see _sc_prepare)

    # -- what the wrapper runs ---------------------------------------------------------------
    @property
    def algorithm(self) -> str:
        """The algorithm this wrapper was asked for (``"auto"`` resolves per family)."""
        return self._sc_plan.algorithm

    @property
    def options(self) -> dict:
        """The options in force (checked, defaults filled in)."""
        return dict(self._sc_plan.options)

    @property
    def plan(self) -> Plan:
        """What this wrapper asks the runtime for (algorithm, options, rebind)."""
        return self._sc_plan

    @property
    def runtime(self) -> CommRuntime:
        """The handle's runtime (made collectively on first use)."""
        return self._sc_attach()

    @property
    def neighborhood(self) -> Topology:
        """This rank's neighborhood as sparsecoll sees it, a :class:`~sparsecoll.topology.Topology`
        (local). (``topology`` stays mpi4py's: the topology type, ``MPI.CART`` and so on.)"""
        runtime = self._sc_runtime
        if runtime is not None:
            return runtime.topology
        return self._sc_topology if self._sc_topology is not None else from_comm(self)

    def resolved_algorithm(self, collective: str, block_bytes: int = 8, form: str = "blocking") -> str:
        """The algorithm a call of ``collective`` runs (local). ``auto``: the candidate a call of ``form``
        with blocks of ``block_bytes`` bytes runs (an algorithm name, or ``"name[rma]"`` for its schedule
        on the RMA executor), once the first call of ``collective`` has decided (else RuntimeError)."""
        family_of(collective)
        if not self._sc_plan.auto:
            return self._sc_plan.algorithm
        return self.plan_stats(collective, block_bytes=block_bytes, form=form)["auto"]["algorithm"]

    def pattern(self, collective: str):
        """This rank's Pattern for ``collective``'s family (collective: call it on every rank).

        It also makes what the first call of ``collective`` would make collectively (the size-pass
        agreement, the executor's window), so that a first nonblocking call after it stays local.
        ``auto``: the Pattern of the algorithm an 8-byte blocking call runs (after the first call)."""
        plan = self._sc_plan
        if plan.auto:
            plan = plan.resolved(self.resolved_algorithm(collective))
            if plan.native:
                plan = plan.resolved("direct")  # the one-step pattern the library runs
        return self._sc_attach().call_plan(plan, collective).pattern

    def plan_stats(self, collective: str, *, block_bytes: int = 8, form: str = "blocking") -> dict:
        """Deterministic numbers of this rank's schedule for ``collective``'s family; never communicates.

        Keys: ``algorithm``, ``family``, ``steps``, ``sends``, ``recvs``, ``send_items``,
        ``recv_items``, ``sends_to_others``, ``build_seconds`` and whatever the algorithm
        adds. For ``native`` the numbers are those of the one-step pattern MPI libraries
        use. Algorithms that build their pattern by a protocol report it only once a
        collective call (or :meth:`pattern` on every rank) built it; before that this raises
        RuntimeError naming the call to make. ``auto`` reports the algorithm a call of
        ``form`` with blocks of ``block_bytes`` bytes runs, and under ``"auto"`` the candidates
        considered, each one's predicted time, the profile, why the winner won, and (``check``)
        what an online check of that form and size class measured.
        A global buffer collective's method name (``"Allreduce"``, ``"Bcast"``, ...) gives
        :meth:`global_stats` instead (the lowercase object ones: ask :meth:`global_stats`).
        """
        if collective in GLOBAL_COLLECTIVES and collective[0].isupper():  # "Allreduce", "Bcast", ...
            return self.global_stats(checked_global_stats_query(collective, block_bytes, form))
        family_of(collective)
        runtime = self._sc_runtime
        if runtime is None:
            if self == MPI.COMM_NULL:
                raise RuntimeError(f"plan_stats({collective!r}): the communicator was freed")
            raise RuntimeError(f"plan_stats({collective!r}): nothing was built on this communicator yet; "
                               f"call Neighbor_{collective} on every rank first")
        return runtime.plan_stats(self._sc_plan, collective, form, block_bytes)

    @property
    def schedules_bound(self) -> int:
        """How many call schedules were bound on this handle so far (all its wrappers together; local)."""
        return 0 if self._sc_runtime is None else self._sc_runtime.schedules_bound

    def release_caches(self) -> None:
        """Drop this handle's cached parses, schedules and idle executors (local, no communication)."""
        if self._sc_runtime is not None:
            self._sc_runtime.release_caches()

    # -- plumbing ---------------------------------------------------------------------------
    def _sc_attach(self) -> CommRuntime:
        runtime = self._sc_runtime
        if runtime is None:
            runtime = self._sc_runtime = runtime_of(self, self._sc_topology, self.__dict__.pop("_sc_pending", None))
        return runtime

    def _sc_prepare(self, collective: str, sendbuf=None, recvbuf=None, form: str = "blocking"):
        """What runs ``collective`` (collective the first time on the handle): the runtime's CallPlan,
        or for ``auto`` the collective's dispatch, made from this first call's arguments.

        ``auto`` decides at the first blocking call or persistent init of ``collective``: both may
        synchronize, as MPI allows. A nonblocking call must return whatever the other ranks do
        (MPI's nonblocking calls are local) and deciding takes an allreduce, so a nonblocking call
        before that runs the library's own call (:meth:`_sc_library_until_decided`).

        Kept in the wrapper's ``_sc_calls`` as a shortcut; the runtime decides what it is from
        the wrapper's Plan and agreed numbers alone, so a shortcut hit or miss changes nothing.
        For ``auto`` the wrapper then takes, as attributes, the methods
        :func:`sparsecoll.runtime.auto.wrapper_methods` gives (the library's own method for a
        form whose every call goes there, the dispatch's settled method for the others).
        """
        calls = self.__dict__.get("_sc_calls")
        if calls is None:
            calls = self.__dict__["_sc_calls"] = {}
        runtime = self._sc_attach()
        refused = None  # a call the weights contradict (cdag_exact_byte_communications)
        if self._sc_plan.persistence.exact_bytes and sendbuf is not None:
            try:
                runtime.exact_bytes_check(collective)(sendbuf, recvbuf)  # before the set-up's own messages
            except Exception as exc:  # noqa: BLE001 (auto's decision raises it on every rank, below)
                refused = exc
        if not self._sc_plan.auto:
            if refused is not None:
                raise refused
            call = calls[collective] = runtime.call_plan(self._sc_plan, collective)
            return call
        library = self._sc_auto_library(collective)
        if form == "nonblocking" and not runtime.decided_flag(self._sc_plan, collective)[0]:
            if refused is not None:  # local: the library's call would have raised here alone too
                raise refused
            method = runtime.before_decision(self._sc_plan, collective, library["nonblocking"])
            return self._sc_library_until_decided(collective, method)
        call = calls[collective] = runtime.auto_dispatch(self._sc_plan, collective, library, sendbuf, recvbuf,
                                                         refused)
        self._sc_install_auto_methods(collective, call, library)
        wrapper = weakref.ref(self)

        def install_again() -> bool:  # holds nothing of the wrapper's: a dropped wrapper is collected
            held = wrapper()
            if held is None or held.__dict__.get("_sc_calls", {}).get(collective) is not call:
                return False  # the wrapper is gone, or runs another dispatch now
            held._sc_install_auto_methods(collective, call, held._sc_auto_library(collective))
            return True
        call.on_decision(install_again, wrapper)
        return call

    def _sc_auto_library(self, collective: str) -> dict:
        """The library's method per form for ``collective`` (:meth:`_sc_library_methods`), given the
        side this rank has no blocks on in the form the library needs
        (:func:`~sparsecoll.runtime.auto.explicit_absent_side`), held to the weights under
        ``cdag_exact_byte_communications``: what an ``auto`` wrapper's calls reach the library
        through. Local."""
        library = self._sc_library_methods(collective)
        topology = self.neighborhood
        absent = model_choice.library_absent_side(topology, library_name(), collective)
        if absent is not None:  # Open MPI would fail this rank's call of the library (ompi#14452)
            present_blocks = (topology.outdegree if collective == "alltoall" else 1) if absent == "recv" \
                else topology.indegree
            library = auto.explicit_absent_side(library, collective, absent, self._sc_attach().parse, present_blocks)
        if self._sc_plan.persistence.exact_bytes:  # library calls too are held to the weights
            check = self._sc_attach().exact_bytes_check(collective)
            library = {form: levels.checked_method(method, check) for form, method in library.items()}
        return library

    def _sc_install_auto_methods(self, collective: str, dispatch, library: dict) -> None:
        """Put :func:`sparsecoll.runtime.auto.wrapper_methods` in place of this wrapper's methods for
        ``collective``, the class's method for a form it leaves out. Local; done when the dispatch
        is made and again after each of its decisions (which every rank makes at the same call),
        so a form that runs the library for good from then on calls the library's method itself."""
        names = METHOD_NAMES[collective]

        def class_method(form):
            return getattr(type(self), names[form]).__get__(self)
        methods = auto.wrapper_methods(dispatch, library, class_method)
        for form, name in names.items():
            if form in methods:
                self.__dict__[name] = methods[form]
            else:  # one installed for an earlier decision (or before the dispatch) is stale
                self.__dict__.pop(name, None)

    def _sc_library_until_decided(self, collective: str, library_method):
        """An ``auto`` nonblocking call made before ``collective`` was decided: the library's own call
        (``library_method``; ``direct``'s where the library fails: :meth:`.CommRuntime.before_decision`).
        This wrapper's nonblocking method becomes :func:`.auto.until_decided`."""
        name = METHOD_NAMES[collective]["nonblocking"]
        decided = self._sc_attach().decided_flag(self._sc_plan, collective)
        self.__dict__[name] = auto.until_decided(decided, getattr(type(self), name).__get__(self), library_method)
        return auto.LibraryCall(library_method)

    def _sc_bind_native(self) -> None:
        """A ``native`` wrapper's neighborhood methods are the library's own, installed on this wrapper,
        so that its calls run no sparsecoll code (through the class's method, which checks the plan, a
        100 us blocking allgather at 8 ranks on 2 cores took 1.12 and 1.15 x the library's method in
        two runs); with ``cdag_exact_byte_communications`` each checks
        its call against the weights first. Local, at :func:`wrap` and when a copy is adopted."""
        if not self._sc_plan.native:
            return
        for collective, names in METHOD_NAMES.items():
            library = self._sc_library_methods(collective)
            if self._sc_plan.persistence.exact_bytes:
                def check(sendbuf, recvbuf, collective=collective):  # the runtime may be made later (Idup)
                    self._sc_attach().exact_bytes_check(collective)(sendbuf, recvbuf)
                library = {form: levels.checked_method(method, check) for form, method in library.items()}
            for form, method in library.items():
                self.__dict__[names[form]] = method

    def _sc_library_methods(self, collective: str) -> dict:
        """The library's own method per form for ``collective`` (what ``native`` calls)."""
        library = super()
        if collective == "allgatherw":
            as_w = self._allgatherw_as_alltoallw
            return {"blocking": lambda sendbuf, recvbuf: library.Neighbor_alltoallw(*as_w(sendbuf, recvbuf)),
                    "nonblocking": lambda sendbuf, recvbuf: library.Ineighbor_alltoallw(*as_w(sendbuf, recvbuf)),
                    "persistent": lambda sendbuf, recvbuf, info=MPI.INFO_NULL:
                        library.Neighbor_alltoallw_init(*as_w(sendbuf, recvbuf), info)}
        return {form: getattr(library, name) for form, name in METHOD_NAMES[collective].items()}

    def _sc_adopt(self, new, *, attach: bool = True):
        """Wrap a communicator made from this one (Dup, Clone, Idup) with the same plan.

        ``attach``: make its runtime now (collective; not for Idup, whose communicator is
        usable only once its request completes: the first collective call makes it then).
        """
        plan = self._sc_plan
        new.__dict__.update(_sc_plan=plan, _sc_topology=self.neighborhood,
                            _sc_hierarchy_options=self._sc_hierarchy_options,
                            _sc_global_native=self._sc_global_native)  # (the reason is the class's)
        new._sc_bind_library_globals()
        new._sc_bind_native()
        if attach:
            runtime = new._sc_attach()
            if plan.persistence.strict:  # collective, as at wrap (the level was agreed there)
                runtime.prepare_strict(plan)
        return new

    # -- the collectives ------------------------------------------------------------------------
    def Neighbor_allgather(self, sendbuf, recvbuf) -> None:
        """Blocking neighborhood allgather: gather one block from every in-neighbor (receive block i from source i)."""
        if self._sc_plan.native:
            return super().Neighbor_allgather(sendbuf, recvbuf)
        call = self._sc_calls.get("allgather") or self._sc_prepare("allgather", sendbuf, recvbuf)
        call.runtime.blocking(call, sendbuf, recvbuf)

    def Ineighbor_allgather(self, sendbuf, recvbuf):
        """Nonblocking neighborhood allgather; returns a request (Wait/Test/Free)."""
        if self._sc_plan.native:
            return super().Ineighbor_allgather(sendbuf, recvbuf)
        call = self._sc_calls.get("allgather") or self._sc_prepare("allgather", sendbuf, recvbuf, "nonblocking")
        return call.runtime.nonblocking(call, sendbuf, recvbuf)

    def Neighbor_allgather_init(self, sendbuf, recvbuf, info=MPI.INFO_NULL):
        """Persistent neighborhood allgather: a request to Start and Wait repeatedly (``info``: for native)."""
        _check_info(info)
        if self._sc_plan.native:
            return super().Neighbor_allgather_init(sendbuf, recvbuf, info)
        call = self._sc_calls.get("allgather") or self._sc_prepare("allgather", sendbuf, recvbuf)
        return call.runtime.persistent(call, sendbuf, recvbuf, info)

    def Neighbor_allgatherv(self, sendbuf, recvbuf) -> None:
        """Blocking neighborhood allgatherv: allgather with a count and displacement per receive block."""
        if self._sc_plan.native:
            return super().Neighbor_allgatherv(sendbuf, recvbuf)
        call = self._sc_calls.get("allgatherv") or self._sc_prepare("allgatherv", sendbuf, recvbuf)
        call.runtime.blocking(call, sendbuf, recvbuf)

    def Ineighbor_allgatherv(self, sendbuf, recvbuf):
        """Nonblocking neighborhood allgatherv; returns a request (Wait/Test/Free)."""
        if self._sc_plan.native:
            return super().Ineighbor_allgatherv(sendbuf, recvbuf)
        call = self._sc_calls.get("allgatherv") or self._sc_prepare("allgatherv", sendbuf, recvbuf, "nonblocking")
        return call.runtime.nonblocking(call, sendbuf, recvbuf)

    def Neighbor_allgatherv_init(self, sendbuf, recvbuf, info=MPI.INFO_NULL):
        """Persistent neighborhood allgatherv: a request to Start and Wait repeatedly (``info``: for native)."""
        _check_info(info)
        if self._sc_plan.native:
            return super().Neighbor_allgatherv_init(sendbuf, recvbuf, info)
        call = self._sc_calls.get("allgatherv") or self._sc_prepare("allgatherv", sendbuf, recvbuf)
        return call.runtime.persistent(call, sendbuf, recvbuf, info)

    def Neighbor_alltoall(self, sendbuf, recvbuf) -> None:
        """Blocking neighborhood alltoall: send block k to out-neighbor k, receive block i from in-neighbor i."""
        if self._sc_plan.native:
            return super().Neighbor_alltoall(sendbuf, recvbuf)
        call = self._sc_calls.get("alltoall") or self._sc_prepare("alltoall", sendbuf, recvbuf)
        call.runtime.blocking(call, sendbuf, recvbuf)

    def Ineighbor_alltoall(self, sendbuf, recvbuf):
        """Nonblocking neighborhood alltoall; returns a request (Wait/Test/Free)."""
        if self._sc_plan.native:
            return super().Ineighbor_alltoall(sendbuf, recvbuf)
        call = self._sc_calls.get("alltoall") or self._sc_prepare("alltoall", sendbuf, recvbuf, "nonblocking")
        return call.runtime.nonblocking(call, sendbuf, recvbuf)

    def Neighbor_alltoall_init(self, sendbuf, recvbuf, info=MPI.INFO_NULL):
        """Persistent neighborhood alltoall: a request to Start and Wait repeatedly (``info``: for native)."""
        _check_info(info)
        if self._sc_plan.native:
            return super().Neighbor_alltoall_init(sendbuf, recvbuf, info)
        call = self._sc_calls.get("alltoall") or self._sc_prepare("alltoall", sendbuf, recvbuf)
        return call.runtime.persistent(call, sendbuf, recvbuf, info)

    def Neighbor_alltoallv(self, sendbuf, recvbuf) -> None:
        """Blocking neighborhood alltoallv: alltoall with counts and displacements per block."""
        if self._sc_plan.native:
            return super().Neighbor_alltoallv(sendbuf, recvbuf)
        call = self._sc_calls.get("alltoallv") or self._sc_prepare("alltoallv", sendbuf, recvbuf)
        call.runtime.blocking(call, sendbuf, recvbuf)

    def Ineighbor_alltoallv(self, sendbuf, recvbuf):
        """Nonblocking neighborhood alltoallv; returns a request (Wait/Test/Free)."""
        if self._sc_plan.native:
            return super().Ineighbor_alltoallv(sendbuf, recvbuf)
        call = self._sc_calls.get("alltoallv") or self._sc_prepare("alltoallv", sendbuf, recvbuf, "nonblocking")
        return call.runtime.nonblocking(call, sendbuf, recvbuf)

    def Neighbor_alltoallv_init(self, sendbuf, recvbuf, info=MPI.INFO_NULL):
        """Persistent neighborhood alltoallv: a request to Start and Wait repeatedly (``info``: for native)."""
        _check_info(info)
        if self._sc_plan.native:
            return super().Neighbor_alltoallv_init(sendbuf, recvbuf, info)
        call = self._sc_calls.get("alltoallv") or self._sc_prepare("alltoallv", sendbuf, recvbuf)
        return call.runtime.persistent(call, sendbuf, recvbuf, info)

    def Neighbor_alltoallw(self, sendbuf, recvbuf) -> None:
        """Blocking neighborhood alltoallw: alltoall with counts, byte displacements and datatypes per block."""
        if self._sc_plan.native:
            return super().Neighbor_alltoallw(sendbuf, recvbuf)
        call = self._sc_calls.get("alltoallw") or self._sc_prepare("alltoallw", sendbuf, recvbuf)
        call.runtime.blocking(call, sendbuf, recvbuf)

    def Ineighbor_alltoallw(self, sendbuf, recvbuf):
        """Nonblocking neighborhood alltoallw; returns a request (Wait/Test/Free)."""
        if self._sc_plan.native:
            return super().Ineighbor_alltoallw(sendbuf, recvbuf)
        call = self._sc_calls.get("alltoallw") or self._sc_prepare("alltoallw", sendbuf, recvbuf, "nonblocking")
        return call.runtime.nonblocking(call, sendbuf, recvbuf)

    def Neighbor_alltoallw_init(self, sendbuf, recvbuf, info=MPI.INFO_NULL):
        """Persistent neighborhood alltoallw: a request to Start and Wait repeatedly (``info``: for native)."""
        _check_info(info)
        if self._sc_plan.native:
            return super().Neighbor_alltoallw_init(sendbuf, recvbuf, info)
        call = self._sc_calls.get("alltoallw") or self._sc_prepare("alltoallw", sendbuf, recvbuf)
        return call.runtime.persistent(call, sendbuf, recvbuf, info)

    def Neighbor_allgatherw(self, sendbuf, recvbuf) -> None:
        """Blocking neighborhood allgatherw: allgather with a count, byte displacement and datatype per
        receive block (not in MPI; proposed by Träff and Hunold, ICPP 2019; recvbuf takes the W forms)."""
        if self._sc_plan.native:
            return super().Neighbor_alltoallw(*self._allgatherw_as_alltoallw(sendbuf, recvbuf))
        call = self._sc_calls.get("allgatherw") or self._sc_prepare("allgatherw", sendbuf, recvbuf)
        call.runtime.blocking(call, sendbuf, recvbuf)

    def Ineighbor_allgatherw(self, sendbuf, recvbuf):
        """Nonblocking neighborhood allgatherw; returns a request (Wait/Test/Free)."""
        if self._sc_plan.native:
            return super().Ineighbor_alltoallw(*self._allgatherw_as_alltoallw(sendbuf, recvbuf))
        call = self._sc_calls.get("allgatherw") or self._sc_prepare("allgatherw", sendbuf, recvbuf, "nonblocking")
        return call.runtime.nonblocking(call, sendbuf, recvbuf)

    def Neighbor_allgatherw_init(self, sendbuf, recvbuf, info=MPI.INFO_NULL):
        """Persistent neighborhood allgatherw: a request to Start and Wait repeatedly (``info``: for native)."""
        _check_info(info)
        if self._sc_plan.native:
            return super().Neighbor_alltoallw_init(*self._allgatherw_as_alltoallw(sendbuf, recvbuf), info)
        call = self._sc_calls.get("allgatherw") or self._sc_prepare("allgatherw", sendbuf, recvbuf)
        return call.runtime.persistent(call, sendbuf, recvbuf, info)

    def _allgatherw_as_alltoallw(self, sendbuf, recvbuf):
        """MPI has no allgatherw: express it as alltoallw with every send block at the one block's
        place. Over the user's buffer object, so that mpi4py's request holds it while it runs
        (over ``MPI.BOTTOM`` with the absolute address the temporary array of a nonblocking call
        was freed before the library read it); over ``MPI.BOTTOM`` where the user gave that."""
        send = parse_simple(sendbuf, 1, readonly=True, arg="sendbuf")
        outdegree = self.neighborhood.outdegree
        address, count, datatype = send.piece(0)
        if send.address == 0:  # the user's MPI.BOTTOM (absolute addresses): the user holds the memory
            return [MPI.BOTTOM, [count] * outdegree, [address] * outdegree, [datatype] * outdegree], recvbuf
        displacements = [send.displs[0]] * outdegree
        return [buffer_object(sendbuf), [count] * outdegree, displacements, [datatype] * outdegree], recvbuf

    # -- pickle-based -------------------------------------------------------------------------
    def _sc_library_objects(self) -> bool:
        """Whether the object forms (``neighbor_allgather``, ``neighbor_alltoall``) are the library's:
        for ``native``, and for ``auto`` (the library's two-phase exchange is what it would run)
        unless the library is known to fail on some rank's neighborhood (collective the first time)."""
        plan = self._sc_plan
        return plan.native or (plan.auto and self._sc_attach().library_allowed())

    def _sc_object_call(self, collective: str):
        """The CallPlan an object form's buffer calls run (``auto``: ``direct``'s)."""
        if self._sc_plan.auto:
            return self._sc_attach().call_plan(self._sc_plan.resolved("direct"), collective)
        return self._sc_prepare(collective)

    def neighbor_allgather(self, sendobj):
        """Gather a picklable object from every in-neighbor (None for PROC_NULL)."""
        if self._sc_library_objects():
            return super().neighbor_allgather(sendobj)
        runtime = self._sc_attach()
        topology = runtime.topology
        data = MPI.pickle.dumps(sendobj)
        sizes = numpy.zeros(topology.indegree, dtype=numpy.int64)
        runtime.run_uncached(self._sc_object_call("allgather"),
                             [numpy.array([len(data)], dtype=numpy.int64), MPI.INT64_T],
                             [sizes, MPI.INT64_T])
        received = bytearray(int(sizes.sum()))
        displs = exclusive_sum(sizes)
        runtime.run_uncached(self._sc_object_call("allgatherv"), [data, MPI.BYTE],
                             [received, (sizes.tolist(), displs.tolist()), MPI.BYTE])
        return [None if s == PROC_NULL else MPI.pickle.loads(bytes(received[d:d + n]))
                for s, d, n in zip(topology.sources, displs.tolist(), sizes.tolist())]

    def neighbor_alltoall(self, sendobj):
        """Send picklable object k to out-neighbor k; return one object per in-neighbor."""
        if self._sc_library_objects():
            return super().neighbor_alltoall(sendobj)
        runtime = self._sc_attach()
        topology = runtime.topology
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
        runtime.run_uncached(self._sc_object_call("alltoall"), [send_sizes, MPI.INT64_T], [recv_sizes, MPI.INT64_T])
        data = b"".join(pickled)
        received = bytearray(int(recv_sizes.sum()))
        recv_displs = exclusive_sum(recv_sizes)
        send_displs = exclusive_sum(send_sizes)
        runtime.run_uncached(self._sc_object_call("alltoallv"),
                             [data, (send_sizes.tolist(), send_displs.tolist()), MPI.BYTE],
                             [received, (recv_sizes.tolist(), recv_displs.tolist()), MPI.BYTE])
        return [None if s == PROC_NULL else MPI.pickle.loads(bytes(received[d:d + n]))
                for s, d, n in zip(topology.sources, recv_displs.tolist(), recv_sizes.tolist())]

    # -- new communicators keep the plan; lifetime -----------------------------------------------
    def Dup(self, info=None):
        """Duplicate the communicator (collective); the copy runs the same algorithm and options."""
        return self._sc_adopt(super().Dup(info))

    def Dup_with_info(self, info):
        """Duplicate with ``info`` (collective); the copy runs the same algorithm and options."""
        return self._sc_adopt(super().Dup_with_info(info))

    def Clone(self):
        """Clone the communicator (collective); the copy runs the same algorithm and options."""
        return self._sc_adopt(super().Clone())

    def Idup(self, info=None):
        """Nonblocking duplicate: ``(communicator, request)``; the copy runs the same algorithm and options.

        Its runtime is made, without communicating, when a rank first needs it (a call, or a query
        such as ``runtime.cache_sizes()``): the private copy it needs is duplicated here, by a
        second nonblocking duplicate of this communicator."""
        new, request = super().Idup(info)
        return self._sc_adopt_pending(new), request

    def Idup_with_info(self, info):
        """Nonblocking duplicate with ``info``: ``(communicator, request)``; as :meth:`Idup`."""
        new, request = super().Idup_with_info(info)
        return self._sc_adopt_pending(new), request

    def _sc_adopt_pending(self, new):
        new = self._sc_adopt(new, attach=False)
        new.__dict__["_sc_pending"] = PendingPrivate(self)
        return new

    def Free(self) -> None:
        """Free the communicator and everything sparsecoll attached to it (collective)."""
        self._sc_free_hierarchy()
        self.__dict__.pop("_sc_runtime", None)
        self.__dict__.pop("_sc_calls", None)
        pending = self.__dict__.pop("_sc_pending", None)
        if pending is not None:  # an Idup'd copy that never needed its runtime
            pending.drop()
        release_runtime(self)  # here, not in the handle's Free (MPICH may run that callback inside a later Wait)
        super().Free()


def _check_info(info) -> None:
    """``info`` of a ``*_init``: an ``MPI.Info`` (``MPI.INFO_NULL`` by default), as mpi4py takes it,
    whichever algorithm runs the request (TypeError before anything else)."""
    if not isinstance(info, MPI.Info):
        raise TypeError(f"info: expected an MPI.Info, got {type(info).__name__}")


class Cartcomm(NeighborhoodMixin, MPI.Cartcomm):
    """A Cartesian communicator with sparsecoll's neighborhood collectives."""


class Graphcomm(NeighborhoodMixin, MPI.Graphcomm):
    """An MPI-1 graph communicator with sparsecoll's neighborhood collectives."""


class Distgraphcomm(NeighborhoodMixin, MPI.Distgraphcomm):
    """A distributed graph communicator with sparsecoll's neighborhood collectives."""


class CartNeighborhoodComm(Distgraphcomm):
    """A distributed graph of identical relative neighborhoods on a process grid (Träff and Hunold,
    ICPP 2019, Listings 1 and 2): made by :func:`sparsecoll.cart_neighborhood_create`, or by
    :func:`wrap` with ``grid=`` when it detects such neighborhoods."""

    @property
    def grid(self) -> Grid:
        """The process grid (dimension sizes and periodicity)."""
        return grid_of(self.neighborhood)

    @property
    def offsets(self) -> tuple:
        """The offsets ``N[0..t-1]`` every rank shares: as given to :func:`cart_neighborhood_create`,
        or canonical and sorted when detected by :func:`sparsecoll.wrap` with ``grid=``."""
        return self.neighborhood.offsets

    def relative_rank(self, offset) -> int:
        """Rank of the process at ``R + offset`` (``PROC_NULL`` off a non-periodic mesh)."""
        return self.grid.shift(self.Get_rank(), self._offset(offset))

    def relative_shift(self, offset) -> tuple:
        """``(source, dest)``: the ranks at ``R - offset`` and ``R + offset``."""
        offset = self._offset(offset)
        rank = self.Get_rank()
        return self.grid.shift(rank, offset, -1), self.grid.shift(rank, offset, +1)

    def relative_coord(self, rank: int) -> tuple:
        """The offset from this process to ``rank`` (periodic coordinates in ``[-(p//2), p - p//2)``)."""
        size = self.Get_size()
        if not is_integer(rank) or not 0 <= rank < size:
            raise ValueError(f"rank: expected an integer in [0, {size}), got {rank!r}")
        return self.grid.relative(self.Get_rank(), int(rank))

    def neighbor_count(self) -> int:
        """``t``: the number of offsets (``PROC_NULL`` neighbors included)."""
        return len(self.offsets)

    def neighbor_get(self) -> tuple:
        """``(sources, sourceweights, dests, destweights)`` in offset order (weights None if unweighted)."""
        topology = self.neighborhood
        return (list(topology.sources), _listed(topology.source_weights),
                list(topology.destinations), _listed(topology.dest_weights))

    def _offset(self, offset) -> tuple:
        """One relative offset of the helpers, checked; errors name ``offset``, the helpers' argument."""
        ndim = self.grid.ndim
        try:
            (checked,) = check_offsets([offset], ndim)
        except (TypeError, ValueError) as error:
            raise type(error)(f"offset: expected {ndim} integers (one per dimension), got {offset!r}") from None
        return checked


def _listed(weights):
    return None if weights is None else list(weights)


#: What :func:`wrap` decides for an intracommunicator (kept on the instance), and so what its copies take.
_INTRACOMM_DECISIONS = ("_sc_hierarchy_options", "_sc_global_native", "_sc_global_reason", "_sc_requested")


class Intracomm(GlobalCollectivesMixin, MPI.Intracomm):
    """An intracommunicator whose global collectives run the universal hierarchical algorithm."""

    _sc_requested = "auto"  # the algorithm wrap() was given (copies made by Dup get the same)

    def plan_stats(self, collective: str, *, block_bytes: int = 8, form: str = "blocking") -> dict:
        """What the last call of the global collective ``collective`` ran and why (:meth:`global_stats`);
        ``block_bytes`` and ``form`` are checked as for a neighborhood collective (see
        :func:`checked_global_stats_query`)."""
        return self.global_stats(checked_global_stats_query(collective, block_bytes, form))

    def _sc_adopt(self, new):
        """Wrap a communicator made from this one (collective) with the same options."""
        return wrap(new, self._sc_requested, **self._sc_hierarchy_options)

    def Dup(self, info=None):
        """Duplicate the communicator (collective); the copy runs the same global collectives."""
        return self._sc_adopt(super().Dup(info))

    def Dup_with_info(self, info):
        """Duplicate with ``info`` (collective); the copy runs the same global collectives."""
        return self._sc_adopt(super().Dup_with_info(info))

    def Clone(self):
        """Clone the communicator (collective); the copy runs the same global collectives."""
        return self._sc_adopt(super().Clone())

    def Idup(self, info=None):
        """Nonblocking duplicate: ``(communicator, request)``; the copy runs the same global collectives.

        The copy is usable only once the request completed, so it takes this wrapper's decisions
        (the algorithm, the options, and whether the library runs the calls: the same group gives
        the same node map) without communicating; its node structure is made by its first global
        collective."""
        return self._sc_adopt_pending(*super().Idup(info))

    def Idup_with_info(self, info):
        """Nonblocking duplicate with ``info``: ``(communicator, request)``; as :meth:`Idup`."""
        return self._sc_adopt_pending(*super().Idup_with_info(info))

    def _sc_adopt_pending(self, new, request):
        """A nonblocking copy takes this wrapper's decisions (see :meth:`Idup`)."""
        new.__dict__.update({name: self.__dict__[name] for name in _INTRACOMM_DECISIONS if name in self.__dict__})
        new._sc_bind_library_globals()
        return new, request

    def Free(self) -> None:
        """Free the shared windows, the node and leader communicators, then the communicator (collective)."""
        self._sc_free_hierarchy()
        super().Free()


#: what ``algorithm`` may name for an intracommunicator ("auto": the hierarchical algorithm on more
#: than one node, the library's collectives on one; see :data:`ONE_NODE`)
INTRACOMM_ALGORITHMS = ("auto", "hierarchical", "native")
#: Why ``auto`` keeps the library's global collectives on an intracommunicator of one node.
ONE_NODE = ("one node: the universal hierarchical algorithm saves inter-node messages and there are none, "
            "while its copies and node barriers cost more than the library's own shared-memory collective "
            "(measured 6.7-9.9x the library's time on one machine, benchmarks/hierarchy); "
            "algorithm='hierarchical', or any option of the node structure (ranks_per_node, reduce, ...), "
            "runs it anyway")
#: what a topology communicator's global collectives run (wrap's ``global_collectives``)
GLOBAL_COLLECTIVE_CHOICES = ("library", "hierarchical")
#: options of the node structure, accepted by wrap() for every communicator
HIERARCHY_OPTIONS = ("ranks_per_node", "check_arguments", "inter_node", "reduce")

_WRAPPERS = ((MPI.Cartcomm, Cartcomm), (MPI.Graphcomm, Graphcomm), (MPI.Distgraphcomm, Distgraphcomm))


def wrap(comm, algorithm: str = "auto", *, topology: Topology | None = None, rebind: bool = False,
         executor: str = DEFAULT_EXECUTOR, profile=None, verify_choice: bool | None = None, info=None,
         executor_options=None, **options):
    """Wrap an mpi4py topology communicator so its Neighbor_* methods use sparsecoll, or an
    intracommunicator so its global collectives run the universal hierarchical algorithm.

    An intracommunicator (not a topology one) gives an :class:`Intracomm` on the same handle
    (collective: it makes the node and leader communicators); ``algorithm`` is ``"hierarchical"``,
    ``"native"`` (the library's own collectives) or ``"auto"``: the hierarchical algorithm, except
    that with no option below and every rank on one node it keeps the library's collectives
    (:data:`ONE_NODE` says why; ``plan_stats`` reports it); the options
    are ``ranks_per_node=k`` (nodes of ``k`` consecutive ranks, to emulate nodes on one machine;
    default: ``SPARSECOLL_PLACEMENT`` if set, else ``Split_type(COMM_TYPE_SHARED)``),
    ``check_arguments=True`` (one small allreduce per call so that disagreeing roots or counts
    raise on every rank, see :mod:`sparsecoll.hierarchy.collectives`), ``inter_node`` (a
    callable that makes, from the leader communicator, the communicator whose collectives the
    leaders call; default: the library's, see :class:`sparsecoll.hierarchy.Hierarchy`) and
    ``reduce="fixed"`` (default: fixed leaders) or ``"dynamic"`` (``Reduce`` and ``Allreduce`` with
    dynamic leaders, :mod:`sparsecoll.hierarchy.reduce_dynamic`; :meth:`hierarchy_stats` reports
    which). The other arguments are a topology communicator's and raise TypeError here.
    A topology communicator's global collectives stay the library's unless
    ``global_collectives="hierarchical"`` (measured here on one machine, where the library's
    collectives already use shared memory, the hierarchical ones are slower: benchmarks/hierarchy);
    it then takes the same options, and its first global collective makes the node structure
    (:class:`GlobalCollectivesMixin`).

    Collective over ``comm`` on every call: every rank must call ``wrap`` for the handle, in
    the same order (the first time it duplicates the communicator for library traffic; every
    time one allreduce agrees on the info keys). The result is an instance of ``comm``'s own
    mpi4py class sharing its handle. Wrapping a wrapped communicator returns a new
    wrapper with the new algorithm on the same handle and runtime.
    ``algorithm`` is ``"auto"`` or a name from :func:`sparsecoll.algorithms`;
    ``options`` are the algorithm's options, checked here; ``grid=(dims, periods)`` (or the
    ``MPI.Cartcomm`` a distributed graph was built on), with any algorithm, asks to detect
    whether the neighborhoods are translations of one offset list on that grid, which enables
    the Cartesian algorithms on the handle (collective, once per handle; the result is a
    ``CartNeighborhoodComm`` where they are); on a handle whose Cartesian neighborhood is known
    already it must name that neighborhood's grid (a ValueError naming ``grid`` otherwise).
    ``rebind=True`` binds the schedule anew on every blocking and nonblocking call
    instead of caching it (the non-persistent mode of the HiPC 2017 paper's
    evaluation); ``*_init`` requests always bind once. ``executor`` names the executor
    that runs the schedules (:data:`sparsecoll.execute.EXECUTORS`); ``executor_options`` is a
    dict of its options (the RMA executors: ``{"rtr_tree": k}``, the RTR tree of degree ``k``).

    ``"auto"`` (:mod:`sparsecoll.runtime.auto`) runs, per collective, form and block size,
    the candidate the cost model predicts fastest, the library's own call (``native``)
    included; its ``profile`` is a path or a :class:`sparsecoll.model.profile.Profile`
    (default: ``$SPARSECOLL_PROFILE``, else this host's ``sparsecoll calibrate`` profile,
    else a conservative built-in one), read here, so a bad file raises here;
    by default (``verify_choice=None``) it times a choice that is not ``native`` against it (the
    first blocking calls; a persistent request's first starts) and switches back where the
    choice loses; ``verify_choice=True`` also checks the model's near miss where it chose
    ``native``, in a persistent request's first starts; ``False`` times nothing (the model's
    choice stands). Every rank must pass the same value; with another algorithm ``profile`` and
    ``verify_choice=True`` raise TypeError.
    auto asks, as MPI libraries do when they pick a collective algorithm by message size, that
    a regular call (allgather, alltoall) passes the same block size on every rank; where the
    first call does not, it decides once for all calls.

    ``info`` (an ``MPI.Info``, a dict of "true"/"false" strings or bools, or None) gives the
    persistence levels of Hoefler and Schneider, SC12, section II, as their info keys
    (:mod:`sparsecoll.runtime.persistence`); keys the MPI library kept in ``comm``'s own info
    (``comm.Get_info()``; MPICH 5.0.2 and Open MPI 5.0.11 keep none they do not know) count too,
    ``info`` winning per key.
    Unknown keys are ignored; a bad value raises ValueError naming the key. The keys are
    collective: if the ranks differ, every rank raises ValueError naming the keys that differ,
    before any other message of this ``wrap``.

    * ``cdag_strict_communication``: only neighborhood collectives run on this communicator.
      It enables set-up at ``wrap`` (collective): the Patterns of both families, built by the
      algorithm's protocol where it has one, and the size-pass decisions, so the first calls send
      only their own messages and ``plan_stats`` answers before any call (``auto``: its cost
      models, so the first call of each collective adds only its decision's allreduce, after
      which ``plan_stats`` answers). It does NOT fix tag channels or pre-post receives per collective: MPI
      allows several nonblocking calls of one collective in flight, whose messages must not
      match each other's receives (:mod:`sparsecoll.runtime.channels`).
    * ``cdag_exact_byte_communications``: the edge weights (a weighted distributed graph, else
      ValueError) are the exact bytes per edge and call (out-edge: bytes sent along it;
      in-edge: bytes received). Every call is checked against them before it sends anything
      (ValueError naming the key and the first edge that differs), and ``auto`` chooses by
      the weights' bytes, once for every call.
    * ``cdag_static_buffers``: every call of a collective uses the same buffers. ``auto`` then
      also considers every candidate's schedule on the ``rma`` executor (``"direct[rma]"``, ...)
      for persistent requests, from the profile's ``rma`` costs; otherwise recorded in the plan
      (``plan.persistence.static_buffers``): the point-to-point executors send the same messages
      either way.
    """
    wrapper_class = next((wrapper for mpi_class, wrapper in _WRAPPERS if isinstance(comm, mpi_class)), None)
    hierarchy_options = {name: options.pop(name) for name in HIERARCHY_OPTIONS if name in options}
    if wrapper_class is None and isinstance(comm, MPI.Intracomm):
        neighborhood_only = {"topology": topology is not None, "rebind": rebind is not False,
                             "executor": executor != DEFAULT_EXECUTOR, "profile": profile is not None,
                             "verify_choice": verify_choice not in (None, False), "info": info is not None,
                             "executor_options": executor_options is not None,
                             "global_collectives": "global_collectives" in options}
        given = [name for name, differs in neighborhood_only.items() if differs]
        return _wrap_intracomm(comm, algorithm, options, hierarchy_options, given)
    global_collectives = options.pop("global_collectives", "library")
    if wrapper_class is None:
        raise TypeError("comm: expected an mpi4py intracommunicator or topology communicator (Cartcomm, "
                        f"Graphcomm or Distgraphcomm), got {type(comm).__name__}")
    if comm == MPI.COMM_NULL:
        raise ValueError("comm: is MPI.COMM_NULL")
    grid_option = options.pop(cartesian_topology.GRID_OPTION, None)  # the handle's, for every algorithm
    # Arguments are checked here, with no message sent, but raised at the agreement below on a rank
    # that refuses its own alone (a profile is each host's file): the others would wait in its
    # allreduce for good. A refusing rank takes part with a stand-in plan, which nothing compares.
    refused = None
    try:
        _check_topology(topology, comm)
    except (TypeError, ValueError) as error:
        refused, topology = error, None  # not kept for the handle's runtime
    if refused is None:
        try:
            _check_hierarchy_options(hierarchy_options)
            if global_collectives not in GLOBAL_COLLECTIVE_CHOICES:
                raise ValueError(f"global_collectives: expected one of {GLOBAL_COLLECTIVE_CHOICES}, "
                                 f"got {global_collectives!r}")
            plan = make_plan(algorithm, options, rebind, comm.Get_size(), executor, profile, verify_choice,
                             levels.level(info, comm), executor_options)
        except (TypeError, ValueError) as error:  # a ProfileError too
            refused = error
    if refused is not None:
        plan = make_plan("direct", {}, False, comm.Get_size(), DEFAULT_EXECUTOR, None, None, levels.level(), None)
    if isinstance(comm, NeighborhoodMixin):
        wrapper_class = type(comm)  # keeps subclasses such as CartNeighborhoodComm
    else:
        wrapper_class = keeping_subclass(wrapper_class, comm)
    runtime = existing_runtime(comm)
    if runtime is None:
        runtime = runtime_of(comm, topology if topology is not None else getattr(comm, "_sc_topology", None),
                             getattr(comm, "__dict__", {}).pop("_sc_pending", None))
    plan = runtime.agree_on_level(plan, options, grid_option is not None,  # collective, on every wrap
                                  (global_collectives, options_key(hierarchy_options)), refused)
    if grid_option is not None and runtime.topology.offsets is None:
        runtime.set_topology(cartesian_topology.detect(runtime.private, runtime.topology, grid_option))
    elif grid_option is not None and runtime.topology.cart is not None:  # known: the stated grid must be its own
        cartesian_topology.check_stated_grid(runtime.private, runtime.topology, grid_option)
    runtime.check_supported(plan)
    if wrapper_class is Distgraphcomm and cartesian_topology.is_cartesian(runtime.topology):
        wrapper_class = CartNeighborhoodComm
    wrapped = wrapper_class(comm)
    wrapped.__dict__.update(_sc_plan=plan, _sc_runtime=runtime, _sc_hierarchy_options=hierarchy_options,
                            _sc_global_native=global_collectives == "library")
    wrapped._sc_bind_library_globals()
    if plan.persistence.strict:
        runtime.prepare_strict(plan)
    wrapped._sc_bind_native()
    return wrapped


def checked_global_stats_query(collective: str, block_bytes, form: str) -> str:
    """``collective`` once ``plan_stats``' other arguments for a global collective are checked (local).

    ``global_stats`` describes the last blocking call (its size is that call's), so ``block_bytes``
    is only checked; a nonblocking or persistent global collective is always the library's call,
    with nothing of sparsecoll's to describe: ValueError naming ``form``."""
    nonnegative_integer(block_bytes, "block_bytes")
    if form not in FORMS:
        raise ValueError(f"form: expected one of {list(FORMS)}, got {form!r}")
    if form != "blocking":
        raise ValueError(f"form: {collective}'s {form} calls are the library's own; plan_stats describes "
                         f"the last blocking call (form='blocking')")
    return collective


def _check_topology(topology: Topology | None, comm) -> None:
    """Check wrap's ``topology`` argument against the communicator (local)."""
    if topology is None:
        return
    if not isinstance(topology, Topology):
        raise TypeError(f"topology: expected a sparsecoll Topology or None, got {type(topology).__name__}")
    if (topology.rank, topology.size) != (comm.Get_rank(), comm.Get_size()):
        raise ValueError(f"topology: is rank {topology.rank} of {topology.size}, the communicator's "
                         f"rank {comm.Get_rank()} of {comm.Get_size()}")


def _check_hierarchy_options(options: dict) -> None:
    """Check the node structure's options where every rank passed them (no communication)."""
    if options.get("ranks_per_node") is not None:
        positive_integer(options["ranks_per_node"], "ranks_per_node")
    if not isinstance(options.get("check_arguments", False), bool):
        raise TypeError(f"check_arguments: expected True or False, got {options['check_arguments']!r}")
    if options.get("inter_node") is not None and not callable(options["inter_node"]):
        raise TypeError("inter_node: expected a callable taking the leader communicator, "
                        f"got {options['inter_node']!r}")
    if "reduce" in options and options["reduce"] not in REDUCE_MODES:
        raise ValueError(f"reduce: expected one of {REDUCE_MODES}, got {options['reduce']!r}")


_SUBCLASS_WRAPPERS: dict = {}  # (sparsecoll's class, the user's subclass) -> the class combining them


def keeping_subclass(wrapper_class: type, comm) -> type:
    """``wrapper_class``, or where ``comm`` is of a subclass of mpi4py's class of its kind (a
    program's own, ``mpi4py.util.pkl5``'s), a class deriving from both, so the wrapper keeps that
    class's methods and ``isinstance``. The subclass comes first: a method it defines is its own
    (``pkl5``'s pickle-based collectives stay ``pkl5``'s), and mpi4py's ``__new__`` accepts only
    that order (it must find mpi4py's class of the kind, not sparsecoll's, as the first base's
    base). Local."""
    user_class = type(comm)
    if user_class.__module__.startswith("mpi4py.MPI") or issubclass(user_class, wrapper_class):
        return wrapper_class
    combined = _SUBCLASS_WRAPPERS.get((wrapper_class, user_class))
    if combined is None:
        combined = _SUBCLASS_WRAPPERS[(wrapper_class, user_class)] = type(
            user_class.__name__, (user_class, wrapper_class),
            {"__module__": wrapper_class.__module__,
             "__doc__": f"{wrapper_class.__doc__} On {user_class.__qualname__}."})
    return combined


def _wrap_intracomm(comm: MPI.Intracomm, algorithm: str, options: dict, hierarchy_options: dict,
                    neighborhood_only: list) -> Intracomm:
    """:func:`wrap` for a plain intracommunicator: collective (it makes the node structure).

    ``neighborhood_only``: the names of the arguments given that only topology communicators take.
    An argument refused on some ranks only raises on every rank: the ranks compare their
    arguments, with the refusal, in one allreduce before the refusal is raised (the others would
    wait in it for good)."""
    if comm == MPI.COMM_NULL:
        raise ValueError("comm: is MPI.COMM_NULL")
    try:
        if neighborhood_only:
            raise TypeError(f"{neighborhood_only[0]}: is for topology communicators (their neighborhood "
                            f"collectives); {type(comm).__name__} has none")
        if algorithm not in INTRACOMM_ALGORITHMS:
            raise ValueError(f"algorithm: an intracommunicator takes one of {INTRACOMM_ALGORITHMS}, got {algorithm!r}")
        if options:
            raise TypeError(f"options: an intracommunicator takes only {HIERARCHY_OPTIONS}, got {sorted(options)}")
        _check_hierarchy_options(hierarchy_options)
        refused, key = None, (algorithm, options_key(hierarchy_options))
    except (TypeError, ValueError) as error:
        refused, key = error, ("refused", type(error).__name__, str(error))
    differs = levels.key_differs(MPI.Intracomm(comm), key)  # the library's call
    if refused is not None:
        raise refused
    if differs:
        raise ValueError("algorithm: the ranks gave wrap different algorithms or options (or another rank's "
                         "were refused: its error names the argument); they decide every global collective's "
                         "messages, so every rank must give the same")
    wrapped = keeping_subclass(Intracomm, comm)(comm)
    wrapped.__dict__.update(_sc_hierarchy_options=hierarchy_options, _sc_global_native=algorithm == "native",
                            _sc_requested=algorithm)
    hierarchy = wrapped._sc_hier()
    if algorithm == "auto" and not hierarchy_options and hierarchy.layout.nodes == 1:
        # the same on every rank (the node map is allgathered): nothing for the hierarchy to save;
        # the node structure stays for hierarchy_stats (its windows are made on first use: never)
        wrapped.__dict__.update(_sc_global_native=True, _sc_global_reason=ONE_NODE)
    wrapped._sc_bind_library_globals()
    return wrapped
