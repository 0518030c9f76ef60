"""`sparsecoll bench` end to end on a tiny case, and its statistics."""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys

import numpy
import pytest

from sparsecoll.tools.bench.command import parse_modes
from sparsecoll.tools.bench.report import phase_rows, summarize
from sparsecoll.tools.bench.runner import PHASE_FIELDS, measure
from sparsecoll.topology.specs import BUNDLED_MATRIX, matrix_partition

from .conftest import ROOT


@pytest.mark.timeout(600)
def test_bench_tiny_run_writes_complete_results(tmp_path):
    out = tmp_path / "out"
    command = [sys.executable, "-m", "sparsecoll", "bench", "--np", "3", "--topology", "moore:D=2,R=1",
               "--topology", "matrix:", "--collective", "allgather", "--collective", "alltoallv",
               "--sizes", "8,64", "--reps", "6", "--warmup", "1", "--phase-reps", "3",
               "--mode", "persistent,nonpersistent", "--out", str(out)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=540, cwd=ROOT)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert "launching 3 ranks" in run.stdout and "figures:" in run.stdout
    # progress comes through mpiexec's pipe one line per case (8 cases), then a closing line
    assert "] case 1/8: moore D=2 R=1 allgather 8 B" in run.stdout and "] case 8/8: " in run.stdout
    assert run.stdout.index("] case 8/8: ") < run.stdout.index("measured, ", run.stdout.index("] case 8/8: ") + 1)
    data = json.loads((out / "results.json").read_text())
    env = data["environment"]
    assert env["ranks"] == 3 and env["mpi_library"] and env["mpi4py"] and env["cores"] >= 1
    assert "settings" in env and env["reps"] == 6 and env["mode"] == "persistent,nonpersistent"
    assert env["phase_reps"] == 3
    _check_modes_and_phases(data["results"], run.stdout)
    from sparsecoll.algorithms import REGISTRY
    for result in data["results"]:
        names = set(result["algorithms"])
        assert {"native", "direct"} <= names
        for name in REGISTRY:  # every algorithm that supports the topology is there
            if name not in names and not name.startswith("test_"):
                assert REGISTRY[name].unsupported_reason is not None
        native = numpy.array(result["algorithms"]["native"]["samples"])
        for entry in result["algorithms"].values():
            samples = numpy.array(entry["samples"])
            assert len(samples) == 6 and entry["agrees_with_native"]
            assert entry["median"] == pytest.approx(numpy.median(samples))
            assert entry["ratio_median"] == pytest.approx(numpy.median(samples / native))
            assert entry["plan"]["messages_max"] >= 0 and entry["plan"]["steps_max"] >= 0
    assert (out / "results.csv").read_text().count("\n") == 1 + sum(len(r["algorithms"]) for r in data["results"])
    assert list(out.glob("bench_*.png"))


@pytest.mark.timeout(600)
def test_bench_measures_every_pattern_algorithm_once_per_executor_in_the_same_run(tmp_path):
    out = tmp_path / "out"
    command = [sys.executable, "-m", "sparsecoll", "bench", "--np", "4", "--topology", "moore:D=2,R=1",
               "--collective", "alltoall", "--sizes", "8", "--reps", "3", "--warmup", "1", "--phase-reps", "1",
               "--algorithms", "native,direct,direct+coloring,cartesian,auto", "--executors", "steps,dag",
               "--out", str(out)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=540, cwd=ROOT)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    data = json.loads((out / "results.json").read_text())
    assert data["environment"]["executors"] == "steps,dag"
    (result,) = data["results"]
    entries = result["algorithms"]
    assert list(entries) == ["native", "direct[steps]", "direct[dag]", "direct+coloring[steps]",
                             "direct+coloring[dag]", "cartesian[steps]", "cartesian[dag]", "auto"]
    for label, entry in entries.items():
        assert entry["agrees_with_native"] and len(entry["samples"]) == 3, label
        assert entry["executor"] == (label[label.index("[") + 1:-1] if "[" in label else None)
    assert entries["direct+coloring[dag]"]["algorithm"] == "direct"
    assert entries["direct+coloring[dag]"]["options"] == {"coloring": True}
    assert entries["direct+coloring[steps]"]["plan"]["rank0_info"]["colors"] >= 1
    dag_plan, steps_plan = entries["cartesian[dag]"]["plan"], entries["cartesian[steps]"]["plan"]
    assert {k: v for k, v in dag_plan.items() if k != "rank0_info"} == \
        {k: v for k, v in steps_plan.items() if k != "rank0_info"}  # one Pattern, two executors
    assert dag_plan["rank0_info"]["executor"] == "dag" and steps_plan["rank0_info"]["executor"] == "steps"
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert [(row["algorithm"], row["executor"]) for row in rows] == [
        (label, entry["executor"] or "") for label, entry in entries.items()]
    for label in entries:
        assert label in run.stdout
    by_label = {row["algorithm"]: row for row in rows}
    for label in ("direct[steps]", "direct[dag]"):  # a 2x2 Moore grid: 8 edges to 3 ranks, joined on the wire
        assert int(by_label[label]["wire_messages_max"]) == 3 < int(by_label[label]["messages_max"]) == 8
    assert by_label["native"]["wire_messages_max"] == ""  # the library's messages are not counted
    predicted = entries["auto"]["predicted_seconds"]  # auto's model's time for each column it predicted
    assert float(by_label["native"]["auto_predicted_s"]) == predicted["native"] > 0
    assert by_label["auto"]["auto_predicted_s"] == ""


