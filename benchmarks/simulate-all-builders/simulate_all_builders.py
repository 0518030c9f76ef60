"""Run every registered algorithm's builder on 1024+ virtual ranks and verify what it produces.

Usage::

    python benchmarks/simulate-all-builders/simulate_all_builders.py [--ranks 1024] [--placement 16x2]
        [--case SPEC]... [--algorithms a,b] [--families allgather,alltoall] [--out FILE.json]

Registry-driven: every algorithm of :data:`sparsecoll.algorithms.REGISTRY` that has a
builder runs on every case and family it supports (what it does not support is listed
with its reason, never silently left out), through the simulator's
:func:`sparsecoll.sim.harness.build_patterns` with ``verify`` on. Algorithms that take a
placement (distance halving) get ``--placement`` (default 16x2: 16 ranks per socket, 2
sockets per node). Default cases: a random sparse graph of density 0.1, Moore D=2 R=2
(a 32x32 grid at 1024 ranks), and the 3-D 27-point stencil (the Cartesian algorithms).

Prints, per (case, family, algorithm): build and verify seconds (wall, and this process's
CPU time, which other processes' load does not inflate), steps, maximum sends per
rank, protocol messages and depth, and the peak memory of the process so far; ``--out``
writes the same as JSON after every row (a stopped run keeps what finished).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

from sparsecoll.algorithms import REGISTRY
from sparsecoll.model.params import Placement
from sparsecoll.pattern import FAMILIES
from sparsecoll.sim.harness import build_patterns, placement_options
from sparsecoll.topology.specs import generate

DEFAULT_CASES = ("random:density=0.1,seed=1", "moore:D=2,R=2", "stencil:d=3,n=3,f=-1")


def peak_memory_gib() -> float:
    """Peak resident memory of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20


def run_one(adjacency, topologies, name: str, family: str, placement) -> dict:
    """Build and verify one algorithm for one family; the row to print (or why it cannot run)."""
    row = {"algorithm": name, "family": family}
    try:
        run = build_patterns(topologies, name, family, placement_options(name, placement), verify=True)
    except NotImplementedError as exc:
        row["unsupported"] = str(exc)
        return row
    summary = run.summary()
    row.update(status="verified" if run.verified is not None else "NOT verified",
               build_seconds=run.seconds, verify_seconds=run.info["verify_seconds"],
               build_cpu_seconds=run.info["build_cpu_seconds"], verify_cpu_seconds=run.info["verify_cpu_seconds"],
               steps=summary["max_steps"], max_sends=summary["max_sends"], mean_sends=summary["mean_sends"],
               protocol_messages_max=summary.get("max_messages", 0), depth_max=summary.get("max_depth", 0),
               peak_memory_gib=peak_memory_gib())
    return row


def main(argv=None) -> int:
    """Run the cases (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--placement", default="16x2", help="LxS for the algorithms that take a placement")
    parser.add_argument("--case", action="append", default=None, help="topology SPEC (repeatable)")
    parser.add_argument("--algorithms", default=None, help="comma separated (default: every buildable one)")
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--out", default=None, help="JSON file for the rows")
    args = parser.parse_args(argv)
    if args.ranks < 1:
        parser.error(f"--ranks: expected a positive integer, got {args.ranks}")
    placement = Placement.parse(args.placement)
    buildable = [name for name, entry in REGISTRY.items() if not entry.runs_library]
    names = buildable if args.algorithms is None else [a.strip() for a in args.algorithms.split(",") if a.strip()]
    unknown = [name for name in names if name not in buildable]
    if unknown:
        parser.error(f"--algorithms: {unknown} are not registered algorithms with a builder; known: {buildable}")
    families = [f.strip() for f in args.families.split(",") if f.strip()]
    bad = [f for f in families if f not in FAMILIES]
    if bad:
        parser.error(f"--families: {bad} are not families; known: {list(FAMILIES)}")
    command = "python benchmarks/simulate-all-builders/simulate_all_builders.py " + " ".join(
        sys.argv[1:] if argv is None else argv)
    placed = [n for n in names if placement_options(n, placement)]
    print(f"{args.ranks} virtual ranks; placement {placement} for {placed}", flush=True)
    print("build/verify: wall seconds (CPU seconds of this process)", flush=True)
    print(f"{'case':<28} {'family':<9} {'algorithm':<18} {'build s':>16} {'verify s':>16} {'steps':>5} "
          f"{'max sends':>9} {'p2p msgs':>8} {'depth':>5} {'peak GiB':>8}  status", flush=True)
    rows = []
    for spec in args.case or DEFAULT_CASES:
        start = time.perf_counter()
        adjacency = generate(spec, args.ranks)
        topologies = adjacency.topologies()
        topology_seconds = time.perf_counter() - start
        print(f"{spec:<28} topology: {adjacency.edges()} edges, {topology_seconds:.1f} s"
              + (f", grid {adjacency.dims}" if adjacency.dims else ""), flush=True)
        for family in families:
            for name in names:
                row = {"case": spec, "ranks": args.ranks, "edges": adjacency.edges(),
                       **run_one(adjacency, topologies, name, family, placement)}
                rows.append(row)
                if "unsupported" in row:
                    print(f"{spec:<28} {family:<9} {name:<18} unsupported: {row['unsupported']}", flush=True)
                else:
                    build = f"{row['build_seconds']:.2f} ({row['build_cpu_seconds']:.2f})"
                    check = f"{row['verify_seconds']:.2f} ({row['verify_cpu_seconds']:.2f})"
                    print(f"{spec:<28} {family:<9} {name:<18} {build:>16} {check:>16} "
                          f"{row['steps']:5d} {row['max_sends']:9d} {row['protocol_messages_max']:8d} "
                          f"{row['depth_max']:5d} {row['peak_memory_gib']:8.2f}  {row['status']}", flush=True)
                if args.out:
                    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
                    Path(args.out).write_text(json.dumps({"command": command, "placement": str(placement),
                                                          "rows": rows}, indent=2) + "\n")
        topologies = adjacency = None
    failed = [r for r in rows if r.get("status") == "NOT verified"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
