#!/bin/bash
# The points still under issue 2's and issue 5's bars, profiled with ncu (docs/experiments/profile.sh)
# against cuBLAS where it runs the same point, and z 27's two best tuples benched in one run.
# Usage (on a GPU, repository root): bash docs/experiments/remaining_misses/device_run.sh OUTDIR
set -uo pipefail
OUT_DIR=$1; O=$OUT_DIR/work; mkdir -p "$O"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
G=build/rm_gen; B=build/rm_build
python3 -m gemmgen generate --out $G --arch sm_90 --precisions h,s,z --sizes 1-32 --tallskinny-n 2 \
    --cpu-isa generic > /dev/null || exit 1
python3 - <<PY || exit 1
from pathlib import Path
from gemmgen.harness.check import build_set
print(build_set(Path("$G"), Path("$B"), ("sm_90",), 16).library)
PY
LIB=$(ls $B/sm_90/libgemmgen.so)
bash docs/experiments/profile.sh $LIB $O \
  "ours square 9 --prec h" "cublas square 9 --prec h" \
  "ours square 31 --prec s" "cublas square 31 --prec s" "ours square 32 --prec s" \
  "ours square 27 512 --prec z" "ours square 26 512 --prec z" \
  "ours square 7 --prec h --arrays" "ours square 13 --prec h --arrays" "ours square 13 --prec h" \
  "ours square 96 --batch 1000" "cublas square 96 --batch 1000" \
  "ours square 112 --batch 1000" "cublas square 112 --batch 1000" \
  "ours rank 72" "cublas rank 72" 2>&1 | tee $O/profile.txt
# z 27: the table's mma tuple against the FMA tuple before it, two rounds in alternation
cp gemmgen/generator/tuning/sm_90.json /tmp/sm_90.json.orig
python3 - <<'PY'
import json
p = "gemmgen/generator/tuning/sm_90.json"
t = json.load(open(p))
for r in t["small"]:
    if r["precision"] == "z" and (r["m"], r["n"], r["k"]) == (27, 27, 27):
        r.update(dim_m=7, dim_n=9, tba=1, hoist=True, mma=False, stages=0)
json.dump(t, open(p, "w"), indent=1)
PY
python3 -m gemmgen generate --out build/rm_z_fma --arch sm_90 --precisions z --sizes 1-32 --tallskinny-n 2 \
    --cpu-isa generic > /dev/null
cp /tmp/sm_90.json.orig gemmgen/generator/tuning/sm_90.json
python3 -m gemmgen generate --out build/rm_z_mma --arch sm_90 --precisions z --sizes 1-32 --tallskinny-n 2 \
    --cpu-isa generic > /dev/null
for round in 1 2; do
  for v in mma fma; do
    python3 -m gemmgen bench small --precisions z --sizes 26-28 --batches 10000 --generated build/rm_z_$v \
        --build-dir build/rm_zb_$v --out $O/z27_${v}_$round > $O/z27_${v}_$round.log 2>&1
    grep -E "^\| z \| 2[678] \| [0-9]+ \| ≫L2" $O/z27_${v}_$round/bench_small_sm_90.md \
        | sed "s/^/$v round $round: /" | tee -a $OUT_DIR/z27.txt
  done
done
cp $O/profile.txt $OUT_DIR/
tar czf $OUT_DIR/work.tgz -C $OUT_DIR work && rm -rf $O
