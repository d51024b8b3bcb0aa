"""A/B of builds of the hc wgmma kernel's entry point (gemmgen_wgmma_hc_strided), each LIB a build of
../wgmma_hc_tiles/variants.cu against one version of generated/src/wmmahopper/gemmgen_wgmma_hc.cu.

Checks first, each build: ../wgmma_hc_tiles/run.py's gating shapes (batch 24), then, through
../wgmma_block/check_hc_api.check_case (float64, DESIGN.md's bound, C as NaN where beta = 0, padding rows of C
untouched), batches of 300 GEMMs, so that the persistent grid goes round many times: shapes whose last block of
rows leaves a warpgroup idle with 2, 4 and 6 tiles per GEMM (the grid a multiple of them: the turned order) and
with 8 (132 blocks are not: 128 of them take the turned order since), beta = 0 and beta = 1.  A build that fails is not timed.

Timing: hc squares at batch 1000, buffer sets rotated past L2, against planar cuBLAS (four HGEMMs on split
data), as ../wgmma_hc_tiles/run.py, but only the entry points and ROUNDS rounds in which the builds take turns
at going first: that script's rounds ran the builds in one order and then the reverse, and a build timed
first after cuBLAS measured up to 10 % faster than the same build timed later (an A/A run of one build under
two names, hc_rotation_aa_sm_90.json), which its median of three rounds kept.

Usage (on an H100, repository root): HC_SIZES="200 216" python docs/experiments/hc_rotation/ab.py OUT.json NAME=LIB ...
  CHECK_ONLY=1 compute-sanitizer python docs/experiments/hc_rotation/ab.py - new=LIB   # the checks alone"""
import ctypes
import importlib.util
import json
import os
import statistics
import sys
from pathlib import Path

from gemmgen.harness.wmma.bench import MAX_SETS, Planar, _sets
from gemmgen.harness.core.reference import error_bound
from gemmgen.harness.check import device_arch
from gemmgen.harness.core.timing import copy_bandwidth, median_time_ms
from gemmgen.harness.core.workload import Workload, bytes_moved, flops

HERE = Path(__file__).parent


def _module(path: Path):
    """A script of another experiment as a module (two of them are called run.py)."""
    spec = importlib.util.spec_from_file_location(f"{path.parent.name}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))   # its own imports (variants.py)
    spec.loader.exec_module(module)
    return module


check_case = _module(HERE.parent / "wgmma_block" / "check_hc_api.py").check_case
_tiles = _module(HERE.parent / "wgmma_hc_tiles" / "run.py")
ENTRY, GATING, SHAPES, check, launcher = _tiles.ENTRY, _tiles.GATING, _tiles.SHAPES, _tiles.check, _tiles.launcher

SIZES = [int(s) for s in os.environ.get("HC_SIZES", "").split()] or range(64, 257, 8)
# or any shapes, "MxNxK ..." (HC_SHAPES, instead of the squares)
SHAPES_TIMED = [tuple(int(x) for x in s.split("x")) for s in os.environ.get("HC_SHAPES", "").split()] or [
    (n, n, n) for n in SIZES]
ROUNDS = int(os.environ.get("HC_ROUNDS", "6"))
# (m, n, k, beta): 2m % 128 in (0, 64] (a warpgroup idle in the last block of rows); tiles per GEMM 2 (72: one
# block of 80 columns), 4 (200, 216), 6 (136 with n = 300: three blocks of rows, two of columns) and 8 (200
# with n = 300; 132 blocks are no multiple of 8: the plain order then, 128 blocks and the turned order since the
# grid gives up blocks); 232, every block of rows busy
MANY = [(72, 72, 72, 0.0), (200, 200, 200, 0.0), (216, 216, 216, 1.0), (136, 300, 136, 0.0), (136, 300, 140, 1.0),
        (200, 300, 100, 0.0), (232, 232, 232, 0.0), (208, 200, 16, 1.0),
        # since n > 256 is shared evenly by its blocks and a grid gives up blocks to a multiple of the tiles:
        # 8 tiles (4 × 2 blocks of 208 columns), 260 in two blocks of 144, 232 × 300 (8 tiles, every block busy)
        (216, 400, 216, 1.0), (200, 260, 120, 1.0), (232, 300, 64, 0.0)]


def checked(lib_name: str, path: str):
    """The build's entry point if every check passes, else None; and the check records."""
    f = launcher(ctypes.CDLL(path), ENTRY)
    records = []
    ok = True
    for shape in SHAPES[:GATING]:
        err = check(f, *shape)
        passed = err is not None and err <= error_bound("hc", shape[2])
        records.append({"shape": list(shape[:3]), "batch": 24, "error": err, "passed": passed})
        ok &= passed
    import cupy as cp

    rng = cp.random.RandomState(11)
    for m, n, k, beta in MANY:
        passed, line = check_case(f, "hc", m, n, k, "NN", 1.0, beta, rng, batch=300)
        records.append({"shape": [m, n, k], "beta": beta, "batch": 300, "passed": bool(passed), "report": line})
        ok &= bool(passed)
    for r in records:
        print(lib_name, r, flush=True)
    return (f if ok else None), records


def main(out: Path, libs: dict) -> None:
    arch, device = device_arch()
    fns, checks = {}, {}
    for lib_name, path in libs.items():
        f, checks[lib_name] = checked(lib_name, path)
        if f is not None:
            fns[lib_name] = f
    if os.environ.get("CHECK_ONLY"):   # (under compute-sanitizer)
        failed = sum(not r["passed"] for records in checks.values() for r in records)
        print("failed:", failed)
        sys.exit(1 if failed or len(fns) < len(libs) else 0)
    bandwidth = copy_bandwidth()
    names = list(fns)
    rows = []
    for m, n, k in SHAPES_TIMED:
        batch = 1000
        work = Workload("hc", m, n, k, batch, sets=_sets("hc", m, n, k, batch))
        t = lambda launch: median_time_ms(launch, launches_per_graph=MAX_SETS, repeats=5) * 1e3   # noqa: E731
        times = {key: [] for key in names + ["planar"]}
        for r in range(ROUNDS):
            times["planar"].append(t(Planar(work).launch_factory(0.0)))
            for key in names[r % len(names):] + names[:r % len(names)]:   # each build first in turn
                times[key].append(t(work.ours(fns[key], 1.0, 0.0, takes_shape=True)))
        work.release()
        med = {key: statistics.median(v) for key, v in times.items()}
        row = {"size": n, "shape": [m, n, k], "batch": batch, "planar_us": med["planar"],
               "floor_us": bytes_moved("hc", m, n, k, batch, False) / bandwidth * 1e6,
               "us": {key: med[key] for key in names}, "rounds": times,
               "vs_planar": {key: med["planar"] / med[key] for key in names},
               "tflops": {key: flops("hc", m, n, k, batch) / med[key] / 1e6 for key in names}}
        rows.append(row)
        print(f"{m}x{n}x{k}", f"planar {med['planar']:.1f} floor {row['floor_us']:.1f}",
              " ".join(f"{key} {med[key]:.1f} ({row['vs_planar'][key]:.2f}x)" for key in names), flush=True)
    out.write_text(json.dumps({"device": device, "arch": arch, "copy_bandwidth": bandwidth, "checks": checks,
                               "rounds": ROUNDS,
                               "what": "us per launch (median of the rounds), hc, batch 1000, alpha = 1, "
                                       "beta = 0, NN, buffer sets rotated past L2; planar: four cuBLAS HGEMMs on "
                                       "split data", "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), dict(a.split("=", 1) for a in sys.argv[2:]))
