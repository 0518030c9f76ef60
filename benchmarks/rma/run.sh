#!/bin/sh
# The RMA executors (SC12 II-C: rma = RTR messages + PSCW epochs, rma_canary = canary RTE over
# passive target) against the step executor, in the same interleaved repetitions as native:
# persistent Neighbor_alltoall of `direct` on the 2-D 5-point and 4-D 9-point Cartesian
# neighborhoods (Figs. 10-11) and a random graph, 16 B to 1 MiB per block, at 2 and 8 ranks.
# usage: sh benchmarks/rma/run.sh VENV NAME   (e.g. .venv mpich; .venv-ompi openmpi)
# NPS="2 8" REPS=100 SIZES=16,256,4096,65536,1048576 EXECUTORS=steps,rma,rma_canary override the
# defaults (EXECUTORS=steps,rma,rma+rtr_tree=2 adds the RTR tree of SC12 II-C2, degree 2).
set -e
VENV=${1:-.venv}
NAME=${2:-mpich}
HERE=$(dirname "$0")
SIZES=${SIZES:-16,256,4096,65536,1048576}
for NP in ${NPS:-2 8}; do
    for WORKLOAD in cart2d:cart:d=2 cart4d:cart:d=4 random:random:density=0.5,seed=1; do
        LABEL=${WORKLOAD%%:*}
        SPEC=${WORKLOAD#*:}
        OUT="$HERE/results-$NAME-np$NP/$LABEL"
        mkdir -p "$OUT"
        "$VENV/bin/sparsecoll" bench --np "$NP" --reps "${REPS:-100}" --mode persistent \
            --executors "${EXECUTORS:-steps,rma,rma_canary}" --collective alltoall --topology "$SPEC" --sizes "$SIZES" \
            --algorithms native,direct --out "$OUT" | tee "$OUT/bench.txt"
        rm -f "$OUT/"*.png
    done
done
