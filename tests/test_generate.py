"""Generation is deterministic, the committed generated/ is exactly what the generator emits, and
the CLI refuses bad input with a one-line reason and a non-zero exit, writing nothing."""
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gemmgen.cli import main
from gemmgen.generator.emit import plan
from gemmgen.generator.manifest import Selection, build_manifest, parse_shapes, parse_sizes


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_generated_matches_a_fresh_generation(root, tmp_path):
    result = CliRunner().invoke(main, ["generate", "--out", str(tmp_path / "fresh")])
    assert result.exit_code == 0, result.output
    fresh, committed = tree(tmp_path / "fresh"), tree(root / "generated")
    assert sorted(fresh) == sorted(committed), "file lists differ: run `gemmgen generate` and commit"
    changed = [name for name in fresh if fresh[name] != committed[name]]
    assert not changed, f"generated/ is stale in {changed[:5]}: run `gemmgen generate` and commit"


def test_generation_is_deterministic():
    selection = Selection.parse("sm_80,sm_90", "d,hc", "1-5,17", "3x5x7")
    first, second = plan(build_manifest(selection)), plan(build_manifest(selection))
    assert first == second
    for name, text in first.items():
        assert "do not edit" in text.splitlines()[0] or name.endswith(".json")
        assert "gemmgen generate --arch sm_80,sm_90 --precisions hc,d --sizes 1-5,17 --shapes 3x5x7" in text \
            or name.endswith(".json")


def test_manifest_lists_every_file_and_kernel(tmp_path):
    result = CliRunner().invoke(main, ["generate", "--out", str(tmp_path), "--precisions", "s",
                                       "--sizes", "2-3", "--shapes", "2x3x4", "--arch", "sm_90"])
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert sorted(manifest["files"]) == sorted(tree(tmp_path))
    shapes = {(e["m"], e["n"], e["k"]) for e in manifest["dispatch"] if e["precision"] == "s"}
    assert {(2, 2, 2), (3, 3, 3), (2, 3, 4)} <= shapes
    assert manifest["command"].startswith("gemmgen generate --arch sm_90 --precisions s")


def test_regenerating_a_smaller_set_removes_stale_files(tmp_path):
    runner = CliRunner()
    assert runner.invoke(main, ["generate", "--out", str(tmp_path), "--precisions", "d", "--sizes", "2-4"]).exit_code == 0
    assert runner.invoke(main, ["generate", "--out", str(tmp_path), "--precisions", "d", "--sizes", "2"]).exit_code == 0
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert sorted(manifest["files"]) == sorted(tree(tmp_path))


def test_dry_run_writes_nothing(tmp_path):
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["generate", "--out", str(out), "--dry-run", "--precisions", "z",
                                       "--sizes", "4"])
    assert result.exit_code == 0
    assert "small_z_m4n4k4" in result.output and "would write" in result.output
    assert not out.exists()


@pytest.mark.parametrize("args, reason", [
    (["generate", "--precisions", "q"], "unknown precision q"),
    (["generate", "--sizes", "65"], "size 65 is outside 1..64"),
    (["generate", "--precisions", "d", "--sizes", "40"], "sizes above 32 exist only for h and hc"),
    (["list", "--precisions", "s,z", "--sizes", "2,33"], "sizes above 32 exist only for h and hc"),
    (["tune", "small", "--precisions", "h", "--sizes", "40"], "size 40 is outside 1..32"),
    (["generate", "--sizes", "4-2"], "bad size range"),
    (["generate", "--shapes", "3x5"], "bad shape"),
    (["generate", "--shapes", "3x5x40"], "outside 1..32"),
    (["generate", "--arch", "sm_99"], "unknown architecture"),
    (["list", "--arch", "banana"], "unknown architecture"),
])
def test_cli_refuses_bad_input_in_one_line(args, reason, tmp_path):
    out = tmp_path / "never"
    result = CliRunner().invoke(main, args + (["--out", str(out)] if args[0] == "generate" else []))
    assert result.exit_code != 0
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and reason in lines[0], result.output
    assert not out.exists()


def test_cli_refuses_an_output_that_is_a_file(tmp_path):
    target = tmp_path / "afile"
    target.write_text("keep me")
    result = CliRunner().invoke(main, ["generate", "--out", str(target)])
    assert result.exit_code != 0 and "not a folder" in result.output
    assert target.read_text() == "keep me"


