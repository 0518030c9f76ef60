"""``sparsecoll calibrate``: measure Hockney's alpha and beta (or LogGP's L, g, G) and save them.

The measurements and fits are :mod:`sparsecoll.model.calibrate` (its docstring describes
the method); this module is the command: options, the launch, the parameter file.
"""

from __future__ import annotations

import json
import os
import platform
import time

from sparsecoll.model.calibrate import (
    DEFAULT_BURSTS,
    DEFAULT_SIZES,
    PAIRS,
    burst_exchange,
    fit_hockney,
    fit_loggp_bursts,
    ping_pong,
)


def add_arguments(parser) -> None:
    """Options of ``sparsecoll calibrate``."""
    parser.add_argument("--out", default="sparsecoll-params.json", help="parameter file to write")
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)),
                        help="message sizes in bytes, comma separated")
    parser.add_argument("--reps", type=int, default=200, help="round trips per size")
    parser.add_argument("--pair-class", default="socket", choices=("socket", "node", "network"),
                        help="the pair class the two ranks form (default: socket)")
    parser.add_argument("--np", type=int, default=2,
                        help="ranks to launch when not already under mpiexec (default 2); more ranks than "
                             "cores get the launcher's oversubscription settings, as the benchmark does")
    parser.add_argument("--model", default="hockney", choices=("hockney", "loggp"),
                        help="hockney: ping-pong fit of alpha, beta; loggp: burst fit of L, g, G (o = 0), "
                             "every pair at once")
    parser.add_argument("--bursts", default=",".join(map(str, DEFAULT_BURSTS)),
                        help="loggp: messages per step, comma separated")
    parser.add_argument("--pairs", default="one", choices=PAIRS,
                        help="one: ranks 0-1 ping-pong, the others idle in the barrier; "
                             "all: every pair (2i, 2i+1) at once, maximum over pairs")


def _main(args) -> int:
    from mpi4py import MPI

    from sparsecoll.model.params import hockney

    from .launch import usable_cores
    comm = MPI.COMM_WORLD
    if comm.Get_size() < 2:
        raise SystemExit("calibrate: needs at least 2 ranks")
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.model == "loggp":
        return _main_loggp(comm, args, sizes)
    times = ping_pong(comm, sizes, args.reps, args.pairs)
    if comm.Get_rank() == 0:
        alpha, beta = fit_hockney(sizes, times)
        nranks = comm.Get_size()
        load = ("ranks 0-1 ping-pong" if args.pairs == "one" else
                f"all {nranks // 2} pairs (2i, 2i+1) ping-pong at once, maximum over pairs")
        source = (f"sparsecoll calibrate on {platform.node()}, {MPI.Get_library_version().splitlines()[0]}, "
                  f"{nranks} ranks live on {usable_cores()} cores, {load}, "
                  f"{args.reps} round trips per size, {time.strftime('%Y-%m-%d')}")
        machine = hockney(alpha, beta, source, args.pair_class)
        data = machine.to_json()
        data["measurements"] = {"sizes": sizes, "one_way_seconds": times, "ranks": nranks,
                                "pairs": args.pairs, "reps": args.reps,
                                "load_average_1_5_15min": list(os.getloadavg())}
        with open(args.out, "w") as f:
            json.dump(data, f, indent=2)
            f.write("\n")
        print(source)
        print(f"{'bytes':>9} {'one-way us':>11} {'fit us':>9}")
        for size, t in zip(sizes, times):
            print(f"{size:9d} {t * 1e6:11.2f} {(alpha + size * beta) * 1e6:9.2f}")
        print(f"alpha = {alpha * 1e6:.3f} us, beta = {beta * 1e9:.4f} ns/byte "
              f"({1 / beta / 1e9 if beta else float('inf'):.2f} GB/s); written to {args.out}")
    return 0


def _main_loggp(comm, args, sizes) -> int:
    from mpi4py import MPI

    from sparsecoll.model.params import loggp

    from .launch import usable_cores
    counts = [int(k) for k in args.bursts.split(",")]
    smallest = min(sizes)
    points = [(k, smallest) for k in counts] + [(1, m) for m in sizes]
    times = burst_exchange(comm, points, args.reps)
    count_seconds, size_seconds = times[:len(counts)], times[len(counts):]
    if comm.Get_rank() == 0:
        fit = fit_loggp_bursts(counts, count_seconds, sizes, size_seconds, smallest)
        nranks = comm.Get_size()
        source = (f"sparsecoll calibrate --model loggp on {platform.node()}, "
                  f"{MPI.Get_library_version().splitlines()[0]}, {nranks} ranks live on {usable_cores()} cores, "
                  f"bursts: all {nranks // 2} pairs exchange k messages each way in one step, maximum over ranks, "
                  f"{args.reps} steps per point, o = 0 by construction, {time.strftime('%Y-%m-%d')}")
        machine = loggp(fit["L"], fit["o"], fit["g"], fit["G"], source, args.pair_class)
        data = machine.to_json()
        data["measurements"] = {"counts": counts, "count_bytes": smallest, "count_seconds": count_seconds,
                                "sizes": sizes, "size_seconds": size_seconds, "ranks": nranks,
                                "reps": args.reps, "load_average_1_5_15min": list(os.getloadavg())}
        with open(args.out, "w") as f:
            json.dump(data, f, indent=2)
            f.write("\n")
        print(source)
        print(f"{'messages':>9} {'bytes':>9} {'step us':>9}")
        for (k, m), t in zip(points, times):
            print(f"{k:9d} {m:9d} {t * 1e6:9.1f}")
        print(f"L = {fit['L'] * 1e6:.2f} us, g = {fit['g'] * 1e6:.3f} us, G = {fit['G'] * 1e9:.4f} ns/byte, o = 0; "
              f"written to {args.out}")
    return 0


def run(args) -> int:
    """Run the ping-pong under mpiexec (launching ``--np`` ranks when not already launched)."""
    from .launch import inside_mpi_launch, relaunch
    if args.np < 2:
        raise SystemExit(f"calibrate: --np expects at least 2 ranks, got {args.np}")
    if args.reps < 1:
        raise SystemExit(f"calibrate: --reps expects at least 1, got {args.reps}")
    if not inside_mpi_launch():
        return relaunch(args.np, ["calibrate", "--out", args.out, "--sizes", args.sizes, "--reps", str(args.reps),
                                  "--pair-class", args.pair_class, "--pairs", args.pairs, "--model", args.model,
                                  "--bursts", args.bursts])
    return _main(args)
