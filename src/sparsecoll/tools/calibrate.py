"""``sparsecoll calibrate``: measure the profile ``algorithm="auto"`` predicts with (default), or
Hockney's alpha and beta (LogGP's L, o, G) for the simulator's cost model, and save them.

``--model profile`` (default): :mod:`.profile_calibration` measures, every launched rank
taking part, the library's and sparsecoll's per-call, per-step and per-message costs; the
fit (:func:`sparsecoll.model.calibrate.fit_profile_load`) becomes the entry of this load
(ranks per core) in the profile of this host and MPI library, in the user's cache
directory (:func:`sparsecoll.model.profile.default_path`) unless ``--out`` names a file.
Run it once at a rank per core (``--np 2`` here) and once at the load you will run at
(``--np 8`` on this 2-core machine): auto uses the entry nearest its own load.

``--model hockney`` / ``loggp``: the measurements and fits of :mod:`sparsecoll.model.calibrate`
(its docstring describes the method), written to ``--out`` as a parameter file.
"""

from __future__ import annotations

import dataclasses
import fcntl
import math
import os
import platform
import time

from sparsecoll.model.calibrate import (
    CHAIN,
    DEFAULT_BURSTS,
    DEFAULT_SIZES,
    PAIRS,
    burst_exchange,
    fit_hockney,
    fit_loggp,
    ping_pong,
    round_trip_chain,
)
from sparsecoll.model.profile import LEVELS, default_path, library_version

#: Default repetitions of ``--model profile`` (per variant) and of ``hockney`` / ``loggp`` (per size).
PROFILE_REPS, PARAMETER_REPS = 2000, 200
#: The options of the hockney and loggp fits, with their defaults (the profile measures its own sizes).
FIT_OPTIONS = {"--sizes": ("sizes", ",".join(map(str, DEFAULT_SIZES))),
               "--bursts": ("bursts", ",".join(map(str, DEFAULT_BURSTS))),
               "--pair-class": ("pair_class", "socket"), "--pairs": ("pairs", "one")}


def add_arguments(parser) -> None:
    """Options of ``sparsecoll calibrate``."""
    parser.add_argument("--out", default=None,
                        help="file to write (default: profile: this host's profile in the user's cache directory; "
                             "hockney, loggp: sparsecoll-params.json)")
    parser.add_argument("--sizes", default=None,
                        help=f"hockney, loggp: message sizes in bytes, comma separated (default "
                             f"{FIT_OPTIONS['--sizes'][1]})")
    parser.add_argument("--reps", type=int, default=None,
                        help=f"repetitions per variant (profile, default {PROFILE_REPS}: at 4 ranks per core the "
                             f"fit of 400 moved by 20%% between runs, of 2000 by 5%%) or per size (hockney, loggp, "
                             f"default {PARAMETER_REPS})")
    parser.add_argument("--pair-class", default=None, choices=LEVELS[1:],
                        help=f"hockney, loggp: the pair class the two ranks form (default: "
                             f"{FIT_OPTIONS['--pair-class'][1]})")
    parser.add_argument("--np", type=int, default=2,
                        help="ranks to launch when not already under mpiexec (default 2); more ranks than "
                             "cores get the launcher's oversubscription settings, as the benchmark does")
    parser.add_argument("--model", default="profile", choices=("profile", "hockney", "loggp"),
                        help="profile: auto's per-call, per-step and per-message costs (default); hockney: "
                             "ping-pong fit of alpha, beta; loggp: o and G from bursts, L from round trips, "
                             "every pair at once")
    parser.add_argument("--bursts", default=None,
                        help=f"loggp: messages per step, comma separated (default {FIT_OPTIONS['--bursts'][1]})")
    parser.add_argument("--pairs", default=None, choices=PAIRS,
                        help="hockney, loggp: one (default): ranks 0-1 ping-pong, the others idle in the barrier; "
                             "all: every pair (2i, 2i+1) at once, maximum over pairs")