def test_bad_algorithm_options_and_executors_stop_before_launching():
    for bad, word in ((["--algorithms", "direct+colour"], "colour"), (["--executors", "steps,eager"], "executor"),
                      (["--executors", "rma+rtr_tree=two"], "rtr_tree")):
        run = subprocess.run([sys.executable, "-m", "sparsecoll", "bench", "--np", "2", *bad], capture_output=True,
                             text=True, timeout=60, cwd=ROOT)
        assert run.returncode != 0 and "launching" not in run.stdout
        assert run.stderr.strip().splitlines()[-1].startswith("bench: ") and word in run.stderr


def _check_modes_and_phases(results, console):
    """Both modes measured for every case; binds counted; Phase 1/2 recorded and printed."""
    cases = {}
    for result in results:
        cases.setdefault((result["topology"], result["collective"], result["size"]), {})[result["mode"]] = result
    assert len(cases) == 2 * 2 * 2 and all(set(modes) == {"persistent", "nonpersistent"} for modes in cases.values())
    for (topology, _collective, size), modes in cases.items():
        for name, entry in modes["nonpersistent"]["algorithms"].items():
            persistent = modes["persistent"]["algorithms"][name]
            if name == "native":  # the MPI library's blocking and persistent calls: sparsecoll binds nothing
                assert entry["binds_per_call"] == persistent["binds_per_call"] == 0
                assert all(entry[key] is None for key in PHASE_FIELDS)
                continue
            if name == "auto":  # it runs what it chose, per mode; its cell names it
                for mode, chosen in (("nonpersistent", entry), ("persistent", persistent)):
                    assert chosen["chosen"] in modes[mode]["algorithms"], (topology, mode, chosen["chosen"])
                    assert all(chosen[key] is None for key in PHASE_FIELDS)
                    assert f"={chosen['chosen']}" in console
                assert entry["binds_per_call"] == (0 if entry["chosen"] == "native" else 1)
                assert persistent["binds_per_call"] == 0
                continue
            # non-persistent calls bind on every call; persistent requests never during the timed calls
            assert entry["binds_per_call"] == 1 and persistent["binds_per_call"] == 0, (topology, name)
            assert entry["phase1_seconds"] > 0 and entry["phase2_seconds"] >= entry["phase2_bind_seconds"] > 0
            assert entry["phase1_cpu_seconds"] > 0 and entry["phase2_cpu_seconds"] > 0
            assert entry["phase_reps"] == 3
            for key in (*PHASE_FIELDS, "plan"):
                assert entry[key] == persistent[key]  # measured once per case, shared by the modes
            assert entry["plan"]["bytes_max"] > 0 and entry["plan"]["bytes_max"] % size == 0
    rows = phase_rows(results)
    assert {(t, c, n) for t, c, n, *_ in rows} == {(r["topology"], r["collective"], n) for r in results
                                                   for n in r["algorithms"] if n not in ("native", "auto")}
    assert all(set(phase2) == {8, 64} for *_, phase2 in rows)
    assert "Phase 1" in console and "Phase 2, 64 B" in console
    wall, cpu = rows[0][3]
    assert f"{wall:.6f} s ({cpu:.6f})" in console
    moore_direct = cases[("moore D=2 R=1", "allgather", 64)]["persistent"]["algorithms"]["direct"]["plan"]
    assert f"{moore_direct['messages_max']}[{moore_direct['steps_max']}] {moore_direct['bytes_max']}B" in console


