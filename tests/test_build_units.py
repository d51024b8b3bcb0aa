"""How the harness builds an emitted set: PTX per code path, and unity translation units (both
pure Python here; the slow tests compile the default set this way)."""
from __future__ import annotations

import re
from pathlib import Path

from gemmgen.generator.arch import CP_ASYNC_MIN_CC, TENSOR_COPY_END_CC, TENSOR_COPY_MIN_CC
from gemmgen.generator.small import SmallSpec
from gemmgen.generator.tallskinny import Tsm2Spec
from gemmgen.generator.wmma import WmmaBlockSpec, WmmaSpec
from gemmgen.harness.core.build import arch_specific_paths, code_paths, gencode_flags, parse_ptxas_report
from gemmgen.harness.core.unity import unity_units

ROOT = Path(__file__).resolve().parent.parent


def test_one_ptx_per_code_path():
    archs = ("sm_75", "sm_80", "sm_90")
    assert gencode_flags(archs) == ["-gencode", "arch=compute_75,code=[sm_75,sm_80,sm_90]"]
    assert gencode_flags(archs, (80,)) == ["-gencode", "arch=compute_75,code=[sm_75]",
                                           "-gencode", "arch=compute_80,code=[sm_80,sm_90]"]
    assert gencode_flags(("sm_90",), (80,)) == ["-gencode", "arch=compute_90,code=[sm_90]"]
    # arch-specific code (wgmma, `90a` in a source's code paths): sm_90 alone from compute_90a PTX
    assert gencode_flags(archs, (80, 90), (90,)) == ["-gencode", "arch=compute_75,code=[sm_75]",
                                                     "-gencode", "arch=compute_80,code=[sm_80]",
                                                     "-gencode", "arch=compute_90a,code=[sm_90a]"]
    assert arch_specific_paths("// gemmgen-code-paths: 80 90a") == (90,)
    assert code_paths("// gemmgen-code-paths: 80 90a") == (80, 90)


def test_ptxas_report_keeps_arch_specific_targets():
    """ptxas names code built from compute_90a 'sm_90a'; its kernels' resources count like any other's
    (a spill there was dropped from the report before)."""
    report = "\n".join([
        "ptxas info    : Compiling entry function '_Z1fv' for 'sm_90a'",
        "ptxas info    : Function properties for _Z1fv",
        "    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads",
        "ptxas info    : Used 168 registers, used 1 barriers, 24 bytes smem",
        "ptxas info    : Compiling entry function '_Z1fv' for 'sm_100'",
        "ptxas info    : Function properties for _Z1fv",
        "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads",
        "ptxas info    : Used 12 registers, used 0 barriers",
    ])
    sm90a, sm100 = parse_ptxas_report("unit.cu", report)
    assert (sm90a.arch, sm90a.registers, sm90a.smem_bytes, sm90a.uses_local_memory) == ("sm_90a", 168, 24, True)
    assert (sm100.arch, sm100.registers, sm100.uses_local_memory) == ("sm_100", 12, False)


def test_templates_branch_only_where_sources_say_so():
    """Every `__CUDA_ARCH__ >= X` in the templates is the cp.async threshold or the tensor copy
    engine's, and exactly the sources that instantiate a cp.async ring (TSM2, wmma or small with a
    strided or a pointer-array ring, every warp and block wmma kernel, every TSMMA kernel) or the small family's fp64
    Tensor Core product (`mma`, sm_80+ as well) declare the first code path, and exactly the h wmma tuples with
    the whole-GEMM path or a cp.async ring (its beta = 0 kernel's register bound is below sm_90's), the h block kernels with the wgmma path and the hc wgmma source the second (the
    latter two as `90a`: sm_90a code), so their sm_80/sm_90 SASS is built from PTX of that level; the whole-GEMM
    path's sources also name where it ends (sm_120: its kernel is empty from there on)."""
    thresholds = {int(x) for t in (ROOT / "gemmgen" / "templates").rglob("*.j2")
                  for x in re.findall(r"__CUDA_ARCH__\s*>=\s*(\d+)", t.read_text())}
    assert thresholds == {CP_ASYNC_MIN_CC * 10, TENSOR_COPY_MIN_CC * 10}
    # the upper ends: the whole-GEMM path stops before sm_120 (its sources name 120 as a code path), and the h
    # cp.async ring's beta = 0 kernel takes a register bound below sm_90 (its sources name 90 as a code path)
    ends = {int(x) for t in (ROOT / "gemmgen" / "templates").rglob("*.j2") for x in re.findall(r"__CUDA_ARCH__\s*<\s*(\d+)", t.read_text())}
    assert ends == {TENSOR_COPY_MIN_CC * 10, TENSOR_COPY_END_CC * 10}
    sources = sorted((ROOT / "generated" / "src").rglob("*.cu"))
    assert sources
    for source in sources:
        family = source.parent.parent.name
        ring = ((family == "tsm2" and Tsm2Spec.parse(source.stem).stages > 0)
                or (family == "wmma" and source.stem.startswith("wmma_") and WmmaSpec.parse(source.stem).stages > 0)
                or (family == "small" and (SmallSpec.parse(source.stem).stages > 0
                                           or SmallSpec.parse(source.stem).array_stages > 0
                                           or SmallSpec.parse(source.stem).mma))
                or family in ("wmmawarp", "wmmablock", "tsmma"))
        whole = family == "wmma" and source.stem.startswith("wmma_") and WmmaSpec.parse(source.stem).whole_path
        h_ring = family == "wmma" and source.stem.startswith("wmma_h_") and WmmaSpec.parse(source.stem).stages > 0
        # the block kernels' wgmma path, and the hc wgmma source the dispatch tries first
        wgmma = ((family == "wmmablock" and WmmaBlockSpec.parse(source.stem).wgmma_path)
                 or source.parent.name == "wmmahopper")
        expected = (((CP_ASYNC_MIN_CC,) if ring else ()) + ((TENSOR_COPY_MIN_CC,) if whole or wgmma or h_ring else ())
                    + ((TENSOR_COPY_END_CC,) if whole else ()))
        assert code_paths(source.read_text()) == expected, source.name
        assert arch_specific_paths(source.read_text()) == ((TENSOR_COPY_MIN_CC,) if wgmma else ()), source.name


