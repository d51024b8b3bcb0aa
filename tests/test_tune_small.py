"""How `gemmgen tune small` picks winners from its append-only results file (no GPU needed)."""
import json

from gemmgen.harness.small.tune import best_variants


def _row(name, status="ok", time_us=None, tba=4, batch=1_000_000):   # launches past narrow.NARROW_MEGABYTES
    row = {"arch": "sm_90", "device": "H100", "name": name, "precision": "s", "m": 19, "n": 19,
           "k": 19, "dim_m": 5, "dim_n": 7, "tba": tba, "status": status, "batch": batch}
    if time_us is not None:
        row["time_us"] = time_us
    return row


def _write(tmp_path, rows):
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"cut by an interrupt')
    return path


def test_runs_of_different_sizes_compare_time_per_gemm(tmp_path):
    # a run with --megabytes 256 times a larger batch than one with 200: the longer time can be the faster kernel
    rows = [_row("small_s_m19n19k19_dim5x7_tba4", time_us=8.0, batch=1_000_000),
            _row("small_s_m19n19k19_dim5x7_tba8", time_us=9.0, tba=8, batch=1_280_000)]
    best = best_variants(_write(tmp_path, rows), "H100", "sm_90")
    assert best[("s", 19, 19, 19)]["name"] == "small_s_m19n19k19_dim5x7_tba8"
    rows[1]["batch"] = 1_100_000
    assert best_variants(_write(tmp_path, rows), "H100", "sm_90")[("s", 19, 19, 19)]["name"] == \
        "small_s_m19n19k19_dim5x7_tba4"


def test_latest_time_counts_and_refusals_stand(tmp_path):
    rows = [
        _row("small_s_m19n19k19_dim5x7_tba4", time_us=10.0),
        _row("small_s_m19n19k19_dim5x7_tba8", time_us=9.0, tba=8),
        # a later run measured both again, next to each other: the latest times decide
        _row("small_s_m19n19k19_dim5x7_tba4", time_us=8.0),
        _row("small_s_m19n19k19_dim5x7_tba8", time_us=9.5, tba=8),
        # fastest of all, but refused later by verify_winners (local memory with another transpose):
        # never wins, whatever is measured after
        _row("small_s_m19n19k19_dim5x7_tba4_hoist", time_us=5.0),
        {**_row("small_s_m19n19k19_dim5x7_tba4_hoist", status="local-memory"),
         "reason": "all-transposes build: sm_80 _Z... stack 8 B, spills 8/8 B"},
        _row("small_s_m19n19k19_dim5x7_tba4_hoist", time_us=4.0),
        # a wrong answer stands too
        _row("small_s_m19n19k19_dim5x7_tba2", time_us=3.0, tba=2),
        _row("small_s_m19n19k19_dim5x7_tba2", status="wrong-answer", tba=2),
    ]
    best = best_variants(_write(tmp_path, rows), "H100", "sm_90")
    assert best[("s", 19, 19, 19)]["name"] == "small_s_m19n19k19_dim5x7_tba4"
    assert best[("s", 19, 19, 19)]["time_us"] == 8.0


def test_a_sweep_build_refusal_gives_way_to_a_later_clean_build(tmp_path):
    # the same rule as tune wmma's (harness.core.results.standing_refusals): local memory at the sweep's
    # own build is the code of its day; a later sweep that built it clean and measured it counts
    refused = {**_row("small_s_m19n19k19_dim5x7_tba4_hoist", status="local-memory"),
               "reason": "ptxas reported stack or spills"}
    rows = [_row("small_s_m19n19k19_dim5x7_tba4", time_us=8.0), refused]
    best = best_variants(_write(tmp_path, rows), "H100", "sm_90")
    assert best[("s", 19, 19, 19)]["name"] == "small_s_m19n19k19_dim5x7_tba4"
    rows.append(_row("small_s_m19n19k19_dim5x7_tba4_hoist", time_us=6.0))
    assert best_variants(_write(tmp_path, rows), "H100", "sm_90")[("s", 19, 19, 19)]["name"] == \
        "small_s_m19n19k19_dim5x7_tba4_hoist"
    # and a build refusal after the clean result refuses it again (the template changed since)
    rows.append(refused)
    assert best_variants(_write(tmp_path, rows), "H100", "sm_90")[("s", 19, 19, 19)]["name"] == \
        "small_s_m19n19k19_dim5x7_tba4"


