"""Cost models on tiny hand-computed Pattern sets, parameter files, and the 2023 paper's eqs. 1-8."""

from __future__ import annotations

import math

import numpy
import pytest

from sparsecoll.model import paper2023 as eq
from sparsecoll.model.calibrate import fit_hockney
from sparsecoll.model.evaluate import CompiledPatterns, evaluate, predict
from sparsecoll.model.params import Machine, Placement, hockney, loggp
from sparsecoll.pattern import Message, Pattern, Step
from sparsecoll.sim.harness import build_patterns
from sparsecoll.sim.simulate import simulate
from sparsecoll.topology.specs import generate

pytestmark = pytest.mark.timeout(60)

ALPHA, BETA = 2.0, 0.5
M = 4  # bytes per block


def patterns(n, steps_per_rank):
    """Patterns from {rank: [(sends [(peer, nitems)], recvs [(peer, nitems)]), ...]}."""
    out = []
    for r in range(n):
        steps = []
        for sends, recvs in steps_per_rank.get(r, []):
            steps.append(Step(tuple(Message(p, tuple(range(k))) for p, k in sends),
                              tuple(Message(p, tuple(range(k))) for p, k in recvs)))
        out.append(Pattern("allgather", r, tuple(steps)))
    return out


def T(items=1, alpha=ALPHA, beta=BETA):
    return alpha + items * M * beta


def test_hockney_single_message_and_chain():
    one = patterns(2, {0: [([(1, 1)], [])], 1: [([], [(0, 1)])]})
    assert evaluate(one, hockney(ALPHA, BETA), M).latency == pytest.approx(T())
    # 0 -> 1 in step 0, 1 -> 2 (two items) in step 1: step 1 waits for step 0
    chain = patterns(3, {0: [([(1, 1)], [])],
                         1: [([], [(0, 1)]), ([(2, 2)], [])],
                         2: [([], []), ([], [(1, 2)])]})
    prediction = evaluate(chain, hockney(ALPHA, BETA), M)
    assert prediction.ends.tolist() == pytest.approx([T(), T() + T(2), T() + T(2)])


def test_single_port_serializes_sends_and_receives():
    # ranks 1..3 each send one block to rank 0, which sends one block to each of them
    spec = {0: [([(1, 1), (2, 1), (3, 1)], [(1, 1), (2, 1), (3, 1)])]}
    for r in (1, 2, 3):
        spec[r] = [([(0, 1)], [(0, 1)])]
    machine = hockney(ALPHA, BETA)
    # half duplex: rank 0 injects 3 sends, then takes 3 receives (arrived long ago): 6 T (eq. 4)
    assert evaluate(patterns(4, spec), machine, M).latency == pytest.approx(6 * T())
    # full duplex: receives overlap the sends: 3 T
    assert evaluate(patterns(4, spec), machine, M, duplex=True).latency == pytest.approx(3 * T())


def test_receiver_contention_and_late_arrival():
    # 1 and 2 send to 0 at time 0; 3 first sends to 1 (so 1's receive ends at 2T)
    spec = {0: [([], [(1, 1), (2, 1)])], 1: [([(0, 1)], [(3, 1)])], 2: [([(0, 1)], [])], 3: [([(1, 1)], [])]}
    ends = evaluate(patterns(4, spec), hockney(ALPHA, BETA), M).ends
    assert ends.tolist() == pytest.approx([2 * T(), 2 * T(), T(), T()])


def test_loggp_costs():
    L, o, g, G = 5.0, 1.0, 3.0, 0.25
    machine = loggp(L, o, g, G)
    one = patterns(2, {0: [([(1, 1)], [])], 1: [([], [(0, 1)])]})
    assert evaluate(one, machine, M).latency == pytest.approx(2 * o + L + (M - 1) * G)
    # two messages from 0: the second injection waits max(o, g + (m-1)G) = 3.75
    two = patterns(3, {0: [([(1, 1), (2, 1)], [])], 1: [([], [(0, 1)])], 2: [([], [(0, 1)])]})
    ends = evaluate(two, machine, M).ends
    spacing = max(o, g + (M - 1) * G)
    assert ends.tolist() == pytest.approx([spacing + o, 2 * o + L + (M - 1) * G,
                                           spacing + 2 * o + L + (M - 1) * G])


