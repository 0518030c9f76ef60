"""Deterministic counts of ``distance_halving`` on virtual ranks, against eqs. 1-8, direct and common_neighbor.

Sharifian, Sojoodi, Afsahi (2023): §V eqs. 1-3 (messages and sizes per rank) and 4-8
(Hockney times) are :mod:`sparsecoll.model.paper2023`; the algorithm is
:mod:`sparsecoll.algorithms.distance_halving`. Every build here is verified
(:func:`sparsecoll.verify.verify`), and every distance-halving build is also checked for
agent/origin agreement (:func:`distance_halving_verify.agreement`).

Parts (``--parts``, comma separated, run in the order given):

* ``worked``: the paper's worked example (2000 ranks, 50 nodes x 40 cores, 2 sockets,
  density 0.3): what the equations give, what the algorithm does, the difference;
* ``model``: eqs. 1-3 against the simulator for random graphs at several ``n`` and ``L``;
* ``random``: the paper's random-graph configuration (2160 ranks on 60 nodes of 36
  ranks in 2 sockets, Fig. 4-5), per density;
* ``moore``: the paper's Moore configuration (2048 ranks on 64 nodes of 32 in 2
  sockets, Fig. 6), per (D, R).

For ``random`` and ``moore``: per-rank off-socket, intra-socket and off-node messages
(mean and max), items (blocks) sent per rank and the maximum bytes per rank at each block
size, for each algorithm of ``--algorithms``; and the predicted speedups over ``direct``
(MPI's own one-step pattern, i.e. the default Open MPI algorithm) of the per-step
evaluation of the Patterns (:func:`sparsecoll.model.evaluate.predict`: single port,
each node's network injections serialized) and, for random graphs, of eqs. 4-8.

``--out DIR`` writes one JSON file per part (rewritten after every configuration, so a
run stopped early keeps what finished). The agent negotiation is O(n^2) messages (the
paper's §VII-D), so a 2000-rank random graph takes minutes on virtual ranks.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from distance_halving_verify import agreement  # the script beside this one (Python finds it in the same folder)
from sparsecoll.algorithms import REGISTRY
from sparsecoll.model import paper2023
from sparsecoll.model.evaluate import CompiledPatterns, predict
from sparsecoll.model.params import Machine, Placement
from sparsecoll.pattern import stats
from sparsecoll.sim.harness import build_patterns
from sparsecoll.topology.specs import generate

#: Hockney parameters for the predictions. ASSUMED, not from the paper: the paper fits
#: its Fig. 2 to ping-pong tests on Niagara (EDR InfiniBand, Dragonfly+) but publishes
#: no alpha or beta. EDR-like values: 1.5 us + 1/(12 GB/s) between nodes, 0.5 us +
#: 1/(20 GB/s) within a node.
NETWORK_ALPHA, NETWORK_BETA = 1.5e-6, 1 / 12e9
MACHINE = Machine("hockney", {"network": {"alpha": NETWORK_ALPHA, "beta": NETWORK_BETA},
                              "node": {"alpha": 0.5e-6, "beta": 1 / 20e9}},
                  "ASSUMED EDR-like (the paper publishes no parameters): network 1.5 us + 1/(12 GB/s), "
                  "node 0.5 us + 1/(20 GB/s)")
#: Block sizes: 32 B (the paper's random-graph peak), 4 KiB, 256 KiB, 4 MiB (Fig. 6's small,
#: medium, large).
SIZES = (32, 4096, 262144, 4194304)


class Recorder:
    """Collects JSON records per part and rewrites ``DIR/<part>.json`` after each one."""

    def __init__(self, out_dir):
        self.out_dir = Path(out_dir) if out_dir else None
        self.parts: dict = {}
        if self.out_dir:
            self.out_dir.mkdir(parents=True, exist_ok=True)

    def add(self, part: str, record: dict) -> None:
        """Append ``record`` to ``part`` and save the part."""
        self.parts.setdefault(part, []).append(record)
        if self.out_dir:
            path = self.out_dir / f"{part}.json"
            path.write_text(json.dumps({"machine": MACHINE.source, "records": self.parts[part]}, indent=1) + "\n")


def per_rank(patterns, placement: Placement) -> dict:
    """Mean and max over ranks of off-socket / intra-socket / off-node sends, items, halving sends."""
    rows = []
    for p in patterns:
        sends = [m for s in p.steps for m in s.sends]
        off = sum(1 for m in sends if placement.socket(m.peer) != placement.socket(p.rank))
        off_node = sum(1 for m in sends if placement.node(m.peer) != placement.node(p.rank))
        halving_steps = p.steps[:-1] if p.info.get("halving_steps") is not None else ()
        halving = sum(len(s.sends) for s in halving_steps)
        halving_items = sum(len(m.items) for s in halving_steps for m in s.sends)
        items = sum(len(m.items) for m in sends)
        rows.append({"off_socket": off, "intra_socket": len(sends) - off, "off_node": off_node,
                     "sends": len(sends), "send_items": items, "halving_sends": halving,
                     "final_sends": len(sends) - halving, "final_items": items - halving_items})
    out = {}
    for name in rows[0]:
        values = [r[name] for r in rows]
        out[f"mean_{name}"] = sum(values) / len(values)
        out[f"max_{name}"] = max(values)
    return out


def run(spec: str, n: int, algorithm: str, placement: Placement):
    """Build (verify, and for distance halving check agreement) on ``n`` virtual ranks; None if unsupported."""
    options = {}
    if algorithm == "distance_halving":
        options = {"ranks_per_socket": placement.L, "sockets_per_node": placement.S}
    start = time.perf_counter()
    try:
        result = build_patterns(generate(spec, n), algorithm, "allgather", options)
    except NotImplementedError as exc:
        print(f"    {algorithm}: not supported ({exc})", flush=True)
        return None
    if algorithm == "distance_halving":
        result.info["agent_pairs"] = agreement(result.patterns)
    result.info["wall"] = time.perf_counter() - start
    return result


def build_cost(result) -> dict:
    """What the build itself cost on virtual ranks (seconds, protocol messages)."""
    return {"build_seconds": result.seconds, "verify_seconds": result.info.get("verify_seconds"),
            "wall_seconds": result.info["wall"],
            "verified_messages": result.verified["messages"] if result.verified else None,
            "mean_protocol_messages": sum(c["messages"] for c in result.counters) / result.size,
            "max_protocol_depth": max(c["depth"] for c in result.counters),
            **({"agent_pairs": result.info["agent_pairs"]} if "agent_pairs" in result.info else {})}


def dh_means(result) -> dict:
    """Mean halving steps and agents found per rank of a distance-halving build."""
    info = [p.info for p in result.patterns]
    return {"mean_halving_steps": sum(i["halving_steps"] for i in info) / len(info),
            "mean_agents_found": sum(i["agents_found"] for i in info) / len(info),
            "ranks_with_agent": info[0]["ranks_with_agent"]}


def worked_example(recorder: Recorder) -> None:
    """The paper's example: equations vs the real algorithm."""
    n, L, S, delta, spec = 2000, 20, 2, 0.3, "random:density=0.3,seed=1"
    eq = paper2023.worked_example()
    print("== worked example (§V-A): n=2000, 50 nodes x 40 cores, 2 sockets (L=20, S=2), density 0.3", flush=True)
    print("  paper's text:  7 off-socket + 16 intra-socket = 23 messages per rank vs 600 naive")
    print(f"  eqs. as printed: halving steps ceil(log2(n/L))+1 = {eq['halving_steps']}, "
          f"eq.1 n_off = {eq['n_off']:.2f}, eq.2 n_in = {eq['n_in']:.2f}, "
          f"total {eq['n_off'] + eq['n_in']:.2f}; naive delta*n = {eq['naive_messages']:.0f}; "
          f"eq.3 m_in = {eq['m_in'] / 4:.2f} blocks", flush=True)
    placement = Placement(L, S)
    result = run(spec, n, "distance_halving", placement)
    counts = per_rank(result.patterns, placement)
    means = dh_means(result)
    total = counts["mean_halving_sends"] + counts["mean_final_sends"]
    print(f"  simulator ({result.info['wall']:.0f} s): halving steps {means['mean_halving_steps']:.2f}, agents found "
          f"{means['mean_agents_found']:.2f} per rank; sends per rank: halving {counts['mean_halving_sends']:.2f}, "
          f"final {counts['mean_final_sends']:.2f}, total {total:.2f} (max {counts['max_sends']})")
    print(f"    by placement: off-socket {counts['mean_off_socket']:.2f} (max {counts['max_off_socket']}), "
          f"intra-socket {counts['mean_intra_socket']:.2f} (max {counts['max_intra_socket']}); "
          f"blocks per final message {counts['mean_final_items'] / max(counts['mean_final_sends'], 1e-9):.2f}")
    direct = run(spec, n, "direct", placement)
    direct_counts = per_rank(direct.patterns, placement)
    print(f"    direct: {direct_counts['mean_sends']:.1f} sends per rank "
          f"(off-socket {direct_counts['mean_off_socket']:.1f}, intra-socket {direct_counts['mean_intra_socket']:.1f})")
    difference = {"eq1_minus_halving_sends": eq["n_off"] - counts["mean_halving_sends"],
                  "eq2_minus_final_sends": eq["n_in"] - counts["mean_final_sends"],
                  "eq1_minus_off_socket": eq["n_off"] - counts["mean_off_socket"],
                  "eq2_minus_intra_socket": eq["n_in"] - counts["mean_intra_socket"],
                  "paper_23_minus_simulated_total": 23 - total}
    print("  difference: " + ", ".join(f"{k} {v:+.2f}" for k, v in difference.items()), flush=True)
    recorder.add("worked", {"n": n, "L": L, "S": S, "delta": delta, "spec": spec,
                            "paper": {"off_socket": 7, "intra_socket": 16, "total": 23, "naive": 600},
                            "equations": eq, "simulator": {**counts, **means, **build_cost(result)},
                            "direct": {**direct_counts, **build_cost(direct)}, "difference": difference})