def test_other_devices_do_not_count(tmp_path):
    rows = [_row("small_s_m19n19k19_dim5x7_tba4", time_us=10.0),
            {**_row("small_s_m19n19k19_dim5x7_tba8", time_us=1.0, tba=8), "device": "A100"}]
    best = best_variants(_write(tmp_path, rows), "H100", "sm_90")
    assert best[("s", 19, 19, 19)]["name"] == "small_s_m19n19k19_dim5x7_tba4"


def test_pointer_array_ring_depth_rides_on_the_strided_winner(tmp_path):
    from gemmgen.harness.small.tune import table_specs

    base = "small_s_m19n19k19_dim5x7_tba4"
    rows = [
        _row(base, time_us=8.0),
        _row("small_s_m19n19k19_dim5x7_tba8", time_us=9.0, tba=8),
        # `--arrays` results: the winner's pointer-array interface without and with a ring
        {**_row(base, time_us=20.0), "interface": "array"},
        {**_row(base + "_aring2", time_us=12.0), "interface": "array"},
        {**_row(base + "_aring3", time_us=11.0), "interface": "array"},
        # refused later (local memory with another transpose): the next depth wins
        {**_row(base + "_aring3", status="local-memory"), "interface": "array"},
        # array results never decide the strided winner, however fast
        {**_row("small_s_m19n19k19_dim5x7_tba8_aring2", time_us=1.0, tba=8), "interface": "array"},
    ]
    path = _write(tmp_path, rows)
    assert best_variants(path, "H100", "sm_90")[("s", 19, 19, 19)]["name"] == base
    row, spec = table_specs(path, "H100", "sm_90")[("s", 19, 19, 19)]
    assert row["name"] == base and spec.name == base + "_aring2"


def test_a_pointer_array_ring_must_beat_the_staged_path_by_the_minimum_gain(tmp_path):
    from gemmgen.harness.small.tune import ARRAY_RING_MIN_GAIN, table_specs

    base = "small_s_m19n19k19_dim5x7_tba4"
    staged_us = 10.0
    rows = [_row(base, time_us=8.0), {**_row(base, time_us=staged_us), "interface": "array"},
            # faster, but by less than the minimum gain
            {**_row(base + "_aring2", time_us=staged_us / ARRAY_RING_MIN_GAIN * 1.01), "interface": "array"}]
    _, spec = table_specs(_write(tmp_path, rows), "H100", "sm_90")[("s", 19, 19, 19)]
    assert spec.array_stages == 0
    rows[-1] = {**_row(base + "_aring2", time_us=staged_us / ARRAY_RING_MIN_GAIN * 0.99), "interface": "array"}
    _, spec = table_specs(_write(tmp_path, rows), "H100", "sm_90")[("s", 19, 19, 19)]
    assert spec.array_stages == 2


def test_without_array_results_the_table_keeps_the_staged_array_path(tmp_path):
    from gemmgen.harness.small.tune import table_specs

    path = _write(tmp_path, [_row("small_s_m19n19k19_dim5x7_tba4", time_us=8.0)])
    _, spec = table_specs(path, "H100", "sm_90")[("s", 19, 19, 19)]
    assert spec.array_stages == 0


def test_no_array_ring_where_the_dispatch_runs_a_tensor_core_kernel(tmp_path, monkeypatch):
    """Where the wmma table gives an h/hc shape to a Tensor Core kernel, the small kernel serves
    calls by name only: its pointer-array ring would only add compile time."""
    import gemmgen.harness.small.tune as tune

    monkeypatch.setattr(tune, "load_table", lambda arch: {"wmma": [
        {"precision": "h", "kind": "square", "size": 20, "choice": "small"},
        {"precision": "h", "kind": "square", "size": 25, "choice": "wmma"}]})
    rows = []
    for n in (20, 25):
        base = f"small_h_m{n}n{n}k{n}_dim7x7_tba1"
        shape = {"precision": "h", "m": n, "n": n, "k": n, "dim_m": 7, "dim_n": 7, "tba": 1}
        rows += [{**_row(base, time_us=8.0), **shape},
                 {**_row(base, time_us=10.0), **shape, "interface": "array"},
                 {**_row(base + "_aring2", time_us=5.0), **shape, "interface": "array"}]
    specs = tune.table_specs(_write(tmp_path, rows), "H100", "sm_90")
    assert specs[("h", 20, 20, 20)][1].array_stages == 2
    assert specs[("h", 25, 25, 25)][1].array_stages == 0


