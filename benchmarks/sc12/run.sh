#!/bin/sh
# SC12 (Hoefler, Schneider) section IV-B workloads with sparsecoll bench, every pattern-building
# algorithm on both executors (steps, dag) in the same interleaved repetitions as native:
# Fig. 9 sparse alltoall A(16 B, p), Figs. 10-11 Cartesian alltoall (2-D 5-point, 4-D 9-point),
# the hotspot graph (when that spec is registered) and the SpMV halo of aug2dc.
# usage: sh benchmarks/sc12/run.sh VENV NAME   (e.g. .venv mpich, .venv-ompi openmpi)
# environment: NP (ranks, default 8), REPS (default 100), MODE (default blocking,persistent), RESULTS (folder),
#              HOTSPOT (its SPEC, default hotspot:), MATRIX (default ../shared/data/matrices/aug2dc_reconstructed.mtx)
set -e
VENV=${1:-.venv}
NAME=${2:-mpich}
NP=${NP:-8}
REPS=${REPS:-100}
MODE=${MODE:-blocking,persistent}
HERE=$(dirname "$0")
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${RESULTS:-$HERE/results-$NAME}
HOTSPOT=${HOTSPOT:-hotspot:}
MATRIX=${MATRIX:-$ROOT/../shared/data/matrices/aug2dc_reconstructed.mtx}
BENCH="$VENV/bin/sparsecoll bench --np $NP --reps $REPS --mode $MODE --executors steps,dag"

# loggp_tree is measured where it is registered (it lands on its own branch)
TREE=$("$VENV/bin/python" -c "from sparsecoll.algorithms import REGISTRY; print(',loggp_tree' if 'loggp_tree' in REGISTRY else '')")
[ -n "$TREE" ] || echo "note: loggp_tree is not registered in this install; measuring without it"
mkdir -p "$OUT"

# Fig. 9: sparse alltoall A(16 B, p), p = 0.1 .. 0.9 (the paper: 1024 processes, coloring on)
$BENCH --collective alltoall --sizes 16 \
    --topology sparse-alltoall:p=0.1 --topology sparse-alltoall:p=0.3 --topology sparse-alltoall:p=0.5 \
    --topology sparse-alltoall:p=0.7 --topology sparse-alltoall:p=0.9 \
    --algorithms "native,direct,direct+coloring,common_neighbor$TREE" \
    --out "$OUT/fig9" | tee "$OUT/fig9.txt"

# Figs. 10-11: MPI_Dims_create + MPI_Cart_create, periodic; 2-D (4 neighbors) and 4-D (8 neighbors)
$BENCH --collective alltoall --sizes 16,256,4096,65536,1048576 --topology cart:d=2 --topology cart:d=4 \
    --algorithms "native,direct,cartesian$TREE" --out "$OUT/cart" | tee "$OUT/cart.txt"

# the hotspot graph: every algorithm that supports it (skipped cleanly where the spec is unknown)
if "$VENV/bin/python" -c "import sys; from sparsecoll.topology import specs; specs.parse(sys.argv[1])" "$HOTSPOT" \
        2>/dev/null; then
    $BENCH --collective alltoall --sizes 16,4096 --topology "$HOTSPOT" --out "$OUT/hotspot" | tee "$OUT/hotspot.txt"
else
    echo "note: topology $HOTSPOT is not known to this install; hotspot skipped" | tee "$OUT/hotspot.txt"
fi

# SpMV halo exchange (section IV-C): alltoallv, 8 B per x entry, row-block partition of aug2dc
if [ -f "$MATRIX" ]; then
    $BENCH --collective alltoallv --sizes 8 --topology "matrix:$MATRIX" --out "$OUT/spmv" | tee "$OUT/spmv.txt"
else
    echo "note: $MATRIX not found; SpMV skipped" | tee "$OUT/spmv.txt"
fi
