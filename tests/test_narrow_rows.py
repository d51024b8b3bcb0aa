"""Table rows for one GPU model and for launches up to a size (harness.small.narrow), and the dispatch
entries the generator makes of them (no GPU needed)."""
import json

from gemmgen.generator import small
from gemmgen.generator.manifest import Selection, build_manifest
from gemmgen.harness.core.workload import batch_for_megabytes
from gemmgen.harness.small.narrow import NARROW_MEGABYTES, confirm_rows, narrow_rows

DEVICE = "Fake GPU"
TABLE = [{"precision": "s", "m": 19, "n": 19, "k": 19, "dim_m": 5, "dim_n": 7, "tba": 4, "hoist": False,
          "stages": 0, "array_stages": 2, "device": "Other GPU"}]


def _result(name_fields: dict, time_us: float, megabytes: int, device=DEVICE) -> dict:
    return {"arch": "sm_90", "device": device, "precision": "s", "m": 19, "n": 19, "k": 19, "hoist": False,
            "stages": 0, **name_fields, "status": "ok", "time_us": time_us, "floor_fraction": 0.5,
            "batch": batch_for_megabytes("s", 19, 19, 19, megabytes)}


PLAIN = {"dim_m": 5, "dim_n": 7, "tba": 4}      # the table's row (its array ring does not run on strided batches)
OTHER = {"dim_m": 7, "dim_n": 7, "tba": 2}
THIRD = {"dim_m": 10, "dim_n": 10, "tba": 1}


def test_a_faster_tuple_past_the_bound_makes_a_device_row_and_below_it_a_launch_row():
    results = [_result(PLAIN, 10.0, 256), _result(OTHER, 9.0, 256), _result(THIRD, 9.5, 256),
               _result(PLAIN, 5.0, 50), _result(OTHER, 4.9, 50), _result(THIRD, 4.0, 50)]
    rows, lines = narrow_rows(results, DEVICE, TABLE)
    assert [(r["dim_m"], r["tba"], r.get("max_megabytes")) for r in rows] == [(7, 2, None), (10, 1, NARROW_MEGABYTES)]
    assert all(r["for_device"] == DEVICE and "array_stages" not in r for r in rows)
    # the launch row beat the device row's tuple (what would serve those launches otherwise)
    assert rows[1]["gain"] == round(4.9 / 4.0, 3)
    assert len(lines) == 2


def test_a_gain_within_the_spread_keeps_the_table_row():
    results = [_result(PLAIN, 10.0, 256), _result(OTHER, 9.8, 256), _result(PLAIN, 5.0, 50), _result(OTHER, 4.9, 50)]
    rows, lines = narrow_rows(results, DEVICE, TABLE)
    assert rows == [] and all("kept" in line for line in lines)


def test_other_devices_and_untimed_table_tuples_make_no_row():
    assert narrow_rows([_result(OTHER, 1.0, 50, device="Other GPU"), _result(PLAIN, 9.0, 50, device="Other GPU")],
                       DEVICE, TABLE)[0] == []
    rows, lines = narrow_rows([_result(OTHER, 1.0, 50), _result(THIRD, 2.0, 50)], DEVICE, TABLE)
    assert rows == [] and "not timed in this run" in lines[0]


def test_the_packaged_rows_for_a_device_become_entries_of_their_own_architecture_only():
    manifest = build_manifest(Selection.parse("sm_80,sm_90", "d", "13", "", max_size=32))
    entries = [e for e in manifest.dispatch if (e.m, e.n, e.k) == (13, 13, 13)]
    keyed = [e for e in entries if e.device]
    assert keyed and all(e.cc == 90 and e.device == "NVIDIA H200" for e in keyed)
    assert {e.max_megabytes for e in keyed} == {0, NARROW_MEGABYTES}
    plain = [e for e in entries if not e.device]
    assert len(plain) == 1 and plain[0].max_megabytes == 0
    # their kernels are emitted (and so checked), each once
    names = [k.name for k in manifest.kernels]
    assert all(e.kernel.name in names for e in entries) and len(names) == len(set(names))
    listed = [e for e in manifest.to_json()["dispatch"] if e["m"] == 13]
    assert {(e.get("device"), e.get("max_megabytes")) for e in listed} == \
        {(None, None), ("NVIDIA H200", None), ("NVIDIA H200", NARROW_MEGABYTES)}


def _bench(tmp_path, name, kernel_by_point, device=DEVICE):
    rows = [{"family": "small", "prec": "s", "m": 19, "n": 19, "k": 19, "launch": launch, "kernel": kernel,
             "beta0": {"ours": {"ms": ms0}}, "beta1": {"ours": {"ms": ms1}}}
            for launch, (kernel, ms0, ms1) in kernel_by_point.items()]
    path = tmp_path / name
    path.write_text(json.dumps({"device": device, "rows": rows}))
    return path


def test_the_workload_bench_confirms_a_row_only_where_it_is_no_slower_at_every_point_it_serves(tmp_path):
    results = [_result(PLAIN, 10.0, 256), _result(OTHER, 9.0, 256), _result(PLAIN, 5.0, 50), _result(OTHER, 4.9, 50),
               _result(THIRD, 4.0, 50)]
    rows, _ = narrow_rows(results, DEVICE, TABLE)
    plain, other, third = (small.SmallSpec.from_row({**r, "precision": "s", "m": 19, "n": 19, "k": 19}).name
                           for r in (PLAIN, OTHER, THIRD))
    before = _bench(tmp_path, "before.json", {"batch 1000": (plain, 1.0, 1.0), "50 MB": (plain, 2.0, 2.0),
                                              "256 MB": (plain, 9.0, 9.0)})
    # the launch row wins at 50 MB but loses at batch 1000 with beta = 1; the device row holds
    after = _bench(tmp_path, "after.json", {"batch 1000": (third, 0.9, 1.2), "50 MB": (third, 1.5, 1.8),
                                            "256 MB": (other, 8.0, 9.1)})
    kept, lines = confirm_rows(rows, before, after)
    assert [r.get("max_megabytes") for r in kept] == [None] and kept[0]["confirmed_min_ratio"] == round(9.0 / 9.1, 3)
    assert "dropped, 0.83x at batch 1000 beta1" in lines[1]
    # a bench on another device confirms nothing
    elsewhere = _bench(tmp_path, "elsewhere.json", {"256 MB": (other, 8.0, 8.0)}, device="Other GPU")
    assert confirm_rows(rows, before, elsewhere)[0] == []
