"""`gemmgen tune --scheduler` and `--gpus` (harness.distributed) on a real Dask cluster of this
machine, without a GPU: the small sweep's pieces are compiled and "timed" by a fake with made-up,
deterministic timings and a little sleep, on the workers; the rest (the client that writes the
results, the budget, the resume, the summary) is the real code."""
import json
import sys
import time
import zlib

import pytest
from click.testing import CliRunner

distributed = pytest.importorskip("distributed")

from gemmgen.cli import main  # noqa: E402
from gemmgen.harness import distributed as workers  # noqa: E402
from gemmgen.generator import tallskinny  # noqa: E402
from gemmgen.harness import tune_plan, tune_run  # noqa: E402
from gemmgen.harness.core.results import append_result  # noqa: E402
from gemmgen.harness.small import tune as tune_small  # noqa: E402

DEVICE = "NVIDIA Fake GPU 80GB"
RUN = ["tune", "--families", "small", "--precisions", "d", "--sizes", "2-5"]


@pytest.fixture
def fake(monkeypatch, tmp_path):
    """Fakes without shared state (a worker process gets its own copy of each): every variant's result
    follows from its name; 5 ms a variant."""
    def time_chunk(todo, selection, arch, base, results_path, build_dir, megabytes, jobs, arrays, stop):
        on_worker = results_path.name == "rows.jsonl"   # (run_piece's file)
        assert build_dir.is_absolute() or not on_worker, build_dir   # the folder as every worker sees it
        done = 0
        for spec in todo:
            if stop():
                break
            crc = zlib.crc32(spec.name.encode())
            row = {**base, **tune_small._spec_fields(spec), "batch": 1000}
            if crc % 11 == 0:
                append_result(results_path, {**row, "status": "local-memory", "reason": "fake"})
            else:
                for array in ((False, True) if arrays and spec.stages else (arrays,)):
                    append_result(results_path, {**row, **({"interface": "array"} if array else {}), "status": "ok",
                                                 "time_us": 10 + crc % 1000 / 100, "floor_fraction": 0.5})
            time.sleep(0.005)
            done += 1
        return done

    class OneGpu(tune_run.GpuRunner):
        def __init__(self, need_gpu=True):
            self.arch, self.device = "sm_90", DEVICE

    monkeypatch.setattr(tune_small, "_time_chunk", time_chunk)
    monkeypatch.setattr(tune_small, "verify_winners", lambda *args, **kw: 0)   # (nvcc)
    monkeypatch.setattr(tune_run, "make_runner", OneGpu)
    monkeypatch.setattr(tune_run, "CHUNK", 1)   # a shape a piece: 4 pieces a stage
    monkeypatch.setattr(workers, "worker_gpu", lambda: ("sm_90", DEVICE))
    monkeypatch.setattr(workers, "CONNECT_SECONDS", 1)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(scope="module")
def cluster():
    """Two workers of two threads in this process (so that the fakes above are theirs too)."""
    with distributed.LocalCluster(n_workers=2, threads_per_worker=2, processes=False, protocol="tcp",
                                  host="127.0.0.1", dashboard_address=None) as c:
        yield c


def _tune(*args):
    return CliRunner().invoke(main, [*RUN, *args])


def _rows(folder):
    return (folder / tune_plan.RESULTS["small"]).read_text().splitlines()


def _table(folder):
    return json.loads((folder / "nvidia-fake-gpu-80gb.json").read_text())["small"]


def _one_gpu_run(fake):
    reference = _tune("--results", "one")
    assert reference.exit_code == 0, reference.output
    return _rows(fake / "one"), _table(fake / "one")


def test_a_cluster_run_gives_the_rows_and_table_of_a_one_gpu_run(fake, cluster):
    rows, table = _one_gpu_run(fake)
    result = _tune("--scheduler", cluster.scheduler_address, "--results", "two")
    assert result.exit_code == 0, result.output
    assert _rows(fake / "two") == rows   # the same rows, in the same order
    assert _table(fake / "two") == table
    summary = result.output[result.output.index("# workers"):]
    assert summary.startswith(f"# workers (2 GPUs of {DEVICE})") and "wall time" in summary
    assert summary.count("compiling") == 4 and "idle" in summary and "this machine" in summary
    assert "small squares" in result.output and "# summary" in result.output