@pytest.mark.parametrize("broken", [False, True])
def test_without_native_in_the_list_results_are_still_checked_against_a_native_call(monkeypatch, broken):
    from mpi4py import MPI

    from sparsecoll.tools.bench import runner
    from sparsecoll.tools.bench.workloads import build
    if broken:  # a reference that no algorithm can match: the check must notice
        monkeypatch.setattr(runner, "reference_result", lambda *args: numpy.full(1, 255, dtype=numpy.uint8))
    workload = build("moore:D=2,R=1", MPI.COMM_SELF)
    results = measure(MPI.COMM_SELF, workload, "allgather", 8, ["direct"], modes=["persistent", "blocking"], reps=2,
                      warmup=0, phase_reps=1)
    assert [r["mode"] for r in results] == ["persistent", "blocking"]
    assert all(r["algorithms"]["direct"]["agrees_with_native"] is (not broken) for r in results)


def test_where_the_library_is_known_wrong_rows_compare_with_direct(monkeypatch):
    """A workload the MPI library computes wrongly (model.choice.library_fault, e.g. Open MPI's
    ompi#14430) is checked against direct's result, native column or not, and the row says why."""
    from mpi4py import MPI

    from sparsecoll.tools.bench import runner
    from sparsecoll.tools.bench.workloads import build
    references = []
    real = runner.reference_result

    def recorded(workload, collective, size, algorithm="native"):
        references.append(algorithm)
        return real(workload, collective, size, algorithm)
    monkeypatch.setattr(runner, "reference_result", recorded)
    monkeypatch.setattr(runner, "library_fault", lambda topology, library: "a test fault")
    workload = build("moore:D=2,R=1", MPI.COMM_SELF)
    results = measure(MPI.COMM_SELF, workload, "allgather", 8, ["native", "direct"], modes=["blocking"], reps=2,
                      warmup=0, phase_reps=1)
    assert references == ["direct"]
    assert [(r["reference"], r["library_fault"]) for r in results] == [("direct", "a test fault")]
    assert all(entry["agrees_with_native"] for entry in results[0]["algorithms"].values())


def test_parse_modes_accepts_comma_lists_and_names_the_option():
    assert parse_modes("persistent, nonpersistent,persistent") == ["persistent", "nonpersistent"]
    for bad in ("", "persistant", ",,", "persistent,often"):
        with pytest.raises(argparse.ArgumentTypeError, match="--mode"):
            parse_modes(bad)


def test_measure_rejects_unknown_modes_before_communicating():
    with pytest.raises(ValueError, match="modes"):
        measure(None, None, "allgather", 8, ["native"], modes=["persistent", "sometimes"], reps=3, warmup=0)


@pytest.mark.parametrize("rebind", [False, True])
def test_rebind_binds_on_every_call_and_init_binds_once(monkeypatch, rebind):
    from mpi4py import MPI

    import sparsecoll
    import sparsecoll.runtime.communicator as runtime_module
    binds = []
    real_bind = runtime_module.bind
    monkeypatch.setattr(runtime_module, "bind", lambda *args: binds.append(1) or real_bind(*args))
    graph = MPI.COMM_SELF.Create_dist_graph_adjacent([0, 0], [0, 0])
    try:
        comm = sparsecoll.wrap(graph, "common_neighbor", rebind=rebind)
        send, recv = numpy.array([5], dtype="i4"), numpy.zeros(2, dtype="i4")
        for _ in range(3):
            comm.Neighbor_allgather(send, recv)
        assert len(binds) == comm.schedules_bound == (3 if rebind else 1)
        for _ in range(3):  # nonblocking calls reuse the bound schedule too
            comm.Ineighbor_allgather(send, recv).Wait()
        assert len(binds) == comm.schedules_bound == (6 if rebind else 1)
        before = len(binds)
        request = comm.Neighbor_allgather_init(send, recv)
        for _ in range(3):
            request.Start()
            request.Wait()
        request.Free()
        assert len(binds) - before == 1 and len(binds) == comm.schedules_bound  # *_init binds once in both
        assert recv.tolist() == [5, 5]
    finally:
        graph.Free()


