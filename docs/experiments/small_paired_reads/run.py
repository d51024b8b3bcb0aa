"""The small family's ring kernels from two builds of gemmgen_small.cuh (before and after a change): checks,
then fractions of the copy floor past L2 with beta = 0 and 1, the builds taking turns at going first.

Each LIB is built by build.sh from generated/src/small/*/small_*ring*.cu against one version of the header.
Checks (every build, every kernel): packed strided batches of 301 GEMMs (groups cut short at the end) in NN
and TN (and NC for complex), alpha and beta complex where the precision is, C as NaN where beta = 0, and the
pointer-array entry with beta ≠ 0; against a float64 NumPy reference with DESIGN.md's bound.  A kernel that
fails in any build is not timed.  Timing: 256 MB per launch (as `gemmgen bench`'s ≫L2 rows), ROUNDS rounds,
median of each build's rounds.

Usage (on an H100, repository root, PYTHONPATH=.): python docs/experiments/small_paired_reads/run.py OUT.json
NAME=LIB ... [--only PATTERN] [--names KERNEL,KERNEL,...] [--paths]"""
import ctypes
import json
import re
import statistics
import sys
from pathlib import Path

import numpy as np

from generator.precision import PRECISIONS
from harness.api import scalar
from harness.reference import error_bound, host_dtype
from harness.timing import copy_bandwidth, median_time_ms
from harness.wmma_tune import shape_launcher
from harness.workload import Workload, batch_for_megabytes, bytes_moved

ROUNDS = 3
PATHS = False   # --paths: also pointer arrays and small strided batches (other_paths)
_c, _i, _ll, _p = ctypes.c_char, ctypes.c_int, ctypes.c_longlong, ctypes.c_void_p


def kernels(pattern: str, names: list[str] | None = None) -> list[tuple[str, str, int, int, int]]:
    """(precision, name, m, n, k) of every ring kernel source of the default set whose name has pattern (or of
    the kernels named)."""
    out = []
    for name in names or [path.stem for path in sorted(Path("generated/src/small").glob("*/small_*ring*.cu"))]:
        m = re.match(r"small_(\w+?)_m(\d+)n(\d+)k(\d+)_", name)
        if pattern in name:
            out.append((m.group(1), name, int(m.group(2)), int(m.group(3)), int(m.group(4))))
    return out


def array_launcher(lib, name: str, prec: str):
    f = getattr(lib, f"{name}_array")
    s = type(scalar(prec, 1.0))
    f.restype = _i
    f.argtypes = [_c, _c, s, _p, _i, _p, _i, s, _p, _i, _i, _p]
    return f


def check(lib, name, prec, m, n, k, trans, alpha, beta, arrays=False, batch=301) -> bool:
    import cupy as cp

    rng = np.random.default_rng(11)
    complex_ = PRECISIONS[prec].is_complex
    rows_a, cols_a = (m, k) if trans[0] == "N" else (k, m)
    rows_b, cols_b = (k, n) if trans[1] == "N" else (n, k)

    def make(rows, cols):   # stored column-major, as values (complex128) and as the device's bytes
        v = rng.uniform(-1, 1, size=(batch, cols, rows)) + (1j * rng.uniform(-1, 1, size=(batch, cols, rows))
                                                             if complex_ else 0)
        if prec == "hc":
            stored = np.stack([v.real, v.imag], axis=-1).astype(np.float16)
            v = stored[..., 0].astype(np.float64) + 1j * stored[..., 1]
        else:
            stored = v.astype(host_dtype(prec))
            v = stored.astype(np.complex128)
        return np.transpose(v, (0, 2, 1)), cp.asarray(stored)

    (a, A), (b, B), (c, C) = make(rows_a, cols_a), make(rows_b, cols_b), make(m, n)
    if beta == 0:
        C[...] = np.nan
    op = lambda x, t: x if t == "N" else (np.conj(x) if t == "C" else x).transpose(0, 2, 1)  # noqa: E731
    want = alpha * (op(a, trans[0]) @ op(b, trans[1])) + (beta * c if beta != 0 else 0)
    ta, tb = trans[0].encode(), trans[1].encode()
    if arrays:
        elem = PRECISIONS[prec].element_bytes
        ptrs = [cp.asarray(np.uint64(x.data.ptr) + np.arange(batch, dtype=np.uint64) * np.uint64(r * q * elem))
                for x, r, q in ((A, rows_a, cols_a), (B, rows_b, cols_b), (C, m, n))]
        rc = array_launcher(lib, name, prec)(ta, tb, scalar(prec, alpha), ptrs[0].data.ptr, rows_a, ptrs[1].data.ptr,
                                            rows_b, scalar(prec, beta), ptrs[2].data.ptr, m, batch, None)
    else:
        rc = shape_launcher(lib, name, prec)(ta, tb, scalar(prec, alpha), A.data.ptr, rows_a, rows_a * cols_a,
                                             B.data.ptr, rows_b, rows_b * cols_b, scalar(prec, beta), C.data.ptr,
                                             m, m * n, batch, None)
    cp.cuda.runtime.deviceSynchronize()
    got = cp.asnumpy(C)
    got = (got[..., 0].astype(np.float64) + 1j * got[..., 1]) if prec == "hc" else got.astype(np.complex128)
    got = np.transpose(got, (0, 2, 1))
    norm = lambda x: np.sqrt(np.sum(np.abs(x) ** 2, axis=(1, 2)))   # noqa: E731
    scale = abs(alpha) * norm(op(a, trans[0])) * norm(op(b, trans[1])) + (abs(beta) * norm(c) if beta != 0 else 0)
    err = float(np.max(norm(got - want) / scale))
    return rc == 0 and err <= error_bound(prec, k)