def _main(args) -> int:
    from mpi4py import MPI

    from sparsecoll.model.params import hockney
    from sparsecoll.topology.placement import node_cores

    comm = MPI.COMM_WORLD
    if comm.Get_size() < 2:
        raise SystemExit("calibrate: needs at least 2 ranks")
    cores = node_cores(comm)  # collective
    if args.model == "profile":
        return _main_profile(comm, args, cores)
    args.out = args.out or "sparsecoll-params.json"
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.model == "loggp":
        return _main_loggp(comm, args, sizes, cores)
    times = ping_pong(comm, sizes, args.reps, args.pairs)
    if comm.Get_rank() == 0:
        alpha, beta = fit_hockney(sizes, times)
        nranks = comm.Get_size()
        load = ("ranks 0-1 ping-pong" if args.pairs == "one" else
                f"all {nranks // 2} pairs (2i, 2i+1) ping-pong at once, maximum over pairs")
        source = (f"sparsecoll calibrate on {platform.node()}, {library_version()}, "
                  f"{nranks} ranks live on {cores} cores, {load}, "
                  f"{args.reps} round trips per size, {time.strftime('%Y-%m-%d')}")
        machine = hockney(alpha, beta, source, args.pair_class)
        machine.save(args.out, measurements={"sizes": sizes, "one_way_seconds": times, "ranks": nranks,
                                             "pairs": args.pairs, "reps": args.reps,
                                             "load_average_1_5_15min": list(os.getloadavg())})
        print(source)
        print(f"{'bytes':>9} {'one-way us':>11} {'fit us':>9}")
        for size, t in zip(sizes, times):
            print(f"{size:9d} {t * 1e6:11.2f} {(alpha + size * beta) * 1e6:9.2f}")
        print(f"alpha = {alpha * 1e6:.3f} us, beta = {beta * 1e9:.4f} ns/byte "
              f"({1 / beta / 1e9 if beta else float('inf'):.2f} GB/s); written to {args.out}")
    return 0


def _main_loggp(comm, args, sizes, cores: int) -> int:
    from sparsecoll.model.params import loggp

    counts = [int(k) for k in args.bursts.split(",")]
    smallest = min(sizes)
    points = [(k, smallest) for k in counts] + [(1, m) for m in sizes]
    times = burst_exchange(comm, points, args.reps)
    half_round_trip = round_trip_chain(comm, smallest, args.reps)
    count_seconds, size_seconds = times[:len(counts)], times[len(counts):]
    if comm.Get_rank() == 0:
        fit = fit_loggp(counts, count_seconds, sizes, size_seconds, half_round_trip)
        nranks = comm.Get_size()
        source = (f"sparsecoll calibrate --model loggp on {platform.node()}, "
                  f"{library_version()}, {nranks} ranks live on {cores} cores, "
                  f"all {nranks // 2} pairs at once, persistent requests, bursts of k messages each way and "
                  f"round trips, {CHAIN} back to back per sample, maximum over ranks, {args.reps} samples "
                  f"per point, {time.strftime('%Y-%m-%d')}")
        machine = loggp(fit["L"], fit["o"], fit["g"], fit["G"], source, args.pair_class)
        machine.save(args.out, measurements={"counts": counts, "count_bytes": smallest,
                                             "count_seconds": count_seconds, "sizes": sizes,
                                             "size_seconds": size_seconds,
                                             "half_round_trip_seconds": half_round_trip, "ranks": nranks,
                                             "reps": args.reps, "chain": CHAIN,
                                             "load_average_1_5_15min": list(os.getloadavg())})
        print(source)
        print(f"{'messages':>9} {'bytes':>9} {'step us':>9}")
        for (k, m), t in zip(points, times):
            print(f"{k:9d} {m:9d} {t * 1e6:9.2f}")
        print(f"half round trip of {smallest} bytes: {half_round_trip * 1e6:.2f} us")
        print(f"L = {fit['L'] * 1e6:.3f} us, o = {fit['o'] * 1e6:.3f} us, G = {fit['G'] * 1e9:.4f} ns/byte, g = 0 "
              f"(ceil(L/o) = {math.ceil(round(fit['L'] / fit['o'], 9)) if fit['o'] else 'undefined'}); "
              f"written to {args.out}")
    return 0


