"""A/B of the h warp kernels at the smallest warp shapes (h 13-15, 17 as a control) between two
emitted h sets: the one-precision warp template of main before the hc warp kernels, and the
generalized (h and hc) template.  Both libraries are loaded in one process and timed in alternation
on the same buffers (≫ L2, 512 MB as `gemmgen bench small`), strided with beta = 0 and 1 and through
pointer arrays; fractions of the copy-bandwidth floor.

Usage (on a GPU): python docs/experiments/hc_warp/h_warp_ab.py GEN_BEFORE GEN_AFTER OUT.json"""
import json
import sys
from pathlib import Path

from gemmgen.harness.core.api import GemmgenLibrary
from gemmgen.harness.check import build_set, device_arch
from gemmgen.harness.core.timing import copy_bandwidth, median_time_ms
from gemmgen.harness.core.workload import Workload, batch_for_megabytes, bytes_moved

SIZES = (13, 14, 15, 17)
ROUNDS = 3


def main(before: Path, after: Path, out: Path) -> None:
    arch, device = device_arch()
    libs = {label: GemmgenLibrary(build_set(gen, Path("build") / f"ab_{label}", (arch,), 0).library)
            for label, gen in (("before", before), ("after", after))}
    bandwidth = copy_bandwidth()
    rows = []
    for n in SIZES:
        batch = batch_for_megabytes("h", n, n, n, 512)
        work = Workload("h", n, n, n, batch)
        row = {"n": n, "batch": batch, **{f"kernel_{l}": lib.selected_kernel("h", n, n, n) for l, lib in libs.items()}}
        for rnd in range(ROUNDS):
            for label, lib in libs.items():
                for case, beta in (("beta0", 0.0), ("beta1", 1.0), ("array_beta0", 0.0)):
                    if case.startswith("array"):
                        launch = work.ours_array(lib.lib.gemmgen_hgemm_batched, 1.0, beta)
                    else:
                        launch = work.ours(lib.lib.gemmgen_hgemm_batched_strided, 1.0, beta)
                    ms = median_time_ms(launch)
                    frac = bytes_moved("h", n, n, n, batch, beta != 0) / bandwidth / (ms * 1e-3)
                    row.setdefault(f"{label}_{case}", []).append(round(frac, 3))
        work.release()
        rows.append(row)
        print(json.dumps(row), flush=True)
    out.write_text(json.dumps({"device": device, "arch": arch, "copy_bandwidth_gbs": bandwidth / 1e9,
                               "command": "python docs/experiments/hc_warp/h_warp_ab.py " + " ".join(sys.argv[1:]),
                               "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
