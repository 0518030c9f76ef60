"""Deterministic counts of ``distance_halving`` on virtual ranks, against eqs. 1-8 and direct.

Sharifian, Sojoodi, Afsahi (2023): §V eqs. 1-3 (messages and sizes per rank) and 4-8
(Hockney times) are :mod:`sparsecoll.model.paper2023`; the algorithm is
:mod:`sparsecoll.algorithms.distance_halving`. Every build here is verified.

Parts (``--parts``, comma separated, run in this order: model, moore, worked, random):

* ``worked``: the paper's worked example (2000 ranks, 50 nodes x 40 cores, 2 sockets,
  density 0.3): what the equations give, what the algorithm does, the difference;
* ``model``: eqs. 1-3 against the simulator for random graphs at several ``n`` and ``L``;
* ``table``: per-rank off-socket and intra-socket messages and max bytes per rank for
  ``distance_halving``, ``direct`` and ``common_neighbor`` (when registered) on the
  paper's configurations (2160 ranks on 60 nodes of 36 ranks in 2 sockets, random graphs;
  Moore with 2048 ranks on 64 nodes of 32 in 2 sockets), and the predicted speedups of
  eqs. 4-8 and of the per-step evaluation of the Patterns (single port, each node's
  network injections serialized) next to the paper's measured ones.

The agent negotiation is O(n^2) messages (the paper's §VII-D), so a 2000-rank random
graph takes minutes on virtual ranks.
"""

from __future__ import annotations

import argparse
import sys
import time

from sparsecoll.algorithms import REGISTRY
from sparsecoll.model import paper2023
from sparsecoll.model.evaluate import CompiledPatterns, predict
from sparsecoll.model.params import Machine, Placement
from sparsecoll.pattern import stats
from sparsecoll.sim.harness import build_patterns
from sparsecoll.topology.generators import generate

#: Hockney parameters for the predictions (EDR InfiniBand-like; the paper's Niagara
#: ping-pong fit is not published): alpha 1.5 us off node, 0.5 us on node, 12 GB/s and 20 GB/s.
MACHINE = Machine("hockney", {"network": {"alpha": 1.5e-6, "beta": 1 / 12e9},
                              "node": {"alpha": 0.5e-6, "beta": 1 / 20e9}},
                  "assumed EDR-like: network 1.5 us + 1/12 GB/s, node 0.5 us + 1/20 GB/s")
SIZES = (32, 4096, 262144)


def per_rank(patterns, placement: Placement) -> dict:
    """Mean and max over ranks of off-socket / intra-socket sends, send items, halving sends."""
    rows = []
    for p in patterns:
        off = sum(1 for s in p.steps for m in s.sends if placement.socket(m.peer) != placement.socket(p.rank))
        total = stats(p)["sends"]
        halving = sum(len(s.sends) for s in p.steps[:-1]) if p.info.get("halving_steps") is not None else 0
        final = total - halving
        rows.append((off, total - off, stats(p)["send_items"], halving, final,
                     stats(p)["send_items"] - sum(len(m.items) for s in p.steps[:-1] for m in s.sends)))
    n = len(rows)
    cols = ("off_socket", "intra_socket", "send_items", "halving_sends", "final_sends", "final_items")
    out = {}
    for k, name in enumerate(cols):
        values = [r[k] for r in rows]
        out[f"mean_{name}"] = sum(values) / n
        out[f"max_{name}"] = max(values)
    return out


def run(spec: str, n: int, algorithm: str, placement: Placement):
    """Build (and verify) ``algorithm`` on ``n`` virtual ranks; None if unsupported."""
    options = {}
    if algorithm == "distance_halving":
        options = {"ranks_per_socket": placement.L, "sockets_per_node": placement.S}
    start = time.perf_counter()
    try:
        result = build_patterns(generate(spec, n), algorithm, "allgather", options)
    except NotImplementedError as exc:
        print(f"    {algorithm}: not supported ({exc})")
        return None
    result.info["wall"] = time.perf_counter() - start
    return result


