"""Checks and times the block-of-warps experiment (mma_block.so from build.py): every tuple against
float64 first (alpha = 0.75 - 0.25i, beta = 0 over NaN and beta = 0.5 + 0.25i; every stored layout pair
and, for hc, conjugation; odd sizes, whose columns are not on 16-byte chunks, take the element copies),
then ≫ L2 (256 MB) beta = 0 and batch 1000 against the committed table's general kernel at that size and
cuBLAS (hc: four real batched HGEMMs on planes), all in one run.

Usage (on a GPU): python docs/experiments/mma_block/timing.py BUILD_DIR OUT.json"""
import ctypes
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[2]))
from build import SHAPES  # noqa: E402

from gemmgen.harness.core.api import variant_function  # noqa: E402
from gemmgen.harness.wmma.bench import MAX_SETS, Planar, _sets  # noqa: E402
from gemmgen.harness.check import device_arch  # noqa: E402
from gemmgen.harness.core.timing import copy_bandwidth, median_time_ms  # noqa: E402
from gemmgen.harness.core.workload import Workload, batch_for_megabytes, bytes_moved  # noqa: E402

CHECK_SHAPES = ((77, 77, 77), (64, 64, 64), (130, 50, 40), (33, 96, 16))


def as_complex(x, prec):
    import cupy as cp
    if prec == "hc":
        y = x.astype(cp.float64).reshape(-1, 2)
        return y[:, 0] + 1j * y[:, 1]
    return x.astype(cp.float64)


def error(work, f, prec, pair, alpha, beta):
    import cupy as cp
    m, n, k = work.m, work.n, work.k
    count = work.batch
    A, B = as_complex(work.A, prec), as_complex(work.B, prec)
    ta, tb = pair
    opA = A.reshape(count, k, m).transpose(0, 2, 1) if ta == b"N" else A.reshape(count, m, k)
    opB = B.reshape(count, n, k).transpose(0, 2, 1) if tb == b"N" else B.reshape(count, k, n)
    if ta == b"C":
        opA = opA.conj()
    if tb == b"C":
        opB = opB.conj()
    lda, ldb = (m if ta == b"N" else k), (k if tb == b"N" else n)
    if beta == 0:
        work.C.fill(float("nan"))
        C0 = cp.zeros((count, m, n))
    else:
        work.C[:] = cp.random.uniform(-1, 1, work.C.size).astype(cp.float16)
        C0 = as_complex(work.C, prec).reshape(count, n, m).transpose(0, 2, 1)
    from gemmgen.harness.core.api import scalar
    rc = f(ta, tb, m, n, k, scalar(prec, alpha), work.A.data.ptr, lda, m * k, work.B.data.ptr, ldb, k * n,
           scalar(prec, beta), work.C.data.ptr, m, m * n, count, 0)
    assert rc == 0, rc
    cp.cuda.runtime.deviceSynchronize()
    C = as_complex(work.C, prec).reshape(count, n, m).transpose(0, 2, 1)
    ref = alpha * cp.matmul(opA, opB) + beta * C0
    scale = abs(alpha) * cp.linalg.norm(opA.reshape(count, -1), axis=1) * cp.linalg.norm(opB.reshape(count, -1), axis=1) \
        + abs(beta) * cp.linalg.norm(C0.reshape(count, -1), axis=1)
    err = cp.linalg.norm((C - ref).reshape(count, -1), axis=1) / scale
    return float(cp.nan_to_num(err, nan=np.inf).max())


