"""Imbalanced arrival (Table II of the paper on hierarchical shared-memory collectives and imbalanced
process arrival): mean time each rank spends inside Reduce with dynamic leaders, fixed leaders and
the MPI library, when every rank first runs a micro-kernel of a random length.

Run: mpiexec -n 8 python benchmarks/hierarchy/imbalance.py [--ranks-per-node 4] [--imbalance-ms 0 50 800]
     [--scale 0.01] [--sizes 128 2048 32768 524288] [--reps 10] [--collective reduce] [--json out.json]

Per repetition, size and imbalance, every rank draws one micro-kernel length uniformly from
[0, imbalance * scale] ms (seeded by --seed, the repetition and the rank, so the three variants
see the same lengths), and each variant in turn (rotated every repetition) runs: a barrier, the
micro-kernel, then the timed collective. One untimed call per variant and size comes first (it
allocates the shared windows). The paper's kernels ran 0 to 800 ms at 8192 cores;
--scale shrinks them (default 0.01: up to 8 ms) so a run fits a small machine. Printed: per size
and imbalance the mean over ranks and repetitions of the seconds inside the collective per
variant, and the speedups of dynamic leaders over the library and over fixed leaders (the
paper's Table II reports the speedup over MPICH). Ranks per node: --ranks-per-node emulates nodes
of that many consecutive ranks; default: SPARSECOLL_PLACEMENT if set, else the real nodes.
"""

import argparse
import json
import random
import time

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--ranks-per-node", type=int, default=None, help="emulated ranks per node (default: real nodes)")
parser.add_argument("--imbalance-ms", type=float, nargs="+", default=[0, 50, 100, 200, 400, 800],
                    help="micro-kernel maxima in the paper's milliseconds (Table II rows)")
parser.add_argument("--scale", type=float, default=0.01, help="factor applied to every micro-kernel length")
parser.add_argument("--sizes", type=int, nargs="+", default=[128, 2048, 32768, 524288],
                    help="buffer sizes in bytes (Table II columns; float64 elements)")
parser.add_argument("--reps", type=int, default=10, help="repetitions per size and imbalance")
parser.add_argument("--collective", choices=("reduce", "allreduce"), default="reduce")
parser.add_argument("--kernel", choices=("sleep", "spin"), default="sleep",
                    help="micro-kernel: sleep (yields the core: oversubscribed machines) or spin (busy loop)")
parser.add_argument("--seed", type=int, default=2012)
parser.add_argument("--json", default=None, help="also write the results here (rank 0)")
args = parser.parse_args()

import numpy  # noqa: E402  (after argparse so that --help needs no MPI)
from mpi4py import MPI  # noqa: E402

import sparsecoll  # noqa: E402

WORLD = MPI.COMM_WORLD
RANK, SIZE = WORLD.Get_rank(), WORLD.Get_size()
options = {} if args.ranks_per_node is None else {"ranks_per_node": args.ranks_per_node}
variants = {
    "dynamic": sparsecoll.wrap(WORLD.Dup(), reduce="dynamic", **options),
    "fixed": sparsecoll.wrap(WORLD.Dup(), reduce="fixed", **options),
    "library": WORLD.Dup(),
}
names = list(variants)


def micro_kernel(seconds: float) -> None:
    """Sleep, or spin on the clock, for ``seconds``."""
    if args.kernel == "sleep":
        time.sleep(seconds)
        return
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def timed_call(comm, send, recv) -> float:
    start = time.perf_counter()
    if args.collective == "reduce":
        comm.Reduce(send, recv, MPI.SUM, 0)
    else:
        comm.Allreduce(send, recv, MPI.SUM)
    return time.perf_counter() - start


rows = []
for size in args.sizes:
    elements = max(1, size // 8)
    send = numpy.full(elements, RANK + 1.0)
    recv = numpy.empty(elements)
    for name in names:  # warm-up: the first call of a size allocates the shared windows
        WORLD.Barrier()
        timed_call(variants[name], send, recv)
    for imbalance in args.imbalance_ms:
        inside = {name: [] for name in names}
        for rep in range(args.reps):
            kernel = random.Random(f"{args.seed}-{size}-{imbalance}-{rep}-{RANK}").uniform(0, imbalance * args.scale)
            for turn in range(len(names)):
                name = names[(rep + turn) % len(names)]
                WORLD.Barrier()
                micro_kernel(kernel / 1000.0)
                inside[name].append(timed_call(variants[name], send, recv))
        mean = {name: WORLD.allreduce(sum(values), op=MPI.SUM) / (SIZE * args.reps) for name, values in inside.items()}
        rows.append({"bytes": elements * 8, "imbalance_ms": imbalance, "kernel_max_ms": imbalance * args.scale,
                     "mean_seconds_inside": mean,
                     "speedup_over_library": mean["library"] / mean["dynamic"],
                     "speedup_over_fixed": mean["fixed"] / mean["dynamic"]})

stats = variants["dynamic"].hierarchy_stats()
counts = stats["dynamic_reduce"]
totals = {key: WORLD.allreduce(counts[key], op=MPI.SUM)
          for key in ("dynamic_calls", "leader_calls", "control_sent", "slot_waits", "turn_waits")}
if RANK == 0:
    library = MPI.Get_library_version().replace(chr(0), "").splitlines()[0]
    print(f"{args.collective}, {SIZE} ranks, {stats['nodes']} nodes {stats['ranks_per_node']}, "
          f"kernel={args.kernel} x{args.scale}, {args.reps} reps; {library}")
    print("| bytes | imbalance (paper ms) | kernel max (ms) | dynamic (us) | fixed (us) | library (us) "
          "| dynamic vs library | dynamic vs fixed |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        us = {name: row["mean_seconds_inside"][name] * 1e6 for name in names}
        print(f"| {row['bytes']} | {row['imbalance_ms']:g} | {row['kernel_max_ms']:g} | {us['dynamic']:.1f} "
              f"| {us['fixed']:.1f} | {us['library']:.1f} | {row['speedup_over_library']:.2f} "
              f"| {row['speedup_over_fixed']:.2f} |")
    per_call = totals["control_sent"] / max(1, totals["dynamic_calls"] // SIZE)
    print(f"dynamic leaders, all ranks together: {totals['dynamic_calls'] // SIZE} calls, "
          f"{totals['leader_calls']} node-leader turns, {per_call:.1f} control messages per call, "
          f"{totals['slot_waits']} waits for a slot, {totals['turn_waits']} waits for a turn")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"collective": args.collective, "ranks": SIZE, "nodes": stats["nodes"],
                       "ranks_per_node": stats["ranks_per_node"], "kernel": args.kernel, "scale": args.scale,
                       "reps": args.reps, "library": library, "rows": rows, "dynamic_totals": totals}, out, indent=1)
for comm in variants.values():
    comm.Free()
