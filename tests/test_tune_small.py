"""How `gemmgen tune small` picks winners from its append-only results file (no GPU needed)."""
import json

from harness.tune_small import best_variants


def _row(name, status="ok", time_us=None, tba=4):
    row = {"arch": "sm_90", "device": "H100", "name": name, "precision": "s", "m": 19, "n": 19,
           "k": 19, "dim_m": 5, "dim_n": 7, "tba": tba, "status": status}
    if time_us is not None:
        row["time_us"] = time_us
    return row


def _write(tmp_path, rows):
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"cut by an interrupt')
    return path


def test_latest_time_counts_and_refusals_stand(tmp_path):
    rows = [
        _row("small_s_m19n19k19_dim5x7_tba4", time_us=10.0),
        _row("small_s_m19n19k19_dim5x7_tba8", time_us=9.0, tba=8),
        # a later run measured both again, next to each other: the latest times decide
        _row("small_s_m19n19k19_dim5x7_tba4", time_us=8.0),
        _row("small_s_m19n19k19_dim5x7_tba8", time_us=9.5, tba=8),
        # fastest of all, but refused later (local memory with another transpose): never wins
        _row("small_s_m19n19k19_dim5x7_tba4_hoist", time_us=5.0),
        _row("small_s_m19n19k19_dim5x7_tba4_hoist", status="local-memory"),
        _row("small_s_m19n19k19_dim5x7_tba4_hoist", time_us=4.0),
    ]
    best = best_variants(_write(tmp_path, rows), "H100", "sm_90")
    assert best[("s", 19, 19, 19)]["name"] == "small_s_m19n19k19_dim5x7_tba4"
    assert best[("s", 19, 19, 19)]["time_us"] == 8.0


def test_other_devices_do_not_count(tmp_path):
    rows = [_row("small_s_m19n19k19_dim5x7_tba4", time_us=10.0),
            {**_row("small_s_m19n19k19_dim5x7_tba8", time_us=1.0, tba=8), "device": "A100"}]
    best = best_variants(_write(tmp_path, rows), "H100", "sm_90")
    assert best[("s", 19, 19, 19)]["name"] == "small_s_m19n19k19_dim5x7_tba4"


def test_pointer_array_ring_depth_rides_on_the_strided_winner(tmp_path):
    from harness.tune_small import table_specs

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
    from harness.tune_small import ARRAY_RING_MIN_GAIN, table_specs

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
    from harness.tune_small import table_specs

    path = _write(tmp_path, [_row("small_s_m19n19k19_dim5x7_tba4", time_us=8.0)])
    _, spec = table_specs(path, "H100", "sm_90")[("s", 19, 19, 19)]
    assert spec.array_stages == 0


def test_no_array_ring_where_the_dispatch_runs_a_tensor_core_kernel(tmp_path, monkeypatch):
    """Where the wmma table gives an h/hc shape to a Tensor Core kernel, the small kernel serves
    calls by name only: its pointer-array ring would only add compile time."""
    import harness.tune_small as tune

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
    from harness.tune_small import ACC16_MIN_GAIN, table_specs

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
