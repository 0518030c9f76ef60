"""Shared test helpers: launching MPI test modules under mpiexec with a timeout."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sparsecoll.tools.launch import mpiexec_command

ROOT = Path(__file__).resolve().parent.parent

#: Rank counts every MPI test module runs at (the core issue's list).
RANK_COUNTS = (1, 2, 3, 4, 5, 8)


#: What Open MPI's launcher prints when it fails to start, before any rank runs a test (seen once
#: in a CI run: ``tests/mpi/test_dag.py`` on 5 ranks, exit 213, no test started); such a launch is
#: made again, up to :data:`LAUNCH_ATTEMPTS` times. A launch that started any test is never retried.
LAUNCHER_FAILED = ("The PMIx server's listener thread failed to start",)
LAUNCH_ATTEMPTS = 3


def run_under_mpi(nprocs: int, test_path: str, *pytest_args: str, timeout: float = 600) -> str:
    """Run ``pytest test_path`` on ``nprocs`` ranks; fail (never hang) on error or timeout."""
    program = [sys.executable, "-m", "pytest", str(ROOT / test_path), "-v", "-x", "--color=no",
               "-p", "no:cacheprovider", "-p", "no:hypothesispytest", "--timeout=240", "--timeout-method=thread",
               *pytest_args]
    argv, env, _ = mpiexec_command(nprocs, program)
    env["PYTHONHASHSEED"] = "0"
    for _attempt in range(LAUNCH_ATTEMPTS):
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True, cwd=ROOT)
        try:
            output, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
            pytest.fail(f"{test_path} on {nprocs} ranks timed out after {timeout}s:\n{_report(output, 6000)}")
        launcher_failed = proc.returncode != 0 and any(line in output for line in LAUNCHER_FAILED) \
            and "tests/" not in output  # no rank started a test (pytest -v names each)
        if not launcher_failed:
            break
    if proc.returncode != 0:
        report = _report(output, 12000)
        pytest.fail(f"{test_path} on {nprocs} ranks failed (exit {proc.returncode}):\n{report}")
    return output


#: Lines an MPI library prints that say nothing about a failure. Open MPI 5.0.x prints the first
#: at every window creation where UCX has no RMA transport and osc/rdma takes over (benign,
#: open-mpi/ompi#14086); a failure report of only such lines hid which test failed.
NOISE = ("OSC UCX component priority set inside component query failed",)
#: What begins the summary lines of ``tests/mpi/conftest.py``'s watchdog (put first in a report).
STUCK = "[stuck]"


def _report(output: str, limit: int) -> str:
    """The last ``limit`` characters of ``output`` without the lines of :data:`NOISE` and blank
    lines, after what a tail of stack dumps would cut: the last tests the ranks started (pytest -v
    names them) and what each rank's watchdog said it waits on (``tests/mpi/conftest.py``)."""
    kept = [line for line in output.splitlines() if line.strip() and not any(n in line for n in NOISE)]
    stuck = [line for line in kept if line.startswith(STUCK)]
    started = [line for line in kept if line.startswith("tests/") and "::" in line and " PASSED" not in line][-8:]
    return "\n".join(["last tests started:", *started, *stuck, "end of the output:", "\n".join(kept)[-limit:]])

# tests/mpi/* run on every rank under mpiexec (see tests/test_mpi.py), not in this process
collect_ignore = [] if any(v in os.environ for v in ("PMI_RANK", "OMPI_COMM_WORLD_SIZE")) else ["mpi"]
