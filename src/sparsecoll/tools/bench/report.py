"""Statistics, files and figures of a benchmark run (rank 0 only)."""

from __future__ import annotations

import csv
import json
import os
import platform
import sys
from pathlib import Path

import numpy

SETTING_VARIABLES = ("MPIR_CVAR_CH4_PROGRESS_THROTTLE", "MPIR_CVAR_POLLS_BEFORE_YIELD",
                     "OMPI_MCA_mpi_yield_when_idle", "OMPI_ALLOW_RUN_AS_ROOT", "SPARSECOLL_PLACEMENT")


def summarize(result: dict) -> None:
    """Add median/quartiles of every algorithm's samples and of its ratio to native."""
    native = result["algorithms"].get("native")
    for _name, entry in result["algorithms"].items():
        samples = numpy.array(entry["samples"])
        entry["q1"], entry["median"], entry["q3"] = (float(x) for x in numpy.percentile(samples, [25, 50, 75]))
        if native is not None:
            ratio = samples / numpy.array(native["samples"])
            entry["ratio_q1"], entry["ratio_median"], entry["ratio_q3"] = (
                float(x) for x in numpy.percentile(ratio, [25, 50, 75]))
            entry["speedup_median"] = float(numpy.median(1.0 / ratio))


def environment(world, settings: dict, cores: int) -> dict:
    """What the numbers were measured on (``cores``: those the ranks on this node may run on)."""
    import mpi4py
    from mpi4py import MPI

    from sparsecoll import __version__
    from sparsecoll.model.profile import library_version
    return {
        "mpi_library": library_version(),
        "mpi_version": "{}.{}".format(*MPI.Get_version()),
        "mpi4py": mpi4py.__version__, "python": sys.version.split()[0], "numpy": numpy.__version__,
        "sparsecoll": __version__, "platform": platform.platform(), "hostname": platform.node(),
        "ranks": world.Get_size(), "cores": cores,
        "settings": {k: os.environ[k] for k in SETTING_VARIABLES if k in os.environ},
        **settings,
    }


