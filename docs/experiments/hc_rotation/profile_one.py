"""LAUNCHES (default 2) launches of one build's hc wgmma entry point on an hc square at batch 1000, on two sets
of data in turn (each past L2, so a launch reads its operands from DRAM as the bench's rotated sets do), for
ncu to count the DRAM bytes of all but the first.

Usage (on an H100, repository root):
  ncu --kernel-name regex:wgmma_hc --launch-skip 1 --launch-count 1 \
      --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,gpu__time_duration.sum \
      python docs/experiments/hc_rotation/profile_one.py LIB SIZE [LAUNCHES]"""
import ctypes
import sys

from gemmgen.harness.core.workload import Workload

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from ab import ENTRY, launcher  # noqa: E402


def main(lib_path: str, size: int, launches: int = 2) -> None:
    import cupy as cp

    f = launcher(ctypes.CDLL(lib_path), ENTRY)
    work = Workload("hc", size, size, size, 1000, sets=2)   # 2 sets of 1000 GEMMs: 2 x 480-750 MB, past L2
    launch = work.ours(f, 1.0, 0.0, takes_shape=True)
    for _ in range(launches):
        launch(0)
    cp.cuda.runtime.deviceSynchronize()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 2)
