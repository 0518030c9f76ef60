"""One progress engine for every sparsecoll request of the process, and the request class.

A sparsecoll request runs a *program*: an iterator of stages, each a list of persistent
MPI requests that are started together and must all complete before the next stage
starts (the steps of a Schedule; for v/w calls of multi-step patterns, the size pass,
then the bound data schedule). MPI itself progresses the messages of one stage; moving
from one stage to the next is sparsecoll's job, and it is done by one engine per process:

* testing or waiting on any sparsecoll request advances every request in flight, so
  ranks may complete their requests in any order;
* a blocking sparsecoll call made while requests are in flight waits through the engine
  too (it advances the others while it waits), but the set-up a call makes collectively (a
  first call's allreduces and pattern protocol, an RMA init's window, ``auto``'s decisions)
  is the library's own blocking calls and advances nothing: there the thread below has to
  (a peer may wait for this rank's request first);
* while requests with a later stage are in flight and MPI runs at ``MPI_THREAD_MULTIPLE``,
  a daemon thread advances them whenever no sparsecoll call has driven progress for
  ``SPARSECOLL_PROGRESS_INTERVAL`` seconds (default 0.002), so a rank blocked in one of the
  user's own MPI calls still moves its collectives on; ``SPARSECOLL_PROGRESS_THREAD=0``
  turns it off. The thread stays out of the way of a rank that tests or waits itself: it
  never waits for the engine's lock; each look that finds the rank's own calls driving
  progress doubles the time to its next look, up to :data:`PROGRESS_INTERVAL_MAX` (a look
  that has to advance a request brings it back to the interval); and it sleeps until the
  next request as soon as a look finds nothing in flight. A thread that kept looking every
  interval wakes hundreds of times a second on a machine whose cores the ranks already
  fill, and slows whatever the rank runs next, the library's own calls included: 8 ranks
  on 2 cores, Open MPI, a 2-step ``cartesian`` persistent allgather of 64 KiB blocks took
  368 us with a look every 2 ms, 282 us with no thread, 287 us with the back-off
  (``benchmarks/auto/README.md``).

A stage is either a list of persistent requests (the step executor's) or a *dynamic*
stage that starts its own messages as others complete (the DAG executor's
:class:`~sparsecoll.execute.dag.DagRun`, with ``start``/``test``/``wait``, the ``handles`` in
flight and ``completed(position)`` for a handle a wait over several requests completed).
A dynamic stage whose progress is not all visible as MPI requests (the RMA executor's
:class:`~sparsecoll.execute.rma.RmaRun`: the end of an exposure epoch, a canary word) says so
with ``polled = True``; while one is in flight, waiting over several requests tests them all
in turn instead of blocking in ``Waitany`` (which could wait on another request while this one
waits for a step only a test of its own would take: two ranks completing two requests in
different orders would then wait for each other).

A request of a single list stage (the ``direct`` algorithm's usual schedule) is never
handed to the engine: MPI progresses it alone, so that path costs nothing extra. A
dynamic stage always goes through the engine: only sparsecoll can start its next messages.

State shared with the thread is guarded by :data:`ENGINE`'s lock. While a thread waits
through the engine it holds the lock (it waits on every request in flight at once), so
sparsecoll serialises progress across the threads of one process; where the program has other
threads, which may call into sparsecoll meanwhile, a wait instead tests every request in flight
under the lock and yields without it (:func:`other_threads_may_call_in`).
"""

from __future__ import annotations

import atexit
import math
import os
import threading
import time

from mpi4py import MPI

from ..execute.waiting import waitany, yield_when_idle

_yield = os.sched_yield
_Startall = MPI.Prequest.Startall
_Testall = MPI.Request.Testall
_Waitall = MPI.Request.Waitall

#: Stages of at most this many requests are started and waited for request by request
#: (mpi4py's Startall and Waitall convert their list on every call, which costs more).
FEW_REQUESTS = 2


def start_stage(stage) -> None:
    """Start the persistent requests of a stage."""
    if type(stage) is not list:
        stage.start()
    elif len(stage) > FEW_REQUESTS:
        _Startall(stage)
    else:
        for request in stage:
            request.Start()