def write_files(out: Path, results: list, env: dict) -> list:
    """results.json (every sample), results.csv (one row per algorithm column and case; ``executor``:
    the executor of a sparsecoll column, empty for ``native`` and ``auto``; ``messages_*``: the
    schedule's messages to other ranks, ``wire_messages_max``: those the step or DAG executor
    sent after joining a step's messages to one peer, empty where it did not count them;
    ``auto_predicted_s``: in a row that measured ``auto``, the time its model predicted for this
    column's algorithm, empty where it predicted none or predicted another size class: a
    pinned collective's, see :mod:`sparsecoll.runtime.auto`)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"environment": env, "results": results}, indent=1))
    fields = ["topology", "collective", "size", "mode", "algorithm", "executor", "median_s", "q1_s", "q3_s",
              "ratio_to_native_median", "ratio_q1", "ratio_q3", "speedup_median", "build_s", "first_call_s",
              "phase1_s", "phase1_cpu_s", "phase2_s", "phase2_cpu_s", "phase2_bind_s", "binds_per_call", "steps_max",
              "messages_max", "messages_mean", "items_max", "bytes_max", "bytes_mean", "agrees_with_native",
              "auto_chose", "wire_messages_max", "auto_checked", "auto_check_ratio",
              "auto_settle_calls", "auto_settle_s", "auto_predicted_s"]
    with open(out / "results.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(fields)
        for r in results:
            predicted = r["algorithms"].get("auto", {}).get("predicted_seconds", {})
            for name, e in r["algorithms"].items():
                p = e["plan"]
                writer.writerow([r["topology"], r["collective"], r["size"], r["mode"], name, e.get("executor") or "",
                                 e["median"], e["q1"],
                                 e["q3"], e.get("ratio_median"), e.get("ratio_q1"), e.get("ratio_q3"),
                                 e.get("speedup_median"), e["build_seconds"], e["first_call_seconds"],
                                 e["phase1_seconds"], e["phase1_cpu_seconds"], e["phase2_seconds"],
                                 e["phase2_cpu_seconds"], e["phase2_bind_seconds"],
                                 e["binds_per_call"], p["steps_max"], p["messages_max"], p["messages_mean"],
                                 p["items_max"], p["bytes_max"], p["bytes_mean"], e["agrees_with_native"],
                                 e.get("chosen", ""), p.get("executor_counts", {}).get("wire_sends_max", ""),
                                 *_check_fields(e.get("check")), e.get("settle_calls", ""),
                                 e.get("settle_seconds", ""), predicted.get(name, "")])
    return [out / "results.json", out / "results.csv"]


def _check_fields(check) -> tuple:
    """``(candidate, its median / native's)`` of auto's online check in a row (blank: none ran)."""
    if not check:
        return "", ""
    return check["candidate"], check["candidate_seconds"] / check["native_seconds"]


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text).strip("_")


def write_figures(out: Path, results: list) -> list:
    """Per topology, one column per collective and mode: latency vs block size (log-log,
    quartile bands) and speedup over native."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    paths = []
    for topology in dict.fromkeys(r["topology"] for r in results):
        rows = [r for r in results if r["topology"] == topology]
        columns = list(dict.fromkeys((r["collective"], r["mode"]) for r in rows))
        fig, axes = plt.subplots(2, len(columns), figsize=(4.2 * len(columns), 7.0), squeeze=False)
        for column, (collective, mode) in enumerate(columns):
            cases = sorted((r for r in rows if (r["collective"], r["mode"]) == (collective, mode)),
                           key=lambda r: r["size"])
            sizes = [r["size"] for r in cases]
            names = list(dict.fromkeys(n for r in cases for n in r["algorithms"]))
            top, bottom = axes[0][column], axes[1][column]
            for name in names:
                med = [r["algorithms"][name]["median"] * 1e6 for r in cases]
                lo = [r["algorithms"][name]["q1"] * 1e6 for r in cases]
                hi = [r["algorithms"][name]["q3"] * 1e6 for r in cases]
                line, = top.plot(sizes, med, marker="o", label=name)
                top.fill_between(sizes, lo, hi, color=line.get_color(), alpha=0.2)
                if "speedup_median" in cases[0]["algorithms"][name]:
                    bottom.plot(sizes, [r["algorithms"][name]["speedup_median"] for r in cases],
                                marker="o", label=name, color=line.get_color())
            top.set_xscale("log", base=2)
            top.set_yscale("log")
            top.set_title(f"{collective} ({mode})")
            top.set_xlabel("bytes per block")
            top.set_ylabel("latency, us (median, q1-q3 band)")
            top.grid(True, which="both", alpha=0.3)
            bottom.axhline(1.0, color="black", linewidth=0.8)
            bottom.set_xscale("log", base=2)
            bottom.set_xlabel("bytes per block")
            bottom.set_ylabel("speedup over native (median of pairs)")
            bottom.grid(True, alpha=0.3)
            top.legend(fontsize="small")
        fig.suptitle(f"{topology}: {results[0]['reps']} interleaved repetitions, max over ranks")
        fig.tight_layout()
        path = out / f"bench_{_slug(topology)}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def _bytes(count: float) -> str:
    """A byte count in few characters (B, KiB, MiB)."""
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.1f}{unit}"
    return f"{int(count)}B"


