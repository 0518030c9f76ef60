"""``sparsecoll calibrate``: measure Hockney's alpha and beta with a ping-pong and save them.

Rank 0 and rank 1 exchange messages of each size back and forth; half the median round
trip is the one-way time ``t(m)``, and a least-squares line ``t(m) = alpha + m * beta``
over all sizes gives the parameters (Hockney 1994, the model of the 2023 paper §V). The
file is a :class:`~sparsecoll.model.params.Machine` in JSON, for the pair class the two
ranks form (``--pair-class``; other classes fall back to it). No presets ship: the papers
state no numeric parameters for their machines.
"""

from __future__ import annotations

import json
import platform
import time

import numpy

DEFAULT_SIZES = (0, 8, 64, 512, 4096, 32768, 262144, 1048576)


def fit_hockney(sizes, seconds) -> tuple:
    """Least-squares ``(alpha, beta)`` of ``seconds = alpha + size * beta`` (clipped at 0)."""
    sizes = numpy.asarray(sizes, dtype=float)
    seconds = numpy.asarray(seconds, dtype=float)
    if sizes.size < 2 or numpy.ptp(sizes) == 0:
        raise ValueError("sizes: need at least two different message sizes to fit alpha and beta")
    beta, alpha = numpy.polyfit(sizes, seconds, 1)
    return max(float(alpha), 0.0), max(float(beta), 0.0)


def ping_pong(comm, sizes, reps: int) -> list:
    """Half the median round-trip time per size between ranks 0 and 1 (others idle)."""
    from mpi4py import MPI
    rank = comm.Get_rank()
    times = []
    for size in sizes:
        buf = numpy.zeros(max(size, 1), dtype="u1")
        view = [buf, size, MPI.BYTE]
        samples = []
        for rep in range(reps + 2):
            comm.Barrier()
            t0 = time.perf_counter()
            if rank == 0:
                comm.Send(view, 1, 7)
                comm.Recv(view, 1, 7)
            elif rank == 1:
                comm.Recv(view, 0, 7)
                comm.Send(view, 0, 7)
            if rep >= 2:  # two warm-up round trips
                samples.append((time.perf_counter() - t0) / 2)
        times.append(float(numpy.median(samples)) if rank == 0 else 0.0)
    return comm.bcast(times, root=0)


def add_arguments(parser) -> None:
    """Options of ``sparsecoll calibrate``."""
    parser.add_argument("--out", default="sparsecoll-params.json", help="parameter file to write")
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)),
                        help="message sizes in bytes, comma separated")
    parser.add_argument("--reps", type=int, default=200, help="round trips per size")
    parser.add_argument("--pair-class", default="socket", choices=("socket", "node", "network"),
                        help="the pair class the two ranks form (default: socket)")


def _main(args) -> int:
    from mpi4py import MPI

    from .params import hockney
    comm = MPI.COMM_WORLD
    if comm.Get_size() < 2:
        raise SystemExit("calibrate: needs at least 2 ranks")
    sizes = [int(s) for s in args.sizes.split(",")]
    times = ping_pong(comm, sizes, args.reps)
    if comm.Get_rank() == 0:
        alpha, beta = fit_hockney(sizes, times)
        source = (f"sparsecoll calibrate on {platform.node()}, {MPI.Get_library_version().splitlines()[0]}, "
                  f"ping-pong ranks 0-1, {args.reps} round trips per size, "
                  f"{time.strftime('%Y-%m-%d')}")
        machine = hockney(alpha, beta, source, args.pair_class)
        data = machine.to_json()
        data["measurements"] = {"sizes": sizes, "one_way_seconds": times}
        with open(args.out, "w") as f:
            json.dump(data, f, indent=2)
            f.write("\n")
        print(f"{'bytes':>9} {'one-way us':>11} {'fit us':>9}")
        for size, t in zip(sizes, times):
            print(f"{size:9d} {t * 1e6:11.2f} {(alpha + size * beta) * 1e6:9.2f}")
        print(f"alpha = {alpha * 1e6:.3f} us, beta = {beta * 1e9:.4f} ns/byte "
              f"({1 / beta / 1e9 if beta else float('inf'):.2f} GB/s); written to {args.out}")
    return 0


def run(args) -> int:
    """Run the ping-pong under mpiexec (launching 2 ranks when not already launched)."""
    from ..launch import inside_mpi_launch, relaunch
    if not inside_mpi_launch():
        return relaunch(2, ["calibrate", "--out", args.out, "--sizes", args.sizes, "--reps", str(args.reps),
                            "--pair-class", args.pair_class])
    return _main(args)