def wait_stage(stage) -> None:
    """Wait for every request of a started stage."""
    if type(stage) is not list:
        stage.wait()
    elif len(stage) > FEW_REQUESTS:
        _Waitall(stage)
    else:
        for request in stage:
            request.Wait()


def test_stage(stage) -> bool:
    """Progress a started stage without blocking; True once all of it has completed."""
    if type(stage) is not list:
        return stage.test()
    return _Testall(stage)


def single_stage(stages):
    """The one list stage of ``stages`` that MPI can progress alone, else None (the engine is needed)."""
    if len(stages) == 1 and type(stages[0]) is list:
        return stages[0]
    return None


def interval_setting(text: str | None, default: float = 0.002) -> float:
    """``SPARSECOLL_PROGRESS_INTERVAL``'s seconds (``default`` where unset): a finite positive number,
    else ValueError naming the variable. (``float()`` alone raised an unnamed ValueError at
    ``import sparsecoll`` for text, and took ``nan``, ``inf`` and ``-1``, under which the thread
    never stepped in, and other negative values, under which it spun without sleeping.)"""
    if text is None or not text.strip():
        return default
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"SPARSECOLL_PROGRESS_INTERVAL: expected a positive number of seconds, got {text!r}")
    return seconds


def thread_setting(text: str | None) -> bool:
    """Whether ``SPARSECOLL_PROGRESS_THREAD`` lets the progress thread run: on where unset or
    empty, ``1``/``true``/``yes``/``on``; off for ``0``/``false``/``no``/``off`` (any case, spaces
    around ignored); else ValueError naming the variable. (Only ``0``, ``false`` and ``no`` turned
    it off before: ``off``, ``False`` or ``NO`` silently left it on, as did any other text.)"""
    value = (text or "").strip().lower()
    if value in ("", "1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"SPARSECOLL_PROGRESS_THREAD: expected 0/1, false/true, no/yes or off/on, got {text!r}")


#: Seconds without progress driven by a sparsecoll call after which the progress thread steps in.
PROGRESS_INTERVAL = interval_setting(os.environ.get("SPARSECOLL_PROGRESS_INTERVAL"))
#: Whether the environment lets the progress thread run (it runs only at ``MPI_THREAD_MULTIPLE``).
PROGRESS_THREAD = thread_setting(os.environ.get("SPARSECOLL_PROGRESS_THREAD"))
#: The longest the thread waits between looks while the rank's own calls drive progress.
PROGRESS_INTERVAL_MAX = max(PROGRESS_INTERVAL, 0.008)


def next_look(interval: float, stepped_in: bool) -> float:
    """The progress thread's wait before its next look: back to :data:`PROGRESS_INTERVAL` after a
    look that advanced requests, else twice ``interval`` (at most :data:`PROGRESS_INTERVAL_MAX`)."""
    return PROGRESS_INTERVAL if stepped_in else min(2 * interval, PROGRESS_INTERVAL_MAX)


class ProgressEngine:
    """The requests in flight with more than one stage, and the thread that advances them."""

    def __init__(self):
        self.lock = threading.RLock()
        self.pending: list = []  # requests with a later stage still to start
        self.driven = 0.0  # time.monotonic() when a sparsecoll call last drove progress
        self._wake = threading.Condition()  # the thread's own sleep (not the engine's lock)
        self._asleep = False
        self._thread = None
        self._stopping = False
        self._thread_allowed = None  # decided at the first request (MPI must be initialized)

    # -- bookkeeping (lock held) -----------------------------------------------------
    def add(self, request) -> None:
        """Track a request whose program has more stages (caller holds the lock)."""
        self.pending.append(request)
        self.driven = time.monotonic()
        if self._thread is None:
            if self._allows_thread():
                self._thread = threading.Thread(target=self._loop, name="sparsecoll-progress", daemon=True)
                self._thread.start()
        elif self._asleep:
            with self._wake:
                self._asleep = False
                self._wake.notify()

    def _allows_thread(self) -> bool:
        if self._thread_allowed is None:
            self._thread_allowed = PROGRESS_THREAD and MPI.Query_thread() == MPI.THREAD_MULTIPLE
        return self._thread_allowed

    def advance_all(self) -> None:
        """Test every request in flight and start the next stage of those whose stage completed."""
        for request in tuple(self.pending):
            request._advance()

    def wait(self, request) -> None:
        """Block until ``request``'s messages are complete, advancing every request meanwhile."""
        self.driven = time.monotonic()
        pending = self.pending
        while request._current is not None:
            others = [r for r in pending if r is not request]
            if not others:
                request._run_alone()
                return
            self.advance_all()
            if request not in pending:
                request._advance()
            if request._current is None:
                return
            handles, dynamic = [], []  # dynamic: (first position, count, stage) of each dynamic stage
            polled = False
            for current in [request._current] + [other._current for other in others]:
                if current is None:
                    continue
                if type(current) is list:
                    handles.extend(current)
                else:
                    own = current.handles
                    dynamic.append((len(handles), len(own), current))
                    handles.extend(own)
                    polled = polled or getattr(current, "polled", False)
            if polled:  # a stage progresses on more than MPI requests: test everything again
                os.sched_yield()
                continue
            index = waitany(handles)  # yields where the user asked MPI to (execute.waiting)
            for first, count, stage in dynamic:
                if first <= index < first + count:
                    stage.completed(index - first)

    # -- the thread ------------------------------------------------------------------
    def _loop(self) -> None:
        idle = False
        interval = PROGRESS_INTERVAL
        while not self._stopping:
            with self._wake:
                if idle and not self.pending:  # looked again here: add() appends before it reads _asleep
                    self._asleep = True
                    while self._asleep and not self._stopping:
                        self._wake.wait()
                else:
                    self._wake.wait(interval)
            idle = not self.pending
            if idle:
                continue
            stepped_in = False
            # a sparsecoll call drove progress lately, or a thread waits through the engine (holds the lock)
            if time.monotonic() - self.driven >= PROGRESS_INTERVAL and self.lock.acquire(blocking=False):
                try:
                    stepped_in = bool(self.pending)
                    self.advance_all()
                finally:
                    self.lock.release()
            interval = next_look(interval, stepped_in)

    def stop(self) -> None:
        """End the progress thread (at exit, before MPI is finalized)."""
        thread = self._thread
        if thread is None:
            return
        with self._wake:
            self._stopping = True
            self._asleep = False
            self._wake.notify()
        thread.join(timeout=1.0)
        self._thread = None


def other_threads_may_call_in() -> bool:
    """Whether a thread of the program besides this one (and the progress thread) is alive, which
    could call into sparsecoll while this one waits. A wait that blocked in MPI holding the
    engine's lock would keep that thread from starting or advancing its own collective, which a
    peer's thread may be waiting for while the peer's other thread waits for this one: two
    threads per rank on two communicators hung so. Such a wait tests and yields instead. With no
    other thread none can appear while this one blocks (only it could start one)."""
    others = threading.active_count() - 1
    thread = ENGINE._thread
    if thread is not None and thread.is_alive():
        others -= 1
    return others > 0


#: The process's engine.
ENGINE = ProgressEngine()
atexit.register(ENGINE.stop)  # registered after mpi4py's own finalizer, so it runs first


INACTIVE, ACTIVE, FREED = 0, 1, 2


class RequestProtocol:
    """What every request sparsecoll hands out shares with mpi4py's, given ``freed``: the refused
    ``Cancel``, the lowercase methods, equality to ``MPI.REQUEST_NULL`` once freed, and the
    refused copy and pickle of a live request. A subclass defines ``Wait``, ``Test``,
    ``Get_status``, ``Free`` and the ``freed`` property."""

    __slots__ = ()

    @property
    def freed(self) -> bool:
        """Whether the request was freed (a completed nonblocking one too): ``MPI.REQUEST_NULL``'s equal."""
        raise NotImplementedError

    def Cancel(self) -> None:
        """Refused: the MPI standard makes cancelling a collective's request erroneous."""
        if self.freed:
            raise freed_request_error()
        raise RuntimeError("request: a collective operation cannot be cancelled (MPI makes MPI_Cancel of a "
                           "collective request erroneous); complete it with Wait or Test")

    def get_status(self, status=None) -> bool:
        """``Get_status``, as mpi4py's lowercase method."""
        return self.Get_status(status)

    def cancel(self) -> None:
        """``Cancel`` (refused), as mpi4py's lowercase method."""
        self.Cancel()

    def free(self) -> None:
        """``Free``, as mpi4py's lowercase method (which does nothing on a freed request)."""
        if not self.freed:
            self.Free()

    def wait(self, status=None) -> None:
        """``Wait``, as mpi4py's lowercase method for a buffer request (which returns None)."""
        self.Wait(status)

    def test(self, status=None) -> tuple:
        """``(Test(), None)``, as mpi4py's lowercase method for a buffer request."""
        return self.Test(status), None

    def __bool__(self) -> bool:
        return not self.freed

    def __eq__(self, other) -> bool:
        """Equal to ``MPI.REQUEST_NULL`` once freed (a nonblocking request once completed), as
        mpi4py's requests become it; otherwise equal only to itself."""
        if isinstance(other, MPI.Request):
            return other == MPI.REQUEST_NULL and self.freed
        return other is self

    __hash__ = object.__hash__

    def __reduce__(self, *_):
        """Refused while the request lives, as mpi4py refuses to copy or pickle a request (a copy
        would share its MPI requests); a freed one copies and pickles as ``MPI.REQUEST_NULL``, as
        mpi4py's completed requests do."""
        if self.freed:
            return _request_null, ()
        raise ValueError(f"cannot serialize {type(self).__name__!r} instance")

    __reduce_ex__ = __reduce__

    def __copy__(self):
        """Refused while the request lives; a freed one copies as ``MPI.REQUEST_NULL`` (see ``__reduce__``)."""
        function, arguments = self.__reduce__()
        return function(*arguments)

    def __deepcopy__(self, memo):
        """As ``__copy__``."""
        return self.__copy__()


class ScheduleRequest(RequestProtocol):
    """A nonblocking neighborhood collective (``Test``, ``Wait``, ``Free``), started when it is made;
    persistent ones are :class:`PersistentRequest` (``Start`` besides).

    ``program()`` returns an iterator of stages (lists of persistent MPI requests);
    ``on_complete`` is called once per completed run, in the thread that observes the
    completion through ``Test``/``Wait`` (never the progress thread); ``on_free`` when the
    request is freed. ``keep`` holds the user's buffers while the request lives, as mpi4py's
    requests do. A program known to be one stage long can be given as ``single``: such a
    request bypasses the engine.
    """

    __slots__ = ("_program", "_single", "_stages", "_current", "_state", "_error", "_persistent",
                 "_on_complete", "_on_free", "_keep", "__weakref__")

    def __init__(self, program=None, *, single=None, persistent: bool, on_complete=None, on_free=None,
                 keep=()):
        # the pooled nonblocking call (runtime.communicator._PooledRequest) sets these fields itself
        self._program = program
        self._single = single
        self._stages = None
        self._current = None  # the stage in flight (None: messages complete)
        self._state = INACTIVE
        self._error = None
        self._persistent = persistent
        self._on_complete = on_complete
        self._on_free = on_free
        self._keep = keep

    @property
    def one_stage(self) -> bool:
        """Whether every message of a run is posted when it starts (one list stage, no engine)."""
        return self._single is not None

    # -- the engine's side (lock held) ------------------------------------------------
    def _advance(self) -> None:
        """Start the next stages while the current one has completed."""
        try:
            while self._current is not None and test_stage(self._current):
                self._next_stage()
        except Exception as error:  # a failing stage (e.g. a bind error): reported by Wait/Test
            self._fail(error)

    def _run_alone(self) -> None:
        """Run the remaining stages in order (no other request is in flight)."""
        try:
            while self._current is not None:
                wait_stage(self._current)
                self._next_stage()
        except Exception as error:
            self._fail(error)

    def _next_stage(self) -> None:
        stage = next(self._stages, None) if self._stages is not None else None
        if stage is None:
            self._current = None
            self._stages = None
            if self in ENGINE.pending:
                ENGINE.pending.remove(self)
        else:
            start_stage(stage)
            self._current = stage

    def _fail(self, error) -> None:
        self._error = error
        self._current = None
        self._stages = None
        if self in ENGINE.pending:
            ENGINE.pending.remove(self)

    # -- the user's side ----------------------------------------------------------------
    def _start(self) -> None:
        """Start (or restart) the collective; new buffer contents are picked up."""
        if self._state != INACTIVE:
            if self._state == FREED:
                raise freed_request_error()
            raise RuntimeError("request: Start() on an active request (complete it with Wait or Test first)")
        self._state = ACTIVE
        self._error = None
        single = self._single
        if single is not None:
            start_stage(single)
            self._current = single
            return
        with ENGINE.lock:
            self._stages = iter(self._program())
            self._next_stage()
            if self._current is not None:
                ENGINE.add(self)

    def Test(self, status=None) -> bool:
        """Advance every sparsecoll request in flight; True once this collective is complete (else it
        yields the processor where the user asked MPI to, :func:`~sparsecoll.execute.waiting.yield_when_idle`)."""
        if status is not None:
            check_status(status)
        if self._state != ACTIVE:
            if status is not None:
                empty_status(status)
            return True
        if not self._messages_done():
            yield_when_idle()
            return False
        if status is not None:
            empty_status(status)
        self._complete()
        return True

    def _messages_done(self) -> bool:
        """Advance every sparsecoll request in flight; whether this run's messages are complete
        (a one-stage request with nothing else in flight tests its own requests, without the lock)."""
        if self._single is not None and not ENGINE.pending:
            if self._current is not None and not _Testall(self._current):
                return False
            self._current = None
            return True
        with ENGINE.lock:
            ENGINE.driven = time.monotonic()
            ENGINE.advance_all()
            if self._single is not None and self._current is not None and _Testall(self._current):
                self._current = None
            return self._current is None

    def Wait(self, status=None) -> bool:
        """Block until the collective is complete (advancing every sparsecoll request meanwhile)."""
        if status is not None:
            check_status(status)
        if self._state != ACTIVE:
            if status is not None:
                empty_status(status)
            return True
        if self._current is not None:
            if self._single is not None and not ENGINE.pending:
                wait_stage(self._current)
                self._current = None
            else:
                wait_for_messages(self)
        if status is not None:
            empty_status(status)
        self._complete()
        return True

    def _complete(self) -> None:
        self._state = INACTIVE
        error, self._error = self._error, None
        if self._on_complete is not None:
            self._on_complete(self)
        if not self._persistent:
            self._release()
        if error is not None:
            raise error

    def _release(self) -> None:
        if self._state == FREED:
            return
        self._state = FREED
        if self._on_free is not None:
            self._on_free(self)
        self._program = self._single = self._keep = self._on_complete = self._on_free = None

    def Free(self) -> None:
        """Release the request; an active one is completed first (as MPI_Request_free lets it finish).
        A freed request (a completed nonblocking one too) is ``MPI.REQUEST_NULL``'s equal: freeing
        it raises MPI's ``ERR_REQUEST``, as mpi4py's ``Free`` does."""
        if self._state == FREED:
            raise freed_request_error()
        if self._state == ACTIVE:
            self.Wait()
        self._release()

    @property
    def active(self) -> bool:
        """Whether the collective was started and has not been completed by Test/Wait yet."""
        return self._state == ACTIVE

    def Get_status(self, status=None) -> bool:
        """Whether the collective is complete, advancing every sparsecoll request in flight; unlike
        ``Test`` it leaves the request active (as ``MPI_Request_get_status``)."""
        if status is not None:
            check_status(status)
        done = self._state != ACTIVE or self._messages_done()
        if done and status is not None:
            empty_status(status)
        return done

    @property
    def freed(self) -> bool:
        """Whether the request was freed (a nonblocking one once completed)."""
        return self._state == FREED


class PersistentRequest(ScheduleRequest):
    """A persistent neighborhood collective: a :class:`ScheduleRequest` with ``Start`` (as mpi4py's
    ``Prequest``; a nonblocking call's request has no ``Start``, as mpi4py's ``Request``)."""

    __slots__ = ()

    Start = ScheduleRequest._start


def _request_null() -> MPI.Request:
    """What a freed request copies and unpickles as."""
    return MPI.REQUEST_NULL


def freed_request_error() -> MPI.Exception:
    """MPI's error for a call on a freed request (mpi4py's request is then ``REQUEST_NULL``)."""
    return MPI.Exception(MPI.ERR_REQUEST)


def check_status(status) -> None:
    """Refuse, naming the argument, a ``status`` that is not an ``MPI.Status``."""
    if not isinstance(status, MPI.Status):
        raise TypeError(f"status: expected an MPI.Status or None, got {type(status).__name__}")


def empty_status(status: MPI.Status) -> None:
    """Make ``status`` MPI's empty status: source ``ANY_SOURCE``, tag ``ANY_TAG``, no error,
    nothing received, not cancelled; what MPI gives for a null or inactive request, and one
    value of the undefined source and tag of a completed collective (as MPICH and Open MPI give)."""
    status.Set_source(MPI.ANY_SOURCE)
    status.Set_tag(MPI.ANY_TAG)
    status.Set_error(MPI.SUCCESS)
    status.Set_elements(MPI.BYTE, 0)
    status.Set_cancelled(False)


def wait_for_messages(request: ScheduleRequest) -> None:
    """Block until ``request``'s messages are complete without completing it for its owner; as
    ``Wait`` does, testing under the engine's lock and yielding without it where another thread
    may call in (:func:`other_threads_may_call_in`), so that thread's collectives move meanwhile."""
    if request._current is None:
        return
    if other_threads_may_call_in():
        while not request._messages_done():  # never blocks in MPI holding the engine's lock
            _yield()  # (releases the GIL too)
    else:
        with ENGINE.lock:
            ENGINE.wait(request)


def run_stages(stages) -> None:
    """Run a blocking call's stages to completion, through the engine if requests are in flight."""
    if not ENGINE.pending:
        for requests in stages:
            start_stage(requests)
            wait_stage(requests)
        return
    request = ScheduleRequest(lambda: stages, persistent=False)
    request._start()
    request.Wait()


def startall(requests) -> None:
    """Start a list of persistent requests, sparsecoll's and mpi4py's mixed (``MPI.Prequest.Startall``
    takes only mpi4py's, and ``auto`` hands out either): each in list order, which MPI's ``Startall``
    allows (it may start its array in any order). A request without ``Start`` (a nonblocking call's)
    raises a TypeError naming its index before any request is started."""
    requests = list(requests)
    for k, request in enumerate(requests):
        if not callable(getattr(request, "Start", None)):
            raise TypeError(f"requests[{k}]: expected a persistent request (with Start), got {type(request).__name__}")
    for request in requests:
        request.Start()


def waitall(requests, statuses=None) -> None:
    """Wait for a list of sparsecoll and mpi4py requests (``MPI.Request.Waitall`` takes only
    mpi4py's); ``statuses``, a list, gets one status per request, as mpi4py's ``statuses``.

    Several requests are tested in turn until all are complete: waiting on one (an mpi4py
    receive) while a sparsecoll request of another has its next step to start would keep that
    step from its peers, which may be what the receive waits for."""
    requests = list(requests)
    if statuses is not None:
        statuses.extend(MPI.Status() for _ in range(len(requests) - len(statuses)))
    status_of = (lambda k: None) if statuses is None else statuses.__getitem__
    if len(requests) == 1:
        requests[0].Wait(status_of(0))
        return
    pending = list(range(len(requests)))
    while pending:
        pending = [k for k in pending if not requests[k].Test(status_of(k))]
        if pending:
            yield_when_idle()
