"""Every h block tuple of the sweep at batch 1000 against cuBLAS (2026-11-26).

The wmma table is tuned with data past L2 (64 MB, then 256 MB), and at batch 1000 the table's block
kernels for h squares 96-128 are 0.93-0.99x cuBLAS (`docs/perf/bench_wmma_sm_90.md`).  Would a choice
by batch count (another table column, the dispatch looking at `batch`) beat cuBLAS there?  Each block
tuple of `SWEEP_BLOCK` that fits a size, through its own launcher, and cuBLAS on the same buffers, in
one run: squares and rank-16 updates 64-128, batch 1000, beta = 0, NN, rotating over the bench's buffer
sets (`harness.bench_wmma._sets`, 200 MB, so every launch reads from DRAM as in the bench).

Usage (on a GPU, repository root): python docs/experiments/batch1000_blocks/timing.py OUT.json"""
import ctypes
import json
import sys
from pathlib import Path

from gemmgen.generator import wmma
from gemmgen.generator.tuning import load_table
from gemmgen.harness.wmma.bench import MAX_SETS, _sets
from gemmgen.harness.core.build import build_library
from gemmgen.harness.check import device_arch
from gemmgen.harness.core.timing import median_time_ms
from gemmgen.harness.wmma.tune import BUNDLE, _spills, _write_sources, block_fits, spec_launcher
from gemmgen.harness.core.workload import Workload

SIZES = (64, 72, 80, 88, 96, 104, 112, 120, 128)
BATCH = 1000


def main(out: Path) -> None:
    arch, device = device_arch()
    specs = wmma.block_candidates("h", arch)
    root = Path("build/batch1000_blocks") / arch
    bundles = _write_sources(root, specs, BUNDLE)
    built = build_library(root, root / "build", (arch,), 16, sources=bundles, library_name="libbatch1000.so")
    bundle_of = {s.name: bundles[i // BUNDLE].stem for i, s in enumerate(specs)}
    usable = [s for s in specs if not _spills(s, built, bundle_of[s.name])]
    lib = ctypes.CDLL(str(built.library))
    table = {(r["kind"], r["size"]): r["kernel"] for r in load_table(arch)["wmma"] if r["precision"] == "h"}
    rows = []
    for kind in ("square", "rank"):
        for size in SIZES:
            m, n, k = size, size, size if kind == "square" else 16
            work = Workload("h", m, n, k, BATCH, sets=_sets("h", m, n, k, BATCH))
            row = {"kind": kind, "size": size, "table": table.get((kind, size)),
                   "cublas_us": median_time_ms(work.cublas(1.0, 0.0), launches_per_graph=MAX_SETS, repeats=7) * 1e3}
            for s in usable:
                if block_fits(s, kind, size):
                    f, takes_shape = spec_launcher(lib, s)
                    row[s.name] = median_time_ms(work.ours(f, 1.0, 0.0, takes_shape=takes_shape),
                                                 launches_per_graph=MAX_SETS, repeats=7) * 1e3
            work.release()
            timed = {name: us for name, us in row.items() if name.startswith("wmmablock_")}
            best = min(timed, key=timed.get)
            row.update(best=best, best_speedup=round(row["cublas_us"] / timed[best], 3),
                       table_speedup=round(row["cublas_us"] / timed[row["table"]], 3) if row["table"] in timed else None)
            rows.append(row)
            print(kind, size, "table", row["table"], row["table_speedup"], "best", best, row["best_speedup"], flush=True)
    out.write_text(json.dumps({"device": device, "arch": arch, "batch": BATCH,
                               "what": "time per launch (us), h block kernels through their own launchers and cuBLAS, "
                                       "batch 1000, beta = 0, NN, buffer sets rotated (data from DRAM)",
                               "refused": sorted(s.name for s in specs if s not in usable), "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
