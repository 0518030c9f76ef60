"""`sparsecoll bench` end to end on a tiny case, and its statistics."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy
import pytest

from sparsecoll.bench.report import summarize
from sparsecoll.bench.workloads import BUNDLED_MATRIX, matrix_partition

from .conftest import ROOT


@pytest.mark.timeout(600)
def test_bench_tiny_run_writes_complete_results(tmp_path):
    out = tmp_path / "out"
    command = [sys.executable, "-m", "sparsecoll", "bench", "--np", "3", "--topology", "moore:D=2,R=1",
               "--topology", "matrix:", "--collective", "allgather", "--collective", "alltoallv",
               "--sizes", "8,64", "--reps", "6", "--warmup", "1", "--out", str(out)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=540, cwd=ROOT)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert "launching 3 ranks" in run.stdout and "figures:" in run.stdout
    data = json.loads((out / "results.json").read_text())
    env = data["environment"]
    assert env["ranks"] == 3 and env["mpi_library"] and env["mpi4py"] and env["cores"] >= 1
    assert "settings" in env and env["reps"] == 6
    from sparsecoll.algorithms import REGISTRY
    for result in data["results"]:
        names = set(result["algorithms"])
        assert {"native", "direct"} <= names
        for name in REGISTRY:  # every algorithm that supports the topology is there
            if name not in names and not name.startswith("test_"):
                assert REGISTRY[name].unsupported_reason is not None
        native = numpy.array(result["algorithms"]["native"]["samples"])
        for name, entry in result["algorithms"].items():
            samples = numpy.array(entry["samples"])
            assert len(samples) == 6 and entry["agrees_with_native"]
            assert entry["median"] == pytest.approx(numpy.median(samples))
            assert entry["ratio_median"] == pytest.approx(numpy.median(samples / native))
            assert entry["plan"]["messages_max"] >= 0 and entry["plan"]["steps_max"] >= 0
    assert (out / "results.csv").read_text().count("\n") == 1 + sum(len(r["algorithms"]) for r in data["results"])
    assert list(out.glob("bench_*.png"))


def test_summarize_ratios_are_per_repetition_pairs():
    result = {"algorithms": {"native": {"samples": [1.0, 2.0, 4.0]}, "x": {"samples": [2.0, 2.0, 2.0]}}}
    summarize(result)
    x = result["algorithms"]["x"]
    assert x["median"] == 2.0 and x["ratio_median"] == 1.0 and x["speedup_median"] == 1.0
    assert (x["ratio_q1"], x["ratio_q3"]) == (0.75, 1.5)


def test_matrix_partition_is_consistent():
    sources, destinations, needed, rows = matrix_partition(BUNDLED_MATRIX, 4)
    assert sum(rows) == 193
    for rank in range(4):
        assert rank not in sources[rank]
        for s in sources[rank]:
            assert rank in destinations[s] and needed[(s, rank)] > 0