def test_pair_classes_and_node_injection():
    machine = Machine("hockney", {"socket": {"alpha": 1.0, "beta": 0.0}, "node": {"alpha": 2.0, "beta": 0.0},
                                  "network": {"alpha": 10.0, "beta": 0.0}})
    placement = Placement.parse("2x2")  # ranks 0-1 socket 0, 2-3 socket 1, node 0 = ranks 0-3
    assert [placement.pair_class(0, b) for b in (1, 2, 4)] == ["socket", "node", "network"]
    spec = {0: [([(1, 1)], [])], 1: [([], [(0, 1)])], 2: [([(3, 1)], [])], 3: [([], [(2, 1)])]}
    assert evaluate(patterns(4, spec), machine, M, placement).ends.tolist() == [1.0, 1.0, 1.0, 1.0]
    cross = {0: [([(4, 1)], [])], 1: [([(5, 1)], [])], 4: [([], [(0, 1)])], 5: [([], [(1, 1)])]}
    free = evaluate(patterns(8, cross), machine, M, placement)
    assert free.latency == pytest.approx(10.0)
    shared = evaluate(patterns(8, cross), machine, M, placement, nic=True)
    assert sorted(shared.ends[[4, 5]].tolist()) == pytest.approx([10.0, 20.0])


def test_direct_moore_matches_eq4_per_rank():
    run = build_patterns(generate("moore:D=2,R=1", 64), "direct", "allgather")
    alpha, beta = 1e-6, 1e-9
    latencies = predict(run.patterns, hockney(alpha, beta), [4, 1024])
    for m, t in latencies.items():
        assert t == pytest.approx(eq.t_rank_naive(8, 1.0, m, alpha, beta))  # 8 neighbors: 2*8*(alpha+m beta)


@pytest.mark.parametrize("content, named", [
    ('{"model": "hockney", "classes": {"node": {"alpha": 1.0}}}', "beta"),
    ('{"classes": {"node": {"alpha": 1.0, "beta": 0.0}}}', "'model'"),
    ('{"model": "hockney", "classes": {"node": {"alpha": "x", "beta": 0.0}}}', "classes.node.alpha"),
    ('{"model": "hockney", "classes": {"node": {"alpha": NaN, "beta": 0.0}}}', "classes.node.alpha"),
    ('{"model": "hockney", "classes": []}', "'classes'"),
    ('{"format": 1, "loads": []}', "sparsecoll profile"),
    ('[1, 2]', "JSON object"),
    ('{"model": ', "not a JSON"),
])
def test_a_bad_parameter_file_names_the_file_and_the_key(tmp_path, content, named):
    path = tmp_path / "params.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=named) as raised:
        Machine.load(path)
    assert str(path) in str(raised.value)


def test_machine_files_and_fallback(tmp_path):
    machine = Machine("hockney", {"node": {"alpha": 3.0, "beta": 0.1}}, "unit test")
    path = tmp_path / "p.json"
    machine.save(tmp_path / "new" / "p.json", measurements={"reps": 3})  # directories made; measurements kept
    assert Machine.load(tmp_path / "new" / "p.json") == machine
    machine.save(path)
    loaded = Machine.load(path)
    assert loaded == machine
    assert loaded.params("socket") == loaded.params("network") == {"alpha": 3.0, "beta": 0.1}
    with pytest.raises(ValueError):
        Machine("loggp", {"socket": {"L": 1.0}})
    with pytest.raises(ValueError):
        Placement.parse("36by2")