def model_vs_simulator(recorder: Recorder, sizes, Ls, densities, S: int = 2) -> None:
    """Eqs. 1-3 against the simulator's counts."""
    print("== eqs. 1-3 vs simulator (random graphs, seed 1): per rank means", flush=True)
    print(f"  {'n':>5} {'L':>3} {'delta':>5} | {'steps':>5} {'eq1':>6} {'halv':>6} {'offsk':>6} | {'eq2':>6} "
          f"{'final':>6} {'intra':>6} | {'eq3':>6} {'blk/msg':>7} | {'agents':>6} {'sec':>5}", flush=True)
    for n in sizes:
        for L in Ls:
            for delta in densities:
                placement = Placement(L, S)
                result = run(f"random:density={delta},seed=1", n, "distance_halving", placement)
                counts = per_rank(result.patterns, placement)
                means = dh_means(result)
                m_in = paper2023.m_in(n, L, delta, 1.0)
                per_msg = counts["mean_final_items"] / max(counts["mean_final_sends"], 1e-9)
                eq1, eq2 = paper2023.n_off(n, L, delta), paper2023.n_in(n, L, delta)
                print(f"  {n:>5} {L:>3} {delta:>5} | {means['mean_halving_steps']:>5.2f} {eq1:>6.2f} "
                      f"{counts['mean_halving_sends']:>6.2f} {counts['mean_off_socket']:>6.2f} | {eq2:>6.2f} "
                      f"{counts['mean_final_sends']:>6.2f} {counts['mean_intra_socket']:>6.2f} | {m_in:>6.2f} "
                      f"{per_msg:>7.2f} | {means['mean_agents_found']:>6.2f} {result.info['wall']:>5.0f}", flush=True)
                recorder.add("model", {"n": n, "L": L, "S": S, "delta": delta,
                                       "eq1_n_off": eq1, "eq2_n_in": eq2, "eq3_m_in_blocks": m_in,
                                       "halving_steps_eq": paper2023.halving_steps(n, L),
                                       "halvings": paper2023.halvings(n, L),
                                       "blocks_per_final_message": per_msg,
                                       **counts, **means, **build_cost(result)})


