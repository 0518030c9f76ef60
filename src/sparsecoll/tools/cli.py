"""The ``sparsecoll`` command line: one subcommand per job.

Each subcommand lives in its own module exposing ``add_arguments(parser)`` and
``run(args) -> int``; this table is the only place that lists them.
"""

from __future__ import annotations

import argparse
import importlib
import sys

SUBCOMMANDS = {
    # name: (module, one-line help)
    "bench": ("sparsecoll.tools.bench.command", "every algorithm against the MPI library on the papers' workloads"),
    "demo": ("sparsecoll.tools.demo", "wrap a communicator, run every collective with direct and native, compare"),
    "calibrate": ("sparsecoll.tools.calibrate", "measure Hockney alpha and beta by ping-pong, write a parameter file"),
    "simulate": ("sparsecoll.tools.simulate", "build algorithms on virtual ranks, verify, predict latencies with a cost model"),
    "cartesian-table": ("sparsecoll.tools.cartesian_table",
                        "the Cartesian paper's Table 1 and Figure 2, counted on sparsecoll's schedules"),
}


def main(argv=None) -> int:
    """Entry point of the ``sparsecoll`` console script and ``python -m sparsecoll``."""
    parser = argparse.ArgumentParser(prog="sparsecoll", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules = {}
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        module = importlib.import_module(module_name)
        modules[name] = module
        module.add_arguments(sub.add_parser(name, help=help_text, description=help_text))
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    return int(modules[args.command].run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
