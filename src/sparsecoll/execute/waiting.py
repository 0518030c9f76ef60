"""Waiting for some of several MPI requests, yielding the processor where the user asked MPI to.

sparsecoll waits for *some* of several requests in two places: the DAG executor's active queue
(:mod:`.dag`) and the progress engine's wait over several collectives in flight
(:mod:`sparsecoll.runtime.progress`). When ranks outnumber cores, users ask their MPI library to
yield the processor while it waits (MPICH: ``MPIR_CVAR_POLLS_BEFORE_YIELD``,
``MPIR_CVAR_CH4_PROGRESS_THROTTLE``; Open MPI: ``OMPI_MCA_mpi_yield_when_idle``; sparsecoll's
launcher sets them). MPICH 5.0.2's ``Waitall`` honours them, but its ``Waitsome`` and
``Waitany`` spin: measured on 2 cores, 4 ranks, ``cartesian`` persistent alltoall (two steps),
the DAG executor took 219-242 us per call against the step executor's 55-62 us, and 850-1870 us
without the throttle; polling with ``Testsome`` and ``sched_yield`` between polls, 58 us.

So where one of those settings asks for yielding, :func:`waitsome` and :func:`waitany` poll and
yield; elsewhere they are MPI's own calls. A sparsecoll request's ``Test`` that finds its
collective incomplete yields too (:func:`yield_when_idle`), as Open MPI's ``MPI_Test`` does under
``mpi_yield_when_idle``: programs poll ``while not request.Test(): ...``, and a rank spinning so on
a shared core keeps it from the peers whose messages it waits for. Measured on 2 cores, 8 ranks,
MPICH, two topologies of the conformance test (every algorithm, every collective, half the
nonblocking and persistent runs polled by ``Test``): 54 s with a spinning ``Test``, 10.6 s with it
yielding. The setting is read once, from the environment every
rank of a launch shares; it changes only how a rank waits, never what goes on the wire.
"""

from __future__ import annotations

import os

from mpi4py import MPI

_Testsome, _Waitsome = MPI.Request.Testsome, MPI.Request.Waitsome
_Testany, _Waitany = MPI.Request.Testany, MPI.Request.Waitany
_yield = os.sched_yield

#: Environment settings with which users ask their MPI library to yield while it waits.
YIELD_SETTINGS = ("MPIR_CVAR_POLLS_BEFORE_YIELD", "MPIR_CVAR_CH4_PROGRESS_THROTTLE", "OMPI_MCA_mpi_yield_when_idle")


def asked_to_yield(environment) -> bool:
    """Whether ``environment`` (a mapping like ``os.environ``) asks MPI to yield while waiting: a
    :data:`YIELD_SETTINGS` variable set to a true value (a positive count, ``true``, ``yes``, ``on``)."""
    for name in YIELD_SETTINGS:
        value = environment.get(name, "").strip().lower()
        if value in ("true", "yes", "on") or value.isdigit() and int(value) > 0:
            return True
    return False


#: Whether :func:`waitsome` and :func:`waitany` poll and yield (read from the environment at import).
YIELDING = asked_to_yield(os.environ)


def yield_when_idle() -> None:
    """Give up the processor under :data:`YIELDING` (a test found nothing complete); else nothing."""
    if YIELDING:
        _yield()


def waitsome(requests) -> list | None:
    """``MPI.Request.Waitsome(requests)``, yielding between polls under :data:`YIELDING`."""
    if not YIELDING:
        return _Waitsome(requests)
    while True:
        done = _Testsome(requests)
        if done is None or done:
            return done
        _yield()


def waitany(requests) -> int:
    """``MPI.Request.Waitany(requests)``, yielding between polls under :data:`YIELDING`."""
    if not YIELDING:
        return _Waitany(requests)
    while True:
        index, flag = _Testany(requests)
        if flag:
            return index
        _yield()
