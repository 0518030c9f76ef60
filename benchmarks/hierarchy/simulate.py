"""Simulated Table I and Table II of the paper on hierarchical shared-memory collectives (no MPI).

Table I analogue: the speedup of the universal hierarchical algorithm (section II) over the MPI
library's flat collectives (MPICH's default algorithms), every collective, at 1024 nodes of 32 ranks.
Table II analogue: the mean time each rank spends inside a Reduce (and an Allreduce) when ranks
arrive uniformly at random in [0, spread * T] (a micro-kernel of T ms with random imbalance before
each call; --spread 1 by default):
the MPI library, fixed leaders and dynamic leaders (section III), at 256 nodes of 32 ranks and at 16
ranks as 2, 4 and 8 emulated nodes. The model is ``sparsecoll.model.hierarchy``; prints Markdown.
"""

from __future__ import annotations

import argparse
import dataclasses

from sparsecoll.model.hierarchy import (
    COLLECTIVES,
    METHODS,
    MPICH_THRESHOLDS,
    Nodes,
    Params,
    flat,
    hierarchical,
    mean_times_inside,
)

#: Table I of the paper, MPICH inter-node routine: (mean, max) speedup over all buffer sizes, 32k cores
PAPER_TABLE_I = {"Allgather": "small 20.3 (31.4), large 22.2 (56.0)", "Allgatherv": "",
                 "Alltoall": "", "Alltoallv": "6.7 (15.3)", "Bcast": "1.1 (1.1)", "Scatter": "0.9 (1.0)",
                 "Gather": "", "Reduce": "", "Allreduce": "", "Reduce_scatter": "45.5 (81.8)"}
#: Table II of the paper: dynamic-leader Reduce speedup over MPICH, 8k cores, by kernel ms and bytes
PAPER_TABLE_II = {0: (0.35, 0.46, 1.1, 1.7), 50: (4.1, 4.3, 7.6, 3.9), 100: (11.2, 11.5, 21.5, 10.1),
                  200: (25.1, 26.0, 52.0, 24.5), 400: (31.0, 33.6, 80.1, 48.3), 800: (25.9, 28.4, 73.6, 57.0)}
PAPER_SIZES = (128, 2048, 32768, 524288)


def integers(text: str) -> list:
    """``"1,2,3"`` -> ``[1, 2, 3]``."""
    return [int(x) for x in text.split(",") if x]


def layout(text: str) -> Nodes:
    """``"NxR"`` -> ``Nodes(N, R)``."""
    count, _, per_node = text.partition("x")
    return Nodes(int(count), int(per_node))


def parse_params(items) -> Params:
    """``["alpha_n=2e-6", ...]`` -> :class:`Params` with those fields overridden."""
    fields = {f.name: f.type for f in dataclasses.fields(Params)}
    values = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or name not in fields:
            raise SystemExit(f"--param: expected NAME=VALUE with NAME in {sorted(fields)}, got {item!r}")
        values[name] = int(value) if fields[name] in (int, "int") else float(value)
    return Params(**values)


def size_name(nbytes: int) -> str:
    """8 -> '8 B', 1024 -> '1 KiB'."""
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def table_one(nodes: Nodes, blocks: list, params: Params) -> list:
    """Markdown lines of the Table I analogue."""
    lines = [f"### Table I analogue: speedup flat / hierarchical, {nodes.ranks} ranks as {nodes.count} nodes "
             f"of {nodes.ranks_per_node}", "",
             "| collective | " + " | ".join(size_name(b) for b in blocks) + " | model mean (max) | paper, MPICH "
             "mean (max) | flat algorithm per size | leaders' algorithm per size | link messages per node, "
             "flat / hierarchical |",
             "|---|" + "---:|" * len(blocks) + "---:|---|---|---|---|"]
    for collective in COLLECTIVES:
        costs = [(flat(collective, nodes, b, params), hierarchical(collective, nodes, b, params)) for b in blocks]
        ratios = [f.seconds / h.seconds for f, h in costs]
        mean = sum(ratios) / len(ratios)
        lines.append(
            f"| {collective} | " + " | ".join(f"{r:.2f}" for r in ratios)
            + f" | {mean:.2f} ({max(ratios):.2f}) | {PAPER_TABLE_I[collective]} | "
            + "; ".join(", ".join(f.algorithm) for f, _ in costs) + " | "
            + "; ".join(", ".join(h.algorithm).removeprefix("leaders: ") for _, h in costs) + " | "
            + "; ".join(f"{f.link_messages} / {h.link_messages}" for f, h in costs) + " |")
    return lines


