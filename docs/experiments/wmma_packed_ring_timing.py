"""The raw packed ring of the wmma family (2026-11-24): h GEMMs of a packed strided batch that each fit
one C block, at sizes that are not multiples of 8, where the aligned cp.async ring cannot run.  Before:
the table's kernel at that size (a register-staged tuple, reading element by element).  After: every
tuple of the library with a ring (stages > 0) that fits the size, through its own launcher, which now
takes the packed ring there.  Each ring tuple is first checked against a float64 CuPy reference on a
packed batch of 2000 GEMMs of an odd shape that fits its block (every transpose pair), and on its
aligned-ring case.  Timed as `gemmgen tune wmma` times (64 MB of data, NN, beta = 0, CUDA graphs of 3
launches), plus beta = 1 for the fastest tuple; fractions of the bandwidth floor.

Usage (on a GPU): python docs/experiments/wmma_packed_ring_timing.py LIB.so OUT.json"""
import json
import subprocess
import sys
from pathlib import Path

from gemmgen.generator import wmma
from gemmgen.harness.core.api import GemmgenLibrary
from gemmgen.harness.check import device_arch
from gemmgen.harness.core.timing import copy_bandwidth, median_time_ms
from gemmgen.harness.core.api import variant_function
from gemmgen.harness.wmma.tune import MEGABYTES, MIN_BATCH, fits, gpu_check, shape_of
from gemmgen.harness.core.workload import Workload, batch_for_megabytes, bytes_moved

SIZES = {"square": [s for s in range(25, 64) if s % 8] + [40, 48, 56],
         "rank": [s for s in range(33, 64) if s % 8] + [40, 48, 56]}


def main(lib_path: Path, out: Path) -> None:
    arch, device = device_arch()
    lib = GemmgenLibrary(lib_path)
    symbols = subprocess.run(["nm", "-D", str(lib_path)], capture_output=True, text=True).stdout.split()
    names = sorted({s[:-len("_strided")] for s in symbols if s.startswith("wmma_h_") and s.endswith("_strided")})
    rings = [spec for spec in map(wmma.WmmaSpec.parse, names) if spec.stages]
    bandwidth = copy_bandwidth()
    checks = []
    for spec in rings:
        f = variant_function(lib.lib, spec.name, "strided")
        shape = (spec.blk_m - 3, spec.blk_n - 5, 2 * spec.blk_k + 1)
        ok_p, err_p = gpu_check(f, "h", *shape, True, batch=2000, packed=True)
        ok_a, err_a = gpu_check(f, "h", 37, 45, 29, True, batch=2000, aligned=True)
        checks.append({"kernel": spec.name, "packed_shape": shape, "packed_ok": ok_p, "packed_error": err_p,
                       "aligned_ok": ok_a, "aligned_error": err_a})
        print("check", spec.name, shape, ok_p, f"{err_p:.2e}", ok_a, f"{err_a:.2e}", flush=True)
    rows = []
    for kind, sizes in SIZES.items():
        for size in sizes:
            m, n, k = shape_of(kind, size)
            batch = max(MIN_BATCH, batch_for_megabytes("h", m, n, k, MEGABYTES))
            work = Workload("h", m, n, k, batch)
            table = lib.selected_kernel("h", m, n, k)
            row = {"kind": kind, "size": size, "batch": batch, "table_kernel": table}

            def frac(f, takes_shape, beta=0.0):
                ms = median_time_ms(work.ours(f, 1.0, beta, takes_shape=takes_shape), launches_per_graph=3,
                                    repeats=5, warmup=1)
                return round(bytes_moved("h", m, n, k, batch, beta != 0) / bandwidth / (ms * 1e-3), 3)

            public = lib.lib.gemmgen_hgemm_batched_strided
            row["table"] = frac(public, True)
            row["table_beta1"] = frac(public, True, 1.0)
            row["rings"] = {}
            for spec in rings:
                if spec.blk_m >= m and spec.blk_n >= n and fits(spec, kind, size):
                    row["rings"][spec.name] = frac(variant_function(lib.lib, spec.name, "strided"), True)
            if row["rings"]:
                best = max(row["rings"], key=row["rings"].get)
                row["best_ring"], row["best_ring_beta1"] = best, frac(variant_function(lib.lib, best, "strided"), True, 1.0)
            work.release()
            rows.append(row)
            print(kind, size, table, row["table"], row["table_beta1"], row.get("best_ring"),
                  row["rings"].get(row.get("best_ring")), row.get("best_ring_beta1"), flush=True)
    out.write_text(json.dumps({"device": device, "arch": arch, "copy_bandwidth_gbs": bandwidth / 1e9,
                               "what": "fraction of the bandwidth floor, 64 MB of packed h data, NN: the table's "
                                       "kernel (public entry point) and each ring tuple's own launcher",
                               "checks": checks, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
