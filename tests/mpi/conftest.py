"""Runs on every rank of an mpiexec launch: keep ranks other than 0 quiet."""

from __future__ import annotations

from mpi4py import MPI


def pytest_configure(config):
    if MPI.COMM_WORLD.Get_rank() != 0:
        config.option.verbose = -2
        config.option.reportchars = "f"
