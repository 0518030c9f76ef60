"""``sparsecoll bench``: every algorithm against the MPI library on the papers' workloads.

Inside an ``mpiexec`` launch it measures on the ranks it has; otherwise it launches
itself with ``--np`` ranks (default 8) through the installed wheel's ``mpiexec``, with the
settings the machine needs (printed). Without topology arguments it runs a small
default demo that finishes in about two minutes on two cores.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from . import MODES

DEFAULT_TOPOLOGIES = ["stencil:d=2,n=3,f=-1", "moore:D=2,R=1", "random:density=0.3,seed=1", "matrix:"]
DEFAULT_COLLECTIVES = ["allgather", "alltoall"]
DEFAULT_SIZES = "8,256,4096"
DEFAULT_RANKS = 8


def parse_modes(text: str) -> list:
    """``--mode``: a comma list of modes, e.g. ``persistent,nonpersistent``."""
    modes = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise argparse.ArgumentTypeError(f"--mode: expected a comma list of {', '.join(MODES)}; got {text!r}")
    return list(dict.fromkeys(modes))


def add_arguments(parser) -> None:
    """The benchmark's options."""
    parser.add_argument("--np", type=int, default=None, help=f"ranks to launch (default {DEFAULT_RANKS}) "
                        "when not already under mpiexec")
    parser.add_argument("--topology", action="append", default=None, metavar="SPEC",
                        help="random:density=D,seed=S | moore:D=d,R=r | cross:d=D | stencil:d=D,n=N,f=F | cart:d=D | "
                             "sparse-alltoall:p=P | hotspot[:root=R] | "
                             "matrix:PATH (empty PATH: a bundled SuiteSparse matrix); repeatable")
    parser.add_argument("--collective", action="append", default=None,
                        choices=["allgather", "allgatherv", "alltoall", "alltoallv"], help="repeatable")
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help="bytes per block (per unit for v variants)")
    parser.add_argument("--algorithms", default=None,
                        help="comma list (default: all that support the topology), each NAME[+OPTION[=VALUE]]... "
                             "(e.g. direct+coloring: its own column)")
    parser.add_argument("--executors", default="steps",
                        help="comma list of executors (steps, dag, rma, rma_canary), each NAME[+OPTION=VALUE]... "
                             "(rma+rtr_tree=4: the RTR tree of degree 4): every algorithm that builds "
                             "a pattern is measured once per executor in the same repetitions (columns "
                             "name[executor] when not steps alone); native and auto once")
    parser.add_argument("--mode", default=["persistent"], type=parse_modes, metavar="MODE[,MODE...]",
                        help="persistent (*_init once; default) | nonpersistent (blocking calls that bind the "
                             "schedule on every call, wrap(rebind=True)) | blocking (schedule cached per "
                             "arguments) | nonblocking; a comma list interleaves the modes in one run")
    parser.add_argument("--reps", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--phase-reps", type=int, default=5,
                        help="repetitions of the Phase 1 (pattern) and Phase 2 (bind) measurements (median)")
    parser.add_argument("--seed", type=int, default=None, help="seed for random topologies without one")
    parser.add_argument("--out", default="bench-out", help="directory for results.json, results.csv, figures")


def _forwarded(args) -> list:
    argv = []
    for spec in args.topology or []:
        argv += ["--topology", spec]
    for collective in args.collective or []:
        argv += ["--collective", collective]
    argv += ["--sizes", args.sizes, "--mode", ",".join(args.mode), "--executors", args.executors,
             "--reps", str(args.reps),
             "--warmup", str(args.warmup), "--phase-reps", str(args.phase_reps), "--out", str(Path(args.out).resolve())]
    if args.algorithms:
        argv += ["--algorithms", args.algorithms]
    if args.seed is not None:
        argv += ["--seed", str(args.seed)]
    return argv


