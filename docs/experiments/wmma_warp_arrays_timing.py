"""A/B of the warp wmma kernels' pointer reads (2026-11-24): each warp read a GEMM's three addresses just
before copying it (before) or one GEMM earlier, from a queue in registers (after).  Through pointer
arrays each address is a global load the copies wait for.  Both builds of the default set's warp
kernels (src/wmmawarp of `gemmgen generate`, before and after, compiled for sm_90 with
harness.build.build_library) are timed through their own launchers, interleaved, with data ≫ L2 (512 MB),
beta = 0, NN: the strided interface and pointer arrays to the same packed matrices (fraction of the
floor, and of the floor that counts the 24 bytes of pointers per GEMM).  Each point also checks that both
give the same bits (same products, same order of sums) through both interfaces, with beta = 0.5.

Usage (on a GPU): python docs/experiments/wmma_warp_arrays_timing.py BEFORE_GEN AFTER_GEN OUT.json
    [--prec h|hc] [--points square:13,rank:10,...] [--what TEXT]
(2026-11-26: also the second, pointer-array instance of the smallest shapes, docs/experiments/remaining_misses.)"""
import argparse
import ctypes
import json
from pathlib import Path

from gemmgen.generator.wmma import WmmaWarpSpec
from gemmgen.harness.core.api import variant_function
from gemmgen.harness.core.build import build_library
from gemmgen.harness.check import device_arch
from gemmgen.harness.core.timing import copy_bandwidth, median_time_ms
from gemmgen.harness.core.workload import Workload, batch_for_megabytes, bytes_moved

SIZES = [("square", s) for s in (13, 14, 15, 17, 18, 19, 21, 23, 25, 27, 29, 31, 33, 41, 49, 57)] \
    + [("rank", s) for s in (19, 23, 27, 33, 41, 49, 57, 63)]


def shape_of(stem: str) -> tuple[int, int, int]:
    """(m, n, k) of a warp kernel, from its name."""
    spec = WmmaWarpSpec.parse(stem)
    return spec.m, spec.n, spec.k


def main(before: Path, after: Path, out: Path, prec: str = "h", points=SIZES,
         what: str = "warp kernels reading each GEMM's addresses just before its copies (before) or one GEMM "
                     "earlier (after)") -> None:
    import cupy as cp

    arch, device = device_arch()
    wanted = {(s, s, s if kind == "square" else 16) for kind, s in points}
    libs = {}
    for label, gen in (("before", before), ("after", after)):
        sources = [p for p in sorted(gen.glob(f"src/wmmawarp/{prec}/*.cu")) if shape_of(p.stem) in wanted]
        built = build_library(gen, gen / "build", (arch,), 16, sources=sources, library_name="libwarp.so")
        assert not built.local_memory_kernels, built.local_memory_kernels
        libs[label] = ctypes.CDLL(str(built.library))
    names = {shape_of(p.stem): p.stem for p in sorted(after.glob(f"src/wmmawarp/{prec}/*.cu"))}
    bandwidth = copy_bandwidth()
    rows = []
    for kind, size in points:
        m, n, k = (size, size, size) if kind == "square" else (size, size, 16)
        name = names.get((m, n, k))
        if name is None:
            continue
        work = Workload(prec, m, n, k, batch_for_megabytes(prec, m, n, k, 512))
        floor_ms = bytes_moved(prec, m, n, k, work.batch, False) / bandwidth * 1e3
        pointer_ms = 24 * work.batch / bandwidth * 1e3
        row = {"kind": kind, "size": size, "kernel": name}
        results = {}
        for label, lib in libs.items():
            strided = variant_function(lib, name, "strided")
            array = variant_function(lib, name, "array")
            row[f"strided_{label}"] = round(floor_ms / median_time_ms(work.ours(strided, 1.0, 0.0), 3, 7), 3)
            ms = median_time_ms(work.ours_array(array, 1.0, 0.0, takes_shape=False), 3, 7)
            row[f"array_{label}"] = round(floor_ms / ms, 3)
            row[f"array_with_pointers_{label}"] = round((floor_ms + pointer_ms) / ms, 3)
            for interface, f in (("strided", work.ours(strided, 0.75, 0.5)),
                                 ("array", work.ours_array(array, 0.75, 0.5, takes_shape=False))):
                work.C.fill(0.25)
                f(0)
                cp.cuda.runtime.deviceSynchronize()
                results[(label, interface)] = work.C.copy()
        row["same_bits"] = all(bool(cp.all(results[("before", i)].view(cp.uint16) == results[("after", i)].view(cp.uint16)))
                               for i in ("strided", "array"))
        work.release()
        rows.append(row)
        print(kind, size, name, " ".join(f"{c}={row[c + '_before']:.2f}->{row[c + '_after']:.2f}"
                                         for c in ("strided", "array", "array_with_pointers")),
              "same bits" if row["same_bits"] else "DIFFERENT BITS", flush=True)
    out.write_text(json.dumps({"device": device, "arch": arch, "precision": prec, "copy_bandwidth_gbs": bandwidth / 1e9,
                               "what": f"fraction of the bandwidth floor, ≫ L2, beta = 0, NN: {what}",
                               "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--prec", default="h", choices=("h", "hc"))
    ap.add_argument("--points", help="kind:size,... (kind square or rank); default: the 2026-11-24 set")
    ap.add_argument("--what")
    a = ap.parse_args()
    points = [(p.split(":")[0], int(p.split(":")[1])) for p in a.points.split(",")] if a.points else SIZES
    main(a.before, a.after, a.out, a.prec, points, *([a.what] if a.what else []))