def table_two(collective: str, nodes: Nodes, sizes: list, kernels_ms: list, spread: float, repetitions: int,
              seed: int, params: Params, paper: bool) -> list:
    """Markdown lines of one Table II analogue: speedups over the MPI library and the mean times."""
    lines = [f"### Table II analogue: {collective}, {nodes.ranks} ranks as {nodes.count} nodes of "
             f"{nodes.ranks_per_node}, arrivals uniform in [0, {spread:g} * kernel], mean over ranks and "
             f"{repetitions} repetitions (seed {seed})", "",
             "Speedup = mean time inside with the MPI library / with dynamic leaders"
             + (" (paper's Table II in brackets)" if paper else "") + "; then the mean times in ms "
             "(MPI library / fixed leaders / dynamic leaders).", "",
             "| kernel | " + " | ".join(f"{size_name(s)} speedup" for s in sizes) + " | "
             + " | ".join(f"{size_name(s)} ms" for s in sizes) + " |",
             "|---:|" + "---:|" * (2 * len(sizes))]
    for kernel in kernels_ms:
        speedups, times = [], []
        for size in sizes:
            mean = mean_times_inside(collective, nodes, size, spread * kernel / 1000, repetitions, seed, params)
            text = f"{mean['MPI library'] / mean['dynamic leaders']:.2f}"
            if paper and kernel in PAPER_TABLE_II and size in PAPER_SIZES:
                text += f" ({PAPER_TABLE_II[kernel][PAPER_SIZES.index(size)]})"
            speedups.append(text)
            times.append(" / ".join(f"{mean[m] * 1000:.3g}" for m in METHODS))
        lines.append(f"| {kernel} ms | " + " | ".join(speedups) + " | " + " | ".join(times) + " |")
    return lines


def main(argv=None) -> None:
    """Print both tables in Markdown."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--table-one", type=layout, default=Nodes(1024, 32), help="NxR for Table I (1024x32)")
    parser.add_argument("--blocks", type=integers, default=[8, 1024, 65536], help="Table I block bytes")
    parser.add_argument("--table-two", type=layout, action="append",
                        help="NxR for Table II, repeatable (256x32, 2x8, 4x4, 8x2)")
    parser.add_argument("--sizes", type=integers, default=list(PAPER_SIZES), help="Table II buffer bytes")
    parser.add_argument("--kernels-ms", type=integers, default=[0, 50, 100, 200, 400, 800],
                        help="Table II micro-kernel times T (arrivals uniform in [0, T])")
    parser.add_argument("--spread", type=float, default=1.0,
                        help="arrivals uniform in [0, spread * T] (1: the whole kernel time)")
    parser.add_argument("--repetitions", type=int, default=10, help="Table II draws per cell")
    parser.add_argument("--seed", type=int, default=0, help="Table II random seed")
    parser.add_argument("--tables", default="1,2", help="which tables: 1, 2 or 1,2")
    parser.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                        help=f"override a model parameter ({', '.join(f.name for f in dataclasses.fields(Params))})")
    args = parser.parse_args(argv)
    params = parse_params(args.param)
    layouts = args.table_two or [Nodes(256, 32), Nodes(2, 8), Nodes(4, 4), Nodes(8, 2)]
    lines = ["Model parameters: " + ", ".join(f"{k}={v!r}" for k, v in dataclasses.asdict(params).items()),
             "", "MPICH thresholds assumed (bytes): "
             + ", ".join(f"{k}={v}" for k, v in MPICH_THRESHOLDS.items()), ""]
    tables = set(args.tables.split(","))
    if not tables or tables - {"1", "2"}:
        raise SystemExit(f"--tables: expected 1, 2 or 1,2, got {args.tables!r}")
    if "1" in tables:
        lines += table_one(args.table_one, args.blocks, params)
    for nodes in layouts if "2" in tables else []:
        for collective in ("Reduce", "Allreduce"):
            lines += [""] + table_two(collective, nodes, args.sizes, args.kernels_ms, args.spread, args.repetitions,
                                      args.seed, params, paper=collective == "Reduce" and nodes.ranks == 8192)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
