#!/bin/sh
# The project's benchmarks on a 16-core machine (no oversubscription up to 16 ranks), both MPI
# libraries, in priority order under one time budget; results under benchmarks/16core/.
# That machine has no network: it makes one venv per library from wheels carried in .whl/
# (mpich/, ompi/, common/: mpi4py, platformdirs, greenlet, pymetis) on top of the machine's own
# Python 3.12 packages (numpy, scipy, rich, matplotlib), and runs sparsecoll from src/.
# usage: sh benchmarks/16core/run.sh BUDGET_SECONDS [GROUP...]   (matrices in .devdata/)
# groups, in this order by default: hello calibrate callpath auto few duel pinned dag cg rma sc12 rtr hier
# settings: CALIBRATE_NPS (2 8 16), KEEP_PROFILES, AUTO_NPS (8 16), AUTO_LIBS (mpich ompi: the auto group), AUTO_REPS (150),
# CG_NP (16), CG_REPEAT (3), RES (the results folder, benchmarks/16core); a matrix may be gzipped (.devdata/NAME.mtx.gz)
set -u
cd "$(dirname "$0")/../.."
T0=$(date +%s)
BUDGET=${1:-500}
[ $# -gt 0 ] && shift
WANTED=${*:-hello calibrate callpath auto few duel pinned dag cg rma sc12 rtr hier}
CALIBRATE_NPS=${CALIBRATE_NPS:-2 8 16}
AUTO_NPS=${AUTO_NPS:-8 16}
AUTO_REPS=${AUTO_REPS:-150}
AUTO_LIBS=${AUTO_LIBS:-mpich ompi}
CG_NP=${CG_NP:-16}
CG_REPEAT=${CG_REPEAT:-3}
wanted() { case " $WANTED " in *" $1 "*) return 0;; esac; return 1; }
RES=${RES:-benchmarks/16core}   # RES=DIR: this run's results in DIR
WHL=${WHL:-.whl}
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
elapsed() { echo $(( $(date +%s) - T0 )); }
# step NAME LIMIT COMMAND...: run under timeout within the budget; output to $RES/logs/NAME.txt
step() {
    name=$1; limit=$2; shift 2
    left=$(( BUDGET - $(elapsed) ))
    if [ "$left" -lt 15 ]; then echo "== skipped $name: budget spent"; return; fi
    [ "$limit" -gt "$left" ] && limit=$left
    echo "== [$(elapsed) s] $name (limit $limit s): $*"
    { echo "\$ $*"; timeout -k 5 "$limit" "$@" 2>&1; echo "# exit status $?"; } > "$RES/logs/$name.txt"
    echo "== [$(elapsed) s] $name: $(tail -1 "$RES/logs/$name.txt")"
}
mkdir -p "$RES/logs" "$RES/profiles"
{ echo "date: $(date -u)"; echo "cores: $(nproc)"; uname -a; python3 --version; } > "$RES/machine.txt"
SITE=$(python3 -c "import site; print(site.getsitepackages()[0])")
for lib in mpich ompi; do
    python3 -m venv "/tmp/v-$lib"
    echo "$SITE" > "$(/tmp/v-$lib/bin/python -c 'import site; print(site.getsitepackages()[0])')/machine-site.pth"
    /tmp/v-$lib/bin/python -m pip install -q --no-index --no-deps --no-compile $WHL/$lib/*.whl $WHL/common/*.whl
    printf '#!/bin/sh\nexec /tmp/v-%s/bin/python -m sparsecoll "$@"\n' "$lib" > "/tmp/v-$lib/bin/sparsecoll"
    chmod +x "/tmp/v-$lib/bin/sparsecoll"
done
echo "== [$(elapsed) s] venvs ready"
name_of() { [ "$1" = mpich ] && echo mpich || echo openmpi; }
profile_of() { echo "$RES/profiles/$(name_of $1).json"; }
# every launch names its library's profile (auto reads it); Open MPI as root needs the two variables
ROOT_OK="OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"
if wanted hello; then for lib in mpich ompi; do
    step "$(name_of $lib)-hello" 60 /tmp/v-$lib/bin/sparsecoll demo --np 16
done; fi
if wanted calibrate; then for lib in mpich ompi; do   # profiles for auto: 2, 8 and 16 ranks
    [ -n "${KEEP_PROFILES:-}" ] || rm -f "$(profile_of $lib)"   # KEEP_PROFILES=1: add these loads
    for np in $CALIBRATE_NPS; do
        step "$(name_of $lib)-calibrate-np$np" 90 /tmp/v-$lib/bin/sparsecoll calibrate --np $np --out "$(profile_of $lib)"
    done
done; fi
if wanted callpath; then for lib in mpich ompi; do   # the call path at 2 ranks: native, direct, auto
    for bytes in 8 65536; do
        step "$(name_of $lib)-callpath-$bytes" 90 env SPARSECOLL_PROFILE=$(profile_of $lib) $ROOT_OK /tmp/v-$lib/bin/mpiexec -n 2 /tmp/v-$lib/bin/python \
            benchmarks/executor-overhead/executor_overhead.py --reps 4000 --edges 8 --bytes $bytes --names native,direct,auto
    done
done; fi
if wanted auto; then for np in $AUTO_NPS; do   # auto against native and every algorithm: default suite + 64 KiB
    for lib in $AUTO_LIBS; do N=$(name_of $lib)
        step "$N-auto-np$np" 150 env SPARSECOLL_PROFILE=$(profile_of $lib) $ROOT_OK /tmp/v-$lib/bin/sparsecoll bench --np $np --sizes 8,256,4096,65536 \
            --mode blocking,persistent --reps $AUTO_REPS --out "$RES/auto-$N-np$np"
        # auto and native alone: no other algorithm's requests between them
        step "$N-auto-np$np-native-auto" 90 env SPARSECOLL_PROFILE=$(profile_of $lib) $ROOT_OK /tmp/v-$lib/bin/sparsecoll bench --np $np --sizes 8,256,4096,65536 \
            --algorithms native,auto --mode blocking,persistent --reps $AUTO_REPS --out "$RES/auto-$N-np$np/native-auto"
    done
done; fi
if wanted few; then for lib in mpich ompi; do   # auto, native and the best columns of the auto group only
    N=$(name_of $lib)   # (fewer variants between two calls of one: are the winners of the full bench still winners?)
    step "$N-few-np8" 120 env SPARSECOLL_PROFILE=$(profile_of $lib) $ROOT_OK /tmp/v-$lib/bin/sparsecoll bench --np 8 --sizes 8,256,4096,65536 \
        --algorithms native,auto,direct,cartesian,node_aware,loggp_tree --mode blocking,persistent --reps $AUTO_REPS \
        --out "$RES/few-$N-np8"
done; fi
if wanted duel; then for lib in mpich ompi; do   # the library against direct alone, where one-step schedules
    N=$(name_of $lib)   # and cartesian won the small rows of the auto group: is the win theirs, or the bench's?
    step "$N-duel-np8" 60 env SPARSECOLL_PROFILE=$(profile_of $lib) $ROOT_OK /tmp/v-$lib/bin/sparsecoll bench --np 8 --sizes 8,256 \
        --topology stencil:d=2,n=3,f=-1 --topology moore:D=2,R=1 --collective allgather --collective alltoall \
        --algorithms native,direct,cartesian --mode blocking,persistent --reps $AUTO_REPS --out "$RES/duel-$N-np8"
done; fi
if wanted pinned; then for lib in $AUTO_LIBS; do   # a pinned collective (alltoallv) at other sizes than it was
    N=$(name_of $lib)   # chosen at: the 27-point stencil, persistent requests of 8 B and 64 KiB in one program
    step "$N-pinned-np8" 90 env SPARSECOLL_PROFILE=$(profile_of $lib) $ROOT_OK /tmp/v-$lib/bin/sparsecoll bench --np 8 \
        --topology stencil:d=3,n=3,f=-1 --collective alltoallv --algorithms native,direct,auto --sizes 8,4096,65536 \
        --mode blocking,persistent --reps $AUTO_REPS --out "$RES/pinned-$N-np8"
done; fi
if wanted dag; then for np in 8 16; do   # SC12: DAG against steps
    for lib in mpich ompi; do N=$(name_of $lib)
        step "$N-dag-np$np" 90 env SPARSECOLL_PROFILE=$(profile_of $lib) $ROOT_OK /tmp/v-$lib/bin/sparsecoll bench --np $np --reps 100 --mode persistent \
            --executors steps,dag --collective allgather --collective alltoall --topology moore:D=2,R=2 --sizes 8,4096 \
            --algorithms native,common_neighbor,distance_halving,cartesian,loggp_tree --out "$RES/dag-$N-np$np"
    done
done; fi
if wanted cg; then for lib in mpich ompi; do   # CG, three matrices, METIS partition
    for m in bcsstk13 bcsstk21 1138_bus; do
        for flag in "" --persistent; do
            step "$(name_of $lib)-cg-np$CG_NP-$m${flag:+-persistent}" 40 env SPARSECOLL_PROFILE=$(profile_of $lib) $ROOT_OK /tmp/v-$lib/bin/mpiexec -n $CG_NP \
                /tmp/v-$lib/bin/python examples/cg.py --matrix "$(ls .devdata/$m.mtx*)" --repeat $CG_REPEAT $flag
        done
    done
done; fi
if wanted rma; then for lib in mpich ompi; do   # SC12 II-C: RMA executors against steps, 16 ranks
    for w in cart2d:cart:d=2 cart4d:cart:d=4 random:random:density=0.5,seed=1; do N=$(name_of $lib)
        step "$N-rma-np16-${w%%:*}" 60 env SPARSECOLL_PROFILE=$(profile_of $lib) $ROOT_OK /tmp/v-$lib/bin/sparsecoll bench --np 16 --reps 100 --mode persistent \
            --executors steps,rma,rma_canary --collective alltoall --topology "${w#*:}" \
            --sizes 16,256,4096,65536,1048576 --algorithms native,direct --out "$RES/rma-$N-np16/${w%%:*}"
    done
done; fi
if wanted sc12; then for lib in mpich ompi; do   # SC12 section IV-B workloads at 16 ranks
    N=$(name_of $lib)
    step "$N-sc12-np16" 150 env SPARSECOLL_PROFILE=$(profile_of $lib) $ROOT_OK env NP=16 REPS=100 RESULTS="$RES/sc12-$N-np16" \
        MATRIX=.devdata/aug2dc_reconstructed.mtx sh benchmarks/sc12/run.sh /tmp/v-$lib $N
done; fi
if wanted rtr; then for lib in mpich ompi; do   # SC12 II-C2: RTR messages against the RTR tree, 16 ranks
    N=$(name_of $lib)
    for w in cart2d:cart:d=2 cart4d:cart:d=4 random:random:density=0.5,seed=1; do
        step "$N-rtr-np16-${w%%:*}" 60 env $ROOT_OK /tmp/v-$lib/bin/sparsecoll bench --np 16 --reps 100 \
            --mode persistent --executors steps,rma,rma+rtr_tree=2,rma+rtr_tree=4 --collective alltoall \
            --topology "${w#*:}" --sizes 16,4096,65536 --algorithms native,direct --out "$RES/rtr-$N-np16/${w%%:*}"
    done
done; fi
if wanted hier; then for lib in mpich ompi; do   # issue #22: Table I and Table II analogues, emulated nodes
    N=$(name_of $lib); mkdir -p "$RES/hier-$N"
    for np in 8 16; do
        rpn=2,4; [ $np = 16 ] && rpn=2,4,8
        step "$N-hier-table1-np$np" 120 env $ROOT_OK /tmp/v-$lib/bin/mpiexec -n $np /tmp/v-$lib/bin/python \
            benchmarks/hierarchy/table1.py --ranks-per-node $rpn --sizes 8,1024,65536 --reps 100 \
            --csv "$RES/hier-$N/table1-np$np.csv"
        for collective in reduce allreduce; do
            step "$N-hier-imbalance-np$np-$collective" 90 env $ROOT_OK /tmp/v-$lib/bin/mpiexec -n $np \
                /tmp/v-$lib/bin/python benchmarks/hierarchy/imbalance.py --ranks-per-node 4 --kernel spin \
                --imbalance-ms 0 50 800 --scale 0.01 --sizes 128 2048 32768 524288 --reps 20 \
                --collective $collective --json "$RES/hier-$N/imbalance-np$np-$collective.json"
        done
    done
done; fi
rm -f "$RES"/*/*.png "$RES"/*/*/*.png
echo "== [$(elapsed) s] done"
