"""Distributed conjugate gradient on a SuiteSparse matrix, with one ``Neighbor_alltoallv`` halo exchange per iteration.

Every rank reads the Matrix Market file (it is small); rank 0 partitions the rows (METIS
through ``pymetis`` on the matrix graph, or contiguous blocks) and broadcasts the owner of
every row. Each rank keeps its rows as a scipy CSR matrix whose columns are numbered
``[owned | halo]``, builds a distributed graph communicator (sources: the ranks owning
columns it needs; destinations: the ranks needing its entries) and solves ``A x = b``,
``b = A @ ones``, by Jacobi-preconditioned CG: per iteration one ``Neighbor_alltoallv``
fills the halo of the search direction (send buffer: the owned entries each neighbor
needs, packed; receive buffer: the halo part of the vector itself) and two ``Allreduce``
give the dot products.

The same solve runs with the MPI library's own ``Neighbor_alltoallv`` (``native``) and
with sparsecoll's (``sparsecoll.wrap(graph)``, algorithm ``auto``, or any algorithm named
by ``--algorithm``), interleaved (the order rotating every solve), ``--repeat`` times each after one
warm-up solve. Rank 0
gathers every solution and checks it against scipy on the whole matrix: the true residual
must be below ``10 * tol`` and the error no larger than that of ``scipy.sparse.linalg.cg``
run with the same preconditioner and tolerance (times 10, or 1e-12); otherwise the exit
status is 1.

Run: ``mpiexec -n 4 python examples/cg.py [--matrix PATH] [--partition metis|block]
[--algorithm compare|NAME[,NAME...]] [--persistent] [--iterations N] [--tol T] [--repeat R]``
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from pathlib import Path

import numpy
import scipy.io
import scipy.sparse
import scipy.sparse.linalg
from mpi4py import MPI

import sparsecoll

DEFAULT_MATRIX = Path(__file__).resolve().parent / "data" / "bcsstk09.mtx"
#: ``--algorithm compare``: the MPI library's own collective against sparsecoll's default.
COMPARE = ["native", "auto"]


def read_matrix(path: Path) -> scipy.sparse.csr_matrix:
    """The matrix in a Matrix Market file, as float64 CSR; exits unless it is real and symmetric with a
    positive diagonal, and ``A @ ones`` (the right-hand side) is not zero."""
    try:
        read = scipy.io.mmread(str(path), spmatrix=False)
    except ValueError as exc:  # not a Matrix Market file
        raise SystemExit(f"--matrix {path}: {exc}") from None
    if numpy.iscomplexobj(read):  # float64 would drop the imaginary parts and solve another matrix
        raise SystemExit(f"--matrix {path}: this CG is real; the matrix is complex")
    matrix = scipy.sparse.csr_matrix(read, dtype=numpy.float64)
    if matrix.shape[0] != matrix.shape[1]:
        raise SystemExit(f"--matrix {path}: CG needs a square matrix, this one is {matrix.shape}")
    if abs(matrix - matrix.T).max() > 0 or (matrix.diagonal() <= 0).any():
        raise SystemExit(f"--matrix {path}: CG needs a symmetric positive definite matrix; this one is not "
                         "symmetric or has a diagonal entry <= 0")
    if not (matrix @ numpy.ones(matrix.shape[0])).any():  # x = 0 solves it: no iteration, nothing to exchange
        raise SystemExit(f"--matrix {path}: b = A @ ones is zero (every row sums to 0, as in a graph Laplacian), "
                         "so x = 0 solves A x = b without an iteration")
    matrix.sort_indices()
    return matrix


def block_partition(nrows: int, nparts: int) -> numpy.ndarray:
    """Owner of each row: ``nparts`` contiguous blocks whose sizes differ by at most one row."""
    return (numpy.arange(nrows, dtype=numpy.int64) * nparts) // nrows


def import_pymetis():
    """The pymetis module, or a clear exit saying how to get it or do without it."""
    try:
        import pymetis
    except ImportError as error:
        raise SystemExit("--partition metis (the default) needs pymetis: pip install pymetis "
                         "(or pip install 'sparsecoll[examples]'), or run with --partition block") from error
    return pymetis


def metis_partition(matrix: scipy.sparse.csr_matrix, nparts: int) -> numpy.ndarray:
    """Owner of each row: METIS's k-way partition of the matrix graph (diagonal dropped)."""
    pymetis = import_pymetis()
    if nparts == 1:
        return numpy.zeros(matrix.shape[0], dtype=numpy.int64)
    graph = scipy.sparse.csr_matrix(matrix, copy=True)
    graph.setdiag(0)
    graph.eliminate_zeros()
    graph = (abs(graph) + abs(graph.T)).tocsr()  # METIS wants both directions of every edge
    graph.sort_indices()
    _, membership = pymetis.part_graph(nparts, pymetis.CSRAdjacency(graph.indptr, graph.indices))
    return numpy.asarray(membership, dtype=numpy.int64)