def test_a_budget_stops_the_cluster_and_the_same_command_goes_on(fake, cluster):
    rows, table = _one_gpu_run(fake)
    first = _tune("--scheduler", cluster.scheduler_address, "--budget", "0.3s")
    assert first.exit_code == tune_run.BUDGET_STOPPED, first.output
    assert f"to go on: gemmgen tune --families small --precisions d --sizes 2-5 --scheduler " \
           f"{cluster.scheduler_address} --results gemmgen-tuning --budget 0.3s" in first.output
    stopped = _rows(fake / "gemmgen-tuning")
    assert 0 < len(stopped) < len(rows)
    again = _tune("--scheduler", cluster.scheduler_address)
    assert again.exit_code == 0, again.output
    assert sorted(_rows(fake / "gemmgen-tuning")) == sorted(rows)   # each variant timed once
    assert _table(fake / "gemmgen-tuning") == table


def test_a_piece_that_fails_keeps_the_pieces_before_it_and_a_run_again_resumes(fake, cluster, monkeypatch):
    rows, _ = _one_gpu_run(fake)
    real = tune_small._time_chunk

    def failing(todo, *args, **kwargs):
        if todo[0].m == 4:
            raise RuntimeError("the fake worker died")
        return real(todo, *args, **kwargs)

    monkeypatch.setattr(tune_small, "_time_chunk", failing)
    failed = _tune("--scheduler", cluster.scheduler_address)
    assert failed.exit_code != 0 and "the fake worker died" in str(failed.exception)
    kept = _rows(fake / "gemmgen-tuning")
    assert kept and all('"m": 4' not in r for r in kept)
    state = json.loads((fake / "gemmgen-tuning" / "state.json").read_text())
    assert not state["stages"]["small squares"]["complete"]
    monkeypatch.setattr(tune_small, "_time_chunk", real)
    again = _tune("--scheduler", cluster.scheduler_address)
    assert again.exit_code == 0, again.output
    assert sorted(_rows(fake / "gemmgen-tuning")) == sorted(rows)


@pytest.fixture
def fake_wmma(fake, monkeypatch):
    """The wmma stages with the library's build (nvcc) and the pieces' checks and timings (the GPU)
    made up: each result follows from the variant's name and the point."""
    from gemmgen.harness.wmma import tune as wmma_tune

    def build_library(root, build_dir, archs, jobs, sources, library_name="lib.so", **kwargs):
        return type("Built", (), {"library": build_dir / library_name, "failures": {}, "local_memory_kernels": []})()

    def check_piece(specs, results_path, jobs, stop, library, base):
        for spec in specs:
            if zlib.crc32(spec.name.encode()) % 13 == 0:
                append_result(results_path, {**base, "name": spec.name, "precision": spec.precision, "stage": "check",
                                             "status": "wrong-answer", "reason": "fake"})
        return len(specs)

    def time_piece(piece, results_path, jobs, stop, library, base):
        assert library.startswith("/") or results_path.name != "rows.jsonl"
        stage, reps, prec, kind, size, specs = piece
        made = 0
        for spec in specs:
            if stop():
                break
            m, n, k = wmma_tune.shape_of(kind, size)
            append_result(results_path, {**base, "name": spec.name, "family": spec.family, "precision": prec,
                                         "kind": kind, "size": size, "m": m, "n": n, "k": k, "stage": stage,
                                         "status": "ok", "time_us": 10 + zlib.crc32(f"{spec.name} {size}".encode()) % 997,
                                         "floor_fraction": 0.5, "batch": 100, "tflops": 1.0, "bytes": 1})
            made += 1
        return made

    def final_piece(piece, results_path, jobs, stop, library, base):
        prec, kind, size, pair = piece
        for name, family, spec in pair:
            for beta in (0.0, 1.0):
                append_result(results_path, {**base, "name": name, "family": family, "precision": prec, "kind": kind,
                                             "size": size, "beta": beta, "status": "ok", "floor_fraction":
                                             0.5 + zlib.crc32(f"{name} {size} {beta}".encode()) % 100 / 1000,
                                             "time_us": 10.0})
        return 2 * len(pair)

    monkeypatch.setattr(wmma_tune, "_write_sources", lambda root, specs, bundle: [])
    monkeypatch.setattr(wmma_tune, "build_library", build_library)
    monkeypatch.setattr(wmma_tune, "check_piece", check_piece)
    monkeypatch.setattr(wmma_tune, "time_piece", time_piece)
    monkeypatch.setattr(wmma_tune, "final_piece", final_piece)
    return fake


