"""The small family's spec: its rules refuse bad tuples by name, names round-trip, and every
variant the heuristic or the sweep proposes is valid."""
from dataclasses import replace

import pytest

from gemmgen.generator.precision import PRECISION_ORDER
from gemmgen.generator.small import (MMA_BLOCKINGS, MMA_MIN_SIZE, RING_STAGES, SmallSpec, heuristic, neighbourhood,
                             sweep_candidates)
from gemmgen.generator.spec import SpecError


@pytest.mark.parametrize("precision", PRECISION_ORDER)
@pytest.mark.parametrize("n", range(1, 33))
def test_heuristic_is_valid_and_round_trips(precision, n):
    spec = heuristic(precision, n, n, n)
    spec.validate("sm_75")
    assert SmallSpec.parse(spec.name) == spec
    # the paper's segments: one thread per element below 20, the 2x2 blocking from 20 up
    ratio = 1 if n < 20 else 2
    assert spec.tile_m == spec.tile_n == min(ratio, n)
    assert (spec.tba > 1) == (n <= 10)


@pytest.mark.parametrize("precision", ["d", "hc"])
@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 5, 7), (32, 32, 32), (17, 2, 31)])
def test_sweep_candidates_are_valid_distinct_and_named(precision, shape):
    cands = sweep_candidates(precision, *shape)
    assert cands, "the sweep must try at least one variant"
    assert len({c.name for c in cands}) == len(cands)
    for c in cands:
        assert SmallSpec.parse(c.name) == c
        assert c.threads <= 1024 and c.smem_bytes <= 48 * 1024


@pytest.mark.parametrize("args, rule", [
    (("q", 4, 4, 4, 4, 4, 1), "precision"),
    (("d", 33, 4, 4, 4, 4, 1), "size"),
    (("d", 4, 0, 4, 4, 1, 1), "size"),
    (("d", 4, 4, 4, 5, 4, 1), "blocking"),
    (("d", 32, 32, 32, 4, 4, 1), "recursive blocking"),
    (("d", 32, 32, 32, 15, 16, 1), "no idle threads"),
    (("d", 4, 4, 4, 4, 4, 0), "tba"),
    (("d", 32, 32, 32, 32, 32, 2), "threads per block"),
    (("z", 32, 32, 32, 16, 16, 4), "shared memory"),
    (("s", 3, 3, 3, 3, 3, 1, True), "hoist"),       # 36-byte blocks: nothing to load 16 B at a time
    (("d", 4, 4, 4, 4, 4, 1, 1), "hoist"),
    (("d", 4, 4, 4, 4, 4, 1, False, 5), "ring stages"),
    (("h", 9, 9, 9, 3, 3, 4, False, 2), "ring chunks"),        # 4 GEMMs of 81 halves: 648 bytes
    (("s", 29, 29, 29, 10, 10, 1, False, 2), "ring chunks"),   # 3364-byte blocks: not whole 16 B chunks
    (("d", 13, 13, 13, 4, 4, 4, False, 0, 4), "array ring stages"),
    (("s", 8, 8, 8, 4, 4, 4, False, 2, 2), "array ring stages"),   # the ring serves pointer arrays already
    (("s", 8, 8, 8, 4, 4, 4, False, 2, 0, True), "acc16"),       # fp16 accumulation is for h and hc
    (("h", 8, 8, 8, 4, 4, 4, False, 0, 0, True), "acc16"),       # only the ring kernel has it
    (("c", 32, 32, 32, 8, 8, 1, False, 0, 0, False, True), "mma"),        # fp64 Tensor Cores: d and z
    (("z", 30, 30, 30, 10, 10, 1, False, 0, 0, False, True), "mma warps"),  # 100 threads per GEMM
    (("z", 16, 16, 16, 8, 8, 1, False, 2, 0, False, True), "mma"),        # the ring kernel has no mma product
    (("z", 30, 30, 30, 16, 16, 1), "no idle threads"),                   # 16 for 30: only a Tensor Core tuple
    (("hc", 9, 9, 9, 3, 3, 16, False, 2, 0, False, False, True), "pairs"),   # hc elements are 4-byte pairs
    (("h", 9, 9, 9, 5, 3, 16, False, 2, 0, True, False, True), "pairs"),     # fp16 sums read no columns
    (("h", 9, 9, 9, 5, 3, 16, False, 0, 0, False, False, True), "pairs"),    # only the ring kernel has it
    (("h", 8, 8, 8, 4, 4, 16, False, 2, 0, False, False, True), "pairs"),    # even k: ptxas pairs the loads
])
def test_rules_refuse_by_name(args, rule):
    with pytest.raises(SpecError) as info:
        SmallSpec(*args).validate()
    assert info.value.rule == rule
    assert str(info.value).startswith(rule + ":")


