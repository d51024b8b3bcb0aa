"""Check and time the wgmma experiment kernels (make.py) against cuBLAS and the table's block kernels.

Usage (on an H100, repository root, after `python docs/experiments/wgmma_block/make.py` and an nvcc
build of it into LIB): python docs/experiments/wgmma_block/run.py LIB OUT.json"""
import ctypes
import json
import sys
from pathlib import Path

import numpy as np

from gemmgen.generator import wmma
from gemmgen.generator.tuning import load_table
from gemmgen.harness.wmma.bench import MAX_SETS, _sets
from gemmgen.harness.core.build import build_library
from gemmgen.harness.core.reference import error_bound
from gemmgen.harness.check import device_arch
from gemmgen.harness.core.timing import copy_bandwidth, median_time_ms
from gemmgen.harness.wmma.tune import BUNDLE, _write_sources, spec_launcher
from gemmgen.harness.core.workload import Workload, batch_for_megabytes, bytes_moved

SIZES = (96, 104, 112, 128)
VARIANTS = {"wgmmasq": ("s3_b2", "s4_b1", "s6_b1"), "wgmmatma": ("s3_b2", "s4_b1", "s6_b1"),
            "wgmmasw": ("s2_b2", "s3_b1", "s4_b1")}
_c, _i, _ll, _p, _f = ctypes.c_char, ctypes.c_int, ctypes.c_longlong, ctypes.c_void_p, ctypes.c_float


def launcher(lib, name):
    f = getattr(lib, name)
    f.restype = _i
    f.argtypes = [_c, _c, _i, _i, _i, _f, _p, _i, _ll, _p, _i, _ll, _f, _p, _i, _ll, _i, _p]
    return f


def check(f, s: int, alpha: float, beta: float, batch: int = 700) -> float:
    """NN with leading dimensions past the matrix (s + 8) against float64; DESIGN.md's error."""
    import cupy as cp

    rng = cp.random.RandomState(11)
    ld = s + 8
    make = lambda: (rng.uniform(-1, 1, size=(batch, s, ld))).astype(cp.float16)   # noqa: E731
    A, B, C = make(), make(), make()
    val = lambda x: cp.transpose(x[:, :, :s].astype(cp.float64), (0, 2, 1))   # noqa: E731
    a, b, c0 = val(A), val(B), val(C)
    padding = C[:, :, s:].copy()
    rc = f(b"N", b"N", s, s, s, alpha, A.data.ptr, ld, ld * s, B.data.ptr, ld, ld * s, beta, C.data.ptr, ld, ld * s,
           batch, None)
    cp.cuda.runtime.deviceSynchronize()
    if rc != 0:
        return float("inf")
    expected = alpha * (a @ b) + beta * c0
    norm = lambda x: cp.sqrt(cp.sum(x ** 2, axis=(1, 2)))   # noqa: E731
    err = norm(val(C) - expected) / (abs(alpha) * norm(a) * norm(b) + abs(beta) * norm(c0))
    pad_ok = bool(cp.all(C[:, :, s:] == padding))   # the rows past M are never written
    return float(cp.max(err)) if pad_ok else float("inf")


def main(lib_path: Path, out: Path) -> None:
    arch, device = device_arch()
    lib = ctypes.CDLL(str(lib_path))
    table = {(r["kind"], r["size"]): r["kernel"] for r in load_table(arch)["wmma"] if r["precision"] == "h"}
    specs = sorted({wmma.WmmaBlockSpec.parse(table[("square", s)]) for s in SIZES})
    root = Path("build/wgmma_block_table") / arch
    bundles = _write_sources(root, specs, BUNDLE)
    built = build_library(root, root / "build", (arch,), 16, sources=bundles, library_name="libtable.so")
    table_lib = ctypes.CDLL(str(built.library))
    bandwidth = copy_bandwidth()
    rows = []
    for s in SIZES:
        names = [f"{kind}_{s}_{v}" for kind, vs in VARIANTS.items() for v in vs]
        errors = {n: [check(launcher(lib, n), s, 1.5, 0.0), check(launcher(lib, n), s, 1.5, 0.5)] for n in names}
        print(s, {n: e for n, e in errors.items()}, flush=True)
        good = [n for n in names if max(errors[n]) <= error_bound("h", s)]
        spec = wmma.WmmaBlockSpec.parse(table[("square", s)])
        tf, takes = spec_launcher(table_lib, spec)
        for batch in (1000, batch_for_megabytes("h", s, s, s, 256)):
            work = Workload("h", s, s, s, batch, sets=_sets("h", s, s, s, batch))
            t = lambda launch: median_time_ms(launch, launches_per_graph=MAX_SETS, repeats=9) * 1e3   # noqa: E731
            row = {"size": s, "batch": batch, "errors": errors, "cublas_us": t(work.cublas(1.0, 0.0)),
                   "table": spec.name, "table_us": t(work.ours(tf, 1.0, 0.0, takes_shape=takes))}
            for n in good:
                row[n] = t(work.ours(launcher(lib, n), 1.0, 0.0, takes_shape=True))
            floor_us = bytes_moved("h", s, s, s, batch, False) / bandwidth * 1e6
            row["floor_us"] = floor_us
            ours = {n: us for n, us in row.items() if n.startswith(tuple(VARIANTS))}
            if ours:
                best = min(ours, key=ours.get)
                row.update(best=best, best_vs_cublas=row["cublas_us"] / ours[best], best_floor=floor_us / ours[best])
            row.update(table_vs_cublas=row["cublas_us"] / row["table_us"], cublas_floor=floor_us / row["cublas_us"])
            work.release()
            rows.append(row)
            print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items() if k != "errors"}),
                  flush=True)
    out.write_text(json.dumps({"device": device, "arch": arch, "copy_bandwidth": bandwidth,
                               "what": "us per launch, beta = 0, NN, buffer sets rotated past L2", "rows": rows},
                              indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
