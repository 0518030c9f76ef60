"""Predicted vs measured latency for every (topology, collective, size, algorithm) of a benchmark run.

Usage::

    python benchmarks/model-check/model_check.py RESULTS.json [RESULTS.json ...] --params LABEL=FILE [--params ...]
                                  [--out DIR]

For each ``results.json`` written by ``sparsecoll bench`` it rebuilds the same topologies
(:func:`sparsecoll.topology.specs.generate`) on as many virtual ranks as the run had,
with the run's placement override (``SPARSECOLL_PLACEMENT`` in its environment) handed to
the algorithms that take one, builds every measured algorithm's Patterns with the real
builders (:func:`sparsecoll.sim.harness.build_patterns`, verified), and predicts the
per-call latency with each parameter file (:func:`sparsecoll.model.evaluate.predict`;
``native`` is predicted with ``direct``'s one-step pattern, which is what the MPI library
runs for a neighborhood allgather/alltoall). Every pair class falls back to the
calibrated one: all ranks of these runs share one machine.

Printed and written (``DIR/model-check.json``, ``DIR/model-check.md``): the measured
quartiles and median, the prediction and its relative error ``pred / median - 1`` per
parameter set, the measured and predicted speedup over ``direct``, the *critical-path
message count* (the prediction of the normalized model alpha = 1, beta = 0), and whether
the simulated Patterns have the numbers the benchmark recorded (steps, messages, items).
Per run: the median and range of the errors, and the least-squares fits (in-sample,
not predictions) ``median = c0 + c1 * count`` and ``median = c0 + c1 * count + c2 *
steps`` with their R^2, which say how much of the measured variation the model's message
counting explains, and how much a cost per step adds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy

from sparsecoll.model.evaluate import CompiledPatterns, predict
from sparsecoll.model.params import Placement, hockney
from sparsecoll.pattern import family_of
from sparsecoll.sim.harness import build_patterns, placement_options
from sparsecoll.sim.simulate import parse_labelled_params
from sparsecoll.topology.placement import ENVIRONMENT
from sparsecoll.topology.specs import generate

NORMALIZED = hockney(1.0, 0.0, "normalized: alpha = 1, beta = 0 (messages on the critical path)")
PATTERN_OF = {"native": "direct"}  # the MPI library's own pattern is direct's one-step pattern


def _plan_of(run) -> dict:
    """The benchmark's plan numbers (runner.plan_numbers) computed from simulated Patterns."""
    summary = run.summary()
    return {"steps_max": summary["max_steps"], "messages_max": summary["max_sends_to_others"],
            "items_max": summary["max_send_items"]}


def check_run(path: Path, machines: dict) -> dict:
    """Predict every measured (topology, collective, size, algorithm) of one results.json."""
    data = json.loads(path.read_text())
    env = data["environment"]
    ranks = int(env["ranks"])
    override = env.get("settings", {}).get(ENVIRONMENT)
    placement = Placement.parse(override) if override else None
    built: dict = {}
    rows = []
    for entry in data["results"]:
        family = family_of(entry["family"])
        spec = entry["workload"]
        for algorithm, measured in entry["algorithms"].items():
            if "median" not in measured:
                continue
            pattern_name = PATTERN_OF.get(algorithm, algorithm)
            key = (spec, family, pattern_name)
            if key not in built:
                start = time.perf_counter()
                adjacency = generate(spec, ranks)
                run = build_patterns(adjacency.topologies(), pattern_name, family,
                                     placement_options(pattern_name, placement), verify=True)
                built[key] = (CompiledPatterns.from_patterns(run.patterns), _plan_of(run),
                              time.perf_counter() - start)
            compiled, plan, seconds = built[key]
            size = int(entry["size"])
            recorded = {k: measured["plan"][k] for k in plan}
            row = {"topology": spec, "collective": entry["collective"], "size": size,
                   "mode": entry.get("mode", "persistent"), "algorithm": algorithm,
                   "pattern": pattern_name, "q1": measured["q1"], "median": measured["median"],
                   "q3": measured["q3"], "count": predict(compiled, NORMALIZED, [size])[size],
                   "plan_simulated": plan, "plan_measured": recorded, "plan_match": plan == recorded,
                   "build_seconds": seconds, "predicted": {}, "error": {}}
            for label, machine in machines.items():
                predicted = predict(compiled, machine, [size])[size]
                row["predicted"][label] = predicted
                row["error"][label] = predicted / measured["median"] - 1.0
            rows.append(row)
    _add_speedups(rows, machines)
    modes = sorted({row["mode"] for row in rows})
    summary = _summary(rows, machines)
    if len(modes) > 1:  # one model, but modes measure different things (per-call bind or not)
        summary["by_mode"] = {mode: _summary([r for r in rows if r["mode"] == mode], machines) for mode in modes}
    return {"results": str(path), "ranks": ranks, "placement": override, "command": env.get("command"),
            "settings": env.get("settings"), "rows": rows, "summary": summary}


