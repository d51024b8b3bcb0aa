"""A/B of the hc wmma family's conjugation (2026-11-23): compile-time ('C' a kernel of its own, nine
kernels per tuple) against run time (one kernel per stored layout pair, 'C' a flag that flips the
imaginary parts' sign bit on the way into shared memory).  Two libraries of the same table, timed in
one run through the public strided entry point in all nine transpose pairs, square sizes where the
dispatch runs a general wmma kernel, data ≫ L2, beta = 0, interleaved so drift hits both alike.  Each
row also checks that the two libraries give the same result to the bit (same arithmetic, same order).
Libraries: the sources of `gemmgen generate --arch sm_90 --precisions hc --sizes 32` (every hc wmma
tuple of the table) built with harness.build.build_library, from the commit before and after.

Usage (on a GPU): python docs/experiments/wmma_conjugation_timing.py BEFORE.so AFTER.so OUT.json"""
import json
import sys
from pathlib import Path

from gemmgen.harness.core.api import GemmgenLibrary
from gemmgen.harness.check import device_arch
from gemmgen.harness.core.timing import copy_bandwidth, median_time_ms
from gemmgen.harness.core.workload import Workload, batch_for_megabytes, bytes_moved

PAIRS = ("NN", "NT", "NC", "TN", "TT", "TC", "CN", "CT", "CC")
SIZES = (24, 27, 32, 48, 64, 96, 128, 192, 256)


def main(old: Path, new: Path, out: Path) -> None:
    import cupy as cp

    arch, device = device_arch()
    libs = {"before": GemmgenLibrary(old), "after": GemmgenLibrary(new)}
    bandwidth = copy_bandwidth()
    rows = []
    for n in SIZES:
        batch = batch_for_megabytes("hc", n, n, n, 512)
        work = Workload("hc", n, n, n, batch)
        floor_ms = bytes_moved("hc", n, n, n, batch, False) / bandwidth * 1e3
        row = {"n": n, "batch": batch, "kernel": libs["after"].selected_kernel("hc", n, n, n)}
        for pair in PAIRS:
            trans = (pair[0].encode(), pair[1].encode())
            results = {}
            for label, lib in libs.items():   # interleaved, so drift hits both alike
                fn = lib.lib.gemmgen_hcgemm_batched_strided
                launch = work.ours(fn, 1.0, 0.0, trans=trans)
                row[f"{pair}_{label}"] = round(floor_ms / median_time_ms(launch), 3)
                work.C.fill(0)
                launch(0)
                cp.cuda.runtime.deviceSynchronize()
                results[label] = work.C.copy()
            row[f"{pair}_same_bits"] = bool(cp.all(results["before"].view(cp.uint16) == results["after"].view(cp.uint16)))
        work.release()
        rows.append(row)
        print(n, row["kernel"], " ".join(f"{p}={row[p + '_before']:.2f}->{row[p + '_after']:.2f}"
                                         + ("" if row[p + "_same_bits"] else "!") for p in PAIRS), flush=True)
    out.write_text(json.dumps({"device": device, "arch": arch, "copy_bandwidth_gbs": bandwidth / 1e9,
                               "what": "hc, fraction of the bandwidth floor per transpose pair, before (a kernel per "
                                       "pair) and after (conjugation at run time), strided, ≫ L2, beta = 0",
                               "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
