"""Check and time the hc wgmma experiment kernel (make.py, `wgmmahc_*`) against planar cuBLAS and the table's
hc kernel, squares at batch 1000 (issue 5's goal: at least 2x planar cuBLAS up to 256).

Usage (on an H100, repository root, after make.py and the nvcc build of README.md):
    python docs/experiments/wgmma_block/run_hc.py LIB OUT.json"""
import ctypes
import json
import sys
from pathlib import Path

from gemmgen.generator import wmma
from gemmgen.generator.tuning import load_table
from gemmgen.harness.core.api import scalar, strided_function
from gemmgen.harness.wmma.bench import MAX_SETS, Planar, _sets
from gemmgen.harness.core.build import build_library
from gemmgen.harness.core.reference import error_bound
from gemmgen.harness.check import device_arch
from gemmgen.harness.core.timing import copy_bandwidth, median_time_ms
from gemmgen.harness.wmma.tune import BUNDLE, _write_sources, spec_launcher
from gemmgen.harness.core.workload import Workload, bytes_moved, flops

SIZES = (72, 96, 128, 160, 192, 224, 256)
VARIANTS = ("wgmmahc_n128_s3", "wgmmahc_n128_s4", "wgmmahc_n256_s3",
            "wgmmahc2_n128_s3", "wgmmahc2_n128_s4", "wgmmahc2_n256_s3")


def launcher(lib, name):
    return strided_function(lib, name, "hc")


def check(f, n, batch=40):
    import cupy as cp

    rng = cp.random.RandomState(3)
    make = lambda: rng.uniform(-1, 1, size=(batch, n, n, 2)).astype(cp.float16)   # noqa: E731 (cols, rows, re/im)
    A, B, C = make(), make(), make()
    val = lambda x: cp.transpose(x[..., 0].astype(cp.float64) + 1j * x[..., 1].astype(cp.float64), (0, 2, 1))  # noqa
    a, b = val(A), val(B)
    rc = f(b"N", b"N", n, n, n, scalar("hc", 1.0), A.data.ptr, n, n * n, B.data.ptr, n, n * n, scalar("hc", 0.0),
           C.data.ptr, n, n * n, batch, None)
    cp.cuda.runtime.deviceSynchronize()
    if rc != 0:
        return float("inf")
    norm = lambda x: cp.sqrt(cp.sum(cp.abs(x) ** 2, axis=(1, 2)))   # noqa: E731
    return float(cp.max(norm(val(C) - a @ b) / (norm(a) * norm(b))))


def main(lib_path: Path, out: Path) -> None:
    arch, device = device_arch()
    lib = ctypes.CDLL(str(lib_path))
    table = {(r["kind"], r["size"]): r["kernel"] for r in load_table(arch)["wmma"] if r["precision"] == "hc"}
    specs = sorted({wmma.parse_name(table[("square", s)]) for s in SIZES}, key=lambda s: s.name)
    root = Path("build/wgmma_hc_table") / arch
    bundles = _write_sources(root, specs, BUNDLE)
    built = build_library(root, root / "build", (arch,), 16, sources=bundles, library_name="libhctable.so")
    table_lib = ctypes.CDLL(str(built.library))
    bandwidth = copy_bandwidth()
    rows = []
    for n in SIZES:
        errors = {v: check(launcher(lib, v), n) for v in VARIANTS}
        good = [v for v in VARIANTS if errors[v] <= error_bound("hc", n)]
        print(n, errors, flush=True)
        batch = 1000
        work = Workload("hc", n, n, n, batch, sets=_sets("hc", n, n, n, batch))
        t = lambda launch: median_time_ms(launch, launches_per_graph=MAX_SETS, repeats=7) * 1e3   # noqa: E731
        spec = wmma.parse_name(table[("square", n)])
        tf, takes = spec_launcher(table_lib, spec)
        planar = Planar(work)
        row = {"size": n, "batch": batch, "errors": errors, "planar_us": t(planar.launch_factory(0.0)),
               "table": spec.name, "table_us": t(work.ours(tf, 1.0, 0.0, takes_shape=takes)),
               "floor_us": bytes_moved("hc", n, n, n, batch, False) / bandwidth * 1e6}
        for v in good:
            row[v] = t(work.ours(launcher(lib, v), 1.0, 0.0, takes_shape=True))
        work.release()
        ours = {v: row[v] for v in good}
        if ours:
            best = min(ours, key=ours.get)
            row.update(best=best, best_vs_planar=row["planar_us"] / ours[best],
                       best_tflops=flops("hc", n, n, n, batch) / ours[best] / 1e6)
        row.update(table_vs_planar=row["planar_us"] / row["table_us"],
                   planar_tflops=flops("hc", n, n, n, batch) / row["planar_us"] / 1e6)
        rows.append(row)
        print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items() if k != "errors"}),
              flush=True)
    out.write_text(json.dumps({"device": device, "arch": arch, "copy_bandwidth": bandwidth,
                               "what": "us per launch, hc squares, batch 1000, alpha = 1, beta = 0, NN, buffer sets "
                                       "rotated past L2; planar: four cuBLAS HGEMMs on split data", "rows": rows},
                              indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
