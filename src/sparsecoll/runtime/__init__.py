"""The runtime: per-communicator plans from pattern to bound schedule to executor on a channel.

The interface (:mod:`sparsecoll.comm`) forwards calls here and installs, per wrapper, the
methods ``auto`` settles on (:func:`.auto.wrapper_methods`); it decides nothing itself. The runtime keeps these
invariants, and each is enforced in one place:

(a) Whatever changes the messages (the algorithm ``auto`` resolves to, the pattern, the
    size pass, tags) is decided identically on every rank from arguments all ranks share
    (the wrapper's algorithm and options, the collective, the call order), never from a
    local cache hit: patterns and size-pass decisions are made by the first collective
    call that needs them and kept until ``Free``; a v/w call of a pattern with items in
    transit runs the size pass on every call (:meth:`.CommRuntime.call_plan`).
(b) A cache key holds everything that shapes a schedule: the plan key (algorithm and every
    option, by value), the collective, the buffer layout and the sizes of the size pass
    (:mod:`.caches`, :mod:`.plan`). Caches only save local work and keep no user buffer alive.
(c) A tag channel is never reused while a call that used it may still match messages
    (:mod:`.channels`); all tags lie within the private communicator's ``TAG_UB``.
(d) Waiting on or testing any sparsecoll request advances every request in flight, blocking
    calls wait through the same engine, and a progress thread (at ``MPI_THREAD_MULTIPLE``)
    moves multi-step requests on while the rank is blocked in the user's own MPI calls
    (:mod:`.progress`).
(e) No per-call allocation proportional to a datatype's extent (:mod:`sparsecoll.buffers`).
(f) ``plan_stats`` never communicates (:meth:`.CommRuntime.plan_stats`).
"""

from .caches import CACHE_SIZE
from .channels import NONBLOCKING_CHANNELS
from .communicator import NONBLOCKING_KEYS, CommRuntime, PendingPrivate, existing_runtime, release_runtime, runtime_of
from .plan import CallPlan, Plan, make_plan
from .progress import ENGINE, ScheduleRequest, startall, waitall

__all__ = ["CommRuntime", "PendingPrivate", "runtime_of", "existing_runtime", "release_runtime", "Plan", "CallPlan",
           "make_plan", "ScheduleRequest", "startall", "waitall", "ENGINE", "CACHE_SIZE", "NONBLOCKING_CHANNELS",
           "NONBLOCKING_KEYS"]
