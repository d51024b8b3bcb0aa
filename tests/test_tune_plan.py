"""`gemmgen tune --plan`: the stages of a complete tuning, counted by the tuners' own candidate
functions (no GPU, nothing compiled)."""
import pytest
from click.testing import CliRunner

from gemmgen.cli import main
from gemmgen.generator.manifest import Selection
from gemmgen.harness.small import tune as tune_small
from gemmgen.harness.tune_plan import FAMILIES, plan


def _plan(precisions="h,d", sizes="1-4", families=FAMILIES, arch="sm_90"):
    return plan(Selection.parse(arch, precisions, sizes, "", max_size=32), families, arch)


def _variants(stages, family):
    return sum(s.variants or 0 for s in stages if s.family == family)


def test_stages_come_in_a_valid_order():
    stages = _plan()
    keys = [s.key for s in stages]
    assert len(keys) == len(set(keys))
    for i, s in enumerate(stages):
        # a stage's candidates come from a stage that ran before it
        assert s.depends_on is None or s.depends_on in keys[:i], s
        assert s.command.startswith("gemmgen tune ")
        assert (s.variants is None) <= (s.depends_on is not None)
    order = keys.index
    assert order("small squares") < order("small pointer arrays") < order("wmma sweep") \
        < order("wmma final") < order("wmma table") < order("small table")
    assert {s.family for s in stages} == set(FAMILIES)


def test_small_count_is_the_tuners_sweep():
    selection = Selection.parse("sm_90", "d", "1-4", "", max_size=32)
    squares = [s for s in plan(selection, ("small",), "sm_90") if s.name == "squares"]
    assert squares[0].variants == len(tune_small.sweep(selection, "sm_90", False)) > 0
    assert squares[0].command == "gemmgen tune small --precisions d --sizes 1-4"


def test_narrowing_the_options_narrows_the_plan():
    full = _plan(precisions="s,d", sizes="1-4")
    assert _variants(_plan(precisions="d", sizes="1-4"), "small") < _variants(full, "small")
    assert _variants(_plan(precisions="s,d", sizes="1-2"), "small") < _variants(full, "small")
    assert _variants(_plan(precisions="d", sizes="1-4"), "cpu") < _variants(full, "cpu")
    only_small = _plan(precisions="s,d", families=("small",))
    assert {s.family for s in only_small} == {"small"}
    assert [s for s in full if s.family == "small"] == only_small
    # d has no wmma kernels, h no cpu ones
    assert not [s for s in _plan(precisions="d") if s.family == "wmma"]
    assert not [s for s in _plan(precisions="h") if s.family == "cpu"]


def test_cli_prints_the_plan_and_totals():
    result = CliRunner().invoke(main, ["tune", "--plan", "--precisions", "d", "--sizes", "1-4"])
    assert result.exit_code == 0, result.output
    assert "gemmgen tune small --precisions d --sizes 1-4" in result.output
    assert "gemmgen tune cpu --precisions d --sizes 1-4" in result.output
    assert "wmma" not in result.output
    assert result.output.rstrip().splitlines()[-1].lstrip().startswith("overall")


@pytest.mark.parametrize("args", [["--families", "small,gpu"], ["--families", ""], ["--precisions", "x"],
                                  ["--sizes", "40"], ["--arch", "sm_42"], ["--arch", "sm_80,sm_90"]])
def test_a_bad_value_is_one_line_and_a_non_zero_exit(args):
    result = CliRunner().invoke(main, ["tune", "--plan", *args])
    assert result.exit_code != 0
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert result.output.startswith("Error: ")


def test_plan_options_without_plan_or_with_a_subcommand_are_refused():
    # (`gemmgen tune` without --plan is the run itself: tests/test_tune_run.py)
    assert CliRunner().invoke(main, ["tune", "--arch", "sm_80"]).exit_code == 2
    assert CliRunner().invoke(main, ["tune", "--plan", "small"]).exit_code == 2
    assert CliRunner().invoke(main, ["tune", "--families", "small", "small"]).exit_code == 2
    assert CliRunner().invoke(main, ["tune", "--plan", "--budget", "1h"]).exit_code == 2


@pytest.mark.parametrize("sub", ["small", "wmma", "tallskinny", "cpu"])
def test_the_subcommands_still_work(sub):
    result = CliRunner().invoke(main, ["tune", sub, "--help"])
    assert result.exit_code == 0, result.output
    assert f"tune {sub} [OPTIONS]" in result.output