def test_size_and_shape_parsers():
    assert parse_sizes("1-3,8") == (1, 2, 3, 8)
    assert parse_shapes("3x5x7, 2X2X2") == ((2, 2, 2), (3, 5, 7))


@pytest.mark.parametrize("command", [["--help"], ["list", "--help"], ["generate", "--help"],
                                     ["check", "--help"], ["tune", "small", "--help"],
                                     ["bench", "small", "--help"]])
def test_every_command_has_help(command):
    result = CliRunner().invoke(main, command)
    assert result.exit_code == 0 and "Usage" in result.output


def test_complex_small_and_wmma_variants_have_one_kernel_per_layout_pair():
    """'T' and 'C' share a kernel (the conjugation is a run-time flag): four launch cases per
    variant, not nine."""
    import re

    from gemmgen.generator.emit import kernel_source
    from gemmgen.generator.small import SmallSpec
    from gemmgen.generator.wmma import WmmaSpec

    for spec in (SmallSpec.parse("small_c_m10n10k10_dim5x5_tba4_hoist"),
                 SmallSpec.parse("small_d_m10n10k10_dim5x5_tba2_hoist"),
                 WmmaSpec.parse("wmma_hc_tc16x16x16_blk32x32x16_dim16x8_w4_f32"),
                 WmmaSpec.parse("wmma_h_tc16x16x16_blk32x32x16_dim16x4_w2_f16_s3")):
        name = spec.name
        text = kernel_source(spec, "test")
        cases = re.findall(r"case gemmgen::trans_code\('(.)', '(.)'\)", text)
        assert sorted(cases) == [("N", "N"), ("N", "T"), ("T", "N"), ("T", "T")], name
        assert "gemmgen::Conjugate conj{ta == 'C', tb == 'C'}" in text


def dry_run_files(*args) -> list[str]:
    result = CliRunner().invoke(main, ["generate", "--dry-run", "--tallskinny-n", "", *args])
    assert result.exit_code == 0, result.output
    return [line.split()[-1] for line in result.output.splitlines() if line.startswith("would write")]


def test_sizes_bound_every_precision():
    """What you ask for is what you get: d alone emits no Tensor Core kernel, and h's exact-shape kernels
    stay within the sizes asked for (no warp kernel of 33..64 unless asked)."""
    files = dry_run_files("--precisions", "d", "--sizes", "3")
    kernels = [f for f in files if f.endswith(".cu") and "/src/" in f and "dispatch" not in f]
    assert [Path(f).name for f in kernels] == ["small_d_m3n3k3_dim2x1_tba16_hoist.cu"]
    assert not [f for f in files if f.endswith(".cu") and ("wmma" in f or "/h/" in f or "/hc/" in f)]

    manifest = build_manifest(Selection.parse("sm_75,sm_80,sm_90", "h", "3", ""))
    assert manifest.kernels and all(max(s.m, s.n) <= 3 for s in manifest.kernels)
    assert {(e.m, e.n, e.k) for e in manifest.dispatch} <= {(3, 3, 3), (3, 3, 16)}
    assert manifest.wmma_kernels   # every other shape: the general Tensor Core kernel
    assert not [f for f in dry_run_files("--precisions", "h", "--sizes", "3") if "wmmawarp" in f]


@pytest.mark.parametrize("size", [40, 52, 64])
def test_sizes_above_32_take_the_warp_kernel_only_where_the_table_chose_it(size):
    from gemmgen.generator import wmma
    from gemmgen.generator.manifest import _tuned_section

    for precision in ("h", "hc"):
        rows = wmma.table_rows(_tuned_section("sm_90", "wmma")[1], precision)
        chosen = {wmma.parse_name(row["kernel"]).name for key in (("square", size), ("rank", size))
                  if (row := rows.get(key)) and row["choice"] == "wmmawarp"}
        manifest = build_manifest(Selection.parse("sm_80,sm_90", precision, str(size), ""))
        assert {s.name for s in manifest.kernels} == chosen, (precision, size)
        assert all(s.family == "wmmawarp" for s in manifest.kernels)
        assert manifest.wmma_kernels   # the general kernel serves the rest (and sizes without a warp kernel)
    # s, d, c, z skip sizes above 32 where h or hc asked for them
    mixed = build_manifest(Selection.parse("sm_90", "h,d", f"3,{size}", ""))
    assert {(e.m, e.n, e.k) for e in mixed.dispatch if e.precision == "d"} == {(3, 3, 3)}