def test_fit_hockney_recovers_parameters():
    sizes = [0, 64, 1024, 65536]
    alpha, beta = fit_hockney(sizes, [3e-6 + s * 2e-10 for s in sizes])
    assert alpha == pytest.approx(3e-6) and beta == pytest.approx(2e-10)


def test_simulate_reports_speedup_and_counts():
    results = simulate(64, "moore:D=2,R=1", ["direct"], "allgather", [4, 64], hockney(1.0, 0.0),
                       Placement(4, 2))
    entry = results["algorithms"]["direct"]
    assert entry["verified"] and entry["max_sends"] == 8
    assert entry["latency"]["4"] == pytest.approx(16.0)
    assert entry["speedup_over_direct"] == {"4": 1.0, "64": 1.0}


# -- the 2023 paper, eqs. 1-8 -------------------------------------------------------

def test_worked_example_message_counts():
    ex = eq.worked_example()
    assert ex["naive_messages"] == pytest.approx(600)          # "the naive algorithm sends 600"
    assert ex["halvings"] == 7                                 # the paper's "7 off-socket"
    assert ex["halving_steps"] == 8 and ex["n_off"] == 8       # eq. 1 as printed: ceil(log2 100) + 1
    assert ex["n_in"] == pytest.approx(20 * (1 - 0.7 ** 9))    # eq. 2 as printed: 19.19
    assert ex["n_in"] == pytest.approx(19.1929, abs=1e-4)
    # for large delta the paper bounds DH at 27 = 7 + L messages; eq. 2 tends to L
    assert eq.n_in(2000, 20, 0.999) == pytest.approx(20, abs=1e-6)
    assert eq.halvings(2000, 20) + 20 == 27


def test_eq1_sparse_limit_and_eq3():
    assert eq.n_off(2000, 20, 0.002) == pytest.approx(0.002 * 1980)   # fewer off-socket neighbors than steps
    assert eq.m_in(2000, 20, 0.3, 4) == pytest.approx(0.3 * eq.n_in(2000, 20, 0.3) * 4)


def test_time_equations():
    n, L, S, d, m, a, b = 2000, 20, 2, 0.3, 64.0, 1.5e-6, 2e-10
    assert eq.t_rank_naive(n, d, m, a, b) == pytest.approx(2 * 600 * (a + m * b))           # eq. 4
    assert eq.t_naive(n, L, S, d, m, a, b) == pytest.approx(40 * eq.t_rank_naive(n, d, m, a, b))  # eq. 5
    k = eq.n_off(n, L, d)
    series = sum(a + 2 ** i * m * b for i in range(int(k) + 1)) - a  # eq. 6's sum has k alphas
    assert eq.t_off_dh(n, L, d, m, a, b) == pytest.approx(series)                              # eq. 6
    assert eq.t_in_dh(n, L, d, m, a, b) == pytest.approx(eq.n_in(n, L, d) * (a + eq.m_in(n, L, d, m) * b))
    total = 2 * S * L * (eq.t_off_dh(n, L, d, m, a, b) + eq.t_in_dh(n, L, d, m, a, b))
    assert eq.t_dh(n, L, S, d, m, a, b) == pytest.approx(total)                                 # eq. 8
    # with 4-byte messages DH's model is about 22x faster than naive at the worked example
    ratio = eq.t_naive(n, L, S, d, 4, a, b) / eq.t_dh(n, L, S, d, 4, a, b)
    assert 20 < ratio < 25
    assert math.isclose(eq.worked_example(1.0, 0.0)["t_naive"] / eq.worked_example(1.0, 0.0)["t_dh"],
                        48000 / (80 * (8 + eq.n_in(n, L, d))))
    assert numpy.isfinite(eq.t_dh(64, 64, 1, 0.5, 4, a, b))


