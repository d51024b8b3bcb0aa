"""Does another tuple serve pointer arrays better than a shape's strided winner? (2026-11-24)

The small-family table holds one tuple per shape, the fastest on strided batches; its pointer-array
path stayed under issue 2's 0.70 of the floor at h N = 7, 10, hc 10, 19, 21, 23, s 28, c 32, all
tuples with a strided cp.async ring.  This builds, for each of those shapes, the tuner's
neighbourhood of its table row (generator.small.neighbourhood: tba halved/kept/doubled, both
stagings, ring depths) plus each ring-less neighbour with a pointer-array ring (array_stages), NN
only, for the GPU present, and times every variant through both of its launchers on the same packed
batch (≫ L2, beta = 0), after checking its pointer-array result against NumPy
(harness.tune_small.correct).  The pointer arrays address the packed batch's matrices, so they start
between 16-byte boundaries wherever a matrix is not whole chunks, as in `gemmgen bench small`.

Usage: python docs/experiments/array_tuples.py --build-only [JOBS] (nvcc only: build/array_tuples, whose
objects the next step reuses where the compiler is the same), then on a GPU
python docs/experiments/array_tuples.py OUT.json [JOBS]"""
import json
import sys
from dataclasses import replace
from pathlib import Path

from gemmgen.generator import small
from gemmgen.generator.emit import kernel_source, kernel_source_path, support_files
from gemmgen.generator.tuning import load_table
from gemmgen.harness.core.api import variant_function
from gemmgen.harness.core.build import build_library
from gemmgen.harness.check import device_arch
from gemmgen.harness.core.timing import copy_bandwidth, median_time_ms
from gemmgen.harness.small.tune import correct
from gemmgen.harness.core.workload import Workload, batch_for_megabytes, bytes_moved

SHAPES = (("h", 7), ("h", 10), ("hc", 10), ("hc", 19), ("hc", 21), ("hc", 23), ("s", 28), ("c", 32))
MEGABYTES = 256
POINTER_BYTES = 24   # three 8-byte addresses per GEMM


def candidates(arch: str) -> dict[tuple, list[small.SmallSpec]]:
    rows = {(r["precision"], r["m"]): r for r in load_table(arch)["small"] if r["m"] == r["n"] == r["k"]}
    out = {}
    for prec, n in SHAPES:
        row = rows[(prec, n)]
        specs = set(small.neighbourhood(row, arch)) | {small.SmallSpec.from_row(row, shape=(n, n, n))}
        specs |= {ring for spec in list(specs) if not spec.stages for depth in small.RING_STAGES
                  for ring in (replace(spec, array_stages=depth),) if ring.is_valid(arch)}
        out[(prec, n)] = sorted(specs, key=lambda s: s.name)
    return out


def main(out: Path | None, jobs: int) -> None:
    arch, device = device_arch() if out else ("sm_90", None)
    todo = candidates(arch)
    root = Path("build/array_tuples")
    command = "docs/experiments/array_tuples.py"
    for rel, text in support_files(command, (arch,), tuple(sorted({p for p, _ in SHAPES}))).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    sources = []
    for specs in todo.values():
        for spec in specs:
            path = root / kernel_source_path(spec)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(kernel_source(spec, command, trans_pairs=(("N", "N"),)))
            sources.append(path)
    print(f"{len(sources)} variants, building", flush=True)
    built = build_library(root, root / "build", (arch,), jobs, sources=sources, tolerate_failures=True,
                          library_name="libarrays.so")
    if out is None:
        print(f"built {built.library}; {len(built.failures)} failed, "
              f"{len(built.local_memory_kernels)} with local memory")
        return
    import ctypes
    lib = ctypes.CDLL(str(built.library))
    spilled = {Path(r.source).stem for r in built.local_memory_kernels}
    failed = {Path(rel).stem for rel in built.failures}
    bandwidth = copy_bandwidth()
    rows = []
    table = {(r["precision"], r["m"]): r for r in load_table(arch)["small"] if r["m"] == r["n"] == r["k"]}
    for (prec, n), specs in todo.items():
        batch = batch_for_megabytes(prec, n, n, n, MEGABYTES)
        work = Workload(prec, n, n, n, batch)
        floor = bytes_moved(prec, n, n, n, batch, False) / bandwidth * 1e3
        winner = small.SmallSpec.from_row(table[(prec, n)], shape=(n, n, n)).name
        for spec in specs:
            row = {"precision": prec, "n": n, "kernel": spec.name, "table_winner": spec.name == winner,
                   "batch": batch}
            if spec.name in failed or spec.name in spilled:
                rows.append({**row, "status": "compile-failed" if spec.name in failed else "local-memory"})
                continue
            arr = variant_function(lib, spec.name, "array")
            ok, err = correct(arr, spec, arrays=True)
            if not ok:
                rows.append({**row, "status": "wrong-answer", "relative_error": err})
                continue
            strided_ms = median_time_ms(work.ours(variant_function(lib, spec.name, "strided"), 1.0, 0.0),
                                        launches_per_graph=5, repeats=7)
            array_ms = median_time_ms(work.ours_array(arr, 1.0, 0.0, takes_shape=False),
                                      launches_per_graph=5, repeats=7)
            rows.append({**row, "status": "ok", "strided_floor": round(floor / strided_ms, 3),
                         "array_floor": round(floor / array_ms, 3),
                         "array_floor_with_pointers": round(
                             floor * (1 + POINTER_BYTES * batch / bytes_moved(prec, n, n, n, batch, False))
                             / array_ms, 3)})
        work.release()
        ok = [r for r in rows if r["precision"] == prec and r["n"] == n and r["status"] == "ok"]
        mine = next((r for r in ok if r["table_winner"]), None)
        best = max(ok, key=lambda r: r["array_floor"])
        print(f"{prec} N={n}: table {mine and mine['array_floor']} ({winner}); best array {best['array_floor']} "
              f"({best['kernel']}, strided {best['strided_floor']}); {len(ok)} of {len(specs)} ok", flush=True)
    out.write_text(json.dumps({"device": device, "arch": arch, "copy_bandwidth_gbs": bandwidth / 1e9,
                               "what": "fraction of the bandwidth floor (matrices only, and counting 24 bytes "
                                       "of pointers per GEMM) through each variant's pointer-array and strided "
                                       "launchers; NN, packed batch ≫ L2, beta = 0",
                               "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main(None if sys.argv[1] == "--build-only" else Path(sys.argv[1]),
         int(sys.argv[2]) if len(sys.argv) > 2 else 16)