WMMA = ["tune", "--families", "wmma", "--precisions", "h"]


def _one_gpu_and_cluster(folder, run: list[str], family: str, cluster):
    """The same run on one GPU (into folder/one) and on the cluster (folder/two): each one's results
    rows and table section, and the cluster run's output."""
    one = CliRunner().invoke(main, [*run, "--results", "one"])
    assert one.exit_code == 0, one.output
    two = CliRunner().invoke(main, [*run, "--scheduler", cluster.scheduler_address, "--results", "two"])
    assert two.exit_code == 0, two.output
    rows = {name: (folder / name / tune_plan.RESULTS[family]).read_text().splitlines() for name in ("one", "two")}
    tables = {name: json.loads((folder / name / "nvidia-fake-gpu-80gb.json").read_text())[family]
              for name in ("one", "two")}
    return rows, tables, two.output


def test_the_wmma_stages_are_split_and_give_the_one_gpu_rows_and_table(fake_wmma, cluster):
    rows, tables, output = _one_gpu_and_cluster(fake_wmma, WMMA, "wmma", cluster)
    stages = {json.loads(r).get("stage") for r in rows["one"]}
    assert {"check", "coarse", "fine", "final"} <= stages
    # the same rows in the same order, but the final stage's, which name the run (its start, in seconds)
    strip = [[r for r in rows[name] if '"stage": "final"' not in r] for name in ("one", "two")]
    assert strip[0] == strip[1]
    assert sum('"stage": "final"' in r for r in rows["one"]) == sum('"stage": "final"' in r for r in rows["two"]) > 0
    assert tables["one"] == tables["two"]
    assert "# workers (2 GPUs" in output


def _stopped_then_resumed(run: list[str], budget: str, cluster, stopped=lambda: None) -> None:
    """The run on one GPU (into ./one), then on the cluster into ./gemmgen-tuning stopped by `budget`
    (`stopped()` asserts what the stop left), then the same command again to its end."""
    one = CliRunner().invoke(main, [*run, "--results", "one"])
    assert one.exit_code == 0, one.output
    first = CliRunner().invoke(main, [*run, "--scheduler", cluster.scheduler_address, "--budget", budget])
    assert first.exit_code == tune_run.BUDGET_STOPPED, first.output
    stopped()
    again = CliRunner().invoke(main, [*run, "--scheduler", cluster.scheduler_address])
    assert again.exit_code == 0, again.output


def test_a_budget_stops_the_wmma_sweep_between_pieces_and_a_run_again_completes_it(fake_wmma, cluster):
    _stopped_then_resumed(WMMA, "0.5s", cluster)

    def timings(folder):   # each point's timing once (the check runs again in a run again)
        rows = [json.loads(r) for r in (fake_wmma / folder / tune_plan.RESULTS["wmma"]).read_text().splitlines()]
        return sorted((r["name"], r["kind"], r["size"], r["stage"]) for r in rows if r.get("stage") in ("coarse", "fine"))

    assert timings("gemmgen-tuning") == timings("one")


