"""The library's h block kernels with and without their sm_90a wgmma path (GEMMGEN_NO_WGMMA), checked and
timed against cuBLAS in one run.

Each h block kernel of the sm_90 table (squares and rank-16 updates 64-128) is built twice from the same
sources, once with `#define GEMMGEN_NO_WGMMA` ahead of each bundle.  Checks (path on): NN, odd shapes that
fit the kernel's block, leading dimensions past the matrix on 16-byte multiples, beta = 0 and 0.5, against
float64.  Timing: batch 1000 and 256 MB, beta = 0, buffer sets rotated past L2.

Usage (on an H100, repository root): python docs/experiments/wgmma_block/ab.py OUT.json"""
import ctypes
import json
import sys
from pathlib import Path

from gemmgen.generator import wmma
from gemmgen.generator.tuning import load_table
from gemmgen.harness.wmma.bench import MAX_SETS, _sets
from gemmgen.harness.core.build import build_library
from gemmgen.harness.core.reference import error_bound
from gemmgen.harness.check import device_arch
from gemmgen.harness.core.timing import copy_bandwidth, median_time_ms
from gemmgen.harness.wmma.tune import BUNDLE, _write_sources, spec_launcher
from gemmgen.harness.core.workload import Workload, batch_for_megabytes, bytes_moved

SIZES = range(64, 129, 8)


def check(f, m, n, k, alpha, beta, batch=300):
    import cupy as cp

    rng = cp.random.RandomState(5)
    lda, ldb, ldc = -(-m // 8) * 8 + 8, -(-k // 8) * 8 + 16, -(-m // 8) * 8 + 8
    make = lambda rows, cols, ld: rng.uniform(-1, 1, size=(batch, cols, ld)).astype(cp.float16)   # noqa: E731
    A, B, C = make(m, k, lda), make(k, n, ldb), make(m, n, ldc)
    val = lambda x, rows: cp.transpose(x[:, :, :rows].astype(cp.float64), (0, 2, 1))   # noqa: E731
    a, b, c0 = val(A, m), val(B, k), val(C, m)
    padding = C[:, :, m:].copy()
    rc = f(b"N", b"N", m, n, k, ctypes.c_float(alpha), A.data.ptr, lda, lda * k, B.data.ptr, ldb, ldb * n,
           ctypes.c_float(beta), C.data.ptr, ldc, ldc * n, batch, None)
    cp.cuda.runtime.deviceSynchronize()
    if rc != 0:
        return float("inf")
    norm = lambda x: cp.sqrt(cp.sum(x ** 2, axis=(1, 2)))   # noqa: E731
    err = norm(val(C, m) - (alpha * (a @ b) + beta * c0)) / (abs(alpha) * norm(a) * norm(b) + abs(beta) * norm(c0))
    return float(cp.max(err)) if bool(cp.all(C[:, :, m:] == padding)) else float("inf")


def main(out: Path) -> None:
    arch, device = device_arch()
    table = {(r["kind"], r["size"]): r["kernel"] for r in load_table(arch)["wmma"] if r["precision"] == "h"}
    names = {table[(kind, s)] for kind in ("square", "rank") for s in SIZES if table[(kind, s)].startswith("wmmablock_")}
    specs = sorted(wmma.WmmaBlockSpec.parse(n) for n in names)
    libs = {}
    for mode in ("on", "off"):
        root = Path(f"build/wgmma_ab_{mode}") / arch
        bundles = _write_sources(root, specs, BUNDLE)
        if mode == "off":
            for b in bundles:
                text = b.read_text()
                if not text.startswith("#define GEMMGEN_NO_WGMMA"):
                    b.write_text("#define GEMMGEN_NO_WGMMA\n" + text)
        built = build_library(root, root / "build", (arch,), 16, sources=bundles, library_name=f"lib{mode}.so")
        libs[mode] = ctypes.CDLL(str(built.library))
    checks = {}
    for spec in specs:
        f, _ = spec_launcher(libs["on"], spec)
        shapes = [(min(128, spec.blk_m), spec.blk_n, 64), (min(128, spec.blk_m) - 3, spec.blk_n - 5, 77),
                  (spec.blk_n - 9, spec.blk_n - 1, 16), (40, 24, 200)]
        for m, n, k in shapes:
            for beta in (0.0, 0.5):
                e = check(f, m, n, k, 1.5, beta)
                checks[f"{spec.name} {m}x{n}x{k} beta={beta}"] = e
                print(spec.name, m, n, k, beta, e, "ok" if e <= error_bound("h", k) else "FAIL", flush=True)
    bandwidth = copy_bandwidth()
    rows = []
    for kind in ("square", "rank"):
        for s in SIZES:
            name = table[(kind, s)]
            if not name.startswith("wmmablock_"):
                continue
            spec = wmma.WmmaBlockSpec.parse(name)
            m, n, k = s, s, s if kind == "square" else 16
            for batch in (1000, batch_for_megabytes("h", m, n, k, 256)):
                work = Workload("h", m, n, k, batch, sets=_sets("h", m, n, k, batch))
                t = lambda launch: median_time_ms(launch, launches_per_graph=MAX_SETS, repeats=9) * 1e3   # noqa: E731
                row = {"kind": kind, "size": s, "batch": batch, "kernel": name,
                       "floor_us": bytes_moved("h", m, n, k, batch, False) / bandwidth * 1e6,
                       "cublas_us": t(work.cublas(1.0, 0.0))}
                for mode, lib in libs.items():
                    f, takes = spec_launcher(lib, spec)
                    row[f"{mode}_us"] = t(work.ours(f, 1.0, 0.0, takes_shape=takes))
                work.release()
                rows.append(row)
                print(kind, s, batch, name, "cublas %.1f on %.1f off %.1f | x cublas on %.3f off %.3f | floor on %.2f off %.2f"
                      % (row["cublas_us"], row["on_us"], row["off_us"], row["cublas_us"] / row["on_us"],
                         row["cublas_us"] / row["off_us"], row["floor_us"] / row["on_us"], row["floor_us"] / row["off_us"]),
                      flush=True)
    out.write_text(json.dumps({"device": device, "arch": arch, "copy_bandwidth": bandwidth, "checks": checks,
                               "what": "us per launch, beta = 0, NN, buffer sets rotated past L2; on/off: the wgmma path",
                               "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
