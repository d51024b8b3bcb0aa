"""A/B of the warp kernels' k order (gemmgen/generator/wmma.py, warp_k_stride): the same warp tuples emitted
by two generators, the one before the k order (fragments in PTX order) and the one with it, built into
two libraries, checked against float64 CuPy, and timed in alternation in one process on the same
buffers: ≫ L2 (512 MB, as `gemmgen bench`) with beta = 0 and 1 (N/N) and beta = 0 T/N, and batch
1000 (beta = 0, N/N).  Fractions of the copy-bandwidth floor.

Usage:
  PYTHONPATH=<tree> python docs/experiments/warp_k_order/ab.py render OUT_ROOT   (no GPU: the sources of
      SHAPES as the generator on PYTHONPATH emits them, N/N and T/N launchers)
  python docs/experiments/warp_k_order/ab.py time BEFORE_ROOT AFTER_ROOT OUT.json   (on a GPU)"""
import ctypes
import json
import sys
from pathlib import Path

# (precision, m, n, k, warps, stages, acc): h squares whose N/N order changes, odd and even, the
# rank-16 updates of the same m, hc squares; h 40 and hc 13 keep the PTX order (controls).
SHAPES = ([("h", s, s, s, 4, 2, "f16") for s in (29, 30, 31, 32, 40, 42, 43, 47, 55, 57, 61, 62, 63)]
          + [("h", s, s, 16, 4, 2, "f32") for s in (31, 47, 63)]
          + [("hc", s, s, s, 8, 2, "f16") for s in (13, 17, 21, 25, 29, 30, 31, 32)])
TRANS = (("N", "N"), ("T", "N"))
ROUNDS = 3


def render(root: Path) -> None:
    from gemmgen.generator.emit import kernel_source, kernel_source_path, support_files
    from gemmgen.generator.wmma import WmmaWarpSpec

    for rel, text in support_files("warp_k_order ab", ("sm_90",), ("h", "hc")).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    for shape in SHAPES:
        spec = WmmaWarpSpec(*shape).validate()
        path = root / kernel_source_path(spec)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(kernel_source(spec, "warp_k_order ab", trans_pairs=TRANS))


def time_both(before: Path, after: Path, out: Path) -> None:
    from gemmgen.generator.wmma import WmmaWarpSpec
    from gemmgen.harness.core.build import build_library
    from gemmgen.harness.check import device_arch
    from gemmgen.harness.core.timing import copy_bandwidth, median_time_ms
    from gemmgen.harness.core.api import variant_function
    from gemmgen.harness.wmma.tune import gpu_check
    from gemmgen.harness.core.workload import Workload, batch_for_megabytes, bytes_moved

    arch, device = device_arch()
    libs = {}
    for label, root in (("before", before), ("after", after)):
        built = build_library(root, root / "build", (arch,), 16, sources=sorted((root / "src" / "wmmawarp").rglob("*.cu")),
                              library_name=f"libab_{label}.so")
        spills = [r.source for r in built.local_memory_kernels]
        print(label, "built; local memory:", spills, flush=True)
        libs[label] = ctypes.CDLL(str(built.library))
    bandwidth = copy_bandwidth()
    rows = []
    for shape in SHAPES:
        spec = WmmaWarpSpec(*shape)
        prec, m, n, k = spec.precision, spec.m, spec.n, spec.k
        f = {label: variant_function(lib, spec.name, "strided") for label, lib in libs.items()}
        row = {"kernel": spec.name, "k_stride": {f"{a}{b}": spec.k_stride(a, b) for a, b in TRANS}}
        for label in libs:
            ok, err = gpu_check(f[label], prec, m, n, k, False, batch=2000, packed=True)
            ok2, err2 = gpu_check(f[label], prec, m, n, k, False)
            row[f"{label}_check"] = [ok and ok2, max(err, err2)]
        for data, batch in (("big", batch_for_megabytes(prec, m, n, k, 512)), ("batch1000", 1000)):
            work = Workload(prec, m, n, k, batch)
            cases = (("beta0", 0.0, TRANS[0]), ("beta1", 1.0, TRANS[0]), ("beta0_TN", 0.0, TRANS[1])) \
                if data == "big" else (("beta0", 0.0, TRANS[0]),)
            for _ in range(ROUNDS):
                for label in libs:
                    for case, beta, trans in cases:
                        ms = median_time_ms(work.ours(f[label], 1.0, beta, takes_shape=False,
                                                      trans=tuple(x.encode() for x in trans)))
                        frac = bytes_moved(prec, m, n, k, batch, beta != 0) / bandwidth / (ms * 1e-3)
                        row.setdefault(f"{label}_{data}_{case}", []).append(round(frac, 3))
            work.release()
        rows.append(row)
        print(json.dumps(row), flush=True)
    out.write_text(json.dumps({"device": device, "arch": arch, "copy_bandwidth_gbs": bandwidth / 1e9,
                               "command": "python docs/experiments/warp_k_order/ab.py time " + " ".join(sys.argv[2:]),
                               "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    if sys.argv[1] == "render":
        render(Path(sys.argv[2]))
    else:
        time_both(Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]))
