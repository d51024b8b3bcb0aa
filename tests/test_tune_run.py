"""`gemmgen tune` as one run (harness.tune_run), without a GPU and without compiling: the stages of the
small and cpu families run through GpuRunner's own code with the measurements (and nvcc's
verification) replaced by fakes that advance a fake clock, so that the budget, the resume, the state,
the summary, the table in the results folder and `generate --tables` reading it are the real code."""
import json
import zlib

import pytest
from click.testing import CliRunner

from gemmgen.generator import small
from gemmgen.cli import main
from gemmgen.generator.manifest import Selection, build_manifest
from gemmgen.generator.tuning import TABLE_DIR, TableError, load_table, tables_from, usable_tables
from gemmgen.harness.cpu import tune as cpu_tune
from gemmgen.harness import tune_plan
from gemmgen.harness.core.workload import batch_for_megabytes
from gemmgen.harness import tune_run
from gemmgen.harness.small import tune as tune_small
from gemmgen.harness.core.results import append_result, load_results

DEVICE = "NVIDIA Fake GPU 80GB"
RUN = ["tune", "--families", "small,cpu", "--precisions", "d", "--sizes", "2-3"]


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


@pytest.fixture
def fake(monkeypatch, tmp_path):
    """A GpuRunner for a fake device whose timings are made up, one fake second each; the packaged
    table's d 2x2x2 winner is made the slowest, so that a table from the results folder shows."""
    clock = Clock()
    monkeypatch.setattr(tune_run, "now", clock)
    packaged = {(r["precision"], r["m"]): small.SmallSpec.from_row(r).name
                for r in json.loads((TABLE_DIR / "sm_90.json").read_text())["small"]
                if r["m"] == r["n"] == r["k"] and "for_device" not in r}
    refused = set()

    def time_us(name):
        return 1000.0 if name == packaged[("d", 2)] else 10 + zlib.crc32(name.encode()) % 1000 / 100

    def time_chunk(todo, selection, arch, base, results_path, build_dir, megabytes, jobs, arrays, stop):
        done = 0
        for spec in todo:
            if stop():
                break
            row = {**base, **tune_small._spec_fields(spec),
                   "batch": batch_for_megabytes(spec.precision, spec.m, spec.n, spec.k, megabytes)}
            if not refused:   # one refusal, so that the summary has a reason to give
                refused.add(spec.name)
                append_result(results_path, {**row, "status": "local-memory", "reason": "fake"})
            else:
                for array in ((False, True) if arrays and spec.stages else (arrays,)):
                    append_result(results_path, {**row, **({"interface": "array"} if array else {}), "status": "ok",
                                                 "time_us": time_us(spec.name), "floor_fraction": 0.5})
            clock.t += 1
            done += 1
        return done

    def measure(specs, isa, device, build_dir, results, batch, reps, jobs):
        out = {}
        for s in specs:
            out[s.name] = (time_us(s.name) * 1e-9, 1.0)
            append_result(results, {"kernel": s.name, "device": device, "batch": batch, "seconds": out[s.name][0],
                                    "gflops": 1.0})
            clock.t += 1
        return out

    monkeypatch.setattr(tune_small, "_time_chunk", time_chunk)
    monkeypatch.setattr(tune_small, "verify_winners", lambda *args, **kw: 0)   # (nvcc)
    monkeypatch.setattr(cpu_tune, "_measure", measure)
    monkeypatch.setattr(cpu_tune, "cpu_model", lambda: "Fake CPU")

    class FakeRunner(tune_run.GpuRunner):
        def __init__(self, need_gpu=True):
            self.arch, self.device = "sm_90", DEVICE

    monkeypatch.setattr(tune_run, "make_runner", FakeRunner)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _tune(*args):
    return CliRunner().invoke(main, [*RUN, *args])


