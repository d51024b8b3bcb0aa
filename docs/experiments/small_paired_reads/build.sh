#!/usr/bin/env bash
# Small-family kernel sources in one shared library against the small-family header in HEADER_DIR (a copy of
# generated/src/gemmgen_small.cuh of one version), for run.py: the SOURCES given (emit.py writes any tuple's), or
# else every ring kernel of the default set.  Objects compile in parallel (JOBS, default 16: the GPU machine's
# cores); extra nvcc flags in NVCC_FLAGS (an experiment's -D switches).
# Usage (repository root, where nvcc is): bash docs/experiments/small_paired_reads/build.sh HEADER_DIR OUT.so [SOURCES...]
set -euo pipefail
header=${1:?HEADER_DIR} out=${2:?OUT.so}
shift 2
sources=("$@")
[ ${#sources[@]} -gt 0 ] || sources=(generated/src/small/*/small_*ring*.cu)
objects=$(mktemp -d)
printf '%s\n' "${sources[@]}" | xargs -P "${JOBS:-16}" -I{} sh -c \
    'nvcc -O3 -std=c++14 -w -c -Xcompiler -fPIC -gencode arch=compute_90,code=sm_90 ${NVCC_FLAGS:-} -I"$0" \
          -Igenerated/include -Igenerated/src "$1" -o "$2/$(basename "$1" .cu).o"' "$header" {} "$objects"
nvcc -shared -o "$out" "$objects"/*.o
rm -rf "$objects"
