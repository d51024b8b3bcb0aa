#!/bin/bash
# On an H100 after the turned tile order: the A/B build's checks under compute-sanitizer (memcheck, racecheck),
# the hc set's bench and check, and the hc API check on the library the bench built.  The A/B builds (made
# without a GPU, README.md) come packed in build/hcrot.tar.xz, the emitted hc set in build/gen_hc.tar.xz.
# Usage (on a GPU, repository root): OUT=DIR bash docs/experiments/hc_rotation/device_run.sh sanitize|bench
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p "$OUT/perf" && cp docs/perf/bench_wmma_sm_90.json docs/perf/bench_wmma_sm_90.md "$OUT/perf/"
tar xJf build/hcrot.tar.xz && tar xJf build/gen_hc.tar.xz
if [ "$1" = sanitize ]; then
for tool in memcheck racecheck; do
    CHECK_ONLY=1 timeout 120 compute-sanitizer --tool $tool python3 docs/experiments/hc_rotation/ab.py - \
        new=build/hcrot/libhc_step.so 2>&1 | tail -3 | tee -a "$OUT/sanitizer.log"
done
exit 0
fi
SECONDS=0
timeout 330 python3 -m generator.cli bench wmma --precisions hc --generated build/gen_hc --build-dir build/gen_hc_build \
    -j 16 --out "$OUT/perf" > "$OUT/bench.log" 2>&1
echo "bench rc $? in $SECONDS s"; tail -12 "$OUT/bench.log"
SECONDS=0
timeout 150 python3 -m generator.cli check --generated build/gen_hc --build-dir build/gen_hc_build -j 16 --no-cpu \
    --report "$OUT/check_hc_sm_90.json" > "$OUT/check.log" 2>&1
echo "check rc $? in $SECONDS s"; tail -4 "$OUT/check.log"
lib=$(find build/gen_hc_build -name 'libgemmgen*.so' | head -1)
python3 docs/experiments/wgmma_block/check_hc_api.py "$lib" > "$OUT/api_check.log" 2>&1
echo "api check rc $? ($lib)"; tail -2 "$OUT/api_check.log"
