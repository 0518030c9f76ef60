"""Launch the MPI test modules under mpiexec at every rank count, each with a timeout.

``SPARSECOLL_TEST_RANKS`` (comma list) narrows the rank counts;
``SPARSECOLL_MPI_MODULES`` (comma list of paths under tests/mpi) narrows the modules.
"""

from __future__ import annotations

import os

import pytest

from .conftest import RANK_COUNTS, ROOT, run_under_mpi

RANKS = tuple(int(n) for n in os.environ.get("SPARSECOLL_TEST_RANKS", ",".join(map(str, RANK_COUNTS))).split(","))
MODULES = sorted(p.name for p in (ROOT / "tests" / "mpi").glob("test_*.py"))
if os.environ.get("SPARSECOLL_MPI_MODULES"):
    MODULES = [m for m in MODULES if m in os.environ["SPARSECOLL_MPI_MODULES"].split(",")]


@pytest.mark.timeout(900)
@pytest.mark.parametrize("nprocs", RANKS)
@pytest.mark.parametrize("module", MODULES)
def test_under_mpiexec(module, nprocs):
    output = run_under_mpi(nprocs, f"tests/mpi/{module}", timeout=840)
    assert " passed" in output
