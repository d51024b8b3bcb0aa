"""A/B of the wmma family's epilogue (2026-11-24): C written element by element (each thread's
DIM_X×DIM_Y tile: a bounds test, a branch and a 2-byte store per element) against 16-byte chunks down
the columns where every column of the C block starts on a 16-byte boundary (write_c_chunks).  Two
libraries of the same table, timed in one run through the public strided entry point, NN, interleaved
so drift hits both alike: data ≫ L2 with beta = 0 and beta = 1, and batch 1000 (data rotated over
copies as `gemmgen bench wmma` does).  Sizes where the dispatch runs a general wmma kernel: multiples
of 8 (aligned columns, the new path) and a few others (the old path, to see any cost of the larger
kernels).  Each row also checks that both libraries give the same result to the bit.
Libraries: the sources of `gemmgen generate --arch sm_90 --precisions h,hc --sizes 32
--tallskinny-n '' --cpu-isa generic`, built with harness.build.build_library, before and after.

Usage (on a GPU): python docs/experiments/wmma_epilogue_timing.py BEFORE.so AFTER.so OUT.json"""
import json
import sys
from pathlib import Path

from gemmgen.harness.core.api import GemmgenLibrary
from gemmgen.harness.wmma.bench import MAX_SETS, _sets
from gemmgen.harness.check import device_arch
from gemmgen.harness.core.timing import copy_bandwidth, median_time_ms
from gemmgen.harness.core.workload import Workload, batch_for_megabytes, bytes_moved

POINTS = {   # precision: (kind, size), kind "square" (M = N = K) or "rank" (M = N, K = 16)
    "h": [("square", s) for s in (33, 40, 48, 56, 57, 64, 72, 80, 96, 112, 128)]
         + [("rank", s) for s in (33, 40, 48, 64, 72, 96, 128)],
    "hc": [("square", s) for s in (33, 48, 64, 96, 128, 192, 256)] + [("rank", s) for s in (48, 64, 128)],
}
CASES = (("big", 0.0), ("big", 1.0), ("batch1000", 0.0))


def main(old: Path, new: Path, out: Path) -> None:
    import cupy as cp

    arch, device = device_arch()
    libs = {"before": GemmgenLibrary(old), "after": GemmgenLibrary(new)}
    bandwidth = copy_bandwidth()
    rows = []
    for prec, points in POINTS.items():
        name = "gemmgen_hgemm_batched_strided" if prec == "h" else "gemmgen_hcgemm_batched_strided"
        for kind, size in points:
            m, n, k = size, size, size if kind == "square" else 16
            row = {"precision": prec, "kind": kind, "size": size,
                   "kernel": libs["after"].selected_kernel(prec, m, n, k)}
            for case, beta in CASES:
                batch = batch_for_megabytes(prec, m, n, k, 512) if case == "big" else 1000
                sets = 1 if case == "big" else _sets(prec, m, n, k, batch)
                work = Workload(prec, m, n, k, batch, sets=sets)
                floor_ms = bytes_moved(prec, m, n, k, batch, beta != 0) / bandwidth * 1e3
                results = {}
                for label, lib in libs.items():   # interleaved, so drift hits both alike
                    launch = work.ours(getattr(lib.lib, name), 1.0, beta)
                    ms = median_time_ms(launch, launches_per_graph=MAX_SETS if sets > 1 else 5, repeats=7)
                    row[f"{case}_beta{beta:g}_{label}"] = round(floor_ms / ms, 3)
                    if case == "big" and beta == 0:
                        work.C.fill(0)
                        launch(0)
                        cp.cuda.runtime.deviceSynchronize()
                        results[label] = work.C.copy()
                if results:
                    row["same_bits"] = bool(cp.all(results["before"].view(cp.uint16)
                                                   == results["after"].view(cp.uint16)))
                work.release()
            rows.append(row)
            print(prec, kind, size, row["kernel"], " ".join(
                f"{c}_b{b:g}={row[f'{c}_beta{b:g}_before']:.2f}->{row[f'{c}_beta{b:g}_after']:.2f}" for c, b in CASES),
                "" if row["same_bits"] else "DIFFERENT BITS", flush=True)
    out.write_text(json.dumps({"device": device, "arch": arch, "copy_bandwidth_gbs": bandwidth / 1e9,
                               "what": "fraction of the bandwidth floor, before (element-wise epilogue) and after "
                                       "(16-byte chunks where C's columns are aligned), strided, NN",
                               "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
