"""Launch one batched-GEMM point a few times through the public entry point (or cuBLAS), for ncu.

Usage (on a GPU, repository root):
    python docs/experiments/profile_launch.py LIB.so ours|cublas square|rank SIZE [MB]
        [--prec h] [--batch B] [--beta 0|1] [--arrays]
`square` is SIZE×SIZE×SIZE, `rank` SIZE×SIZE×16; the batch fills MB megabytes (default 256, ≫ L2)
unless --batch is given; --arrays goes through the pointer-array entry point (ours only). Run under ncu with --launch-skip 2 --launch-count 1 and a kernel-name filter
(docs/experiments/profile.sh)."""
import argparse
from pathlib import Path

import cupy as cp

from gemmgen.harness.core.api import GemmgenLibrary
from gemmgen.harness.core.workload import Workload, batch_for_megabytes


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("lib")
    ap.add_argument("who", choices=("ours", "cublas"))
    ap.add_argument("kind", choices=("square", "rank"))
    ap.add_argument("size", type=int)
    ap.add_argument("megabytes", type=float, nargs="?", default=256.0)
    ap.add_argument("--prec", default="h")
    ap.add_argument("--batch", type=int)
    ap.add_argument("--beta", type=float, default=0.0)
    ap.add_argument("--arrays", action="store_true")
    a = ap.parse_args()
    m, n, k = a.size, a.size, (a.size if a.kind == "square" else 16)
    batch = a.batch or batch_for_megabytes(a.prec, m, n, k, a.megabytes)
    work = Workload(a.prec, m, n, k, batch)
    if a.who == "ours":
        lib = GemmgenLibrary(Path(a.lib))
        print("kernel", lib.selected_kernel(a.prec, m, n, k), "batch", batch, flush=True)
        if a.arrays:
            launch = work.ours_array(getattr(lib.lib, f"gemmgen_{a.prec}gemm_batched"), 1.0, a.beta)
        else:
            launch = work.ours(getattr(lib.lib, f"gemmgen_{a.prec}gemm_batched_strided"), 1.0, a.beta)
    else:
        print("cublas batch", batch, flush=True)
        launch = work.cublas(1.0, a.beta)
    stream = cp.cuda.Stream(non_blocking=True)
    for _ in range(3):
        launch(stream.ptr)
    stream.synchronize()


if __name__ == "__main__":
    main()
