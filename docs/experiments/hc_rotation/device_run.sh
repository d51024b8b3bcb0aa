#!/bin/bash
# On an H100 after a change to the hc wgmma kernel: `sanitize`: ab.py's checks under compute-sanitizer (memcheck,
# racecheck) on the new build; `check`: the hc set's check and the hc API check on the library it builds;
# `bench`: the hc set's bench first, then as `check`.  The new build (variants.cu against the new source, made
# without a GPU, README.md) comes packed in build/hcrot.tar.xz as build/hcrot/libhc_new.so, the emitted hc set
# in build/gen_hc.tar.xz.
# Usage (on a GPU, repository root): OUT=DIR bash docs/experiments/hc_rotation/device_run.sh sanitize|check|bench
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p "$OUT/perf" && cp docs/perf/bench_wmma_sm_90.json docs/perf/bench_wmma_sm_90.md "$OUT/perf/"
tar xJf build/hcrot.tar.xz && tar xJf build/gen_hc.tar.xz
if [ "$1" = sanitize ]; then
    for tool in memcheck racecheck; do
        CHECK_ONLY=1 timeout 120 compute-sanitizer --tool $tool python3 docs/experiments/hc_rotation/ab.py - \
            new=build/hcrot/libhc_new.so 2>&1 | tail -3 | tee -a "$OUT/sanitizer.log"
    done
    exit 0
fi
if [ "$1" = bench ]; then
    SECONDS=0
    timeout 330 python3 -m gemmgen bench wmma --precisions hc --generated build/gen_hc \
        --build-dir build/gen_hc_build -j 16 --out "$OUT/perf" > "$OUT/bench.log" 2>&1
    echo "bench rc $? in $SECONDS s"; tail -12 "$OUT/bench.log"
fi
SECONDS=0
timeout 200 python3 -m gemmgen check --generated build/gen_hc --build-dir build/gen_hc_build -j 16 --no-cpu \
    --report "$OUT/check_hc_sm_90.json" > "$OUT/check.log" 2>&1
echo "check rc $? in $SECONDS s"; tail -4 "$OUT/check.log"
lib=$(find build/gen_hc_build -name 'libgemmgen*.so' | head -1)
python3 docs/experiments/wgmma_block/check_hc_api.py "$lib" > "$OUT/api_check.log" 2>&1
echo "api check rc $? ($lib)"; tail -2 "$OUT/api_check.log"