@pytest.mark.parametrize("name", [
    "small_d_m4n4k4_dim4x4", "small_q_m4n4k4_dim4x4_tba1", "wmma_h_nn", "small_d_m4n4k4_dim4x4_tba1 ",
])
def test_parse_refuses_malformed_names(name):
    with pytest.raises(SpecError):
        SmallSpec.parse(name)


def test_parse_refuses_names_of_invalid_tuples():
    with pytest.raises(SpecError) as info:
        SmallSpec.parse("small_d_m32n32k32_dim4x4_tba1")
    assert info.value.rule == "recursive blocking"


def test_hoist_round_trips_and_is_swept_with_both_stagings():
    spec = SmallSpec("s", 19, 19, 19, 5, 7, 4, True).validate()
    assert spec.name == "small_s_m19n19k19_dim5x7_tba4_hoist"
    assert SmallSpec.parse(spec.name) == spec
    assert SmallSpec.parse("small_s_m19n19k19_dim5x7_tba4").hoist is False
    cands = sweep_candidates("s", 19, 19, 19)
    plain = {c for c in cands if not c.hoist}
    hoisted = {c for c in cands if c.hoist}
    assert hoisted and all(SmallSpec.parse(c.name) == c for c in hoisted)
    # every hoisted tuple has its plain twin; a plain one lacks a twin only where nothing is whole vectors
    assert {SmallSpec(c.precision, c.m, c.n, c.k, c.dim_m, c.dim_n, c.tba) for c in hoisted} <= plain
    assert all(c.tba % 4 == 0 for c in hoisted)        # 19·19 floats: whole vectors only per 4 GEMMs


def test_neighbourhood_halves_keeps_and_doubles_tba_in_both_stagings():
    row = {"precision": "s", "m": 13, "n": 13, "k": 13, "dim_m": 4, "dim_n": 4, "tba": 4}
    names = sorted(c.name for c in neighbourhood(row))
    assert names == sorted(["small_s_m13n13k13_dim4x4_tba2", "small_s_m13n13k13_dim4x4_tba4",
                            "small_s_m13n13k13_dim4x4_tba4_hoist", "small_s_m13n13k13_dim4x4_tba8",
                            "small_s_m13n13k13_dim4x4_tba8_hoist"])   # under RING_MIN_SIZE: no ring
    assert all(c.is_valid() for c in neighbourhood({**row, "tba": 1}))   # tba 0 is dropped, not refused


def test_neighbourhood_tries_the_ring_with_every_blocking_from_ring_min_size():
    row = {"precision": "z", "m": 25, "n": 25, "k": 25, "dim_m": 25, "dim_n": 13, "tba": 1, "hoist": True}
    cands = neighbourhood(row)
    plain = {c for c in cands if not c.stages and not c.mma}
    ring = {c for c in cands if c.stages}
    assert {c.tba for c in plain} == {1, 2} and all((c.dim_m, c.dim_n) == (25, 13) for c in plain)
    assert all(c.is_valid() and c.tba in (1, 2) and c.hoist for c in ring)
    assert {(13, 13), (7, 9), (25, 13)} <= {(c.dim_m, c.dim_n) for c in ring}
    # the row's own blocking with every stage count, the others with the first
    assert {c.stages for c in ring if (c.dim_m, c.dim_n) == (25, 13)} == set(RING_STAGES)
    assert {c.stages for c in ring if (c.dim_m, c.dim_n) != (25, 13)} == {RING_STAGES[0]}
    assert not any(c.stages for c in neighbourhood({**row, "precision": "h"}))


def test_fp16_neighbourhood_tries_the_ring_from_the_smallest_sizes():
    row = {"precision": "h", "m": 9, "n": 9, "k": 9, "dim_m": 3, "dim_n": 5, "tba": 8, "hoist": True}
    ring = [c for c in neighbourhood(row) if c.stages]
    assert ring and all(c.is_valid() for c in ring)
    # Odd fp16 sizes make whole 16-byte chunks only 8 GEMMs at a time: of tba 1, 2, 4, 8 (the row's)
    # and 16, only 8 and 16.
    assert {c.tba for c in ring} == {8, 16}
    assert {(3, 5)} <= {(c.dim_m, c.dim_n) for c in ring}
    hc = neighbourhood({**row, "precision": "hc", "m": 4, "n": 4, "k": 4, "dim_m": 2, "dim_n": 2, "tba": 16})
    assert {c.tba for c in hc if c.stages} == {2, 8, 16, 32}   # tba 1: 4 threads, under a warp


