"""Predicted speedups of common_neighbor over direct on the HiPC 2017 paper's topologies.

Mirsadeghi, Träff, Balaji, Afsahi, "Exploiting Common Neighborhoods to Optimize MPI
Neighborhood Collectives", HiPC 2017, §VI: neighbor allgather, 4 B blocks, random sparse
graphs (Figs. 2-3, 4K processes, densities 0.05-0.8) and Moore neighborhoods (Figs. 4-5,
8K processes, D = 2..4, R = 1..4 without duplicate neighbors).

Usage::

    python benchmarks/hipc2017-predicted/hipc2017_predicted.py --params LABEL=FILE [--params ...] [--random-ranks 1024]
        [--moore-ranks 4096] [--densities 0.05,0.1,0.2] [--moore 2:1,2:2,...] [--cpu-limit S]
        [--timeout S] [--budget S] [--memory-gib G] [--out benchmarks/hipc2017-predicted]

Every case is one ``sparsecoll simulate`` run (``--algorithms direct,common_neighbor
--family allgather --sizes 4``, verify on), in a child process with a CPU-time limit
(``--cpu-limit``: the machine may be shared, so wall time says little), a wall-time limit
and an address-space limit, so a case that does not fit is reported as such, not
dropped. Cases run cheapest first (estimated by ranks x degree^2, the size of the
common-neighborhood exchange of Algorithm 1); once ``--budget`` seconds have passed, the
remaining cases are reported as not run. The
first ``--params`` set is ``simulate``'s ``--params``, the others its ``--compare-params``.
The Moore cases also report whether the grid (``MPI.Compute_dims``) is too small for the
radius, which gives repeated neighbors (the paper's remark on D = 4, R = 4 at 8K).

The paper's column quotes its text (the figures' bar values are not in the text):
improvement = 1 - t(common neighbor) / t(naive), the paper's "reduction in latency".
"""

from __future__ import annotations

import argparse
import json
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

#: What the paper's text says about each case (§VI-A, §VI-B); improvement = 1 - t_opt / t_default.
PAPER_RANDOM = {
    0.05: "about 50% at 4 B (Fig. 2, 4K processes); 36% at 1 KB (Fig. 3)",
    0.1: "mostly about 50% (Figs. 2-3, 4K processes)",
    0.2: "71% at 4 B (Fig. 3, 4K processes), the paper's maximum",
}
PAPER_MOORE = {
    (2, 1): "slight increase in latency (Fig. 4a, 8K processes)",
    (2, 2): "about 40% (Fig. 5, 8K processes)",
    (4, 3): "67% (Fig. 4, 8K processes), the Moore maximum",
}
PAPER_MOORE_OTHER = "at least 43%, at most 67% (Fig. 4, 8K processes); larger for larger D or R"
PAPER_MOORE_HIGH_D = "at least 43% (Fig. 4, 8K processes); Fig. 5: more than 65% for higher D"


def moore_duplicates(ranks: int, D: int, R: int) -> dict:
    """Grid dims of the Moore generator and whether radius ``R`` repeats neighbors on it."""
    from sparsecoll.topology.generators import compute_dims
    dims = compute_dims(ranks, D)
    short = [d for d in dims if 2 * R + 1 > d]
    return {"dims": list(dims), "duplicates": bool(short),
            "why": (f"dims {dims}: 2R+1 = {2 * R + 1} > {min(short)}, so distinct offsets wrap onto the same "
                    "rank: repeated neighbors (and self loops where an offset is a multiple of the dimension)"
                    if short else f"dims {dims}: every dimension >= 2R+1 = {2 * R + 1}, no repeated neighbors")}


def _limits(gib: float, cpu_seconds: float):
    def apply():
        memory = int(gib * 2 ** 30)
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        cpu = int(cpu_seconds)
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
    return apply


def estimated_work(ranks: int, degree: float) -> float:
    """Ranks x degree^2: the entries of Algorithm 1's common-neighborhood exchange (for ordering only)."""
    return ranks * degree * degree


