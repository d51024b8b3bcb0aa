"""h through the public strided entry point where the block kernels' sm_90a wgmma path applies (NN, m ≤ 128,
n ≤ the block's columns, k > 32), with beta = 0 over NaN (the wgmma path) and beta ≠ 0 (the mma.sync block
kernel; the variants of h_beta_wgmma_sm_90.json took the wgmma path with it), odd shapes, ld past the matrix,
against float64 with DESIGN.md's bound; the padding rows of C untouched.  Small enough for compute-sanitizer.

Usage (on an H100, repository root): python docs/experiments/wgmma_hc_beta/check_h_beta.py LIBGEMMGEN.so"""
import ctypes
import sys

from harness.api import scalar, strided_function
from harness.reference import error_bound

SHAPES = [(64, 64, 64), (72, 72, 72), (100, 90, 70), (128, 128, 128), (121, 128, 300), (96, 96, 40)]
BETAS = [0.0, 1.0, -0.5]


def main(lib_path: str) -> int:
    import cupy as cp

    f = strided_function(ctypes.CDLL(lib_path), "gemmgen_hgemm_batched_strided", "h")
    rng = cp.random.RandomState(5)
    failed = 0
    for m, n, k in SHAPES:
        for beta in BETAS:
            batch = 40
            lda, ldb, ldc = -(-m // 8) * 8 + 8, -(-k // 8) * 8 + 8, -(-m // 8) * 8 + 8   # 16-byte columns
            make = lambda cols, ld: rng.uniform(-1, 1, size=(batch, cols, ld)).astype(cp.float16)  # noqa: E731
            A, B, C = make(k, lda), make(n, ldb), make(n, ldc)
            if beta == 0:
                C[:, :, :m] = cp.nan   # must not leak
            val = lambda x, rows: cp.transpose(x[:, :, :rows].astype(cp.float64), (0, 2, 1))  # noqa: E731
            a, b, c0 = val(A, m), val(B, k), (val(C, m) if beta else 0)
            padding = C[:, :, m:].copy()
            rc = f(b"N", b"N", m, n, k, scalar("h", 0.75), A.data.ptr, lda, lda * k, B.data.ptr, ldb, ldb * n,
                   scalar("h", beta), C.data.ptr, ldc, ldc * n, batch, None)
            cp.cuda.runtime.deviceSynchronize()
            norm = lambda x: cp.sqrt(cp.sum(x ** 2, axis=(1, 2)))   # noqa: E731
            scale = 0.75 * norm(a) * norm(b) + (abs(beta) * norm(c0) if beta else 0)
            err = float(cp.max(norm(val(C, m) - (0.75 * (a @ b) + beta * c0)) / scale))
            ok = rc == 0 and err <= error_bound("h", k) and bool(cp.all(C[:, :, m:] == padding))
            failed += not ok
            print(f"{m}x{n}x{k} beta={beta}: rc {rc} error {err:.3g} bound {error_bound('h', k):.3g}",
                  "ok" if ok else "FAIL", flush=True)
    print("failed:", failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
