"""Every architecture CUDA 13 targets is known, with the limits of NVIDIA's table of technical
specifications per compute capability."""
from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from click.testing import CliRunner

from generator import manifest as manifest_module
from generator import wmma
from generator.arch import ARCHS, DEFAULT_ARCHS, parse_archs
from generator.cli import main
from harness.build import gencode_flags

ALL_ARCHS = ("sm_75", "sm_80", "sm_86", "sm_87", "sm_88", "sm_89", "sm_90", "sm_100", "sm_103", "sm_110",
             "sm_120", "sm_121")


def test_every_cuda13_architecture_is_known_in_order():
    assert parse_archs(",".join(reversed(ALL_ARCHS))) == ALL_ARCHS
    assert tuple(ARCHS) == ALL_ARCHS
    assert DEFAULT_ARCHS == ("sm_75", "sm_80", "sm_90")   # the committed generated/ is made for these


@pytest.mark.parametrize("arch, smem_per_sm_kb", [
    ("sm_75", 64), ("sm_80", 164), ("sm_86", 100), ("sm_87", 164), ("sm_88", 100), ("sm_89", 100),
    ("sm_90", 228), ("sm_100", 228), ("sm_103", 228), ("sm_110", 228), ("sm_120", 100), ("sm_121", 100),
])
def test_limits(arch, smem_per_sm_kb):
    a = ARCHS[arch]
    assert a.smem_per_sm == smem_per_sm_kb * 1024
    assert (a.static_smem_per_block, a.max_threads_per_block, a.regs_per_thread) == (48 * 1024, 1024, 255)


def test_generate_for_new_architectures_only(tmp_path):
    out = tmp_path / "gen"
    result = CliRunner().invoke(main, ["generate", "--out", str(out), "--arch", "sm_100,sm_120", "--precisions", "h,d",
                                       "--sizes", "4", "--tallskinny-n", "4", "--cpu-isa", "generic"])
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["archs"] == ["sm_100", "sm_120"]
    assert {e["from_cc"] for e in manifest["dispatch"]} <= {100, 120}
    assert 'set(CMAKE_CUDA_ARCHITECTURES "100;120")' in (out / "CMakeLists.txt").read_text()
    assert not (out / wmma.WGMMA_HC_SOURCE).exists()   # the hc wgmma source is sm_90a's alone


def test_list_says_which_table_serves_each_architecture():
    result = CliRunner().invoke(main, ["list", "--arch", "sm_90,sm_100,sm_120", "--precisions", "h,d", "--sizes", "4"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    summary = {line.split(":")[0][2:]: line for line in lines if line.startswith("# sm_")}
    assert "small, wmma, tallskinny: its own table, tuned on" in summary["sm_90"]
    assert "sm_90's table (no sm_100 table)" in summary["sm_100"] and "refused" not in summary["sm_100"]
    # sm_120's 99 KB per block refuse the tuned block kernels of the largest sizes: the note says what serves
    assert "sm_90's table (no sm_120 table)" in summary["sm_120"] and "refused on sm_120's limits" in summary["sm_120"]
    assert any(line.startswith("note: sm_120 wmma row h square 128 refused") and "serves" in line for line in lines)


def test_without_any_table_the_heuristic_serves(monkeypatch):
    monkeypatch.setattr(manifest_module, "load_table", lambda arch: {})
    m = manifest_module.build_manifest(manifest_module.Selection.parse("sm_110", "d,h", "4", "", "4"))
    assert m.table_summary() == ["sm_110: small, wmma, tallskinny: the heuristic (no tuned table)"]
    assert {e.source for e in m.dispatch} == {"heuristic"} and {r.source for r in m.wmma_ranges} == {"heuristic"}


def test_refused_rows_fall_back_with_a_note():
    """A borrowed row whose block kernel does not fit the architecture's shared memory takes the row's
    wmma tuple; where that does not fit either, the heuristic's tuple for the row's size."""
    big_ring = "wmma_h_tc16x16x16_blk64x64x64_dim16x8_w4_f16_s6"   # 118,784 bytes: sm_80 and sm_90, not sm_120
    fits = "wmma_h_tc16x16x16_blk64x64x32_dim16x8_w4_f16_s3"
    block = "wmmablock_h_blk128x128x64_w2x4_s3_f16_b1"             # 147,456 bytes
    rows = {("square", 64): {"block": block, "wmma": fits}, ("square", 128): {"block": block, "wmma": big_ring}}
    notes: list[str] = []
    ranges = wmma.build_ranges("h", "sm_120", rows, "tuned", notes)
    assert [(r.lo, r.hi, r.kernel.name, r.source) for r in ranges if r.kind == "square"] == [
        (1, 64, fits, "tuned"), (65, 0, wmma.heuristic("h", 128).name, "heuristic")]
    assert len(notes) == 3 and notes[0].endswith("its wmma tuple serves") and notes[-1].endswith("the heuristic serves")
    notes.clear()
    on_sm100 = wmma.build_ranges("h", "sm_100", rows, "tuned", notes)
    assert {r.kernel.name for r in on_sm100 if r.kind == "square"} == {block} and not notes


def test_arch_specific_code_is_sm_90a_alone():
    """wgmma (a source's `90a` path) is built for sm_90 from compute_90a; sm_100 and later take the portable
    PTX, in the harness and in CMake alike."""
    flags = gencode_flags(ALL_ARCHS, (80, 90), (90,))
    assert flags[-4:] == ["-gencode", "arch=compute_90a,code=[sm_90a]", "-gencode",
                          "arch=compute_100,code=[sm_100,sm_103,sm_110,sm_120,sm_121]"]
    assert "90a" not in " ".join(gencode_flags(("sm_100", "sm_120"), (80, 90), (90,)))


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake not installed")
def test_cmake_maps_only_90_to_90a(tmp_path):
    out = tmp_path / "gen"
    result = CliRunner().invoke(main, ["generate", "--out", str(out), "--arch", "sm_90", "--precisions", "h",
                                       "--sizes", "4", "--tallskinny-n", "", "--cpu-isa", "generic"])
    assert result.exit_code == 0, result.output
    transform = next(line.strip() for line in (out / "CMakeLists.txt").read_text().splitlines()
                     if "list(TRANSFORM GEMMGEN_SM90A_ARCHITECTURES" in line)
    script = tmp_path / "map.cmake"
    script.write_text('set(GEMMGEN_SM90A_ARCHITECTURES "75;80;90;90-real;90-virtual;100;103;110;120;121")\n'
                      f"{transform}\nmessage(\"${{GEMMGEN_SM90A_ARCHITECTURES}}\")\n")
    proc = subprocess.run(["cmake", "-P", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == "75;80;90a;90a-real;90a-virtual;100;103;110;120;121"