def partition_rows(matrix: scipy.sparse.csr_matrix, method: str, world: MPI.Comm) -> numpy.ndarray:
    """Owner rank of every row, computed on rank 0 and broadcast (so all ranks agree)."""
    owner = numpy.empty(matrix.shape[0], dtype=numpy.int64)
    if world.Get_rank() == 0:
        if method == "metis":
            owner[:] = metis_partition(matrix, world.Get_size())
        else:
            owner[:] = block_partition(matrix.shape[0], world.Get_size())
    world.Bcast(owner, root=0)
    return owner


class DistributedMatrix:
    """This rank's rows of the matrix, with columns numbered ``[owned | halo]``, and its halo plan."""

    def __init__(self, matrix: scipy.sparse.csr_matrix, owner: numpy.ndarray, world: MPI.Comm):
        rank, size = world.Get_rank(), world.Get_size()
        self.owned = numpy.flatnonzero(owner == rank)  # global row ids, ascending
        rows = matrix[self.owned, :]
        columns = numpy.unique(rows.indices).astype(numpy.int64)
        halo = columns[owner[columns] != rank]
        halo = halo[numpy.lexsort((halo, owner[halo]))]  # grouped by owner rank, ascending within
        self.halo = halo
        # sources: the ranks owning my halo columns, in rank order, with how many columns each
        needed_from = numpy.bincount(owner[halo], minlength=size).astype(numpy.int64)
        self.sources = numpy.flatnonzero(needed_from).tolist()
        self.recv_counts = needed_from[self.sources].astype(numpy.int32)
        # destinations: the ranks that need my entries (one Alltoall of counts tells every rank)
        requested_by = numpy.empty(size, dtype=numpy.int64)
        world.Alltoall(needed_from, requested_by)
        self.destinations = numpy.flatnonzero(requested_by).tolist()
        self.send_counts = requested_by[self.destinations].astype(numpy.int32)
        # which of my entries each destination needs: it sends me their global ids
        local_index = numpy.full(matrix.shape[0], -1, dtype=numpy.int64)
        local_index[self.owned] = numpy.arange(len(self.owned))
        local_index[halo] = len(self.owned) + numpy.arange(len(halo))
        wanted = [numpy.empty(count, dtype=numpy.int64) for count in self.send_counts]
        requests = [world.Irecv(ids, source=dest, tag=7) for ids, dest in zip(wanted, self.destinations)]
        offsets = numpy.concatenate([[0], numpy.cumsum(self.recv_counts)])
        for k, source in enumerate(self.sources):
            requests.append(world.Isend(halo[offsets[k]:offsets[k + 1]], dest=source, tag=7))
        MPI.Request.Waitall(requests)
        wanted_ids = numpy.concatenate(wanted) if wanted else numpy.empty(0, dtype=numpy.int64)
        if (owner[wanted_ids] != rank).any():
            raise RuntimeError("a neighbor asked for entries this rank does not own")
        self.send_index = local_index[wanted_ids]
        self.local = scipy.sparse.csr_matrix((rows.data, local_index[rows.indices], rows.indptr),
                                             shape=(len(self.owned), len(self.owned) + len(halo)))
        self.send_displs = (numpy.cumsum(self.send_counts) - self.send_counts).astype(numpy.int32)
        self.recv_displs = (numpy.cumsum(self.recv_counts) - self.recv_counts).astype(numpy.int32)

    def graph_communicator(self, world: MPI.Comm) -> MPI.Distgraphcomm:
        """The distributed graph of the halo exchange: an edge per (owner -> needing rank) pair."""
        return world.Create_dist_graph_adjacent(self.sources, self.destinations,
                                                sourceweights=self.recv_counts.tolist(),
                                                destweights=self.send_counts.tolist(), reorder=False)


