"""The simulator: N virtual ranks in one process running sparsecoll's real builders.

:mod:`.world` gives the virtual communicators (greenlets, MPI matching, deadlock
detection, counters); :mod:`.harness` runs any registered algorithm's builder on all
virtual ranks and verifies what it produces. (The cost model of the hierarchical collectives,
which needs no virtual ranks, is :mod:`sparsecoll.model.hierarchy`.)
"""

from .world import ANY_SOURCE, ANY_TAG, Counters, DeadlockError, RankError, Request, SimulationError, VirtualComm, World

__all__ = ["World", "VirtualComm", "Request", "Counters", "DeadlockError", "RankError",
           "SimulationError", "ANY_SOURCE", "ANY_TAG"]
