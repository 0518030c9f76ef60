"""Markdown tables from the JSON that ``distance_halving_counts.py`` and ``distance_halving_verify.py`` write.

Reads every ``*.json`` under a results directory (``worked``, ``model``, ``random``,
``moore`` parts of the counts script; lists of records from the verify script) and prints
one markdown section per kind. Nothing is computed here beyond formatting and the
differences between columns that are both in the JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

SIZE_LABELS = {"32": "32 B", "4096": "4 KiB", "262144": "256 KiB", "4194304": "4 MiB"}


def load(root: Path) -> dict:
    """``{kind: [records]}`` with kind one of worked, model, random, moore, verify."""
    kinds: dict = {}
    for path in sorted(root.rglob("*.json")):
        data = json.loads(path.read_text())
        if isinstance(data, list):
            kinds.setdefault("verify", []).extend({**r, "file": str(path.relative_to(root))} for r in data)
        else:
            kinds.setdefault(path.stem, []).extend({**r, "file": str(path.relative_to(root))} for r in data["records"])
    return kinds


def worked(records) -> list:
    """The worked example: paper, equations, simulator, direct."""
    lines = ["## Worked example (§V-A): 2000 ranks, L = 20, S = 2, density 0.3", ""]
    for r in records:
        eq, sim, direct = r["equations"], r["simulator"], r["direct"]
        lines += [
            "| | off-socket | intra-socket | total | halving steps |",
            "|---|---|---|---|---|",
            "| paper's text | 7 | 16 | 23 | - |",
            f"| eqs. 1-2 as printed | {eq['n_off']:.2f} (eq. 1) | {eq['n_in']:.2f} (eq. 2) | "
            f"{eq['n_off'] + eq['n_in']:.2f} | {eq['halving_steps']} (ceil(log2(n/L)) + 1) |",
            f"| simulator, by placement (mean / max per rank) | {sim['mean_off_socket']:.2f} / {sim['max_off_socket']} "
            f"| {sim['mean_intra_socket']:.2f} / {sim['max_intra_socket']} "
            f"| {sim['mean_sends']:.2f} / {sim['max_sends']} "
            f"| {sim['mean_halving_steps']:.2f} |",
            f"| simulator, by phase (halving / final step) | {sim['mean_halving_sends']:.2f} | "
            f"{sim['mean_final_sends']:.2f} | | |",
            f"| direct (naive; eq.: delta n = {eq['naive_messages']:.0f}) | {direct['mean_off_socket']:.2f} | "
            f"{direct['mean_intra_socket']:.2f} | {direct['mean_sends']:.2f} | 1 step |",
            "",
            f"Agents found per rank {sim['mean_agents_found']:.2f}; blocks per final message "
            f"{sim['mean_final_items'] / max(sim['mean_final_sends'], 1e-9):.2f} (eq. 3: "
            f"{eq['m_in'] / 4:.2f} blocks); build {sim['build_seconds']:.0f} s on virtual ranks, "
            f"{sim['mean_protocol_messages']:.0f} protocol messages per rank, verified "
            f"({sim['verified_messages']} messages), {sim['agent_pairs']} agent pairs agree.",
            "",
            "Differences: " + ", ".join(f"{k} = {v:+.2f}" for k, v in r["difference"].items()),
            "",
        ]
    return lines


def model(records) -> list:
    """Eqs. 1-3 against the simulator."""
    lines = ["## Eqs. 1-3 against the simulator (random graphs, seed 1, S = 2; per-rank means)", "",
             "| n | L | delta | halving steps (eq. / sim) | eq. 1 n_off | sim halving sends | sim off-socket | "
             "eq. 2 n_in | sim final sends | sim intra-socket | eq. 3 blocks | sim blocks/final msg | build s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(records, key=lambda r: (r["n"], r["L"], r["delta"])):
        lines.append(f"| {r['n']} | {r['L']} | {r['delta']} | "
                     f"{r['halving_steps_eq']} / {r['mean_halving_steps']:.2f} | "
                     f"{r['eq1_n_off']:.2f} | {r['mean_halving_sends']:.2f} | {r['mean_off_socket']:.2f} | "
                     f"{r['eq2_n_in']:.2f} | {r['mean_final_sends']:.2f} | {r['mean_intra_socket']:.2f} | "
                     f"{r['eq3_m_in_blocks']:.2f} | {r['blocks_per_final_message']:.2f} | {r['build_seconds']:.0f} |")
    return lines + [""]


def table(title: str, records) -> list:
    """One of the paper's configurations: counts and predicted speedups per algorithm."""
    lines = [f"## {title}", ""]
    sizes = list(records[0]["predicted_speedup_over_direct"])
    lines += ["| topology | algorithm | off-socket mean / max | intra-socket mean / max | off-node mean / max | "
              "max blocks sent per rank | max bytes per rank at 32 B / 4 MiB | steps | "
              + " | ".join(f"pred. speedup {SIZE_LABELS.get(m, m)}" for m in sizes) + " | build s |",
              "|---|---|---|---|---|---|---|---|" + "---|" * len(sizes) + "---|"]
    order = {"distance_halving": 0, "common_neighbor": 1, "direct": 2}
    seen = set()
    rows = []
    for r in records:
        key = (r["spec"], r["algorithm"])
        if key in seen:
            continue
        seen.add(key)
        rows.append(r)
    rows.sort(key=lambda r: (r["spec"], order.get(r["algorithm"], 9)))
    for r in rows:
        b = r["max_bytes_per_rank"]
        lines.append(
            f"| {r['spec']} | {r['algorithm']} | {r['mean_off_socket']:.2f} / {r['max_off_socket']} | "
            f"{r['mean_intra_socket']:.2f} / {r['max_intra_socket']} | "
            f"{r['mean_off_node']:.2f} / {r['max_off_node']} | "
            f"{r['max_send_items']} | {b['32']} / {b['4194304']} | {r['max_steps']} | "
            + " | ".join(f"{r['predicted_speedup_over_direct'][m]:.2f}" for m in sizes)
            + f" | {r['build_seconds']:.0f} |")
    eq_rows = {r["spec"]: r["eqs_4_8_speedup_dh_over_naive"] for r in rows if "eqs_4_8_speedup_dh_over_naive" in r}
    if eq_rows:
        lines += ["", "Eqs. 4-8 (DH over naive, network alpha and beta for every message as in §V-C):", "",
                  "| topology | " + " | ".join(SIZE_LABELS.get(m, m) for m in sizes) + " |",
                  "|---|" + "---|" * len(sizes)]
        for spec, eq in sorted(eq_rows.items()):
            lines.append(f"| {spec} | " + " | ".join(f"{eq[m]:.2f}" for m in sizes) + " |")
    return lines + [""]


