"""Every architecture CUDA 13 targets is known, with the limits of NVIDIA's table of technical
specifications per compute capability; what is generated for them takes only the code paths that exist
there, and a sample of every family and code path compiles for every one of them without local memory."""
from __future__ import annotations

import json
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from click.testing import CliRunner

from gemmgen.generator import manifest as manifest_module
from gemmgen.generator import small, wmma
from gemmgen.generator.arch import ARCHS, DEFAULT_ARCHS, code_path_tokens, parse_archs
from gemmgen.generator.families import parse_kernel
from gemmgen.cli import main
from gemmgen.generator.small import SmallSpec
from gemmgen.harness.core.build import STRICT_WARNINGS, compile_object, gencode_flags, parse_ptxas_report
from gemmgen.harness.core.toolchain import find_nvcc

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


def test_tallskinny_shared_memory_fits_every_architecture():
    """TSM2's specs are the same on every architecture: a ring group's opt-in shared memory must fit the
    smallest opt-in maximum (sm_75's 64 KB; from sm_80 on, a block may take all but 1 KB of the SM's)."""
    from gemmgen.generator import tallskinny

    optin = [a.smem_per_sm - (1024 if a.cc >= 80 else 0) for a in ARCHS.values()]
    assert tallskinny.RING_SMEM_LIMIT <= min(optin) and tallskinny.SMEM_LIMIT <= min(a.static_smem_per_block for a in ARCHS.values())


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
    assert "sm_90's table (no sm_120 table)" in summary["sm_120"] and "rows refused on sm_120" in summary["sm_120"]
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


def test_variants_with_local_memory_are_refused_where_ptxas_gave_it():
    """gemmgen/generator/tuning/local_memory.json names real variants and architectures; validation refuses a
    variant there alone, and the manifest falls back to the heuristic with a note."""
    from gemmgen.generator.spec import SpecError
    from gemmgen.generator.tuning import local_memory_archs

    table = local_memory_archs()
    assert table
    for name, archs in table.items():
        spec = parse_kernel(name)
        assert archs <= set(ARCHS) and spec.is_valid()
        for arch in ARCHS:
            if arch in archs:
                with pytest.raises(SpecError) as err:
                    spec.validate(arch)
                assert err.value.rule == "local memory"
    d23 = "small_d_m23n23k23_dim8x12_tba2_hoist_mma"
    assert table[d23] == {"sm_103"}
    m = manifest_module.build_manifest(manifest_module.Selection.parse("sm_100,sm_103", "d", "23", "", ""))
    assert [(e.cc, e.kernel.name, e.source.split(" (")[0]) for e in m.dispatch] == [
        (100, d23, "tuned on NVIDIA H100 80GB HBM3"), (103, small.heuristic("d", 23, 23, 23).name, "heuristic")]
    assert m.notes == [f"sm_103 table row for d 23x23x23 refused: local memory: ptxas gave {d23} local memory on "
                       "sm_103 (gemmgen/generator/tuning/local_memory.json); the heuristic serves"]


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


def sample_sources(generated: Path) -> dict[str, Path]:
    """One source of each family and code path of a set generated from --sizes 4,20 --precisions h,d
    (the cheapest of its kind to compile)."""
    src = generated / "src"

    def pick(folder: str, keep, cost=lambda p: p.stat().st_size) -> Path:
        found = sorted((p for p in (src / folder).glob("*.cu") if keep(p)), key=cost)
        assert found, f"no source of that kind under {folder}"
        return found[0]

    def small(p: Path) -> SmallSpec:
        return SmallSpec.parse(p.stem)

    def paths(p: Path) -> tuple[str, ...]:
        return code_path_tokens(p.read_text())

    return {
        "small": pick("small/d", lambda p: not (small(p).stages or small(p).array_stages or small(p).mma)),
        "small, cp.async ring (sm_80+)": pick("small/h", lambda p: small(p).stages > 0),
        "small, fp64 Tensor Cores (mma, where the tuned table chose it)": pick("small/d", lambda p: small(p).mma),
        "wmma, whole-GEMM path (tensor copies, sm_90 to sm_110)": pick("wmma/h", lambda p: "120" in paths(p)),
        "wmma block, sm_90a wgmma path": pick("wmmablock/h", lambda p: "90a" in paths(p)),
        "wmma warp": pick("wmmawarp/h", lambda p: True, lambda p: (lambda s: s.m * s.n * s.k)(wmma.WmmaWarpSpec.parse(p.stem))),
        "tsm2, cp.async ring": pick("tsm2/d", lambda p: True),
        "dispatch": src / "gemmgen_dispatch.cu",
    }