def print_table(results: list, console=None) -> None:
    """One row per topology x collective x size x mode; per algorithm median latency, speedup, counts."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table
    console = console or Console(width=400)  # under mpiexec stdout is no terminal: do not wrap at 80
    names = list(dict.fromkeys(n for r in results for n in r["algorithms"]))
    table = Table(title="median latency in us (speedup over native in the same mode, median of interleaved "
                        "pairs); * best; messages[steps] and bytes sent, max per rank", show_lines=False)
    for header in ("topology", "collective", "bytes", "mode"):
        table.add_column(header, no_wrap=True)
    for name in names:  # labels such as direct[dag] are text, not markup
        table.add_column(escape(name), justify="right", no_wrap=True)
    for r in results:
        entries = r["algorithms"]
        best = min(entries, key=lambda n: entries[n]["median"])
        cells = []
        for name in names:
            e = entries.get(name)
            if e is None:
                cells.append("-")
                continue
            mark = "*" if name == best else " "
            speed = f" ({e['speedup_median']:.2f}x)" if "speedup_median" in e else ""
            wrong = "" if e["agrees_with_native"] else " WRONG"
            ran = f" ={e['chosen']}" if "chosen" in e else ""
            cells.append(f"{mark}{e['median'] * 1e6:.1f}{speed} {e['plan']['messages_max']}"
                         f"[{e['plan']['steps_max']}] {_bytes(e['plan']['bytes_max'])}{ran}{wrong}")
        table.add_row(r["topology"], r["collective"], str(r["size"]), r["mode"], *cells)
    console.print(table)


def auto_summary(results: list) -> str | None:
    """One line: auto's worst and median ratio to native, and to the best algorithm of each row."""
    to_native, to_best, errors, predicted_rows = [], [], [], 0
    for r in results:
        entries = r["algorithms"]
        auto = entries.get("auto")
        if auto is None or "ratio_median" not in auto:
            continue
        to_native.append(auto["ratio_median"])
        best = min(e["median"] for name, e in entries.items() if name != "auto")
        to_best.append(auto["median"] / best)
        row_errors = [entries[name]["median"] / seconds for name, seconds in auto.get("predicted_seconds", {}).items()
                      if name in entries and seconds > 0]
        errors += row_errors
        predicted_rows += bool(row_errors)
    if not to_native:
        return None
    if errors:
        median_error, worst_error = model_error(errors)
        rows = f"{predicted_rows} row{'' if predicted_rows == 1 else 's'}"
        error = (f"model error (measured / predicted median, every algorithm of the {rows} auto "
                 f"predicted): median factor {median_error:.2f}, worst {worst_error:.2f}")
    else:  # a nonblocking call before any decision, or a pinned collective's other size classes
        error = "model error: auto predicted none of these rows"
    return (f"auto / native (median of interleaved pairs, per row): worst {max(to_native):.3f}, median "
            f"{numpy.median(to_native):.3f} over {len(to_native)} rows; auto / best algorithm of the row: worst "
            f"{max(to_best):.3f}, median {numpy.median(to_best):.3f}; {error}")


def error_factors(ratios) -> numpy.ndarray:
    """Each ratio measured / predicted as the factor (at least 1) by which it misses 1, either way
    (1.25: a quarter too slow or too fast)."""
    return numpy.exp(numpy.abs(numpy.log(numpy.asarray(ratios, dtype=float))))


def model_error(ratios) -> tuple:
    """``(median, worst)`` of :func:`error_factors` (the median taken of their logarithms)."""
    factors = error_factors(ratios)
    return float(numpy.exp(numpy.median(numpy.log(factors)))), float(factors.max())


def phase_rows(results: list) -> list:
    """Phase 1 / Phase 2 per topology, collective and sparsecoll algorithm (``native`` has neither).

    Each row: ``(topology, collective, algorithm, (phase1_s, phase1_cpu_s),
    {size: (phase2_s, phase2_cpu_s)})``; the numbers are the same in every mode of a
    run, so the first mode's are taken.
    """
    rows = {}
    for r in results:
        for name, e in r["algorithms"].items():
            if e.get("phase1_seconds") is None:
                continue
            key = (r["topology"], r["collective"], name)
            row = rows.setdefault(key, [(e["phase1_seconds"], e["phase1_cpu_seconds"]), {}])
            row[1].setdefault(r["size"], (e["phase2_seconds"], e["phase2_cpu_seconds"]))
    return [(*key, phase1, phase2) for key, (phase1, phase2) in rows.items()]


def _wall_cpu(pair) -> str:
    return f"{pair[0]:.6f} s ({pair[1]:.6f})"


def print_phase_table(results: list, console=None) -> None:
    """The HiPC 2017 paper's Tables I and II for this run: Phase 1 and Phase 2 times."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table
    rows = phase_rows(results)
    if not rows:
        return
    console = console or Console(width=400)
    sizes = sorted({size for *_, phase2 in rows for size in phase2})
    reps = max((e.get("phase_reps") or 0) for r in results for e in r["algorithms"].values())
    table = Table(title="Phase 1 (pattern creation) and Phase 2 (schedule of one call: bind + requests): wall "
                        f"clock (CPU time in parentheses), max over ranks, median of {reps} repetitions")
    for header in ("topology", "collective", "algorithm"):
        table.add_column(header, no_wrap=True)
    table.add_column("Phase 1", justify="right", no_wrap=True)
    for size in sizes:
        table.add_column(f"Phase 2, {size} B", justify="right", no_wrap=True)
    for topology, collective, name, phase1, phase2 in rows:
        cells = [_wall_cpu(phase2[size]) if size in phase2 else "-" for size in sizes]
        table.add_row(topology, collective, escape(name), _wall_cpu(phase1), *cells)
    console.print(table)
