"""``sparsecoll simulate``: build algorithms on virtual ranks, verify, and predict latencies.

For a topology SPEC every requested registered algorithm is built on ``--ranks`` virtual
ranks, verified, and evaluated with a cost model for each block size
(:func:`sparsecoll.sim.simulate.simulate`) and execution (``--execution steps,dag``: step
by step, and each message as soon as its dependencies allow, side by side). It prints
predicted latencies, speedups over ``direct`` and the deterministic counts; ``--out DIR``
writes ``simulate.json`` and a figure. ``--compare-params LABEL=FILE`` evaluates the same Patterns with further
parameter sets (built once, predicted per set).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from sparsecoll.pattern import FAMILIES

DEFAULT_PARAMS = "sparsecoll-params.json"


def add_arguments(parser) -> None:
    """Options of ``sparsecoll simulate``."""
    parser.add_argument("--ranks", type=int, default=1024, help="number of virtual ranks")
    parser.add_argument("--topology", default="random:density=0.1",
                        help="SPEC: random:density=D[,seed=S] | sparse-alltoall:p=P[,seed=S] | moore:D=d,R=r | "
                             "cross:d=D | hotspot[:root=R] | stencil:d=D,n=N,f=F | "
                             "matrix:PATH (empty PATH: a bundled SuiteSparse matrix; needs scipy), "
                             "as the benchmark's (all but cart)")
    parser.add_argument("--algorithms", default="direct",
                        help="registered algorithms, comma separated, each once, each NAME[+OPTION[=VALUE]]... "
                             "(e.g. direct+coloring)")
    parser.add_argument("--execution", default="steps",
                        help="comma list of steps (a step starts when the rank's previous one is done) and "
                             "dag (each message as soon as its dependencies allow); the first gives 'latency'")
    parser.add_argument("--family", default="allgather", choices=FAMILIES)
    parser.add_argument("--sizes", default="4,64,1024", help="bytes per block, comma separated")
    parser.add_argument("--placement", default=None, help="LxS: L ranks per socket, S sockets per node "
                        "(default: $SPARSECOLL_PLACEMENT where set, which the builders read too)")
    parser.add_argument("--params", default=None,
                        help=f"parameter file (sparsecoll calibrate); default ./{DEFAULT_PARAMS} if present, "
                             "else a normalized Hockney model (alpha = 1, beta = 0: latency in units of alpha)")
    parser.add_argument("--compare-params", action="append", default=[], metavar="LABEL=FILE",
                        help="also predict with this parameter file (repeatable); results under 'by_machine'")
    parser.add_argument("--nic", action="store_true", help="serialize each node's inter-node injections")
    parser.add_argument("--duplex", action="store_true", help="separate send and receive ports")
    parser.add_argument("--no-verify", action="store_true", help="skip verify (faster at large N)")
    parser.add_argument("--out", default=None, help="directory for simulate.json and figures")


def load_machine(path):
    """The Machine of ``path``, of ./sparsecoll-params.json, or the normalized Hockney model."""
    from sparsecoll.model.params import Machine, hockney
    if path is None and os.path.exists(DEFAULT_PARAMS):
        path = DEFAULT_PARAMS
    if path is not None:
        try:
            return Machine.load(path), str(path)
        except (OSError, ValueError) as exc:
            raise ValueError(f"--params: {exc}") from None
    return hockney(1.0, 0.0, "normalized: alpha = 1, beta = 0 (counts messages on the critical path)"), "normalized"


def _table(results: dict) -> str:
    sizes = [str(m) for m in results["sizes"]]
    executions = results.get("executions", ["steps"])
    columns = [(m, execution, f"t({m}B)" + (f"[{execution}]" if len(executions) > 1 else ""))
               for m in sizes for execution in executions]
    head = f"{'algorithm':<18} {'build s':>8} {'steps':>5} {'max sends':>9} {'mean sends':>10} " \
           f"{'p2p msgs':>9} {'p2p bytes':>10} {'depth':>5} " \
           + " ".join(f"{title:>{max(11, len(title))}} {'x':>5}" for _, _, title in columns)
    lines = [head]
    for name, e in results["algorithms"].items():
        if "unsupported" in e:
            lines.append(f"{name:<18} unsupported: {e['unsupported']}")
            continue
        cells = []
        for m, execution, title in columns:
            latency = e["latency_by_execution"][execution][m]
            speed = e.get("speedup_over_direct_by_execution", {}).get(execution, {}).get(m)
            width = max(11, len(title))
            cells.append(f"{latency:{width}.4g} {speed:5.2f}" if speed else f"{latency:{width}.4g} {'-':>5}")
        lines.append(f"{name:<18} {e['build_seconds']:8.2f} {e['max_steps']:5d} {e['max_sends']:9d} "
                     f"{e['mean_sends']:10.1f} {e['max_messages']:9d} {e['max_bytes']:10d} {e['max_depth']:5d} "
                     + " ".join(cells))
    return "\n".join(lines)


def write_outputs(results: dict, out: str) -> list:
    """Write simulate.json and a latency/speedup figure into ``out``; return the paths."""
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "simulate.json"]
    paths[0].write_text(json.dumps(results, indent=2) + "\n")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return paths
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    sizes = results["sizes"]
    executions = results.get("executions", ["steps"])
    for name, e in results["algorithms"].items():
        if "latency" not in e:
            continue
        for execution, style in zip(executions, ("-", "--")):
            label = name + (f" [{execution}]" if len(executions) > 1 else "")
            line, = ax1.plot(sizes, [e["latency_by_execution"][execution][str(m)] for m in sizes], style, marker="o",
                             label=label)
            if "speedup_over_direct_by_execution" in e:
                ax2.plot(sizes, [e["speedup_over_direct_by_execution"][execution][str(m)] for m in sizes], style,
                         marker="o", label=label, color=line.get_color())
    for ax, label in ((ax1, "predicted latency (model units)"), (ax2, "speedup over direct")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("bytes per block")
        ax.set_ylabel(label)
        ax.legend()
    ax1.set_yscale("log")
    fig.suptitle(f"{results['ranks']} virtual ranks, {results['topology']}, {results['family']}")
    fig.tight_layout()
    paths.append(out_dir / "simulate.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)
    return paths


def run(args) -> int:
    """Run ``sparsecoll simulate``."""
    from sparsecoll.model.params import Placement
    from sparsecoll.sim.simulate import model_placement, parse_labelled_params, simulate
    from sparsecoll.topology import specs
    from sparsecoll.topology.placement import ENVIRONMENT, check_override

    from .launch import check_output_path
    try:
        if args.ranks < 1:
            raise ValueError(f"--ranks: expected at least 1, got {args.ranks}")
        # reads a matrix file and checks the values (root=R < ranks, a probability): the user's errors
        specs.generate(args.topology, args.ranks)
        try:
            sizes = [int(s) for s in args.sizes.split(",")]
        except ValueError:
            raise ValueError(f"--sizes: expected comma-separated byte counts, got {args.sizes!r}") from None
        if min(sizes) < 1:
            raise ValueError(f"--sizes: expected positive byte counts, got {args.sizes!r}")
        placement = Placement.parse(args.placement) if args.placement else None
        if placement is not None:  # as the builders that take one check it (a traceback from inside them)
            check_override(placement.L, placement.S, args.ranks, "--placement")
        placement = model_placement(args.ranks, placement)
        machine, where = load_machine(args.params)
        if args.out is not None:  # "" too: check_output_path names it (it was ignored, nothing written)
            check_output_path(args.out, "--out", directory=True)
    except (ValueError, OSError) as exc:
        raise SystemExit(f"simulate: {exc}") from None
    placed = "none (all pairs network)" if placement is None else \
        f"{placement}{'' if args.placement else f' (from {ENVIRONMENT})'}"
    if args.nic and placement is None:
        raise SystemExit("simulate: --nic needs --placement")
    executions = [e.strip() for e in args.execution.split(",") if e.strip()]
    try:
        from sparsecoll.algorithms import AUTO, check_options, parse_variant
        from sparsecoll.model.evaluate import EXECUTIONS

        from .bench.command import algorithm_columns
        names = algorithm_columns(args.algorithms)  # the bench's rule: at least one, each once
        for name in names:
            if parse_variant(name)[0] == AUTO:
                raise ValueError("--algorithms: 'auto' chooses per call on a live communicator; name the algorithms "
                                 "to simulate")
            check_options(*parse_variant(name), args.ranks)
        if not executions or any(e not in EXECUTIONS for e in executions):
            raise ValueError(f"--execution: expected a comma list of {', '.join(EXECUTIONS)}, got {args.execution!r}")
        compare = parse_labelled_params(args.compare_params)
    except (ValueError, TypeError, OSError) as exc:
        raise SystemExit(f"simulate: {exc}") from None
    results = simulate(args.ranks, args.topology, names, args.family, sizes, machine, placement,
                       nic=args.nic, duplex=args.duplex, verify=not args.no_verify, compare=compare,
                       executions=executions)
    print(f"{args.ranks} virtual ranks, topology {args.topology} ({results['edges']} edges), {args.family}, "
          f"{machine.model} model from {where}, placement {placed}"
          f"{', node injection serialized' if args.nic else ''}{', duplex ports' if args.duplex else ''}")
    print("t(mB)[execution]: predicted latency in seconds (model units for the normalized model); x: speedup over "
          "direct in the same execution;"
          " p2p/depth: protocol cost of building (max over ranks)")
    print(_table(results))
    for label in compare:
        print(f"with parameters {label}: " + "; ".join(
            f"{name} " + ", ".join(f"t({m}B) {e['by_machine'][label]['latency'][m]:.4g}"
                                   + (f" x {e['by_machine'][label]['speedup_over_direct'][m]:.2f}"
                                      if e['by_machine'][label].get('speedup_over_direct', {}).get(m) else "")
                                   for m in e['by_machine'][label]['latency'])
            for name, e in results["algorithms"].items() if "by_machine" in e))
    if args.out:
        for path in write_outputs(results, args.out):
            print(f"wrote {path}")
    return 0
