"""The tall-skinny families (TSM2, ISM2): spec rules and names, the performance model's choices,
the emitted set (deterministic, small family untouched), a cheap compile for sm_90 without local
memory, the C API's argument checks (no GPU needed) and, where a GPU is present, NumPy checks."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from gemmgen.generator import tallskinny
from gemmgen.generator.manifest import Selection, build_manifest
from gemmgen.generator.spec import SpecError


# ---- specs -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec", [
    tallskinny.Tsm2Spec("s", 16, 128, 16, 4), tallskinny.Tsm2Spec("d", 1, 32, 1, 1), tallskinny.Tsm2Spec("h", 32, 256, 32, 8),
    tallskinny.Tsm2Spec("d", 16, 128, 16, 8, 2), tallskinny.Tsm2Spec("d", 16, 128, 16, 4, 2, 4),
    tallskinny.Tsm2Spec("s", 8, 256, 8, 4, 1, 8),
    tallskinny.Ism2Spec("d", 16, 128, 16, 8, 2), tallskinny.Ism2Spec("s", 7, 64, 7, 16, 1),
])
def test_name_round_trip(spec):
    assert tallskinny.parse_spec(spec.name) == spec
    assert type(spec).parse(spec.name) == spec


@pytest.mark.parametrize("args, rule", [
    (("z", 4, 128, 4, 4), "precision"),
    (("s", 0, 128, 1, 1), "n"),
    (("s", 4, 100, 4, 4), "t1"),          # not whole warps
    (("s", 4, 128, 5, 4), "t2"),          # t2 > n
    (("s", 4, 128, 4, 3), "t3"),          # does not divide t1
    (("d", 64, 128, 64, 32), "registers"),
    (("d", 32, 1024, 16, 1), "shared memory"),
])
def test_tsm2_rules(args, rule):
    with pytest.raises(SpecError) as err:
        tallskinny.Tsm2Spec(*args).validate()
    assert err.value.rule == rule


def test_rows_rules_and_names():
    assert tallskinny.Tsm2Spec("s", 8, 64, 8, 4, 2).name == "tsm2_s_n8_t64x8x4_r2"
    assert tallskinny.Tsm2Spec("s", 8, 64, 8, 4).name == "tsm2_s_n8_t64x8x4"
    with pytest.raises(SpecError) as err:
        tallskinny.Tsm2Spec("s", 8, 64, 8, 4, 3).validate()
    assert err.value.rule == "rows"
    with pytest.raises(SpecError) as err:
        tallskinny.Tsm2Spec("d", 32, 128, 32, 8, 2).validate()
    assert err.value.rule == "registers"


def test_ring_rules_and_names():
    assert tallskinny.Tsm2Spec("d", 16, 128, 16, 4, 2, 4).name == "tsm2_d_n16_t128x16x4_r2_s4"
    assert tallskinny.Tsm2Spec("s", 8, 64, 8, 4, 1, 3).name == "tsm2_s_n8_t64x8x4_s3"
    for args, rule in (((("s", 8, 64, 8, 4, 1, 1)), "stages"),          # a ring of one chunk cannot overlap
                       ((("s", 8, 64, 8, 4, 1, 9)), "stages"),
                       ((("h", 8, 64, 8, 4, 1, 4)), "cp.async element"),  # 2-byte elements, no pair
                       ((("s", 16, 256, 16, 8, 2, 8)), "shared memory"),   # 128 KB of ring
                       ((("d", 32, 128, 32, 2, 2, 8)), "registers")):      # 64 accumulators + 32 B values
        with pytest.raises(SpecError) as err:
            tallskinny.Tsm2Spec(*args).validate()
        assert err.value.rule == rule, args
    # The ring needs no A chunk in registers: 4 rows of d n = 12 fit where the register path does not.
    assert tallskinny.Tsm2Spec("d", 12, 64, 12, 8, 4, 2).is_valid()
    assert not tallskinny.Tsm2Spec("d", 12, 64, 12, 8, 4).is_valid()
    sweep = tallskinny.tsm2_sweep("d", 16)
    assert any(s.stages for s in sweep) and any(not s.stages for s in sweep)
    assert tallskinny.Tsm2Spec("h", 8, 64, 8, 4, 2, 4).is_valid()                  # pairs of rows
    assert all(s.rows % 2 == 0 for s in tallskinny.tsm2_sweep("h", 16) if s.stages)


def test_table_rows_round_trip_into_entries():
    from gemmgen.generator.tuning import load_table

    rows = load_table("sm_90").get("tallskinny", [])
    assert rows, "the sm_90 table has a tallskinny section"
    for row in rows:
        e = tallskinny.entry_from_row(row, 90)
        assert e.tsm2.precision == row["precision"] and e.tsm2.n == row["n"]
        assert e.tsm2.rows == row["tsm2"].get("rows", 1)


def test_ism2_opt_rule():
    with pytest.raises(SpecError) as err:
        tallskinny.Ism2Spec("s", 4, 128, 4, 4, 3).validate()
    assert err.value.rule == "opt"


def test_bad_names():
    for name in ("tsm2_s_n4", "ism2_s_n4_t128x4x4_opt3", "small_s_m2n2k2_dim2x2_tba1"):
        with pytest.raises(SpecError):
            tallskinny.parse_spec(name)


def test_sweeps_are_valid_and_include_the_model():
    for p in "sd":
        for n in (2, 4, 8, 16):
            sweep = tallskinny.tsm2_sweep(p, n)
            assert sweep and all(s.is_valid() for s in sweep)
            assert tallskinny.model_tsm2(p, n) in sweep
        for n in (8, 16):
            sweep = tallskinny.ism2_sweep(p, n)
            assert {1, 2} == {s.opt for s in sweep}


# ---- the model ---------------------------------------------------------------------------------------
def test_t2_threshold_matches_the_paper_on_k40c():
    """§4.2: K40c (1430 GFLOP/s fp64, 288 GB/s) gives t2 threshold ≈ 40 in double precision."""
    k40 = tallskinny.DeviceModel("K40c", 15, 0.745e9, 65536, 48 * 1024, 2048, 288e9, {"d": 1430e9, "s": 4290e9})
    assert 38 < tallskinny.t2_threshold(k40, "d") < 42


def test_model_on_h100_is_memory_bound_and_reads_a_once():
    for p in "hsd":
        for n in (1, 2, 4, 8, 16, 32):
            c = tallskinny.algorithm5(tallskinny.H100_SXM, p, 30720, n, 30720)
            assert c.bound == "memory"
            assert c.t2 == n                      # A read once (§3.6.3)
            assert 0.99 <= c.util <= 1.0          # Little's law satisfied at full occupancy
            spec = tallskinny.model_tsm2(p, n)
            assert spec.t2 == n and spec.t1 % spec.t3 == 0


def test_model_compute_bound_branch():
    """A slow-compute device (the paper's M40: fp64 213 GFLOP/s, 288 GB/s, threshold ≈ 6) sends
    n = 16 down the compute-bound branch of Algorithm 5, as §4.4 reports."""
    m40 = tallskinny.DeviceModel("M40", 24, 1.1e9, 65536, 96 * 1024, 2048, 288e9, {"d": 213e9, "s": 6.8e12})
    assert 5 < tallskinny.t2_threshold(m40, "d") < 7
    c = tallskinny.algorithm5(m40, "d", 15360, 16, 15360)
    assert 1 <= c.t2 <= 16 and c.t3 >= 1


def test_occupancy_and_utilization_shapes():
    dev = tallskinny.H100_SXM
    assert tallskinny.max_occupancy(dev, "d", 32, 8) < tallskinny.max_occupancy(dev, "d", 4, 8)
    assert tallskinny.util_mem(dev, "s", 16, 1) <= tallskinny.util_mem(dev, "s", 16, 8)


# ---- emission ----------------------------------------------------------------------------------------
def test_default_manifest_has_every_n_and_precision():
    m = build_manifest(Selection())
    keys = {(e.precision, e.n) for e in m.tallskinny}
    assert keys == {(p, n) for p in "hsd" for n in range(1, 33)}
    assert len(m.tallskinny_kernels) >= 3 * 32


def test_any_n_on_request_and_command_round_trip():
    sel = Selection.parse("sm_90", "s", "2", "", "40,48")
    assert sel.tallskinny_ns == (40, 48)
    assert "--tallskinny-n 40,48" in sel.command()
    assert "--tallskinny-n" not in Selection().command()
    m = build_manifest(sel)
    assert {e.n for e in m.tallskinny} == {40, 48}


def test_plan_is_deterministic_and_small_sources_unchanged():
    from gemmgen.generator.emit import plan

    sel = Selection.parse("sm_90", "s,d", "2,3", "", "4,8")
    a, b = plan(build_manifest(sel)), plan(build_manifest(sel))
    assert a == b
    assert "src/gemmgen_tallskinny_dispatch.cu" in a
    assert any(k.startswith("src/tsm2/") for k in a) and any(k.startswith("src/ism2/") for k in a)
    assert "gemmgen_dgemm_tallskinny" in a["include/gemmgen.h"]
    # the small family's sources differ only in the banner's command line
    none = plan(build_manifest(Selection.parse("sm_90", "s,d", "2,3", "", "")))
    for rel, text in none.items():
        if rel.startswith("src/small/"):
            assert a[rel].split("\n", 1)[1] == text.split("\n", 1)[1]


def test_h_tensor_core_route_is_emitted_where_it_can_run():
    from gemmgen.generator.emit import plan

    sel = Selection.parse("sm_75,sm_90", "h", "40", "", "4,40")
    m = build_manifest(sel)
    (route,) = m.tallskinny_routes
    assert route.kernel.name == tallskinny.TENSOR_CORE_KERNELS["h"]
    assert (route.min_m, route.max_n, route.cc) == (tallskinny.TENSOR_CORE_MIN_M, route.kernel.blk_n, 80)
    assert route.kernel in m.wmma_kernels                      # built with the wmma family
    files = plan(m)
    dispatch = files["src/gemmgen_tallskinny_dispatch.cu"]
    assert f"{route.kernel.name}_strided, {route.min_m}LL, {route.max_n}, 80}}" in dispatch
    assert "#if GEMMGEN_WITH_H && GEMMGEN_WITH_TALLSKINNY && GEMMGEN_WITH_WMMA" in dispatch
    assert f"src/wmmablock/h/{route.kernel.name}.cu" in files
    assert files["manifest.json"].count(route.kernel.name) >= 2   # a wmma kernel and the route
    # no h tall-skinny kernels, or no architecture with cp.async: no route, and s and d never have one
    assert build_manifest(Selection.parse("sm_90", "h", "40", "", "")).tallskinny_routes == ()
    assert build_manifest(Selection.parse("sm_75", "h", "40", "", "4")).tallskinny_routes == ()
    assert build_manifest(Selection.parse("sm_90", "s,d", "4", "", "4")).tallskinny_routes == ()


def test_route_cases_reach_the_route_and_its_fallback():
    import json

    from gemmgen.generator.emit import plan
    from gemmgen.harness.tallskinny import check

    manifest = json.loads(plan(build_manifest(Selection.parse("sm_90", "h,s", "4", "", "3,40,70")))["manifest.json"])
    (route,) = manifest["tallskinny"]["tensor_core"]
    entries = check.entries_from_manifest(manifest)
    cases = list(check.tensor_core_route_cases(entries, [route], np.random.default_rng(3)))
    assert {(c.precision, c.n) for c in cases} == {("h", 3), ("h", 40)}   # s has no route, 70 > 64 columns
    max_k = {e.n: e.ism2_max_k for e in entries if e.precision == "h"}
    for c in cases:
        assert c.m >= route["min_m"] and c.k > max_k[c.n]          # TSM2's region, tall enough
        assert c.m % 8 == 0 and c.k % 8 == 0 and c.pad % 8 == 0    # lda, ldc on 16-byte chunks
    assert {(c.transa, c.transb) for c in cases} == {("N", "N"), ("N", "T"), ("T", "N"), ("T", "T")}
    assert any(c.offset for c in cases) and any(c.kind == "beta0-nan" for c in cases)
    in_check = [c for c in check.manifest_cases(manifest, np.random.default_rng(0), quick=True)
                if c.kind.startswith("tensor-core route")]
    assert len(in_check) == sum(c.kind.startswith("tensor-core route") for c in cases)   # gemmgen check runs them


# ---- compile (cheap: one precision, two n) ------------------------------------------------------------
@pytest.fixture(scope="module")
def ts_build(tmp_path_factory):
    from gemmgen.harness.tallskinny.build import build_tallskinny

    root = Path(__file__).resolve().parent.parent / "build" / "test_tallskinny"
    result, entries = build_tallskinny(root / "set", root / "obj", ("s",), (3, 16), "sm_90")
    return result, entries


@pytest.mark.slow
def test_compiles_for_sm90_without_local_memory(ts_build):
    result, _ = ts_build
    assert not result.failures
    assert result.resources
    assert not result.local_memory_kernels
    assert all(r.registers <= 255 for r in result.resources)


@pytest.mark.slow
@pytest.mark.parametrize("change, code", [
    ({"ta": "X"}, -1), ({"tb": "?"}, -2), ({"m": -1}, -3), ({"n": -1}, -4), ({"k": -2}, -5),
    ({"A": None}, -7), ({"lda": 9}, -8), ({"B": None}, -9), ({"ldb": 2}, -10), ({"C": None}, -12),
    ({"ldc": 9}, -13), ({"ta": "T", "lda": 2}, -8), ({"tb": "T", "ldb": 2}, -10),
    ({"m": 0, "A": None, "B": None, "C": None}, 0), ({"n": 0, "C": None}, 0),
])
def test_argument_checks(ts_build, change, code):
    from gemmgen.harness.core.api import TallSkinnyLibrary

    lib = TallSkinnyLibrary(ts_build[0].library)
    args = {"ta": "N", "tb": "N", "m": 10, "n": 3, "k": 4, "A": 8, "lda": 10, "B": 8, "ldb": 4, "C": 8,
            "ldc": 10}
    args.update(change)
    a = args
    assert lib.tallskinny("s", a["ta"], a["tb"], a["m"], a["n"], a["k"], 1.0, a["A"], a["lda"], a["B"],
                          a["ldb"], 0.0, a["C"], a["ldc"]) == code


@pytest.mark.slow
@pytest.mark.parametrize("change, code", [
    # (alpha = 0 or k = 0) and beta = 1: 0 at once, nothing launched (C is a bogus address here, so
    # a launch would fail or fault; without a GPU the device query would return LAUNCH_FAILED)
    ({"alpha": 0.0, "beta": 1.0}, 0),
    ({"k": 0, "beta": 1.0}, 0),
    ({"alpha": 0.0, "beta": 1.0, "A": None, "B": None}, 0),   # A, B never read with alpha = 0
    ({"k": 0, "beta": 1.0, "A": None, "B": None}, 0),
    ({"alpha": 0.0, "beta": 1.0, "n": 99}, 0),                # nothing to do, even with no kernel for n
    ({"alpha": 0.0, "beta": 1.0, "C": None}, -12),            # C is checked before the quick return
    ({"m": 0, "lda": 0, "A": None, "B": None, "C": None}, -8),   # lda >= max(1, rows) even for m = 0
    ({"m": 0, "ldc": 0, "A": None, "B": None, "C": None}, -13),
    ({"alpha": 0.0, "beta": 1.0, "ldb": 3}, -10),
])
def test_argument_checks_and_quick_return(ts_build, change, code):
    from gemmgen.harness.core.api import TallSkinnyLibrary

    lib = TallSkinnyLibrary(ts_build[0].library)
    a = {"ta": "N", "tb": "N", "m": 10, "n": 3, "k": 4, "alpha": 1.0, "A": 8, "lda": 10, "B": 8, "ldb": 4,
         "beta": 0.5, "C": 8, "ldc": 10}
    a.update(change)
    assert lib.tallskinny("s", a["ta"], a["tb"], a["m"], a["n"], a["k"], a["alpha"], a["A"], a["lda"], a["B"],
                          a["ldb"], a["beta"], a["C"], a["ldc"]) == code


def test_ring_copies_never_read_past_the_element():
    """Every cp.async of the tall-skinny kernels copies whole elements (s, d), whole pairs of fp16
    rows or (TSMMA) whole 16-byte chunks: a copy with a source size below its copy size counts, for compute-sanitizer, as a read of
    the whole copy, which at the last row of A's last column passes the call's bytes."""
    src = Path(__file__).resolve().parent.parent / "generated" / "src"
    header = "".join(p.read_text() for p in sorted(src.glob("gemmgen_tallskinny_*.cuh")))
    calls = re.findall(r"copy_async<([^>]+)>\(([^;]*)\);", header)
    assert calls
    for size, args in calls:   # the source bytes (the last argument) are the copy's size, always
        last = args.rsplit(",", 1)[1].strip()
        assert last == size or (last == "(int)sizeof(S)" and "sizeof(S)" in size), (size, args)
    assert "asm volatile(\"cp.async" not in header   # every copy goes through copy_async


# ---- GPU ---------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_checks(ts_build):
    from gemmgen.harness.tallskinny import check as ck
    from gemmgen.harness.core.api import TallSkinnyLibrary

    result, entries = ts_build
    lib = TallSkinnyLibrary(result.library)
    cases = list(ck.default_cases(entries, np.random.default_rng(3))) + list(ck.edge_cases(entries))
    results = ck.run_cases(lib, cases) + ck.check_not_generated(lib, (3, 16))
    failed = [r for r in results if not r.passed]
    assert not failed, failed[:5]


def test_only_the_ism2_kernels_the_cut_offs_can_choose_are_emitted():
    from dataclasses import replace

    entry = tallskinny.default_entry("d", 8, 75)   # the model's entry: optimization 2 never chosen
    assert entry.kernels == (entry.tsm2, entry.ism2_opt1)
    assert replace(entry, opt2_min_m=100_000).kernels == (entry.tsm2, entry.ism2_opt1, entry.ism2_opt2)
    assert replace(entry, ism2_max_k=0, opt2_min_m=100_000).kernels == (entry.tsm2,)
    # In the emitted set every ISM2 kernel the dispatch names has a source, and the others are null.
    root = Path(__file__).resolve().parent.parent / "generated" / "src"
    dispatch = (root / "gemmgen_tallskinny_dispatch.cu").read_text()
    named = set(re.findall(r'"(ism2_\w+)"', dispatch))
    sources = {p.stem for p in (root / "ism2").rglob("*.cu")}
    assert named == sources and sources
    assert '{"ism2_d_n13_' not in dispatch and "nullptr}" in dispatch


def test_edge_cases_use_only_the_n_the_set_emitted():
    """A set generated with --tallskinny-n 2 has no n = 5, 3 or 1: checking them there reports
    GEMMGEN_NOT_GENERATED as a failure of the kernels."""
    from types import SimpleNamespace

    from gemmgen.harness.tallskinny import check as ck

    entries = [SimpleNamespace(precision="h", n=2), SimpleNamespace(precision="s", n=4),
               SimpleNamespace(precision="s", n=16)]
    cases = list(ck.edge_cases(entries))
    assert {(c.precision, c.n) for c in cases} == {("h", 2), ("s", 4)}
    assert len(cases) == 8


@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_exact_extent_buffers(ts_build):
    """Each operand in an allocation of exactly its extent (no pool, no slack), odd m and k, lda not
    a multiple of 8, operands one element past a 16-byte boundary, several k-groups, alpha = 0 and
    k = 0 with beta = 1 over Inf and NaN (bit for bit), A = B = NULL with alpha = 0.  Without a
    sanitizer a read past the end only faults where the allocation ends at a page; under
    `compute-sanitizer` (gemmgen check --sanitize) every such read is reported."""
    from gemmgen.harness.tallskinny import check as ck
    from gemmgen.harness.core.api import TallSkinnyLibrary

    result, entries = ts_build
    lib = TallSkinnyLibrary(result.library)
    cases = list(ck.exact_extent_cases(entries, np.random.default_rng(5)))
    kinds = {c.kind for c in cases}
    assert {ck.UNTOUCHED_KIND, ck.NULL_AB_KIND, "exact-extent"} <= kinds
    results = ck.run_cases(lib, cases, exact_buffers=True)
    failed = [r for r in results if not r.passed]
    assert not failed, failed[:5]


def test_exact_extent_cases_cover_the_corners():
    """Without a GPU: the exact-extent cases have odd m and k, both parities of lda, offsets, the
    quick-return and NULL cases, and several k-groups on the TSM2 kernel itself."""
    from types import SimpleNamespace

    from gemmgen.harness.tallskinny import check as ck

    spec = tallskinny.Tsm2Spec("h", 16, 64, 16, 8, 2, 8)
    entries = [SimpleNamespace(precision="h", n=16, tsm2=spec, ism2_reachable=(None, None))]
    cases = list(ck.exact_extent_cases(entries, np.random.default_rng(1)))
    products = [c for c in cases if c.kind == "exact-extent"]
    assert all(c.m % 2 and c.k % 2 for c in products)
    assert {c.pad for c in products} == {1, 2} and {c.offset for c in products} == {0, 1}
    assert {c.transa for c in products} == {"N", "T"}
    assert any(c.target == spec.name and c.split > 1 and c.k > 2 * spec.t1 for c in products)
    untouched = [c for c in cases if c.kind == ck.UNTOUCHED_KIND]
    assert {(c.alpha == 0, c.k == 0) for c in untouched} == {(True, False), (False, True)}
    assert all(c.beta == 1.0 for c in untouched)
    assert ck.extent(5, 3, 8) == 21 and ck.extent(0, 3, 8) == 0


def test_a_sweep_piece_checks_each_candidate_once_times_what_is_left_and_stops_when_told(tmp_path, monkeypatch):
    """tune.time_piece without a GPU: the library, the check and the workload are fakes."""
    from gemmgen.harness.tallskinny import tune as ts_tune

    cands = tallskinny.tsm2_sweep("d", 8)
    missing, wrong, first = cands[0].name, cands[1].name, cands[2]

    class Lib:
        def variant(self, name):
            if name == missing:
                raise AttributeError(name)
            return name

    class Work:
        def __init__(self, prec, m, n, k):
            self.prec, self.m, self.n, self.k = prec, m, n, k

        def variant(self, f, split):
            return (f, split)

        def time_ms(self, launch):
            return 1.0

        def release(self):
            pass

    monkeypatch.setattr(ts_tune, "_library", lambda path: Lib())
    monkeypatch.setattr(ts_tune, "_correct", lambda lib, spec, rng: (spec.name != wrong, "fake"))
    monkeypatch.setattr(ts_tune, "TsWorkload", Work)
    monkeypatch.setattr(ts_tune, "_free_gpu_memory", lambda: None)
    results = tmp_path / "rows.jsonl"
    done = frozenset({(first.name, "tsm2", 8, s, s, 0) for s in ts_tune.TSM2_SHAPES})
    args = dict(library="lib.so", base={"device": "X"}, done=done, refused=frozenset(), bandwidth=1e12)
    timed = ts_tune.time_piece(("tsm2", "d", 8), results, 1, lambda: False, **args)
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert [(r["name"], r["status"]) for r in rows[:2]] == [(missing, "not-built"), (wrong, "wrong-answer")]
    timings = [r for r in rows if r["status"] == "ok"]
    assert timed == len(timings) == (len(cands) - 3) * len(ts_tune.TSM2_SHAPES)
    assert all(r["name"] != first.name and r["m"] == r["k"] and 0 < r["floor_fraction"] for r in timings)
    # a stop between timings ends the piece with what it timed
    calls = iter(range(10**6))
    stopped = ts_tune.time_piece(("tsm2", "d", 8), tmp_path / "b.jsonl", 1, lambda: next(calls) >= 5, **args)
    assert stopped == 5


# ---- TSMMA: TSM2's product on the fp64 Tensor Cores -------------------------------------------------------
def test_tsmma_names_rules_and_sweep():
    spec = tallskinny.TsmmaSpec("d", 32, 4, 4, 16, 4)
    assert spec.name == "tsmma_d_upto32_w4x4_k16_s4" and tallskinny.parse_spec(spec.name) == spec.validate()
    # one kernel for every n of its last 8-column tile
    assert [n for n in range(1, 40) if spec.serves(n)] == list(range(25, 33))
    assert spec.block_rows == 128 and spec.t1 == 128
    # the ring as TsmmaShape lays it out: 4 stages of (16 x 136 + 32 x 20) doubles
    assert spec.smem_bytes == 4 * (16 * 136 + 32 * 20) * 8
    for args, rule in ((("s", 8, 4, 4, 16, 4), "precision"), (("d", 33, 4, 4, 16, 4), "max_n"), (("d", 12, 4, 4, 16, 4), "max_n"),
                       (("d", 8, 3, 4, 16, 4), "warps"), (("d", 8, 4, 3, 16, 4), "tiles"),
                       (("d", 8, 4, 4, 12, 4), "bk"), (("d", 8, 4, 4, 16, 9), "stages"),
                       (("d", 32, 8, 8, 8, 3), "shared memory")):
        with pytest.raises(SpecError) as err:
            tallskinny.TsmmaSpec(*args).validate()
        assert err.value.rule == rule, args
    with pytest.raises(SpecError) as err:
        spec.validate("sm_75")
    assert err.value.rule == "architecture"
    assert spec.is_valid("sm_80") and spec.is_valid("sm_90")
    with pytest.raises(SpecError):
        tallskinny.parse_spec("tsmma_s_upto8_w4x4_k16_s4")
    with pytest.raises(SpecError):
        tallskinny.parse_spec("tsmma_d_n32_w4x4_k16_s4")   # a kernel per n: the names before max_n
    sweep = tallskinny.tsmma_sweep("d", 32)
    assert sweep and all(s.is_valid() for s in sweep) and spec in sweep
    assert tallskinny.tsmma_sweep("d", 27) == sweep   # the kernels of n's tiles
    assert tallskinny.tsmma_sweep("s", 16) == [] and tallskinny.tsmma_sweep("d", 40) == []


def test_tsmma_h_names_rules_and_sweep():
    """h TSMMA: 16-row tiles, k groups in the name and the thread count, the reduction's shared memory."""
    spec = tallskinny.TsmmaSpec("h", 32, 2, 4, 32, 2, 4)
    assert spec.name == "tsmma_h_upto32_w2x4_k32_g4_s2" and tallskinny.parse_spec(spec.name) == spec.validate()
    assert spec.block_rows == 128 and spec.t1 == 256 and spec.t3 == 128
    # 2 stages of (128 lines × 136 halves of A + max(32 × 136, 128 × 40) of B), in halves
    assert spec.smem_bytes == 2 * (128 * 136 + max(32 * 136, 128 * 40)) * 2
    # the ring holds the sums that k groups 1-7 hand over at the end: 7 × 32 lanes × 4 tiles × 4 × 4 floats
    assert tallskinny.TsmmaSpec("h", 32, 1, 4, 16, 2, 8).smem_bytes >= 7 * 32 * 4 * 4 * 4 * 4
    for args, rule in ((("h", 8, 2, 2, 8, 3, 2), "bk"), (("h", 8, 2, 2, 32, 3, 3), "kgroups"),
                       (("d", 8, 2, 2, 8, 3, 2), "kgroups"), (("h", 8, 4, 2, 32, 3, 4), "threads"),
                       (("h", 32, 4, 4, 64, 4, 2), "shared memory")):
        with pytest.raises(SpecError) as err:
            tallskinny.TsmmaSpec(*args).validate()
        assert err.value.rule == rule, args
    for bad in ("tsmma_h_upto8_w2x2_k32_s3", "tsmma_d_upto8_w2x2_k8_g2_s3"):   # k groups: h always, d never
        with pytest.raises(SpecError):
            tallskinny.parse_spec(bad)
    sweep = tallskinny.tsmma_sweep("h", 8)
    assert sweep and all(s.is_valid() and s.precision == "h" for s in sweep)
    assert {s.kgroups for s in sweep} > {2} and tallskinny.tsmma_sweep("h", 33) == []



def _tables_with_tsmma(n_rows=(16, 32), min_m=4096):
    from gemmgen.generator.tuning import load_table

    table = json.loads(json.dumps(load_table("sm_90")))
    for row in table["tallskinny"]:
        if row["precision"] == "d" and row["n"] in n_rows:
            row["tsmma"] = {"warps": 4, "tiles": 4, "bk": 16, "stages": 4, "min_m": min_m}
    return table


def test_tsmma_rows_become_dispatch_entries_from_sm80():
    from gemmgen.generator.emit import launch_pairs, tallskinny_dispatch_source

    table = _tables_with_tsmma()
    notes = []
    entries = tallskinny.build_entries(("s", "d"), (3, 16, 32), ("sm_75", "sm_90"),
                                       lambda arch: table if arch == "sm_90" else {}, notes)
    assert not notes
    with_mma = [e for e in entries if e.mma is not None]
    # d n = 16 and 32 have rows, n = 3 borrows nothing of them (n = 2 and 4 have no tsmma); never before sm_80
    assert {(e.precision, e.n, e.cc) for e in with_mma} == {("d", 16, 90), ("d", 32, 90)}
    e = with_mma[0]
    assert e.mma_min_m == 4096 and e.mma in e.kernels and e.to_json()["tsmma"] == e.mma.name
    assert launch_pairs(e.mma) == (("N", "N"), ("N", "T"))   # op(A) = A only
    source = tallskinny_dispatch_source(entries, sorted({k for x in entries for k in x.kernels}, key=lambda s: s.name),
                                        {"banner": "", "version": ""})
    assert f'"{e.mma.name}", {e.mma.name}, 4096LL' in source
    assert "if (mma_serves(e, which, ta, m))" in source


def test_tsmma_borrows_from_a_tuned_n_with_as_many_column_tiles_and_comes_before_the_route():
    from gemmgen.generator.emit import tallskinny_dispatch_source
    from gemmgen.generator.tuning import load_table

    table = json.loads(json.dumps(load_table("sm_90")))
    table["tallskinny"] = [r for r in table["tallskinny"] if "for_device" not in r]
    blocking = {8: (1, 4, 16, 8), 16: (2, 2, 32, 4), 24: (4, 2, 64, 2), 32: (2, 4, 32, 4)}
    for row in table["tallskinny"]:
        row.pop("tsmma", None)   # only the choices below
        if row["n"] in blocking:
            w, t, bk, g = blocking[row["n"]]
            if row["precision"] == "h":
                row["tsmma"] = {"warps": w, "tiles": t, "bk": bk, "kgroups": g, "stages": 2, "min_m": 0}
            elif row["precision"] == "d" and row["n"] in (24, 32):
                row["tsmma"] = {"warps": 4, "tiles": 4 if row["n"] == 24 else 2, "bk": 8, "stages": 3, "min_m": 0}
    notes = []
    entries = tallskinny.build_entries(("h", "d"), (10, 12, 20, 25, 28), ("sm_90",), lambda arch: table, notes)
    assert not notes
    mma = {(e.precision, e.n): e.mma for e in entries}
    # h: TSM2 borrows the nearest tuned n (8 for 10, 24 for 25 and 28), TSMMA a tuned n with as many tiles
    assert [(mma[("h", n)].warps, mma[("h", n)].tiles) for n in (10, 12, 20, 25, 28)] == \
        [(2, 2), (2, 2), (4, 2), (2, 4), (2, 4)]
    assert all(mma[("h", n)].serves(n) for n in (10, 25))
    # d too: n = 25 and 28 take n = 32's TSMMA (not n = 24's, the nearest), n = 20 n = 24's (TSM2 from n = 16)
    assert (mma[("d", 25)].tiles, mma[("d", 28)].tiles, mma[("d", 20)].tiles) == (2, 2, 4)
    assert all(mma[("d", n)].serves(n) for n in (20, 25, 28))
    source = tallskinny_dispatch_source(entries, sorted({k for x in entries for k in x.kernels}, key=lambda s: s.name),
                                        {"banner": "", "version": ""})
    body = source[source.index("int tallskinny("):]
    assert body.index("if (mma_serves(") < body.index("if (route_serves(")


def test_tallskinny_sweep_refuses_variants_with_local_memory(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from gemmgen.harness.core.results import load_results
    from gemmgen.harness.tallskinny import build as ts_build
    from gemmgen.harness.tallskinny import tune

    spilled = SimpleNamespace(source="set/tsmma/h/tsmma_h_upto8_w2x2_k16_g4_s2.cu", uses_local_memory=True)
    built = SimpleNamespace(library=tmp_path / "lib.so", local_memory_kernels=[spilled])
    monkeypatch.setattr(ts_build, "build_tallskinny", lambda *a, **k: (built, ()))
    seen = {}
    monkeypatch.setattr(tune, "run_tune", lambda *a, **k: seen.setdefault("refuse", a[-1]) and {})
    results = tmp_path / "r.jsonl"
    tune.tune(("h",), (8,), (), results, tmp_path, False, 1, tmp_path, arch="sm_90", device="GPU X")
    assert seen["refuse"] == frozenset({"tsmma_h_upto8_w2x2_k16_g4_s2"})
    (row,) = load_results(results)
    assert row["status"] == "local-memory" and row["device"] == "GPU X"


def test_tsmma_cases_reach_the_kernel_and_its_edges():
    from types import SimpleNamespace

    from gemmgen.harness.tallskinny import check

    spec = tallskinny.TsmmaSpec("d", 24, 4, 4, 16, 4)
    entry = SimpleNamespace(precision="d", n=24, ism2_max_k=32, tsm2=tallskinny.Tsm2Spec("d", 24, 128, 24, 4),
                            ism2_reachable=(None, None), mma=spec, mma_min_m=5000)
    cases = list(check.tsmma_cases([entry], np.random.default_rng(1)))
    assert all(c.transa == "N" for c in cases)                      # the only op(A) it serves
    api = [c for c in cases if c.target == "api"]
    assert api and all(c.m >= 5000 and c.k > 32 for c in api)       # where the dispatch sends calls to it
    direct = [c for c in cases if c.target == spec.name]
    assert {c.split for c in direct} >= {0, 1, 2, 3}
    assert any(c.m < spec.block_rows and c.k < spec.bk for c in direct)
    assert any(c.offset for c in direct) and any(c.pad == 0 for c in direct) and any(c.pad == 1 for c in direct)
    assert any(c.kind == "beta0-nan" for c in cases) and any(c.kind == "exact" for c in cases)
    quick = list(check.tsmma_cases([entry], np.random.default_rng(1), quick=True))
    assert quick and all(c.target == "api" for c in quick)


def test_tsmma_wins_a_row_only_where_it_beats_tsm2_at_the_largest_shapes():
    from gemmgen.harness.tallskinny import tune

    shapes = tune.TSM2_SHAPES

    def rows(mma_times):
        out = []
        for m, t in zip(shapes, mma_times):
            out.append({"stage": "tsm2", "name": "tsm2_d_n32_t128x32x4_s8", "precision": "d", "n": 32, "m": m,
                        "time_us": 100.0, "floor_fraction": 0.4, "t1": 128, "t2": 32, "t3": 4})
            out.append({"stage": "tsmma", "name": "tsmma_d_upto32_w4x4_k16_s4", "precision": "d", "n": 32, "m": m,
                        "time_us": t, "floor_fraction": 40 / t, "warps": 4, "tiles": 4, "bk": 16, "stages": 4})
        return out
    best = {"name": "tsm2_d_n32_t128x32x4_s8"}
    everywhere = tune._tsmma_choice(rows([50.0] * len(shapes)), "d", 32, best)
    assert everywhere["min_m"] == 0 and (everywhere["warps"], everywhere["bk"]) == (4, 16)
    from_second = tune._tsmma_choice(rows([120.0] + [50.0] * (len(shapes) - 1)), "d", 32, best)
    assert from_second["min_m"] == shapes[1]
    assert tune._tsmma_choice(rows([50.0] * (len(shapes) - 1) + [99.0]), "d", 32, best) is None   # within noise
