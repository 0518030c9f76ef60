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


def _cg(nprocs: int, *args: str) -> subprocess.CompletedProcess:
    argv, env, _ = mpiexec_command(nprocs, [sys.executable, str(ROOT / "examples" / "cg.py"), *args])
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=150, cwd=ROOT)


@pytest.mark.timeout(200)
def test_cg_says_in_one_line_what_it_cannot_run(tmp_path):
    """An algorithm that cannot run alltoallv on the matrix's graph, and a file that is not Matrix
    Market: one line on every rank and a failing exit, not a traceback."""
    for args, said in ((["--algorithm", "distance_halving"], "does not implement the alltoall family"),
                       (["--matrix", str(ROOT / "README.md")], "Not a Matrix Market file")):
        run = _cg(2, "--repeat", "1", *args)
        assert run.returncode != 0 and "Traceback" not in run.stdout + run.stderr, run.stdout + run.stderr
        assert said in run.stdout + run.stderr


@pytest.mark.timeout(200)
def test_cg_checks_a_singular_matrix_by_its_residual(tmp_path):
    """The Laplacian of a path graph beside an identity is singular (positive semi-definite):
    spsolve finds no solution to compare with (it said 'error nan, limit nan'); CG's is checked
    by its residual."""
    import numpy
    import scipy.io
    import scipy.sparse
    n = 40
    laplacian = scipy.sparse.diags([-numpy.ones(n - 1), numpy.r_[1.0, 2 * numpy.ones(n - 2), 1.0],
                                    -numpy.ones(n - 1)], [-1, 0, 1])
    path = scipy.sparse.block_diag([laplacian, scipy.sparse.identity(n)])  # A @ ones is not zero
    scipy.io.mmwrite(str(tmp_path / "path.mtx"), path.tocoo())
    run = _cg(2, "--matrix", str(tmp_path / "path.mtx"), "--partition", "block", "--repeat", "1")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "the matrix is singular" in run.stdout and "nan" not in run.stdout


@pytest.mark.timeout(200)
def test_cg_refuses_a_zero_right_hand_side_and_a_complex_matrix(tmp_path):
    """A path graph's Laplacian (every row sums to 0, so b = A @ ones = 0) hung MPICH's ranks 1-3
    while rank 0 died dividing by a zero exchange time; a complex Hermitian matrix was solved with
    its imaginary parts dropped and reported 'ok'. Both: one line on every rank, a failing exit."""
    import numpy
    import scipy.io
    import scipy.sparse
    n = 40
    laplacian = scipy.sparse.diags([-numpy.ones(n - 1), numpy.r_[1.0, 2 * numpy.ones(n - 2), 1.0],
                                    -numpy.ones(n - 1)], [-1, 0, 1])
    scipy.io.mmwrite(str(tmp_path / "laplacian.mtx"), laplacian.tocoo())
    hermitian = scipy.sparse.diags([numpy.full(n - 1, -1j), numpy.full(n, 4.0), numpy.full(n - 1, 1j)], [-1, 0, 1])
    scipy.io.mmwrite(str(tmp_path / "hermitian.mtx"), hermitian.tocoo())
    for name, said in (("laplacian.mtx", "b = A @ ones is zero"), ("hermitian.mtx", "the matrix is complex")):
        run = _cg(2, "--matrix", str(tmp_path / name), "--partition", "block", "--repeat", "1")
        output = run.stdout + run.stderr
        assert run.returncode != 0 and "Traceback" not in output and said in output, output[-3000:]


@pytest.mark.timeout(200)
def test_cg_checks_every_solve_the_warm_up_too():
    """The warm-up solve is where auto's online check alternates its choice with the library's call;
    only the last solve of each variant was checked, so wrong data there would have passed."""
    run = _cg(2, "--partition", "block", "--repeat", "2")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    checked = [line for line in run.stdout.splitlines() if "3 solves (the warm-up too)" in line]
    assert [line.split(":")[1].strip() for line in checked] == ["native", "auto"], run.stdout
