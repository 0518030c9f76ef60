"""``sparsecoll cartesian-table``: the paper's Table 1 and Figure 2, from sparsecoll's own schedules.

Träff and Hunold (ICPP 2019), Table 1: for the neighborhoods of all vectors with
coordinates in ``f .. f+n-1`` (minus the zero vector), ``d = 2..5``, ``n = 3..5``,
``f = -1``, the trivial rounds ``t``, the combining rounds ``C``, the allgather and
alltoall volumes ``V`` and the alltoall cut-off ratio ``(t-C)/(V-t)``. Every number here
is counted on the schedules that :mod:`sparsecoll.algorithms.cartesian` builds, then set
beside the paper's; ``*`` marks a difference. No MPI launch is needed.
"""

from __future__ import annotations

#: The paper's Table 1: (d, n) -> (t, C, allgather V, alltoall V, printed ratio).
PAPER_TABLE1 = {
    (2, 3): (8, 4, 8, 12, 1.167), (2, 4): (15, 6, 15, 24, 1.250), (2, 5): (24, 8, 24, 40, 1.133),
    (3, 3): (26, 6, 26, 54, 0.778), (3, 4): (63, 9, 63, 144, 0.688), (3, 5): (124, 12, 124, 300, 0.646),
    (4, 3): (80, 8, 80, 216, 0.541), (4, 4): (255, 12, 255, 768, 0.477), (4, 5): (624, 16, 624, 2000, 0.443),
    (5, 3): (242, 10, 242, 810, 0.411), (5, 4): (1023, 15, 1023, 3840, 0.358),
    (5, 5): (3124, 20, 3124, 12500, 0.331),
}

#: The paper's Figure 2 neighborhood and the volumes the paper gives for its two trees.
FIGURE2_OFFSETS = ((-2, 1, 1), (-1, 1, 1), (1, 1, 1), (2, 1, 1))
FIGURE2_PAPER_VOLUMES = {"increasing dimension order": 12, "decreasing dimension order": 7}

RATIO_DIGITS = 3


def table1_row(d: int, n: int, f: int = -1) -> dict:
    """t, C, both volumes and the cut-off ratio, counted on the library's schedules."""
    from sparsecoll.algorithms.cartesian import allgather_schedule, alltoall_schedule
    from sparsecoll.topology.specs import stencil_offsets
    offsets = stencil_offsets(d, n, f)
    alltoall = alltoall_schedule(offsets, d)
    allgather = allgather_schedule(offsets, d)
    t = len(offsets)
    if alltoall.rounds != allgather.rounds:
        raise AssertionError(f"d={d}, n={n}: alltoall has {alltoall.rounds} rounds, allgather {allgather.rounds}")
    c = alltoall.rounds
    return {"t": t, "C": c, "allgather_V": allgather.volume, "alltoall_V": alltoall.volume,
            "ratio": cutoff_ratio(t, c, alltoall.volume),
            "ratio_with_zero": cutoff_ratio(t + 1, c, alltoall.volume)}


def cutoff_ratio(t: int, c: int, v: int) -> float:
    """The alltoall cut-off ratio ``(t-C)/(V-t)`` (infinite when ``V <= t``)."""
    return (t - c) / (v - t) if v > t else float("inf")


def figure2() -> dict:
    """Allgather tree volumes for Figure 2's neighborhood in several dimension orders."""
    from sparsecoll.algorithms.cartesian import allgather_schedule, increasing_c_order
    offsets = list(FIGURE2_OFFSETS)
    order = increasing_c_order(offsets, 3)
    return {
        "plain order (0, 1, 2)": allgather_schedule(offsets, 3, (0, 1, 2)).volume,
        "reversed order (2, 1, 0)": allgather_schedule(offsets, 3, (2, 1, 0)).volume,
        f"increasing C_k order {order}": allgather_schedule(offsets, 3).volume,
    }


def add_arguments(parser) -> None:
    """Options of ``cartesian-table``."""
    parser.add_argument("-f", "--first", type=int, default=-1,
                        help="offset f of the first neighbor per dimension (default -1, the paper's)")


def _mark(ours, paper, digits=None) -> str:
    if digits is None:
        return f"{ours}" + ("" if ours == paper else f"* (paper {paper})")
    same = round(ours, digits) == round(paper, digits)
    return f"{ours:.{digits}f}" + ("" if same else f"* (paper {paper:.{digits}f})")


def run(args) -> int:
    """Print Table 1 and the Figure 2 check; exit 1 if t, C or a volume differs from the paper."""
    f = args.first
    mismatches = 0
    print(f"Table 1 (Träff & Hunold, ICPP 2019): neighborhoods of all d-vectors with coordinates in "
          f"f..f+n-1, f={f}, minus the zero vector, counted on sparsecoll's schedules")
    print(f"{'d':>2} {'n':>2} {'t':>6} {'C':>4} {'allgather V':>12} {'alltoall V':>11}  "
          f"{'(t-C)/(V-t)':<22} {'same with t+1':<22}")
    for d in range(2, 6):
        for n in range(3, 6):
            row = table1_row(d, n, f)
            paper = PAPER_TABLE1[(d, n)] if f == -1 else None
            if paper is None:
                cells = [str(row[k]) for k in ("t", "C", "allgather_V", "alltoall_V")]
                cells += [f"{row['ratio']:.3f}", f"{row['ratio_with_zero']:.3f}"]
            else:
                ours = (row["t"], row["C"], row["allgather_V"], row["alltoall_V"])
                mismatches += sum(a != b for a, b in zip(ours, paper[:4]))
                cells = [_mark(a, b) for a, b in zip(ours, paper[:4])]
                cells.append(_mark(row["ratio"], paper[4], RATIO_DIGITS))
                cells.append(_mark(row["ratio_with_zero"], paper[4], RATIO_DIGITS))
            print(f"{d:>2} {n:>2} {cells[0]:>6} {cells[1]:>4} {cells[2]:>12} {cells[3]:>11}  "
                  f"{cells[4]:<22} {cells[5]:<22}")
    if f == -1:
        print("* = differs from the paper. (t-C)/(V-t) uses the t, C and alltoall V of the same row; most "
              "printed ratios instead follow from t+1 = n^d (the zero vector counted), and d=2, n=3 "
              "prints 1.167 where both give other values (5/3 = 1.667 with t+1).")
    print()
    print(f"Figure 2: allgather tree for offsets {list(FIGURE2_OFFSETS)}, volume = tree edges "
          "(each edge is one block sent once)")
    for name, volume in figure2().items():
        print(f"  {name:<32} {volume:>3} edges")
    print(f"  paper: {FIGURE2_PAPER_VOLUMES}; the 7-volume tree has 6 edges and 7 nodes (root included), "
          "so the paper's 7 counts nodes")
    return 1 if mismatches else 0
