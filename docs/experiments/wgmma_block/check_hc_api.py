"""hc through the public entry point where the dispatch tries the sm_90a wgmma kernel first: shapes that take
it (m, n >= 64, k >= 16, NN, any beta, several blocks along m and n, partial blocks, complex alpha) and shapes
that must fall back to the table (a transpose, m < 64, m not a multiple of 4, k < 16), each against float64
with DESIGN.md's bound; ld past the matrix on 16-byte multiples; C as NaN where beta = 0.  (The first shapes date from the kernel's
first version: m, n, k >= 128 and beta = 0 then.)

Usage (on an H100, repository root): python docs/experiments/wgmma_block/check_hc_api.py LIBGEMMGEN.so"""
import ctypes
import sys

from gemmgen.harness.core.api import scalar, strided_function
from gemmgen.harness.core.reference import error_bound

SHAPES = [  # (m, n, k, trans, beta)
    (128, 128, 128, "NN", 0.0), (256, 256, 256, "NN", 0.0), (202, 136, 160, "NN", 0.0), (130, 250, 129, "NN", 0.0),
    (300, 260, 140, "NN", 0.0), (136, 128, 300, "NN", 0.0),
    (128, 128, 128, "NN", 0.5), (160, 160, 160, "CN", 0.0), (96, 200, 200, "NN", 0.0),
    # since the kernel's lower bound went to 64 (docs/experiments/wgmma_hc_tiles/): shapes that take it from
    # 64 up, and m = 60, 66 (under 64; not a multiple of 4) that must not
    (64, 64, 64, "NN", 0.0), (72, 72, 72, "NN", 0.0), (100, 104, 70, "NN", 0.0), (60, 200, 200, "NN", 0.0),
    (66, 90, 100, "NN", 0.0),
    # since the kernel takes beta != 0, and then k from 16 (docs/experiments/wgmma_hc_beta/): beta = 1 and
    # complex, rank-16 updates with beta = 1 (with beta = 0 they stay with the table), a last slice with real k
    # in its first 8 (2K = 200), and k = 8 (under 16), which must not
    (200, 208, 216, "NN", 1.0), (204, 201, 199, "NN", complex(-0.5, 0.25)), (200, 200, 16, "NN", 0.0),
    (96, 120, 16, "NN", 1.0), (100, 120, 100, "NN", 0.0), (64, 64, 8, "NN", 0.0),
    # since the turned tile order, n > 256 shared evenly by its blocks and the grid's blocks given up to a
    # multiple of the tiles (docs/experiments/hc_rotation/): 8 tiles, a warpgroup idle in the last block of rows
    (200, 300, 100, "NN", 1.0), (216, 400, 72, "NN", 0.0),
]


def check_case(f, prec, m, n, k, trans, alpha, beta, rng, batch=30):
    """One batch through f (the public strided signature of prec, h or hc) against float64 with DESIGN.md's
    norm and bound, ld past the matrix on 16-byte multiples: (passed, a report line).  C starts as NaN where
    beta = 0 (it must not be read); its padding rows must stay as they were."""
    import cupy as cp

    lanes, parts = (4, (2,)) if prec == "hc" else (8, ())   # elements per 16 bytes; halves per element
    ra, ca = (m, k) if trans[0] == "N" else (k, m)
    pad = lambda rows, extra: -(-rows // lanes) * lanes + extra   # noqa: E731
    lda, ldb, ldc = pad(ra, lanes), pad(k, 2 * lanes), pad(m, lanes)
    make = lambda cols, ld: rng.uniform(-1, 1, size=(batch, cols, ld) + parts).astype(cp.float16)  # noqa: E731
    A, B, C = make(ca, lda), make(n, ldb), make(n, ldc)

    def val(x, rows):
        x = x[:, :, :rows].astype(cp.float64)
        return cp.transpose(x[..., 0] + 1j * x[..., 1] if parts else x, (0, 2, 1))

    a, b = val(A, ra), val(B, k)
    c0 = val(C, m) if beta != 0 else 0
    if beta == 0:
        C[:, :, :m] = cp.nan
    if trans[0] != "N":
        a = cp.transpose(a, (0, 2, 1))
        a = cp.conj(a) if trans[0] == "C" else a
    padding = C[:, :, m:].copy()
    rc = f(trans[0].encode(), trans[1].encode(), m, n, k, scalar(prec, alpha), A.data.ptr, lda, lda * ca,
           B.data.ptr, ldb, ldb * n, scalar(prec, beta), C.data.ptr, ldc, ldc * n, batch, None)
    cp.cuda.runtime.deviceSynchronize()
    norm = lambda x: cp.sqrt(cp.sum(cp.abs(x) ** 2, axis=(1, 2)))   # noqa: E731
    scale = abs(alpha) * norm(a) * norm(b) + (abs(beta) * norm(c0) if beta != 0 else 0)
    err = float(cp.max(norm(val(C, m) - (alpha * (a @ b) + beta * c0)) / scale))
    ok = rc == 0 and err <= error_bound(prec, k) and bool(cp.all(C[:, :, m:] == padding))
    line = f"{m}x{n}x{k} {trans} beta={beta}: rc {rc} error {err:.3g} bound {error_bound(prec, k):.3g}"
    return ok, line + (" ok" if ok else " FAIL")


def run_cases(f, prec, cases, seed, batch=30) -> int:
    """check_case on each (m, n, k, trans, alpha, beta), a line each; the exit status (1: any failed)."""
    import cupy as cp

    rng = cp.random.RandomState(seed)
    failed = 0
    for m, n, k, trans, alpha, beta in cases:
        ok, line = check_case(f, prec, m, n, k, trans, alpha, beta, rng, batch)
        failed += not ok
        print(line, flush=True)
    print("failed:", failed)
    return 1 if failed else 0


def main(lib_path: str) -> int:
    f = strided_function(ctypes.CDLL(lib_path), "gemmgen_hcgemm_batched_strided", "hc")
    return run_cases(f, "hc", [(m, n, k, trans, complex(0.75, -0.5), beta) for m, n, k, trans, beta in SHAPES], 9)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