def _add_speedups(rows, machines) -> None:
    """Measured and predicted speedup over ``direct`` of the same (topology, collective, size, mode)."""
    direct = {(r["topology"], r["collective"], r["size"], r["mode"]): r for r in rows if r["algorithm"] == "direct"}
    for row in rows:
        base = direct.get((row["topology"], row["collective"], row["size"], row["mode"]))
        if base is None:
            continue
        row["speedup_measured"] = base["median"] / row["median"]
        row["speedup_predicted"] = {label: base["predicted"][label] / row["predicted"][label]
                                    for label in machines if row["predicted"][label] > 0}


def _summary(rows, machines) -> dict:
    """Error statistics per parameter set, and the least-squares line median = c0 + c1 * count."""
    out = {}
    for label in machines:
        errors = numpy.array([r["error"][label] for r in rows])
        out[label] = {"median_abs_error": float(numpy.median(numpy.abs(errors))),
                      "min_error": float(errors.min()), "max_error": float(errors.max()),
                      "median_error": float(numpy.median(errors))}
    counts = numpy.array([r["count"] for r in rows], dtype=float)
    steps = numpy.array([r["plan_simulated"]["steps_max"] for r in rows], dtype=float)
    medians = numpy.array([r["median"] for r in rows])
    fits = {"fit_median_vs_count": ("c0_seconds", "c1_seconds_per_message"),
            "fit_median_vs_count_and_steps": ("c0_seconds", "c1_seconds_per_message", "c2_seconds_per_step")}
    columns = {"fit_median_vs_count": [counts], "fit_median_vs_count_and_steps": [counts, steps]}
    for name, names in fits.items():
        design = numpy.column_stack([numpy.ones_like(counts), *columns[name]])
        if len(rows) <= design.shape[1] or numpy.linalg.matrix_rank(design) < design.shape[1]:
            continue
        coefficients, *_ = numpy.linalg.lstsq(design, medians, rcond=None)
        residual = medians - design @ coefficients
        r2 = 1.0 - float(residual @ residual) / float(((medians - medians.mean()) ** 2).sum())
        out[name] = {**dict(zip(names, map(float, coefficients))), "r2": r2}
    # rows whose Patterns differ from direct's: there the model predicts a speedup or a slowdown
    direct_plan = {(r["topology"], r["collective"]): r["plan_simulated"] for r in rows if r["algorithm"] == "direct"}
    differ = [r for r in rows if "speedup_measured" in r
              and r["plan_simulated"] != direct_plan.get((r["topology"], r["collective"]))]
    for label in machines:
        agree = sum(1 for r in differ if (r["speedup_measured"] >= 1) == (r["speedup_predicted"].get(label, 0) >= 1))
        out[label]["speedup_direction_agrees"] = f"{agree}/{len(differ)}"
    return out


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f}"


