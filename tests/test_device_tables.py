"""`--tables` given more than once: the first folder's table of an architecture serves every GPU of it,
a later folder's small rows become rows for its own device (the generated dispatch picks them by
cudaDeviceProp.name), its other families are not used.  No GPU, no nvcc: manifests and dry runs."""
import json

import pytest
from click.testing import CliRunner

from gemmgen.cli import main
from gemmgen.generator import small, tallskinny
from gemmgen.generator.emit import plan
from gemmgen.generator.manifest import Selection, build_manifest
from gemmgen.generator.tuning import TABLE_DIR, device_table_name, load_table, tables_from

H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"
PACKAGED = json.loads((TABLE_DIR / "sm_90.json").read_text())
SIZES = (2, 3, 12, 13, 14)


def _plain(size: int) -> dict:
    return next(dict(r) for r in PACKAGED["small"] if (r["precision"], r["m"], r["n"], r["k"]) == ("d", size, size, size)
                and "for_device" not in r)


def _table(folder, device, arch="sm_90", **sections):
    folder.mkdir(exist_ok=True)
    path = folder / f"{device_table_name(device)}.json"
    path.write_text(json.dumps({"arch": arch, "device": device, **sections}))
    return folder


def _h100(tmp_path):
    return _table(tmp_path / "h100-tuning", H100, small=[{**_plain(s), "device": H100} for s in SIZES])


def _h200_rows():
    """H200's tuning of the same shapes: other timings everywhere; d 3 and d 14 another tuple, d 13 the same
    tuple without its pointer-array ring (the same kernel on strided batches), plus a row of its own for
    launches up to 128 MB."""
    rows = {s: {**_plain(s), "device": H200, "time_us": 1.0, "floor_fraction": 0.5, "batch": 7,
                "candidates_tried": 3} for s in SIZES}
    rows[3] = {**rows[3], "tba": 8}
    rows[14] = {**rows[14], "dim_m": 4, "dim_n": 4, "tba": 4}
    del rows[13]["array_stages"]
    launch = {**rows[13], "dim_m": 7, "dim_n": 7, "tba": 2, "for_device": H200, "max_megabytes": 128}
    return list(rows.values()) + [launch]


def _h200(tmp_path, **sections):
    return _table(tmp_path / "h200-tuning", H200, small=_h200_rows(), **sections)


def _kernel(row):
    return small.SmallSpec.from_row(row).validate("sm_90")


def _manifest(*folders, precisions="d"):
    return build_manifest(Selection(archs=("sm_90",), precisions=(precisions,), sizes=SIZES,
                                    tables=tuple(str(f) for f in folders)))


def _keyed(manifest):
    return {(e.m, e.device, e.max_megabytes): e.kernel for e in manifest.dispatch if e.device}


def _invoke(tmp_path, monkeypatch, *args):
    monkeypatch.chdir(tmp_path)
    return CliRunner().invoke(main, [*args])


def test_a_later_folder_adds_its_differing_small_rows_for_its_device(tmp_path):
    h100, h200 = _h100(tmp_path), _h200(tmp_path)
    manifest = _manifest(h100, h200)
    rows = {r["m"]: r for r in _h200_rows() if "for_device" not in r}
    # the plain entries are the first folder's (H100's) rows
    plain = {e.m: e.kernel for e in manifest.dispatch if not e.device}
    assert plain == {s: _kernel(_plain(s)) for s in SIZES}
    # H200's rows where its tuple differs: d 3 and d 14, and its own row for launches up to 128 MB;
    # d 2 and d 12 (same tuple, other timings) and d 13 (no pointer-array ring only) are left to the fallback
    launch = next(r for r in _h200_rows() if "max_megabytes" in r)
    assert _keyed(manifest) == {(3, H200, 0): _kernel(rows[3]), (14, H200, 0): _kernel(rows[14]),
                                (13, H200, 128): _kernel(launch)}
    assert all(e.source == f"tuned on {H200}" for e in manifest.dispatch if e.device)
    # the rows for a device run strided batches only: no pointer-array ring of their own
    with tables_from((h100, h200)):
        table = load_table("sm_90")
    assert [(r["m"], r.get("for_device"), r.get("max_megabytes")) for r in table["small"]] == [
        (2, None, None), (3, None, None), (3, H200, None), (12, None, None), (13, None, None), (13, H200, 128),
        (14, None, None), (14, H200, None)]
    assert not any("array_stages" in r for r in table["small"] if "for_device" in r)
    # their kernels are emitted, each once; the command records both folders in order
    names = [k.name for k in manifest.kernels]
    assert len(names) == len(set(names)) and _kernel(rows[14]).name in names
    assert manifest.selection.command().endswith(f"--tables {h100} --tables {h200}")
    listed = manifest.to_json()["dispatch"]
    assert {(e["m"], e.get("device")) for e in listed if e.get("device")} == {(3, H200), (13, H200), (14, H200)}


