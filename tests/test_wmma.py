"""The wmma family without a GPU: §5.8's rules, names, the sweep space, the tuned table's dispatch
ranges, and that the emitted kernels compile to Tensor Core instructions (cuobjdump on the SASS)."""
import json
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gemmgen.generator import wmma
from gemmgen.generator.emit import kernel_source
from gemmgen.generator.manifest import Selection, build_manifest
from gemmgen.generator.spec import SpecError

GOOD = wmma.WmmaSpec("h", 16, 16, 16, 32, 32, 32, 16, 8, 4)


@pytest.mark.parametrize("change, rule", [
    (dict(tc_m=8, tc_n=8), "tensor core shape"),
    (dict(blk_m=24), "TC divides BLK"),
    (dict(dim_x=12, dim_y=8, warps=3), "DIM divides BLK"),
    (dict(dim_x=4, dim_y=4, warps=1), "full warps"),
    (dict(warps=2), "warps match threads"),
    (dict(blk_m=16, blk_n=16, dim_x=16, dim_y=16, warps=8), "no idle warps"),
    (dict(acc="f64"), "accumulator"),
    (dict(precision="s"), "precision"),
    (dict(blk_m=128, blk_n=128, blk_k=64, dim_x=16, dim_y=2, warps=1), "registers"),
])
def test_rules_refuse_bad_tuples_naming_the_rule(change, rule):
    fields = {f: getattr(GOOD, f) for f in GOOD.__dataclass_fields__}
    fields.update(change)
    with pytest.raises(SpecError) as err:
        wmma.WmmaSpec(**fields).validate()
    assert err.value.rule == rule


def test_shared_memory_rule():
    spec = wmma.WmmaSpec("hc", 16, 16, 16, 128, 128, 64, 32, 8, 8, "f32")
    with pytest.raises(SpecError) as err:
        spec.validate("sm_90")
    assert err.value.rule in ("shared memory", "registers")


def test_names_round_trip():
    for spec in wmma.sweep_space("hc")[::97] + wmma.sweep_space("h")[::131]:
        assert wmma.WmmaSpec.parse(spec.name) == spec
    tiny = wmma.WmmaTinySpec("hc", 3, 5, 7, 2)
    assert wmma.parse_name(tiny.name) == tiny
    assert tiny.per_op == 3 and tiny.gemms_per_block == 6
    with pytest.raises(SpecError):
        wmma.WmmaSpec.parse("wmma_h_tc16x16x16_blk32x32x32_dim16x8_w4")   # accumulator missing
    with pytest.raises(SpecError):
        wmma.WmmaTinySpec("h", 17, 4, 4, 1).validate()


ASYNC = wmma.WmmaSpec("h", 16, 16, 16, 64, 64, 32, 16, 8, 4, "f16", 3)


@pytest.mark.parametrize("change, rule", [
    (dict(stages=1), "stages"),
    (dict(stages=wmma.MAX_STAGES + 1), "stages"),
    (dict(precision="hc"), "async precision"),
    (dict(tc_m=32, tc_n=8), "async tensor core shape"),
    (dict(blk_m=128, blk_n=128, blk_k=64, dim_x=16, dim_y=16, warps=8, stages=8), "async shared memory"),
])
def test_async_rules_refuse_bad_tuples_naming_the_rule(change, rule):
    fields = {f: getattr(ASYNC, f) for f in ASYNC.__dataclass_fields__}
    fields.update(change)
    with pytest.raises(SpecError) as err:
        wmma.WmmaSpec(**fields).validate("sm_80")
    assert err.value.rule == rule


def test_async_names_round_trip_and_sources_carry_the_code_path():
    from gemmgen.generator.arch import CP_ASYNC_MIN_CC, TENSOR_COPY_END_CC, TENSOR_COPY_MIN_CC
    from gemmgen.generator.emit import kernel_source
    from gemmgen.harness.core.build import code_paths

    assert ASYNC.name.endswith("_f16_s3") and wmma.WmmaSpec.parse(ASYNC.name) == ASYNC
    space = wmma.async_sweep_space("h")
    assert space and all(s.stages and s.is_valid("sm_90") and s.is_valid() for s in space)
    assert not wmma.async_sweep_space("hc") and not wmma.async_sweep_space("h", "sm_75")
    # the ring's source has an sm_80 code path (and the register kernel below it), an h tuple with fp16
    # sums an sm_90 one too (the whole-GEMM path, which ends at sm_120); others have none
    assert code_paths(kernel_source(ASYNC, "test")) == (CP_ASYNC_MIN_CC, TENSOR_COPY_MIN_CC, TENSOR_COPY_END_CC)
    assert code_paths(kernel_source(GOOD, "test")) == ()