def test_every_stage_of_the_plan_has_an_implementation():
    stages = tune_plan.plan(Selection.parse("sm_90", "all", "1-4", "", max_size=32), tune_plan.FAMILIES, "sm_90")
    assert {s.key for s in stages} == set(tune_run.IMPLEMENTATIONS)
    for method in tune_run.IMPLEMENTATIONS.values():
        assert callable(getattr(tune_run.GpuRunner, method))
    assert all(s.selection is not None for s in stages if s.name != "table")


def test_one_run_stops_on_its_budget_resumes_and_writes_the_device_table(fake):
    sm_90 = (TABLE_DIR / "sm_90.json").read_bytes()
    first = _tune("--budget", "10s")
    assert first.exit_code == tune_run.BUDGET_STOPPED, first.output
    assert "[1/4] small squares" in first.output
    assert "budget spent: stopped in small squares" in first.output
    assert "left: small squares (" in first.output and "cpu prefetch distance" in first.output
    resume = "gemmgen tune --families small,cpu --precisions d --sizes 2-3 --results gemmgen-tuning --budget 10s"
    assert f"to go on: {resume}" in first.output
    results = fake / "gemmgen-tuning" / tune_plan.RESULTS["small"]
    assert len(load_results(results)) == 10
    state = json.loads((fake / "gemmgen-tuning" / "state.json").read_text())
    assert state["device"] == DEVICE and not state["stages"]["small squares"]["complete"]

    outputs = [first.output]
    for _ in range(100):   # the same command again until it is done
        again = _tune("--budget", "10s")
        outputs.append(again.output)
        assert again.exit_code in (0, tune_run.BUDGET_STOPPED), again.output
        if again.exit_code == 0:
            break
    assert again.exit_code == 0
    assert "[1/4] small squares: complete earlier" in again.output
    assert "budget spent" not in again.output
    # resumed variant by variant: every candidate timed once (the arrays run's rows are its own)
    rows = load_results(results)
    squares = [r["name"] for r in rows if r.get("sweep") != "arrays"]
    assert len(squares) == len(set(squares)) == len(tune_small.sweep(
        Selection.parse("sm_90", "d", "2-3", "", max_size=32), "sm_90", False))
    arrays = [(r["name"], r.get("interface")) for r in rows if r.get("sweep") == "arrays"]
    assert arrays and len(arrays) == len(set(arrays))
    cpu_rows = [r["kernel"] for r in load_results(fake / "gemmgen-tuning" / tune_plan.RESULTS["cpu"])]
    assert len(cpu_rows) == len(set((r["kernel"], r["batch"]) for r in load_results(
        fake / "gemmgen-tuning" / tune_plan.RESULTS["cpu"])))
    # the summary: time per stage, variants tried and refused by reason, the tables
    summary = again.output[again.output.index("# summary"):]
    assert "small squares" in summary and "(local-memory 1)" in summary and "total" in summary
    assert "use them: gemmgen generate --tables gemmgen-tuning" in summary

    table = json.loads((fake / "gemmgen-tuning" / "nvidia-fake-gpu-80gb.json").read_text())
    assert table["arch"] == "sm_90" and table["device"] == DEVICE
    assert {(r["precision"], r["m"]) for r in table["small"]} == {("d", 2), ("d", 3)}
    assert "wmma" not in table and "tallskinny" not in table   # the packaged sections are not copied in
    cpu_table = json.loads((fake / "gemmgen-tuning" / "cpu_avx2.json").read_text())
    assert {(r["precision"], r["m"]) for r in cpu_table["cpu"]} == {("d", 2), ("d", 3)}
    assert (TABLE_DIR / "sm_90.json").read_bytes() == sm_90   # the package untouched

    # a run when all is done runs nothing
    done = _tune()
    assert done.exit_code == 0 and done.output.count("complete earlier") == 4

    # generate --tables reads the folder's table: the fake winner, not the packaged one
    winner = next(small.SmallSpec.from_row(r).name for r in table["small"] if r["m"] == 2)
    listing = CliRunner().invoke(main, ["list", "--tables", "gemmgen-tuning", "--arch", "sm_90", "--precisions", "d",
                                        "--sizes", "2", "--json"])
    assert listing.exit_code == 0, listing.output
    kernels = {(e["m"], e["kernel"]) for e in json.loads(listing.output)["dispatch"]}
    assert (2, winner) in kernels
    packaged = build_manifest(Selection.parse("sm_90", "d", "2", ""))
    assert winner not in {e.kernel.name for e in packaged.dispatch}
    text = CliRunner().invoke(main, ["list", "--tables", "gemmgen-tuning", "--arch", "sm_90", "--precisions", "d",
                                     "--sizes", "2"]).output
    assert f"small: its own table, tuned on {DEVICE} (gemmgen-tuning/nvidia-fake-gpu-80gb.json)" in text
    out = CliRunner().invoke(main, ["generate", "--tables", "gemmgen-tuning", "--arch", "sm_90", "--precisions", "d",
                                    "--sizes", "2", "--tallskinny-n", "", "--out", "gen"])
    assert out.exit_code == 0, out.output
    manifest = json.loads((fake / "gen" / "manifest.json").read_text())
    assert "--tables gemmgen-tuning" in manifest["command"]
    assert winner in {k["name"] for k in manifest["kernels"]}


