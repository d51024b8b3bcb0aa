"""Launch one hc wgmma variant three times on an hc square at batch 1000, for ncu (profile.sh's launcher).

Usage (on a GPU, repository root): python docs/experiments/wgmma_hc_tiles/launch.py LIB FUNCTION SIZE"""
import ctypes
import sys

import cupy as cp

from gemmgen.harness.core.workload import Workload

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from run import launcher  # noqa: E402


def main(lib: str, fn: str, size: int) -> None:
    work = Workload("hc", size, size, size, 1000)
    launch = work.ours(launcher(ctypes.CDLL(lib), fn), 1.0, 0.0, takes_shape=True)
    stream = cp.cuda.Stream(non_blocking=True)
    for _ in range(3):
        launch(stream.ptr)
    stream.synchronize()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
