#!/bin/sh
# compare.sh VENV BASE_SRC HEAD_SRC [REPS] [BYTES] [EDGES]: executor_overhead.py with two source trees
# (e.g. a worktree of the commit before and this checkout's src/), alternated twice in one session.
set -eu
V=$1; BASE=$2; HEAD=$3; REPS=${4:-6000}; BYTES=${5:-8}; EDGES=${6:-8}
HERE=$(cd "$(dirname "$0")/.." && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for round in 1 2; do
  for tree in "$BASE" "$HEAD"; do
    echo "== $tree ($V, round $round)"
    PYTHONPATH=$tree timeout 300 "$V/bin/mpiexec" -n 2 "$V/bin/python" "$HERE/executor_overhead.py" \
      --reps "$REPS" --bytes "$BYTES" --edges "$EDGES" 2>&1 | grep -av "WARN\|^2 ranks"
  done
done
