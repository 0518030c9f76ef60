"""One line per benchmark row: what auto ran, auto/native, the best algorithm and its ratio.

Run: python benchmarks/auto/summarize.py benchmarks/auto/results-mpich/results.csv [--over 1.05]
     [--samples benchmarks/auto/results-mpich/results.json]
Ratios are the medians of interleaved per-repetition ratios that ``sparsecoll bench`` writes.

With ``--samples`` (the bench's results.json: every repetition of every column), auto/best is
also given with the best picked on the even repetitions and timed on the odd ones. The best of
ten noisy columns, picked and timed on the same repetitions, is biased low (the winner's curse:
a column that is as fast as another wins a row by the luck of its samples); picked on one half
and timed on the other it is not, so rows still over 1.1 that way hold a real win auto missed.

The last line is the noise floor of one row: in every row auto runs what one of the other
columns runs (the library's own call, or a sparsecoll schedule), so auto's time over that
column's time, both medians of the same run, would be 1 but for the machine; its spread is
how far two columns that run the same code differ in one row here.

Where results.csv has ``auto_predicted_s`` (runs from 2026-11-29 on: the time auto's model
predicted for each column's algorithm), the model's error is given too: measured / predicted as
a factor (1.25 means a quarter off either way), median and worst over every column of every
row, and the rows of the five worst.

``check`` (runs from 2026-11-28 on): the candidate auto's online check timed against the library
before the repetitions, and its median over native's there (the choice needs at most 0.95).
"""

import argparse
import csv
import statistics
from collections import defaultdict

from sparsecoll.tools.bench.report import error_factors, model_error

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("csv", help="results.csv of a sparsecoll bench run that measured auto")
parser.add_argument("--over", type=float, default=None, help="list only rows where auto/native exceeds this")
parser.add_argument("--samples", default=None, help="the run's results.json: auto/best with the best picked on "
                                                     "the even repetitions and timed on the odd ones")
args = parser.parse_args()



def checked(auto: dict) -> str:
    """The online check's candidate and measured ratio, if one ran in this row."""
    if not auto.get("auto_checked"):
        return ""
    return f"{auto['auto_checked']} {float(auto['auto_check_ratio']):.3f}"


rows = defaultdict(dict)
with open(args.csv) as handle:
    for row in csv.DictReader(handle):
        rows[(row["topology"], row["collective"], int(row["size"]), row["mode"])][row["algorithm"]] = row
to_native, to_best, same_code, chose = [], [], [], defaultdict(int)
print(f"{'topology':24} {'collective':10} {'bytes':>6} {'mode':10} {'auto ran':17} {'auto/nat':>8} "
      f"{'best':17} {'best/nat':>8} {'auto/best':>9}  check")
for (topology, collective, size, mode), entries in rows.items():
    auto = entries.get("auto")
    if auto is None:
        continue
    others = {name: entry for name, entry in entries.items() if name != "auto"}
    best = min(others, key=lambda name: float(others[name]["median_s"]))
    ratio = float(auto["ratio_to_native_median"])
    versus_best = float(auto["median_s"]) / float(others[best]["median_s"])
    to_native.append(ratio)
    to_best.append(versus_best)
    chose[auto["auto_chose"]] += 1
    if auto["auto_chose"] in others:
        same_code.append(float(auto["median_s"]) / float(others[auto["auto_chose"]]["median_s"]))
    if args.over is None or ratio > args.over:
        print(f"{topology:24} {collective:10} {size:6d} {mode:10} {auto['auto_chose']:17} {ratio:8.3f} "
              f"{best:17} {float(others[best]['ratio_to_native_median']):8.3f} {versus_best:9.3f}  {checked(auto)}")
print(f"{len(to_native)} rows; auto ran {dict(chose)}; auto/native worst {max(to_native):.3f}, median "
      f"{statistics.median(to_native):.3f}, rows over 1.05: {sum(r > 1.05 for r in to_native)}; auto/best worst "
      f"{max(to_best):.3f}, median {statistics.median(to_best):.3f}, rows over 1.1: {sum(r > 1.1 for r in to_best)}")
if same_code:
    low, high = min(same_code), max(same_code)
    print(f"same code in two columns (auto / the column of what it ran, {len(same_code)} rows): median "
          f"{statistics.median(same_code):.3f}, range {low:.3f}-{high:.3f}, "
          f"rows differing by over 10 %: {sum(not 1 / 1.1 <= r <= 1.1 for r in same_code)}")


def model_errors(rows: dict) -> list:
    """``(factor, measured / predicted, row, algorithm)`` for every column whose algorithm auto's
    model predicted, worst first (``factor``: :func:`~sparsecoll.tools.bench.report.error_factors`)."""
    columns = [(float(entry["median_s"]) / float(entry["auto_predicted_s"]), row, name)
               for row, entries in rows.items() for name, entry in entries.items()
               if name != "auto" and entry.get("auto_predicted_s")]
    factors = error_factors([ratio for ratio, _, _ in columns])
    return sorted(((float(f), *column) for f, column in zip(factors, columns)), key=lambda e: e[0], reverse=True)


errors = model_errors(rows)
if errors:
    median_error, worst_error = model_error([ratio for _, ratio, _, _ in errors])
    print(f"model error (measured / predicted, {len(errors)} columns): median factor "
          f"{median_error:.2f}, worst {worst_error:.2f}; the five worst:")
    for _, ratio, (topology, collective, size, mode), name in errors[:5]:
        print(f"  {topology:24} {collective:10} {size:6d} {mode:10} {name:17} measured/predicted {ratio:.3f}")


def held_out_best(results: list) -> list:
    """Per row of ``results`` (results.json's) that measured auto: ``(row, best, ratio)``, the best
    other column by its median over the even repetitions, and auto's median over the odd ones
    against that column's."""
    import numpy
    rows = []
    for result in results:
        columns = {name: numpy.asarray(entry["samples"]) for name, entry in result["algorithms"].items()}
        auto = columns.pop("auto", None)
        if auto is None or len(auto) < 4:
            continue
        best = min(columns, key=lambda name: numpy.median(columns[name][0::2]))
        ratio = float(numpy.median(auto[1::2]) / numpy.median(columns[best][1::2]))
        rows.append(((result["topology"], result["collective"], result["size"], result["mode"]), best, ratio))
    return rows


if args.samples:
    import json
    with open(args.samples) as handle:
        held_out = held_out_best(json.load(handle)["results"])
    ratios = [ratio for _, _, ratio in held_out]
    over = [(row, best, ratio) for row, best, ratio in held_out if ratio > 1.1]
    print(f"auto/best, the best picked on the even repetitions and timed on the odd ones ({len(ratios)} rows): "
          f"worst {max(ratios):.3f}, median {statistics.median(ratios):.3f}, rows over 1.1: {len(over)}")
    for (topology, collective, size, mode), best, ratio in over:
        print(f"  {topology:24} {collective:10} {size:6d} {mode:10} {best:17} {ratio:9.3f}")
