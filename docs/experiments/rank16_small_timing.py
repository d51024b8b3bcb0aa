"""h rank-16 updates (m = n, k = 16) through the public entry point after the small family took
m = 1..15 from the Tensor Core kernels (2026-11-23), against cuBLAS's strided batched HGEMM on the
same buffers in the same run: data ≫ L2 (512 MB) and batch 10,000, beta = 0, NN.
Usage (on a GPU, after `gemmgen check` built build/): python docs/experiments/rank16_small_timing.py OUT.json"""
import json
import sys
from pathlib import Path

from gemmgen.harness.core.api import GemmgenLibrary
from gemmgen.harness.check import build_set, device_arch
from gemmgen.harness.core.timing import copy_bandwidth, median_time_ms
from gemmgen.harness.core.workload import Workload, batch_for_megabytes, bytes_moved

SIZES = tuple(range(1, 33))
K = 16


def main(out: Path) -> None:
    arch, device = device_arch()
    lib = GemmgenLibrary(build_set(Path("generated"), Path("build"), (arch,), 0).library)
    fn = lib.lib.gemmgen_hgemm_batched_strided
    bandwidth = copy_bandwidth()
    rows = []
    for m in SIZES:
        for label, batch in (("≫L2", batch_for_megabytes("h", m, m, K, 512)), ("batch 10000", 10000)):
            work = Workload("h", m, m, K, batch)
            floor_ms = bytes_moved("h", m, m, K, batch, False) / bandwidth * 1e3
            ours = median_time_ms(work.ours(fn, 1.0, 0.0))
            theirs = median_time_ms(work.cublas(1.0, 0.0))
            work.release()
            row = {"m": m, "n": m, "k": K, "data": label, "batch": batch,
                   "kernel": lib.selected_kernel("h", m, m, K), "floor": round(floor_ms / ours, 3),
                   "cublas_floor": round(floor_ms / theirs, 3), "speedup": round(theirs / ours, 2)}
            rows.append(row)
            print(f"h {m}x{m}x{K} {label}: floor {row['floor']:.2f}, cuBLAS {row['cublas_floor']:.2f}, "
                  f"{row['speedup']:.1f}x  {row['kernel']}", flush=True)
    out.write_text(json.dumps({"device": device, "arch": arch, "copy_bandwidth_gbs": bandwidth / 1e9,
                               "what": "h rank-16 updates (NN, beta = 0): fraction of the bandwidth floor, "
                                       "ours (public dispatch) and cuBLAS, same buffers, one run",
                               "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