@pytest.fixture
def fake_tallskinny(fake, monkeypatch):
    """The tall-skinny sweep with the library's build (nvcc) and each piece's timings (the GPU) made up:
    every timing follows from the variant's name and the point, a little sleep each piece."""
    from gemmgen.harness.tallskinny import build, tune as tune_tallskinny

    def build_tallskinny(out_dir, build_dir, *args, **kwargs):
        return type("Built", (), {"library": build_dir / "libfake.so", "local_memory_kernels": []})(), []

    def time_piece(piece, results_path, jobs, stop, library, base, done, refused, bandwidth):
        assert library.endswith("libfake.so") and (results_path.name != "rows.jsonl" or library.startswith("/"))
        family, prec, n = piece[:3]
        if family == "cutoff":
            points = [(spec, split, tune_tallskinny.CUTOFF_M, k) for k in tune_tallskinny.CUTOFF_KS
                      for spec, split in ((piece[3], 0), (piece[4], piece[5]))]
        elif family == "tsm2":
            points = [(spec, 0, size, size) for spec in tallskinny.tsm2_sweep(prec, n)
                      for size in tune_tallskinny.TSM2_SHAPES]
        else:
            points = [(spec, tcf, m, n) for spec in tallskinny.ism2_sweep(prec, n)
                      for m in tune_tallskinny.ISM2_MS for tcf in tallskinny.ISM2_SWEEP_TCF]
        timed = 0
        for spec, split, m, k in points:
            if stop():
                break
            stage = family if family != "cutoff" else "cutoff"
            if (spec.name, stage, m, k, split) in done:
                continue
            row = {**base, "stage": stage, "name": spec.name, "family": spec.family, "precision": prec, "n": n,
                   "t1": spec.t1, "t2": spec.t2, "t3": spec.t3, "split": split, "m": m, "k": k}
            row.update({"opt": spec.opt} if spec.family == "ism2" else {"rows": spec.rows, "stages": spec.stages})
            crc = zlib.crc32(f"{spec.name} {m} {k} {split}".encode())
            append_result(results_path, {**row, "status": "ok", "time_us": 100 + crc % 1000,
                                         "floor_fraction": 0.5 + crc % 400 / 1000})
            timed += 1
        time.sleep(0.01)
        return timed

    monkeypatch.setattr(build, "build_tallskinny", build_tallskinny)
    monkeypatch.setattr(tune_tallskinny, "time_piece", time_piece)
    return fake


TALLSKINNY = ["tune", "--families", "tallskinny", "--precisions", "s,d"]


def test_the_tallskinny_sweep_is_split_and_gives_the_one_gpu_table(fake_tallskinny, cluster):
    rows, tables, output = _one_gpu_and_cluster(fake_tallskinny, TALLSKINNY, "tallskinny", cluster)
    assert rows["one"] == rows["two"]   # the pieces' rows, in the pieces' order
    assert any('"stage": "cutoff"' in r for r in rows["one"])
    assert tables["one"] == tables["two"] and {r["precision"] for r in tables["one"]} == {"s", "d"}
    assert "# workers (2 GPUs" in output


def test_a_budget_stops_the_split_tallskinny_sweep_and_a_run_again_completes_it(fake_tallskinny, cluster):
    def no_table():
        assert not (fake_tallskinny / "gemmgen-tuning" / "nvidia-fake-gpu-80gb.json").exists()

    _stopped_then_resumed(TALLSKINNY, "0.02s", cluster, no_table)
    done = (fake_tallskinny / "gemmgen-tuning" / tune_plan.RESULTS["tallskinny"]).read_text().splitlines()
    assert sorted(done) == sorted((fake_tallskinny / "one" / tune_plan.RESULTS["tallskinny"]).read_text().splitlines())