def main(build: Path, out: Path) -> None:
    import cupy as cp
    arch, device = device_arch()
    lib = ctypes.CDLL(str(build / "mma_block.so"))
    meta = json.loads((build / "configs.json").read_text())
    configs = meta["configs"]
    bandwidth = copy_bandwidth()
    result = {"device": device, "arch": arch, "copy_bandwidth_gbs": bandwidth / 1e9, "checks": [], "rows": []}
    # ---- correctness
    for c in configs:
        prec, acc = c["config"][0], c["config"][-1]
        f = variant_function(lib, c["name"], "strided")
        pairs = [(a, b) for a in (b"N", b"T") for b in (b"N", b"T")]
        if prec == "hc":
            pairs += [(b"C", b"N"), (b"N", b"C"), (b"C", b"C"), (b"C", b"T")]
        alpha, beta1 = (0.75, 0.5) if prec == "h" else (0.75 - 0.25j, 0.5 + 0.25j)
        worst, bad = 0.0, []
        for m, n, k in CHECK_SHAPES:
            work = Workload(prec, m, n, k, 37)
            bound = 2 * k * 2.0 ** (-11 if acc == "f16" else -24) + 2 * 2.0 ** -11
            for pair in pairs:
                for beta in (0.0, beta1):
                    e = error(work, f, prec, pair, alpha, beta)
                    worst = max(worst, e / bound)
                    if not e <= bound:
                        bad.append((m, n, k, pair[0].decode() + pair[1].decode(), str(beta), e))
            work.release()
        result["checks"].append({"name": c["name"], "worst_over_bound": worst, "failures": bad})
        print("check", c["name"], "worst/bound", round(worst, 3), "FAIL " + str(bad[:4]) if bad else "ok", flush=True)
    ok = {c["name"] for c, r in zip(configs, result["checks"]) if not r["failures"]}
    # ---- timing
    for prec, kind, size in SHAPES:
        m = n = size
        k = size if kind == "square" else 16
        row = {"precision": prec, "kind": kind, "size": size}
        big = Workload(prec, m, n, k, batch_for_megabytes(prec, m, n, k, 256))
        floor = bytes_moved(prec, m, n, k, big.batch, False) / bandwidth * 1e3
        base = meta["baseline"].get(f"{prec}/{kind}/{size}")
        cands = [c["name"] for c in configs if c["config"][0] == prec and c["name"] in ok]
        for name in cands + ([base] if base else []):
            try:
                ms = median_time_ms(big.ours(variant_function(lib, name, "strided"), 1.0, 0.0), launches_per_graph=3,
                                    repeats=7)
                row[name] = round(floor / ms, 3)
            except RuntimeError as err:
                row[name] = str(err)
        if prec == "h":
            row["cublas"] = round(floor / median_time_ms(big.cublas(1.0, 0.0), launches_per_graph=3, repeats=7), 3)
        else:
            planar = Planar(big)
            row["cublas_planar"] = round(floor / median_time_ms(planar.launch_factory(0.0), launches_per_graph=3,
                                                                repeats=7), 3)
            planar.release()
        big.release()
        best = max(cands, key=lambda x: row[x] if isinstance(row[x], float) else 0)
        row["best"] = best
        row["baseline"] = base
        sets = _sets(prec, m, n, k, 1000)
        small = Workload(prec, m, n, k, 1000, sets=sets)
        floor = bytes_moved(prec, m, n, k, 1000, False) / bandwidth * 1e3
        for label, name in (("b1000_best", best), ("b1000_baseline", base)):
            if name:
                row[label] = round(floor / median_time_ms(small.ours(variant_function(lib, name, "strided"), 1.0, 0.0),
                                                          launches_per_graph=MAX_SETS, repeats=7), 3)
        if prec == "h":
            row["b1000_cublas"] = round(floor / median_time_ms(small.cublas(1.0, 0.0), launches_per_graph=MAX_SETS,
                                                               repeats=7), 3)
        else:
            planar = Planar(small)
            row["b1000_cublas_planar"] = round(floor / median_time_ms(planar.launch_factory(0.0),
                                                                      launches_per_graph=MAX_SETS, repeats=7), 3)
            planar.release()
        small.release()
        result["rows"].append(row)
        print(prec, kind, size, "best", best, row[best], "| baseline", row.get(base), "| cublas",
              row.get("cublas", row.get("cublas_planar")), "| b1000", row["b1000_best"], row.get("b1000_baseline"),
              row.get("b1000_cublas", row.get("b1000_cublas_planar")), flush=True)
        out.write_text(json.dumps(result, indent=1) + "\n")
    out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
