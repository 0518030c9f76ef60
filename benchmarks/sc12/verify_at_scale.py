"""SC12 transformations on virtual ranks at the paper's scale: built by the real code, proved by verify.

Every Pattern set below is built by the algorithm's own (distributed) code on one virtual rank
per process (``sparsecoll.sim``) and checked by ``sparsecoll.verify`` (matching, delivery,
dependency form). Printed and written as JSON: deterministic counts only (no timings but the
build's wall time).

Run: python benchmarks/sc12/verify_at_scale.py [--ranks 1024] [--out benchmarks/sc12/verified.json]
"""

from __future__ import annotations

import argparse
import json
import math
import time

from sparsecoll.pattern import stats
from sparsecoll.sim.harness import build_patterns
from sparsecoll.topology.specs import generate, parse


def run(spec: str, ranks: int, algorithm: str, family: str, options: dict) -> dict:
    """Build and verify; the counts every transformation is judged by."""
    start = time.perf_counter()
    built = build_patterns(generate(parse(spec), ranks), algorithm, family, options)
    per_rank = [stats(p) for p in built.patterns]
    info = per_rank[0]
    row = {"spec": spec, "ranks": ranks, "algorithm": algorithm, "family": family, "options": options,
           "verified": bool(built.verified), "max_sends": max(s["sends"] for s in per_rank),
           "max_steps": max(s["steps"] for s in per_rank), "seconds": round(time.perf_counter() - start, 1)}
    for key in ("balancing_iterations", "colors", "max_degree", "coloring_rounds", "lag"):
        if key in info:
            row[key] = info[key]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    P = args.ranks
    equal = {"L": 1e-6, "o": 1e-6}  # ceil(L/o) = 1: one message of latency per hand-off
    cases = [("hotspot", n, "loggp_tree", fam, opts)
             for n in (16, 64, 256, P) for fam in ("alltoall", "allgather") for opts in ({}, equal)]
    cases += [("sparse-alltoall:p=0.1,seed=1", P, "direct", "alltoall", {"coloring": True}),
              ("sparse-alltoall:p=0.1,seed=1", P, "loggp_tree", "alltoall", {}),
              ("sparse-alltoall:p=0.1,seed=1", P, "loggp_tree", "allgather", {}),
              ("moore:D=2,R=1", P, "loggp_tree", "alltoall", {}),
              ("moore:D=2,R=2", P, "common_neighbor", "alltoall", {"coloring": True}),
              ("hotspot", P, "loggp_tree", "alltoall", {**equal, "coloring": True})]
    rows = []
    for spec, n, algorithm, family, options in cases:
        row = run(spec, n, algorithm, family, options)
        rows.append(row)
        print(json.dumps(row), flush=True)
    hot = [r for r in rows if r["spec"] == "hotspot" and r["algorithm"] == "loggp_tree" and not r["options"]]
    for r in hot:
        r["log2_ranks"] = math.log2(r["ranks"])
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