def test_fp16_accumulation_wins_only_by_the_minimum_gain(tmp_path):
    from gemmgen.harness.small.tune import ACC16_MIN_GAIN, table_specs

    fp32 = {**_row("small_h_m19n19k19_dim5x7_tba4_ring2", time_us=10.0), "precision": "h", "stages": 2}
    twin = {**fp32, "name": fp32["name"] + "_acc16", "acc16": True}
    # faster, but by less than the minimum gain: the fp32 tuple stays
    rows = [fp32, {**twin, "time_us": 10.0 / ACC16_MIN_GAIN * 1.01}]
    assert best_variants(_write(tmp_path, rows), "H100", "sm_90")[("h", 19, 19, 19)]["name"] == fp32["name"]
    rows = [fp32, {**twin, "time_us": 10.0 / ACC16_MIN_GAIN * 0.99}]
    path = _write(tmp_path, rows)
    assert best_variants(path, "H100", "sm_90")[("h", 19, 19, 19)]["name"] == twin["name"]
    _, spec = table_specs(path, "H100", "sm_90")[("h", 19, 19, 19)]
    assert spec.acc16 and spec.name == twin["name"]


def _ring(name, time_us, interface=None, acc16=False, tba=4):
    row = {**_row(name, time_us=time_us, tba=tba), "stages": 2, **({"acc16": True} if acc16 else {})}
    return {**row, "interface": interface} if interface else row


def test_a_tuple_nearly_as_fast_strided_and_much_faster_on_pointer_arrays_takes_the_row(tmp_path):
    from gemmgen.harness.small.tune import BALANCE_ARRAY_MIN_GAIN, BALANCE_STRIDED_TOLERANCE

    winner, other = "small_s_m19n19k19_dim5x7_tba4_ring2", "small_s_m19n19k19_dim5x7_tba2_ring2"
    strided_us, array_us = 8.0, 20.0
    near_us = strided_us * BALANCE_STRIDED_TOLERANCE * 0.99
    fast_array_us = array_us / BALANCE_ARRAY_MIN_GAIN * 0.99
    rows = [_ring(winner, strided_us), _ring(winner, array_us, "array"),
            _ring(other, near_us, tba=2), _ring(other, fast_array_us, "array", tba=2)]
    assert best_variants(_write(tmp_path, rows), "H100", "sm_90")[("s", 19, 19, 19)]["name"] == other
    # too slow on strided batches: the strided winner stays
    slow = [*rows[:2], _ring(other, strided_us * BALANCE_STRIDED_TOLERANCE * 1.01, tba=2), rows[3]]
    assert best_variants(_write(tmp_path, slow), "H100", "sm_90")[("s", 19, 19, 19)]["name"] == winner
    # not enough faster on pointer arrays
    small_gain = [*rows[:3], _ring(other, array_us / BALANCE_ARRAY_MIN_GAIN * 1.01, "array", tba=2)]
    assert best_variants(_write(tmp_path, small_gain), "H100", "sm_90")[("s", 19, 19, 19)]["name"] == winner
    # the other accumulator is not a candidate (fp16 sums are the ACC16 rule's decision)
    fp16 = [*rows[:2], _ring(other + "_acc16", near_us, acc16=True, tba=2),
            _ring(other + "_acc16", fast_array_us, "array", acc16=True, tba=2)]
    assert best_variants(_write(tmp_path, fp16), "H100", "sm_90")[("s", 19, 19, 19)]["name"] == winner
    # the arrays run decides against variants it did not time: they lost to the row's tuple before
    older = "small_s_m19n19k19_dim5x7_tba8_ring2"
    stale = [_ring(older, strided_us * 0.9, tba=8), *rows]
    assert best_variants(_write(tmp_path, stale), "H100", "sm_90")[("s", 19, 19, 19)]["name"] == other
    # but a variant timed after it competes (and, with no pointer-array time, wins on strided batches)
    later = [*rows, _ring(older, strided_us * 0.9, tba=8)]
    assert best_variants(_write(tmp_path, later), "H100", "sm_90")[("s", 19, 19, 19)]["name"] == older
