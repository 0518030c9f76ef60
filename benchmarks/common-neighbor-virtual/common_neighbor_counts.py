"""Messages per rank of ``direct`` and ``common_neighbor`` (HiPC 2017) on virtual ranks.

For every topology SPEC the two algorithms are built by the simulator (the same builder code
as on MPI, Phase 1 included) and the script prints, per topology: the neighbor count, the
maximum and mean messages sent per rank by each, their ratios, steps, friend pairs, the
Phase-1 protocol cost (iterations of Algorithms 1 and 2, point-to-point messages) and the
simulator's wall time.

    python benchmarks/common-neighbor-virtual/common_neighbor_counts.py --ranks 1024 \\
        --specs random:density=0.05,random:density=0.1 --moore-ranks 4096 --moore 2:1,2:2

``--verify`` also runs :func:`sparsecoll.verify.verify` on the common_neighbor Patterns.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from sparsecoll.sim.harness import build_patterns
from sparsecoll.topology.specs import generate

RANDOM_DEFAULT = "random:density=0.05,random:density=0.1,random:density=0.2"
MOORE_DEFAULT = "2:1,2:2,2:3,3:1,3:2,3:3,4:1,4:2,4:3"


def row(spec: str, ranks: int, family: str, theta: int, verify: bool) -> dict:
    """Build direct and common_neighbor on ``ranks`` virtual ranks; return the numbers."""
    adjacency = generate(spec, ranks)
    topologies = adjacency.topologies()
    direct = build_patterns(topologies, "direct", family, verify=False).summary()
    start = time.perf_counter()
    run = build_patterns(topologies, "common_neighbor", family, {"theta": theta}, verify=verify)
    seconds = time.perf_counter() - start
    combined = run.summary()
    info = run.patterns[0].info
    return {
        "topology": spec, "ranks": ranks, "family": family, "theta": theta,
        "max_neighbors": max(len(set(d)) for d in adjacency.destinations),
        "direct_max": direct["max_sends"], "direct_mean": direct["mean_sends"],
        "cn_max": combined["max_sends"], "cn_mean": combined["mean_sends"],
        "ratio_max": combined["max_sends"] / max(direct["max_sends"], 1),
        "ratio_mean": combined["mean_sends"] / max(direct["mean_sends"], 1e-300),
        "cn_steps": combined["max_steps"], "pairs": info["pairs_total"], "degenerate": info["degenerate"],
        "max_friends": combined["max_friends"], "max_alg1_iterations": combined["max_alg1_iterations"],
        "max_alg2_iterations": combined["max_alg2_iterations"],
        "max_phase1_messages": combined["max_phase1_messages"],
        "total_phase1_messages": int(round(combined["mean_phase1_messages"] * ranks)),
        "verified": run.verified is not None, "seconds": seconds,
    }


HEADER = (f"{'topology':28} {'ranks':>5} {'nbrs':>5} {'direct max/mean':>16} {'cn max/mean':>14} "
          f"{'ratio max':>9} {'mean':>5} {'steps':>5} {'pairs':>6} {'alg1':>4} {'alg2':>4} "
          f"{'p1 msg max':>10} {'total':>9} {'sim s':>7}")


def show(r: dict) -> str:
    """One table line."""
    return (f"{r['topology']:28} {r['ranks']:5d} {r['max_neighbors']:5d} "
            f"{r['direct_max']:7d} / {r['direct_mean']:6.1f} {r['cn_max']:5d} / {r['cn_mean']:6.1f} "
            f"{r['ratio_max']:9.2f} {r['ratio_mean']:5.2f} {r['cn_steps']:5d} {r['pairs']:6d} "
            f"{r['max_alg1_iterations']:4d} {r['max_alg2_iterations']:4d} {r['max_phase1_messages']:10d} "
            f"{r['total_phase1_messages']:9d} {r['seconds']:7.1f}")


def main(argv=None) -> int:
    """Print the table (and write JSON with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=1024, help="virtual ranks for --specs")
    parser.add_argument("--specs", default=RANDOM_DEFAULT, help="topology SPECs, comma separated ('' for none)")
    parser.add_argument("--moore-ranks", type=int, default=4096, help="virtual ranks for --moore")
    parser.add_argument("--moore", default=MOORE_DEFAULT, help="D:R pairs, comma separated ('' for none)")
    parser.add_argument("--family", default="allgather", choices=("allgather", "alltoall"))
    parser.add_argument("--theta", type=int, default=4)
    parser.add_argument("--verify", action="store_true")
    parser.add_argument("--json", default=None, help="append one JSON line per topology to this file")
    args = parser.parse_args(argv)

    jobs = [(spec, args.ranks) for spec in filter(None, _split_specs(args.specs))]
    for pair in filter(None, args.moore.split(",")):
        D, R = pair.split(":")
        jobs.append((f"moore:D={int(D)},R={int(R)}", args.moore_ranks))
    print(HEADER, flush=True)
    for spec, ranks in jobs:
        r = row(spec, ranks, args.family, args.theta, args.verify)
        print(show(r), flush=True)
        if args.json:
            with open(args.json, "a") as out:
                out.write(json.dumps(r) + "\n")
    return 0


def _split_specs(text: str) -> list:
    """Split 'a:x=1,y=2,b:z=3' at the commas that start a new SPEC (a name followed by ':')."""
    specs = []
    for part in text.split(","):
        if ":" in part or not specs:
            specs.append(part)
        else:
            specs[-1] += "," + part
    return specs


if __name__ == "__main__":
    sys.exit(main())