def verify(records) -> list:
    """Which sizes and placements passed verify and agreement."""
    lines = ["## verify (delivery proof + agent/origin agreement)", "",
             "| ranks | placement | topology | verified messages | halving steps | agent pairs | seconds |",
             "|---|---|---|---|---|---|---|"]
    for r in sorted(records, key=lambda r: (r["ranks"], r["placement"], r["spec"])):
        lines.append(f"| {r['ranks']} | {r['placement']} | {r['spec']} | {r['verified_messages']} | "
                     f"{r['halving_steps']} | {r['agent_pairs']} | {r['seconds']:.0f} |")
    return lines + [""]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", help="results directory")
    args = parser.parse_args(argv)
    kinds = load(Path(args.root))
    lines = []
    if "worked" in kinds:
        lines += worked(kinds["worked"])
    if "random" in kinds:
        lines += table("Random sparse graphs: the paper's configuration (2160 ranks, 60 nodes x 36, 18x2)",
                       kinds["random"])
    if "moore" in kinds:
        lines += table("Moore neighborhoods: the paper's configuration (2048 ranks, 64 nodes x 32, 16x2)",
                       kinds["moore"])
    if "model" in kinds:
        lines += model(kinds["model"])
    if "verify" in kinds:
        lines += verify(kinds["verify"])
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
