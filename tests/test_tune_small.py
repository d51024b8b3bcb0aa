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
