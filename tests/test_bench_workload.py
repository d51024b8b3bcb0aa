"""`gemmgen bench workload` without a GPU: the grid it times, the tables and summary it writes from a
run's JSON (what --from-json does), and its refusal to measure where no GPU is present."""
import json

from click.testing import CliRunner

from gemmgen.cli import main
from gemmgen.generator.precision import PRECISION_ORDER
from gemmgen.harness import bench_workload as bw
from gemmgen.harness.core.workload import batch_for_megabytes, bytes_moved
from gemmgen.harness.core import workload


def test_full_grid_has_every_small_size_and_the_unaligned_large_ones():
    points = bw.grid()
    for prec in PRECISION_ORDER:
        sizes = {p.m for p in points if p.family == "small" and p.prec == prec and p.m == p.n == p.k}
        assert sizes == set(range(1, 33)), prec
        assert {(p.m, p.n, p.k) for p in points if p.family == "rect" and p.prec == prec} == set(bw.RECT_SHAPES)
    for prec in ("h", "hc"):
        large = {p.m for p in points if p.family == "large" and p.prec == prec}
        assert {33, 63, 100, 129, 200, 250, 256} <= large
    assert not any(p.family == "large" and p.prec not in ("h", "hc") for p in points)


def test_three_launch_sizes_per_batched_shape():
    points = bw.grid(big_megabytes=300)
    for prec, shape in (("h", (7, 7, 7)), ("z", (32, 32, 32)), ("hc", (250, 250, 250)), ("s", (7, 29, 13))):
        launches = {p.launch: p.batch for p in points if p.prec == prec and (p.m, p.n, p.k) == shape}
        assert launches == {"batch 1000": 1000, "50 MB": batch_for_megabytes(prec, *shape, 50),
                            "300 MB": batch_for_megabytes(prec, *shape, 300)}
        footprint = bytes_moved(prec, *shape, launches["300 MB"], False)
        assert 0.95 * 300e6 < footprint <= 300e6 or launches["300 MB"] == 1


def test_tallskinny_grid():
    points = [p for p in bw.grid() if p.family == "tallskinny"]
    assert {p.prec for p in points} == {"h", "s", "d"}
    assert all(p.m == p.k and p.batch == 1 for p in points)
    for prec in ("h", "s", "d"):
        ns = {m: sorted(p.n for p in points if p.prec == prec and p.m == m) for m in (12345, 20000, 50000)}
        assert ns == {12345: [1, 2, 4, 8, 16, 32], 20000: list(range(1, 33)), 50000: [1, 2, 4, 8, 16, 32]}


def test_quick_is_a_small_subset_and_filters_apply():
    full, quick = bw.grid(), bw.grid(quick=True)
    assert set(quick) < set(full) and len(quick) < len(full) / 4
    assert len({p.m for p in quick if p.family == "tallskinny"}) == 1
    only = bw.grid(precisions=("s", "hc"), families=("small", "large"))
    assert {p.prec for p in only} == {"s", "hc"} and {p.family for p in only} == {"small", "large"}


def test_rotation_exceeds_200_mb_where_a_graph_can():
    for point in bw.grid():
        if point.family == "tallskinny":
            continue
        sets, launches = bw.rotation(point)
        footprint = bytes_moved(point.prec, point.m, point.n, point.k, point.batch, False)
        assert sets <= launches and sets * footprint <= max(footprint, workload.ROTATE_LIMIT_BYTES)
        assert sets * footprint > workload.ROTATE_BYTES or sets == workload.MAX_LAUNCHES_PER_GRAPH


def _result(ours_floor, ratio, baseline="cublas", copy=None):
    ours_ms = 1.0
    r = {"bytes": 1000, "ours": {"ms": ours_ms, "floor_fraction": ours_floor},
         baseline: {"ms": ratio * ours_ms, "floor_fraction": ours_floor / ratio}, "ratio": ratio}
    if copy is not None:
        r["copy_kernel"] = {"ms": copy}
        r["copy_fraction"] = copy / ours_ms
    return r


def _row(family, prec, m, n, k, launch, beta0, beta1, baseline="cublas"):
    return {"family": family, "prec": prec, "m": m, "n": n, "k": k, "launch": launch, "batch": 1000,
            "sets": 32, "launches_per_graph": 32, "rotated_mb": 250.0, "kernel": f"small_{prec}_{m}",
            "baseline": baseline, "beta0": beta0, "beta1": beta1}


