#!/bin/bash
# The experiment on an H100: the checks under compute-sanitizer (memcheck, then racecheck on the new build),
# then run.py's checks and timings.  Builds (made without a GPU, README.md) in build/hcbeta/, or packed in
# build/hcbeta.tar.xz (the device tool carries 64 MiB of working tree in all).
# Usage (on a GPU, repository root): bash docs/experiments/wgmma_hc_beta/device_run.sh OUTDIR
set -uo pipefail
O=$1; mkdir -p "$O"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
[ -f build/hcbeta.tar.xz ] && tar xJf build/hcbeta.tar.xz -C build
B=build/hcbeta
R=docs/experiments/wgmma_hc_beta/run.py
for tool in memcheck racecheck; do
    CHECK_ONLY=1 timeout 200 compute-sanitizer --tool $tool python3 $R - new=$B/libhc_new.so 2>&1 | tail -3 | tee -a "$O/sanitizer.log"
done
TABLE_LIB=$B/libhctable.so python3 $R "$O/wgmma_hc_beta_sm_90.json" old=$B/libhc_old.so new=$B/libhc_new.so \
    pad4=$B/libhc_pad4.so 2>&1 | tee "$O/run.log"
