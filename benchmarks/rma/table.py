"""The RMA study's table: median microseconds of direct[steps], direct[rma], direct[rma_canary] and native.

Run: python benchmarks/rma/table.py [--results DIR]   (reads PREFIX-LIB-npN/*/results.json: results-*-np*
next to this file by default)
"""

import argparse
import glob
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--results", default=HERE, help="folder holding results-*-np*/ (default: this script's)")
args = parser.parse_args()
COLUMNS = ("native", "direct[steps]", "direct[rma]", "direct[rma_canary]")

print("| library | ranks | workload | block | native | steps | rma (PSCW) | rma_canary | rma / steps "
      "| canary / steps |")
print("|---|---|---|---|---|---|---|---|---|---|")
for path in sorted(glob.glob(os.path.join(args.results, "*-np*", "*", "results.json"))):
    folder = os.path.basename(os.path.dirname(os.path.dirname(path)))  # results-LIB-npN (or rma-LIB-npN)
    library, ranks = folder.split("-", 1)[1].rsplit("-np", 1)
    workload = os.path.basename(os.path.dirname(path))
    for row in json.load(open(path))["results"]:
        us = {name: row["algorithms"][name]["median"] * 1e6 for name in COLUMNS}
        cells = " | ".join(f"{us[name]:.1f}" for name in COLUMNS)
        print(f"| {library} | {ranks} | {workload} | {row['size']} | {cells} | "
              f"{us['direct[rma]'] / us['direct[steps]']:.2f} | {us['direct[rma_canary]'] / us['direct[steps]']:.2f} |")