def test_unity_units_group_chunk_and_keep_loners(tmp_path):
    sources = [tmp_path / f"{family}_{i}.cu" for family in ("a", "b") for i in range(5)] + [tmp_path / "alone.cu"]
    for s in sources:
        s.write_text("// x\n")

    def group(s: Path):
        return None if s.stem == "alone" else s.stem.split("_")[0]

    units = unity_units(sources, group, tmp_path / "units", 2, ".cu")
    assert units[tmp_path / "alone.cu"] == ()
    grouped = {u: m for u, m in units.items() if m}
    assert sorted(len(m) for m in grouped.values()) == [1, 1, 2, 2, 2, 2]
    assert sorted(s for m in grouped.values() for s in m) == sorted(sources[:-1])
    for unit, members in grouped.items():
        assert unit.read_text() == "".join(f'#include "{m}"\n' for m in members)
        assert all(group(m) == group(members[0]) for m in members)
    # an unchanged unit is not rewritten (its object stays cached by mtime-free content hashes,
    # and build tools that look at mtimes see nothing new)
    before = {u: u.stat().st_mtime_ns for u in grouped}
    unity_units(sources, group, tmp_path / "units", 2, ".cu")
    assert {u: u.stat().st_mtime_ns for u in grouped} == before


def test_object_cache_key_follows_content_not_location(tmp_path):
    """A build folder carried to another checkout (or to the GPU machine) is reused when nothing
    but the paths differ; a header, a member or the toolkit changing rebuilds."""
    from gemmgen.harness.core.build import object_key

    def checkout(root: Path, header: str = "// h\n") -> tuple[Path, list[Path], tuple[Path, ...]]:
        (root / "include").mkdir(parents=True)
        (root / "include" / "gemmgen.h").write_text(header)
        members = []
        (root / "include" / "unused.cuh").write_text(f"// {root.name}\n")   # included by nothing
        for name in ("a.cu", "b.cu"):
            (root / name).write_text(f'#include "gemmgen.h"\n// {name}\n')
            members.append(root / name)
        unit = root / "unit.cu"
        unit.write_text("".join(f'#include "{m}"\n' for m in members))   # absolute paths
        return unit, [root / "include"], tuple(members)

    flags = ["-O3", "-gencode", "arch=compute_75,code=[sm_75]"]
    one = checkout(tmp_path / "one")
    key = object_key("nvcc 13.0", flags, one[0], one[1], one[2])
    two = checkout(tmp_path / "two")
    assert object_key("nvcc 13.0", flags, two[0], two[1], two[2]) == key
    assert object_key("nvcc 12.8", flags, one[0], one[1], one[2]) != key
    assert object_key("nvcc 13.0", flags[:1], one[0], one[1], one[2]) != key
    assert object_key("nvcc 13.0", flags, one[0], one[1], one[2][::-1]) != key
    three = checkout(tmp_path / "three", header="// h changed\n")
    assert object_key("nvcc 13.0", flags, three[0], three[1], three[2]) != key
    # through another header too; a header nothing includes changes nothing (the "unused.cuh" above)
    four = checkout(tmp_path / "four", header='#include "deep.cuh"\n')
    (tmp_path / "four" / "include" / "deep.cuh").write_text("// 1\n")
    before = object_key("nvcc 13.0", flags, four[0], four[1], four[2])
    (tmp_path / "four" / "include" / "deep.cuh").write_text("// 2\n")
    assert object_key("nvcc 13.0", flags, four[0], four[1], four[2]) != before


