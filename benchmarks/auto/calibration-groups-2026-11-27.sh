# A/B of two trees' calibrations (OLD_TREE, NEW_TREE: checkouts of the two commits), interleaved, then
# the bench's own ratios for reference; run alone: flock /tmp/sparsecoll-timing.lock sh THIS_FILE
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/calibration-groups}; mkdir -p "$OUT"
for lib in mpich ompi; do v=$PWD/.venv; [ $lib = ompi ] && v=$PWD/.venv-ompi
 for np in 2 8; do
  for i in 1 2; do
   for side in old new; do src=$OLD_TREE/src; [ $side = new ] && src=$NEW_TREE/src
     echo "== $lib np$np $side $i"
     PYTHONPATH=$src $v/bin/sparsecoll calibrate --np $np --out $OUT/ab-$lib-$np-$side-$i.json 2>&1 | grep -E "  9-pt      8 |per call|rma executor"
   done
  done
  echo "== $lib np$np bench"
  $v/bin/sparsecoll bench --np $np --topology stencil:d=2,n=3,f=-1 --sizes 8 --mode blocking,persistent --algorithms native,direct,cartesian --reps 1000 --out $OUT/bench-$lib-$np > /dev/null 2>&1
  python3 -c "
import csv
for r in csv.DictReader(open('$OUT/bench-$lib-$np/results.csv')):
    print(f\"   bench {r['collective']:9s} {r['mode']:11s} {r['algorithm']:10s} {float(r['median_s'])*1e6:8.2f} {float(r['ratio_to_native_median']):.3f}\")"
 done
done
