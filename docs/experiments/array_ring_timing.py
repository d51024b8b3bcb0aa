"""A/B of the small family's pointer-array ring (2026-11-23): libraries of the same small-family variants,
built from different versions of the template, timed in one run through each variant's own pointer-array
launcher (`<kernel>_array`), NN, pointers to the matrices of one packed batch (so matrices start between
16-byte boundaries wherever the matrix size is not whole chunks), data ≫ L2, beta = 0, interleaved so drift
hits both alike.  Also, for the last library, the variant's strided launcher on the same data for
reference, and a bit-exact comparison of its pointer-array result with its strided result on a packed
batch in all four stored-layout pairs (the same multiply runs in both, so they must agree to the bit).
array_ring_sm_90.json: "before" at 4a2fbe7, "after" with slots one chunk longer where the GEMMs sharing a
warp would otherwise read the same banks, and the multiply at known offsets where a warp's matrices all
start on 16-byte boundaries (h, hc, s; shapes of whole chunks).  The libraries hold the small-family
sources of `gemmgen generate --arch sm_90 --precisions h,hc --sizes 2-24` and `--precisions s,d,c,z
--sizes 3,8,16,21,28` (square shapes only), built with harness.build.build_library.

Usage (on a GPU): python docs/experiments/array_ring_timing.py OUT.json LABEL=LIBRARY.so... NAME...
(two or more libraries, the last one "after"; NAME: small-family kernel names present in all)."""
import ctypes
import json
import sys
from pathlib import Path

from gemmgen.generator.precision import PRECISIONS
from gemmgen.generator.small import SmallSpec
from gemmgen.harness.core.api import variant_function as launcher
from gemmgen.harness.check import device_arch
from gemmgen.harness.core.timing import copy_bandwidth, median_time_ms
from gemmgen.harness.core.workload import Workload, batch_for_megabytes, bytes_moved

PAIRS = ("NN", "NT", "TN", "TT")


def shape_of(name: str) -> tuple[str, int, int, int]:
    spec = SmallSpec.parse(name)
    return spec.precision, spec.m, spec.n, spec.k


def bit_exact(lib, name: str) -> bool:
    """The pointer-array result equals the strided one in every stored-layout pair (batch 3001, square
    shapes: every pair reads the same packed buffers with ld = N)."""
    import cupy as cp

    from gemmgen.harness.core.api import scalar

    prec, m, n, k = shape_of(name)
    work = Workload(prec, m, n, k, 3001)
    strided, array = launcher(lib, name, "strided"), launcher(lib, name, "array")
    elem = PRECISIONS[prec].element_bytes
    index = cp.arange(work.batch, dtype=cp.uint64)
    pointers = [cp.uint64(buf.data.ptr) + index * cp.uint64(n * n * elem) for buf in (work.A, work.B, work.C)]
    one, zero = scalar(prec, 1.0), scalar(prec, 0.0)
    ok = True
    for pair in PAIRS:
        trans = (pair[0].encode(), pair[1].encode())
        work.C.fill(0)
        rc = strided(*trans, one, work.A.data.ptr, n, n * n, work.B.data.ptr, n, n * n, zero, work.C.data.ptr, n,
                     n * n, work.batch, 0)
        cp.cuda.runtime.deviceSynchronize()
        expected = work.C.copy()
        work.C.fill(0)
        rc |= array(*trans, one, pointers[0].data.ptr, n, pointers[1].data.ptr, n, zero, pointers[2].data.ptr, n,
                    work.batch, 0)
        cp.cuda.runtime.deviceSynchronize()
        ok &= rc == 0 and bool(cp.all(work.C.view(cp.uint8) == expected.view(cp.uint8)))
    work.release()
    return ok


def main(out: Path, libraries: dict[str, Path], names: list[str]) -> None:
    arch, device = device_arch()
    libs = {label: ctypes.CDLL(str(path)) for label, path in libraries.items()}
    last = list(libs)[-1]
    bandwidth = copy_bandwidth()
    rows = []
    for name in names:
        prec, m, n, k = shape_of(name)
        batch = batch_for_megabytes(prec, m, n, k, 512)
        work = Workload(prec, m, n, k, batch)
        floor_ms = bytes_moved(prec, m, n, k, batch, False) / bandwidth * 1e3
        row = {"kernel": name, "precision": prec, "n": n, "batch": batch}
        for label, lib in libs.items():
            try:
                ms = median_time_ms(work.ours_array(launcher(lib, name, "array"), 1.0, 0.0, takes_shape=False))
                row[f"array_{label}"] = round(floor_ms / ms, 3)
            except RuntimeError as error:   # a launch refused: recorded, the others go on
                row[f"array_{label}"] = None
                row[f"error_{label}"] = str(error)
        ms = median_time_ms(work.ours(launcher(libs[last], name, "strided"), 1.0, 0.0, takes_shape=False))
        row[f"strided_{last}"] = round(floor_ms / ms, 3)
        work.release()
        row[f"array_equals_strided_{last}"] = bit_exact(libs[last], name)
        rows.append(row)
        print(name, "array", " ".join(f"{label} {row['array_' + label] or 0:.2f}" for label in libs),
              f"| strided {row['strided_' + last]:.2f}", "exact" if row[f"array_equals_strided_{last}"] else "MISMATCH",
              flush=True)
    out.write_text(json.dumps({"device": device, "arch": arch, "copy_bandwidth_gbs": bandwidth / 1e9,
                               "libraries": {label: str(path) for label, path in libraries.items()},
                               "what": "fraction of the bandwidth floor through each library's pointer-array "
                                       f"launcher, and the strided one of '{last}'; NN, ≫ L2, beta = 0",
                               "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    args = sys.argv[1:]
    libraries = dict(a.split("=", 1) for a in args[1:] if "=" in a)
    main(Path(args[0]), {label: Path(path) for label, path in libraries.items()}, [a for a in args[1:] if "=" not in a])
