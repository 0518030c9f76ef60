"""Build algorithms on virtual ranks, verify, and predict latencies (what ``sparsecoll simulate`` runs).

For a topology SPEC every requested registered algorithm is built on N virtual ranks
(:mod:`.harness`), verified, and evaluated with a cost model
(:mod:`sparsecoll.model.evaluate`) for each block size: :func:`simulate` returns predicted
latencies, speedups over ``direct`` and the deterministic counts. ``compare`` evaluates
the same Patterns with further parameter sets (built once, predicted per set). The
command line (options, table, files, figure) is :mod:`sparsecoll.tools.simulate`.
"""

from __future__ import annotations

import time


def parse_labelled_params(texts) -> dict:
    """``["label=path", ...]`` -> ``{label: Machine}`` (for ``--compare-params``)."""
    from ..model.params import Machine
    machines = {}
    for text in texts:
        label, eq, path = str(text).partition("=")
        if not eq or not label or not path:
            raise ValueError(f"compare-params: expected LABEL=FILE, got {text!r}")
        if label in machines:
            raise ValueError(f"compare-params: label {label!r} given twice")
        machines[label] = Machine.load(path)
    return machines


def simulate(ranks: int, topology: str, algorithms, family: str, sizes, machine, placement=None,
             nic: bool = False, duplex: bool = False, verify: bool = True, compare=None) -> dict:
    """Build, verify and evaluate each algorithm; return the JSON-ready results.

    ``placement`` places the ranks for the model and is handed to the algorithms that
    take one (:func:`.harness.placement_options`: distance halving halves down to it).
    ``machine`` gives ``latency`` and ``speedup_over_direct``; ``compare`` (``{label:
    Machine}``) adds the same for each further parameter set under ``by_machine[label]``,
    from the same Patterns.
    """
    compare = dict(compare or {})
    from ..model.evaluate import CompiledPatterns, predict
    from ..topology.specs import generate
    from .harness import build_patterns, placement_options

    start = time.perf_counter()
    adjacency = generate(topology, ranks)
    topologies = adjacency.topologies()
    results = {"ranks": ranks, "topology": topology, "family": family, "sizes": list(sizes),
               "placement": None if placement is None else str(placement), "nic": nic, "duplex": duplex,
               "machine": machine.to_json(), "compare": {k: m.to_json() for k, m in compare.items()},
               "edges": adjacency.edges(),
               "topology_seconds": time.perf_counter() - start, "algorithms": {}}
    for name in algorithms:
        try:
            run = build_patterns(topologies, name, family, placement_options(name, placement), verify=verify)
        except NotImplementedError as exc:
            results["algorithms"][name] = {"unsupported": str(exc)}
            continue
        compiled = CompiledPatterns.from_patterns(run.patterns)
        start = time.perf_counter()
        latencies = predict(compiled, machine, sizes, placement, duplex=duplex, nic=nic)
        by_machine = {label: {"latency": {str(m): t for m, t in
                                          predict(compiled, other, sizes, placement, duplex=duplex, nic=nic).items()}}
                      for label, other in compare.items()}
        results["algorithms"][name] = {
            **run.summary(), "verified": run.verified is not None,
            "verify_seconds": run.info.get("verify_seconds"),
            "build_cpu_seconds": run.info["build_cpu_seconds"],
            "verify_cpu_seconds": run.info.get("verify_cpu_seconds"),
            "predict_seconds": time.perf_counter() - start,
            "latency": {str(m): t for m, t in latencies.items()},
            **({"by_machine": by_machine} if by_machine else {}),
        }
        run = compiled = None
    direct = results["algorithms"].get("direct", {})
    _add_speedups([e for e in results["algorithms"].values() if "latency" in e], direct.get("latency"))
    for label in compare:
        _add_speedups([e["by_machine"][label] for e in results["algorithms"].values() if "by_machine" in e],
                      direct.get("by_machine", {}).get(label, {}).get("latency"))
    return results


def _add_speedups(entries, base) -> None:
    """Set ``speedup_over_direct`` in each entry from ``base``, direct's latencies (skip if None)."""
    if not base:
        return
    for entry in entries:
        entry["speedup_over_direct"] = {m: (base[m] / t if t > 0 else None) for m, t in entry["latency"].items()}