def worked_example() -> None:
    """The paper's example: equations vs the real algorithm."""
    eq = paper2023.worked_example()
    print("== worked example (§V-A): n=2000, 50 nodes x 40 cores, 2 sockets (L=20, S=2), density 0.3")
    print("  paper's text:  7 off-socket + 16 intra-socket = 23 messages per rank vs 600 naive")
    print(f"  eqs. as printed: halving steps ceil(log2(n/L))+1 = {eq['halving_steps']}, "
          f"eq.1 n_off = {eq['n_off']:.2f}, eq.2 n_in = {eq['n_in']:.2f}, "
          f"total {eq['n_off'] + eq['n_in']:.2f}; naive delta*n = {eq['naive_messages']:.0f}; "
          f"eq.3 m_in = {eq['m_in'] / 4:.2f} blocks")
    placement = Placement(20, 2)
    result = run("random:density=0.3,seed=1", 2000, "distance_halving", placement)
    counts = per_rank(result.patterns, placement)
    info = [p.info for p in result.patterns]
    mean_steps = sum(i["halving_steps"] for i in info) / len(info)
    mean_agents = sum(i["agents_found"] for i in info) / len(info)
    print(f"  simulator ({result.info['wall']:.0f} s): halving steps {mean_steps:.2f}, agents found "
          f"{mean_agents:.2f} per rank; sends per rank: halving {counts['mean_halving_sends']:.2f}, "
          f"final {counts['mean_final_sends']:.2f}, total {counts['mean_halving_sends'] + counts['mean_final_sends']:.2f}"
          f" (max {max(stats(p)['sends'] for p in result.patterns)})")
    print(f"    by placement: off-socket {counts['mean_off_socket']:.2f} (max {counts['max_off_socket']}), "
          f"intra-socket {counts['mean_intra_socket']:.2f} (max {counts['max_intra_socket']}); "
          f"blocks per final message {counts['mean_final_items'] / max(counts['mean_final_sends'], 1e-9):.2f}")
    direct = run("random:density=0.3,seed=1", 2000, "direct", placement)
    print(f"    direct: {sum(stats(p)['sends'] for p in direct.patterns) / 2000:.1f} sends per rank")
    print(f"  difference: eq.1 - halving sends = {eq['n_off'] - counts['mean_halving_sends']:+.2f}, "
          f"eq.2 - final sends = {eq['n_in'] - counts['mean_final_sends']:+.2f}, "
          f"paper's 23 - simulated total = {23 - counts['mean_halving_sends'] - counts['mean_final_sends']:+.2f}")


def model_vs_simulator(sizes, Ls, densities) -> None:
    """Eqs. 1-3 against the simulator's counts."""
    print("== eqs. 1-3 vs simulator (random graphs, seed 1): per rank means")
    print(f"  {'n':>5} {'L':>3} {'delta':>5} | {'steps':>5} {'eq1':>6} {'halv':>6} | {'eq2':>6} {'final':>6} | "
          f"{'eq3':>6} {'blk/msg':>7} | {'agents':>6} {'sec':>5}")
    for n in sizes:
        for L in Ls:
            for delta in densities:
                result = run(f"random:density={delta},seed=1", n, "distance_halving", Placement(L, 2))
                counts = per_rank(result.patterns, Placement(L, 2))
                info = [p.info for p in result.patterns]
                steps = sum(i["halving_steps"] for i in info) / n
                agents = sum(i["agents_found"] for i in info) / n
                m_in = paper2023.m_in(n, L, delta, 1.0)
                per_msg = counts["mean_final_items"] / max(counts["mean_final_sends"], 1e-9)
                print(f"  {n:>5} {L:>3} {delta:>5} | {steps:>5.2f} {paper2023.n_off(n, L, delta):>6.2f} "
                      f"{counts['mean_halving_sends']:>6.2f} | {paper2023.n_in(n, L, delta):>6.2f} "
                      f"{counts['mean_final_sends']:>6.2f} | {m_in:>6.2f} {per_msg:>7.2f} | {agents:>6.2f} "
                      f"{result.info['wall']:>5.0f}", flush=True)


