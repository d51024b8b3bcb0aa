"""Time the small family's complex kernels in every transpose pair (strided, packed, data ≫ L2,
beta = 0) through the public entry point, to see what the run-time conjugation costs: 'T' and 'C'
share one kernel per layout pair since 2026-11-23, and the ring kernel multiplies each imaginary
part it reads by a sign.  Usage (on a GPU, after `gemmgen check` built build/): python
docs/experiments/conjugation_timing.py OUT.json"""
import json
import sys
from pathlib import Path

from gemmgen.harness.core.api import GemmgenLibrary
from gemmgen.harness.check import build_set, device_arch
from gemmgen.harness.core.timing import copy_bandwidth, median_time_ms
from gemmgen.harness.core.workload import Workload, batch_for_megabytes, bytes_moved

PAIRS = ("NN", "NT", "TN", "TT", "NC", "CN", "CC", "TC", "CT")
SIZES = (2, 4, 8, 13, 16, 21, 25, 29, 32)


def main(out: Path) -> None:
    arch, device = device_arch()
    lib = GemmgenLibrary(build_set(Path("generated"), Path("build"), (arch,), 0).library)
    bandwidth = copy_bandwidth()
    rows = []
    for prec in ("c", "z", "hc"):
        fn = getattr(lib.lib, f"gemmgen_{prec}gemm_batched_strided")
        for n in SIZES:
            batch = batch_for_megabytes(prec, n, n, n, 512)
            work = Workload(prec, n, n, n, batch)
            floor_ms = bytes_moved(prec, n, n, n, batch, False) / bandwidth * 1e3
            row = {"precision": prec, "n": n, "batch": batch, "kernel": lib.selected_kernel(prec, n, n, n)}
            for pair in PAIRS:
                ms = median_time_ms(work.ours(fn, 1.0, 0.0, trans=(pair[0].encode(), pair[1].encode())))
                row[pair] = round(floor_ms / ms, 3)
            work.release()
            rows.append(row)
            print(prec, n, " ".join(f"{p}={row[p]:.2f}" for p in PAIRS), flush=True)
    out.write_text(json.dumps({"device": device, "arch": arch, "copy_bandwidth_gbs": bandwidth / 1e9,
                               "what": "fraction of the bandwidth floor per transpose pair, beta = 0, ≫ L2",
                               "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
