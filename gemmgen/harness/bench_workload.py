"""`gemmgen bench workload`: what a user of the library sees, against cuBLAS, in one run on the
same buffers.  Every timing goes through the public C API (gemmgen_?gemm_batched_strided,
gemmgen_?gemm_tallskinny), so the dispatch chooses the kernel, as it does for a user.

The grid (`full`; `--quick` takes a few points of each part):
- small: every precision, every square 1..32;
- large: h and hc squares past 32, most of them with columns off 16-byte boundaries;
- rect: a few rectangular shapes in every precision, odd ones among them;
- tallskinny: one GEMM with m = k large and n = 1..32, in h, s and d.
Every batched point is timed at three launch sizes (a batch of 1,000 GEMMs, a launch of about
50 MB, one far past L2) with beta = 0 and beta = 1; a tall-skinny point is one GEMM, beta = 0
and 1.  Timing is docs/design.md's (Measurement): CUDA graphs of several launches, medians, the
operands rotated over copies so a graph's launches do not read what the previous launch left in
L2, cuBLAS on the same buffers, the copy bandwidth of the same run.  At batch 1,000 a copy kernel
that moves the same bytes is timed too: how far we are from a kernel that only moves the data.

Writes workload_<arch>_<device>.{json,md,png}; `render` rewrites the .md and .png from a JSON."""
from __future__ import annotations

import json
import math
import re
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import click

from gemmgen.generator.precision import PRECISION_ORDER

from gemmgen.harness.tallskinny import workload as ts
from gemmgen.harness.core.timing import copy_kernel_launch, copy_bandwidth, headless_pyplot, timed
from gemmgen.harness.core.workload import (MAX_LAUNCHES_PER_GRAPH, ROTATE_BYTES, Workload, batch_for_megabytes,
                                           bytes_moved, flops, rotation_sets)

FAMILIES = ("small", "large", "rect", "tallskinny")
SMALL_SIZES = tuple(range(1, 33))
# Past 32 the h/hc dispatch turns to the wmma kernels.  A size that is no multiple of 8 (h) or 4 (hc)
# puts the columns of A, B and C off 16-byte boundaries, which the vector loads and the cp.async
# rings want: h 33, 63, 100, 129, 250, hc 33, 63, 129, 250 (and 250's matrices start off them too).
# Those are the sizes a tuning on aligned sizes can miss; the aligned ones are there to compare.
LARGE_SIZES = (33, 40, 48, 63, 64, 100, 128, 129, 200, 250, 256)
LARGE_PRECISIONS = ("h", "hc")
# m×n×k: a wide-short product, a deep one, an odd one, a matrix-vector product and a row times a
# matrix.  s, d, c, z have them only where the set was generated with --shapes.
RECT_SHAPES = ((16, 32, 8), (24, 8, 40), (7, 29, 13), (32, 1, 32), (1, 32, 32))
TALLSKINNY_PRECISIONS = ("h", "s", "d")
POWERS_OF_TWO_N = (1, 2, 4, 8, 16, 32)
TALLSKINNY_FULL = {12345: POWERS_OF_TWO_N, 20000: tuple(range(1, 33)), 50000: POWERS_OF_TWO_N}

QUICK_SMALL = (1, 7, 16, 32)
QUICK_LARGE = (100, 129, 256)
QUICK_RECT = ((16, 32, 8), (7, 29, 13))
QUICK_TALLSKINNY = {12345: (1, 8, 32)}

BATCH = 1000
BATCH_LABEL = f"batch {BATCH}"
MID_MEGABYTES = 50
BIG_MEGABYTES = 256
SINGLE_LABEL = "single GEMM"
BETAS = (0.0, 1.0)

LAUNCHES_PER_GRAPH = 10
REPEATS = 11

# hc: cuBLAS has no interleaved fp16 complex GEMM, so the ratio is against the planar one
# (four fp16 GEMMs, as bench wmma does); the interleaved call is timed too, its refusal kept.
BASELINE = {p: "cublas_planar" if p == "hc" else "cublas" for p in PRECISION_ORDER}
NOT_GENERATED = "not generated in this set"


