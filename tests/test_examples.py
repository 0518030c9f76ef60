"""The programs under examples/ run as a user runs them: under mpiexec at 4 ranks, with a timeout.

The quickstart is also the README's example, verbatim.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from sparsecoll.tools.launch import mpiexec_command

from .conftest import ROOT

EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


@pytest.mark.timeout(200)
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_example_runs_at_4_ranks(example):
    argv, env, _ = mpiexec_command(4, [sys.executable, str(example)])
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, cwd=ROOT)
    try:
        output, _ = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        pytest.fail(f"{example.name} at 4 ranks timed out:\n{output[-4000:]}")
    assert proc.returncode == 0, output[-6000:]


def test_the_readme_shows_the_quickstart_verbatim():
    quickstart = (ROOT / "examples" / "quickstart.py").read_text()
    assert f"```python\n{quickstart}```" in (ROOT / "README.md").read_text()
