"""h through the public strided entry point where the block kernels' sm_90a wgmma path applies (NN, m ≤ 128,
n ≤ the block's columns, k > 32), with beta = 0 over NaN (the wgmma path) and beta ≠ 0 (the mma.sync block
kernel; the variants of h_beta_wgmma_sm_90.json took the wgmma path with it), odd shapes, ld past the matrix,
against float64 with DESIGN.md's bound; the padding rows of C untouched (check_hc_api.run_cases).  Small
enough for compute-sanitizer.

Usage (on an H100, repository root): python docs/experiments/wgmma_hc_beta/check_h_beta.py LIBGEMMGEN.so"""
import ctypes
import sys
from pathlib import Path

from gemmgen.harness.core.api import strided_function

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "wgmma_block"))
from check_hc_api import run_cases  # noqa: E402

SHAPES = [(64, 64, 64), (72, 72, 72), (100, 90, 70), (128, 128, 128), (121, 128, 300), (96, 96, 40)]
BETAS = [0.0, 1.0, -0.5]


def main(lib_path: str) -> int:
    f = strided_function(ctypes.CDLL(lib_path), "gemmgen_hgemm_batched_strided", "h")
    return run_cases(f, "h", [(m, n, k, "NN", 0.75, beta) for m, n, k in SHAPES for beta in BETAS], 5, batch=40)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
