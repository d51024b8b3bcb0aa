"""Build the experiment's shared library: wmma_block_kernel (gemmgen_wmma.cuh) at the tuples below,
for h and hc, every stored layout pair, plus the committed table's general kernels at the sizes it
times, so one run compares both on the same data.

    python3 docs/experiments/mma_block/build.py OUT_DIR [--arch sm_90]

Writes OUT_DIR/mma_block.so and OUT_DIR/configs.json (the exported symbols)."""
import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from gemmgen.generator import emit  # noqa: E402
from gemmgen.harness.core.toolchain import find_nvcc  # noqa: E402

# (precision, BM, BN, BK, WM, WN, stages, acc)
CONFIGS = [
    ("h", 64, 64, 32, 2, 2, 4, "f32"),
    ("h", 64, 64, 64, 2, 2, 3, "f32"),
    ("h", 128, 64, 32, 2, 2, 4, "f32"),
    ("h", 128, 128, 32, 4, 4, 3, "f32"),
    ("h", 128, 128, 32, 2, 4, 3, "f16"),
    ("h", 96, 96, 32, 2, 2, 3, "f32"),
    ("hc", 32, 32, 32, 2, 2, 4, "f32"),
    ("hc", 64, 32, 32, 2, 2, 4, "f32"),
    ("hc", 64, 64, 32, 2, 4, 3, "f32"),
    ("hc", 64, 64, 32, 2, 4, 3, "f16"),
    ("hc", 128, 64, 32, 4, 2, 3, "f16"),
    ("hc", 64, 128, 16, 2, 4, 4, "f16"),
]
PAIRS = [("N", "N"), ("N", "T"), ("T", "N"), ("T", "T")]
# timed shapes: (precision, kind, size)
SHAPES = ([("h", "square", s) for s in (63, 64, 72, 80, 88, 96, 104, 112, 120, 128)]
          + [("h", "rank", s) for s in (72, 96, 128)]
          + [("hc", "square", s) for s in (32, 40, 48, 56, 64, 72, 80, 96, 112, 128, 160, 192, 224, 256)]
          + [("hc", "rank", s) for s in (48, 64, 96, 128, 192, 256)])


def baseline_kernels() -> dict:
    """(precision, kind, size) -> the committed sm_90 table's general kernel there."""
    rows = json.loads((ROOT / "gemmgen/generator/tuning/sm_90.json").read_text())["wmma"]
    return {(r["precision"], r["kind"], r["size"]): r["wmma"] for r in rows
            if (r["precision"], r["kind"], r["size"]) in set(SHAPES)}


def config_name(c):
    p, bm, bn, bk, wm, wn, st, acc = c
    return f"wmma_{p}_blk_{bm}x{bn}x{bk}_w{wm}x{wn}_s{st}_{acc}"


def min_blocks(c) -> int:
    """Two blocks per SM where the accumulators take at most 48 registers (what the run measured)."""
    p, bm, bn, bk, wm, wn, st, acc = c
    regs = (bm // wm // 16) * (bn // wn * (2 if p == "hc" else 1) // 8) * (4 if acc == "f32" else 2)
    return 2 if regs <= 48 and wm * wn <= 8 else 1


def source() -> str:
    """Per tuple, a launcher with the general wmma kernels' signature (harness.api.variant_function)."""
    out = ['#include "gemmgen_wmma.cuh"', "using namespace gemmgen;", ""]
    for c in CONFIGS:
        p, bm, bn, bk, wm, wn, st, acc = c
        S, Sc = ("__half", "float") if p == "h" else ("__half2", "float2")
        A = "float" if acc == "f32" else "__half"
        cases = "\n".join(
            f"    case trans_code('{ta}', '{tb}'): return tc::launch_wmma_block<{S}, {A}, {bm}, {bn}, {bk}, {wm}, {wn}, "
            f"{st}, {min_blocks(c)}, '{ta}', '{tb}'>(conj, ptrs, m, n, k, lda, ldb, ldc, alpha, beta, batch, stream);"
            for ta, tb in PAIRS)
        out.append(
            f'extern "C" int {config_name(c)}_strided(char transa, char transb, int m, int n, int k, {Sc} alpha, '
            f"const {S}* A, int lda, long long sa, const {S}* B, int ldb, long long sb, {Sc} beta, {S}* C, int ldc, "
            f"long long sc, int batch, cudaStream_t stream) {{\n"
            f"    const char ta = normalize_trans(transa, {'true' if p == 'hc' else 'false'}), "
            f"tb = normalize_trans(transb, {'true' if p == 'hc' else 'false'});\n"
            f"    const Conjugate conj{{ta == 'C', tb == 'C'}};\n"
            f"    const BatchPointers<{S}> ptrs = BatchPointers<{S}>::strided(A, sa, B, sb, C, sc);\n"
            f"    switch (trans_code(stored_layout(ta), stored_layout(tb))) {{\n{cases}\n    default: return -1;\n    }}\n}}\n")
    return "\n".join(out) + "\n"


def main():
    out = pathlib.Path(sys.argv[1])
    arch = sys.argv[sys.argv.index("--arch") + 1] if "--arch" in sys.argv else "sm_90"
    src = out / "src"
    src.mkdir(parents=True, exist_ok=True)
    for rel, text in emit.support_files("experiment", [arch], ["h", "hc"]).items():
        path = src / pathlib.Path(rel).name
        path.write_text(text)
    (src / "mma_block.cu").write_text(source())
    base = sorted(set(baseline_kernels().values()))
    base_sources = [str(ROOT / "generated/src/wmma" / name.split("_")[1] / f"{name}.cu") for name in base]
    cmd = [find_nvcc(), "-O3", "-std=c++14", f"-arch={arch}", "--shared", "-Xcompiler", "-fPIC", "-I", str(src),
           "-Xptxas", "-v", "-o", str(out / "mma_block.so"), str(src / "mma_block.cu"), *base_sources]
    res = subprocess.run(cmd, capture_output=True, text=True)
    (out / "ptxas.txt").write_text(res.stderr)
    if res.returncode:
        print(res.stderr[-6000:])
        sys.exit(1)
    spills = [l for l in res.stderr.splitlines() if "spill" in l and not " 0 bytes spill stores, 0 bytes spill loads" in l]
    print("\n".join(spills[:20]) or "no spills")
    (out / "configs.json").write_text(json.dumps({"configs": [{"name": config_name(c), "config": c} for c in CONFIGS],
                                                  "baseline": {"/".join(map(str, k)): v for k, v in
                                                               sorted(baseline_kernels().items())}}, indent=1))


if __name__ == "__main__":
    main()