@dataclass(frozen=True)
class Point:
    """One launch configuration: a shape in a precision at one launch size (batch 1 for tall-skinny)."""
    family: str
    prec: str
    m: int
    n: int
    k: int
    launch: str     # "batch 1000", "50 MB", "256 MB" or "single GEMM"
    batch: int

    @property
    def size(self) -> str:
        return str(self.m) if self.m == self.n == self.k else f"{self.m}×{self.n}×{self.k}"


def launch_sizes(prec: str, m: int, n: int, k: int, big_megabytes: int = BIG_MEGABYTES) -> list[tuple[str, int]]:
    """The three launches of a batched shape: 1,000 GEMMs, about 50 MB, and `big_megabytes` (far past L2)."""
    return [(BATCH_LABEL, BATCH),
            (f"{MID_MEGABYTES} MB", batch_for_megabytes(prec, m, n, k, MID_MEGABYTES)),
            (f"{big_megabytes} MB", batch_for_megabytes(prec, m, n, k, big_megabytes))]


def grid(quick: bool = False, precisions=PRECISION_ORDER, families=FAMILIES,
         big_megabytes: int = BIG_MEGABYTES) -> list[Point]:
    """Every point to time, family by family, precision by precision."""
    small = QUICK_SMALL if quick else SMALL_SIZES
    large = QUICK_LARGE if quick else LARGE_SIZES
    rect = QUICK_RECT if quick else RECT_SHAPES
    tallskinny = QUICK_TALLSKINNY if quick else TALLSKINNY_FULL
    shapes: dict[str, list] = {
        "small": [(p, (s, s, s)) for p in precisions for s in small],
        "large": [(p, (s, s, s)) for p in precisions if p in LARGE_PRECISIONS for s in large],
        "rect": [(p, shape) for p in precisions for shape in rect]}
    points = []
    for family in families:
        if family == "tallskinny":
            points += [Point(family, p, m, n, m, SINGLE_LABEL, 1) for p in precisions if p in TALLSKINNY_PRECISIONS
                       for m, ns in tallskinny.items() for n in ns]
            continue
        for prec, shape in shapes[family]:
            points += [Point(family, prec, *shape, label, batch)
                       for label, batch in launch_sizes(prec, *shape, big_megabytes)]
    return points


def rotation(point: Point) -> tuple[int, int]:
    """(sets, launches per graph): core.workload.rotation_sets copies of the launch's A, B and C,
    and at least as many launches in a graph (a graph replays the same pointers, so more copies than
    launches would never be read)."""
    sets = rotation_sets(bytes_moved(point.prec, point.m, point.n, point.k, point.batch, False))
    return sets, max(LAUNCHES_PER_GRAPH, sets)


# --- measurement (GPU) ---------------------------------------------------------------------------

def _add_figures(result: dict, flop_count: float, nbytes: int, bandwidth: float) -> dict:
    if "ms" in result:
        result["gflops"] = flop_count / (result["ms"] * 1e-3) / 1e9
        result["floor_fraction"] = nbytes / bandwidth / (result["ms"] * 1e-3)
    return result


def _ratios(result: dict, prec: str) -> None:
    """ratio = baseline time / our time (> 1: we are faster); copy_fraction = copy-kernel time / ours."""
    ours = result["ours"].get("ms")
    if ours is None:
        return
    base = result.get(BASELINE[prec], {}).get("ms")
    if base is not None:
        result["ratio"] = base / ours
    if prec == "hc" and "ms" in result.get("cublas", {}):
        result["ratio_cublas_interleaved"] = result["cublas"]["ms"] / ours
    if "ms" in result.get("copy_kernel", {}):
        result["copy_fraction"] = result["copy_kernel"]["ms"] / ours


