"""What one registered algorithm is: :class:`Algorithm` (the registry itself is the package)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..pattern import FAMILIES


@dataclass(frozen=True)
class Algorithm:
    """One registered algorithm."""

    name: str
    summary: str
    families: tuple = FAMILIES
    build: Callable | None = None
    paper: str | None = None
    supports: Callable | None = None
    options: dict = field(default_factory=dict)
    check: Callable | None = None
    builds_locally: bool = True
    runs_library: bool = False
    #: Only differs from ``direct`` where the ranks span several nodes: ``auto`` leaves it out on one node.
    needs_nodes: bool = False
    #: Whether its Patterns may hold items in transit (a rank passing on another's data). ``False``
    #: (every item goes straight to its destination, on every rank): v/w calls never need the size
    #: pass, so the first call needs no agreement on it and stays local.
    forwards: bool = True

    def unsupported_reason(self, topology, family: str) -> str | None:
        """Why this algorithm cannot run ``family`` on ``topology`` (None if it can)."""
        if family not in self.families:
            return f"algorithm {self.name!r} does not implement the {family} family"
        if self.supports is not None:
            return self.supports(topology)
        return None
