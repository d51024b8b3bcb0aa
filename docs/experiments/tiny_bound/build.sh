#!/usr/bin/env bash
# The h and hc tiny kernels the bench's tiny rows ran (N <= 8), from generated/, in one shared library for run.py.
# Usage (repository root, where nvcc is): bash docs/experiments/tiny_bound/build.sh OUT.so
set -euo pipefail
out=${1:?OUT.so}
names=$(python3 -c "
import json
rows = json.load(open('docs/perf/bench_wmma_sm_90.json'))['rows']
print(' '.join(sorted({r['precision'] + '/' + r['kernel'] for r in rows if r.get('tiny_row') and r['m'] <= 8})))")
sources=()
for name in $names; do sources+=("generated/src/small/$name.cu"); done
nvcc -O3 -std=c++14 -w -shared -Xcompiler -fPIC -gencode arch=compute_90,code=sm_90 \
     -Igenerated/include -Igenerated/src "${sources[@]}" -o "$out"
