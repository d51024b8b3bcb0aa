#!/bin/bash
# The whole experiment on an H100: checks and timings of three builds (run.py), then ncu counters of a few
# variants (profile.sh with launch.py as its launcher).  Builds: see README.md.
# Usage (on a GPU, repository root): bash docs/experiments/wgmma_hc_tiles/device_run.sh OUTDIR
set -uo pipefail
O=$1; mkdir -p "$O/ncu"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
B=build/hct
python3 docs/experiments/wgmma_hc_tiles/run.py "$O/wgmma_hc_tiles_sm_90.json" old=$B/libhc_old.so \
    tma=$B/libhc_tma.so prod=$B/libhc_prod.so 2>&1 | tee "$O/run.log"
export PROFILE_LAUNCH=docs/experiments/wgmma_hc_tiles/launch.py
bash docs/experiments/profile.sh $B/libhc_prod.so "$O/ncu" "hc_bn256_s3 256" "hc_bn208_s3 200" "hc_bn144_s4 136" \
    2>&1 | tee "$O/profile.txt"