def test_ring_round_trips_and_sizes_its_buffers():
    spec = SmallSpec.parse("small_z_m25n25k25_dim13x13_tba2_hoist_ring2")
    assert (spec.stages, spec.hoist, spec.tba) == (2, True, 2)
    assert spec.name == "small_z_m25n25k25_dim13x13_tba2_hoist_ring2"
    assert spec.ring_operand_bytes == (2 * 25 * 25 * 16,) * 2
    assert spec.ring_bytes == 2 * 2 * 2 * 25 * 25 * 16
    assert SmallSpec.parse("small_s_m30n30k30_dim10x15_tba2_ring3").stages == 3
    assert SmallSpec.parse("small_s_m30n30k30_dim10x15_tba2").stages == 0

def test_ring_pads_columns_of_an_even_number_of_chunks():
    # c N = 32: a column of K = 32 elements is 256 bytes, 16 chunks; the stage pads each column of
    # stored Aᵀ (32 of them) and of stored B (32) by one chunk, for the pair that takes the most.
    spec = SmallSpec.parse("small_c_m32n32k32_dim16x16_tba2_hoist_ring2")
    assert spec.ring_operand_bytes == (2 * 32 * 32 * 8,) * 2
    assert spec.ring_bytes == 2 * (2 * 2 * 32 * 32 * 8 + 2 * (32 + 32) * 16)
    # c N = 28: 224-byte columns, 14 chunks: padded too.  z N = 25: 400 bytes, 25 chunks: odd, no padding.
    assert SmallSpec.parse("small_c_m28n28k28_dim14x14_tba1_ring2").ring_bytes == 2 * (2 * 28 * 28 * 8 + 56 * 16)
    assert SmallSpec.parse("small_z_m25n25k25_dim13x13_tba1_ring2").ring_bytes == 2 * 2 * 25 * 25 * 16
    # fp16 is never padded (hc N = 8: 32-byte columns of two chunks).
    assert SmallSpec.parse("small_hc_m8n8k8_dim4x4_tba8_hoist_ring2").ring_bytes == 2 * 2 * 8 * 8 * 8 * 4


def test_staged_shared_memory_counts_the_odd_stride_of_transposed_a():
    even, odd = SmallSpec("z", 32, 32, 32, 8, 8, 1), SmallSpec("z", 31, 31, 31, 8, 8, 1)
    assert (even.smem_lda, odd.smem_lda) == (33, 31)
    assert SmallSpec("hc", 16, 16, 16, 4, 4, 2).smem_lda == 16   # fp16 keeps M
    assert even.smem_bytes == (32 * 33 + 32 * 33) * 16 + 16


def test_pointer_array_ring_round_trips_and_needs_no_whole_chunks():
    # d N = 13 with tba 4: 5408-byte blocks, not whole 16-byte chunks, so no strided ring; pointer
    # arrays copy each matrix on its own and may take one.
    spec = SmallSpec("d", 13, 13, 13, 4, 4, 4, True, 0, 2).validate()
    assert spec.name == "small_d_m13n13k13_dim4x4_tba4_hoist_aring2"
    assert SmallSpec.parse(spec.name) == spec
    row = {"precision": "d", "m": 13, "n": 13, "k": 13, "dim_m": 4, "dim_n": 4, "tba": 4, "hoist": True,
           "stages": 0, "array_stages": 2}
    assert SmallSpec.from_row(row) == spec
    assert SmallSpec.parse("small_d_m13n13k13_dim4x4_tba4_hoist").array_stages == 0


def test_ring_must_fit_the_target_architecture_but_not_every_one():
    spec = SmallSpec("z", 25, 25, 25, 13, 13, 2, False, 3)     # 120,000 bytes of ring
    assert spec.ring_bytes == 120000
    spec.validate("sm_90")
    spec.validate()            # fits some architecture with cp.async; elsewhere the staged kernel runs
    spec.validate("sm_75")     # no cp.async there: the staged kernel runs
    with pytest.raises(SpecError) as info:
        spec.validate("sm_86")   # 99 kB per block
    assert info.value.rule == "shared memory"


def test_acc16_round_trips_and_is_swept_as_the_twin_of_every_fp16_ring_tuple():
    spec = SmallSpec.parse("small_hc_m13n13k13_dim7x7_tba8_hoist_ring2_acc16")
    assert (spec.acc16, spec.stages, spec.hoist) == (True, 2, True)
    assert spec.name == "small_hc_m13n13k13_dim7x7_tba8_hoist_ring2_acc16"
    assert SmallSpec.parse("small_h_m20n20k20_dim5x5_tba1_hoist_aring2_acc16").array_stages == 2
    assert not SmallSpec.parse("small_h_m13n13k13_dim7x5_tba8_ring2").acc16
    row = {"precision": "h", "m": 13, "n": 13, "k": 13, "dim_m": 7, "dim_n": 5, "tba": 8, "stages": 2, "acc16": True}
    assert SmallSpec.from_row(row).name == "small_h_m13n13k13_dim7x5_tba8_ring2_acc16"
    for precision in ("h", "hc"):
        candidates = set(sweep_candidates(precision, 13, 13, 13))
        rings = {s for s in candidates if s.stages and not s.acc16 and not s.pairs}   # (pairs: fp32 only)
        assert rings and {replace(s, acc16=True) for s in rings} <= candidates
        assert all(s.stages or s.array_stages for s in candidates if s.acc16)
    assert not any(s.acc16 for s in sweep_candidates("s", 20, 20, 20))


