"""Runs on every rank of an mpiexec launch: keep ranks other than 0 quiet, and give each rank its
own temporary root."""

from __future__ import annotations

import shutil
import tempfile

import pytest
from mpi4py import MPI

_OWN_ROOT = pytest.StashKey[str]()


def pytest_configure(config):
    rank = MPI.COMM_WORLD.Get_rank()
    if rank != 0:
        config.option.verbose = -2
        config.option.reportchars = "f"
    if config.option.basetemp is None:
        # Every rank runs a pytest session at once. In pytest's shared numbered folders under
        # /tmp/pytest-of-USER, each session's closing cleanup unlinks dead links the others may
        # have unlinked first: a rank failed so at 8 ranks on Open MPI (FileNotFoundError on
        # 'pytest-current', every test passed). A root of its own per rank shares nothing.
        config.option.basetemp = tempfile.mkdtemp(prefix=f"sparsecoll-tests-rank{rank}-")
        config.stash[_OWN_ROOT] = config.option.basetemp


def pytest_unconfigure(config):
    root = config.stash.get(_OWN_ROOT, None)
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def on_rank_0_only(monkeypatch):
    """``set(name, value)``: the environment variable ``name`` set to ``value`` on rank 0 and unset
    on the other ranks (each process reads its own environment), undone after the test."""
    def set_on_rank_0(name: str, value: str) -> None:
        if MPI.COMM_WORLD.Get_rank() == 0:
            monkeypatch.setenv(name, value)
        else:
            monkeypatch.delenv(name, raising=False)
    return set_on_rank_0
