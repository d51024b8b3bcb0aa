"""What a selection costs to compile (generator.cost, shown by `gemmgen list`): its CUDA sources and its
kernel builds, known without compiling, equal what ptxas compiles."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from gemmgen.cli import main
from gemmgen.generator.cost import build_cost, source_kernels
from gemmgen.generator.emit import plan, write
from gemmgen.generator.manifest import Selection, build_manifest

ROOT = Path(__file__).resolve().parent.parent

# A small selection with a kernel of every kind its families have: the 1x1x1 elementwise kernel, a ring for
# pointer arrays (d 13: aring2), TSM2 with its beta scaling, ISM2, and the two dispatch sources.
SMALL = ("sm_75,sm_90", "d", "1,13", "", "2")
SMALL_ARGS = ["--arch", "sm_75,sm_90", "--precisions", "d", "--sizes", "1,13", "--tallskinny-n", "2"]
# Kernels per architecture and source, from the formula; ptxas compiled exactly these (nvcc 13.0,
# test_the_small_selection_compiles_the_kernel_builds_estimated).
SMALL_KERNELS = {
    "src/gemmgen_dispatch.cu": 6,
    "src/gemmgen_tallskinny_dispatch.cu": 6,
    "src/ism2/d/ism2_d_n2_t128x2x16_opt1.cu": 4,
    "src/small/d/small_d_m13n13k13_dim4x4_tba4_hoist_aring2.cu": 8,   # staged and array-ring kernel, 4 layouts
    "src/small/d/small_d_m1n1k1_dim1x1_tba128_hoist.cu": 5,           # 4 staged, 1 elementwise
    "src/small/d/small_d_m13n13k13_dim4x4_tba2_hoist.cu": 4,          # the H200's rows (4 staged each)
    "src/small/d/small_d_m13n13k13_dim7x7_tba2_hoist.cu": 4,
    "src/tsm2/d/tsm2_d_n2_t128x2x4_r2_s4.cu": 5,                      # 4 transposes, 1 beta scaling
}
SMALL_BUILDS = 84   # 42 kernels for each of sm_75 and sm_90


def small_manifest():
    return build_manifest(Selection.parse(*SMALL))


def test_the_small_selection_costs_what_was_measured():
    cost = build_cost(small_manifest())
    assert cost.kernels == SMALL_KERNELS
    assert (cost.sources, cost.kernel_builds) == (8, SMALL_BUILDS)


def test_list_shows_the_sources_and_kernel_builds():
    result = CliRunner().invoke(main, ["list", *SMALL_ARGS])
    assert result.exit_code == 0, result.output
    assert "# to compile: 8 CUDA sources, 84 kernel builds (42 kernels for each of 2 architectures: sm_75,sm_90)" \
        in result.output.splitlines()
    listing = CliRunner().invoke(main, ["list", "--json", *SMALL_ARGS]).output
    assert '"kernel_builds": 84' in listing and '"cuda_sources": 8' in listing


@pytest.mark.parametrize("selection", [SMALL, ("sm_80,sm_90", "h,hc", "2-4,40", "3x5x7", "")])
def test_the_sources_counted_are_the_ones_generate_writes(selection):
    manifest = build_manifest(Selection.parse(*selection))
    assert sorted(source_kernels(manifest)) == sorted(f for f in plan(manifest) if f.endswith(".cu"))


def test_complex_variants_cost_a_kernel_per_stored_layout():
    """Complex small, warp, general and block variants compile one kernel per stored layout pair (4) and
    launch path, the tiny kernel one per transpose pair (9)."""
    from gemmgen.generator.cost import variant_kernels
    from gemmgen.generator.small import SmallSpec
    from gemmgen.generator.wmma import WmmaSpec, WmmaTinySpec, WmmaWarpSpec

    assert len(variant_kernels(SmallSpec.parse("small_z_m10n10k10_dim5x5_tba2_hoist"))) == 4
    assert len(variant_kernels(WmmaSpec.parse("wmma_hc_tc16x16x16_blk32x32x16_dim16x8_w4_f32"))) == 4
    assert len(variant_kernels(WmmaTinySpec("hc", 2, 2, 2, 1))) == 9
    small_acc = WmmaWarpSpec("hc", 13, 13, 13, 4, 2, "f16")     # 8 accumulator registers: a strided instance too
    assert small_acc.accumulator_registers == 8 and len(variant_kernels(small_acc)) == 8
    # h, fp16 sums, a cp.async ring: packed, staged, ring with and without old C, and the whole-GEMM kernel
    assert len(variant_kernels(WmmaSpec.parse("wmma_h_tc16x16x16_blk32x32x16_dim16x4_w2_f16_s3"))) == 4 * 5


def test_the_default_set_counts_every_source(root):
    kernels = source_kernels(build_manifest(Selection()))
    assert sorted(kernels) == sorted(str(p.relative_to(root / "generated")) for p in (root / "generated" / "src").rglob("*.cu"))
    assert all(kernels.values())


@pytest.mark.slow
def test_the_small_selection_compiles_the_kernel_builds_estimated():
    """nvcc and ptxas on the small selection: one "Compiling entry function" per estimated kernel build."""
    from gemmgen.harness.core.build import build_library

    gen = ROOT / "build" / "test_cost" / "generated"
    write(small_manifest(), gen)
    result = build_library(gen, ROOT / "build" / "test_cost", ("sm_75", "sm_90"), link=False)
    assert len(result.resources) == SMALL_BUILDS
    assert Counter(r.source for r in result.resources) == {path: 2 * n for path, n in SMALL_KERNELS.items()}


@pytest.mark.slow
def test_the_default_set_build_compiles_the_kernels_estimated(default_set_build):
    """The harness's build of generated/ puts up to 16 sources of a kind in one translation unit, which
    compiles the union of their kernels (shared ones once): per unit and architecture, what ptxas compiled."""
    kernels = source_kernels(build_manifest(Selection()))
    compiled = Counter((r.source, r.arch.rstrip("a")) for r in default_set_build.resources)
    expected = Counter()
    cost = build_cost(build_manifest(Selection()))   # which architectures each source is built for
    built = {source for members in default_set_build.units.values() for source in members}
    for source in kernels:
        if source not in built:
            for arch in ("sm_75", "sm_90"):
                if arch in cost.archs_of(source):
                    expected[source, arch] = len(kernels[source])
    for unit, members in default_set_build.units.items():
        for arch in ("sm_75", "sm_90"):
            if arch in cost.archs_of(members[0]):   # (a unit holds the sources of one side)
                expected[unit, arch] = len(frozenset().union(*(kernels[m] for m in members)))
    assert compiled == expected