def test_simulate_compares_parameter_sets_from_the_same_patterns(tmp_path):
    slow = hockney(2.0, 0.0, "twice the latency")
    results = simulate(64, "moore:D=2,R=2", ["direct", "cartesian"], "allgather", [4], hockney(1.0, 0.0),
                       compare={"slow": slow})
    for entry in results["algorithms"].values():
        assert entry["by_machine"]["slow"]["latency"]["4"] == pytest.approx(2 * entry["latency"]["4"])
        assert entry["by_machine"]["slow"]["speedup_over_direct"] == entry["speedup_over_direct"]
        assert entry["verify_seconds"] >= 0
    assert results["algorithms"]["cartesian"]["speedup_over_direct"]["4"] > 1
    from sparsecoll.sim.simulate import parse_labelled_params
    path = tmp_path / "slow.json"
    slow.save(path)
    assert parse_labelled_params([f"slow={path}"]) == {"slow": slow}
    (tmp_path / "notes.txt").write_text("not JSON\n")
    # a missing file, a directory, not a parameter file: named as --params' are (OSError without the option before)
    for bad in ("slow", f"={path}", "slow=", f"slow={tmp_path / 'missing.json'}", f"slow={tmp_path}",
                f"slow={tmp_path / 'notes.txt'}"):
        with pytest.raises(ValueError, match="^compare-params"):
            parse_labelled_params([bad])


def test_simulate_hands_the_placement_to_distance_halving():
    one_socket = simulate(64, "random:density=0.3,seed=2", ["distance_halving"], "allgather", [4], hockney(1.0, 0.0))
    placed = simulate(64, "random:density=0.3,seed=2", ["distance_halving"], "allgather", [4], hockney(1.0, 0.0),
                      Placement(8, 2))
    assert one_socket["algorithms"]["distance_halving"]["max_steps"] == 1  # one socket: no halving
    assert placed["algorithms"]["distance_halving"]["max_steps"] > 1


def test_ping_pong_rejects_bad_arguments_before_communicating():
    from mpi4py import MPI

    from sparsecoll.model.calibrate import ping_pong
    with pytest.raises(ValueError, match="pairs"):
        ping_pong(MPI.COMM_SELF, [0, 8], 5, pairs="some")
    with pytest.raises(ValueError, match="reps"):
        ping_pong(MPI.COMM_SELF, [0, 8], 0)


def test_loggp_fit_inverts_the_evaluator():
    """Burst and round-trip times predicted by evaluate give back L, o, G through fit_loggp
    (the burst slope is taken where sending bounds the step, not the first message's latency)."""
    from sparsecoll.model.calibrate import DEFAULT_BURSTS, fit_loggp
    truth = loggp(2e-6, 0.5e-6, 0.0, 0.2e-9)

    def step(k, m):  # ranks 0 and 1 exchange k messages of m bytes each way in one step
        spec = {0: [([(1, 1)] * k, [(1, 1)] * k)], 1: [([(0, 1)] * k, [(0, 1)] * k)]}
        return evaluate(patterns(2, spec), truth, m).latency

    def one_way(m):  # half a round trip
        spec = {0: [([(1, 1)], [])], 1: [([], [(0, 1)])]}
        return evaluate(patterns(2, spec), truth, m).latency
    counts, sizes, smallest = list(DEFAULT_BURSTS), [4, 1024, 4096, 16384], 4
    fit = fit_loggp(counts, [step(k, smallest) for k in counts], sizes, [step(1, m) for m in sizes], one_way(smallest))
    assert fit == pytest.approx({"L": 2e-6, "o": 0.5e-6, "g": 0.0, "G": 0.2e-9}, rel=1e-6, abs=1e-15)
    # a plain least-squares slope over every count would mix in the latency-bound small bursts
    assert step(2, smallest) - step(1, smallest) < 2 * 0.5e-6
    with pytest.raises(ValueError, match="counts"):
        fit_loggp([4, 4], [1.0, 1.0], sizes, [1.0] * 4, 1e-6)
    with pytest.raises(ValueError, match="sizes"):
        fit_loggp(counts, [1.0] * len(counts), [8, 8], [1.0, 1.0], 1e-6)