def test_the_order_of_the_folders_decides_the_fallback(tmp_path):
    h100, h200 = _h100(tmp_path), _h200(tmp_path)
    manifest = _manifest(h200, h100)
    rows = {r["m"]: r for r in _h200_rows() if "for_device" not in r}
    assert {e.m: e.kernel for e in manifest.dispatch if not e.device} == {s: _kernel(rows[s]) for s in SIZES}
    # H100's rows where they differ from H200's; d 13 differs only in the pointer-array ring; the H200
    # table's own launch row stays (it is the first table's, for its own device)
    assert _keyed(manifest) == {(3, H100, 0): _kernel(_plain(3)), (14, H100, 0): _kernel(_plain(14)),
                                (13, H200, 128): _kernel(next(r for r in _h200_rows() if "max_megabytes" in r))}


def test_the_list_marks_the_rows_and_names_their_file(tmp_path, monkeypatch):
    _h100(tmp_path), _h200(tmp_path)
    result = _invoke(tmp_path, monkeypatch, "list", "--tables", "h100-tuning", "--tables", "h200-tuning",
                     "--arch", "sm_90", "--precisions", "d", "--sizes", "3,14", "--tallskinny-n", "")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert sum(f"[only {H200}]" in line for line in lines) == 2
    assert "rows for NVIDIA H200 only: h200-tuning/nvidia-h200.json" in lines[2]
    assert lines[0].endswith("--tables h100-tuning --tables h200-tuning")
    # a later table choosing the fallback's kernels everywhere adds nothing, and the list names no file for it
    _table(tmp_path / "same", "NVIDIA H200 NVL", small=[{**_plain(s), "device": "NVIDIA H200 NVL"} for s in SIZES])
    same = _invoke(tmp_path, monkeypatch, "list", "--tables", "h100-tuning", "--tables", "same", "--arch", "sm_90",
                   "--precisions", "d", "--sizes", "3,14", "--tallskinny-n", "")
    assert same.exit_code == 0 and "[only" not in same.output and "rows for NVIDIA" not in same.output


def test_a_later_tables_wmma_rows_are_not_used(tmp_path, monkeypatch):
    h100 = _h100(tmp_path)
    h200 = _h200(tmp_path, wmma=PACKAGED["wmma"][:3])
    alone, both = _manifest(h100, precisions="d").to_json(), _manifest(h100, h200, precisions="d").to_json()
    assert both["wmma"] == alone["wmma"]
    note = (f"--tables h200-tuning: {H200}'s wmma rows not used: that family's dispatch has no "
            "device key; sm_90 keeps the packaged table's")
    out = _invoke(tmp_path, monkeypatch, "generate", "--tables", "h100-tuning", "--tables", "h200-tuning",
                  "--arch", "sm_90", "--precisions", "d", "--sizes", "3", "--dry-run")
    assert out.exit_code == 0, out.output
    assert out.stderr.splitlines() == [f"gemmgen: {note}"]
    listing = _invoke(tmp_path, monkeypatch, "list", "--json", "--tables", "h100-tuning", "--tables", "h200-tuning",
                      "--arch", "sm_90", "--precisions", "d", "--sizes", "3")
    assert json.loads(listing.output)["tables_not_used"] == [note]
    # where the first table has them, it keeps its own
    _table(tmp_path / "h100-tuning", H100, small=[], wmma=PACKAGED["wmma"])
    listing = _invoke(tmp_path, monkeypatch, "list", "--tables", "h100-tuning", "--tables", "h200-tuning",
                      "--arch", "sm_90", "--precisions", "d", "--sizes", "3")
    assert ("# --tables h200-tuning: NVIDIA H200's wmma rows not used: that family's dispatch has no "
            "device key; sm_90 keeps h100-tuning's") in listing.output


