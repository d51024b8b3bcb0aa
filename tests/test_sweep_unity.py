"""A sweep's build in unity units (build_library with tolerate_failures and unity > 0) keeps what one
compile per source gives: a source that does not compile fails alone, under its own name, and the
rest of its unit is built and linked; each kernel's resources name the source it belongs to."""
from __future__ import annotations

import subprocess
from pathlib import Path

from gemmgen.harness.core.build import build_library, kernel_members, sweep_unity

HEADER = """#pragma once
namespace gemmgen {
// A template in the shared namespace, instantiated with plain numbers, as the real kernels are: its
// mangled name does not say which variant it belongs to.
template <int N, bool LOCAL>
__global__ void tile_kernel(double* x, int i)
{
    if (LOCAL) {   // an array indexed at run time: in local memory
        double t[N];
        for (int j = 0; j < N; ++j) t[j] = x[j * blockDim.x + threadIdx.x];
        x[threadIdx.x] = t[i];
    } else {
        x[threadIdx.x] *= N;
    }
}
template <typename S>
__global__ void scale_kernel(S* x, S beta) { x[threadIdx.x] *= beta; }   // shared by several variants

template <int N, bool LOCAL, bool SCALE>
int launch_tile(double* x, int i)
{
    if (SCALE) scale_kernel<double><<<1, 32>>>(x, 0.5);
    tile_kernel<N, LOCAL><<<1, 32>>>(x, i);
    return 0;
}
}  // namespace gemmgen
"""

VARIANT = """#include "tile.cuh"
namespace gemmgen_{name} {{
int launch(double* x, int i) {{ return gemmgen::launch_tile<{n}, {local}, {scale}>(x, i); }}
extern "C" int {name}_strided(double* x, int i) {{ return launch(x, i); }}
}}  // namespace gemmgen_{name}
"""

# A kernel in the variant's own namespace: its name says whose it is.
OWN = """namespace gemmgen_{name} {{
__global__ void own_kernel(float* x) {{ x[threadIdx.x] += 1.0f; }}
extern "C" int {name}_strided(float* x) {{ own_kernel<<<1, 32>>>(x); return 0; }}
}}  // namespace gemmgen_{name}
"""

BROKEN = """namespace gemmgen_{name} {{
int launch(double* x, int i {{ return 0; }}   // does not compile
}}  // namespace gemmgen_{name}
"""


def _set(root: Path) -> list[Path]:
    (root / "include").mkdir(parents=True)
    (root / "src" / "tile" / "d").mkdir(parents=True)
    (root / "src" / "tile" / "s").mkdir(parents=True)
    (root / "src" / "tile.cuh").write_text(HEADER)
    files = {
        # names that are prefixes of one another: the local memory is the second's alone
        "tile/d/tile_d_n8_tba2.cu": VARIANT.format(name="tile_d_n8_tba2", n=8, local="false", scale="true"),
        "tile/d/tile_d_n8_tba2_hoist.cu": VARIANT.format(name="tile_d_n8_tba2_hoist", n=64, local="true",
                                                         scale="true"),
        "tile/d/tile_d_n9_own.cu": OWN.format(name="tile_d_n9_own"),
        # a unit of its own (another folder) with a source that does not compile
        "tile/s/tile_s_n4_ok.cu": VARIANT.format(name="tile_s_n4_ok", n=4, local="false", scale="false"),
        "tile/s/tile_s_n4_broken.cu": BROKEN.format(name="tile_s_n4_broken"),
    }
    for rel, text in files.items():
        (root / "src" / rel).write_text(text)
    return [root / "src" / rel for rel in files]


def test_a_unit_keeps_what_single_compiles_give(tmp_path):
    sources = _set(tmp_path / "gen")
    built = build_library(tmp_path / "gen", tmp_path / "build", ("sm_75",), 2, sources=sources,
                          tolerate_failures=True, unity=8)
    # the broken source fails under its own name, as a compile of it alone would have it
    assert list(built.failures) == ["src/tile/s/tile_s_n4_broken.cu"]
    assert "nvcc failed" in built.failures["src/tile/s/tile_s_n4_broken.cu"]
    # the unit that compiled stays a unit; the failed one's good member is built alone
    assert list(built.units.values()) == [["src/tile/d/tile_d_n8_tba2.cu", "src/tile/d/tile_d_n8_tba2_hoist.cu",
                                           "src/tile/d/tile_d_n9_own.cu"]]
    assert len(built.objects) == 2
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(built.library)], capture_output=True,
                             text=True, check=True).stdout
    for name in ("tile_d_n8_tba2", "tile_d_n8_tba2_hoist", "tile_d_n9_own", "tile_s_n4_ok"):
        assert f" {name}_strided" in symbols
    assert "tile_s_n4_broken" not in symbols
    # resources by member: the local memory is the hoist variant's alone (not its prefix's)
    assert {Path(r.source).stem for r in built.local_memory_kernels} == {"tile_d_n8_tba2_hoist"}
    kernels = {(Path(r.source).stem, r.function.split("gemmgen")[1][:14]) for r in built.resources}
    assert kernels == {("tile_d_n8_tba2", "11tile_kernelI"), ("tile_d_n8_tba2", "12scale_kernel"),
                       ("tile_d_n8_tba2_hoist", "11tile_kernelI"), ("tile_d_n8_tba2_hoist", "12scale_kernel"),
                       ("tile_d_n9_own", "_tile_d_n9_own"), ("tile_s_n4_ok", "11tile_kernelI"),
                       ("tile_s_n4_ok", "12scale_kernel")}   # (instantiated, though not launched)


def test_kernels_named_by_a_member_namespace_go_to_the_longest_stem(tmp_path):
    """No object needed where the kernels' names hold their members' namespaces."""
    stems = ["small_d_m8_tba2", "small_d_m8_tba2_hoist"]
    functions = ["_ZN21gemmgen_small_d_m8_tba21kEv", "_ZN27gemmgen_small_d_m8_tba2_hoist1kEv"]
    assert kernel_members(functions, stems, tmp_path / "absent.o") == {
        functions[0]: ["small_d_m8_tba2"], functions[1]: ["small_d_m8_tba2_hoist"]}


def test_sweep_units_leave_every_core_two_units():
    assert sweep_unity(256, 16) == 8      # a piece of a distributed run (tune_run.CHUNK) on 16 cores
    assert sweep_unity(64, 2) == 8
    assert sweep_unity(40, 8) == 2
    assert sweep_unity(20, 8) == 0        # too few: one source per compile


def test_a_build_counts_as_compiling_in_the_workers_summary(tmp_path):
    """build_library's time is what `gemmgen tune --gpus` reports as a worker's time compiling (core.busy)."""
    from gemmgen.harness.core import busy
    from gemmgen.harness.core.build import BuildError

    before = busy.seconds().get("compiling", 0.0)
    try:
        build_library(tmp_path, tmp_path / "build", ("sm_90",), 1, sources=[])
    except BuildError:   # (nothing to compile: the shortest build there is)
        pass
    assert busy.seconds().get("compiling", 0.0) > before