def test_loggp_measurements_on_one_rank_pair_are_positive():
    """burst_exchange and round_trip_chain time real persistent requests (rank with itself idles)."""
    from mpi4py import MPI

    from sparsecoll.model.calibrate import burst_exchange, round_trip_chain
    times = burst_exchange(MPI.COMM_SELF, [(1, 8), (4, 8)], 3, chain=2)
    assert len(times) == 2 and all(t >= 0 for t in times)
    assert round_trip_chain(MPI.COMM_SELF, 8, 3, chain=2) >= 0
    with pytest.raises(ValueError, match="reps"):
        round_trip_chain(MPI.COMM_SELF, 8, 0)
    with pytest.raises(ValueError, match="points"):
        burst_exchange(MPI.COMM_SELF, [(0, 8)], 3)


# -- execution="dag": the dependency graph run as soon as it may --------------------------

def explicit(n, steps_per_rank):
    """Patterns from {rank: [(sends [(peer, items)], recvs [(peer, items)]), ...]} with explicit items."""
    def messages(pairs):
        return tuple(Message(peer, tuple(items)) for peer, items in pairs)
    return [Pattern("allgather", r, tuple(Step(messages(sends), messages(recvs))
                                          for sends, recvs in steps_per_rank.get(r, [])))
            for r in range(n)]


def test_dag_equals_steps_on_one_step_patterns():
    # integer costs: both evaluations are exact, so they must agree bit for bit
    machines = [hockney(ALPHA, BETA), loggp(5.0, 1.0, 3.0, 0.25)]
    spec = {0: [([(1, 1), (2, 1), (3, 1)], [(1, 1), (2, 1), (3, 1)])]}
    for r in (1, 2, 3):
        spec[r] = [([(0, 1)], [(0, 1)])]
    cases = [patterns(4, spec)]
    for algorithm, options in (("direct", {}), ("direct", {"coloring": True})):
        cases.append(build_patterns(generate("random:density=0.3,seed=3", 32), algorithm, "alltoall", options).patterns)
    for case in cases:
        for machine in machines:
            for duplex in (False, True):
                steps = evaluate(case, machine, M, duplex=duplex)
                dag = evaluate(case, machine, M, duplex=duplex, execution="dag")
                assert dag.ends.tolist() == steps.ends.tolist()


def test_dag_forwards_an_early_arrival_without_waiting_for_the_step():
    # step 0: 1 -> 0 arrives at T; 2 sends to 3, 4, then 0 (arrives at 3T). step 1: 0 forwards 1's block to 3.
    # steps: 0's step 1 starts at 3T, 3 receives at 4T. dag: the forward waits only for 1's block (done at T),
    # leaves at T..2T, before 0 takes 2's block (transfer begun at 2T, done 3T); 3 receives at 2T.
    case = explicit(5, {0: [([], [(1, [(1,)]), (2, [(2,)])]), ([(3, [(1,)])], [])],
                        1: [([(0, [(1,)])], [])],
                        2: [([(3, [(2,)]), (4, [(2,)]), (0, [(2,)])], [])],
                        3: [([], [(2, [(2,)])]), ([], [(0, [(1,)])])],
                        4: [([], [(2, [(2,)])])]})
    machine = hockney(ALPHA, BETA)
    steps = evaluate(case, machine, M)
    dag = evaluate(case, machine, M, execution="dag")
    assert steps.ends.tolist() == pytest.approx([4 * T(), T(), 3 * T(), 4 * T(), 2 * T()])
    assert dag.ends.tolist() == pytest.approx([3 * T(), T(), 3 * T(), 2 * T(), 2 * T()])
    assert steps.latency - dag.latency == pytest.approx(T())
    # LogGP (L 5, o 1, g 3, G 0.25, 4 B: spacing 3.75, a transfer o + 3G + L = 6.75): 0's forward leaves at
    # 6.75 + o = 7.75 instead of 15.25 (2's block is sent at 7.5, arrives at 14.25): 3 gets it at 15.5, not 23
    machine = loggp(5.0, 1.0, 3.0, 0.25)
    assert evaluate(case, machine, M).latency == pytest.approx(23.0)
    assert evaluate(case, machine, M, execution="dag").latency == pytest.approx(15.5)