def test_another_command_runs_a_stage_again_resuming_its_variants(fake):
    assert _tune().exit_code == 0
    rows = len(load_results(fake / "gemmgen-tuning" / tune_plan.RESULTS["small"]))
    wider = CliRunner().invoke(main, ["tune", "--families", "small", "--precisions", "d", "--sizes", "2-4"])
    assert wider.exit_code == 0, wider.output
    assert "small squares: complete earlier" not in wider.output
    names = [r["name"] for r in load_results(fake / "gemmgen-tuning" / tune_plan.RESULTS["small"])[rows:]
             if r.get("sweep") != "arrays"]
    assert names and all("m4n4k4" in n for n in names)   # only size 4 was new


def test_a_folder_of_another_device_is_refused(fake):
    (fake / "gemmgen-tuning").mkdir()
    (fake / "gemmgen-tuning" / "state.json").write_text(json.dumps({"device": "NVIDIA H200", "stages": {}}))
    result = _tune()
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "Error: gemmgen-tuning holds the tuning of NVIDIA H200, not of the NVIDIA Fake GPU 80GB present; "
        "give another --results"]


@pytest.mark.parametrize("args, message", [
    (["--budget", "2x"], "bad --budget '2x'"),
    (["--budget", "0s"], "bad --budget '0s'"),
    (["--families", "small,gpu"], "--families must be a subset of"),
    (["--precisions", "q"], "q"),
    (["--results", "PACKAGE/tuning"], "is inside gemmgen's package"),
])
def test_bad_input_is_one_line_and_a_non_zero_exit(args, message, tmp_path, monkeypatch):
    from pathlib import Path

    import gemmgen.generator as generator

    monkeypatch.chdir(tmp_path)
    args = [a.replace("PACKAGE", str(Path(generator.__file__).parent)) for a in args]
    result = CliRunner().invoke(main, ["tune", *args])
    assert result.exit_code != 0
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert result.output.startswith("Error: ") and message in result.output


def test_a_results_folder_that_cannot_be_made_is_refused(fake):
    (fake / "a-file").write_text("")
    result = _tune("--results", "a-file/sub")
    assert result.exit_code == 1 and result.output.strip().splitlines() == [
        "Error: --results a-file/sub cannot be made: " + str(fake / "a-file") + " is a file"]
    result = _tune("--results", "a-file")
    assert result.exit_code == 1 and "exists and is not a folder" in result.output


