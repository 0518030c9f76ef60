"""Replay auto's choices under a profile on the measurements of earlier runs (no timing).

For every row of the auto bench (the default topologies, allgather and alltoall, 8 B to 64 KiB,
blocking and persistent), every rank builds the row's communicator, makes one call so auto
decides, and reads what a call of that row's form and size runs (``plan_stats``). Rank 0 then
looks each choice up in the ``results.csv`` of earlier runs, whose bench timed every algorithm,
and prints what auto's ratio to ``native`` and to the row's best algorithm would have been:

    SPARSECOLL_PROFILE=profile.json mpiexec -n 8 python benchmarks/auto/replay.py \\
        benchmarks/auto/ninth-run/mpich/results.csv [more results.csv ...]

So a change to the model or the calibration can be judged on many runs' measurements at once
(a replay is as good as those runs' medians; it does not time anything).
"""

from __future__ import annotations

import argparse
import csv
import statistics

from mpi4py import MPI

import sparsecoll
from sparsecoll.tools.bench.command import DEFAULT_TOPOLOGIES
from sparsecoll.tools.bench.runner import make_buffers
from sparsecoll.tools.bench.workloads import build

SIZES = (8, 256, 4096, 65536)
FORMS = ("blocking", "persistent")


def choices(world) -> list:
    """``(topology, collective, size, form, algorithm)`` per row: what auto runs there."""
    rows = []
    for spec in DEFAULT_TOPOLOGIES:
        workload = build(spec, world)
        for collective in ("allgather", "alltoall"):
            for size in SIZES:
                comm = sparsecoll.wrap(workload.comm)  # a fresh decision per size, as the bench's rows
                buffers = make_buffers(workload, collective, size)
                getattr(comm, "Neighbor_" + collective)(buffers.sendspec, buffers.recvspec)
                for form in FORMS:
                    chosen = comm.plan_stats(collective, block_bytes=size, form=form)["auto"]["algorithm"]
                    rows.append((workload.name.split()[0], collective, size, form, chosen))
    return rows


def replay(rows: list, path: str) -> str:
    """One line: auto's ratios had it run ``rows``' choices in the run of ``path``."""
    measured = {}
    for row in csv.DictReader(open(path)):
        key = (row["topology"].split()[0], row["collective"], int(row["size"]), row["mode"])
        measured.setdefault(key, {})[row["algorithm"]] = float(row["ratio_to_native_median"])
    to_native, to_best, ran = [], [], {}
    for topology, collective, size, form, chosen in rows:
        row = measured.get((topology, collective, size, form))
        if row is None or chosen not in row:
            continue
        best = min(value for name, value in row.items() if name != "auto")
        to_native.append(row[chosen])
        to_best.append(row[chosen] / best)
        ran[chosen] = ran.get(chosen, 0) + 1
    if not to_native:
        return f"{path}: no row of this replay was measured there"
    return (f"{path}: {len(to_native)} rows, auto would run {ran}; auto/native worst {max(to_native):.3f}, "
            f"median {statistics.median(to_native):.3f}; auto/best worst {max(to_best):.3f}, "
            f"median {statistics.median(to_best):.3f}, rows over 1.1: {sum(r > 1.1 for r in to_best)}")


def main(paths: list) -> None:
    """Replay the choices of this launch's profile on each ``results.csv`` in ``paths``."""
    world = MPI.COMM_WORLD
    rows = choices(world)
    if world.Get_rank() == 0:
        for path in paths:
            print(replay(rows, path))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Replay auto's choices under $SPARSECOLL_PROFILE on earlier "
                                     "runs' measurements (launch on the bench's rank count, e.g. mpiexec -n 8).")
    parser.add_argument("results", nargs="+", help="results.csv files of runs of benchmarks/auto/run.sh")
    main(parser.parse_args().results)