def test_dag_is_no_theorem_a_ready_later_send_can_take_the_port_first():
    # 0 -> 1 in step 0; 1 forwards it to 2 in step 1, and 2 to 3 in step 2; 1 also sends its own block
    # to 4 in step 2. steps: 3T. dag: 1's own send waits for nothing and takes the port at 0, so the
    # receive from 0 and every forward after it come T later: 4T.
    case = explicit(5, {0: [([(1, [(0,)])], [])],
                        1: [([], [(0, [(0,)])]), ([(2, [(0,)])], []), ([(4, [(1,)])], [])],
                        2: [([], []), ([], [(1, [(0,)])]), ([(3, [(0,)])], [])],
                        3: [([], []), ([], []), ([], [(2, [(0,)])])],
                        4: [([], []), ([], []), ([], [(1, [(1,)])])]})
    machine = hockney(ALPHA, BETA)
    assert evaluate(case, machine, M).latency == pytest.approx(3 * T())
    assert evaluate(case, machine, M, execution="dag").latency == pytest.approx(4 * T())


def test_dag_no_slower_than_steps_on_every_registered_algorithm_without_coloring():
    """Not a theorem (previous test), but true of every registered algorithm's patterns at 64 ranks,
    placements included; with coloring's ordering dependencies only multi-step patterns can lose.
    node_aware loses by at most 0.1%: an agent starts one node pair's message once that pair's
    gathers arrived, and its port is then busy for a gather another pair waits on."""
    from sparsecoll.algorithms import REGISTRY
    from sparsecoll.sim.harness import placement_options
    machines = [hockney(1e-6, 1e-9), loggp(1.2e-6, 4e-7, 5e-7, 3e-10)]
    checked, slower = set(), []
    for name, algorithm in REGISTRY.items():
        if algorithm.runs_library:
            continue
        for topology in ("moore:D=2,R=2", "random:density=0.3,seed=1"):
            for family in ("allgather", "alltoall"):
                for options in ({}, {"coloring": True}):
                    for placement in (None, Placement(4, 2)):
                        try:
                            run = build_patterns(generate(topology, 64), name, family,
                                                 {**options, **placement_options(name, placement)}, verify=False)
                        except NotImplementedError:
                            continue
                        compiled = CompiledPatterns.from_patterns(run.patterns, graph=True)
                        steps_used = max(len(p.steps) for p in run.patterns)
                        for machine in machines:
                            for size in (16, 65536):
                                steps = evaluate(compiled, machine, size).latency
                                dag = evaluate(compiled, machine, size, execution="dag").latency
                                if dag > steps * (1 + 1e-9):
                                    slower.append((name, topology, family, options, placement, steps_used,
                                                   dag / steps))
                        checked.add(name)
    assert checked == {n for n, a in REGISTRY.items() if not a.runs_library}
    assert all((options.get("coloring") and steps_used > 1) or (name == "node_aware" and ratio <= 1.001)
               for name, *_, options, _, steps_used, ratio in slower), slower


def test_execution_is_checked():
    case = patterns(2, {0: [([(1, 1)], [])], 1: [([], [(0, 1)])]})
    with pytest.raises(ValueError, match="execution"):
        evaluate(case, hockney(ALPHA, BETA), M, execution="eager")
    with pytest.raises(ValueError, match="graph=True"):
        evaluate(CompiledPatterns.from_patterns(case), hockney(ALPHA, BETA), M, execution="dag")
    assert predict(case, hockney(ALPHA, BETA), [M], execution="dag") == {M: pytest.approx(T())}
