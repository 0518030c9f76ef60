"""Deterministic counts of ``node_aware`` against ``direct`` and ``common_neighbor`` on virtual ranks.

For each workload (a random graph, a Moore neighborhood, the row-block partition of a
sparse matrix), each scale (``--scales``, ``RANKS/PER_NODE``: ranks filling nodes of
``PER_NODE`` ranks in rank order) and each family, every algorithm's Patterns are built on
virtual ranks (the simulator, :func:`sparsecoll.sim.harness.build_patterns`, which runs each
builder's protocol and proves the Patterns with :func:`sparsecoll.verify.verify`) and
counted per node:

* inter-node messages a node sends (the sends of its ranks to ranks of other nodes), mean
  and max over nodes;
* inter-node blocks (items) a node sends, and those bytes at ``--block-bytes`` per block;
* intra-node messages a node sends (what the gather and scatter steps add);
* node pairs that exchange anything, and the most messages one node pair carries in one step.

No timing: every number is a count of the Patterns. ``--out FILE`` writes the table as
Markdown (the README beside this script holds the current one).
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from pathlib import Path

from sparsecoll.sim.harness import build_patterns
from sparsecoll.topology.specs import generate

ALGORITHMS = ("direct", "common_neighbor", "node_aware")
FAMILIES = ("allgather", "alltoall")


def node_counts(patterns, per_node: int) -> dict:
    """Per-node counts of one algorithm's Patterns (nodes of ``per_node`` ranks in rank order)."""
    nodes = -(-len(patterns) // per_node)
    inter, items, intra = [0] * nodes, [0] * nodes, [0] * nodes
    pair_step = Counter()
    for pattern in patterns:
        node = pattern.rank // per_node
        for s, step in enumerate(pattern.steps):
            for message in step.sends:
                other = message.peer // per_node
                if other != node:
                    inter[node] += 1
                    items[node] += len(message.items)
                    pair_step[(s, node, other)] += 1
                elif message.peer != pattern.rank:
                    intra[node] += 1
    return {"nodes": nodes, "inter_mean": sum(inter) / nodes, "inter_max": max(inter),
            "items_mean": sum(items) / nodes, "items_max": max(items), "intra_mean": sum(intra) / nodes,
            "pairs": len({(a, b) for _, a, b in pair_step}), "pair_step_max": max(pair_step.values(), default=0),
            "steps": max(len(p.steps) for p in patterns)}


def workloads(ranks: int, matrix: str) -> list:
    """``(label, SPEC)`` of the three workloads at ``ranks`` ranks."""
    density = 0.3 if ranks <= 64 else 0.005  # about 5 neighbors at 16 ranks, 20 at 4096
    return [(f"random {density:g}", f"random:density={density:g},seed=1"), ("Moore D=2 R=2", "moore:D=2,R=2"),
            (f"matrix {Path(matrix).stem if matrix else 'dwt_193'}", f"matrix:{matrix}")]


def main(argv=None) -> None:
    """Build, count and print (and with ``--out`` write) the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scales", default="16/4,4096/64",
                        help="comma list of RANKS/PER_NODE (default 16/4,4096/64: 4 nodes of 4, 64 nodes of 64)")
    parser.add_argument("--matrix", default="", help="Matrix Market file of the small scales (default: the bundled "
                        "dwt_193)")
    parser.add_argument("--large-matrix", default="", help="Matrix Market file for scales above 1024 ranks "
                        "(default: --matrix); the README's run used SuiteSparse HB/bayer10 (13436 rows)")
    parser.add_argument("--block-bytes", type=int, default=8, help="bytes per block for the byte column (default 8)")
    parser.add_argument("--algorithms", default=",".join(ALGORITHMS), help="comma list (default: %(default)s)")
    parser.add_argument("--out", help="write the table as Markdown to this file")
    args = parser.parse_args(argv)
    lines = ["| ranks / nodes | workload | family | algorithm | steps | inter-node msgs per node (mean / max) "
             f"| inter-node blocks per node (mean / max) | inter-node KiB per node at {args.block_bytes} B (max) "
             "| intra-node msgs per node (mean) | node pairs | max msgs per node pair and step |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    print(lines[0])
    for scale in args.scales.split(","):
        ranks, per_node = (int(x) for x in scale.split("/"))
        matrix = args.large_matrix if ranks > 1024 and args.large_matrix else args.matrix
        for label, spec in workloads(ranks, matrix):
            adjacency = generate(spec, ranks)
            for family in FAMILIES:
                for name in args.algorithms.split(","):
                    options = {"ranks_per_socket": per_node} if name == "node_aware" else {}
                    start = time.perf_counter()
                    run = build_patterns(adjacency, name, family, options)
                    c = node_counts(run.patterns, per_node)
                    line = (f"| {ranks} / {c['nodes']} | {label} | {family} | {name} | {c['steps']} "
                            f"| {c['inter_mean']:.1f} / {c['inter_max']} | {c['items_mean']:.1f} / {c['items_max']} "
                            f"| {c['items_max'] * args.block_bytes / 1024:.1f} | {c['intra_mean']:.1f} "
                            f"| {c['pairs']} | {c['pair_step_max']} |")
                    lines.append(line)
                    print(line, f"  ({time.perf_counter() - start:.0f} s, verified)", flush=True)
                    if args.out:
                        Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