@pytest.mark.slow
def test_sample_compiles_for_every_architecture_without_local_memory(tmp_path):
    """Each sample source compiled once with a -gencode per code path (as gemmgen check builds: one PTX per
    path, SASS for every architecture on it), ptxas's spill and local-memory warnings on and every nvcc
    warning an error (as gemmgen check builds)."""
    generated = tmp_path / "gen"
    result = CliRunner().invoke(main, ["generate", "--out", str(generated), "--arch", ",".join(ALL_ARCHS),
                                       "--sizes", "4,20", "--precisions", "h,d", "--tallskinny-n", "4",
                                       "--cpu-isa", "generic"])
    assert result.exit_code == 0, result.output
    sources = sample_sources(generated)
    nvcc = find_nvcc()
    warn = ("-Xptxas", "-warn-spills", "-Xptxas", "-warn-lmem-usage", *STRICT_WARNINGS)

    def build(source: Path) -> str:
        return compile_object(nvcc, source, tmp_path / "obj" / f"{source.stem}.o",
                              [generated / "include", generated / "src"], ALL_ARCHS, warn, host_optimization="-O0")

    order = sorted(sources.values(), key=lambda p: -p.stat().st_size)
    with ThreadPoolExecutor(2) as pool:
        reports = dict(zip(order, pool.map(build, order)))
    resources = []
    for what, source in sources.items():
        report = reports[source]
        assert "warning" not in report.lower(), f"{what}: {source.name}:\n{report[-3000:]}"
        mine = parse_ptxas_report(source.name, report)
        assert {r.arch.rstrip("a") for r in mine} == set(ALL_ARCHS), what
        resources += mine
    offenders = [(r.source, r.arch, r.function[:80], r.stack_bytes, r.spill_stores) for r in resources
                 if r.uses_local_memory]
    assert not offenders
    # wgmma's image only where built from compute_90a: its static mbarriers mark it (runs_sm90a_image)
    wgmma_images = {r.arch for r in resources if "wgmma_block_kernel" in r.function and r.smem_bytes > 0}
    assert wgmma_images == {"sm_90a"}
    # the whole-GEMM kernel has a body from sm_90 to sm_110 and is empty on sm_120 and sm_121
    whole = {r.arch: r.registers for r in resources if "wmma_whole_kernel" in r.function}
    assert {a for a, regs in whole.items() if regs > 16} == {"sm_90", "sm_100", "sm_103", "sm_110"}


@pytest.mark.slow
def test_h_wmma_rings_compile_below_sm_90_without_local_memory(tmp_path):
    """The beta = 0 cp.async ring kernels of the committed set's h wmma tuples that ptxas had given 64
    registers and spills below sm_90 (4 warps: 64x64x32; 8 warps: 96x96x16), built for sm_80 and sm_89 as
    gemmgen check builds them."""
    generated = Path(__file__).resolve().parents[1] / "generated"
    names = ("wmma_h_tc16x16x16_blk64x64x32_dim16x8_w4_f16_s3", "wmma_h_tc16x16x16_blk96x96x16_dim16x16_w8_f16_s3")
    warn = ("-Xptxas", "-warn-spills", "-Xptxas", "-warn-lmem-usage")
    nvcc = find_nvcc()

    def build(name: str) -> list:
        source = generated / "src" / "wmma" / "h" / f"{name}.cu"
        report = compile_object(nvcc, source, tmp_path / f"{name}.o", [generated / "include", generated / "src"],
                                ("sm_80", "sm_89"), warn, host_optimization="-O0")
        assert "warning" not in report.lower(), report[-3000:]
        return parse_ptxas_report(source.name, report)

    with ThreadPoolExecutor(2) as pool:
        resources = [r for found in pool.map(build, names) for r in found]
    rings = [r for r in resources if "wmma_async_kernel" in r.function]
    assert {r.arch for r in rings} == {"sm_80", "sm_89"} and len(rings) == 2 * 2 * 8   # 4 layouts x 2 kernels
    assert not [(r.arch, r.function[:90]) for r in resources if r.uses_local_memory]
