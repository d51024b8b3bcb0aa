"""Kernels that only devices below sm_80, or only devices from it, can run are built for the architectures on
that side alone (generator.manifest.kernel_bands; the harness's builds and CMake's)."""
import json

import pytest
from click.testing import CliRunner

from gemmgen.cli import main
from gemmgen.generator.manifest import BELOW, FROM, builds_on, kernel_bands


def _entry(kernel, cc, m=8, prefer_general=False, **keys):
    return {"precision": "h", "m": m, "n": m, "k": m, "from_cc": cc, "kernel": kernel,
            "prefer_general": prefer_general, **keys}


SMALL_OLD, SMALL_NEW = "small_h_m8n8k8_dim4x4_tba8", "small_h_m8n8k8_dim8x8_tba4_ring2"
WARP = "wmmawarp_h_m8n8k8_w8_s2_f16"


def test_a_kernel_superseded_at_sm_80_is_below_and_its_successor_from():
    assert kernel_bands([_entry(SMALL_OLD, 75), _entry(SMALL_NEW, 80)]) == {SMALL_OLD: BELOW, SMALL_NEW: FROM}
    # one kernel for every device: no band; a lone entry from sm_80 also serves the older devices
    assert kernel_bands([_entry(SMALL_OLD, 75), _entry(SMALL_OLD, 80)]) == {}
    assert kernel_bands([_entry(SMALL_NEW, 80)]) == {}


def test_an_entry_that_sends_its_shape_to_the_general_kernel_runs_no_warp_kernel_but_may_run_a_small_one():
    # a warp kernel named by an sm_75 entry that prefers the general kernel never runs there
    assert kernel_bands([_entry(WARP, 75, prefer_general=True), _entry(WARP, 80)]) == {WARP: FROM}
    # a small kernel there runs in a build without the wmma family
    assert kernel_bands([_entry(SMALL_OLD, 75, prefer_general=True), _entry(SMALL_NEW, 80)]) == \
        {SMALL_OLD: BELOW, SMALL_NEW: FROM}


def test_rows_for_one_device_or_launch_size_are_shapes_of_their_own():
    entries = [_entry(SMALL_OLD, 75), _entry(SMALL_NEW, 80), _entry(SMALL_NEW, 90, device="NVIDIA H200")]
    assert kernel_bands(entries) == {SMALL_OLD: BELOW}


def test_builds_on():
    assert builds_on(None, 75) and builds_on(None, 90)
    assert builds_on(BELOW, 75) and not builds_on(BELOW, 80)
    assert builds_on(FROM, 90) and not builds_on(FROM, 75)


def test_the_default_set_leaves_the_old_small_h_kernels_out_of_sm_80_builds_and_warp_kernels_out_of_sm_75(root):
    manifest = json.loads((root / "generated" / "manifest.json").read_text())
    bands = kernel_bands(manifest["dispatch"])
    assert {name.split("_")[0] for name, band in bands.items() if band == FROM} == {"wmmawarp"}
    assert {name.split("_")[0] for name, band in bands.items() if band == BELOW} == {"small"}
    cmake = (root / "generated" / "CMakeLists.txt").read_text()
    dispatch = (root / "generated" / "src" / "gemmgen_dispatch.cu").read_text()
    for name, band in bands.items():
        assert f"{name}.cu" in cmake
        macro = "GEMMGEN_BUILT_BELOW_80" if band == BELOW else "GEMMGEN_BUILT_FROM_80"
        assert f"&& {macro}\nextern \"C\" int {name}_strided(" in dispatch


@pytest.mark.slow
def test_a_build_for_one_side_compiles_and_loads_without_the_other_sides_kernels(tmp_path):
    from gemmgen.harness.core.api import GemmgenLibrary
    from gemmgen.harness.core.build import UNITY_SOURCES, build_library

    gen = tmp_path / "gen"
    out = CliRunner().invoke(main, ["generate", "--out", str(gen), "--arch", "sm_75,sm_90", "--precisions", "h",
                                    "--sizes", "13", "--tallskinny-n", "2", "--cpu-isa", "generic"])
    assert out.exit_code == 0, out.output
    bands = kernel_bands(json.loads((gen / "manifest.json").read_text())["dispatch"])
    warp = [name for name, band in bands.items() if band == FROM]
    assert warp
    built = build_library(gen, tmp_path / "b75", ("sm_75",), 2, unity=UNITY_SOURCES)
    assert built.resources and not any(r.source.startswith("src/wmmawarp") or "wmmawarp" in r.source
                                       for r in built.resources)
    lib = GemmgenLibrary(built.library)   # every symbol the dispatch names was built
    assert lib.strided("h", "X", "N", 13, 13, 13, 1.0, 8, 13, 169, 8, 13, 169, 0.0, 8, 13, 169, 3) == -1
