"""1×1×1 batches past L2: the small family's 1×1×1 kernels from several builds of gemmgen_small.cuh (before and
after the elementwise path), each precision, beta = 0 and 1, against cuBLAS (hc: on planar data, four GEMMs), as fractions of the copy floor.

Each LIB is built by build.sh from generated/src/small/*/small_*_m1n1k1_*.cu against one version of the header.
Checks first (float64, alpha and beta complex where the precision is, the conjugate for complex, C as NaN where
beta = 0, and an odd batch so the last elements miss a whole 16-byte vector); a build that fails is not timed.
Timing: 256 MB per launch as `gemmgen bench wmma`'s ≫L2 rows, the builds taking turns at going first.

Usage (on an H100, repository root): python docs/experiments/elementwise/run.py OUT.json NAME=LIB ..."""
import ctypes
import json
import statistics
import sys
from pathlib import Path

from gemmgen.generator.precision import PRECISIONS
from gemmgen.harness.core.api import scalar
from gemmgen.harness.wmma.bench import Planar
from gemmgen.harness.core.reference import error_bound
from gemmgen.harness.core.timing import copy_bandwidth, median_time_ms
from gemmgen.harness.core.api import variant_function
from gemmgen.harness.core.workload import Workload, batch_for_megabytes, bytes_moved

ROUNDS = 4


def kernel_names() -> dict:
    """The default set's 1×1×1 kernel of each precision (its name, from its source file)."""
    return {path.parent.name: path.stem for path in sorted(Path("generated/src/small").glob("*/small_*_m1n1k1_*.cu"))}


def check(f, prec, trans, alpha, beta, batch=1001) -> bool:
    import cupy as cp
    import numpy as np

    rng = np.random.default_rng(3)
    complex_ = PRECISIONS[prec].is_complex
    dt = {"h": np.float16, "s": np.float32, "d": np.float64, "hc": np.float16, "c": np.complex64,
          "z": np.complex128}[prec]
    def make():
        x = rng.uniform(-1, 1, size=(batch, 2) if prec == "hc" else batch)
        if complex_ and prec != "hc":
            x = x + 1j * rng.uniform(-1, 1, size=batch)
        return x.astype(dt)
    a, b, c = make(), make(), make()
    val = lambda x: (x[:, 0].astype(np.float64) + 1j * x[:, 1]) if prec == "hc" else x.astype(np.complex128)  # noqa
    A, B, C = cp.asarray(a), cp.asarray(b), cp.asarray(c)
    if beta == 0:
        C[...] = np.nan
    rc = f(trans[0].encode(), trans[1].encode(), scalar(prec, alpha), A.data.ptr, 1, 1, B.data.ptr, 1, 1,
           scalar(prec, beta), C.data.ptr, 1, 1, batch, None)
    cp.cuda.runtime.deviceSynchronize()
    opa = np.conj(val(a)) if trans[0] == "C" else val(a)
    opb = np.conj(val(b)) if trans[1] == "C" else val(b)
    want = alpha * opa * opb + (beta * val(c) if beta != 0 else 0)
    got = val(cp.asnumpy(C))
    scale = abs(alpha) * np.abs(opa) * np.abs(opb) + (abs(beta) * np.abs(val(c)) if beta != 0 else 0)
    err = float(np.max(np.abs(got - want) / np.maximum(scale, 1e-30)))
    return rc == 0 and err <= error_bound(prec, 1)


def main(out: Path, libs: dict) -> None:
    import cupy as cp

    names = kernel_names()
    fns, checks = {}, {}
    for lib_name, path in libs.items():
        lib = ctypes.CDLL(path)
        for prec, name in names.items():
            f = variant_function(lib, name, "strided")
            cases = [("NN", 1.0, 0.0), ("NN", 0.5, 1.0), ("TN", -1.0, 0.25)]
            if PRECISIONS[prec].is_complex:
                cases += [("CN", complex(0.5, -0.25), complex(1, 1)), ("NC", 1.0, 0.0)]
            ok = [check(f, prec, *case) for case in cases]
            checks[f"{lib_name}:{prec}"] = ok
            print(lib_name, prec, name, ok, flush=True)
            if all(ok):
                fns[(lib_name, prec)] = f
    bandwidth = copy_bandwidth()
    rows = []
    for prec, name in names.items():
        batch = batch_for_megabytes(prec, 1, 1, 1, 256)
        work = Workload(prec, 1, 1, 1, batch)
        row = {"precision": prec, "kernel": name, "batch": batch}
        for beta in (0.0, 1.0):
            floor = bytes_moved(prec, 1, 1, 1, batch, beta != 0) / bandwidth * 1e3
            keys = [k for k in libs if (k, prec) in fns]
            times = {k: [] for k in keys + ["cublas"]}
            for r in range(ROUNDS):
                baseline = Planar(work).launch_factory(beta) if prec == "hc" else work.cublas(1.0, beta)
                times["cublas"].append(median_time_ms(baseline, repeats=7))
                for k in keys[r % len(keys):] + keys[:r % len(keys)]:
                    times[k].append(median_time_ms(work.ours(fns[(k, prec)], 1.0, beta, takes_shape=False), repeats=7))
            row[f"beta{beta:g}"] = {k: {"ms": statistics.median(v), "floor_fraction": floor / statistics.median(v)}
                                    for k, v in times.items()}
        work.release()
        rows.append(row)
        print(prec, {b: {k: round(v["floor_fraction"], 3) for k, v in row[b].items()} for b in ("beta0", "beta1")},
              flush=True)
    out.write_text(json.dumps({"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                               "copy_bandwidth": bandwidth, "checks": checks, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), dict(a.split("=", 1) for a in sys.argv[2:]))
