"""Check and time the hc wgmma kernel's block widths (variants.py) from several builds of the library source,
against planar cuBLAS, hc squares 128-256 at batch 1000 (issue 5's goal: at least 2x planar cuBLAS).

Each LIB is a build of variants.cu against one version of generated/src/wmmahopper/gemmgen_wgmma_hc.cu; it
exports the library's entry point (gemmgen_wgmma_hc_strided, which picks a width) and hc_bn<BN>_s<STAGES>.
Checks (float64, alpha = 1 and complex, padding rows of C untouched) before any timing; a variant that fails
one is not timed.

Sizes under 128 (HC_SIZES="64 72 ..." in the environment) are timed against the tuned table's kernel too,
which the dispatch runs there (built on the spot).

Usage (on an H100, repository root): python docs/experiments/wgmma_hc_tiles/run.py OUT.json NAME=LIB ..."""
import ctypes
import json
import os
import statistics
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

sys.path.insert(0, str(Path(__file__).parent))
from variants import VARIANTS, name  # noqa: E402

SIZES = [int(s) for s in os.environ.get("HC_SIZES", "").split()] or range(128, 257, 8)
ENTRY = "gemmgen_wgmma_hc_strided"
# (m, n, k, leading-dimension padding, alpha): a square, odd shapes with a last block of rows that leaves
# a warpgroup idle (2m = 408: rows 384-447 busy, 448-511 not), columns past every width; the last, m not
# a multiple of 4, only for the record (the entry point refuses it: whole 16-byte pieces of a column)
SHAPES = ((256, 256, 256, 0, 1.0), (204, 201, 199, 4, 0.75 - 0.5j), (132, 250, 131, 8, 1.0),
          (202, 136, 130, 4, 1j))
GATING = 3   # shapes a variant must pass to be timed
ROUNDS = 3


def launcher(lib, fn):
    return strided_function(lib, fn, "hc")


