#!/bin/sh
# examples/cg.py at 8 ranks on three SPD SuiteSparse matrices, MPICH then Open MPI, blocking
# then persistent halo exchange; every run under `timeout`. Raw outputs go to raw/.
# Usage: sh benchmarks/cg/run.sh [MATRIX_DIR]   (default /work/shared/data/matrices)
# auto runs with the profile benchmarks/auto/run.sh calibrated for each library.
set -u
cd "$(dirname "$0")/../.."
MATRICES=${1:-/work/shared/data/matrices}
OUT=benchmarks/cg/raw
mkdir -p "$OUT"
for flavor in mpich openmpi; do
    if [ "$flavor" = mpich ]; then
        launch="env SPARSECOLL_PROFILE=benchmarks/auto/profiles/mpich.json MPIR_CVAR_CH4_PROGRESS_THROTTLE=true MPIR_CVAR_POLLS_BEFORE_YIELD=1 .venv/bin/mpiexec -n 8 .venv/bin/python"
    else
        launch="env SPARSECOLL_PROFILE=benchmarks/auto/profiles/openmpi.json OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=true .venv-ompi/bin/mpiexec --oversubscribe -n 8 .venv-ompi/bin/python"
    fi
    for matrix in bcsstk13 bcsstk21 1138_bus; do
        for mode in blocking persistent; do
            flag=""; [ "$mode" = persistent ] && flag="--persistent"
            command="timeout 600 $launch examples/cg.py --repeat ${REPEAT:-11} --matrix $MATRICES/$matrix.mtx $flag"
            file="$OUT/$flavor-$matrix-$mode.txt"
            { echo "\$ $command"; date -u +"# %Y-%m-%dT%H:%M:%SZ, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
              $command 2>&1; echo "# exit status $?"; } > "$file"
            cat "$file"
        done
    done
done