def _main_profile(comm, args, cores: int) -> int:

    from sparsecoll.model.calibrate import fit_profile_load
    from sparsecoll.model.profile import (
        BUILTIN,
        Profile,
        ProfileError,
        library_name,
        ranks_per_core,
        ranks_per_node,
    )
    from sparsecoll.topology.placement import resolve as resolve_placement

    from .profile_calibration import copy_seconds_per_byte, measure
    rank = comm.Get_rank()
    say = print if rank == 0 else (lambda *_: None)
    placement = resolve_placement(comm).placement
    pair_level = placement.pair_class(0, 1)
    ranks = ranks_per_core(comm.Get_size(), placement, cores)
    start = time.perf_counter()
    times, stencil, one_way = measure(comm, args.reps, say)
    load = dataclasses.replace(fit_profile_load(times, ranks, pair_level, copy_seconds_per_byte(), one_way,
                                                BUILTIN.loads[0], stencil),
                               ranks_per_node=ranks_per_node(comm.Get_size(), placement))
    if rank == 0:
        path = args.out or default_path()
        library = library_name()
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path + ".lock", "a") as lock:  # two calibrates at once: each adds its load to the other's
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                profile = Profile.load(path) if os.path.exists(path) else None
            except ProfileError as error:
                say(f"calibrate: starting a new profile ({error})")
                profile = None
            if profile is not None and profile.mpi_library != library:  # a profile holds one library's loads
                held = profile.mpi_library or "any library"
                say(f"calibrate: {path} holds a profile of {held}, this is {library}: replacing its profile of "
                    f"{held} (without --out each library has a file of its own)")
            if profile is None or profile.mpi_library != library:
                profile = Profile((), library, platform.node())
            source = (f"sparsecoll calibrate on {platform.node()}, {library_version()}, "
                      f"{time.strftime('%Y-%m-%d')}")
            profile = Profile(profile.with_load(load).loads, library, platform.node(), source)
            profile.save(path)
        say(f"calibrate: {comm.Get_size()} ranks on {cores} cores (load {ranks:g} ranks per core), "
            f"ring neighbors at level {pair_level}, {time.perf_counter() - start:.1f} s")
        say(f"{'variant':>9} {'form':>12} {'edges':>5} {'bytes':>6} {'median us':>10}")
        for (name, form, edges, block), seconds in times.items():
            say(f"{name:>9} {form:>12} {edges:5d} {block:6d} {seconds * 1e6:10.2f}")
        for (name, family, form, block), (seconds, pattern) in stencil.items():
            say(f"{name:>9} {form:>12} {'9-pt':>5} {block:6d} {seconds * 1e6:10.2f}  ({family} on the stencil, "
                f"{len(pattern.steps)} steps)")
        level = load.levels[pair_level]
        combined, moved = (", ".join(f"{family} {factor:.2f}" for family, factor in factors.items())
                           for factors in (load.combined_factor, load.sparsecoll_byte_factor))
        say(f"{pair_level}: alpha {level['alpha'] * 1e6:.2f} us, beta {level['beta'] * 1e9:.4f} ns/B, "
            f"overhead {level['overhead'] * 1e6:.2f} us, rendezvous {level['rendezvous'] * 1e6:.2f} us "
            f"(a waiting step {level['rendezvous_step'] * 1e6:.2f} us); "
            f"sparsecoll per step {load.sparsecoll_per_step * 1e6:.2f} us, "
            f"a byte it moves {moved} x beta, combined messages {combined} x that")
        per_call = [f"{form} native {load.native_per_call[form] * 1e6:.2f} / sparsecoll "
                    f"{load.sparsecoll_per_call[form] * 1e6:.2f}" for form in load.native_per_call]
        say("per call (us): " + ", ".join(per_call) + f"; the library through auto's size comparison "
            f"{load.native_shortcut * 1e6:.2f} more")
        if load.rma is not None:
            say(f"rma executor (persistent): {load.rma['per_message'] * 1e6:.2f} us more per message, "
                f"{load.rma['byte_factor']:.2f} x the bytes' cost")
        say(f"written to {path} (loads: {', '.join(entry.describe() for entry in profile.loads)})")
    return 0


def run(args) -> int:
    """Run the ping-pong under mpiexec (launching ``--np`` ranks when not already launched)."""
    from .launch import check_output_path, inside_mpi_launch, relaunch
    if args.np < 2:
        raise SystemExit(f"calibrate: --np expects at least 2 ranks, got {args.np}")
    if args.reps is None:
        args.reps = PROFILE_REPS if args.model == "profile" else PARAMETER_REPS
    if args.reps < 1:
        raise SystemExit(f"calibrate: --reps expects at least 1, got {args.reps}")
    given = [option for option, (name, _) in FIT_OPTIONS.items() if getattr(args, name) is not None]
    if args.model == "profile" and given:  # it was accepted and had no effect
        raise SystemExit(f"calibrate: {given[0]} is an option of --model hockney or loggp; the profile "
                         f"measures its own sizes and pairs")
    for name, default in FIT_OPTIONS.values():
        if getattr(args, name) is None:
            setattr(args, name, default)
    for option, text in (("--sizes", args.sizes), ("--bursts", args.bursts)):
        try:
            values = [int(value) for value in text.split(",")]
        except ValueError:
            raise SystemExit(f"calibrate: {option} expects comma-separated integers, got {text!r}") from None
        least = 0 if option == "--sizes" else 1
        if min(values) < least:
            raise SystemExit(f"calibrate: {option} expects values of at least {least}, got {text!r}")
    if args.model in ("hockney", "loggp") and len({int(size) for size in args.sizes.split(",")}) < 2:
        raise SystemExit(f"calibrate: --sizes: the {args.model} fit needs two different sizes, got {args.sizes!r}")
    try:
        if args.out is not None:
            check_output_path(args.out, "--out", directory=False)
        elif args.model == "profile":
            check_output_path(default_path(), f"the profile cache ({default_path()}; or give --out)", directory=False)
    except ValueError as exc:
        raise SystemExit(f"calibrate: {exc}") from None
    if not inside_mpi_launch():
        out = ["--out", args.out] if args.out else []
        fit = [] if args.model == "profile" else [
            word for option, (name, _) in FIT_OPTIONS.items() for word in (option, getattr(args, name))]
        return relaunch(args.np, ["calibrate", *out, "--reps", str(args.reps), "--model", args.model, *fit])
    return _main(args)