def other_paths(loaded, name, prec, m, n, k, batch, bandwidth) -> dict:
    """Each build's fraction of the floor (beta = 0) through pointer arrays past L2 and on strided batches of
    1000 and 10,000 GEMMs (copies rotated past L2 as `gemmgen bench wmma` does: 32 per graph)."""
    out = {}
    work = Workload(prec, m, n, k, batch)
    floor = bytes_moved(prec, m, n, k, batch, False) / bandwidth * 1e3
    out["arrays"] = {lib: floor / median_time_ms(work.ours_array(array_launcher(f, name, prec), 1.0, 0.0,
                                                                 takes_shape=False), repeats=5)
                     for lib, f in loaded.items()}
    work.release()
    for small_batch in (1000, 10000):
        sets = 32
        work = Workload(prec, m, n, k, small_batch, sets=sets)
        floor = bytes_moved(prec, m, n, k, small_batch, False) / bandwidth * 1e3
        out[f"batch{small_batch}"] = {
            lib: floor / median_time_ms(work.ours(shape_launcher(f, name, prec), 1.0, 0.0, takes_shape=False),
                                        launches_per_graph=sets, repeats=7)
            for lib, f in loaded.items()}
        work.release()
    return out


def main(out: Path, libs: dict, pattern: str, names: list[str] | None = None) -> None:
    import cupy as cp

    complex_cases = [("NN", complex(0.75, -0.5), 0.0), ("TN", 1.0, complex(0.5, 0.25)), ("NC", -0.5, 1.0)]
    real_cases = [("NN", 0.75, 0.0), ("TN", 1.0, 0.5), ("NT", -0.5, 1.0)]
    loaded = {k: ctypes.CDLL(v) for k, v in libs.items()}
    checks, rows, bandwidth = {}, [], copy_bandwidth()
    for prec, name, m, n, k in kernels(pattern, names):
        cases = complex_cases if PRECISIONS[prec].is_complex else real_cases
        ok = {lib: all(check(loaded[lib], name, prec, m, n, k, *case) for case in cases)
              and check(loaded[lib], name, prec, m, n, k, "NN", cases[1][1], cases[1][2], arrays=True)
              for lib in libs}
        checks[name] = ok
        if not all(ok.values()):
            print("FAILED", name, ok, flush=True)
            continue
        batch = batch_for_megabytes(prec, m, n, k, 256)
        work = Workload(prec, m, n, k, batch)
        row = {"precision": prec, "kernel": name, "m": m, "n": n, "k": k, "batch": batch}
        keys = list(libs)
        if PATHS:   # beside the ≫L2 strided rows: pointer arrays ≫L2, strided batches of 1000 and 10,000
            row.update(other_paths(loaded, name, prec, m, n, k, batch, bandwidth))
        for beta in (0.0, 1.0):
            floor = bytes_moved(prec, m, n, k, batch, beta != 0) / bandwidth * 1e3
            times = {lib: [] for lib in keys}
            for r in range(ROUNDS):
                for lib in keys[r % len(keys):] + keys[:r % len(keys)]:
                    f = shape_launcher(loaded[lib], name, prec)
                    times[lib].append(median_time_ms(work.ours(f, 1.0, beta, takes_shape=False), repeats=5))
            row[f"beta{beta:g}"] = {lib: floor / statistics.median(v) for lib, v in times.items()}
        work.release()
        rows.append(row)
        print(name, {b: {lib: round(v, 3) for lib, v in row[b].items()} for b in row if isinstance(row[b], dict)},
              flush=True)
    out.write_text(json.dumps({"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                               "copy_bandwidth": bandwidth, "checks": checks, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    if "--paths" in sys.argv:
        sys.argv.remove("--paths")
        PATHS = True
    args, options = sys.argv[2:], {"--only": "", "--names": ""}
    for option in options:
        if option in args:
            i = args.index(option)
            options[option] = args[i + 1]
            args = args[:i] + args[i + 2:]
    main(Path(sys.argv[1]), dict(a.split("=", 1) for a in args), options["--only"],
         options["--names"].split(",") if options["--names"] else None)
