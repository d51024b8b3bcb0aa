#!/usr/bin/env bash
# The default set's 1×1×1 small kernels (every precision) in one shared library, against the small-family header
# in HEADER_DIR (a copy of generated/src/gemmgen_small.cuh of one version) for run.py.
# Usage (repository root, where nvcc is): bash docs/experiments/elementwise/build.sh HEADER_DIR OUT.so
set -euo pipefail
header=${1:?HEADER_DIR} out=${2:?OUT.so}
nvcc -O3 -std=c++14 -w -shared -Xcompiler -fPIC -gencode arch=compute_90,code=sm_90 -I"$header" \
     -Igenerated/include -Igenerated/src generated/src/small/*/small_*_m1n1k1_*.cu -o "$out"
