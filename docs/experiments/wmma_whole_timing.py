"""A/B of the wmma family's whole-GEMM path (2026-11-24): h with beta = 0, m, n, k multiples of 8 up to 128,
aligned columns, f16 accumulators: the tuple's cp.async ring or register-staged kernel (before) against
whole GEMMs through the tensor copy engine (after, sm_90; `wmma_whole_kernel`).  Two libraries of the same table, timed in one run through
the public strided entry point, NN, interleaved so drift hits both alike: data ≫ L2 and batch 1000 (data
rotated over copies as `gemmgen bench wmma` does).  Each point also checks, for every stored layout pair,
(squares; NN for rank-16 updates) that both libraries give the same bits (alpha = 1: same products, same order of sums), and the after
library against a float64 reference with alpha = 0.75 (DESIGN.md's bound, fp16 sums: c·k·2⁻¹¹, c = 2).
Libraries: the sources of `gemmgen generate --arch sm_90 --precisions h --sizes 32 --tallskinny-n ''
--cpu-isa generic`, built with harness.build.build_library, before and after.

Usage (on a GPU): python docs/experiments/wmma_whole_timing.py BEFORE.so AFTER.so OUT.json"""
import json
import sys
from pathlib import Path

import numpy as np

from gemmgen.harness.core.api import GemmgenLibrary
from gemmgen.harness.wmma.bench import MAX_SETS, _sets
from gemmgen.harness.check import device_arch
from gemmgen.harness.core.timing import copy_bandwidth, median_time_ms
from gemmgen.harness.core.workload import Workload, batch_for_megabytes, bytes_moved

POINTS = [("square", s) for s in (40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128)] \
    + [("rank", s) for s in (40, 48, 64, 72, 96, 128)]
CASES = (("big", 0.0), ("batch1000", 0.0))
PAIRS = ((b"N", b"N"), (b"N", b"T"), (b"T", b"N"), (b"T", b"T"))


def reference_error(work: Workload, lib, alpha: float, pair) -> float:
    """Largest per-matrix error of the after library (first 64 GEMMs of set 0) against float64."""
    import cupy as cp

    m, n, k = work.m, work.n, work.k
    count = min(64, work.batch)
    A = work.A[: count * m * k].reshape(count, k, m).transpose(0, 2, 1).astype(cp.float64)
    B = work.B[: count * k * n].reshape(count, n, k).transpose(0, 2, 1).astype(cp.float64)
    opA = A if pair[0] == b"N" else A.transpose(0, 2, 1)   # m = n = k: same buffers, either layout
    opB = B if pair[1] == b"N" else B.transpose(0, 2, 1)
    work.C.fill(float("nan"))
    work.ours(lib.lib.gemmgen_hgemm_batched_strided, alpha, 0.0, trans=pair)(0)
    cp.cuda.runtime.deviceSynchronize()
    C = work.C[: count * m * n].reshape(count, n, m).transpose(0, 2, 1).astype(cp.float64)
    ref = alpha * cp.matmul(opA, opB)
    err = cp.linalg.norm((C - ref).reshape(count, -1), axis=1) / (
        abs(alpha) * cp.linalg.norm(opA.reshape(count, -1), axis=1) * cp.linalg.norm(opB.reshape(count, -1), axis=1))
    return float(cp.nan_to_num(err, nan=np.inf).max())


def main(old: Path, new: Path, out: Path) -> None:
    import cupy as cp

    arch, device = device_arch()
    libs = {"before": GemmgenLibrary(old), "after": GemmgenLibrary(new)}
    bandwidth = copy_bandwidth()
    rows = []
    for kind, size in POINTS:
        m, n, k = size, size, size if kind == "square" else 16
        row = {"kind": kind, "size": size, "kernel": libs["after"].selected_kernel("h", m, n, k)}
        for case, beta in CASES:
            batch = batch_for_megabytes("h", m, n, k, 512) if case == "big" else 1000
            sets = 1 if case == "big" else _sets("h", m, n, k, batch)
            work = Workload("h", m, n, k, batch, sets=sets)
            floor_ms = bytes_moved("h", m, n, k, batch, beta != 0) / bandwidth * 1e3
            for label, lib in libs.items():   # interleaved, so drift hits both alike
                launch = work.ours(lib.lib.gemmgen_hgemm_batched_strided, 1.0, beta)
                ms = median_time_ms(launch, launches_per_graph=MAX_SETS if sets > 1 else 5, repeats=7)
                row[f"{case}_{label}"] = round(floor_ms / ms, 3)
            if case == "big":
                pairs = PAIRS if kind == "square" else PAIRS[:1]   # the packed buffers fit 'T' where m = n = k
                same = []
                for pair in pairs:
                    results = {}
                    for label, lib in libs.items():
                        work.C.fill(0)
                        work.ours(lib.lib.gemmgen_hgemm_batched_strided, 1.0, 0.0, trans=pair)(0)
                        cp.cuda.runtime.deviceSynchronize()
                        results[label] = work.C.copy()
                    same.append(bool(cp.all(results["before"].view(cp.uint16) == results["after"].view(cp.uint16))))
                row["same_bits"] = same
                row["max_error_alpha075"] = max(reference_error(work, libs["after"], 0.75, pair) for pair in pairs)
                row["bound"] = 2 * k * 2.0 ** -11
            work.release()
        rows.append(row)
        print(kind, size, row["kernel"], " ".join(f"{c}={row[f'{c}_before']:.2f}->{row[f'{c}_after']:.2f}"
                                                  for c, _ in CASES),
              "same" if all(row["same_bits"]) else f"DIFFERENT BITS {row['same_bits']}",
              f"err {row['max_error_alpha075']:.2e} (bound {row['bound']:.2e})", flush=True)
    out.write_text(json.dumps({"device": device, "arch": arch, "copy_bandwidth_gbs": bandwidth / 1e9,
                               "what": "fraction of the bandwidth floor, before (the tuple's kernels) and after "
                                       "(whole GEMMs through tensor copies), strided, NN, beta = 0",
                               "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
