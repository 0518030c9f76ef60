"""Verify distance_halving (Sharifian, Sojoodi, Afsahi 2023) Patterns on virtual ranks at scale.

Random graphs (densities 0.05-0.7) and Moore neighborhoods at 512-2048 virtual ranks,
with the paper's placements: 36 ranks per node in 2 sockets (18x2) and 32 per node in 2
sockets (16x2). Every build runs Algorithms 1-3 on virtual ranks (the simulator raises on
a deadlock), :func:`sparsecoll.verify.verify` proves delivery, and every agent is checked
to be the agent of exactly the origin that names it. ``--sweep N`` also runs N small
random graphs (2-40 ranks, random density and L) for termination and agreement.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

from sparsecoll.model.params import Placement
from sparsecoll.sim.harness import build_patterns
from sparsecoll.topology.generators import random_sparse
from sparsecoll.topology.specs import generate


def agreement(patterns) -> int:
    """Raise unless every agent/origin pair agrees; return the number of pairs."""
    pairs = 0
    for p, pattern in enumerate(patterns):
        for t, (a, o) in enumerate(zip(pattern.info["agents"], pattern.info["origins"])):
            if a >= 0:
                if patterns[a].info["origins"][t] != p:
                    raise AssertionError(f"step {t}: rank {p}'s agent {a} has origin {patterns[a].info['origins'][t]}")
                pairs += 1
            if o >= 0 and patterns[o].info["agents"][t] != p:
                raise AssertionError(f"step {t}: rank {p}'s origin {o} has agent {patterns[o].info['agents'][t]}")
    return pairs


def check(adjacency, placement: Placement) -> dict:
    """Build, verify and check agreement; a summary."""
    start = time.perf_counter()
    run = build_patterns(adjacency, "distance_halving", "allgather",
                         {"ranks_per_socket": placement.L, "sockets_per_node": placement.S})
    pairs = agreement(run.patterns)
    steps = max(p.info["halving_steps"] for p in run.patterns)
    return {"ranks": run.size, "verified_messages": run.verified["messages"], "halving_steps": steps,
            "agent_pairs": pairs, "seconds": time.perf_counter() - start}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="512,2048")
    parser.add_argument("--densities", default="0.05,0.1,0.3,0.5,0.7")
    parser.add_argument("--random-max", type=int, default=512, help="largest size for random graphs")
    parser.add_argument("--moore", default="moore:D=2,R=1;moore:D=2,R=2;moore:D=3,R=1")
    parser.add_argument("--placements", default="18x2,16x2")
    parser.add_argument("--sweep", type=int, default=0)
    parser.add_argument("--out", default=None, help="JSON file of the results (rewritten after every build)")
    args = parser.parse_args(argv)
    placements = [Placement.parse(p) for p in args.placements.split(",")]
    records = []
    for n in (int(x) for x in args.sizes.split(",")):
        for placement in placements:
            specs = [s for s in args.moore.split(";") if s]
            if n <= args.random_max:
                specs += [f"random:density={d},seed=1" for d in args.densities.split(",") if d]
            for spec in specs:
                result = check(generate(spec, n), placement)
                print(f"{n:>5} {str(placement):>5} {spec:<26} verified: {result}", flush=True)
                records.append({"placement": str(placement), "spec": spec, **result})
                if args.out:
                    Path(args.out).write_text(json.dumps(records, indent=1) + "\n")
    if args.sweep:
        rng = random.Random(7)
        pairs = 0
        start = time.perf_counter()
        for trial in range(args.sweep):
            n = rng.randint(2, 40)
            L = rng.randint(1, max(1, n // 2))
            pairs += check(random_sparse(n, rng.random(), seed=trial), Placement(L, 1))["agent_pairs"]
        print(f"sweep: {args.sweep} random graphs (2-40 ranks), all terminated, verified and agreed; "
              f"{pairs} agent pairs; {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