def conjugate_gradient(dist: DistributedMatrix, comm, b: numpy.ndarray, tol: float, max_iterations: int,
                       persistent: bool = False) -> dict:
    """Jacobi-preconditioned CG on ``comm``; stops when ``||b - A x|| <= tol * ||b||`` (scipy's criterion).

    The halo exchange is a blocking ``Neighbor_alltoallv`` per iteration, or with
    ``persistent`` one ``Neighbor_alltoallv_init`` request per solve, started every iteration.

    Returns the owned part of ``x``, the iteration count, whether it converged, and this
    rank's seconds in the whole solve and in the halo exchanges.
    """
    nowned = len(dist.owned)
    inverse_diagonal = 1.0 / dist.local[:, :nowned].diagonal()
    direction = numpy.zeros(nowned + len(dist.halo))  # [owned | halo]: the vector the SpMV reads
    owned_direction, halo_direction = direction[:nowned], direction[nowned:]
    sendbuf = numpy.empty(len(dist.send_index))
    send_spec = [sendbuf, (dist.send_counts, dist.send_displs), MPI.DOUBLE]
    recv_spec = [halo_direction, (dist.recv_counts, dist.recv_displs), MPI.DOUBLE]
    dots = numpy.empty(2)

    def global_sums(*values: float) -> numpy.ndarray:
        """The sums over all ranks of a few local dot products, in one Allreduce."""
        local = numpy.array(values)
        comm.Allreduce(local, dots[:len(values)], op=MPI.SUM)
        return dots[:len(values)]

    request = comm.Neighbor_alltoallv_init(send_spec, recv_spec) if persistent else None
    comm.Barrier()
    start = time.perf_counter()
    exchange_seconds = 0.0
    x = numpy.zeros(nowned)
    residual = b.copy()
    preconditioned = residual * inverse_diagonal
    owned_direction[:] = preconditioned
    rz, rr = global_sums(residual @ preconditioned, residual @ residual)
    threshold = (tol * numpy.sqrt(global_sums(b @ b)[0])) ** 2
    iterations = 0
    while rr > threshold and iterations < max_iterations:
        numpy.take(owned_direction, dist.send_index, out=sendbuf)
        before = time.perf_counter()
        if request is None:
            comm.Neighbor_alltoallv(send_spec, recv_spec)
        else:
            request.Start()
            request.Wait()
        exchange_seconds += time.perf_counter() - before
        product = dist.local @ direction
        alpha = rz / global_sums(owned_direction @ product)[0]
        x += alpha * owned_direction
        residual -= alpha * product
        numpy.multiply(residual, inverse_diagonal, out=preconditioned)
        rz_next, rr = global_sums(residual @ preconditioned, residual @ residual)
        owned_direction *= rz_next / rz
        owned_direction += preconditioned
        rz = rz_next
        iterations += 1
    seconds = time.perf_counter() - start
    if request is not None:
        request.Free()
    return {"x": x, "iterations": iterations, "converged": bool(rr <= threshold),
            "seconds": seconds, "exchange_seconds": exchange_seconds}


def variant_communicator(graph: MPI.Distgraphcomm, algorithm: str):
    """The communicator whose ``Neighbor_alltoallv`` a variant uses: the plain one for ``native``.

    ``sparsecoll.wrap`` returns a communicator on the same handle as ``graph``.
    """
    return graph if algorithm == "native" else sparsecoll.wrap(graph, algorithm)


def check_on_rank0(matrix, b, solutions: dict, tol: float, max_iterations: int) -> tuple:
    """Residuals and errors of the gathered solutions (per variant, a list: one per solve) against
    scipy on the whole matrix; (lines, ok)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", scipy.sparse.linalg.MatrixRankWarning)
        reference = scipy.sparse.linalg.spsolve(matrix.tocsc(), b)
    if not numpy.isfinite(reference).all():  # singular (semi-definite): CG still finds a solution
        return check_singular(matrix, b, solutions, tol)
    scipy_iterations = [0]

    def count(_):
        scipy_iterations[0] += 1

    preconditioner = scipy.sparse.diags(1.0 / matrix.diagonal())
    scipy_x, _ = scipy.sparse.linalg.cg(matrix, b, rtol=tol, maxiter=max_iterations, M=preconditioner,
                                        callback=count)
    norm_b, norm_reference = numpy.linalg.norm(b), numpy.linalg.norm(reference)
    scipy_error = numpy.linalg.norm(scipy_x - reference) / norm_reference
    allowed_error = max(10 * scipy_error, 1e-12)
    lines = [f"scipy.sparse.linalg.cg (same preconditioner and tol): {scipy_iterations[0]} iterations, "
             f"error {scipy_error:.1e} against spsolve"]
    ok = True
    for algorithm, xs in solutions.items():
        residual = max(numpy.linalg.norm(b - matrix @ x) / norm_b for x in xs)
        error = max(numpy.linalg.norm(x - reference) / norm_reference for x in xs)
        passed = residual <= 10 * tol and error <= allowed_error
        ok = ok and passed
        lines.append(f"{algorithm}: {solves(xs)}: residual {residual:.1e}, error {error:.1e} against spsolve: "
                     f"{'ok' if passed else 'FAILED'} (limits {10 * tol:.0e} and {allowed_error:.1e})")
    return lines, ok


def solves(xs: list) -> str:
    """What a check line covers: every solve of a variant, the warm-up's too (the worst of them)."""
    return f"{len(xs)} solve{'s' * (len(xs) > 1)} (the warm-up too), the worst"


