"""Check and time the hc wgmma kernel with beta ≠ 0 (old C brought in by the copy engine) and with its last
slice cut to the k16 steps that hold real k, against the kernel before it and the tuned table's kernels that
the dispatch ran where the kernel did not apply (beta ≠ 0, k < 64), and planar cuBLAS.

LIBs: `old` and `new`, each the hc wgmma source (generated/src/wmmahopper/gemmgen_wgmma_hc.cu) of one state
built alone into a shared library, which exports its entry point gemmgen_wgmma_hc_strided.  The table's
kernels of the sizes timed are built on the spot (or TABLE_LIB=path, built before with `--build-table`).

Checks first (float64, norm-wise error as DESIGN.md states it, with beta·C0 in the norm; padding rows of C
untouched; beta = 0 over NaN); an entry point that fails one is not timed.  Then hc squares and rank-16
updates (m = n, k = 16) at batch 1000, beta = 0 and 1, buffer sets rotated past L2, three rounds in turn
(the order reversed each round), medians.

Usage (on an H100, repository root):
  python docs/experiments/wgmma_hc_beta/run.py --build-table DIR        # the table's kernels, anywhere
  TABLE_LIB=DIR/libhctable.so python docs/experiments/wgmma_hc_beta/run.py OUT.json old=LIB new=LIB
  CHECK_ONLY=1 compute-sanitizer python docs/experiments/wgmma_hc_beta/run.py - new=LIB   # the checks alone"""
import ctypes
import json
import os
import statistics
import sys
from pathlib import Path

from gemmgen.generator import wmma
from gemmgen.generator.tuning import load_table
from gemmgen.harness.core.api import scalar, strided_function
from gemmgen.harness.wmma.bench import MAX_SETS, Planar, _sets
from gemmgen.harness.core.build import build_library
from gemmgen.harness.core.reference import error_bound
from gemmgen.harness.core.timing import copy_bandwidth, median_time_ms
from gemmgen.harness.wmma.tune import BUNDLE, _write_sources, spec_launcher
from gemmgen.harness.core.workload import Workload, bytes_moved, flops

ARCH = "sm_90"
ENTRY = "gemmgen_wgmma_hc_strided"
SIZES = [int(s) for s in os.environ.get("HC_SIZES", "").split()] or list(range(64, 257, 8))
RANK_K = 16
# (m, n, k, leading-dimension padding, alpha, beta): a square; odd shapes whose last row block leaves a
# warpgroup idle; last slices of 1, 2 and 3 k16 steps (2K = 200, 80, 40 past the last 64) and a single
# one (k = 8, 16); complex alpha and beta
SHAPES = ((256, 256, 256, 0, 1.0, 0.0), (204, 201, 199, 4, 0.75 - 0.5j, 0.0), (204, 201, 199, 4, 0.75 - 0.5j, -0.5 + 0.25j),
          (132, 250, 131, 8, 1.0, 1.0), (100, 120, 100, 4, 1.0, 1j), (96, 96, 16, 0, 1.0, 1.0), (72, 200, 40, 4, 1j, 0.0),
          (64, 64, 8, 0, 1.0, 0.5), (136, 96, 20, 4, -1.0, 2.0))
ROUNDS = 3


