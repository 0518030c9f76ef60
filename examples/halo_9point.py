"""9-point stencil halo exchange with ``Neighbor_alltoallw`` (Träff and Hunold, ICPP 2019, Listing 3).

Each rank owns an ``n x n`` block of a global matrix, stored with a halo of depth 1 in
an ``(n+2) x (n+2)`` array. One ``Neighbor_alltoallw`` on a Cartesian neighborhood with
the 8 offsets of Listing 3 fills the halo: rows as ``n`` contiguous doubles, columns as
a vector datatype, corners as single doubles, all in the one matrix (send regions are
interior, receive regions are halo). A persistent request (``Neighbor_alltoallw_init``,
the paper's ``Cart_alltoallw_init``) is started once per iteration of a 9-point average.
Rank 0 gathers the result and compares it bit for bit with the same computation done
serially on the whole matrix.

Run: ``mpiexec -n 4 python examples/halo_9point.py [--algorithm cartesian] [--open]``
"""

from __future__ import annotations

import argparse

import numpy
from mpi4py import MPI

import sparsecoll

#: Listing 3's neighborhood order: (row offset, column offset); row 0 is the top.
OFFSETS = [(0, 1), (0, -1), (-1, 0), (1, 0), (-1, 1), (1, 1), (1, -1), (-1, -1)]


def strip(direction: int, n: int, halo: bool) -> tuple:
    """(first index, length) along one axis of the region sent toward / received from ``direction``."""
    if direction == 0:
        return 1, n
    if halo:  # a block moving in +direction arrives in the halo on the opposite side
        return (0 if direction > 0 else n + 1), 1
    return (n if direction > 0 else 1), 1


def region_spec(n: int, halo: bool, row_type, column_type):
    """Counts, byte displacements and datatypes of the 8 regions (Listing 3's ROW, COL, COR)."""
    counts, displs, types = [], [], []
    width = n + 2
    for di, dj in OFFSETS:
        (r0, rows), (c0, cols) = strip(di, n, halo), strip(dj, n, halo)
        if rows == 1 and cols == n:
            datatype = row_type
        elif rows == n and cols == 1:
            datatype = column_type
        else:
            datatype = MPI.DOUBLE
        counts.append(1)
        displs.append((r0 * width + c0) * MPI.DOUBLE.Get_size())
        types.append(datatype)
    return counts, displs, types


def nine_point_average(padded: numpy.ndarray) -> numpy.ndarray:
    """The mean of the 9 cells around each interior cell of a padded array."""
    rows, cols = padded.shape[0] - 2, padded.shape[1] - 2
    total = numpy.zeros((rows, cols))
    for di in (-1, 0, 1):
        for dj in (-1, 0, 1):
            total += padded[1 + di:1 + di + rows, 1 + dj:1 + dj + cols]
    return total / 9.0


def serial(global_matrix: numpy.ndarray, iterations: int, periodic: bool) -> numpy.ndarray:
    """The same iterations on the whole matrix (wrapped or zero-padded borders)."""
    matrix = global_matrix.copy()
    for _ in range(iterations):
        padded = numpy.pad(matrix, 1, mode="wrap" if periodic else "constant")
        matrix = nine_point_average(padded)
    return matrix


def main(argv=None) -> int:
    """Run the halo exchange and the check; exit status 0 when they agree."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=6, help="local block size (n x n per rank)")
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--algorithm", default="cartesian", choices=sorted(sparsecoll.algorithms()),
                        help="sparsecoll algorithm (or native)")
    parser.add_argument("--open", action="store_true", help="non-periodic grid (zero boundary)")
    args = parser.parse_args(argv)
    if args.n < 1 or args.iterations < 0:
        parser.error(f"--n, --iterations: expected at least 1 and 0, got {args.n}, {args.iterations}")

    world = MPI.COMM_WORLD
    dims = MPI.Compute_dims(world.Get_size(), 2)
    periodic = not args.open
    cart = sparsecoll.cart_neighborhood_create(world, dims, [periodic] * 2, OFFSETS, algorithm=args.algorithm)
    n = args.n
    row_type = MPI.DOUBLE.Create_contiguous(n).Commit()
    column_type = MPI.DOUBLE.Create_vector(n, 1, n + 2).Commit()

    shape = (dims[0] * n, dims[1] * n)
    global_matrix = numpy.arange(shape[0] * shape[1], dtype=float).reshape(shape) % 17.0 - 8.0
    a, b = cart.grid.coords(cart.Get_rank())
    matrix = numpy.zeros((n + 2, n + 2))
    matrix[1:-1, 1:-1] = global_matrix[a * n:(a + 1) * n, b * n:(b + 1) * n]

    send = region_spec(n, False, row_type, column_type)
    recv = region_spec(n, True, row_type, column_type)
    request = cart.Neighbor_alltoallw_init([matrix, send[:2], send[2]], [matrix, recv[:2], recv[2]])
    for _ in range(args.iterations):
        request.Start()
        request.Wait()
        matrix[1:-1, 1:-1] = nine_point_average(matrix)
    request.Free()

    blocks = world.gather(((a, b), matrix[1:-1, 1:-1].copy()), root=0)
    ok = True
    if world.Get_rank() == 0:
        result = numpy.empty(shape)
        for (i, j), block in blocks:
            result[i * n:(i + 1) * n, j * n:(j + 1) * n] = block
        expected = serial(global_matrix, args.iterations, periodic)
        ok = bool(numpy.array_equal(result, expected))
        stats = cart.plan_stats("alltoallw")
        print(f"{world.Get_size()} ranks, grid {dims}, {'periodic' if periodic else 'open'}, "
              f"{args.iterations} iterations, algorithm {stats['algorithm']} "
              f"({stats['steps']} steps, {stats['sends']} messages per rank): "
              f"{'matches the serial computation' if ok else 'DIFFERS from the serial computation'}")
    ok = world.bcast(ok, root=0)
    row_type.Free()
    column_type.Free()
    cart.Free()
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
