"""The universal hierarchical algorithm for global collectives (the paper on hierarchical
shared-memory collectives and imbalanced process arrival, section II, Fig. 1 and Fig. 2):
nodes and their shared memory (:mod:`.node`), SetupInter and the Fig. 2 placement
(:mod:`.offsets`), copy-in and copy-out (:mod:`.copying`), the leaders' calls between nodes
(:mod:`.leaders`), the collectives (:mod:`.collectives`)."""

from .collectives import GLOBAL_COLLECTIVES, Hierarchy, global_collective_name
from .node import NodeLayout, SharedWindow

__all__ = ["GLOBAL_COLLECTIVES", "Hierarchy", "NodeLayout", "SharedWindow", "global_collective_name"]
