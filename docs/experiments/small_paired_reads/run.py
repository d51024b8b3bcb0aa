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

from gemmgen.generator.precision import PRECISIONS
from gemmgen.harness.core import reference as ref
from gemmgen.harness.core.api import scalar, variant_function
from gemmgen.harness.core.timing import copy_bandwidth, median_time_ms
from gemmgen.harness.core.workload import Workload, batch_for_megabytes, bytes_moved

ROUNDS = 3
PATHS = False   # --paths: also pointer arrays and small strided batches (other_paths)


def kernels(pattern: str, names: list[str] | None = None) -> list[tuple[str, str, int, int, int]]:
    """(precision, name, m, n, k) of every ring kernel source of the default set whose name has pattern (or of
    the kernels named)."""
    out = []
    for name in names or [path.stem for path in sorted(Path("generated/src/small").glob("*/small_*ring*.cu"))]:
        m = re.match(r"small_(\w+?)_m(\d+)n(\d+)k(\d+)_", name)
        if pattern in name:
            out.append((m.group(1), name, int(m.group(2)), int(m.group(3)), int(m.group(4))))
    return out


def check(lib, name, prec, m, n, k, trans, alpha, beta, arrays=False, batch=301) -> bool:
    """One launch of a packed batch (op as `trans`; pointers to the same matrices where `arrays`) against the
    float64 reference with DESIGN.md's bound; C is NaN where beta = 0, so a kernel that reads it fails."""
    import cupy as cp

    rng = np.random.default_rng(11)
    stored_a, stored_b = (m, k) if trans[0] == "N" else (k, m), (k, n) if trans[1] == "N" else (n, k)
    host = {x: ref.random_values(rng, prec, batch * rows * cols)
            for x, (rows, cols) in (("A", stored_a), ("B", stored_b), ("C", (m, n)))}
    A, B, C = (cp.asarray(ref.to_storage(prec, host[x])) for x in "ABC")
    if beta == 0:
        C[...] = np.nan
    alpha_r, beta_r = ref.round_scalar(prec, alpha), ref.round_scalar(prec, beta)
    ta, tb = trans[0].encode(), trans[1].encode()
    if arrays:
        elem = PRECISIONS[prec].element_bytes
        ptrs = [cp.uint64(x.data.ptr) + cp.arange(batch, dtype=cp.uint64) * cp.uint64(size * elem)
                for x, size in ((A, m * k), (B, k * n), (C, m * n))]
        rc = variant_function(lib, name, "array")(ta, tb, scalar(prec, alpha), ptrs[0].data.ptr, stored_a[0],
                                                  ptrs[1].data.ptr, stored_b[0], scalar(prec, beta),
                                                  ptrs[2].data.ptr, m, batch, None)
    else:
        rc = variant_function(lib, name, "strided")(ta, tb, scalar(prec, alpha), A.data.ptr, stored_a[0], m * k,
                                                    B.data.ptr, stored_b[0], k * n, scalar(prec, beta),
                                                    C.data.ptr, m, m * n, batch, None)
    cp.cuda.runtime.deviceSynchronize()
    a, b, c0 = (ref.matrices(host[x], batch, rows, cols, rows, rows * cols)
                for x, (rows, cols) in (("A", stored_a), ("B", stored_b), ("C", (m, n))))
    got = ref.matrices(ref.from_storage(prec, cp.asnumpy(C)).reshape(-1), batch, m, n, m, m * n)
    expected = ref.reference(trans[0], trans[1], alpha_r, a, b, beta_r, c0)
    err = float(np.max(ref.relative_errors(got, expected, alpha_r, a, b, beta_r, c0)))
    return rc == 0 and err <= ref.error_bound(prec, k)


def other_paths(loaded, name, prec, m, n, k, batch, bandwidth) -> dict:
    """Each build's fraction of the floor (beta = 0) through pointer arrays past L2 and on strided batches of
    1000 and 10,000 GEMMs (copies rotated past L2 as `gemmgen bench wmma` does: 32 per graph)."""
    out = {}
    work = Workload(prec, m, n, k, batch)
    floor = bytes_moved(prec, m, n, k, batch, False) / bandwidth * 1e3
    out["arrays"] = {lib: floor / median_time_ms(work.ours_array(variant_function(f, name, "array"), 1.0, 0.0,
                                                                 takes_shape=False), repeats=5)
                     for lib, f in loaded.items()}
    work.release()
    for small_batch in (1000, 10000):
        sets = 32
        work = Workload(prec, m, n, k, small_batch, sets=sets)
        floor = bytes_moved(prec, m, n, k, small_batch, False) / bandwidth * 1e3
        out[f"batch{small_batch}"] = {
            lib: floor / median_time_ms(work.ours(variant_function(f, name, "strided"), 1.0, 0.0, takes_shape=False),
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
                    f = variant_function(loaded[lib], name, "strided")
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