def resolved_algorithm(comm, algorithm: str, form: str) -> str:
    """What a variant's exchange ran (``auto``: what it chose; nothing where no iteration exchanged,
    as when the right-hand side is zero)."""
    if algorithm == "native":
        return "native"
    try:
        return comm.resolved_algorithm("alltoallv", form=form)
    except RuntimeError:
        return "no exchange made"


def check_singular(matrix, b, solutions: dict, tol: float) -> tuple:
    """``check_on_rank0`` for a singular matrix, which has many solutions: residuals only."""
    lines = ["spsolve: the matrix is singular, so there is no one solution to compare with; "
             "checked by residual only"]
    ok = True
    for algorithm, xs in solutions.items():
        residual = max(numpy.linalg.norm(b - matrix @ x) / numpy.linalg.norm(b) for x in xs)
        ok = ok and residual <= 10 * tol
        lines.append(f"{algorithm}: {solves(xs)}: residual {residual:.1e}: "
                     f"{'ok' if residual <= 10 * tol else 'FAILED'} (limit {10 * tol:.0e})")
    return lines, ok


def main(argv=None) -> int:
    """Solve with each variant, time it, check it on rank 0; exit status 0 when every check passes."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--matrix", type=Path, default=DEFAULT_MATRIX,
                        help="symmetric positive definite Matrix Market file (default: the bundled bcsstk09)")
    parser.add_argument("--partition", choices=["metis", "block"], default="metis",
                        help="rows per rank: METIS on the matrix graph (needs pymetis) or contiguous blocks")
    parser.add_argument("--algorithm", default="compare",
                        help="'compare' (native and auto) or comma-separated names from sparsecoll.algorithms(); "
                             "native is always run as the baseline")
    parser.add_argument("--iterations", type=int, default=2000, help="maximum CG iterations")
    parser.add_argument("--tol", type=float, default=1e-8, help="stop at ||b - A x|| <= tol * ||b||")
    parser.add_argument("--persistent", action="store_true",
                        help="halo exchange by one persistent request (Neighbor_alltoallv_init) per solve")
    parser.add_argument("--repeat", type=int, default=5, help="timed solves per variant (after one warm-up)")
    args = parser.parse_args(argv)
    if not args.matrix.is_file():
        parser.error(f"--matrix: no such file: {args.matrix}")
    if args.iterations < 1 or args.repeat < 1:
        parser.error(f"--iterations, --repeat: expected at least 1, got {args.iterations}, {args.repeat}")
    if not 0 < args.tol < 1:  # at least one iteration, so that every variant exchanges and is timed
        parser.error(f"--tol: expected a number between 0 and 1, got {args.tol}")
    algorithms = COMPARE if args.algorithm == "compare" else [name.strip() for name in args.algorithm.split(",")]
    algorithms = ["native"] + [name for name in dict.fromkeys(algorithms) if name != "native"]
    unknown = [name for name in algorithms if name not in sparsecoll.algorithms()]
    if unknown:
        parser.error(f"--algorithm: unknown {unknown}; known: {', '.join(sparsecoll.algorithms())}")

    if args.partition == "metis":
        import_pymetis()  # on every rank, so that all of them stop when it is missing
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    matrix = read_matrix(args.matrix)
    owner = partition_rows(matrix, args.partition, world)
    dist = DistributedMatrix(matrix, owner, world)
    graph = dist.graph_communicator(world)
    b_global = matrix @ numpy.ones(matrix.shape[0])
    b = b_global[dist.owned]
    try:  # an algorithm that cannot run alltoallv on this graph says so on every rank, before any message
        comms = {algorithm: variant_communicator(graph, algorithm) for algorithm in algorithms}
        for algorithm, comm in comms.items():
            if algorithm not in ("native", "auto"):
                comm.pattern("alltoallv")
    except ValueError as exc:
        raise SystemExit(f"cg.py: {exc}") from None

    every_solve = {algorithm: [] for algorithm in algorithms}
    for repetition in range(args.repeat + 1):  # repetition 0 warms up (builds the patterns); not timed
        turn = repetition % len(algorithms)  # interleaved, each in every position in turn, so that load on
        for algorithm in algorithms[turn:] + algorithms[:turn]:  # a shared machine hits all variants alike
            every_solve[algorithm].append(
                conjugate_gradient(dist, comms[algorithm], b, args.tol, args.iterations, args.persistent))
    # timed: all but the warm-up, which is checked too (auto's online check alternates its choice
    # with the library's call there)
    results = {algorithm: solves[1:] for algorithm, solves in every_solve.items()}

    # per solve: the slowest rank's times; per variant: the median over the solves, and the quartiles
    # of its exchange's ratio to native's in the same repetition (the two solves ran next to each other)
    summary, exchanges = {}, {}
    for algorithm in algorithms:
        per_iteration, exchange_per_iteration = [], []
        for solve in results[algorithm]:
            steps = max(solve["iterations"], 1)
            per_iteration.append(world.allreduce(solve["seconds"] / steps, op=MPI.MAX))
            exchange_per_iteration.append(world.allreduce(solve["exchange_seconds"] / steps, op=MPI.MAX))
        summary[algorithm] = (statistics.median(per_iteration), statistics.median(exchange_per_iteration))
        exchanges[algorithm] = exchange_per_iteration
    paired = {algorithm: numpy.percentile(numpy.divide(exchanges[algorithm], exchanges["native"]), [25, 50, 75])
              for algorithm in algorithms}
    last = {algorithm: results[algorithm][-1] for algorithm in algorithms}
    gathered = {algorithm: world.gather((dist.owned, [solve["x"] for solve in every_solve[algorithm]]), root=0)
                for algorithm in algorithms}
    degrees = world.gather((len(dist.sources), len(dist.destinations), len(dist.halo), len(dist.owned)), root=0)
    form = "persistent" if args.persistent else "blocking"
    resolved = {algorithm: resolved_algorithm(comms[algorithm], algorithm, form) for algorithm in algorithms}

    ok = True
    if rank == 0:
        solutions = {algorithm: [numpy.empty(matrix.shape[0]) for _ in every_solve[algorithm]]
                     for algorithm in algorithms}
        for algorithm in algorithms:
            for rows, values in gathered[algorithm]:
                for x, part in zip(solutions[algorithm], values):
                    x[rows] = part
        lines, ok = check_on_rank0(matrix, b_global, solutions, args.tol, args.iterations)
        for algorithm in algorithms:
            unconverged = sum(not solve["converged"] for solve in every_solve[algorithm])
            if unconverged:
                ok = False
                lines.append(f"{algorithm}: {unconverged} of its {len(every_solve[algorithm])} solves did NOT "
                             f"converge in {args.iterations} iterations")
        in_degrees = [d[0] for d in degrees]
        halos = [d[2] for d in degrees]
        rows = [d[3] for d in degrees]
        print(f"{args.matrix.name}: {matrix.shape[0]} rows, {matrix.nnz} nonzeros; {size} rank{'s' * (size > 1)}, "
              f"{args.partition} partition: {min(rows)}-{max(rows)} rows, {min(in_degrees)}-{max(in_degrees)} "
              f"neighbors, {min(halos)}-{max(halos)} halo entries per rank")
        print(f"Jacobi-preconditioned CG, b = A @ ones, tol {args.tol:g}, "
              f"{'persistent' if args.persistent else 'blocking'} Neighbor_alltoallv for the halo exchange")
        print(f"per iteration: slowest rank, median of {args.repeat} solves after a warm-up; "
              "exchange/native < 1: faster than the MPI library; per solve: the exchange's ratio to native's "
              "solve of the same round, median (quartiles)")
        native_exchange = summary["native"][1]
        width = max(len(name) for name in algorithms) + 12
        print(f"{'variant':<{width}} {'iterations':>10} {'time/iter':>11} {'exchange/iter':>14} "
              f"{'exchange/native':>16} {'per solve':>22}")
        for algorithm in algorithms:
            seconds, exchange = summary[algorithm]
            name = algorithm if resolved[algorithm] == algorithm else f"{algorithm} ({resolved[algorithm]})"
            low, middle, high = paired[algorithm]
            print(f"{name:<{width}} {last[algorithm]['iterations']:>10} {seconds * 1e6:>8.1f} us "
                  f"{exchange * 1e6:>11.1f} us {exchange / native_exchange:>15.2f}x "
                  f"{middle:>8.2f}x ({low:.2f}-{high:.2f})")
        for line in lines:
            print("check: " + line)
    ok = world.bcast(ok, root=0)
    # the wrapped communicators share the graph's handle: one Free releases it and sparsecoll's state
    next((comm for comm in comms.values() if sparsecoll.is_wrapped(comm)), graph).Free()
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
