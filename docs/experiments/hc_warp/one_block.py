"""Would one resident block per SM let the hc warp kernels serve N = 31 and 32?  (2026-11-24)

The sweep refused hc 31×31×31 and 32×32×{16,32} for local memory under `WarpMinBlocks`' two blocks per
SM (128 registers per thread), with the experiment's template; those shapes run the general kernel (0.87
/ 0.95 of the floor ≫ L2, β = 1 0.54 / 0.82).  This builds the hc warp variants (4 or 8 warps, 2 or 3
stages, fp16 sums) of squares 28–32 and rank-16 updates 29–32 twice, NN only, for sm_90: with the
template as it is ("two") and with one block per SM for hc kernels whose accumulators take 32 registers
or more ("one"); it records which spill, checks each against float64 on a packed and a padded batch, and
times them ≫ L2 (512 MB, β = 0 and 1, and through pointer arrays), next to the table's general tuple at
31 and 32.  Result (one_block_sm_90.json): with the landed template nothing spills either way, and one
block per SM gains nothing.

Usage (on a GPU): PYTHONPATH=. python docs/experiments/hc_warp/one_block.py OUT.json"""
import ctypes
import json
import sys
from pathlib import Path

from gemmgen.generator import wmma
from gemmgen.harness.api import _SCALAR
from gemmgen.harness.build import build_library
from gemmgen.harness.run_check import device_arch
from gemmgen.harness.timing import copy_bandwidth, median_time_ms
from gemmgen.harness.api import variant_function
from gemmgen.harness.wmma_tune import _write_sources, gpu_check
from gemmgen.harness.workload import Workload, batch_for_megabytes, bytes_moved

SHAPES = [("square", s, s, s) for s in range(28, 33)] + [("rank", s, s, 16) for s in range(29, 33)]
GENERAL = {31: "wmma_hc_tc8x32x16_blk32x32x32_dim8x16_w4_f16", 32: "wmma_hc_tc8x32x16_blk32x32x16_dim16x8_w4_f16"}
RULE = "    static constexpr int value = ACC_REGISTERS > 48 ? 1 : 2;"
ONE_BLOCK = ("    static constexpr int value = ACC_REGISTERS > 48 || (Parts<S>::value == 2 && ACC_REGISTERS >= 32)"
             " ? 1 : 2;")


def array_launcher(lib, name):
    f = getattr(lib, f"{name}_array")
    s = _SCALAR["cuFloatComplex"]
    f.restype = ctypes.c_int
    f.argtypes = [ctypes.c_char, ctypes.c_char, s, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
                  s, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    return f


def build(variant: str, specs):
    root = Path("build") / f"hc_one_block_{variant}"
    bundles = _write_sources(root, specs, 1)
    header = root / "src" / "gemmgen_wmma_warp.cuh"
    text = header.read_text()
    assert text.count(RULE) == 1, "WarpMinBlocks changed: update this experiment"
    if variant == "one":
        header.write_text(text.replace(RULE, ONE_BLOCK))
    built = build_library(root, root / "build", ("sm_90",), 16, sources=bundles, tolerate_failures=True,
                          library_name=f"libhc_{variant}.so")
    spilled = {Path(r.source).stem for r in built.local_memory_kernels}
    names = {f"bundle_{i:04d}": s.name for i, s in enumerate(specs)}
    regs: dict[str, int] = {}
    for r in built.resources:
        name = names.get(Path(r.source).stem)
        regs[name] = max(regs.get(name, 0), r.registers)
    return ctypes.CDLL(str(built.library)), {names[s] for s in spilled}, regs


def main(out: Path) -> None:
    arch, device = device_arch()
    warp_specs = [s for _, m, n, k in SHAPES for s in wmma.warp_candidates("hc", m, n, k) if s.acc == "f16"]
    general_specs = [wmma.parse_name(n) for n in GENERAL.values()]
    bandwidth = copy_bandwidth()
    result = {"device": device, "arch": arch, "copy_bandwidth_gbs": bandwidth / 1e9,
              "command": "PYTHONPATH=. python docs/experiments/hc_warp/one_block.py " + str(out), "rows": []}
    libs = {}
    for variant in ("two", "one"):
        lib, spilled, regs = build(variant, warp_specs + (general_specs if variant == "two" else []))
        libs[variant] = (lib, spilled, regs)
        print(variant, "spilled:", sorted(spilled), flush=True)
    for kind, m, n, k in SHAPES:
        batch = batch_for_megabytes("hc", m, n, k, 512)
        work = Workload("hc", m, n, k, batch)
        candidates = [(v, s.name, False) for v in libs for s in warp_specs if s.shape == (m, n, k)]
        if kind == "square" and m in GENERAL:
            candidates.append(("two", GENERAL[m], True))
        for variant, name, general in candidates:
            lib, spilled, regs = libs[variant]
            row = {"kind": kind, "m": m, "n": n, "k": k, "variant": variant, "kernel": name, "batch": batch,
                   "spills": name in spilled, "registers": regs.get(name)}
            f = variant_function(lib, name, "strided")
            ok_p, err_p = gpu_check(f, "hc", m, n, k, general, batch=2000, packed=True)
            ok_d, err_d = gpu_check(f, "hc", m, n, k, general, batch=3)
            row.update(correct=bool(ok_p and ok_d), error_packed=err_p, error_padded=err_d)
            if row["correct"]:
                for tag, beta in (("beta0", 0.0), ("beta1", 1.0)):
                    ms = median_time_ms(work.ours(f, 1.0, beta, takes_shape=general))
                    row[tag] = round(bytes_moved("hc", m, n, k, batch, beta != 0) / bandwidth / (ms * 1e-3), 3)
                if not general:
                    ms = median_time_ms(work.ours_array(array_launcher(lib, name), 1.0, 0.0, takes_shape=False))
                    row["array_beta0"] = round(bytes_moved("hc", m, n, k, batch, False) / bandwidth / (ms * 1e-3), 3)
            result["rows"].append(row)
            print(json.dumps(row), flush=True)
        work.release()
    out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