def test_the_default_sizes_keep_the_default_set():
    """The default sizes (1-64) give every fixed-shape kernel of the tuned table, as before sizes bounded
    them; without h and hc they stop at 32, so the canonical command of such a set regenerates it."""
    from gemmgen.generator import wmma
    from gemmgen.generator.manifest import _tuned_section

    manifest = build_manifest(Selection())
    for precision in ("h", "hc"):
        fixed = wmma.fixed_shapes(wmma.table_rows(_tuned_section("sm_90", "wmma")[1], precision))
        assert fixed <= {(e.m, e.n, e.k) for e in manifest.dispatch if e.precision == precision}
    assert "--sizes 1-64" in Selection().command()
    d_only = Selection(precisions=("d",))
    assert d_only.sizes == tuple(range(1, 33)) and "--sizes 1-32" in d_only.command()
    assert CliRunner().invoke(main, ["list", "--precisions", "d"]).output.startswith(
        "# gemmgen generate --arch sm_75,sm_80,sm_90 --precisions d --sizes 1-32\n")


@pytest.mark.parametrize("text", ["1-64", "2,4,8", "1-8,16", "3", "1-3,5,7-9"])
def test_ranges_format_back_to_what_was_parsed(text):
    from gemmgen.generator.spec import format_ranges, parse_ranges

    assert format_ranges(parse_ranges(text, 1, 64, "size", "1-8")) == text
    assert format_ranges(()) == ""



def test_manifest_json_lists_every_family_of_the_registry_as_it_says():
    """Each family's kernels are in manifest.json with the fields its registry entry names; a family in
    the registry whose kernels reach no listing fails here.  The default set with a tiny Tensor Core kernel
    added to the exact-shape table (no packaged table chooses one), and a TSMMA kernel to a d tall-skinny
    entry, has a kernel of every family."""
    import dataclasses

    from gemmgen.generator.families import FAMILIES
    from gemmgen.generator.manifest import DispatchEntry
    from gemmgen.generator.wmma import WmmaTinySpec

    from gemmgen.generator.tallskinny import TsmmaSpec

    manifest = build_manifest(Selection())
    tiny = DispatchEntry("h", 4, 4, 16, 90, WmmaTinySpec.parse("wmmatiny_h_m4n4k16_w1"), "test")
    # and a TSMMA kernel on a d tall-skinny entry, whether or not the packaged table chooses one
    ts = [dataclasses.replace(e, mma=TsmmaSpec("d", e.n, 4, 4, 16, 4), mma_min_m=0)
          if e.precision == "d" and e.mma is None and e.n == 16 else e for e in manifest.tallskinny]
    listing = dataclasses.replace(manifest, dispatch=manifest.dispatch + (tiny,), tallskinny=tuple(ts)).to_json()
    entries = listing["kernels"] + listing["wmma"]["kernels"] + listing["tallskinny"]["kernels"]
    assert {e["family"] for e in entries} == {f.name for f in FAMILIES}
    for family in FAMILIES:
        mine = [e for e in entries if e["family"] == family.name]
        assert all(set(e) == {"name", "family", "precision", *family.json_fields} for e in mine), family.name


def test_small_sources_include_only_the_kernels_their_tuple_uses(root):
    """A small variant's source includes launch_small (with the staged kernel), the ring's header only
    for a tuple with a ring (`_ring`, `_aring` in its name) and the elementwise kernel's only at 1×1×1
    (not z), never the family's umbrella header."""
    sources = sorted((root / "generated" / "src" / "small").rglob("*.cu"))
    assert sources
    for path in sources:
        includes = {line.split('"')[1] for line in path.read_text().splitlines() if line.startswith("#include")}
        expected = {"gemmgen_small_launch.cuh"}
        if "ring" in path.stem:
            expected.add("gemmgen_small_ring.cuh")
        if "_m1n1k1_" in path.stem and not path.stem.startswith("small_z_"):
            expected.add("gemmgen_small_elementwise.cuh")
        assert includes == expected, path.name
