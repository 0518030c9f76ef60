"""The simulator: N virtual ranks in one process running sparsecoll's real builders.

:mod:`.world` gives the virtual communicators (greenlets, MPI matching, deadlock
detection, counters); :mod:`.harness` runs any registered algorithm's builder on all
virtual ranks and verifies what it produces. :mod:`.hierarchy` is a cost model of the universal
hierarchical collectives and of dynamic-leader reductions under imbalanced arrival (no virtual ranks).
"""

from .world import ANY_SOURCE, ANY_TAG, Counters, DeadlockError, RankError, Request, SimulationError, VirtualComm, World

__all__ = ["World", "VirtualComm", "Request", "Counters", "DeadlockError", "RankError",
           "SimulationError", "ANY_SOURCE", "ANY_TAG"]
