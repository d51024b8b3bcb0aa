"""Emit the experiment's CUDA file: the library's hc wgmma source (generated/src/wmmahopper/gemmgen_wgmma_hc.cu)
included as is, and one exported launcher per (block columns, stages) pair, so that run.py can time every
block width at every size, where the library's entry point picks one.  (launch_hc takes beta since
docs/experiments/wgmma_hc_beta/; the builds of this experiment's README predate it.)

Usage: python docs/experiments/wgmma_hc_tiles/variants.py OUT.cu"""
import sys
from pathlib import Path

# (block columns, stages): every multiple of 16 from 128 to 256 with 3 and 4 stages (launch_hc refuses
# what does not fit the shared memory: -1)
VARIANTS = [(bn, stages) for bn in range(128, 257, 16) for stages in (3, 4)]
# and narrower blocks for squares under 128, where the dispatch runs the tuned table's kernels
VARIANTS += [(bn, 4) for bn in (64, 80, 96, 112)]


def name(bn: int, stages: int) -> str:
    return f"hc_bn{bn}_s{stages}"


def source() -> str:
    lines = ['#include "gemmgen_wgmma_hc.cu"', ""]
    for bn, st in VARIANTS:
        lines += [
            f'extern "C" int {name(bn, st)}(char, char, int m, int n, int k, cuFloatComplex alpha, const __half2* A, '
            "int lda, long long sa, const __half2* B, int ldb, long long sb, cuFloatComplex beta, __half2* C, int ldc, "
            "long long sc, int batch, cudaStream_t stream)",
            "{",
            f"    return gemmgen::tc::hc_wgmma::launch_hc<{bn}, {st}>(A, lda, sa, B, ldb, sb, C, ldc, sc, alpha, beta, m, n, "
            "k, batch, stream);",
            "}",
        ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    Path(sys.argv[1]).write_text(source())
