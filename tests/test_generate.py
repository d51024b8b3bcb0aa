"""Generation is deterministic, the committed generated/ is exactly what the generator emits, and
the CLI refuses bad input with a one-line reason and a non-zero exit, writing nothing."""
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from generator.cli import main
from generator.emit import plan
from generator.manifest import Selection, build_manifest, parse_shapes, parse_sizes


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
    (["generate", "--sizes", "33"], "size 33 is outside 1..32"),
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

    from generator.emit import kernel_source
    from generator.small import SmallSpec
    from generator.wmma import WmmaSpec

    for spec in (SmallSpec.parse("small_c_m10n10k10_dim5x5_tba4_hoist"),
                 SmallSpec.parse("small_d_m10n10k10_dim5x5_tba2_hoist"),
                 WmmaSpec.parse("wmma_hc_tc16x16x16_blk32x32x16_dim16x8_w4_f32"),
                 WmmaSpec.parse("wmma_h_tc16x16x16_blk32x32x16_dim16x4_w2_f16_s3")):
        name = spec.name
        text = kernel_source(spec, "test")
        cases = re.findall(r"case gemmgen::trans_code\('(.)', '(.)'\)", text)
        assert sorted(cases) == [("N", "N"), ("N", "T"), ("T", "N"), ("T", "T")], name
        assert "gemmgen::Conjugate conj{ta == 'C', tb == 'C'}" in text
