"""The benchmark's only look inside a wrapped communicator.

Phase 1 (pattern creation) and Phase 2 (one call's schedule) are measured apart from
the calls, and the number of schedules bound during the timed calls is counted. The
public API has no entry point for either yet, so this module reads the wrapper's
internals; it is the one place to change when the runtime offers them. Nothing else
in :mod:`sparsecoll.tools` touches a private name (a test checks that).

Accessed here: ``comm._sc_options`` and ``comm._sc_state.private`` (the wrapper's
options and private communicator), ``comm._parse_uncached`` and ``comm._bind``
(parse one call's buffer specs, bind the pattern to them), ``comm.schedules_bound``
(count of schedules bound on the handle) and :class:`sparsecoll.execute.p2p.Executor`
(the persistent requests a call creates).
"""

from __future__ import annotations

from sparsecoll.algorithms import REGISTRY
from sparsecoll.pattern import family_of


def build_pattern(comm, collective: str):
    """Build ``comm``'s pattern for ``collective`` anew (``Algorithm.build`` with the wrapper's
    options on its private communicator; collective). The wrapper's cached pattern is left alone."""
    algorithm = REGISTRY[comm.resolved_algorithm(collective)]
    return algorithm.build(comm.topology, comm._sc_state.private, comm._sc_options, family_of(collective))


def bind_call(comm, collective: str, sendspec, recvspec):
    """Parse one call's buffer specs (uncached) and bind ``comm``'s pattern to them: the Schedule."""
    send, recv = comm._parse_uncached(collective, sendspec, recvspec)
    return comm._bind(collective, send, recv)


def create_requests(comm, schedule):
    """The executor (persistent requests, derived datatypes) a call makes for ``schedule``.

    Made on channel 0 and never started; the caller frees it with ``.free()``.
    """
    from sparsecoll.execute.p2p import Executor
    return Executor(comm._sc_state.private, schedule, 0)


def schedules_bound(comm) -> int:
    """How many schedules the wrapped handle ``comm`` has bound so far."""
    return comm.schedules_bound