def table(config: str, n: int, placement: Placement, specs, measured: dict) -> None:
    """Counts and predicted speedups for one of the paper's configurations."""
    algorithms = ["distance_halving", "direct"] + (["common_neighbor"] if "common_neighbor" in REGISTRY else [])
    if "common_neighbor" not in REGISTRY:
        print("  (common_neighbor is not registered in this tree: skipped)")
    print(f"== {config}: {n} ranks, placement {placement} (L ranks per socket x sockets per node)")
    print(f"  {'topology':<26} {'algorithm':<17} {'off-sock':>9} {'max':>5} {'intra':>7} {'max':>5} "
          f"{'maxblk':>7} {'steps':>5} | predicted speedup over direct at " + ", ".join(f"{m} B" for m in SIZES))
    for spec in specs:
        results = {a: run(spec, n, a, placement) for a in algorithms}
        compiled = {a: CompiledPatterns.from_patterns(r.patterns) for a, r in results.items() if r is not None}
        times = {a: predict(c, MACHINE, SIZES, placement, nic=True) for a, c in compiled.items()}
        for a, r in results.items():
            if r is None:
                continue
            c = per_rank(r.patterns, placement)
            speedups = ", ".join(f"{times['direct'][m] / times[a][m]:.2f}" for m in SIZES)
            steps = max(stats(p)["steps"] for p in r.patterns)
            print(f"  {spec:<26} {a:<17} {c['mean_off_socket']:>9.2f} {c['max_off_socket']:>5} "
                  f"{c['mean_intra_socket']:>7.2f} {c['max_intra_socket']:>5} {c['max_send_items']:>7} "
                  f"{steps:>5} | {speedups}", flush=True)
        if spec.startswith("random"):
            delta = float(spec.split("density=")[1].split(",")[0])
            eq = [paper2023.t_naive(n, placement.L, placement.S, delta, m, 1.5e-6, 1 / 12e9)
                  / paper2023.t_dh(n, placement.L, placement.S, delta, m, 1.5e-6, 1 / 12e9) for m in SIZES]
            print(f"  {'':<26} {'eqs. 4-8':<17} {'':>47} | " + ", ".join(f"{x:.2f}" for x in eq))
        if spec in measured:
            print(f"  {'':<26} {'paper measured':<17} {'':>47} | {measured[spec]}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default="model,moore,worked,random",
                        help="model, moore, worked, random (in this order)")
    parser.add_argument("--densities", default="0.05,0.3,0.7", help="densities of the 2160-rank table")
    parser.add_argument("--model-sizes", default="512,1024")
    parser.add_argument("--model-L", default="8,18,32")
    parser.add_argument("--model-densities", default="0.05,0.3")
    parser.add_argument("--moore", default="moore:D=2,R=1;moore:D=2,R=2;moore:D=3,R=1", help="SPECs, ';' separated")
    args = parser.parse_args(argv)
    parts = args.parts.split(",")
    print(f"predictions: Hockney, {MACHINE.source}", flush=True)
    if "model" in parts:
        model_vs_simulator([int(x) for x in args.model_sizes.split(",")], [int(x) for x in args.model_L.split(",")],
                           [float(x) for x in args.model_densities.split(",")])
    if "moore" in parts:
        moore = args.moore.split(";")
        table("Moore neighborhoods (Fig. 6)", 2048, Placement(16, 2), moore,
              {moore[-1]: "paper: up to 14x over Open MPI (2048 ranks, Fig. 6a)"})
    if "worked" in parts:
        worked_example()
    if "random" in parts:
        densities = [float(x) for x in args.densities.split(",")]
        measured = {"random:density=0.7,seed=1": "paper: up to ~30x over Open MPI at 32 B (2160 ranks, Fig. 5)"}
        table("random sparse graphs (Fig. 4-5)", 2160, Placement(18, 2),
              [f"random:density={d},seed=1" for d in densities], measured)
    return 0


if __name__ == "__main__":
    sys.exit(main())
