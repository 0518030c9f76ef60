"""``native``: the MPI library's own neighborhood collectives, the baseline.

Calls go straight to mpi4py's methods on the wrapped communicator. Its ``plan_stats``
reports the ``direct`` pattern, which is what MPI libraries run (one message per
edge, one round); ``Neighbor_allgatherw``, absent from MPI, runs as the library's
``Neighbor_alltoallw`` with every send block at displacement 0.
"""

from __future__ import annotations

from .base import Algorithm
from .direct import build as direct_build

ALGORITHM = Algorithm(
    name="native",
    summary="the MPI library's own Neighbor_* (baseline)",
    build=direct_build,  # the pattern plan_stats reports; calls never run it
    runs_library=True,
    forwards=False,
)