def test_nonblocking_calls_reuse_the_requests_of_their_channel(monkeypatch):
    from mpi4py import MPI

    import sparsecoll
    import sparsecoll.runtime as runtime
    from sparsecoll import execute
    made = []

    class CountingExecutor(execute.StepExecutor):
        def __init__(self, *args):
            made.append(args[2])  # the tag: the channel's
            super().__init__(*args)

    monkeypatch.setitem(execute.EXECUTORS, "steps", CountingExecutor)
    graph = MPI.COMM_SELF.Create_dist_graph_adjacent([0, 0], [0, 0])
    try:
        comm = sparsecoll.wrap(graph, "direct")
        send, recv = numpy.zeros(1, dtype="i4"), numpy.zeros(2, dtype="i4")
        channels = runtime.NONBLOCKING_CHANNELS
        for k in range(2 * channels + 3):
            send[0] = k
            comm.Ineighbor_allgather(send, recv).Wait()
            assert recv.tolist() == [k, k]
        assert len(made) == len(set(made)) == channels  # one per channel, then reused
        # more buffer sets than NONBLOCKING_KEYS: the least recently used pools are freed
        recvs = [numpy.zeros(2, dtype="i4") for _ in range(runtime.NONBLOCKING_KEYS + 1)]
        for k in range(3 * len(recvs)):
            send[0] = 1000 + k
            comm.Ineighbor_allgather(send, recvs[k % len(recvs)]).Wait()
            assert recvs[k % len(recvs)].tolist() == [1000 + k] * 2
        assert len(comm.runtime._idle) == runtime.NONBLOCKING_KEYS
        # overlapping calls each get their own requests
        before = len(made)
        requests = [comm.Ineighbor_allgather(numpy.array([7 + k], dtype="i4"), r) for k, r in enumerate(recvs)]
        for request in reversed(requests):
            request.Wait()
        assert [r.tolist() for r in recvs] == [[7 + k] * 2 for k in range(len(recvs))]
        assert len(made) - before == len(recvs)
    finally:
        graph.Free()


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


def test_matrix_partition_reads_a_dense_matrix_market_file(tmp_path):
    """The 'array' format (dense) reads as a numpy array, which has no tocsr (AttributeError)."""
    import scipy.io
    banded = numpy.eye(6) + numpy.eye(6, k=1) + numpy.eye(6, k=-1)
    scipy.io.mmwrite(str(tmp_path / "dense.mtx"), banded)
    sources, destinations, _, rows = matrix_partition(tmp_path / "dense.mtx", 3)
    assert rows == [2, 2, 2] and sources == destinations == [[1], [0, 2], [1]]


def test_variants_label_one_column_per_executor_and_native_auto_once():
    import sparsecoll
    from sparsecoll.tools.bench.runner import DEFAULT_EXECUTOR, variants
    assert DEFAULT_EXECUTOR == "steps" and set(sparsecoll.executors()) == {"steps", "dag", "rma", "rma_canary"}
    assert [v.label for v in variants(["native", "direct", "auto"])] == ["native", "direct", "auto"]
    columns = variants(["native", "direct+coloring", "auto"], ["steps", "dag"])
    assert [(v.label, v.algorithm, v.options, v.executor) for v in columns] == [
        ("native", "native", {}, "steps"), ("direct+coloring[steps]", "direct", {"coloring": True}, "steps"),
        ("direct+coloring[dag]", "direct", {"coloring": True}, "dag"), ("auto", "auto", {}, "steps")]
    assert [v.label for v in variants(["direct"], ["dag"])] == ["direct[dag]"]
    with pytest.raises(ValueError, match="executor"):
        variants(["direct"], ["eager"])


