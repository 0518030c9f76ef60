"""sparsecoll: fast MPI neighborhood collectives for mpi4py.

``comm = sparsecoll.wrap(comm)`` keeps mpi4py's ``Neighbor_*`` signatures and
semantics but runs schedules built by published message-combining algorithms.
"""

from __future__ import annotations

from . import algorithms as _registry
from .cartcomm import cart_neighborhood_create
from .comm import CartNeighborhoodComm, Cartcomm, Distgraphcomm, Graphcomm, NeighborhoodMixin, wrap
from .runtime import ScheduleRequest, waitall
from .pattern import Pattern
from .verify import VerificationError, verify

__version__ = "0.1.0"


def algorithms() -> dict:
    """The registered algorithms: name -> one-line summary (plus ``"auto"``)."""
    listing = {name: alg.summary for name, alg in _registry.REGISTRY.items()}
    listing[_registry.AUTO] = "chosen per topology and collective family by the cost model"
    return listing


def is_wrapped(comm) -> bool:
    """Whether ``comm`` is a sparsecoll-wrapped communicator."""
    return isinstance(comm, NeighborhoodMixin)


__all__ = ["wrap", "cart_neighborhood_create", "CartNeighborhoodComm", "algorithms", "is_wrapped", "verify",
           "VerificationError", "Pattern", "ScheduleRequest", "waitall", "Cartcomm", "Graphcomm", "Distgraphcomm",
           "__version__"]