def run(args) -> int:
    """Launch (when needed) and run the benchmark."""
    from sparsecoll.topology import specs

    from ..launch import check_output_path, inside_mpi_launch, relaunch
    for option, value, least in (("--reps", args.reps, 1), ("--warmup", args.warmup, 0),
                                 ("--phase-reps", args.phase_reps, 1), ("--np", args.np, 1), ("--seed", args.seed, 0)):
        if value is not None and value < least:
            raise SystemExit(f"bench: {option}: expected at least {least}, got {value}")
    try:
        for spec in _specs(args):
            if specs.parse(spec).kind != "cart" and not inside_mpi_launch():
                specs.generate(spec, args.np or DEFAULT_RANKS)  # values that depend on the ranks (root=R)
        check_output_path(args.out, "--out", directory=True)
    except (ValueError, OSError) as exc:
        raise SystemExit(f"bench: {exc}") from None
    try:
        block_sizes(args.sizes)
    except ValueError as exc:
        raise SystemExit(f"bench: {exc}") from None
    _check_algorithms(args)
    if not inside_mpi_launch():
        return relaunch(args.np or DEFAULT_RANKS, ["bench", *_forwarded(args)])
    return _measure(args)


def _executors(args) -> list:
    return [e.strip() for e in args.executors.split(",") if e.strip()]


#: The largest block --sizes takes: an MPI count of bytes is a C int.
LARGEST_BLOCK = 2 ** 31 - 1


def block_sizes(text: str) -> list:
    """``--sizes``' byte counts, each in ``1..LARGEST_BLOCK`` (ValueError naming the option: an empty
    entry was skipped, and a size past numpy's limit failed on every rank after the launch)."""
    try:
        sizes = [int(entry) for entry in text.split(",")]
    except ValueError:
        raise ValueError(f"--sizes: expected comma-separated byte counts, got {text!r}") from None
    if not all(1 <= size <= LARGEST_BLOCK for size in sizes):
        raise ValueError(f"--sizes: expected byte counts from 1 to {LARGEST_BLOCK}, got {text!r}")
    return sizes


def algorithm_columns(text: str) -> list:
    """``--algorithms``' columns (``NAME[+OPTION=VALUE]...``, stripped), at least one and each once
    (ValueError naming the option: the columns are named by their text)."""
    columns = [entry.strip() for entry in text.split(",") if entry.strip()]
    if not columns:
        raise ValueError(f"--algorithms: expected a comma list of algorithms, got {text!r}")
    repeated = sorted({column for column in columns if columns.count(column) > 1})
    if repeated:
        raise ValueError(f"--algorithms: each column once, got {repeated} more than once")
    return columns


def _check_algorithms(args) -> None:
    """Reject a bad ``--algorithms`` or ``--executors`` entry before anything is launched."""
    from sparsecoll import executors as executor_names
    from sparsecoll.algorithms import check_options, parse_variant
    from sparsecoll.model.params import with_loggp_file

    from .runner import parse_executor
    try:
        executors = _executors(args)
        if not executors:
            raise ValueError(f"--executors: expected a comma list of {', '.join(executor_names())}, "
                             f"got {args.executors!r}")
        for text in executors:
            try:
                parse_executor(text)
            except ValueError as exc:
                raise ValueError(f"--executors: expected a comma list of {', '.join(executor_names())} "
                                 f"(each NAME[+OPTION=VALUE]...), got {args.executors!r} ({exc})") from None
        if args.algorithms is not None:
            for text in algorithm_columns(args.algorithms):
                name, options = parse_variant(text)
                check_options(name, with_loggp_file(options), args.np or DEFAULT_RANKS)
    except (ValueError, TypeError) as exc:
        raise SystemExit(f"bench: {exc}") from None


def _specs(args) -> list:
    specs = args.topology or DEFAULT_TOPOLOGIES
    if args.seed is not None:
        specs = [s + f",seed={args.seed}" if s.startswith(("random", "sparse-alltoall")) and "seed=" not in s
                 else s for s in specs]
    return specs


class _Progress:
    """Rank 0's progress: a live bar on a terminal; otherwise (under mpiexec, whose pipe is no
    terminal) one flushed line per case, so that the launching terminal sees it as it happens."""

    def __init__(self, total: int, started: float):
        self.total, self.done, self.started = total, 0, started
        self.bar = None
        if sys.stdout.isatty():
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
            self.bar = Progress(TextColumn("{task.description}"), BarColumn(),
                                TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn())
            self.bar.start()
            self.task = self.bar.add_task("benchmark", total=total)

    def case(self, description: str) -> None:
        """A case starts."""
        if self.bar is not None:
            self.bar.update(self.task, description=description)
        else:
            print(f"[{self.done}/{self.total} measured, {time.time() - self.started:.0f} s] {description}", flush=True)

    def advance(self) -> None:
        """One (algorithm, mode) of the case is measured."""
        self.done += 1
        if self.bar is not None:
            self.bar.advance(self.task)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()
        else:
            print(f"[{self.done}/{self.total} measured, {time.time() - self.started:.0f} s] done", flush=True)