def check(f, m, n, k, pad, alpha, batch=24):
    """Norm-wise error of each GEMM against float64 (inf: refused, or a padding row of C written)."""
    import cupy as cp

    rng = cp.random.RandomState(7)
    lda, ldb, ldc = -(-m // 4) * 4 + pad, -(-k // 4) * 4 + pad, -(-m // 4) * 4 + pad   # 16-byte columns
    make = lambda cols, ld: rng.uniform(-1, 1, size=(batch, cols, ld, 2)).astype(cp.float16)   # noqa: E731
    A, B, C = make(k, lda), make(n, ldb), make(n, ldc)
    val = lambda x, rows: cp.transpose(x[:, :, :rows, 0].astype(cp.float64) + 1j * x[:, :, :rows, 1], (0, 2, 1))  # noqa
    a, b = val(A, m), val(B, k)
    padding = C[:, :, m:].copy()
    rc = f(b"N", b"N", m, n, k, scalar("hc", alpha), A.data.ptr, lda, lda * k, B.data.ptr, ldb, ldb * n,
           scalar("hc", 0.0), C.data.ptr, ldc, ldc * n, batch, None)
    cp.cuda.runtime.deviceSynchronize()
    if rc != 0:
        print(f"  {m}x{n}x{k}: returned {rc}", flush=True)
        return None if rc == -1 else float("inf")
    norm = lambda x: cp.sqrt(cp.sum(cp.abs(x) ** 2, axis=(1, 2)))   # noqa: E731
    error = float(cp.max(norm(val(C, m) - alpha * (a @ b)) / (abs(alpha) * norm(a) * norm(b))))
    if not bool(cp.all(C[:, :, m:] == padding)):
        print(f"  {m}x{n}x{k}: padding rows of C written (error {error:.2e})", flush=True)
        return float("inf")
    return error


def main(out: Path, libs: dict) -> None:
    arch, device = device_arch()
    fns = {}
    checks = {}
    for lib_name, path in libs.items():
        lib = ctypes.CDLL(path)
        for fn in [ENTRY] + [name(bn, st) for bn, st in VARIANTS]:
            if not hasattr(lib, fn):
                continue
            f = launcher(lib, fn)
            errors = [check(f, *shape) for shape in SHAPES]
            key = f"{lib_name}:{fn}"
            checks[key] = errors
            print(key, errors, flush=True)
            gating = list(zip(errors, SHAPES))[:GATING]
            if any(e is None for e, _ in gating):
                continue   # refused (does not fit): not timed
            if all(e <= error_bound("hc", shape[2]) for e, shape in gating):
                fns[key] = f
    small = [n for n in SIZES if n < wmma.WGMMA_HC_MIN_SIZE]
    table_fns = {}
    if small:
        table = {(r["kind"], r["size"]): r["kernel"] for r in load_table(arch)["wmma"] if r["precision"] == "hc"}
        specs = {n: wmma.parse_name(table[("square", n)]) for n in small}
        root = Path("build/wgmma_hc_tiles_table") / arch
        bundles = _write_sources(root, sorted(set(specs.values()), key=lambda s: s.name), BUNDLE)
        built = build_library(root, root / "build", (arch,), 16, sources=bundles, library_name="libhctable.so")
        table_lib = ctypes.CDLL(str(built.library))
        table_fns = {n: spec_launcher(table_lib, spec) for n, spec in specs.items()}
    bandwidth = copy_bandwidth()
    rows = []
    for n in SIZES:
        batch = 1000
        work = Workload("hc", n, n, n, batch, sets=_sets("hc", n, n, n, batch))
        t = lambda launch: median_time_ms(launch, launches_per_graph=MAX_SETS, repeats=5) * 1e3   # noqa: E731
        # the entry points, and each build's two block widths nearest above n (the rest lose to them: a
        # second block of columns)
        widths = {-(-n // 16) * 16, -(-n // 16) * 16 + 16}
        keys = [k for k in fns if k.endswith(ENTRY) or any(f"_bn{w}_" in k for w in widths)]
        times = {k: [] for k in keys + ["planar"] + (["table"] if n in table_fns else [])}
        for r in range(ROUNDS):   # in turn, each round in the other order: clocks and power drift
            order = keys if r % 2 == 0 else keys[::-1]
            times["planar"].append(t(Planar(work).launch_factory(0.0)))
            if n in table_fns:
                tf, takes = table_fns[n]
                times["table"].append(t(work.ours(tf, 1.0, 0.0, takes_shape=takes)))
            for key in order:
                try:
                    times[key].append(t(work.ours(fns[key], 1.0, 0.0, takes_shape=True)))
                except RuntimeError:
                    pass
        work.release()
        med = {k: statistics.median(v) for k, v in times.items() if v}
        row = {"size": n, "batch": batch, "planar_us": med.pop("planar"),
               "floor_us": bytes_moved("hc", n, n, n, batch, False) / bandwidth * 1e6, "us": med, "rounds": times}
        best = min(med, key=med.get)
        row.update(best=best, best_vs_planar=row["planar_us"] / med[best],
                   best_tflops=flops("hc", n, n, n, batch) / med[best] / 1e6)
        for lib_name in libs:
            key = f"{lib_name}:{ENTRY}"
            if key in med:
                row[f"{lib_name}_entry_vs_planar"] = row["planar_us"] / med[key]
        rows.append(row)
        print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items() if k != "rounds"}),
              flush=True)
    out.write_text(json.dumps({"device": device, "arch": arch, "copy_bandwidth": bandwidth, "checks": checks,
                               "what": "us per launch, hc squares, batch 1000, alpha = 1, beta = 0, NN, buffer sets "
                                       "rotated past L2; planar: four cuBLAS HGEMMs on split data", "rows": rows},
                              indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), dict(a.split("=", 1) for a in sys.argv[2:]))