def measure_batched(lib, point: Point, bandwidth: float) -> dict:
    """One batched point: ours, cuBLAS (and planar cuBLAS for hc) and, at batch 1000, the same-bytes
    copy kernel, with beta = 0 and 1, all on one allocation."""
    import cupy as cp

    from gemmgen.harness.wmma.bench import Planar

    prec, m, n, k, batch = point.prec, point.m, point.n, point.k, point.batch
    sets, launches = rotation(point)
    footprint = bytes_moved(prec, m, n, k, batch, False)
    row = {**asdict(point), "sets": sets, "launches_per_graph": launches,
           "rotated_mb": sets * footprint / 1e6, "kernel": lib.selected_kernel_packed(prec, m, n, k, batch),
           "baseline": BASELINE[prec]}
    work = Workload(prec, m, n, k, batch, sets=sets)
    planar = Planar(work) if prec == "hc" else None
    copy_buffers = None
    if point.launch == BATCH_LABEL:
        # src and dst of a copy of half the bytes each way, one pair per set, sized for beta = 1
        half = -(-bytes_moved(prec, m, n, k, batch, True) // 32) * 16
        copy_buffers = (cp.empty(sets * half, dtype=cp.uint8), cp.empty(sets * half, dtype=cp.uint8))
        pairs = [(copy_buffers[0].data.ptr + i * half, copy_buffers[1].data.ptr + i * half) for i in range(sets)]
    public = getattr(lib.lib, f"gemmgen_{prec}gemm_batched_strided")
    generated = lib.is_generated(prec, m, n, k)
    timing = {"launches_per_graph": launches, "repeats": REPEATS}
    for beta in BETAS:
        nbytes = bytes_moved(prec, m, n, k, batch, beta != 0)
        result: dict = {"bytes": nbytes}
        result["ours"] = (timed(lambda: work.ours(public, 1.0, beta), **timing) if generated
                          else {"error": NOT_GENERATED})
        result["cublas"] = timed(lambda: work.cublas(1.0, beta), **timing)
        if planar is not None:
            result["cublas_planar"] = timed(lambda: planar.launch_factory(beta), **timing)
        if copy_buffers is not None:
            result["copy_kernel"] = timed(lambda: copy_kernel_launch(pairs, nbytes // 2), **timing)
        for who in ("ours", "cublas", "cublas_planar", "copy_kernel"):
            if who in result:
                _add_figures(result[who], flops(prec, m, n, k, batch), nbytes, bandwidth)
        _ratios(result, prec)
        row[f"beta{beta:g}"] = result
    work.release()
    if planar is not None:
        planar.release()
    del copy_buffers
    cp.get_default_memory_pool().free_all_blocks()
    return row


def measure_tallskinny(lib, point: Point, bandwidth: float, A=None) -> tuple[dict, object]:
    """One tall-skinny GEMM through gemmgen_?gemm_tallskinny and cuBLAS's plain GEMM, beta = 0 and 1,
    timed as `bench tallskinny` times them (TsWorkload: a graph holds every rotation set at least
    once).  A: the m×k operand of an earlier point of the same m, k, reused (filling one takes longer
    than timing it); the A this point used is returned for the next."""
    prec, m, n, k = point.prec, point.m, point.n, point.k
    work = ts.TsWorkload(prec, m, n, k, A=A)
    row = {**asdict(point), "sets": work.sets, "rotated_mb": work.sets * ts.bytes_moved(prec, m, n, k) / 1e6,
           "kernel": lib.tallskinny_selected_kernel(prec, m, n, k), "baseline": "cublas"}
    generated = lib.tallskinny_is_generated(prec, n)
    for beta in BETAS:
        nbytes = ts.bytes_moved(prec, m, n, k, beta != 0)
        result: dict = {"bytes": nbytes}
        result["ours"] = (timed(lambda: work.public(lib, 1.0, beta), timer=work.time_ms) if generated
                          else {"error": NOT_GENERATED})
        result["cublas"] = timed(lambda: work.cublas(1.0, beta), timer=work.time_ms)
        for who in ("ours", "cublas"):
            _add_figures(result[who], ts.flops(m, n, k), nbytes, bandwidth)
        _ratios(result, prec)
        row[f"beta{beta:g}"] = result
    shared_A = work.A[0]
    work.release()
    return row, shared_A


def estimated_seconds(point: Point) -> float:
    """A rough cost of a point on an H100, for the progress lines' estimate of what is left: per
    timing a fixed overhead (graph capture, instantiation) and its launches at an assumed 1 TB/s
    (ours near the floor, cuBLAS often far from it), plus filling the buffers."""
    overhead_s, stream_bps, fill_bps = 0.004, 1e12, 2e11
    if point.family == "tallskinny":
        nbytes, launches, timings = ts.bytes_moved(point.prec, point.m, point.n, point.k), 22, 2
        # A is filled once per m, at its first n (n = 1 in both grids), and reused for the others
        fill = point.m * point.k * 4 / fill_bps if point.n == 1 else 0.0
    else:
        sets, per_graph = rotation(point)
        nbytes = bytes_moved(point.prec, point.m, point.n, point.k, point.batch, False)
        launches = per_graph * (REPEATS + 1) + 2
        timings = 2 + (point.prec == "hc") + (point.launch == BATCH_LABEL)
        fill = 0.01 + sets * nbytes * (2 if point.prec == "hc" else 1) / fill_bps
    per_timing = overhead_s + launches * (5e-6 + nbytes / stream_bps)
    return fill + len(BETAS) * timings * per_timing


def _echo_point(i: int, total: int, row: dict, spent: float, left: float) -> None:
    if "error" in row:
        click.echo(f"[{i}/{total}] {row['family']} {row['prec']} {_point_size(row)} {row['launch']}: "
                   f"{row['error']}; {spent:.0f} s, about {left:.0f} s left")
        return

    def cell(beta: str) -> str:
        r = row[beta]
        floor = r["ours"].get("floor_fraction")
        ratio = r.get("ratio")
        return ((_fraction(floor) if floor is not None else r["ours"].get("error", "?")[:40])
                + (f" ×{ratio:.2f}" if ratio is not None else ""))
    extra = (f" (batch {row['batch']}, {row['sets']} set{'s' if row['sets'] > 1 else ''})"
             if row["family"] != "tallskinny" else "")
    click.echo(f"[{i}/{total}] {row['family']} {row['prec']} {_point_size(row)} {row['launch']}{extra}: "
               f"ours of floor and ratio to {row['baseline']}: β=0 {cell('beta0')}, β=1 {cell('beta1')}; "
               f"{spent:.0f} s, about {left:.0f} s left")


def _point_size(row: dict) -> str:
    return str(row["m"]) if row["m"] == row["n"] == row["k"] else f"{row['m']}×{row['n']}×{row['k']}"


def device_slug(device: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-")


def git_commit() -> str:
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True,
                                check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("+uncommitted changes" if dirty else "")


def run(lib, device: str, arch: str, points: list[Point], out_dir: Path, command: str) -> Path:
    """Time every point, writing the JSON as it goes (every 25 points: an interrupted run keeps what
    it measured), then the table and the plot."""
    import cupy as cp

    bandwidth = copy_bandwidth()
    props = cp.cuda.runtime.getDeviceProperties(0)
    click.echo(f"{device} ({arch}): device-to-device copy {bandwidth / 1e9:.0f} GB/s (read + write); "
               f"{len(points)} points, about {sum(map(estimated_seconds, points)):.0f} s by a rough estimate")
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"workload_{arch}_{device_slug(device)}"
    payload = {"device": device, "arch": arch, "l2_bytes": props.get("l2CacheSize"),
               "copy_bandwidth_gbs": bandwidth / 1e9, "command": command, "git_commit": git_commit(),
               "timing": {"launches_per_graph": LAUNCHES_PER_GRAPH, "max_launches_per_graph": MAX_LAUNCHES_PER_GRAPH,
                          "repeats": REPEATS, "rotate_mb": ROTATE_BYTES / 1e6},
               "complete": False, "rows": []}
    estimates = [estimated_seconds(p) for p in points]
    start = time.monotonic()
    shared_A = None
    for i, point in enumerate(points):
        try:
            if point.family == "tallskinny":
                previous = points[i - 1] if i else None
                if previous is None or (previous.family, previous.prec, previous.m) != (point.family, point.prec, point.m):
                    shared_A = None
                    cp.get_default_memory_pool().free_all_blocks()
                row, shared_A = measure_tallskinny(lib, point, bandwidth, shared_A)
            else:
                row = measure_batched(lib, point, bandwidth)
        except Exception as err:   # an allocation that fails is a result too; the next point frees it
            row = {**asdict(point), "error": str(err).splitlines()[0][:200] if str(err) else type(err).__name__}
            shared_A = None
            cp.get_default_memory_pool().free_all_blocks()
        payload["rows"].append(row)
        spent = time.monotonic() - start
        done_estimate = sum(estimates[:i + 1])
        _echo_point(i + 1, len(points), row, spent, spent / done_estimate * sum(estimates[i + 1:]))
        if (i + 1) % 25 == 0:
            stem.with_suffix(".json").write_text(json.dumps(payload, indent=1) + "\n")
    del shared_A
    payload["complete"] = True
    payload["seconds"] = round(time.monotonic() - start, 1)
    stem.with_suffix(".json").write_text(json.dumps(payload, indent=1) + "\n")
    render(stem.with_suffix(".json"))
    click.echo("\n".join(summary(payload)))
    click.echo(f"wrote {stem}.json, .md" + (", .png" if stem.with_suffix(".png").exists() else ""))
    return stem.with_suffix(".json")


# --- rendering (no GPU) ---------------------------------------------------------------------------

FAMILY_TITLES = {
    "small": "Small family: squares 1–32, every precision",
    "large": "h and hc squares past 32 (columns off 16-byte boundaries: h 33, 63, 100, 129, 250; hc 33, 63, 129, 250)",
    "rect": "Rectangular shapes (M×N×K)",
    "tallskinny": "Tall-skinny: one GEMM, M = K, through gemmgen_?gemm_tallskinny against cublasGemmEx",
}


def _measurements(payload: dict):
    """(row, beta label, result of that beta) for every row and beta of a payload."""
    for row in payload["rows"]:
        for beta in BETAS:
            key = f"beta{beta:g}"
            if key in row:
                yield row, f"{beta:g}", row[key]


def _fraction(x: float) -> str:
    """Two decimals, or two significant digits under 0.1 (a tiny launch at batch 1000 reaches 0.0007
    of the floor, which "0.00" would hide)."""
    return f"{x:.2f}" if x >= 0.095 else f"{x:.2g}"


def _floor_cell(result: dict, who: str) -> str:
    r = result.get(who, {})
    if "floor_fraction" in r:
        return _fraction(r["floor_fraction"])
    if r.get("error") == NOT_GENERATED:
        return "not generated"
    return "error" if "error" in r else "–"


def summary(payload: dict) -> list[str]:
    """Per precision and launch size: the lowest ratio to the baseline and the lowest fraction of the
    floor (with where), and every size where the baseline was faster — all from the rows."""
    lines = ["| prec | launch | measured | min ratio (where) | min floor, ours (where) | ratio < 1.0 at |",
             "|---|---|---|---|---|---|"]
    groups: dict[tuple[str, str], list] = {}
    for row, beta, result in _measurements(payload):
        groups.setdefault((row["prec"], row["launch"]), []).append((row, beta, result))

    def order(key):
        prec, launch = key
        number = re.match(r"(batch )?(\d+)", launch)
        launch_rank = (0 if launch.startswith("batch") else 1 if number else 2, int(number.group(2)) if number else 0)
        return (PRECISION_ORDER.index(prec) if prec in PRECISION_ORDER else 99, launch_rank)

    def where(row, beta):
        return f"{_point_size(row)} β={beta}"

    for key in sorted(groups, key=order):
        entries = groups[key]
        with_ratio = [e for e in entries if "ratio" in e[2]]
        with_floor = [e for e in entries if "floor_fraction" in e[2]["ours"]]
        min_ratio, min_floor = "–", "–"
        if with_ratio:
            row, beta, result = min(with_ratio, key=lambda e: e[2]["ratio"])
            min_ratio = f"{result['ratio']:.2f} ({where(row, beta)})"
        if with_floor:
            row, beta, result = min(with_floor, key=lambda e: e[2]["ours"]["floor_fraction"])
            min_floor = f"{_fraction(result['ours']['floor_fraction'])} ({where(row, beta)})"
        slower: dict[str, list[str]] = {}
        for row, beta, result in with_ratio:
            if result["ratio"] < 1.0:
                slower.setdefault(_point_size(row), []).append(beta)
        slower_text = ", ".join(f"{size} (β={','.join(betas)})" for size, betas in slower.items()) or "–"
        lines.append(f"| {key[0]} | {key[1]} | {len(with_ratio)} of {len(entries)} | {min_ratio} | {min_floor} "
                     f"| {slower_text} |")
    return lines


def markdown(payload: dict) -> str:
    lines = [f"# gemmgen bench workload on {payload['device']} ({payload['arch']})", "",
             f"Command: `{payload['command']}` (commit {payload.get('git_commit', 'unknown')}).", "",
             f"Copy bandwidth measured in the same run: {payload['copy_bandwidth_gbs']:.0f} GB/s (bytes read + "
             "written). **floor**: the bytes that must move (A and B read once, C written once, and read once "
             "more with β = 1) at that bandwidth; the columns give the fraction of it reached, ours / the "
             "baseline (1.0: as fast as a copy of the same bytes). **ratio**: baseline time / our time (> 1: "
             "gemmgen is faster). The baseline is cuBLAS's strided batched GEMM (cublasGemmStridedBatchedEx); "
             "for hc, four planar fp16 GEMMs (cuBLAS has no interleaved fp16 complex GEMM; that call's refusal "
             "is in the JSON); for tall-skinny, one cublasGemmEx. **copy kernel** (batch 1000 only): the time "
             "of a 16-byte copy kernel moving the same bytes / our time (1.0: we run as fast as the data "
             "can be moved by a kernel of that launch size). Launch sizes: 1,000 GEMMs, about 50 MB, and one "
             "far past L2. Each rotation copy of an operand starts on a 256-byte boundary, as its own "
             "allocation would. Times are medians of CUDA-graph replays; "
             "† marks launches whose rotated data stayed under "
             f"{payload.get('timing', {}).get('rotate_mb', ROTATE_BYTES / 1e6):.0f} MB (a graph's launches "
             "could not rotate more: some of their data may come from L2). The kernel is the one the dispatch "
             "chose.", ""]
    if not payload.get("complete", True):
        lines += ["**This run did not finish: the tables hold the points it measured.**", ""]
    lines += ["## Summary", "", *summary(payload), ""]
    rotate_mb = payload.get("timing", {}).get("rotate_mb", ROTATE_BYTES / 1e6)
    for family in FAMILIES:
        rows = [r for r in payload["rows"] if r["family"] == family]
        if not rows:
            continue
        lines += [f"## {FAMILY_TITLES[family]}", "",
                  "| prec | size | launch | batch | β | floor ours / baseline | ratio | copy kernel | kernel |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for row in rows:
            if "error" in row:   # the point could not be set up (see Errors)
                lines.append(f"| {row['prec']} | {_point_size(row)} | {row['launch']} | {row['batch']} | – "
                             f"| error | – | – | – |")
                continue
            dagger = "†" if row["family"] != "tallskinny" and row.get("rotated_mb", rotate_mb) < rotate_mb else ""
            for beta in BETAS:
                result = row.get(f"beta{beta:g}")
                if result is None:
                    continue
                lines.append(
                    f"| {row['prec']} | {_point_size(row)} | {row['launch']}{dagger} | {row['batch']} | {beta:g} "
                    f"| {_floor_cell(result, 'ours')} / {_floor_cell(result, row['baseline'])} "
                    f"| {format(result['ratio'], '.2f') if 'ratio' in result else '–'} "
                    f"| {format(result['copy_fraction'], '.2f') if 'copy_fraction' in result else '–'} "
                    f"| {row.get('kernel') or '–'} |")
        lines.append("")
    errors: dict[tuple[str, str], int] = {}
    for row in payload["rows"]:
        if "error" in row:
            errors[("point", row["error"])] = errors.get(("point", row["error"]), 0) + 1
    for row, _, result in _measurements(payload):
        for who, r in result.items():
            if isinstance(r, dict) and "error" in r:
                errors[(who, r["error"])] = errors.get((who, r["error"]), 0) + 1
    if errors:
        lines += ["## Errors (kept as results)", "", "| who | error | measurements |", "|---|---|---|"]
        lines += [f"| {who} | {text} | {count} |" for (who, text), count in sorted(errors.items())]
        lines.append("")
    return "\n".join(lines)


def plot(payload: dict, path: Path) -> bool:
    """Per precision, β = 0: fraction of the floor (solid, left axis) and ratio to the baseline
    (dashed, right axis, log) against N for the squares, one colour per launch size; and per
    tall-skinny precision the same against n, one colour per m.  False where matplotlib is missing."""
    plt = headless_pyplot()
    if plt is None:
        return False
    panels = []
    for prec in PRECISION_ORDER:
        squares = [r for r in payload["rows"] if r["prec"] == prec and r["family"] in ("small", "large") and "beta0" in r]
        if squares:
            panels.append((f"{prec}: squares, β = 0", "N (M = N = K)", squares, "launch", "m", True))
    for prec in TALLSKINNY_PRECISIONS:
        rows = [r for r in payload["rows"] if r["prec"] == prec and r["family"] == "tallskinny" and "beta0" in r]
        if rows:
            panels.append((f"{prec}: tall-skinny, β = 0", "n (M = K)", rows, "m", "n", False))
    if not panels:
        return False
    from matplotlib.ticker import FormatStrFormatter

    plain = FormatStrFormatter("%g")   # 4 and 0.5 on the log axes, not 4×10^0
    columns = 3
    fig, axes = plt.subplots(math.ceil(len(panels) / columns), columns,
                             figsize=(5.5 * columns, 4 * math.ceil(len(panels) / columns)), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax, (title, xlabel, rows, line_key, x_key, log_x) in zip(axes.flat, panels):
        ratio_ax = ax.twinx()
        for i, line in enumerate(dict.fromkeys(r[line_key] for r in rows)):
            ordered = sorted((r for r in rows if r[line_key] == line), key=lambda r: r[x_key])
            xs = [r[x_key] for r in ordered]
            color = f"C{i}"
            label = line if line_key == "launch" else f"m = k = {line}"
            ax.plot(xs, [r["beta0"]["ours"].get("floor_fraction", float("nan")) for r in ordered], "o-",
                    color=color, markersize=2.5, label=f"floor, {label}")
            ratio_ax.plot(xs, [r["beta0"].get("ratio", float("nan")) for r in ordered], "--", color=color,
                          alpha=0.7, label=f"ratio, {label}")
        ratio_ax.axhline(1.0, color="grey", linewidth=0.8)
        ratio_ax.set_yscale("log")
        ratio_ax.yaxis.set_major_formatter(plain)
        ratio_ax.yaxis.set_minor_formatter(plain)
        ratio_ax.set_ylabel("ratio: baseline time / ours (dashed)")
        if log_x:
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_formatter(plain)
        ax.set_ylim(0, 1.15)
        ax.set_ylabel("fraction of copy floor (solid)")
        ax.set_xlabel(xlabel)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower left")
    fig.suptitle(f"gemmgen bench workload, {payload['device']} ({payload['arch']})")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def render(json_path: Path) -> list[Path]:
    """The .md (and .png, where matplotlib is installed) beside a workload JSON; the paths written."""
    payload = json.loads(Path(json_path).read_text())
    md = Path(json_path).with_suffix(".md")
    md.write_text(markdown(payload))
    png = Path(json_path).with_suffix(".png")
    return [md] + ([png] if plot(payload, png) else [])