def test_sweep_space_is_large_and_valid():
    space = wmma.sweep_space("h")
    assert len(space) > 1000
    assert all(s.is_valid("sm_90") for s in space)
    # the fragment pointers stay 32-byte aligned for every shape: rows of BLK_K + SKEW halves
    assert all((s.smem_ld * 2) % 16 == 0 and (s.smem_ld // 8) % 2 == 1 for s in space)
    assert any(s.stages for s in space) and all(not s.stages for s in wmma.sweep_space("hc"))


def test_ranges_cover_every_size_without_gaps():
    rows = {16: GOOD, 40: wmma.heuristic("h", 64), 64: wmma.heuristic("h", 64)}
    ranges = wmma.ranges_from_rows("h", "square", 90, rows, "t")
    assert [(r.lo, r.hi) for r in ranges] == [(1, 16), (17, 0)]
    covered = [next(r for r in ranges if r.lo <= s and (r.hi == 0 or s <= r.hi)) for s in range(1, 300)]
    assert len(covered) == 299


def test_default_manifest_dispatches_h_and_hc_to_every_family():
    m = build_manifest(Selection())
    families = {e.kernel.family for e in m.dispatch if e.precision in ("h", "hc")}
    # On the H100 the small family beat the tiny kernel at every tuned point (rank-16 updates since
    # 2026-11-23), so the table picks no tiny kernel there; the dispatch takes one where a row does.
    assert "small" in families
    assert any(e.prefer_general for e in m.dispatch)
    assert {r.precision for r in m.wmma_ranges} == {"h", "hc"}
    for prec in ("h", "hc"):
        for kind in wmma.KINDS:
            mine = sorted((r for r in m.wmma_ranges if r.precision == prec and r.kind == kind and r.cc == 75),
                          key=lambda r: r.lo)
            assert mine[0].lo == 1 and mine[-1].hi == 0
            assert all(a.hi + 1 == b.lo for a, b in zip(mine, mine[1:]))
    # no wmma when neither h nor hc is asked for
    assert not build_manifest(Selection(precisions=("d",))).wmma_ranges


def test_rank_16_updates_the_small_family_wins_join_the_exact_shape_table():
    rows = {("rank", 4): {"choice": "small"}, ("rank", 20): {"choice": "wmma"},
            ("rank", 2): {"choice": "wmmatiny"}, ("square", 3): {"choice": "small"}}
    assert wmma.fixed_shapes(rows) == {(4, 4, 16), (2, 2, 16)}   # square sizes come from --sizes
    # the sm_90 table: h rank-16 updates up to m = 15 run a tuned small kernel of that very shape
    m = build_manifest(Selection())
    rank = {e.m: e for e in m.dispatch if e.precision == "h" and e.k == 16 and e.m == e.n and e.m != 16
            and e.cc == 75 and not e.prefer_general}   # (from sm_80 the warp kernel serves m = 13-15,
    # test_warp_kernel_serves_from_sm_80_and_the_rows_fallback_before)
    assert set(range(1, 16)) <= set(rank)
    for size, entry in rank.items():
        assert entry.kernel.family == "small" and entry.kernel.shape == (size, size, 16)
        assert not entry.prefer_general and entry.source.startswith("tuned")


def test_the_cut_off_sweep_times_the_small_kernels_the_table_names():
    """`tune wmma` (and --small-only) times, next to the wmma tuples, the small-family kernel the
    dispatch runs: the table row's whole tuple, staging and ring included."""
    from gemmgen.generator.tuning import load_table
    from gemmgen.harness.wmma.tune import _small_specs

    rows = {(r["precision"], r["m"]): r for r in load_table("sm_90")["small"]
            if r["precision"] in ("h", "hc") and r["m"] == r["n"] == r["k"]}
    specs = _small_specs("sm_90")
    assert any(r.get("stages") for r in rows.values()) and any(r.get("hoist") for r in rows.values())
    for (prec, size), row in rows.items():
        spec = specs[(prec, "square", size)]
        assert (spec.hoist, spec.stages) == (row.get("hoist", False), row.get("stages", 0))
    # rank-16 updates (m = n, k = 16): the small family's tuned shapes are timed too
    ranks = {(r["precision"], r["m"]) for r in load_table("sm_90")["small"]
             if r["precision"] in ("h", "hc") and r["m"] == r["n"] != r["k"] == 16}
    assert ranks and all(specs[(prec, "rank", size)].shape == (size, size, 16) for prec, size in ranks)


def test_only_h_tuples_with_fp16_sums_carry_the_whole_gemm_path():
    """The sm_90 whole-GEMM path sums in fp16, so only tuples that do so anyway may take it."""
    h16 = wmma.WmmaSpec("h", 16, 16, 16, 32, 32, 32, 16, 8, 4, "f16").validate()
    hc16 = wmma.WmmaSpec("hc", 16, 16, 16, 32, 32, 32, 16, 8, 4, "f16").validate()
    assert h16.whole_path and "launch_wmma_whole<" in kernel_source(h16, "test")
    for spec in (GOOD, hc16):
        assert not spec.whole_path and "launch_wmma_whole<" not in kernel_source(spec, "test")


def test_generated_wmma_kernels_use_tensor_cores(tmp_path):
    """Compile one emitted general kernel, one tiny, one warp, two block kernels and the hc wgmma source for
    sm_90 and read the SASS."""
    from gemmgen.harness.core.build import arch_specific_paths, code_paths, gencode_flags
    from gemmgen.harness.core.toolchain import ToolchainError, find_cuobjdump, find_nvcc, nvcc_environment

    try:
        nvcc, cuobjdump = find_nvcc(), find_cuobjdump()
    except ToolchainError as err:
        pytest.fail(str(err))
    generated = Path(__file__).resolve().parent.parent / "generated"
    listing = json.loads((generated / "manifest.json").read_text())
    general = listing["wmma"]["kernels"][0]["name"]
    # An h tuple with fp16 sums also holds the whole-GEMM kernel: tensor copies in, tensor copies out.
    whole = next(k["name"] for k in listing["wmma"]["kernels"]
                 if getattr(wmma.parse_name(k["name"]), "whole_path", False))
    # The tuned set has no tiny kernel (the small family won there): emit one beside the set.
    tiny = wmma.WmmaTinySpec.parse("wmmatiny_h_m4n4k16_w1").validate()
    tiny_source = tmp_path / "src" / "wmmatiny" / "h" / f"{tiny.name}.cu"
    tiny_source.parent.mkdir(parents=True)
    tiny_source.write_text(kernel_source(tiny, "test"))
    # and a warp kernel and an hc block kernel (raw mma.sync rather than the WMMA API)
    warp = next(k["name"] for k in listing["kernels"] if k["family"] == "wmmawarp")
    block = next(k["name"] for k in listing["wmma"]["kernels"] if k["name"].startswith("wmmablock_hc_"))
    # an h block kernel also holds the sm_90a wgmma kernel, fed by tensor copies
    hopper = next(k["name"] for k in listing["wmma"]["kernels"]
                  if getattr(wmma.parse_name(k["name"]), "wgmma_path", False))
    hopper_hc = "gemmgen_wgmma_hc"   # the hc wgmma source the dispatch tries first (not a table kernel)

    def sass_of(name: str) -> str:
        family = name.split("_")[0]
        source = generated / "src" / family / name.split("_")[1] / f"{name}.cu"
        if name == tiny.name:
            source = tiny_source
        if name == hopper_hc:
            source = generated / wmma.WGMMA_HC_SOURCE
        obj = tmp_path / f"{name}.o"
        text = source.read_text()   # as the harness builds it: sm_90a code where the source says `90a`
        arch = gencode_flags(("sm_90",), code_paths(text), arch_specific_paths(text))
        # (-O0: nvcc's -O is the host code's; the device code is compiled at full optimization either way)
        subprocess.run([str(nvcc), "-std=c++14", "-O0", *arch, "-I", str(generated / "include"),
                        "-I", str(generated / "src"), "-c", str(source), "-o", str(obj)],
                       check=True, capture_output=True, env=nvcc_environment(nvcc))
        # cuobjdump runs nvdisasm, which the wheels install beside it
        return subprocess.run([str(cuobjdump), "-sass", str(obj)], check=True, capture_output=True,
                              text=True, env=nvcc_environment(cuobjdump)).stdout

    names = list(dict.fromkeys((general, whole, tiny.name, warp, block, hopper, hopper_hc)))
    with ThreadPoolExecutor(2) as pool:
        listings = dict(zip(names, pool.map(sass_of, names)))
    for name, sass in listings.items():
        if name != hopper_hc:   # (wgmma alone: HGMMA)
            assert "HMMA" in sass, f"{name}: no Tensor Core (HMMA) instruction in the SASS"
        if name == whole:
            assert "UTMALDG" in sass and "UTMASTG" in sass, f"{name}: no tensor copy in the SASS"
        if name in (hopper, hopper_hc):
            assert "HGMMA" in sass and "UTMALDG" in sass, f"{name}: no wgmma (HGMMA) or tensor copy in the SASS"
        if name == hopper_hc:   # its C leaves through the copy engine too
            assert "UTMASTG" in sass, f"{name}: no tensor store in the SASS"
            # every block width in two instances: beta = 0, and beta != 0 (READ_C: old C by the copy engine)
            kernels = re.findall(r"Function : (\S*wgmma_hc_kernel\S*)", sass)
            read_c = [k for k in kernels if "Lb1E" in k]
            assert kernels and len(read_c) * 2 == len(kernels), kernels


WARP = wmma.WmmaWarpSpec("h", 33, 33, 16, 8, 3, "f16")


@pytest.mark.parametrize("change, rule", [
    (dict(precision="s"), "precision"),
    (dict(m=wmma.WARP_MAX_SIZE + 1), "size"),
    # hc's real product is twice as wide: 48x48 with fp32 sums takes 144 accumulator registers
    (dict(precision="hc", m=48, n=48, k=16, acc="f32"), "accumulator registers"),
    (dict(k=0), "size"),
    (dict(warps=9), "warps"),
    (dict(stages=1), "stages"),
    (dict(stages=5), "stages"),
    (dict(acc="f64"), "accumulator"),
    (dict(m=64, n=64, k=64, stages=3), "shared memory"),   # 3 stages of 24 KB: over sm_75's 63 KB
])
def test_warp_rules_refuse_bad_tuples_naming_the_rule(change, rule):
    fields = {f: getattr(WARP, f) for f in WARP.__dataclass_fields__}
    fields.update(change)
    with pytest.raises(SpecError) as err:
        wmma.WmmaWarpSpec(**fields).validate()
    assert err.value.rule == rule


def test_warp_names_round_trip_and_sources_carry_the_code_path():
    for spec in wmma.warp_candidates("h", 33, 33, 16) + wmma.warp_candidates("h", 9, 9, 9):
        assert wmma.parse_name(spec.name) == spec
        assert "gemmgen-code-paths: 80" in kernel_source(spec, "test")
    assert len(wmma.warp_candidates("h", 33, 33, 16)) == len(wmma.SWEEP_WARP)
    # hc: fp16 sums only, from size 13 (below it the small family is at the floor)
    hc = wmma.warp_candidates("hc", 33, 33, 16)
    assert hc and {s.acc for s in hc} == set(wmma.WARP_ACC_HC)
    assert all(wmma.parse_name(s.name) == s for s in hc)
    assert wmma.warp_candidates("hc", 12, 12, 12) == []
    assert wmma.WmmaWarpSpec("hc", 33, 33, 16, 8, 2, "f16").stage_bytes == \
        2 * 8 * ((2 * 33 * 16 + 14) // 8 * 2 + (2 * 33 * 33 + 14) // 8)
    # 64x64x64 with 3 stages does not fit sm_75: the sweep leaves those candidates out
    assert all(s.stages == 2 for s in wmma.warp_candidates("h", 64, 64, 64))
    with pytest.raises(SpecError) as err:
        wmma.parse_name("wmmawarp_h_m33n33k16_w8_s3")   # accumulator missing
    assert err.value.rule == "name"
    assert WARP.stage_bytes == 2 * 8 * ((33 * 16 + 14) // 8 * 2 + (33 * 33 + 14) // 8)


def test_warp_kernel_serves_from_sm_80_and_the_rows_fallback_before():
    """The warp kernel needs cp.async and mma.sync.m16n8k16: from sm_80 the table's choice serves,
    before it the row's fastest other kernel (a small kernel, or the general one, whose entry then
    names the warp kernel so no small kernel is compiled that never runs)."""
    m = build_manifest(Selection())
    entries = {}
    for e in m.dispatch:
        if e.precision == "h":
            entries.setdefault((e.m, e.n, e.k), []).append(e)
    # 33x33x16: only the general kernel was faster than it before sm_80
    old, new = entries[(33, 33, 16)]
    assert (old.cc, new.cc) == (75, 80)
    assert old.prefer_general and old.kernel == new.kernel and new.kernel.family == "wmmawarp"
    assert not new.prefer_general and new.source.startswith("tuned") and old.source.startswith("tuned")
    # 13x13x13: the small kernel before sm_80
    old, new = entries[(13, 13, 13)]
    assert old.kernel.family == "small" and not old.prefer_general
    assert new.kernel.family == "wmmawarp" and new.kernel.shape == (13, 13, 13)
    # the fixed shapes the warp kernel won join the exact-shape table, squares and rank-16 updates
    assert wmma.fixed_shapes({("square", 40): {"choice": "wmmawarp"}, ("rank", 50): {"choice": "wmmawarp"}}) \
        == {(40, 40, 40), (50, 50, 16)}


def test_warp_choice_without_a_fallback_falls_back_to_the_general_kernel():
    from gemmgen.generator.manifest import _shape_choice

    row = {"choice": "wmmawarp", "kernel": WARP.name, "wmma": GOOD.name}
    notes = []
    assert _shape_choice({("rank", 33): row}, 33, 33, 16, "sm_90", notes) is row
    old = _shape_choice({("rank", 33): row}, 33, 33, 16, "sm_75", notes)
    assert old["choice"] == "wmma" and old["warp_kernel"] == WARP.name and notes


BLOCK = wmma.WmmaBlockSpec("hc", 64, 64, 32, 2, 4, 3, "f16")


@pytest.mark.parametrize("change, rule", [
    (dict(precision="s"), "precision"),
    (dict(acc="f64"), "accumulator"),
    (dict(warps_m=0), "warps"),
    (dict(warps_m=4, warps_n=8), "warps"),
    (dict(blk_m=40), "warp tile rows"),
    (dict(blk_n=36), "warp tile columns"),   # hc: 72 real columns do not split into 4 × 16
    (dict(precision="h", blk_n=32), "warp tile columns"),   # h: 32 columns into 4 warps of 8
    (dict(blk_k=12), "k steps"),
    (dict(stages=1), "stages"),
    (dict(blk_m=128, blk_n=128, warps_m=1, warps_n=1, acc="f32"), "registers"),
    (dict(blk_m=128, blk_n=128, blk_k=64, warps_m=4, warps_n=4, stages=4), "shared memory"),
])
def test_block_rules_refuse_bad_tuples_naming_the_rule(change, rule):
    fields = {f: getattr(BLOCK, f) for f in BLOCK.__dataclass_fields__}
    fields.update(change)
    with pytest.raises(SpecError) as err:
        wmma.WmmaBlockSpec(**fields).validate()
    assert err.value.rule == rule


def test_block_kernels_need_sm_80():
    with pytest.raises(SpecError) as err:
        BLOCK.validate("sm_75")
    assert err.value.rule == "architecture"
    assert BLOCK.validate("sm_80") and BLOCK.validate("sm_90")


def test_block_names_round_trip_and_sources_carry_the_code_path():
    candidates = wmma.block_candidates("h") + wmma.block_candidates("hc")
    assert {s.precision for s in candidates} == {"h", "hc"}
    for spec in candidates:
        assert wmma.parse_name(spec.name) == spec
        source = kernel_source(spec, "test")
        assert "gemmgen-code-paths: 80" in source and "launch_wmma_block<" in source
        assert "launch_wmma_async<" not in source and "launch_wmma<" not in source
    with pytest.raises(SpecError) as err:
        wmma.parse_name("wmmablock_hc_blk64x64x32_w2x4_s3")   # accumulator missing
    assert err.value.rule == "name"
    # 2 bytes × (3 stages × (A and B: 64 lines of 64 + 8 halves) + 8 warps × 16 columns of 64 + 8 halves)
    assert BLOCK.smem_bytes == 2 * (3 * 2 * 64 * 72 + 8 * 16 * 72)
    assert BLOCK.acc_registers == 2 * 4 * 2   # a 32×16 complex tile: 2 × 4 m16n8 tiles of 2 registers


def test_block_kernel_serves_ranges_from_sm_80_and_the_general_tuple_before():
    rows = {("square", 64): {"kind": "square", "size": 64, "wmma": GOOD.name, "block": BLOCK.name},
            ("square", 128): {"kind": "square", "size": 128, "wmma": GOOD.name}}
    old = wmma.build_ranges("hc", "sm_75", rows, "tuned", [])
    new = wmma.build_ranges("hc", "sm_90", rows, "tuned", [])
    assert [(r.lo, r.hi, r.kernel) for r in old if r.kind == "square"] == [(1, 0, GOOD)]
    assert [(r.lo, r.hi, r.kernel) for r in new if r.kind == "square"] == [(1, 64, BLOCK), (65, 0, GOOD)]
    # the default set: some h and hc ranges run block kernels from sm_80, none before
    m = build_manifest(Selection())
    for prec in ("h", "hc"):
        ranges = [r for r in m.wmma_ranges if r.precision == prec]
        assert any(r.kernel.family == "wmmablock" and r.cc >= 80 for r in ranges)
        assert not any(r.kernel.family == "wmmablock" and r.cc < 80 for r in ranges)


def test_the_dispatch_passes_over_block_kernels_for_operands_off_4_byte_boundaries():
    """A block kernel copies in 16- or 4-byte cp.async units, and element by element where a stored
    column starts off a 4-byte boundary (h with an odd leading dimension); its dispatch entries say so,
    and the dispatch then takes the general tuple of the same sizes."""
    source = (Path(__file__).resolve().parent.parent / "generated" / "src" / "gemmgen_dispatch.cu").read_text()
    entries = re.findall(r'\{(\d+), (\d+), (\d+), (\d+), ([01]), "(wmma\w+)"', source)
    assert entries
    for *_, chunked, name in entries:
        assert chunked == ("1" if name.startswith("wmmablock_") else "0")
    assert "e->chunked && !words" in source
    assert "% 4 == 0" in source


def test_bench_wmma_run_of_one_precision_keeps_the_others_rows():
    from gemmgen.harness.core.bench_runs import keep_other_precisions
    from gemmgen.harness.wmma.bench import markdown

    def row(prec, size):
        return {"precision": prec, "kind": "square", "m": size, "n": size, "k": size, "batch": 1000,
                "data": "batch 1000", "tiny_row": False, "kernel": "k", "ours": {}, "cublas": {}}

    old = {"device": "H100", "arch": "sm_90", "command": "gemmgen bench wmma", "copy_bandwidth_gbs": 2800.0,
           "rows": [row("h", 8), row("hc", 8), row("hc", 16)]}
    new = {"device": "H100", "arch": "sm_90", "runs": {"h": {"command": "gemmgen bench wmma --precisions h",
                                                             "copy_bandwidth_gbs": 2850.0}},
           "rows": [row("h", 8), row("h", 16)]}
    merged = keep_other_precisions(new, old)
    assert [(r["precision"], r["m"]) for r in merged["rows"]] == [("h", 8), ("h", 16), ("hc", 8), ("hc", 16)]
    assert merged["runs"]["hc"] == {"command": "gemmgen bench wmma", "copy_bandwidth_gbs": 2800.0}
    assert merged["runs"]["h"]["copy_bandwidth_gbs"] == 2850.0
    text = markdown(merged)
    assert "h rows: `gemmgen bench wmma --precisions h`" in text and "hc rows: `gemmgen bench wmma`" in text
    # a file from another device is replaced whole
    assert keep_other_precisions(new, {**old, "device": "A100"}) == new


def test_a_build_refusal_gives_way_to_a_later_clean_build_but_other_refusals_stand():
    from gemmgen.harness.wmma.tune import refusals

    def row(name, status="ok", stage="fine", device="H100"):
        return {"name": name, "status": status, "stage": stage, "device": device}

    rows = [row("a", "local-memory", "build"), row("a"),                 # spilled, then built clean: back
            row("b"), row("b", "local-memory", "build"),                 # measured, then spilled: refused
            row("c", "local-memory", "build"),                           # still refused
            row("d", "wrong-answer", "check"), row("d"),                 # a wrong answer stands
            row("e", "local-memory", "verify"), row("e"),                # so does the verification's refusal
            row("f", "local-memory", "build", device="A100")]            # another device's rows do not count
    assert refusals(rows, "H100") == {"b", "c", "d", "e"}
    assert refusals(rows, "H100", builds=False) == {"d", "e"}


def test_warp_k_order_is_a_permutation_of_the_padded_k_for_every_stride():
    """A and B read k = warp_k(q, t, s) in lane t's slot q: for the product to be A·B every k of the
    padded K must be read exactly once over the slots and lanes."""
    for precision in wmma.PRECISIONS_WMMA:
        for k in range(1, wmma.WARP_MAX_SIZE + 1):
            slots = wmma.warp_k_slots(precision, k)
            padded = 4 * slots
            assert padded * (2 if precision == "hc" else 1) % 16 == 0 and padded >= k
            for stride in (s for s in range(1, slots + 1) if slots % s == 0):
                ks = sorted(wmma.warp_k(q, t, stride) for q in range(slots) for t in range(4))
                assert ks == list(range(padded)), (precision, k, stride)


def test_warp_k_stride_leaves_the_ptx_order_only_for_cheaper_reads():
    # h 63 'N' A: in PTX order the four lanes of a row group read halves 126 apart (4-way conflicts)
    assert wmma.warp_k_stride("h", 63, 63, 63, "N", "N") != 2
    assert wmma.warp_k_stride("hc", 31, 31, 31, "N", "N") != 1
    # h 55: a stride saving a few wavefronts for many partly-read slots loses (measured), so PTX order
    assert wmma.warp_k_stride("h", 55, 55, 55, "N", "N") == 2
    # 40 has no conflicts to remove: PTX order
    assert wmma.warp_k_stride("h", 40, 40, 40, "N", "N") == 2
    # h keeps a register's halves k, k + 1 (even strides): stride 1 cost h 13 occupancy (registers)
    assert all(wmma.warp_k_stride("h", s, s, s, a, b) % 2 == 0 for s in range(1, 65) for a in "NT" for b in "NT")
    spec = wmma.WmmaWarpSpec("h", 63, 63, 63, 4, 2, "f16")
    source = kernel_source(spec, "test")
    for ta, tb in (("N", "N"), ("N", "T"), ("T", "N"), ("T", "T")):
        assert f"'{ta}', '{tb}', {spec.k_stride(ta, tb)}>(" in source


def test_a_kernel_measured_again_counts_with_its_latest_time():
    """--warp-only / --block-only / --small-only time their kernels again after a template change;
    the table then compares each kernel's latest time, faster or slower than the old one."""
    from gemmgen.harness.wmma.tune import _best_by_point

    def row(name, time_us):
        return {"name": name, "status": "ok", "stage": "fine", "device": "H100", "precision": "h",
                "kind": "square", "size": 63, "time_us": time_us}

    rows = [row("warp", 40.0), row("general", 35.0), row("other", 50.0), row("warp", 30.0), row("other", 60.0)]
    best = _best_by_point(rows, "H100", "fine")[("h", "square", 63)]
    assert [(r["name"], r["time_us"]) for r in best] == [("warp", 30.0), ("general", 35.0), ("other", 60.0)]


def test_the_final_stage_far_past_l2_decides_between_a_warp_kernel_and_the_rest(tmp_path, monkeypatch):
    """Stage 2 (64 MB) has the warp kernel only 1.02x faster than the general tuple, under
    WARP_MIN_GAIN: the general tuple stays.  A `--final-only` run timed both with 256 MB and both
    betas; each kernel's worse fraction of the floor decides (the warp kernel: 0.80 against 0.70, though
    the general tuple is faster with beta = 0), and only with both betas of one run for both kernels."""
    from gemmgen.harness.wmma import tune as wmma_tune

    saved = {}
    monkeypatch.setattr(wmma_tune, "load_table", lambda arch: {})
    monkeypatch.setattr(wmma_tune, "save_table", lambda arch, table: saved.update(table) or tmp_path)
    general, warp = "wmma_h_tc16x16x16_blk32x32x32_dim8x16_w4_f16", "wmmawarp_h_m31n31k31_w8_s2_f16"

    def fine(name, family, time_us):
        return {"device": "H100", "stage": "fine", "status": "ok", "precision": "h", "kind": "square", "size": 31,
                "name": name, "family": family, "time_us": time_us, "floor_fraction": 0.8, "batch": 100}

    def final(name, beta, floor_fraction, run=1):
        return {"device": "H100", "stage": "final", "status": "ok", "precision": "h", "kind": "square", "size": 31,
                "name": name, "beta": beta, "floor_fraction": floor_fraction, "run": run}

    results = tmp_path / "results.jsonl"

    def table(rows):
        results.write_text("".join(json.dumps(r) + "\n" for r in rows))
        wmma_tune.write_tuning_table(results, "sm_90", "H100")
        return saved["wmma"][0]

    stage2 = [fine(general, "wmma", 102.0), fine(warp, "wmmawarp", 100.0)]
    assert table(stage2)["choice"] == "wmma"
    finals = [final(general, 0.0, 0.95), final(general, 1.0, 0.70), final(warp, 0.0, 0.90)]
    row = table(stage2 + finals + [final(warp, 1.0, 0.80)])
    assert row["choice"] == "wmmawarp" and row["fallback_kernel"] == general
    assert (row["final_warp_floor"], row["final_rest_floor"]) == (0.80, 0.70)
    # within WARP_MIN_GAIN of each other: the rest (one source fewer)
    assert table(stage2 + finals + [final(warp, 1.0, 0.72)])["choice"] == "wmma"
    # within WARP_MIN_GAIN, but only the warp kernel reaches WARP_BAR (0.80) with both betas: the warp kernel
    near_bar = [final(general, 0.0, 0.95), final(general, 1.0, 0.79), final(warp, 0.0, 0.90)]
    assert table(stage2 + near_bar + [final(warp, 1.0, 0.81)])["choice"] == "wmmawarp"
    assert table(stage2 + near_bar + [final(warp, 1.0, 0.795)])["choice"] == "wmma"
    # the warp kernel's beta = 1 timing from another run: stage 2 decides
    assert table(stage2 + finals + [final(warp, 1.0, 0.80, run=0)])["choice"] == "wmma"


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake missing")
def test_cmake_builds_the_sm90a_sources_from_compute_90a(tmp_path):
    """CMake (the vendoring path) builds the sources with wgmma (`gemmgen-code-paths: ... 90a`: the h block
    kernels that carry the wgmma path, the hc wgmma source) for sm_90 from compute_90a, as the harness does,
    and every other source from compute_90; sm_80 stays sm_80.  Read from CMake's compile commands."""
    from gemmgen.generator.arch import code_path_tokens
    from gemmgen.generator.emit import plan
    from gemmgen.generator.manifest import Selection, build_manifest
    from gemmgen.harness.core.toolchain import find_nvcc, nvcc_environment

    files = plan(build_manifest(Selection.parse("sm_80,sm_90", "h,hc", "2-4", "")))
    for rel, text in files.items():
        (tmp_path / "gen" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "gen" / rel).write_text(text)
    nvcc = find_nvcc()
    configured = subprocess.run(
        ["cmake", "-S", str(tmp_path / "gen"), "-B", str(tmp_path / "build"), "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON",
         f"-DCMAKE_CUDA_COMPILER={nvcc}", "-DCMAKE_CUDA_ARCHITECTURES=80;90"],
        capture_output=True, text=True, env=nvcc_environment(nvcc))
    assert configured.returncode == 0, configured.stdout + configured.stderr
    commands = json.loads((tmp_path / "build" / "compile_commands.json").read_text())
    targets = {Path(c["file"]).relative_to(tmp_path / "gen").as_posix():
               set(re.findall(r"arch=(compute_\w+),code=", c["command"])) for c in commands if c["file"].endswith(".cu")}
    specific = {rel for rel in targets if "90a" in code_path_tokens(files[rel])}
    assert wmma.WGMMA_HC_SOURCE in specific and any(rel.startswith("src/wmmablock/h/") for rel in specific)
    for rel, archs in targets.items():
        assert archs == ({"compute_80", "compute_90a"} if rel in specific else {"compute_80", "compute_90"}), rel


@pytest.mark.parametrize("archs, precisions, emitted", [
    ("sm_80,sm_90", "hc", True), ("sm_90", "h,hc", True), ("sm_80", "hc", False), ("sm_90", "h,s", False)])
def test_the_hc_wgmma_source_comes_with_hc_on_sm_90_only(archs, precisions, emitted):
    """The dispatch tries gemmgen_wgmma_hc_strided before the table only where the set has hc and sm_90; the
    source says `90a` (its sm_90 code from compute_90a) and is in CMake's source list."""
    from gemmgen.generator.emit import plan
    from gemmgen.generator.manifest import Selection, build_manifest
    from gemmgen.harness.core.build import arch_specific_paths

    files = plan(build_manifest(Selection.parse(archs, precisions, "2-4", "")))
    dispatch = files["src/gemmgen_dispatch.cu"]
    assert (wmma.WGMMA_HC_SOURCE in files) == emitted
    # (through a macro that is nullptr where a CMake build left hc or the wmma family out)
    assert ("gemm_strided(small_hc, general_hc, GEMMGEN_WGMMA_HC," in dispatch) == emitted
    assert ("#define GEMMGEN_WGMMA_HC gemmgen_wgmma_hc_strided" in dispatch) == emitted
    assert (wmma.WGMMA_HC_SOURCE in files["CMakeLists.txt"]) == emitted
    if emitted:
        assert arch_specific_paths(files[wmma.WGMMA_HC_SOURCE]) == (90,)
        assert f"m < {wmma.WGMMA_HC_MIN_SIZE}" in files[wmma.WGMMA_HC_SOURCE]