def markdown(checks: list, machines: dict, command: str) -> str:
    """The tables of all runs as markdown."""
    lines = ["# Model check: predicted vs measured latency", "",
             f"Command: `{command}`", "", "Parameter sets:", ""]
    for label, machine in machines.items():
        params = ", ".join(f"{c}: " + ", ".join(f"{k}={v:.4g}" for k, v in p.items())
                           for c, p in machine.classes.items())
        lines.append(f"* `{label}`: {machine.model}, {params}; {machine.source}")
    lines += ["", ("Times in microseconds; err = predicted / measured median - 1; "
              "count = messages on the critical path (alpha = 1, beta = 0); "
              "x = speedup over direct (measured, then predicted per set); "
              "plan = simulated Patterns have the benchmark's steps/messages/items."), ""]
    labels = list(machines)
    for check in checks:
        lines += [f"## {check['results']} ({check['ranks']} ranks"
                  + (f", placement override {check['placement']}" if check["placement"] else "") + ")", "",
                  f"Benchmark command: `{check['command']}`", ""]
        head = ["topology", "coll", "bytes", "mode", "algorithm", "q1", "median", "q3", "count"]
        for label in labels:
            head += [f"pred {label}", f"err {label}"]
        head += ["x meas"] + [f"x {label}" for label in labels] + ["plan"]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in check["rows"]:
            cells = [r["topology"], r["collective"], str(r["size"]), r["mode"],
                     r["algorithm"] + (" (direct's pattern)" if r["pattern"] != r["algorithm"] else ""),
                     _us(r["q1"]), _us(r["median"]), _us(r["q3"]), f"{r['count']:g}"]
            for label in labels:
                cells += [_us(r["predicted"][label]), f"{r['error'][label]:+.0%}"]
            cells.append(f"{r['speedup_measured']:.2f}" if "speedup_measured" in r else "-")
            cells += [f"{r['speedup_predicted'][label]:.2f}" if "speedup_predicted" in r else "-" for label in labels]
            cells.append("yes" if r["plan_match"] else f"NO: sim {r['plan_simulated']} vs bench {r['plan_measured']}")
            lines.append("| " + " | ".join(cells) + " |")
        lines += ["", ("speedup direction: rows whose Patterns differ from direct's, where measured and predicted "
                       "agree on faster / slower than direct."), "",
                  "| parameter set | median abs err | min err | max err | speedup direction agrees |",
                  "|---|---|---|---|---|"]
        groups = [("", check["summary"])] + [(f" ({mode} rows)", summary)
                                             for mode, summary in check["summary"].get("by_mode", {}).items()]
        for suffix, summary in groups:
            for label in labels:
                s = summary[label]
                lines.append(f"| {label}{suffix} | {s['median_abs_error']:.0%} | {s['min_error']:+.0%} "
                             f"| {s['max_error']:+.0%} | {s['speedup_direction_agrees']} |")
        fit = check["summary"].get("fit_median_vs_count")
        if fit:
            lines += ["", (f"Least squares over this run's rows (in-sample, not a prediction): median = "
                      f"{_us(fit['c0_seconds'])} us + {_us(fit['c1_seconds_per_message'])} us x count, "
                      f"R^2 = {fit['r2']:.2f}.")]
        fit = check["summary"].get("fit_median_vs_count_and_steps")
        if fit:
            lines += [(f"With the steps as a second variable: median = {_us(fit['c0_seconds'])} us + "
                      f"{_us(fit['c1_seconds_per_message'])} us x count + {_us(fit['c2_seconds_per_step'])} us x "
                      f"steps, R^2 = {fit['r2']:.2f}.")]
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    """Run the model check (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", help="results.json files of sparsecoll bench")
    parser.add_argument("--params", action="append", required=True, metavar="LABEL=FILE",
                        help="parameter file of sparsecoll calibrate, with a label (repeatable)")
    parser.add_argument("--out", default=None, help="directory for model-check.json and model-check.md")
    args = parser.parse_args(argv)
    try:
        machines = parse_labelled_params(args.params)
    except (ValueError, OSError) as exc:
        parser.error(str(exc))
    checks = [check_run(Path(path), machines) for path in args.results]
    command = "python benchmarks/model-check/model_check.py " + " ".join(sys.argv[1:] if argv is None else argv)
    text = markdown(checks, machines, command)
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "model-check.json").write_text(json.dumps(
            {"command": command, "machines": {k: m.to_json() for k, m in machines.items()}, "runs": checks},
            indent=2) + "\n")
        (out / "model-check.md").write_text(text + "\n")
        print(f"wrote {out / 'model-check.json'} and {out / 'model-check.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