def check(f, m, n, k, pad, alpha, beta, batch=24):
    """Norm-wise error of the worst GEMM against float64 (None: refused; inf: failed, a padding row of C
    written, or NaN in C leaked with beta = 0)."""
    import cupy as cp

    rng = cp.random.RandomState(11)
    lda, ldb, ldc = -(-m // 4) * 4 + pad, -(-k // 4) * 4 + pad, -(-m // 4) * 4 + pad   # 16-byte columns
    make = lambda cols, ld: rng.uniform(-1, 1, size=(batch, cols, ld, 2)).astype(cp.float16)   # noqa: E731
    A, B, C = make(k, lda), make(n, ldb), make(n, ldc)
    if beta == 0:
        C[:, :, :m] = cp.nan   # must not leak
    val = lambda x, rows: cp.transpose(x[:, :, :rows, 0].astype(cp.float64) + 1j * x[:, :, :rows, 1], (0, 2, 1))  # noqa
    a, b, c0 = val(A, m), val(B, k), (val(C, m) if beta != 0 else 0)
    padding = C[:, :, m:].copy()
    rc = f(b"N", b"N", m, n, k, scalar("hc", alpha), A.data.ptr, lda, lda * k, B.data.ptr, ldb, ldb * n,
           scalar("hc", beta), C.data.ptr, ldc, ldc * n, batch, None)
    cp.cuda.runtime.deviceSynchronize()
    if rc != 0:
        return None if rc == -1 else float("inf")
    norm = lambda x: cp.sqrt(cp.sum(cp.abs(x) ** 2, axis=(1, 2)))   # noqa: E731
    scale = abs(alpha) * norm(a) * norm(b) + (abs(beta) * norm(c0) if beta != 0 else 0)
    error = float(cp.max(norm(val(C, m) - (alpha * (a @ b) + beta * c0)) / scale))
    if not bool(cp.all(C[:, :, m:] == padding)):
        print(f"  {m}x{n}x{k}: padding rows of C written (error {error:.2e})", flush=True)
        return float("inf")
    return error if error == error else float("inf")


def table_specs():
    table = {(r["kind"], r["size"]): r["kernel"] for r in load_table(ARCH)["wmma"] if r["precision"] == "hc"}
    return {(kind, n): wmma.parse_name(table[(kind, n)]) for n in SIZES for kind in ("square", "rank")
            if (kind, n) in table}


def build_table(root: Path) -> Path:
    specs = table_specs()
    bundles = _write_sources(root, sorted(set(specs.values()), key=lambda s: s.name), BUNDLE)
    return build_library(root, root / "build", (ARCH,), os.cpu_count() or 2, sources=bundles,
                         library_name="libhctable.so").library


def main(out: Path, libs: dict) -> None:
    from gemmgen.harness.check import device_arch

    arch, device = device_arch()
    entries, checks = {}, {}
    for lib_name, path in libs.items():
        f = strided_function(ctypes.CDLL(path), ENTRY, "hc")
        errors = [check(f, *shape) for shape in SHAPES]
        checks[lib_name] = errors
        print(lib_name, errors, flush=True)
        if all(e is None or e <= error_bound("hc", shape[2]) for e, shape in zip(errors, SHAPES)):
            entries[lib_name] = f
    if os.environ.get("CHECK_ONLY"):   # (under compute-sanitizer)
        return
    table_path = os.environ.get("TABLE_LIB") or str(build_table(Path("build/wgmma_hc_beta_table")))
    table_lib = ctypes.CDLL(table_path)
    table = {key: spec_launcher(table_lib, spec) for key, spec in table_specs().items()}
    bandwidth = copy_bandwidth()
    rows = []
    for kind, k_of in (("square", lambda n: n), ("rank", lambda n: RANK_K)):
        for n in SIZES:
            k = k_of(n)
            batch = 1000
            work = Workload("hc", n, n, k, batch, sets=_sets("hc", n, n, k, batch))
            t = lambda launch: median_time_ms(launch, launches_per_graph=MAX_SETS, repeats=5) * 1e3   # noqa: E731
            for beta in (0.0, 1.0):
                launches = {"planar": lambda: Planar(work).launch_factory(beta)}
                for lib_name, f in entries.items():
                    launches[lib_name] = lambda f=f: work.ours(f, 1.0, beta, takes_shape=True)
                if (kind, n) in table:
                    tf, takes = table[(kind, n)]
                    launches["table"] = lambda: work.ours(tf, 1.0, beta, takes_shape=takes)
                times = {key: [] for key in launches}
                for r in range(ROUNDS):
                    for key in (list(launches) if r % 2 == 0 else list(launches)[::-1]):
                        try:
                            times[key].append(t(launches[key]()))
                        except RuntimeError:   # refused (-1): the entry point does not apply
                            pass
                med = {key: statistics.median(v) for key, v in times.items() if v}
                row = {"kind": kind, "m": n, "n": n, "k": k, "batch": batch, "beta": beta,
                       "floor_us": bytes_moved("hc", n, n, k, batch, beta != 0) / bandwidth * 1e6, "us": med,
                       "rounds": times, "tflops": {key: flops("hc", n, n, k, batch) / v / 1e6 for key, v in med.items()}}
                for key in med:
                    if key != "planar":
                        row[f"{key}_vs_planar"] = med["planar"] / med[key]
                rows.append(row)
                print(json.dumps({key: (round(v, 3) if isinstance(v, float) else v) for key, v in row.items()
                                  if key not in ("rounds", "tflops")}), flush=True)
            work.release()
    out.write_text(json.dumps({"device": device, "arch": arch, "copy_bandwidth": bandwidth, "checks": checks,
                               "check_shapes": [list(map(str, s)) for s in SHAPES],
                               "table_kernels": {f"{kind} {n}": spec.name for (kind, n), spec in table_specs().items()},
                               "what": "us per launch, hc at batch 1000, alpha = 1, NN, buffer sets rotated past L2; "
                                       "planar: four cuBLAS HGEMMs on split data", "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    if sys.argv[1] == "--build-table":
        print(build_table(Path(sys.argv[2])))
    else:
        main(Path(sys.argv[1]), dict(a.split("=", 1) for a in sys.argv[2:]))