def test_pairs_round_trips_and_is_swept_as_the_twin_of_every_h_fp32_ring_tuple_at_odd_k():
    spec = SmallSpec.parse("small_h_m9n9k9_dim5x3_tba32_hoist_ring3_pairs")
    assert (spec.pairs, spec.stages, spec.tba, spec.acc16) == (True, 3, 32, False)
    assert spec.name == "small_h_m9n9k9_dim5x3_tba32_hoist_ring3_pairs"
    assert SmallSpec.parse("small_h_m9n9k9_dim3x3_tba16_aring2_pairs").array_stages == 2
    row = {"precision": "h", "m": 9, "n": 9, "k": 9, "dim_m": 5, "dim_n": 3, "tba": 32, "hoist": True, "stages": 3,
           "pairs": True}
    assert SmallSpec.from_row(row) == spec
    candidates = set(sweep_candidates("h", 9, 9, 9))
    fp32_rings = {s for s in candidates if (s.stages or s.array_stages) and not s.acc16 and not s.pairs}
    assert fp32_rings and {replace(s, pairs=True) for s in fp32_rings} <= candidates
    assert all(not s.acc16 and (s.stages or s.array_stages) for s in candidates if s.pairs)
    for precision, size in (("h", 10), ("hc", 9), ("s", 17)):
        assert not any(s.pairs for s in sweep_candidates(precision, size, size, size))
    out = neighbourhood({**row, "tba": 8})
    rings = [s for s in out if s.stages and not s.acc16]
    assert rings and all(replace(s, pairs=not s.pairs) in out for s in rings)


def test_neighbourhood_measures_each_fp16_ring_tuple_with_both_accumulators():
    row = {"precision": "hc", "m": 15, "n": 15, "k": 15, "dim_m": 5, "dim_n": 8, "tba": 8, "stages": 2,
           "acc16": True}
    out = neighbourhood(row)
    rings = [s for s in out if s.stages]
    assert rings and all(replace(s, acc16=not s.acc16) in out for s in rings)
    assert SmallSpec.from_row(row) in out and replace(SmallSpec.from_row(row), acc16=False) in out


def test_mma_round_trips_and_is_swept_for_d_and_z_from_its_minimum_size():
    spec = SmallSpec.parse("small_z_m30n30k30_dim16x16_tba1_hoist_mma")
    assert (spec.mma, spec.mma_warps, spec.hoist) == (True, 8, True)
    assert spec.name == "small_z_m30n30k30_dim16x16_tba1_hoist_mma"
    assert SmallSpec.parse("small_d_m24n24k24_dim8x8_tba2_aring2_mma").array_stages == 2
    row = {"precision": "d", "m": 31, "n": 31, "k": 31, "dim_m": 8, "dim_n": 16, "tba": 2, "mma": True}
    assert SmallSpec.from_row(row).name == "small_d_m31n31k31_dim8x16_tba2_mma"
    for precision in ("d", "z"):
        mma = {(c.dim_m, c.dim_n) for c in sweep_candidates(precision, 30, 30, 30) if c.mma}
        assert set(MMA_BLOCKINGS) <= mma
        assert all(c.mma_warps * 32 == c.dim_m * c.dim_n and not c.stages
                   for c in sweep_candidates(precision, 30, 30, 30) if c.mma)
        assert not any(c.mma for c in sweep_candidates(precision, MMA_MIN_SIZE - 1, MMA_MIN_SIZE - 1, 8))
    assert not any(c.mma for c in sweep_candidates("c", 30, 30, 30))


def test_neighbourhood_tries_mma_with_every_blocking_and_keeps_the_rows_own():
    row = {"precision": "z", "m": 30, "n": 30, "k": 30, "dim_m": 16, "dim_n": 16, "tba": 1, "hoist": True,
           "mma": True}
    cands = neighbourhood(row)
    assert SmallSpec.from_row(row) in cands
    assert set(MMA_BLOCKINGS) <= {(c.dim_m, c.dim_n) for c in cands if c.mma}
    assert not any(c.mma for c in neighbourhood({**row, "precision": "c", "mma": False, "dim_m": 10, "dim_n": 10}))