def run_case(ranks: int, spec: str, params: list, timeout: float, memory_gib: float, out: Path,
             cpu_limit: float) -> dict:
    """One ``sparsecoll simulate`` run in a child process; its simulate.json or why it failed."""
    out.mkdir(parents=True, exist_ok=True)
    first, *others = params
    command = [sys.executable, "-m", "sparsecoll", "simulate", "--ranks", str(ranks), "--topology", spec,
               "--algorithms", "direct,common_neighbor", "--family", "allgather", "--sizes", "4",
               "--params", first.partition("=")[2], "--out", str(out)]
    for other in others:
        command += ["--compare-params", other]
    start = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False,
                              preexec_fn=_limits(memory_gib, cpu_limit))
    except subprocess.TimeoutExpired:
        return {"status": f"wall-time limit of {timeout:.0f} s reached", "wall_seconds": time.perf_counter() - start,
                "command": command}
    wall = time.perf_counter() - start
    (out / "stdout.txt").write_text(done.stdout + done.stderr)
    if done.returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        return {"status": f"CPU-time limit of {cpu_limit:.0f} s reached (signal {-done.returncode})",
                "wall_seconds": wall, "command": command}
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
        kind = "out of memory" if "MemoryError" in done.stderr else f"exit status {done.returncode}"
        return {"status": f"failed ({kind}): {tail[0]}", "wall_seconds": wall, "command": command}
    return {"status": "ok", "wall_seconds": wall, "command": command,
            "simulate": json.loads((out / "simulate.json").read_text())}


def _row(case: dict, labels: list) -> dict:
    """Speedup and improvement per parameter set, build/verify seconds, counts."""
    result = case["result"]
    row = {k: case[k] for k in ("name", "ranks", "spec", "paper")}
    row.update(status=result["status"], wall_seconds=result["wall_seconds"])
    if "moore" in case:
        row["moore"] = case["moore"]
    if result["status"] != "ok":
        return row
    algorithms = result["simulate"]["algorithms"]
    direct, cn = algorithms["direct"], algorithms["common_neighbor"]
    row["verified"] = bool(direct["verified"] and cn["verified"])
    row["edges"] = result["simulate"]["edges"]
    for name, entry in (("direct", direct), ("common_neighbor", cn)):
        row[name] = {"build_seconds": entry["build_seconds"], "verify_seconds": entry["verify_seconds"],
                     "build_cpu_seconds": entry.get("build_cpu_seconds"),
                     "verify_cpu_seconds": entry.get("verify_cpu_seconds"),
                     "max_steps": entry["max_steps"], "max_sends": entry["max_sends"],
                     "mean_sends": entry["mean_sends"]}
    row["protocol"] = {"messages_max": cn.get("max_messages"), "depth_max": cn.get("max_depth")}
    row["speedup"], row["improvement"] = {}, {}
    for i, label in enumerate(labels):
        source = cn if i == 0 else cn["by_machine"][label]
        speedup = source["speedup_over_direct"]["4"]
        row["speedup"][label] = speedup
        row["improvement"][label] = 1.0 - 1.0 / speedup
    return row


def duplicate_survey(sizes, Ds=(2, 3, 4), Rs=(1, 2, 3, 4)) -> list:
    """``(ranks, D, R, dims)`` of every Moore case that repeats neighbors at the given sizes."""
    found = []
    for ranks in sizes:
        for D in Ds:
            for R in Rs:
                info = moore_duplicates(ranks, D, R)
                if info["duplicates"]:
                    found.append((ranks, D, R, info["dims"]))
    return found