def _measure(args) -> int:
    from mpi4py import MPI

    from sparsecoll.algorithms import parse_variant
    from sparsecoll.topology.placement import node_cores

    from ..fair_timing import fix_malloc_threshold
    from .report import auto_summary, environment, print_phase_table, print_table, summarize, write_figures, write_files
    from .runner import measure, supported, variants
    from .workloads import build
    world = MPI.COMM_WORLD
    root = world.Get_rank() == 0
    allocator = fix_malloc_threshold()  # before any buffer exists (sparsecoll.tools.fair_timing)
    cores = node_cores(world)  # collective
    sizes = block_sizes(args.sizes)
    collectives = args.collective or DEFAULT_COLLECTIVES
    wanted = algorithm_columns(args.algorithms) if args.algorithms is not None else None
    started = time.time()
    workloads = [build(spec, world) for spec in _specs(args)]
    plan = []
    for workload in workloads:
        for collective in collectives:
            family = "allgather" if collective.startswith("allgather") else "alltoall"
            names = supported(workload, family)
            if wanted is not None:  # in the order of supported (native first), options kept
                base = {text: parse_variant(text)[0] for text in wanted}
                missing = [text for text in wanted if base[text] not in names]
                if missing and root:
                    print(f"note: {workload.name}: {missing} do not support {family}; skipped", flush=True)
                names = [text for name in names for text in wanted if base[text] == name]
            columns = variants(names, _executors(args))
            for size in sizes:
                plan.append((workload, collective, size, columns))
    progress = _Progress(len(args.mode) * sum(len(names) for *_, names in plan), started) if root else None
    results = []
    phase1_cache = {}
    for number, (workload, collective, size, names) in enumerate(plan, 1):
        if root:
            progress.case(f"case {number}/{len(plan)}: {workload.name} {collective} {size} B, "
                          f"{len(names)} algorithms x {len(args.mode)} modes")
        measured = measure(world, workload, collective, size, names, modes=args.mode, reps=args.reps,
                           warmup=args.warmup, phase_reps=args.phase_reps, phase1_cache=phase1_cache,
                           on_progress=progress.advance if root else None)
        if root:
            for result in measured:
                summarize(result)
                results.append(result)
    for workload in workloads:  # with sparsecoll's idle requests and windows (MPICH names unfreed ones at exit)
        workload.comm.Free()
    if not root:
        return 0
    progress.stop()
    out = Path(args.out)
    env = environment(world, {"mode": ",".join(args.mode), "executors": ",".join(_executors(args)),
                              "reps": args.reps, "warmup": args.warmup,
                              "phase_reps": args.phase_reps,
                              "command": " ".join(sys.argv), "seconds": round(time.time() - started, 1)},
                      cores)
    env["settings"].update(allocator)
    files = write_files(out, results, env)
    figures = write_figures(out, results)
    print_table(results)
    print_phase_table(results)
    wrong = [(r["topology"], r["collective"], r["size"], n) for r in results
             for n, e in r["algorithms"].items()
             if not e["agrees_with_native"] and not (r.get("library_fault") and e["algorithm"] == "native")]
    for fault in sorted({r["library_fault"] for r in results if r.get("library_fault")}):
        print(f"known MPI library fault, results compared with direct's instead: {fault}")
    summary = auto_summary(results)
    if summary:
        print(summary)
    print(f"{env['ranks']} ranks on {env['cores']} cores, {env['mpi_library']}; settings: "
          f"{env['settings'] or 'none'}; {env['seconds']} s")
    print("results: " + ", ".join(str(p) for p in files))
    print("figures: " + ", ".join(str(p) for p in figures))
    if wrong:
        print(f"RESULTS DIFFER FROM NATIVE: {wrong}")
        return 1
    return 0
