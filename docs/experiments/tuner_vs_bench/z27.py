"""Why `tune small` and `bench small` disagree on z 27×27×27 (2026-11-25): the tuner timed the mma tuple
at 0.989 of the floor and the FMA tuple at 0.987 (256 MB, 5 launches per graph, 7 repeats), the bench
the mma tuple at 0.86-0.90 (512 MB, 10 launches per graph, 15 repeats) where the FMA tuple had read
0.96.  Both tuples, both data sizes and both timing settings, in alternation in one process (β = 0,
strided, N/N), plus d 28's two best tuples as a control.

Also through the public entry point of an emitted d/z set (the bench's path: argument checks, the
dispatch table, the variant's launcher), if one is given.

Usage (on a GPU): python docs/experiments/tuner_vs_bench/z27.py OUT.json [GENERATED_DZ]"""
import ctypes
import json
import sys
from pathlib import Path

from gemmgen.generator import small
from gemmgen.generator.emit import kernel_source, kernel_source_path, support_files
from gemmgen.harness.core.build import build_library
from gemmgen.harness.check import device_arch
from gemmgen.harness.core.timing import copy_bandwidth, median_time_ms
from gemmgen.harness.small.tune import _launcher
from gemmgen.harness.core.workload import Workload, batch_for_megabytes, bytes_moved

NAMES = ("small_z_m27n27k27_dim16x16_tba1_hoist_mma", "small_z_m27n27k27_dim7x9_tba1_hoist",
         "small_d_m28n28k28_dim8x16_tba1_hoist_mma", "small_d_m28n28k28_dim16x8_tba1_hoist_mma")
TIMINGS = {"tuner": dict(launches_per_graph=5, repeats=7), "bench": dict()}
ROUNDS = 3


def main(out: Path) -> None:
    arch, device = device_arch()
    root = Path("build/tuner_vs_bench")
    for rel, text in support_files("tuner_vs_bench", (arch,), ("d", "z")).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    specs = [small.SmallSpec.parse(n) for n in NAMES]
    sources = []
    for spec in specs:
        path = root / kernel_source_path(spec)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(kernel_source(spec, "tuner_vs_bench", trans_pairs=(("N", "N"),)))
        sources.append(path)
    lib = ctypes.CDLL(str(build_library(root, root / "build", (arch,), 16, sources=sources).library))
    public = None
    if len(sys.argv) > 2:
        from gemmgen.harness.core.api import GemmgenLibrary
        from gemmgen.harness.check import build_set
        public = GemmgenLibrary(build_set(Path(sys.argv[2]), Path("build/tuner_vs_bench_set"), (arch,), 0).library)
    bandwidth = copy_bandwidth()
    rows = []
    for shape in sorted({s.shape + (s.precision,) for s in specs}):
        m, n, k, prec = shape
        mine = [s for s in specs if s.shape == (m, n, k)]
        for megabytes in (256, 512):
            batch = batch_for_megabytes(prec, m, n, k, megabytes)
            work = Workload(prec, m, n, k, batch)
            entry = getattr(public.lib, f"gemmgen_{prec}gemm_batched_strided") if public else None
            for _ in range(ROUNDS):
                for spec, f in [(s, _launcher(lib, s)) for s in mine] + ([(None, entry)] if entry else []):
                    for label, kw in TIMINGS.items():
                        ms = median_time_ms(work.ours(f, 1.0, 0.0), **kw)
                        name = spec.name if spec else "public: " + public.selected_kernel(prec, m, n, k)
                        rows.append({"kernel": name, "megabytes": megabytes, "batch": batch, "timing": label,
                                     "floor_fraction": round(bytes_moved(prec, m, n, k, batch, False)
                                                             / bandwidth / (ms * 1e-3), 3)})
                        print(json.dumps(rows[-1]), flush=True)
            work.release()
    out.write_text(json.dumps({"device": device, "arch": arch, "copy_bandwidth_gbs": bandwidth / 1e9,
                               "command": "python docs/experiments/tuner_vs_bench/z27.py " + " ".join(sys.argv[1:]),
                               "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