def markdown(rows: list, labels: list, machines: dict, command: str, survey=()) -> str:
    """The table (and the parameter sets) as markdown."""
    lines = ["# HiPC 2017 topologies: predicted speedup of common_neighbor over direct (allgather, 4 B)", "",
             f"Command: `{command}`", "",
             ("improvement = 1 - t(common_neighbor) / t(direct) (the paper's latency reduction); "
             "speedup = t(direct) / t(common_neighbor). Predictions: `sparsecoll simulate` (real builders on "
             "virtual ranks, verify on, per-step single-port model of `sparsecoll.model.evaluate`, every pair "
             "of ranks in one class)."), "", "Parameter sets:", ""]
    for label in labels:
        lines.append(f"* `{label}`: {machines[label]}")
    head = ["topology", "ranks"] + [f"improvement {label}" for label in labels] + \
           [f"speedup {label}" for label in labels] + \
           ["paper (text)", "direct sends max/mean", "CN steps, sends max/mean", "build s (wall) direct / CN (CN CPU)",
            "verify s direct / CN", "status"]
    lines += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        if row["status"] != "ok":
            cells = [row["name"], str(row["ranks"])] + ["-"] * (2 * len(labels)) + \
                    [row["paper"], "-", "-", "-", "-", f"{row['status']} (wall {row['wall_seconds']:.0f} s)"]
        else:
            d, c = row["direct"], row["common_neighbor"]
            cells = [row["name"], str(row["ranks"])] + \
                    [f"{row['improvement'][label]:+.0%}" for label in labels] + \
                    [f"{row['speedup'][label]:.2f}" for label in labels] + \
                    [row["paper"], f"{d['max_sends']} / {d['mean_sends']:.1f}",
                     f"{c['max_steps']}, {c['max_sends']} / {c['mean_sends']:.1f}",
                     f"{d['build_seconds']:.1f} / {c['build_seconds']:.1f} (CPU {c['build_cpu_seconds']:.1f})",
                     f"{d['verify_seconds']:.1f} / {c['verify_seconds']:.1f}",
                     "ok, verified" if row["verified"] else "ok, NOT verified"]
        lines.append("| " + " | ".join(cells) + " |")
    moore = [row for row in rows if "moore" in row]
    if moore:
        lines += ["", ("Moore grids and repeated neighbors (the generator lists every offset; where 2R+1 exceeds "
                  "a grid dimension, offsets wrap onto the same rank and the lists keep the repeats, as MPI "
                  "allows; the paper instead left such cases out):"), ""]
        for row in moore:
            lines.append(f"* {row['name']} at {row['ranks']} ranks: {row['moore']['why']}")
    if survey:
        lines += ["", "Moore (D, R), D = 2..4, R = 1..4, that repeat neighbors: " + "; ".join(
            f"{ranks} ranks D={D} R={R} (dims {dims})" for ranks, D, R, dims in survey)]
    return "\n".join(lines)