def test_the_auto_column_is_timed_after_its_one_time_work(monkeypatch, tmp_path):
    """Before the timed repetitions every column runs ``calls_until_settled`` untimed ones (the most
    of the modes measured), so auto's online check (here against a library made slow in the
    profile, so that the model picks a sparsecoll schedule) is over before the first timed
    repetition, in both forms; the row records what the check measured."""
    from mpi4py import MPI

    from sparsecoll.model.profile import BUILTIN, Load, Profile, library_name
    from sparsecoll.runtime.auto import calls_until_settled
    from sparsecoll.tools.bench import runner
    from sparsecoll.tools.bench.workloads import build

    base = BUILTIN.loads[0]
    slow = dict(base.native_per_call, blocking=1e-3, persistent=1e-3)
    profile = Profile((Load(1.0, base.levels, base.sparsecoll_per_call, base.sparsecoll_per_step, slow,
                            dict(base.combined_factor)),), library_name(), source="a slow library")
    profile.save(tmp_path / "slow.json")
    monkeypatch.setenv("SPARSECOLL_PROFILE", str(tmp_path / "slow.json"))
    checked_before_timing = {}
    timed = runner._interleaved

    def interleaved(world, handle, calls, reps):
        for (label, mode), call in calls.items():
            if label == "auto":
                stats = call.comm.plan_stats("allgather", block_bytes=8, form=runner.FORM_OF_MODE[mode])
                checked_before_timing[mode] = stats["auto"]["check"]
        return timed(world, handle, calls, reps)
    monkeypatch.setattr(runner, "_interleaved", interleaved)
    workload = build("moore:D=1,R=1", MPI.COMM_WORLD)
    results = measure(MPI.COMM_WORLD, workload, "allgather", 8, ["native", "auto"],
                      modes=["blocking", "persistent"], reps=3, warmup=0)
    assert set(checked_before_timing) == {"blocking", "persistent"}
    for result in results:
        auto = result["algorithms"]["auto"]
        check = checked_before_timing[result["mode"]]
        assert check is not None and check["candidate"] != "native", result["mode"]
        assert auto["check"] == check and auto["chosen"] == check["winner"] and auto["agrees_with_native"]
        assert auto["settle_calls"] == max(calls_until_settled(form) for form in ("blocking", "persistent"))
        assert auto["settle_seconds"] > 0


def test_the_bench_gives_no_prediction_for_a_row_a_pinned_collective_ran_at_another_class(tmp_path):
    """On this random graph at 8 ranks, rank 1 has no edge, so its alltoall cannot tell its block
    size and auto pins the collective to its first call's class (8 B): the 64 KiB row runs the
    8 B class's choice, whose predictions are not that row's and are left out of results.csv."""
    out = tmp_path / "out"
    command = [sys.executable, "-m", "sparsecoll", "bench", "--np", "8", "--topology", "random:density=0.3,seed=1",
               "--collective", "alltoall", "--sizes", "8,65536", "--reps", "3", "--warmup", "1", "--phase-reps", "1",
               "--algorithms", "native,auto", "--mode", "blocking", "--out", str(out)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    predicted = {row["size"]: row["auto_predicted_s"] for row in csv.DictReader((out / "results.csv").open())
                 if row["algorithm"] == "native"}
    assert float(predicted["8"]) > 0 and predicted["65536"] == "", predicted
    auto = {r["size"]: r["algorithms"]["auto"] for r in json.loads((out / "results.json").read_text())["results"]}
    assert auto[65536]["predicted_seconds"] == {} and "native" in auto[8]["predicted_seconds"]


def test_the_auto_summary_counts_the_rows_auto_predicted_and_says_where_it_predicted_none():
    """The model's error is over the rows with a prediction, and their count is given; rows with
    none (nonblocking calls before any decision, a pinned collective's other classes) give no
    factor (a factor of 1.00 read as a perfect model before)."""
    from sparsecoll.tools.bench.report import auto_summary

    def row(predicted: dict) -> dict:
        return {"algorithms": {"native": {"median": 2.0}, "direct": {"median": 1.0},
                               "auto": {"median": 2.0, "ratio_median": 1.0, "predicted_seconds": predicted}}}
    mixed = auto_summary([row({"native": 1.0, "direct": 1.0}), row({})])
    assert "every algorithm of the 1 row auto predicted): median factor 1.41, worst 2.00" in mixed, mixed
    assert "worst 2.000, median 2.000" in mixed  # auto / best
    none = auto_summary([row({}), row({})])
    assert none.endswith("model error: auto predicted none of these rows") and "factor" not in none, none
