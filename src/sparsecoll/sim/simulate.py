"""Build algorithms on virtual ranks, verify, and predict latencies (what ``sparsecoll simulate`` runs).

For a topology SPEC every requested registered algorithm (``NAME[+OPTION[=VALUE]]...``,
:func:`sparsecoll.algorithms.parse_variant`, e.g. ``direct+coloring``) is built on N virtual
ranks (:mod:`.harness`), verified, and evaluated with a cost model
(:mod:`sparsecoll.model.evaluate`) for each block size and execution (``steps``: step by
step; ``dag``: each message as soon as its dependencies allow): :func:`simulate` returns
predicted latencies, speedups over ``direct`` and the deterministic counts. ``compare``
evaluates the same Patterns with further parameter sets (built once, predicted per set).
The command line (options, table, files, figure) is :mod:`sparsecoll.tools.simulate`.
"""

from __future__ import annotations

import time


def parse_labelled_params(texts) -> dict:
    """``["label=path", ...]`` -> ``{label: Machine}`` (for ``--compare-params``); ValueError naming
    ``compare-params`` and the entry where one is malformed or its file cannot be read."""
    from ..model.params import Machine
    machines = {}
    for text in texts:
        label, eq, path = str(text).partition("=")
        if not eq or not label or not path:
            raise ValueError(f"compare-params: expected LABEL=FILE, got {text!r}")
        if label in machines:
            raise ValueError(f"compare-params: label {label!r} given twice")
        try:
            machines[label] = Machine.load(path)
        except (OSError, ValueError) as exc:  # named as --params' are: which option, which file
            raise ValueError(f"compare-params: {label}={path}: {exc}") from None
    return machines


def model_placement(ranks: int, placement=None):
    """The placement the model charges for ``ranks`` virtual ranks: ``placement`` where given,
    else the one ``SPARSECOLL_PLACEMENT`` names (checked for ``ranks``; ValueError naming the
    variable), else None (an all pairs network).

    The builders on virtual ranks read ``SPARSECOLL_PLACEMENT`` themselves where no placement
    is handed to them (:func:`sparsecoll.topology.placement.override`), so the model must
    charge the same one: with the variable set and no placement given, ``node_aware`` and
    ``distance_halving`` were built for its nodes and predicted on an all pairs network.
    """
    if placement is not None:
        return placement
    from ..topology.placement import override
    forced = override(ranks)
    return None if forced is None else forced.placement


def simulate(ranks: int, topology: str, algorithms, family: str, sizes, machine, placement=None,
             nic: bool = False, duplex: bool = False, verify: bool = True, compare=None,
             executions=("steps",)) -> dict:
    """Build, verify and evaluate each algorithm; return the JSON-ready results.

    ``algorithms``: names with options (``direct+coloring``), each a key of the results.
    ``placement`` places the ranks for the model and is handed to the algorithms that
    take one (:func:`.harness.placement_options`: distance halving halves down to it);
    None: :func:`model_placement`'s (``SPARSECOLL_PLACEMENT``'s where set).
    ``machine`` gives ``latency`` and ``speedup_over_direct`` for the first of
    ``executions`` (``"steps"``, ``"dag"``) and ``latency_by_execution`` /
    ``speedup_over_direct_by_execution`` for each; ``compare`` (``{label: Machine}``) adds
    the same for each further parameter set under ``by_machine[label]``, from the same Patterns.
    """
    compare = dict(compare or {})
    from ..algorithms import parse_variant
    from ..model.evaluate import EXECUTIONS, CompiledPatterns, predict
    from ..topology.specs import generate
    from .harness import build_patterns, placement_options

    placement = model_placement(ranks, placement)
    executions = list(dict.fromkeys(executions))
    if not executions or any(e not in EXECUTIONS for e in executions):
        raise ValueError(f"executions: expected some of {EXECUTIONS}, got {executions!r}")
    variants = {text: parse_variant(text) for text in algorithms}
    start = time.perf_counter()
    adjacency = generate(topology, ranks)
    topologies = adjacency.topologies()
    results = {"ranks": ranks, "topology": topology, "family": family, "sizes": list(sizes),
               "placement": None if placement is None else str(placement), "nic": nic, "duplex": duplex,
               "executions": executions,
               "machine": machine.to_json(), "compare": {k: m.to_json() for k, m in compare.items()},
               "edges": adjacency.edges(),
               "topology_seconds": time.perf_counter() - start, "algorithms": {}}

    def latencies(compiled, parameters) -> dict:
        by_execution = {execution: {str(m): t for m, t in predict(compiled, parameters, sizes, placement, duplex=duplex,
                                                                   nic=nic, execution=execution).items()}
                        for execution in executions}
        return {"latency": by_execution[executions[0]], "latency_by_execution": by_execution}

    for label, (name, options) in variants.items():
        try:
            run = build_patterns(topologies, name, family, {**placement_options(name, placement), **options},
                                 verify=verify)
        except NotImplementedError as exc:
            results["algorithms"][label] = {"unsupported": str(exc)}
            continue
        compiled = CompiledPatterns.from_patterns(run.patterns, graph="dag" in executions)
        start = time.perf_counter()
        predicted = latencies(compiled, machine)
        by_machine = {other_label: latencies(compiled, other) for other_label, other in compare.items()}
        results["algorithms"][label] = {
            **run.summary(), "options": options, "verified": run.verified is not None,
            "verify_seconds": run.info.get("verify_seconds"),
            "build_cpu_seconds": run.info["build_cpu_seconds"],
            "verify_cpu_seconds": run.info.get("verify_cpu_seconds"),
            "predict_seconds": time.perf_counter() - start,
            **predicted,
            **({"by_machine": by_machine} if by_machine else {}),
        }
        run = compiled = None
    direct = results["algorithms"].get("direct", {})
    _add_speedups([e for e in results["algorithms"].values() if "latency" in e], direct)
    for label in compare:
        _add_speedups([e["by_machine"][label] for e in results["algorithms"].values() if "by_machine" in e],
                      direct.get("by_machine", {}).get(label, {}))
    return results


def _add_speedups(entries, direct: dict) -> None:
    """Set ``speedup_over_direct`` (and ``..._by_execution``) in each entry from ``direct``'s
    latencies, execution by execution (skip if direct has none)."""
    if "latency_by_execution" not in direct:
        return
    for entry in entries:
        entry["speedup_over_direct_by_execution"] = {
            execution: {m: (direct["latency_by_execution"][execution][m] / t if t > 0 else None)
                        for m, t in latency.items()}
            for execution, latency in entry["latency_by_execution"].items()}
        entry["speedup_over_direct"] = next(iter(entry["speedup_over_direct_by_execution"].values()))