def main(argv=None) -> int:
    """Run every case and write the table (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", action="append", required=True, metavar="LABEL=FILE",
                        help="parameter file with a label (repeatable; the first is simulate's --params)")
    parser.add_argument("--random-ranks", type=int, default=1024)
    parser.add_argument("--moore-ranks", type=int, default=4096)
    parser.add_argument("--densities", default="0.05,0.1,0.2")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--moore", default="2:1,2:2,2:3,3:1,3:2,3:3,4:1,4:2,4:3", help="D:R pairs, comma separated")
    parser.add_argument("--cpu-limit", type=float, default=600.0, help="CPU seconds per case")
    parser.add_argument("--timeout", type=float, default=3600.0, help="wall seconds per case")
    parser.add_argument("--budget", type=float, default=None, help="wall seconds for the whole run")
    parser.add_argument("--memory-gib", type=float, default=8.0, help="address-space limit per case")
    parser.add_argument("--out", default="benchmarks/hipc2017-predicted")
    parser.add_argument("--resume-from", action="append", default=[], metavar="DIR",
                        help="keep the rows of DIR/hipc2017-predicted.json (repeatable): finished ones are not run "
                             "again; failed ones are kept when the budget leaves no time to try again")
    parser.add_argument("--first", default="", help="SPECs to run before the others, separated by ';'")
    args = parser.parse_args(argv)
    from sparsecoll.sim.simulate import parse_labelled_params
    try:
        machines = parse_labelled_params(args.params)
    except (ValueError, OSError) as exc:
        parser.error(str(exc))
    labels = list(machines)
    descriptions = {label: f"{m.model} " + ", ".join(f"{k}={v:.4g}" for k, v in next(iter(m.classes.values())).items())
                    + f" ({m.source})" for label, m in machines.items()}
    cases = []
    for density in (float(x) for x in args.densities.split(",") if x):
        cases.append({"name": f"random density {density:g}", "ranks": args.random_ranks,
                      "spec": f"random:density={density:g},seed={args.seed}",
                      "paper": PAPER_RANDOM.get(density, "not reported"),
                      "work": estimated_work(args.random_ranks, density * (args.random_ranks - 1))})
    for pair in filter(None, args.moore.split(",")):
        D, R = (int(x) for x in pair.split(":"))
        paper = PAPER_MOORE.get((D, R), PAPER_MOORE_HIGH_D if D > 2 else PAPER_MOORE_OTHER)
        cases.append({"name": f"Moore D={D} R={R}", "ranks": args.moore_ranks, "spec": f"moore:D={D},R={R}",
                      "paper": paper, "moore": moore_duplicates(args.moore_ranks, D, R),
                      "work": estimated_work(args.moore_ranks, (2 * R + 1) ** D - 1)})
    first = [spec for spec in args.first.split(";") if spec]
    cases.sort(key=lambda case: (case["spec"] not in first, case["work"]))
    out = Path(args.out)
    command = "python benchmarks/hipc2017-predicted/hipc2017_predicted.py " + " ".join(
        sys.argv[1:] if argv is None else argv)
    survey = duplicate_survey(sorted({args.moore_ranks, 8192}))
    finished, attempted = {}, {}
    for folder in args.resume_from:
        for row in json.loads((Path(folder) / "hipc2017-predicted.json").read_text())["rows"]:
            key = (row["spec"], row["ranks"])
            if row["status"] == "ok":
                finished[key] = row
            elif not row["status"].startswith("not run"):
                attempted.setdefault(key, row)
    rows = []
    started = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    for case in cases:
        slug = case["spec"].replace(":", "_").replace(",", "_").replace("=", "")
        key = (case["spec"], case["ranks"])
        print(f"{case['name']} at {case['ranks']} ranks ...", flush=True)
        if key in finished:
            rows.append({**finished[key], "paper": case["paper"]})
            print("  kept from a previous run", flush=True)
        elif args.budget is not None and time.perf_counter() - started > args.budget and key in attempted:
            rows.append({**attempted[key], "paper": case["paper"]})
            print(f"  kept from a previous run: {rows[-1]['status']}", flush=True)
        else:
            if args.budget is not None and time.perf_counter() - started > args.budget:
                case["result"] = {"status": f"not run: the run's time budget of {args.budget:.0f} s was spent",
                                  "wall_seconds": 0.0}
            else:
                case["result"] = run_case(case["ranks"], case["spec"], args.params, args.timeout, args.memory_gib,
                                          out / "cases" / f"{slug}_{case['ranks']}", args.cpu_limit)
            rows.append(_row(case, labels))
            print(f"  {rows[-1]['status']}, {rows[-1]['wall_seconds']:.1f} s"
                  + (f", improvement {rows[-1]['improvement']}" if "improvement" in rows[-1] else ""), flush=True)
        # written after every case, so a stopped run keeps what finished
        (out / "hipc2017-predicted.json").write_text(json.dumps(
            {"command": command, "machines": {k: m.to_json() for k, m in machines.items()}, "rows": rows},
            indent=2) + "\n")
        (out / "hipc2017-predicted.md").write_text(markdown(rows, labels, descriptions, command, survey) + "\n")
    print(markdown(rows, labels, descriptions, command, survey))
    return 0


if __name__ == "__main__":
    sys.exit(main())