def test_without_a_gpu_the_run_says_so_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("gemmgen.harness.core.toolchain.gpu_available", lambda: False)
    result = CliRunner().invoke(main, ["tune", "--families", "small"])
    assert result.exit_code == 1
    assert result.output == "Error: no CUDA GPU found; `gemmgen tune --plan` works without one\n"
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("text, seconds", [("2h", 7200), ("30m", 1800), ("90s", 90), ("1h30m", 5400), ("1.5h", 5400)])
def test_budget_strings(text, seconds):
    assert tune_run.parse_budget(text) == seconds


@pytest.mark.parametrize("text", ["", "2", "h", "2d", "2h 30", "-1h"])
def test_bad_budget_strings(text):
    with pytest.raises(ValueError):
        tune_run.parse_budget(text)


def _table(folder, device, arch="sm_90", **sections):
    from gemmgen.generator.tuning import device_table_name

    path = folder / f"{device_table_name(device)}.json"
    path.write_text(json.dumps({"arch": arch, "device": device, **sections}))
    return path


def test_a_folder_table_replaces_only_the_sections_it_has(tmp_path):
    rows = [{"precision": "d", "m": 2, "n": 2, "k": 2, "dim_m": 2, "dim_n": 2, "tba": 1, "device": "X"}]
    _table(tmp_path, "X", small=rows)
    with tables_from(tmp_path):
        table = load_table("sm_90")
        assert table["small"] == rows
        assert table["wmma"] == json.loads((TABLE_DIR / "sm_90.json").read_text())["wmma"]
        assert load_table("sm_100") == {}
    assert load_table("sm_90")["small"] != rows   # the packaged table again


def test_generate_tables_errors(tmp_path):
    def error(folder):
        result = CliRunner().invoke(main, ["list", "--tables", str(folder), "--precisions", "d", "--sizes", "2"])
        assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1, result.output
        return result.output

    assert "no such folder" in error(tmp_path / "missing")
    assert "holds no tuning table" in error(tmp_path)
    (tmp_path / "state.json").write_text(json.dumps({"device": "X", "arch": "sm_90", "stages": {}}))
    assert "holds no tuning table" in error(tmp_path)   # tune's state file is no table
    _table(tmp_path, "NVIDIA H100", small=[])
    _table(tmp_path, "NVIDIA H200", small=[])
    assert "holds tables of two devices for sm_90" in error(tmp_path)
    with pytest.raises(TableError):
        usable_tables(tmp_path)


def test_the_arrays_sweep_resumes_on_its_own_rows_only():
    rows = [{"device": "X", "name": "a"}, {"device": "X", "name": "b", "sweep": "arrays"},
            {"device": "Y", "name": "c", "sweep": "arrays"}]
    assert tune_small.measured_names(rows, "X") == {"a", "b"}
    assert tune_small.measured_names(rows, "X", arrays=True) == {"b"}


def test_cpu_stage_resumes_from_its_results_and_stops_between_pieces(tmp_path):
    specs = cpu_tune.blocking_candidates(["d"], [(2, 2, 2), (3, 3, 3), (4, 4, 4)], "avx2")
    results = tmp_path / "cpu.jsonl"
    timed = []

    def measure(piece, isa, device, build_dir, results_path, batch, reps, jobs):
        timed.extend(s.name for s in piece)
        for s in piece:
            append_result(results_path, {"kernel": s.name, "device": device, "batch": batch, "seconds": 1e-9,
                                         "gflops": 1.0})
        return {s.name: (1e-9, 1.0) for s in piece}

    measured, left = cpu_tune.measure_stage(specs, "avx2", "cpu", tmp_path, results, -256, 1, 1, resume=True,
                                            stop=lambda: len(timed) > 0, chunk=1, measure=measure)
    shape = {(s.m) for s in specs if s.name in timed}
    assert len(shape) == 1 and left == len(specs) - len(timed) > 0   # whole shapes a piece, then the stop
    measured, left = cpu_tune.measure_stage(specs, "avx2", "cpu", tmp_path, results, -256, 1, 1, resume=True,
                                            chunk=1, measure=measure)
    assert left == 0 and set(measured) == {s.name for s in specs} and len(timed) == len(specs)
