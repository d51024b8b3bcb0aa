"""`gemmgen bench small` files without a GPU: a run of some precisions keeps the other precisions' rows,
and the table names the run of each."""
from gemmgen.harness.core.bench_runs import keep_other_precisions
from gemmgen.harness.small.bench import markdown_table


def row(prec, n, floor):
    return {"precision": prec, "n": n, "batch": 1000, "data": "≫L2", "kernel": f"small_{prec}_{n}",
            "ours_beta0": {"gflops": 1.0, "floor_fraction": floor}, "cublas_beta0": {"floor_fraction": 0.5},
            "speedup_beta0": 2.0, "ours_array_beta0": {"floor_fraction": floor, "floor_fraction_with_pointers": floor}}


def test_run_of_some_precisions_keeps_the_others():
    # a file written before runs were kept per precision (one command for every row)
    old = {"device": "H100", "arch": "sm_90", "command": "gemmgen bench small", "copy_bandwidth_gbs": 2900.0,
           "rows": [row("h", 2, 0.9), row("s", 2, 0.8), row("z", 2, 0.7)]}
    run = {"command": "gemmgen bench small --precisions h,hc", "copy_bandwidth_gbs": 2950.0}
    new = {"device": "H100", "arch": "sm_90", "runs": {"h": run, "hc": run},
           "rows": [row("h", 2, 0.95), row("hc", 2, 0.85)]}
    merged = keep_other_precisions(new, old)
    assert [(r["precision"], r["ours_beta0"]["floor_fraction"]) for r in merged["rows"]] == \
        [("h", 0.95), ("hc", 0.85), ("s", 0.8), ("z", 0.7)]
    assert list(merged["runs"]) == ["h", "hc", "s", "z"]
    assert merged["runs"]["s"] == {"command": "gemmgen bench small", "copy_bandwidth_gbs": 2900.0}
    text = markdown_table(merged)
    assert "h, hc rows: `gemmgen bench small --precisions h,hc`" in text
    assert "s, z rows: `gemmgen bench small`, copy bandwidth measured in the same run 2900 GB/s" in text
    assert "| s | 2 | 1000 | ≫L2 |" in text
    # a second run of the same precisions replaces their rows, not adds to them
    again = keep_other_precisions(new, merged)
    assert [r["precision"] for r in again["rows"]] == ["h", "hc", "s", "z"]


def test_file_from_another_device_is_replaced_whole():
    old = {"device": "A100", "arch": "sm_80", "runs": {"d": {"command": "x", "copy_bandwidth_gbs": 1.0}},
           "rows": [row("d", 4, 0.9)]}
    new = {"device": "H100", "arch": "sm_90", "runs": {"h": {"command": "y", "copy_bandwidth_gbs": 2.0}},
           "rows": [row("h", 4, 0.9)]}
    assert keep_other_precisions(new, old) == new
