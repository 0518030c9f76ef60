#!/bin/sh
# The DAG executor against the step executor (SC12 section III-C), both in the same interleaved
# repetitions as native: common_neighbor, distance_halving, cartesian and loggp_tree, allgather and
# alltoall on the Moore D=2 R=2 neighborhood, persistent calls, 8 B and 4 KiB blocks.
# usage: sh benchmarks/sc12/dag-vs-steps.sh VENV NAME NP   (e.g. .venv mpich 8)
set -e
VENV=${1:-.venv}
NAME=${2:-mpich}
NP=${3:-8}
HERE=$(dirname "$0")
OUT="$HERE/dag-vs-steps-$NAME-np$NP"
mkdir -p "$OUT"
"$VENV/bin/sparsecoll" bench --np "$NP" --reps "${REPS:-80}" --mode persistent --executors steps,dag \
    --collective allgather --collective alltoall --topology moore:D=2,R=2 --sizes 8,4096 \
    --algorithms native,common_neighbor,distance_halving,cartesian,loggp_tree --out "$OUT" | tee "$OUT/bench.txt"
rm -f "$OUT/"*.png
