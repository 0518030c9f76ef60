"""The universal hierarchical algorithm for global collectives (the paper on hierarchical
shared-memory collectives and imbalanced process arrival, section II, Fig. 1 and Fig. 2):
nodes and their shared memory (:mod:`.node`)."""

from .node import NodeLayout, SharedWindow

__all__ = ["NodeLayout", "SharedWindow"]
