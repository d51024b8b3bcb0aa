"""Times the packed-warp experiment (libpackedwarp.so from build.py) on packed strided batches, data ≫ L2
(512 MB) and batch 1000, beta = 0 and 1, against the fraction of the floor in the committed bench
(docs/perf/bench_wmma_sm_90.json) and, where LIB is given, the library's public entry point in the same
run.  Checks every variant first against float64 (alpha = 0.75, beta = 0 over NaN and beta = 0.5; every
stored layout pair on squares), DESIGN.md's bound for the sums it uses (fp16: 2·k·2⁻¹¹, fp32: 2·k·2⁻²⁴
plus the fp16 rounding of C).

Usage (on a GPU): python docs/experiments/packed_warp/timing.py XP.so OUT.json [LIB.so]"""
import ctypes
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build import SHAPES, VARIANTS  # noqa: E402

from gemmgen.harness.core.api import GemmgenLibrary, variant_function  # noqa: E402
from gemmgen.harness.wmma.bench import MAX_SETS, _sets  # noqa: E402
from gemmgen.harness.check import device_arch  # noqa: E402
from gemmgen.harness.core.timing import copy_bandwidth, median_time_ms  # noqa: E402
from gemmgen.harness.core.workload import Workload, batch_for_megabytes, bytes_moved  # noqa: E402


def committed() -> dict:
    rows = json.loads((Path(__file__).resolve().parents[3] / "docs/perf/bench_wmma_sm_90.json").read_text())["rows"]
    return {(r["m"], r["n"], r["k"], r["data"]): r for r in rows if r["precision"] == "h"}


def error(work, f, alpha, beta, pair):
    import cupy as cp
    m, n, k = work.m, work.n, work.k
    count = min(256, work.batch)
    A = work.A[: count * m * k].astype(cp.float64)
    B = work.B[: count * k * n].astype(cp.float64)
    opA = A.reshape(count, k, m).transpose(0, 2, 1) if pair[0] == b"N" else A.reshape(count, m, k)
    opB = B.reshape(count, n, k).transpose(0, 2, 1) if pair[1] == b"N" else B.reshape(count, k, n)
    lda = m if pair[0] == b"N" else k
    ldb = k if pair[1] == b"N" else n
    if beta == 0:
        work.C.fill(float("nan"))
        C0 = cp.zeros((count, m, n))
    else:
        work.C[:] = cp.random.uniform(-1, 1, work.C.size).astype(cp.float16)
        C0 = work.C[: count * m * n].astype(cp.float64).reshape(count, n, m).transpose(0, 2, 1)
    rc = f(*pair, alpha, work.A.data.ptr, lda, m * k, work.B.data.ptr, ldb, k * n, beta, work.C.data.ptr, m, m * n,
           work.batch, 0)
    assert rc == 0, rc
    cp.cuda.runtime.deviceSynchronize()
    C = work.C[: count * m * n].astype(cp.float64).reshape(count, n, m).transpose(0, 2, 1)
    ref = alpha * cp.matmul(opA, opB) + beta * C0
    scale = abs(alpha) * cp.linalg.norm(opA.reshape(count, -1), axis=1) * cp.linalg.norm(opB.reshape(count, -1), axis=1) \
        + abs(beta) * cp.linalg.norm(C0.reshape(count, -1), axis=1)
    err = cp.linalg.norm((C - ref).reshape(count, -1), axis=1) / scale
    # also the last GEMM of the batch (the end of the buffers)
    return float(cp.nan_to_num(err, nan=np.inf).max())


def main(xp: Path, out: Path, lib_path: Path | None) -> None:
    import cupy as cp
    arch, device = device_arch()
    lib = ctypes.CDLL(str(xp))
    ours = GemmgenLibrary(lib_path) if lib_path else None
    base = committed()
    bandwidth = copy_bandwidth()
    rows = []
    for m, n, k in SHAPES:
        kind = "square" if m == n == k else "rank"
        row = {"m": m, "n": n, "k": k, "kind": kind}
        big = Workload("h", m, n, k, batch_for_megabytes("h", m, n, k, 512))
        pairs = ((b"N", b"N"), (b"N", b"T"), (b"T", b"N"), (b"T", b"T")) if kind == "square" else ((b"N", b"N"),)
        for w, s, acc in VARIANTS:
            name = f"xp_h_m{m}n{n}k{k}_w{w}_s{s}_{acc}"
            f = variant_function(lib, name, "strided")
            bound = 2 * k * 2.0 ** (-11 if acc == "f16" else -24) + 2.0 ** -11
            errs = [error(big, f, 0.75, b, p) for p in pairs for b in (0.0, 0.5)]
            v = {"max_error": max(errs), "bound": bound, "ok": max(errs) <= bound}
            for beta in (0.0, 1.0):
                floor_ms = bytes_moved("h", m, n, k, big.batch, beta != 0) / bandwidth * 1e3
                ms = median_time_ms(big.ours(f, 1.0, beta), launches_per_graph=3, repeats=7)
                v[f"big_b{int(beta)}"] = round(floor_ms / ms, 3)
            row[name] = v
        if ours:
            for beta in (0.0, 1.0):
                floor_ms = bytes_moved("h", m, n, k, big.batch, beta != 0) / bandwidth * 1e3
                ms = median_time_ms(big.ours(ours.lib.gemmgen_hgemm_batched_strided, 1.0, beta), launches_per_graph=3,
                                    repeats=7)
                row[f"lib_big_b{int(beta)}"] = round(floor_ms / ms, 3)
        big.release()
        best = max((x for x in row if x.startswith("xp_")), key=lambda x: row[x]["big_b0"])
        # batch 1000 for the best variant, and cuBLAS there
        sets = _sets("h", m, n, k, 1000)
        small = Workload("h", m, n, k, 1000, sets=sets)
        floor_ms = bytes_moved("h", m, n, k, 1000, False) / bandwidth * 1e3
        f = variant_function(lib, best, "strided")
        row["best"] = best
        row["b1000_best"] = round(floor_ms / median_time_ms(small.ours(f, 1.0, 0.0), launches_per_graph=MAX_SETS,
                                                            repeats=7), 3)
        row["b1000_cublas"] = round(floor_ms / median_time_ms(small.cublas(1.0, 0.0), launches_per_graph=MAX_SETS,
                                                              repeats=7), 3)
        small.release()
        ref = base.get((m, n, k, "≫L2"))
        ref1000 = base.get((m, n, k, "batch 1000"))
        row["committed_big_b0"] = ref and round(ref["ours"]["floor_fraction"], 3)
        row["committed_big_b1"] = ref and ref.get("ours_beta1") and round(ref["ours_beta1"]["floor_fraction"], 3)
        row["committed_kernel"] = ref and ref["kernel"]
        row["committed_b1000"] = ref1000 and round(ref1000["ours"]["floor_fraction"], 3)
        rows.append(row)
        print(kind, m, "best", best, row[best]["big_b0"], row[best]["big_b1"], "| committed", row["committed_big_b0"],
              row["committed_big_b1"], "| lib", row.get("lib_big_b0"), "| b1000", row["b1000_best"], "cublas",
              row["b1000_cublas"], "committed", row["committed_b1000"],
              "| all ok" if all(row[x]["ok"] for x in row if x.startswith("xp_")) else "| ERRORS " + str(
                  [(x, row[x]["max_error"]) for x in row if x.startswith("xp_") and not row[x]["ok"]]), flush=True)
        out.write_text(json.dumps({"device": device, "arch": arch, "copy_bandwidth_gbs": bandwidth / 1e9,
                                   "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]) if len(sys.argv) > 3 else None)