FAKE = {
    "device": "NVIDIA Fake 80GB", "arch": "sm_90", "copy_bandwidth_gbs": 2900.0, "command": "gemmgen bench workload",
    "git_commit": "abc", "timing": {"rotate_mb": 200.0}, "complete": True,
    "rows": [
        _row("small", "s", 7, 7, 7, "batch 1000", _result(0.8, 2.5, copy=0.9), _result(0.7, 0.93, copy=0.6)),
        _row("small", "s", 8, 8, 8, "batch 1000", _result(0.9, 0.81), _result(0.85, 1.2)),
        _row("small", "s", 8, 8, 8, "256 MB", _result(0.95, 1.1), _result(0.6, 1.05)),
        _row("rect", "s", 7, 29, 13, "256 MB", {"bytes": 1, "ours": {"error": bw.NOT_GENERATED},
                                                 "cublas": {"ms": 1.0, "floor_fraction": 0.3}},
             {"bytes": 1, "ours": {"error": bw.NOT_GENERATED}, "cublas": {"error": "CUBLAS_STATUS_NOT_SUPPORTED"}}),
        _row("large", "hc", 129, 129, 129, "50 MB", _result(0.5, 3.0, "cublas_planar"),
             _result(0.45, 0.99, "cublas_planar"), baseline="cublas_planar"),
        _row("tallskinny", "d", 20000, 8, 20000, "single GEMM", _result(0.9, 0.97), _result(0.88, 0.95)),
        {"family": "tallskinny", "prec": "d", "m": 50000, "n": 32, "k": 50000, "launch": "single GEMM", "batch": 1,
         "error": "Out of memory allocating 20,000,000,000 bytes"},
    ]}


def test_summary_is_computed_from_the_rows():
    lines = bw.summary(FAKE)
    s_batch = next(line for line in lines if line.startswith("| s | batch 1000 |"))
    assert "| 4 of 4 | 0.81 (8 β=0) | 0.70 (7 β=1) | 7 (β=1), 8 (β=0) |" in s_batch
    s_big = next(line for line in lines if line.startswith("| s | 256 MB |"))
    assert "| 2 of 4 | 1.05 (8 β=1) | 0.60 (8 β=1) | – |" in s_big
    hc = next(line for line in lines if line.startswith("| hc | 50 MB |"))
    assert "0.99 (129 β=1)" in hc and "| 129 (β=1) |" in hc
    d = next(line for line in lines if line.startswith("| d | single GEMM |"))
    assert "20000×8×20000 (β=0,1)" in d
    order = [line.split("|")[1:3] for line in lines[2:]]
    assert order == [[" hc ", " 50 MB "], [" s ", " batch 1000 "], [" s ", " 256 MB "], [" d ", " single GEMM "]]


def test_from_json_renders_tables_without_a_gpu(tmp_path):
    path = tmp_path / "workload_sm_90_nvidia-fake-80gb.json"
    path.write_text(json.dumps(FAKE))
    result = CliRunner().invoke(main, ["bench", "workload", "--from-json", str(path)])
    assert result.exit_code == 0, result.output
    text = path.with_suffix(".md").read_text()
    assert "# gemmgen bench workload on NVIDIA Fake 80GB (sm_90)" in text
    assert "| s | 7 | batch 1000 | 1000 | 0 | 0.80 / 0.32 | 2.50 | 0.90 | small_s_7 |" in text
    assert "| s | 7×29×13 | 256 MB | 1000 | 0 | not generated / 0.30 | – | – | small_s_7 |" in text
    assert "| hc | 129 | 50 MB | 1000 | 1 | 0.45 / 0.45 | 0.99 | – |" in text
    assert "| cublas | CUBLAS_STATUS_NOT_SUPPORTED | 1 |" in text
    assert "| d | 50000×32×50000 | single GEMM | 1 | – | error | – | – | – |" in text
    assert "| point | Out of memory allocating 20,000,000,000 bytes | 1 |" in text
    for title in ("## Small family", "## h and hc squares past 32", "## Rectangular", "## Tall-skinny"):
        assert title in text


def test_refuses_without_a_gpu(monkeypatch):
    import gemmgen.harness.core.toolchain

    monkeypatch.setattr(gemmgen.harness.core.toolchain, "gpu_available", lambda: False)
    result = CliRunner().invoke(main, ["bench", "workload", "--quick"])
    assert result.exit_code != 0
    message = result.output.strip()
    assert "\n" not in message and "no GPU present" in message


def test_bad_filters_are_refused():
    result = CliRunner().invoke(main, ["bench", "workload", "--families", "small,huge"])
    assert result.exit_code != 0 and "--families" in result.output