def test_a_later_tables_tallskinny_rows_serve_its_device_where_they_differ(tmp_path):
    rows = [dict(r) for r in PACKAGED["tallskinny"] if r["precision"] == "d" and "for_device" not in r]
    for r in rows:
        if r["n"] == 32:   # another kernel for n = 32 (and every n that borrows it), the same for the others
            r["tsmma"] = {"warps": 4, "tiles": 4, "bk": 16, "stages": 4, "min_m": 0}
    h100, h200 = _h100(tmp_path), _h200(tmp_path, tallskinny=rows)
    alone, both = _manifest(h100, precisions="d"), _manifest(h100, h200, precisions="d")
    mine = [e for e in both.tallskinny if e.device]
    assert mine and {e.device for e in mine} == {H200} and all(e.mma is not None for e in mine)
    # TSMMA comes from the tuned n with as many 8-column tiles: n = 32's serves n = 25-32
    assert {e.n for e in mine} == {n for n in range(1, 33) if (n + 7) // 8 == 32 // 8}
    assert ([e for e in both.tallskinny if not e.device]
            == [e for e in alone.tallskinny if not e.device])   # the fallback stays, the packaged H200 rows go
    dispatch = plan(both)["src/gemmgen_tallskinny_dispatch.cu"]
    assert f'{{32, 90, "{H200}", ' in dispatch and "find_entry(table, n, cc, device.name)" in dispatch
    assert {e["for_device"] for e in both.to_json()["tallskinny"]["dispatch"]} == {None, H200}


def test_the_generated_dispatch_names_the_device(tmp_path):
    files = plan(_manifest(_h100(tmp_path), _h200(tmp_path)))
    dispatch = files["src/gemmgen_dispatch.cu"]
    assert f'"{H200}"' in dispatch and f'"{H100}"' not in dispatch
    assert "--tables" in dispatch.splitlines()[0]


@pytest.mark.parametrize("case, message", [
    ("same device twice", "both hold tables of NVIDIA H200 for sm_90; give one --tables folder per device"),
    ("the first's device again", "both hold tables of NVIDIA H100 80GB HBM3 for sm_90"),
    ("rows for another device", "has small rows for Other GPU, not its device NVIDIA H200"),
    ("two devices in one folder", "holds tables of two devices for sm_90"),
])
def test_refused_cases_are_one_line_and_write_nothing(case, message, tmp_path, monkeypatch):
    folders = ["h100-tuning", "h200-tuning"]
    _h100(tmp_path), _h200(tmp_path)
    if case == "same device twice":
        _table(tmp_path / "again", H200, small=_h200_rows())
        folders.append("again")
    elif case == "the first's device again":
        _table(tmp_path / "again", H100, small=_h200_rows())
        folders.append("again")
    elif case == "rows for another device":
        _table(tmp_path / "h200-tuning", H200, small=_h200_rows() + [{**_plain(2), "for_device": "Other GPU"}])
    else:
        _table(tmp_path / "h200-tuning", "NVIDIA B200", small=[])
    args = [a for f in folders for a in ("--tables", f)]
    result = _invoke(tmp_path, monkeypatch, "generate", *args, "--arch", "sm_90", "--precisions", "d",
                     "--sizes", "3", "--out", "gen")
    assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1, result.output
    assert result.output.startswith("Error: --tables: ") and message in result.output
    assert not (tmp_path / "gen").exists()


def test_a_later_table_replaces_the_fallbacks_rows_for_its_device_at_its_shapes(tmp_path):
    # the first table without a small section: the packaged one serves, with its rows for the H200 (d 13);
    # an H200 table with a d 13 row replaces them there
    first = _table(tmp_path / "wmma-only", H100, wmma=PACKAGED["wmma"])
    h200 = _table(tmp_path / "h200-tuning", H200, small=[{**_plain(13), "device": H200}])
    packaged = _keyed(_manifest())
    assert {key for key in packaged if key[0] == 13} == {(13, H200, 0), (13, H200, 128)}
    assert {key for key in _keyed(_manifest(first, h200)) if key[0] == 13} == set()


def test_a_later_folders_cpu_table_is_not_used(tmp_path):
    from gemmgen.generator.tuning import stack_notes

    packaged = json.loads((TABLE_DIR / "cpu_avx2.json").read_text())
    first, later = tmp_path / "a", tmp_path / "b"
    for folder, rows in ((first, packaged["cpu"][:2]), (later, packaged["cpu"][2:4])):
        folder.mkdir()
        (folder / "cpu_avx2.json").write_text(json.dumps({**packaged, "cpu": rows}))
    assert stack_notes((first, later)) == [
        f"--tables {later}: cpu_avx2.json not used: the CPU dispatch has no device key; cpu_avx2 keeps {first}'s"]
    with tables_from((first, later)):
        assert load_table("cpu_avx2")["cpu"] == packaged["cpu"][:2]
