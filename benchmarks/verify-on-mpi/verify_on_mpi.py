"""The combining algorithms' Patterns built on real MPI ranks, proved by verify and run.

For every topology SPEC and algorithm, each rank builds its Pattern through
``sparsecoll.wrap`` (Phase 1 runs over the MPI library, not the simulator); rank 0 gathers
all Patterns and Topologies and runs :func:`sparsecoll.verify.verify`; then the collective
runs once and its result is compared bit for bit with ``native`` (with ``direct`` where
Open MPI's own call would hang, open-mpi/ompi#14452). One line per case:
maximum messages per rank against direct's, steps, verify result, build seconds.

    python benchmarks/verify-on-mpi/verify_on_mpi.py --np 32 [--specs "SPEC;SPEC"] [--algorithms ...] [--placement 4x2]

``--np N`` launches itself with the installed wheel's ``mpiexec`` (sparsecoll.tools.launch);
without it the script expects to run inside an mpiexec launch. Exit status 1 if any case
fails.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

RANDOM = [f"random:density={d},seed=1" for d in (0.05, 0.1, 0.2, 0.4, 0.8)]
MOORE = [f"moore:D={D},R={R}" for D in (2, 3, 4) for R in (1, 2, 3)]


def parse_args(argv=None):
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--np", type=int, default=None, help="launch on this many ranks")
    parser.add_argument("--specs", default=";".join(RANDOM + MOORE), help="topology SPECs separated by ';'")
    parser.add_argument("--algorithms", default="common_neighbor,distance_halving")
    parser.add_argument("--placement", default="4x2", help="LxS for distance_halving (ranks_per_socket x sockets)")
    return parser.parse_args(argv)


def run_case(world, spec: str, algorithm: str, family: str, options: dict) -> tuple:
    """Build, verify (rank 0) and run one case; (ok, line) on every rank."""
    import numpy
    from mpi4py import MPI

    import sparsecoll
    from sparsecoll.pattern import stats
    from sparsecoll.topology.generators import create_dist_graph
    from sparsecoll.topology.specs import generate
    from sparsecoll.verify import VerificationError, verify

    raw = create_dist_graph(world, generate(spec, world.Get_size()))
    try:
        comm = sparsecoll.wrap(raw, algorithm, **options)
        start = MPI.Wtime()
        pattern = comm.pattern(family)
        build = world.allreduce(MPI.Wtime() - start, op=MPI.MAX)
        direct = sparsecoll.wrap(raw, "direct").pattern(family)
        gathered = world.gather((pattern, comm.neighborhood, stats(direct)["sends"]), root=0)
        outcome = "ok"
        if world.Get_rank() == 0:
            try:
                verify([g[0] for g in gathered], [g[1] for g in gathered])
            except VerificationError as error:
                outcome = f"VERIFY FAILED: {error}"
        outcome = world.bcast(outcome, root=0)
        indegree, outdegree, _ = raw.Get_dist_neighbors_count()
        rank = world.Get_rank()
        block = 2
        send = (numpy.arange(block * (1 if family == "allgather" else outdegree), dtype="i8") + 1000 * rank)
        got = numpy.full(block * indegree, -1, dtype="i8")
        want = numpy.full(block * indegree, -2, dtype="i8")
        method = "Neighbor_allgather" if family == "allgather" else "Neighbor_alltoall"
        getattr(comm, method)(send, got)
        # Open MPI 5.0 hangs where a rank has exactly one of in- and out-degree zero
        # (open-mpi/ompi#14452); there the reference is direct (conformance-tested).
        one_sided = world.allreduce((indegree == 0) != (outdegree == 0), op=MPI.LOR)
        reference = "direct" if one_sided and "Open MPI" in MPI.Get_library_version() else "native"
        getattr(sparsecoll.wrap(raw, reference), method)(send, want)
        same = world.allreduce(int(got.tolist() == want.tolist()), op=MPI.MIN)
        if outcome == "ok" and not same:
            outcome = f"RESULT DIFFERS FROM {reference.upper()}"
        elif reference != "native":
            outcome += " (result checked against direct: ompi#14452)"
        line = None
        if rank == 0:
            mine = [stats(g[0]) for g in gathered]
            msgs = max(s["sends"] for s in mine)
            direct_msgs = max(g[2] for g in gathered)
            steps = max(s["steps"] for s in mine)
            line = (f"{spec:28s} {algorithm:17s} {family:9s} msgs {msgs:4d} / direct {direct_msgs:4d} "
                    f"({msgs / max(direct_msgs, 1):.2f})  steps {steps}  build {build:7.3f} s  {outcome}")
        return outcome.startswith("ok"), line
    finally:
        raw.Free()


def main(argv=None) -> int:
    """Launch (``--np``) or run every case on this launch's ranks."""
    args = parse_args(argv)
    if args.np is not None:
        from sparsecoll.tools.launch import mpiexec_command
        rest = [a for a in (argv if argv is not None else sys.argv[1:])]
        i = rest.index("--np")
        del rest[i:i + 2]
        command, env, settings = mpiexec_command(args.np, [sys.executable, __file__, *rest])
        print(f"launching {args.np} ranks: {' '.join(f'{k}={v}' for k, v in settings.items())}", flush=True)
        return subprocess.call(command, env=env)
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    L, S = (int(x) for x in args.placement.split("x"))
    failures = 0
    if world.Get_rank() == 0:
        print(f"{world.Get_size()} ranks, {MPI.Get_library_version().replace(chr(0), '').splitlines()[0]}", flush=True)
    for spec in args.specs.split(";"):
        for algorithm in args.algorithms.split(","):
            families = ("allgather",) if algorithm == "distance_halving" else ("allgather", "alltoall")
            options = {"ranks_per_socket": L, "sockets_per_node": S} if algorithm == "distance_halving" else {}
            for family in families:
                ok, line = run_case(world, spec, algorithm, family, options)
                failures += not ok
                if line is not None:
                    print(line, flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
