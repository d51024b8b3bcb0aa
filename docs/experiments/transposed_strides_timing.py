"""A/B of the small family's shared-memory strides for transposed operands (2026-11-23), timed in the
four stored-layout pairs ('C' runs the kernel of 'T'), strided, packed, data ≫ L2, beta = 0, with two
libraries built from the same table in one run:
- "before": the ring stage holds the operands as stored, and the staged kernel keeps op(A) with a
  column stride of M;
- "after": the ring stage pads each column of K elements that is an even number of 16-byte chunks
  by one chunk where the multiply reads it across threads (stored Aᵀ, stored B), and the staged
  kernel stores Aᵀ with an odd stride (M | 1).
Every even N from 8 to 32 where the dispatch runs the small family (both changes touch only even
sizes).  Usage (on a GPU): python docs/experiments/transposed_strides_timing.py BEFORE.so AFTER.so OUT.json"""
import json
import sys
from pathlib import Path

from gemmgen.harness.core.api import GemmgenLibrary
from gemmgen.harness.check import device_arch
from gemmgen.harness.core.timing import copy_bandwidth, median_time_ms
from gemmgen.harness.core.workload import Workload, batch_for_megabytes, bytes_moved

PAIRS = ("NN", "NT", "TN", "TT")
SHAPES = tuple((prec, n) for prec in ("h", "hc", "s", "d", "c", "z") for n in range(8, 33, 2))


def main(old: Path, new: Path, out: Path) -> None:
    arch, device = device_arch()
    libs = {"before": GemmgenLibrary(old), "after": GemmgenLibrary(new)}
    bandwidth = copy_bandwidth()
    rows = []
    for prec, n in SHAPES:
        kernel = libs["after"].selected_kernel(prec, n, n, n)
        if not kernel or not kernel.startswith("small_"):
            continue
        batch = batch_for_megabytes(prec, n, n, n, 512)
        work = Workload(prec, n, n, n, batch)
        for beta in (0.0,):
            floor_ms = bytes_moved(prec, n, n, n, batch, beta != 0) / bandwidth * 1e3
            row = {"precision": prec, "n": n, "batch": batch, "beta": beta, "kernel": kernel}
            for pair in PAIRS:
                for label, lib in libs.items():   # interleaved, so drift hits both alike
                    fn = getattr(lib.lib, f"gemmgen_{prec}gemm_batched_strided")
                    ms = median_time_ms(work.ours(fn, 1.0, beta, trans=(pair[0].encode(), pair[1].encode())))
                    row[f"{pair}_{label}"] = round(floor_ms / ms, 3)
            rows.append(row)
            print(prec, n, f"beta={beta:g}",
                  " ".join(f"{p}={row[p + '_before']:.2f}->{row[p + '_after']:.2f}" for p in PAIRS), flush=True)
        work.release()
    out.write_text(json.dumps({"device": device, "arch": arch, "copy_bandwidth_gbs": bandwidth / 1e9,
                               "what": "fraction of the bandwidth floor per stored-layout pair, before and "
                                       "after, strided, packed, ≫ L2, beta = 0",
                               "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