def test_gpus_starts_a_worker_process_per_gpu(fake, monkeypatch):
    rows, table = _one_gpu_run(fake)
    monkeypatch.setattr(workers, "gpu_count", lambda: 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,7")   # --gpus counts in these

    def visible():
        import os

        return "sm_90", f"{DEVICE}|{os.environ['CUDA_VISIBLE_DEVICES']}"

    monkeypatch.setattr(workers, "worker_gpu", visible)
    result = CliRunner().invoke(main, [*RUN, "--gpus", "all", "--results", "two"])
    # each worker process sees its own GPU: the device names differ, and such a cluster is refused
    assert result.exit_code == 1
    assert result.output.startswith("Error: the workers' GPUs differ (")
    assert f"{DEVICE}|5 (sm_90); {DEVICE}|7 (sm_90)" in result.output
    assert not (fake / "two").exists()

    monkeypatch.setattr(workers, "worker_gpu", lambda: ("sm_90", DEVICE))
    result = CliRunner().invoke(main, [*RUN, "--gpus", "2", "--results", "two"])
    assert result.exit_code == 0, result.output
    assert _rows(fake / "two") == rows and _table(fake / "two") == table
    assert "# workers (2 GPUs" in result.output


def test_an_unreachable_scheduler_is_one_line_and_keeps_the_results(fake):
    folder = fake / "gemmgen-tuning"
    append_result(folder / tune_plan.RESULTS["small"], {"name": "x", "device": DEVICE})
    before = sorted((p.name, p.read_bytes()) for p in folder.iterdir())
    result = _tune("--scheduler", "tcp://127.0.0.1:1")
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "Error: --scheduler tcp://127.0.0.1:1: no scheduler answered in 1 s (OSError)"]
    assert sorted((p.name, p.read_bytes()) for p in folder.iterdir()) == before


@pytest.mark.parametrize("args, message", [
    (["--gpus", "x"], "bad --gpus 'x'"),
    (["--gpus", "3"], "--gpus 3: this machine has 2 GPUs (indices 0-1)"),
    (["--gpus", "0,2"], "--gpus 0,2: this machine has 2 GPUs"),
    (["--gpus", "0,0"], "bad --gpus '0,0'"),
    (["--gpus", "0"], "bad --gpus '0'"),
    (["--scheduler", "nowhere"], "bad --scheduler 'nowhere': write tcp://HOST:PORT"),
    (["--scheduler", "tcp://127.0.0.1:1", "--gpus", "2"], "--gpus or --scheduler, not both"),
])
def test_bad_gpus_or_scheduler_is_one_line(fake, monkeypatch, args, message):
    monkeypatch.setattr(workers, "gpu_count", lambda: 2)
    result = _tune(*args)
    assert result.exit_code != 0
    assert len(result.output.strip().splitlines()) == 1 and message in result.output, result.output
    assert not (fake / "gemmgen-tuning").exists()


@pytest.mark.parametrize("args", [["--gpus", "2"], ["--scheduler", "tcp://127.0.0.1:1"]])
def test_without_dask_several_gpus_give_the_install_hint(fake, monkeypatch, args):
    monkeypatch.setattr(workers, "gpu_count", lambda: 2)
    monkeypatch.setitem(sys.modules, "distributed", None)   # (import distributed: ImportError)
    result = _tune(*args)
    assert result.exit_code == 1
    assert result.output == 'Error: several GPUs need Dask distributed: pip install "gemmgen[tune]"\n'
    assert _tune().exit_code == 0   # one GPU needs no Dask


def test_the_plan_says_where_each_stage_runs():
    result = CliRunner().invoke(main, ["tune", "--plan", "--precisions", "h,d", "--sizes", "1-2"])
    where = {}
    stage = None
    for line in result.output.splitlines():
        if line[:3].strip().rstrip(".").isdigit():
            stage = line.split(". ", 1)[1]
        elif line.strip().startswith("gpus:"):
            where[stage] = line.split(":", 1)[1].strip()
    assert where["small squares"].startswith("split over the GPUs")
    assert where["wmma sweep"] == where["wmma final"] == where["tallskinny sweep"] == (
        "compiled on this machine (nvcc, one library), then timed in pieces split over the GPUs (--gpus), "
        "one a GPU at a time")
    assert where["wmma table"] == where["small table"] == "this machine (nvcc, no GPU)"
    assert where["cpu blocking"] == "this machine's CPU, one timing at a time"
    assert CliRunner().invoke(main, ["tune", "--plan", "--gpus", "2"]).exit_code == 2
