"""Launch one h point a few times through the public strided entry point (or cuBLAS), for ncu.

Usage (on a GPU): python docs/experiments/wmma_profile_launch.py LIB.so ours|cublas square|rank SIZE [MB]
Run under ncu with --launch-skip 2 --launch-count 1 and a kernel-name filter."""
import sys
from pathlib import Path

import cupy as cp

from harness.api import GemmgenLibrary
from harness.workload import Workload, batch_for_megabytes


def main(lib_path: str, who: str, kind: str, size: str, megabytes: str = "256") -> None:
    n = int(size)
    m, k = n, (n if kind == "square" else 16)
    batch = batch_for_megabytes("h", m, n, k, float(megabytes))
    work = Workload("h", m, n, k, batch)
    if who == "ours":
        lib = GemmgenLibrary(Path(lib_path))
        print("kernel", lib.selected_kernel("h", m, n, k), "batch", batch, flush=True)
        launch = work.ours(lib.lib.gemmgen_hgemm_batched_strided, 1.0, 0.0)
    else:
        launch = work.cublas(1.0, 0.0)
    stream = cp.cuda.Stream(non_blocking=True)
    for _ in range(3):
        launch(stream.ptr)
    stream.synchronize()


if __name__ == "__main__":
    main(*sys.argv[1:])
