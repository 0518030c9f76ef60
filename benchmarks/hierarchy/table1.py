"""Table I analogue: the universal hierarchical collectives against the MPI library's own.

Run: mpiexec -n N python benchmarks/hierarchy/table1.py [--ranks-per-node K[,K...]] [--sizes B[,B...]]
     [--reps R] [--collectives NAME[,NAME...]] [--csv FILE]
For every collective, block size (bytes each rank contributes per peer or in total, as the
collective defines a block) and emulated node size K (``wrap(comm, ranks_per_node=K)``), the
library's call on a duplicate of COMM_WORLD and the hierarchical one are timed in the same
repetitions (order alternating, a barrier before each call), each time the maximum over ranks;
printed: medians, quartiles and the median of the per-repetition ratio hierarchical / library
(below 1: the hierarchical algorithm is faster), with the node structure's deterministic numbers.
"""

from __future__ import annotations

import argparse
import csv

import numpy
from mpi4py import MPI

import sparsecoll

COLLECTIVES = ("Allgather", "Allgatherv", "Alltoall", "Alltoallv", "Bcast", "Gather", "Scatter", "Reduce",
               "Allreduce", "Reduce_scatter_block")


def calls(comm, name: str, nbytes: int, size: int):
    """A zero-argument call of ``name`` on ``comm`` with blocks of ``nbytes`` bytes (float64 for reductions)."""
    reduction = name in ("Reduce", "Allreduce", "Reduce_scatter_block")
    dtype, unit = ("f8", 8) if reduction else ("u1", 1)
    n = max(nbytes // unit, 1)
    counts, displs = [n] * size, [i * n for i in range(size)]
    one, every = numpy.ones(n, dtype), numpy.ones(n * size, dtype)
    out_one, out_every = numpy.zeros(n, dtype), numpy.zeros(n * size, dtype)
    mpi_type = MPI.DOUBLE if reduction else MPI.BYTE
    table = {
        "Allgather": lambda: comm.Allgather(one, out_every),
        "Allgatherv": lambda: comm.Allgatherv(one, [out_every, counts, displs, mpi_type]),
        "Alltoall": lambda: comm.Alltoall(every, out_every),
        "Alltoallv": lambda: comm.Alltoallv([every, counts, displs, mpi_type], [out_every, counts, displs, mpi_type]),
        "Bcast": lambda: comm.Bcast(one, 0),
        "Gather": lambda: comm.Gather(one, out_every, 0),
        "Scatter": lambda: comm.Scatter(every, out_one, 0),
        "Reduce": lambda: comm.Reduce(one, out_one, MPI.SUM, 0),
        "Allreduce": lambda: comm.Allreduce(one, out_one, MPI.SUM),
        "Reduce_scatter_block": lambda: comm.Reduce_scatter_block(every, out_one, MPI.SUM),
    }
    return table[name]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks-per-node", default="2,4", help="emulated node sizes (comma list)")
    parser.add_argument("--sizes", default="8,1024,65536", help="block bytes (comma list)")
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--collectives", default=",".join(COLLECTIVES))
    parser.add_argument("--csv", default=None, help="also write the rows to this CSV file (rank 0)")
    args = parser.parse_args()
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    library = world.Dup()
    rows = []
    for k in [int(x) for x in args.ranks_per_node.split(",")]:
        hier = sparsecoll.wrap(world.Dup(), ranks_per_node=k)
        for name in args.collectives.split(","):
            for nbytes in [int(x) for x in args.sizes.split(",")]:
                pair = {"library": calls(library, name, nbytes, size), "hierarchical": calls(hier, name, nbytes, size)}
                for call in pair.values():
                    call()
                samples = {variant: numpy.empty(args.reps) for variant in pair}
                local = numpy.empty(2)
                for rep in range(args.reps):
                    order = list(pair) if rep % 2 == 0 else list(pair)[::-1]
                    for variant in order:
                        world.Barrier()
                        start = MPI.Wtime()
                        pair[variant]()
                        local[order.index(variant)] = MPI.Wtime() - start
                    worst = numpy.empty(2)
                    world.Allreduce(local, worst, op=MPI.MAX)
                    for i, variant in enumerate(order):
                        samples[variant][rep] = worst[i]
                ratio = samples["hierarchical"] / samples["library"]
                stats = hier.hierarchy_stats()
                row = {"ranks": size, "ranks_per_node": k, "nodes": stats["nodes"], "collective": name,
                       "bytes": nbytes, "library_us": 1e6 * numpy.median(samples["library"]),
                       "hierarchical_us": 1e6 * numpy.median(samples["hierarchical"]),
                       "ratio_median": numpy.median(ratio), "ratio_q1": numpy.percentile(ratio, 25),
                       "ratio_q3": numpy.percentile(ratio, 75), "window_bytes": stats.get("window_bytes")}
                rows.append(row)
                if rank == 0:
                    print(f"{size} ranks, {stats['nodes']} nodes of {k}: {name:21s} {nbytes:7d} B  library "
                          f"{row['library_us']:9.1f} us  hierarchical {row['hierarchical_us']:9.1f} us  ratio "
                          f"{row['ratio_median']:.3f} ({row['ratio_q1']:.3f}-{row['ratio_q3']:.3f})", flush=True)
        hier.Free()
    library.Free()
    if rank == 0:
        print(f"{MPI.Get_library_version().replace(chr(0), '').splitlines()[0].strip()}; {args.reps} repetitions")
        if args.csv:
            with open(args.csv, "w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=list(rows[0]))
                writer.writeheader()
                writer.writerows(rows)


if __name__ == "__main__":
    main()
