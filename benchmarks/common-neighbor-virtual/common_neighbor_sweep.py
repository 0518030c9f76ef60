"""Larger random sweeps of common_neighbor (HiPC 2017) on virtual ranks than the test suite runs.

1. Algorithm 2 alone on ``--pairings`` random friendship graphs (2 to ``--max-ranks``
   ranks, random density and weights): every run must terminate, pairs must be mutual
   and formed in the same iteration, and the heaviest edge must pair in iteration 1.
2. Algorithm 1 (with Algorithm 2) on ``--graphs`` random digraphs with repeated edges and
   self loops (random size, density 0.05-0.9, Θ 1-6), both families, checked by verify.

Prints counts and the largest iteration numbers seen; exits 1 on the first failure.

    python benchmarks/common-neighbor-virtual/common_neighbor_sweep.py --pairings 20000 --graphs 500
"""

from __future__ import annotations

import argparse
import random
import sys
import time

from sparsecoll.pattern import FAMILIES
from sparsecoll.sim.harness import build_patterns, pair_on_virtual_ranks
from sparsecoll.topology import graph_topology


def friendship_graph(rng: random.Random, size: int) -> list:
    """Symmetric random weights (rank -> {friend: weight}) with many ties."""
    density = rng.uniform(0.02, 1.0)
    top = rng.choice((1, 3, 10, 100))
    weights = [dict() for _ in range(size)]
    for a in range(size):
        for b in range(a + 1, size):
            if rng.random() < density:
                weights[a][b] = weights[b][a] = rng.randint(1, top)
    return weights


def check_pairing(weights: list) -> int:
    """Run Algorithm 2, check its guarantees; return the largest iteration count."""
    results = pair_on_virtual_ranks(weights)
    for p, (friend, iteration, _) in enumerate(results):
        if friend is not None and (friend not in weights[p] or results[friend][:2] != (p, iteration)):
            raise AssertionError(f"pairing not mutual at rank {p}: {results} for {weights}")
    edges = [(w, -a, -b, a, b) for a in range(len(weights)) for b, w in weights[a].items() if a < b]
    if edges:
        *_, a, b = max(edges)
        if results[a][:2] != (b, 1):
            raise AssertionError(f"heaviest edge {a}-{b} not paired in iteration 1: {results}")
    return max(r[1] for r in results)


def random_digraph(rng: random.Random, size: int) -> list:
    """Topologies of a random digraph with repeated edges and self loops."""
    density = rng.uniform(0.05, 0.9)
    dests = [[] for _ in range(size)]
    for a in range(size):
        for b in range(size):
            if rng.random() < density:
                dests[a].append(b)
                while rng.random() < 0.2:  # repeated edges
                    dests[a].append(b)
        rng.shuffle(dests[a])
    sources = [[] for _ in range(size)]
    for a, ds in enumerate(dests):
        for b in ds:
            sources[b].append(a)
    return [graph_topology(r, size, sources[r], dests[r]) for r in range(size)]


def main(argv=None) -> int:
    """Run both sweeps and print a summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairings", type=int, default=5000)
    parser.add_argument("--graphs", type=int, default=200)
    parser.add_argument("--max-ranks", type=int, default=64)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)

    start, worst = time.perf_counter(), 0
    for _ in range(args.pairings):
        worst = max(worst, check_pairing(friendship_graph(rng, rng.randint(2, args.max_ranks))))
    print(f"Algorithm 2: {args.pairings} random friendship graphs, all terminated, mutual, heaviest edge "
          f"first; most iterations {worst}; {time.perf_counter() - start:.1f} s", flush=True)

    start, rounds, pairs = time.perf_counter(), 0, 0
    for _ in range(args.graphs):
        topologies = random_digraph(rng, rng.randint(1, args.max_ranks))
        theta = rng.randint(1, 6)
        for family in FAMILIES:
            run = build_patterns(topologies, "common_neighbor", family, {"theta": theta})
            rounds = max(rounds, run.summary()["max_rounds"])
            pairs += run.patterns[0].info["pairs_total"]
    print(f"Algorithm 1: {args.graphs} random digraphs x {len(FAMILIES)} families verified; "
          f"{pairs} pairs; most rounds {rounds}; {time.perf_counter() - start:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