def test_ptxas_reports_of_arch_specific_code_count():
    """sm_90a builds (the wgmma kernels, from compute_90a) are kernel builds like the others: resources,
    local-memory check and count included."""
    report = "\n".join([
        "ptxas info    : Compiling entry function '_Z1fv' for 'sm_90a'",
        "ptxas info    : Function properties for _Z1fv",
        "    0 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads",
        "ptxas info    : Used 168 registers, used 1 barriers, 1024 bytes smem, 400 bytes cmem[0]",
        "ptxas info    : Compiling entry function '_Z1gv' for 'sm_90'",
        "ptxas info    : Function properties for _Z1gv",
        "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads",
        "ptxas info    : Used 32 registers, used 0 barriers, 400 bytes cmem[0]",
    ])
    resources = parse_ptxas_report("unit.cu", report)
    assert [(r.function, r.arch, r.registers) for r in resources] == [("_Z1fv", "sm_90a", 168), ("_Z1gv", "sm_90", 32)]
    assert resources[0].uses_local_memory and not resources[1].uses_local_memory


def test_two_writers_of_one_build_folder_share_its_objects(tmp_path):
    """Workers of `gemmgen tune --gpus` share one build folder: two compiles of one source at once both
    succeed, leave one whole object and no partial file, and a third finds it cached."""
    from concurrent.futures import ThreadPoolExecutor

    from gemmgen.harness.core.build import compile_object, write_if_changed
    from gemmgen.harness.core.toolchain import find_nvcc

    nvcc = find_nvcc()
    source = tmp_path / "k.cu"
    write_if_changed(source, "__global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }\n")
    obj = tmp_path / "build" / "k.o"
    with ThreadPoolExecutor(2) as pool:
        reports = list(pool.map(lambda _: compile_object(nvcc, source, obj, [], ("sm_75",)), range(2)))
    assert all("Compiling entry function" in r for r in reports)
    assert sorted(p.name for p in obj.parent.iterdir()) == ["k.o", "k.ptxas.txt", "k.sha256"]
    stamp = obj.with_suffix(".sha256").stat().st_mtime_ns
    assert compile_object(nvcc, source, obj, [], ("sm_75",)) in reports   # (the last writer's report)
    assert obj.with_suffix(".sha256").stat().st_mtime_ns == stamp   # cached: nothing written
    before = source.stat().st_mtime_ns
    write_if_changed(source, source.read_text())
    assert source.stat().st_mtime_ns == before


def test_check_without_a_gpu_compiles_the_newest_architecture_unless_all_are_asked(monkeypatch, tmp_path, capsys):
    import json

    from gemmgen.harness import check
    from gemmgen.harness.core.build import BuildResult

    (tmp_path / "manifest.json").write_text(json.dumps({"archs": ["sm_75", "sm_90", "sm_80"]}))
    asked = []
    monkeypatch.setattr(check, "gpu_available", lambda: False)
    monkeypatch.setattr(check, "build_set", lambda gen, build, archs, jobs: asked.append(archs) or BuildResult(None, []))
    assert check.build_for_check(tmp_path, tmp_path / "b", "", 1).archs == ("sm_90",)
    assert "compiling for sm_90, the newest architecture of the set (--arch all: sm_75,sm_90,sm_80)" in capsys.readouterr().out
    assert check.build_for_check(tmp_path, tmp_path / "b", "all", 1).archs == ("sm_75", "sm_90", "sm_80")
    assert check.build_for_check(tmp_path, tmp_path / "b", "sm_80", 1).archs == ("sm_80",)
    assert asked == [("sm_90",), ("sm_75", "sm_90", "sm_80"), ("sm_80",)]
    assert check.build_for_check(tmp_path, tmp_path / "b", "sm_7", 1) == 2   # a bad --arch: exit status 2


def test_a_library_rebuilt_at_the_same_path_is_loaded_anew(tmp_path):
    """core.build.load_library: a process that loaded a library (a tuning worker serving several runs)
    gets the rebuilt one, where dlopen would hand back the one it holds by that path."""
    import os
    import subprocess

    from gemmgen.harness.core.build import load_library

    library = tmp_path / "libanswer.so"

    def build(value: int, mtime_ns: int) -> None:
        source = tmp_path / "answer.c"
        source.write_text(f"int answer(void) {{ return {value}; }}\n")
        subprocess.run(["g++", "-x", "c", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
        os.utime(library, ns=(mtime_ns, mtime_ns))

    build(1, 10**18)
    assert load_library(library).answer() == 1
    build(2, 10**18 + 10**9)
    assert load_library(library).answer() == 2
    assert load_library(str(library)).answer() == 2   # (loaded once: the same handle)