def table(recorder: Recorder, part: str, config: str, n: int, placement: Placement, specs, measured: dict,
          algorithms) -> None:
    """Counts and predicted speedups for one of the paper's configurations."""
    algorithms = [a for a in algorithms if a in REGISTRY]
    print(f"== {config}: {n} ranks, placement {placement} (L ranks per socket x sockets per node)", flush=True)
    print(f"  {'topology':<26} {'algorithm':<17} {'off-sock':>9} {'max':>5} {'intra':>7} {'max':>5} "
          f"{'maxblk':>7} {'steps':>5} {'build s':>8} | predicted speedup over direct at "
          + ", ".join(f"{m} B" for m in SIZES), flush=True)
    for spec in specs:
        direct = run(spec, n, "direct", placement)
        direct_times = predict(CompiledPatterns.from_patterns(direct.patterns), MACHINE, SIZES, placement, nic=True)
        for algorithm in algorithms:
            result = direct if algorithm == "direct" else run(spec, n, algorithm, placement)
            if result is None:
                continue
            times = predict(CompiledPatterns.from_patterns(result.patterns), MACHINE, SIZES, placement, nic=True)
            counts = per_rank(result.patterns, placement)
            speedups = {m: direct_times[m] / times[m] for m in SIZES}
            steps = max(stats(p)["steps"] for p in result.patterns)
            print(f"  {spec:<26} {algorithm:<17} {counts['mean_off_socket']:>9.2f} {counts['max_off_socket']:>5} "
                  f"{counts['mean_intra_socket']:>7.2f} {counts['max_intra_socket']:>5} {counts['max_send_items']:>7} "
                  f"{steps:>5} {result.info['wall']:>8.0f} | " + ", ".join(f"{s:.2f}" for s in speedups.values()),
                  flush=True)
            record = {"config": config, "n": n, "placement": str(placement), "spec": spec, "algorithm": algorithm,
                      **counts, "max_steps": steps,
                      "max_bytes_per_rank": {m: counts["max_send_items"] * m for m in SIZES},
                      "predicted_seconds": times, "predicted_speedup_over_direct": speedups,
                      **build_cost(result)}
            if algorithm == "distance_halving":
                record.update(dh_means(result))
            if spec.startswith("random"):
                delta = float(spec.split("density=")[1].split(",")[0])
                record["eqs_4_8_speedup_dh_over_naive"] = {
                    m: paper2023.t_naive(n, placement.L, placement.S, delta, m, NETWORK_ALPHA, NETWORK_BETA)
                    / paper2023.t_dh(n, placement.L, placement.S, delta, m, NETWORK_ALPHA, NETWORK_BETA)
                    for m in SIZES}
            if spec in measured:
                record["paper_measured"] = measured[spec]
            recorder.add(part, record)
            del result
        if spec.startswith("random"):
            delta = float(spec.split("density=")[1].split(",")[0])
            eq = [paper2023.t_naive(n, placement.L, placement.S, delta, m, NETWORK_ALPHA, NETWORK_BETA)
                  / paper2023.t_dh(n, placement.L, placement.S, delta, m, NETWORK_ALPHA, NETWORK_BETA) for m in SIZES]
            print(f"  {'':<26} {'eqs. 4-8 (DH/naive)':<17} {'':>56} | " + ", ".join(f"{x:.2f}" for x in eq), flush=True)
        if spec in measured:
            print(f"  {'':<26} {'paper measured':<17} {'':>56} | {measured[spec]}", flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default="model,moore,worked,random",
                        help="comma separated, run in this order: worked, model, random, moore")
    parser.add_argument("--algorithms", default="distance_halving,direct,common_neighbor",
                        help="algorithms of the random and moore tables (direct is always built as the baseline)")
    parser.add_argument("--densities", default="0.05,0.1,0.3,0.5,0.7", help="densities of the random table")
    parser.add_argument("--random-ranks", type=int, default=2160)
    parser.add_argument("--random-placement", default="18x2", help="36 ranks per node in 2 sockets (paper)")
    parser.add_argument("--moore-ranks", type=int, default=2048)
    parser.add_argument("--moore-placement", default="16x2", help="32 ranks per node in 2 sockets (paper)")
    parser.add_argument("--model-sizes", default="512,1024")
    parser.add_argument("--model-L", default="8,18,32")
    parser.add_argument("--model-densities", default="0.05,0.3")
    parser.add_argument("--moore", default="moore:D=2,R=1;moore:D=2,R=2;moore:D=3,R=1", help="SPECs, ';' separated")
    parser.add_argument("--out", default=None, help="directory for one JSON file per part")
    args = parser.parse_args(argv)
    recorder = Recorder(args.out)
    algorithms = args.algorithms.split(",")
    print(f"predictions: Hockney, {MACHINE.source}", flush=True)
    for part in args.parts.split(","):
        if part == "model":
            model_vs_simulator(recorder, [int(x) for x in args.model_sizes.split(",")],
                               [int(x) for x in args.model_L.split(",")],
                               [float(x) for x in args.model_densities.split(",")])
        elif part == "moore":
            moore = args.moore.split(";")
            table(recorder, "moore", "Moore neighborhoods (Fig. 6)", args.moore_ranks,
                  Placement.parse(args.moore_placement), moore,
                  {s: "paper: up to 14x over Open MPI over its Moore set (2048 ranks, Fig. 6a, 4 KB)" for s in moore},
                  algorithms)
        elif part == "worked":
            worked_example(recorder)
        elif part == "random":
            densities = [float(x) for x in args.densities.split(",")]
            measured = {"random:density=0.7,seed=1": "paper: up to ~30x over Open MPI at 32 B (2160 ranks, Fig. 5)"}
            table(recorder, "random", "random sparse graphs (Fig. 4-5)", args.random_ranks,
                  Placement.parse(args.random_placement), [f"random:density={d},seed=1" for d in densities],
                  measured, algorithms)
        else:
            parser.error(f"--parts: unknown part {part!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
