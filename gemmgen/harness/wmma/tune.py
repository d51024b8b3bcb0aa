"""`gemmgen tune wmma`: the brute-force sweep of §5.8 on the GPU present, and the sm_XX table.

Two stages keep thousands of tuples affordable on a 30-minute device budget:
1. every eligible tuple (generator.wmma.sweep_space, both precisions) is compiled (NN launchers,
   bundled a dozen per nvcc call), checked once against a float64 CuPy reference on an odd shape
   with padded leading dimensions, and timed on a coarse grid of square sizes and rank-16
   updates; a tuple is only timed where its blocks are not far larger than the problem;
2. the best few tuples of the two nearest coarse points are timed at every size 1..64 and every
   8th size up to 256, next to the small-family kernel of that shape (square N ≤ 32, as the
   dispatch would pick it), the §8.1 tiny-size kernels (N ≤ 16) and the warp kernels (one warp
   per GEMM, N ≤ 64, hc from 13; `--warp-only` times those alone) and the block kernels (raw mma.sync, h and hc,
   sizes from 32; `--block-only` times those alone).  A warp kernel replaces a row's choice only
   where it is WARP_MIN_GAIN faster, and the row then names the fastest other kernel too, for the
   architectures before sm_80; a block kernel serves a size's range from sm_80 on (the row's
   `block`) where it is BLOCK_MIN_GAIN faster than the row's general tuple, which still serves
   older devices.
3. (`--final-only`, after the others) where the table weighs a warp kernel against the rest, both are
   timed again with FINAL_MEGABYTES (far past L2) and β = 0 and 1, and each one's worse fraction of
   the floor over the two decides between them.
Every result, including refusals (did not compile, local memory, wrong answer, failed launch),
goes to an append-only JSON-lines file; an interrupted sweep resumes where it stopped.  The
table keeps, per precision, kind and size, the fastest family and tuple, with at most
MAX_TUPLES wmma tuples per precision (a greedy choice minimising the summed slowdown), so
the default set stays small enough to compile in CI.
"""
from __future__ import annotations

import functools
import math
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import click
import numpy as np

from gemmgen.generator import small, wmma
from gemmgen.generator.emit import kernel_source, kernel_source_path, support_files
from gemmgen.generator.families import parse_kernel
from gemmgen.generator.precision import PRECISIONS
from gemmgen.generator.tuning import load_table, save_table, writable_table

from gemmgen.harness.core import busy
from gemmgen.harness.core.api import spec_launcher
from gemmgen.harness.core.build import build_library, code_path_tokens, load_library
from gemmgen.harness.core.results import append_result, in_turn, load_results, standing_refusals
from gemmgen.harness.core.timing import copy_bandwidth_once
from gemmgen.harness.core.workload import Workload, batch_for_megabytes, bytes_moved, flops

STAGE1 = {"square": (8, 16, 24, 32, 48, 64, 96, 128, 192, 256), "rank": (16, 32, 64, 128, 256)}
STAGE2_SIZES = tuple(range(1, 65)) + tuple(range(72, 257, 8))
STAGE2_TOP = 3          # tuples kept from each of the two nearest coarse points
MAX_TUPLES = 12         # wmma tuples per precision in the table (and the default set)
UNMEASURED = 3.0        # cost of a size where no chosen tuple was timed (the nearest size's decides)
BUNDLE = 12             # variants per nvcc call in the sweep
MEGABYTES = 64          # data per launch (≫ L2 would cost more device time; 64 MB is past L2)
MIN_BATCH = 100
WARP_MIN_GAIN = 1.05    # a warp kernel (one more source per shape) replaces the choice only this much faster
# ... or where, with data far past L2, it alone reaches the issues' floor bar for h and hc in both betas
# (its worse case at least 0.80 of the floor, the rest's under it): a goal met is worth the source.
WARP_BAR = 0.80
BLOCK_MIN_GAIN = 1.05   # a block kernel replaces a range's general tuple (sm_80+) only this much faster
MAX_BLOCKS = 8          # block kernels per precision in the table
# The `final` stage (--final-only): 64 MB is barely past the H100's 50 MB L2, and there the warp kernels
# read slower against the rest than with data far past it (hc 31: 1.02x the general tuple at 64 MB,
# 0.97 against 0.88 of the floor at 512 MB, and 0.96 against 0.54 with beta = 1), so where the table
# weighs a warp kernel against the rest, both are timed again with this much data and both betas.
FINAL_MEGABYTES = 256



def shape_of(kind: str, size: int) -> tuple[int, int, int]:
    return (size, size, size) if kind == "square" else (size, size, 16)


def fits(spec: wmma.WmmaSpec, kind: str, size: int) -> bool:
    """Time a tuple at a size only where its blocks are at most the next power of two above it."""
    m, n, k = shape_of(kind, size)
    cap = lambda d: max(16, 1 << math.ceil(math.log2(d)))   # noqa: E731
    return spec.blk_m <= cap(m) and spec.blk_n <= cap(n) and spec.blk_k <= cap(k)


def block_fits(spec: wmma.WmmaBlockSpec, kind: str, size: int) -> bool:
    """Time a block kernel where its C blocks are at most the next power of two above the size (its
    K slices may be longer than a rank-16 update's k: the zero-filled rest costs little)."""
    cap = max(16, 1 << math.ceil(math.log2(size)))
    return size >= wmma.BLOCK_MIN_SIZE and spec.blk_m <= cap and spec.blk_n <= cap


def gpu_check(f, prec: str, m: int, n: int, k: int, takes_shape: bool, batch: int = 3,
              aligned: bool = False, packed: bool = False) -> tuple[bool, float]:
    """One NN launch with padded leading dimensions against a float64 CuPy reference; returns
    (passed, largest error (docs/api.md, Accuracy) over the batch).  aligned: leading dimensions that are
    multiples of 8 (16 bytes), the only ones the cp.async ring takes; packed: none at all (ld =
    rows), the raw packed ring's case where a GEMM fits one C block."""
    import cupy as cp

    from gemmgen.harness.core.api import scalar
    from gemmgen.harness.core.reference import error_bound

    rng = cp.random.RandomState(7)
    width = 2 if prec == "hc" else 1
    lda, ldb, ldc = (m + 3, k + 2, m + 1) if not aligned else (-(-m // 8) * 8 + 8, -(-k // 8) * 8, m + 1)
    if packed:
        lda, ldb, ldc = m, k, m

    def make(rows, cols, ld):
        vals = rng.uniform(0.25, 1.0, size=(batch, cols, ld, width)) * cp.where(
            rng.uniform(size=(batch, cols, ld, width)) < 0.5, -1, 1)
        return vals.astype(cp.float16)

    A, B, C = make(m, k, lda), make(k, n, ldb), make(m, n, ldc)

    def values(x, rows):   # (batch, cols, ld, width) -> complex128 (batch, rows, cols)
        x = x[:, :, :rows, :].astype(cp.float64)
        v = x[..., 0] + (1j * x[..., 1] if width == 2 else 0)
        return cp.transpose(v, (0, 2, 1))

    a, b, c0 = values(A, m), values(B, k), values(C, m)
    alpha, beta = (1.0, 0.5) if width == 1 else (complex(0.75, -0.5), complex(0.5, 0.25))
    args = (scalar(prec, alpha), A.data.ptr, lda, lda * k, B.data.ptr, ldb, ldb * n,
            scalar(prec, beta), C.data.ptr, ldc, ldc * n, batch, 0)
    rc = f(b"N", b"N", m, n, k, *args) if takes_shape else f(b"N", b"N", *args)
    cp.cuda.runtime.deviceSynchronize()
    if rc != 0:
        return False, float("inf")
    got = values(C, m)
    alpha_r = complex(np.complex64(alpha)) if width == 2 else float(np.float32(alpha))
    beta_r = complex(np.complex64(beta)) if width == 2 else float(np.float32(beta))
    expected = alpha_r * (a @ b) + beta_r * c0
    norm = lambda x: cp.sqrt(cp.sum(cp.abs(x) ** 2, axis=(1, 2)))   # noqa: E731
    err = norm(got - expected) / (abs(alpha_r) * norm(a) * norm(b) + abs(beta_r) * norm(c0))
    worst = float(cp.max(err))
    return worst <= error_bound(prec, k), worst


def _time(work: Workload, f, takes_shape: bool, reps: int) -> dict:
    from gemmgen.harness.core.timing import median_time_ms

    prec, m, n, k, batch = work.prec, work.m, work.n, work.k, work.batch
    ms = median_time_ms(work.ours(f, 1.0, 0.0, takes_shape=takes_shape), launches_per_graph=3,
                        repeats=reps, warmup=1)
    return {"batch": batch, "time_us": ms * 1e3,
            "tflops": flops(prec, m, n, k, batch) / (ms * 1e-3) / 1e12,
            "bytes": bytes_moved(prec, m, n, k, batch, False)}


def _write_sources(root: Path, specs, bundle: int) -> list[Path]:
    """Variant sources (NN only) and the bundles that include them, one nvcc call per bundle."""
    for rel, text in support_files("gemmgen tune wmma", ("sm_90",), ("h", "hc")).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    paths = {}   # each variant's `gemmgen-code-paths:` tokens: a bundle is compiled for all of its members'
    for spec in specs:
        path = root / kernel_source_path(spec)
        path.parent.mkdir(parents=True, exist_ok=True)
        text = kernel_source(spec, "gemmgen tune wmma", trans_pairs=(("N", "N"),))
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
        paths[spec] = code_path_tokens(text)
    bundles = []
    (root / "src" / "bundles").mkdir(parents=True, exist_ok=True)
    for i in range(0, len(specs), bundle):
        lines = ['#include "gemmgen_wmma.cuh"', '#include "gemmgen_small.cuh"']
        tokens = sorted({t for spec in specs[i:i + bundle] for t in paths[spec]}, key=lambda t: (int(t.rstrip("a")), t))
        if tokens:
            lines.insert(0, "// gemmgen-code-paths: " + " ".join(tokens))
        for j, spec in enumerate(specs[i:i + bundle]):
            # Each variant keeps its file-local names in a namespace of its own.
            lines += [f"namespace variant_{j} {{", f'#include "{kernel_source_path(spec)[4:]}"', "}"]
        path = root / "src" / "bundles" / f"bundle_{i // bundle:04d}.cu"
        text = "\n".join(lines) + "\n"
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
        bundles.append(path)
    return bundles


def _small_specs(arch: str) -> dict[tuple, small.SmallSpec]:
    """The small-family kernel the dispatch would run per h/hc point (precision, kind, size): the
    tuned table row of every square size ≤ 32 (else the heuristic), and of each rank-16 update
    (m = n ≤ 32, k = 16) that the small family was tuned for (`tune small --shapes mxmx16`)."""
    rows = load_table(arch).get("small", [])
    out = {}
    for r in rows:
        if r["precision"] not in wmma.PRECISIONS_WMMA or r["m"] != r["n"]:
            continue
        if r["m"] == r["k"]:
            out[(r["precision"], "square", r["m"])] = small.SmallSpec.from_row(r)
        elif r["k"] == wmma.RANK_K_MAX:
            out[(r["precision"], "rank", r["m"])] = small.SmallSpec.from_row(r)
    for prec in wmma.PRECISIONS_WMMA:
        for size in range(1, small.MAX_SIZE + 1):
            out.setdefault((prec, "square", size), small.heuristic(prec, size, size, size))
    return out


@dataclass(frozen=True)
class SweepCandidates:
    """What a `tune wmma` run compiles (`specs`, in its order) and where stage 2 times each part:
    smalls, the small-family kernel per (precision, kind, size) (_small_specs); warp_points and
    block_points, the warp and block kernels per stage-2 point."""
    general: list
    tiny: list
    small: list
    warps: list
    blocks: list
    smalls: dict
    warp_points: dict
    block_points: dict

    @property
    def specs(self) -> list:
        return self.general + self.tiny + self.small + self.warps + self.blocks


def sweep_candidates(precisions, arch: str, async_only: bool = False, small_only: bool = False,
                     warp_only: bool = False, block_only: bool = False) -> SweepCandidates:
    """The candidates of a run (run_tune's flags), from the sweep spaces of generator.wmma and the
    present small table (no GPU, nothing compiled)."""
    only = async_only or small_only or warp_only or block_only
    general = [s for p in precisions for s in wmma.sweep_space(p, arch)
               if (s.stages or not async_only) and not (small_only or warp_only or block_only)]
    tiny = [] if only else sorted({t for p in precisions for kind in wmma.KINDS for size in range(1, 17)
                                   for t in wmma.tiny_candidates(p, *shape_of(kind, size), arch=arch)})
    smalls = _small_specs(arch)
    small_specs = [] if async_only or warp_only or block_only else sorted(
        {spec for (p, _, _), spec in smalls.items() if p in precisions})
    warp_points = {(p, kind, size): wmma.warp_candidates(p, *shape_of(kind, size), arch)
                   for p in precisions for kind in wmma.KINDS for size in STAGE2_SIZES
                   if size <= wmma.WARP_MAX_SIZE and (warp_only or not only)}
    warps = sorted({s for cands in warp_points.values() for s in cands})
    block_points = {(p, kind, size): [s for s in wmma.block_candidates(p, arch) if block_fits(s, kind, size)]
                    for p in precisions for kind in wmma.KINDS for size in STAGE2_SIZES
                    if block_only or not only}
    blocks = sorted({s for cands in block_points.values() for s in cands})
    return SweepCandidates(general, tiny, small_specs, warps, blocks, smalls, warp_points, block_points)


def run_tune(results_path: Path, build_dir: Path, precisions, jobs: int, budget_s: float,
             max_tuples: int | None, async_only: bool = False, small_only: bool = False,
             warp_only: bool = False, block_only: bool = False, stop=None, arch: str | None = None,
             device: str | None = None, spread=in_turn) -> int:
    """async_only: sweep only the wmma tuples with a cp.async ring; small_only: only the small
    family's present table kernels at the square sizes up to 32 and the rank-16 updates it was
    tuned for (after a re-tune of that family),
    so the cut-off between the families is measured again; warp_only: only the warp kernels
    (WmmaWarpSpec, h) at every stage-2 shape they cover; block_only: only the block kernels
    (WmmaBlockSpec).  Either way stage 2 compares with the results already in the file for the rest.
    stop(): asked before each timing besides budget_s (gemmgen tune's budget); either ends the run
    with 3, the results so far kept (a run again resumes).
    The variants are compiled here into one library; the check, stage 1 and stage 2 then go through
    `spread` in pieces (check_piece, time_piece: a few dozen variants to check, or one point's
    timings), one after the other here (results.in_turn) or on the GPUs of `gemmgen tune --gpus`,
    whose (arch, device) are given where this machine has no GPU of its own."""
    if arch is None:
        arch, device = _this_gpu()
    start = time.time()
    base = {"arch": arch, "device": device}
    rows = load_results(results_path)
    done = {(r["name"], r.get("kind"), r.get("size"), r.get("stage")) for r in rows if r.get("device") == device}
    # Build refusals are built again (every variant is compiled anyway): one that now compiles clean is
    # measured, and its results supersede the refusal; one that still spills keeps its old row.
    refused = refusals(rows, device, builds=False)
    refused_at_build = refusals(rows, device) - refused
    # Each --*-only run measures its part; the other kernels' results are in the file already, and stage 2
    # compares with them.
    only = async_only or small_only or warp_only or block_only
    cands = sweep_candidates(precisions, arch, async_only, small_only, warp_only, block_only)
    general, tiny, small_specs, warps, blocks = cands.general, cands.tiny, cands.small, cands.warps, cands.blocks
    smalls, warp_points, block_points = cands.smalls, cands.warp_points, cands.block_points
    specs = cands.specs
    # A --small-only, --warp-only or --block-only run is the measurement after a change to its kernels
    # (their template, the small table): it times them again even where the file has results of the
    # same names (the latest counts, _best_by_point), so an interrupted one starts over rather than
    # resuming.  The sweeps (full, --async-only) resume.
    if small_only or warp_only or block_only:
        measured_again = {s.name for s in specs}
        done = {key for key in done if key[0] not in measured_again}
    click.echo(f"{device} ({arch}): {len(general)} wmma tuples, {len(tiny)} tiny, {len(small_specs)} small, "
               f"{len(warps)} warp, {len(blocks)} block kernels; {len(done)} results already in {results_path}")
    root = build_dir / arch
    bundles = _write_sources(root, specs, BUNDLE)
    with click.progressbar(length=len(bundles), label="nvcc sweep", show_pos=True) as bar:
        built = build_library(root, root / "build", (arch,), jobs or None, sources=bundles,
                              tolerate_failures=True, library_name="libtune_wmma.so",
                              progress=lambda d, t: bar.update(d - bar.pos))
    failed_bundles = {Path(rel).stem for rel in built.failures}
    by_bundle = {f"bundle_{i // BUNDLE:04d}": specs[i:i + BUNDLE] for i in range(0, len(specs), BUNDLE)}
    spilled_bundles = {Path(r.source).stem for r in built.local_memory_kernels}
    for stem, members in by_bundle.items():
        for spec in members:
            if spec.name in refused:
                continue
            if stem in failed_bundles:
                status, reason = "compile-failed", built.failures[f"src/bundles/{stem}.cu"][-300:]
            elif stem in spilled_bundles and _spills(spec, built, stem):
                status, reason = "local-memory", "ptxas reported stack or spills"
            else:
                continue
            if spec.name not in refused_at_build:
                append_result(results_path, {**base, "name": spec.name, "precision": spec.precision,
                                             "stage": "build", "status": status, "reason": reason})
            refused.add(spec.name)
    click.echo(f"built {len(bundles) - len(failed_bundles)}/{len(bundles)} bundles in "
               f"{time.time() - start:.0f} s; {len(refused)} variants refused so far")

    def spent() -> bool:
        return time.time() - start > budget_s or bool(stop and stop())

    def timed(pieces, label: str) -> bool:
        """Time the pieces through `spread`; False where the budget stopped them."""
        with click.progressbar(pieces, label=label, show_pos=True) as bar:
            spread(bar, functools.partial(time_piece, library=str(built.library), base=base), results_path,
                   jobs, spent)
        return not spent()

    # Check every variant once before timing anything: a broken template shows here, in seconds,
    # instead of after the device budget is spent.
    to_check = [spec for spec in specs if spec.name not in refused]
    with click.progressbar([to_check[i:i + CHECK_PIECE] for i in range(0, len(to_check), CHECK_PIECE)],
                           label=f"check (CuPy float64), {CHECK_PIECE} variants a piece", show_pos=True) as bar:
        spread(bar, functools.partial(check_piece, library=str(built.library), base=base), results_path, jobs, spent)
    if spent():
        return _budget_reached(results_path)
    refused |= {r["name"] for r in load_results(results_path)
                if r.get("device") == device and r.get("stage") == "check" and r.get("status") != "ok"}
    wrong = sum(1 for spec in specs if spec.name in refused)
    click.echo(f"{len(specs) - wrong} variants correct, {wrong} refused")
    if wrong > len(specs) // 2:
        raise click.ClickException("most variants are wrong or failed: stopping before timing")

    def piece(stage: str, reps: int, prec: str, kind: str, size: int, point_specs) -> tuple:
        return (stage, reps, prec, kind, size, tuple(s for s in dict.fromkeys(point_specs)
                                                     if s.name not in refused and (s.name, kind, size, stage) not in done))

    points = [(p, kind, size) for p in precisions for kind in wmma.KINDS for size in STAGE1[kind]]
    stage1 = [piece("coarse", 3, prec, kind, size, [s for s in general if s.precision == prec and fits(s, kind, size)])
              for prec, kind, size in points]
    if not timed([x for x in stage1 if x[-1]], "stage 1 (coarse grid), a point a piece"):
        return _budget_reached(results_path)
    coarse = _best_by_point(load_results(results_path), device, "coarse")
    general_by_name = {s.name: s for s in general}   # (this run's space: the file may hold others)
    stage2 = []
    for prec in precisions:
        for kind in wmma.KINDS:
            for size in STAGE2_SIZES:
                m, n, k = shape_of(kind, size)
                names = set()
                for point in _nearest(STAGE1[kind], size):
                    names.update(r["name"] for r in coarse.get((prec, kind, point), [])[:STAGE2_TOP])
                point_specs = [general_by_name[x] for x in sorted(names) if x in general_by_name]
                if (prec, kind, size) in smalls and not (async_only or warp_only or block_only):
                    point_specs.append(smalls[(prec, kind, size)])
                if size <= wmma.TINY_TC and not only:
                    point_specs += wmma.tiny_candidates(prec, m, n, k, arch)
                point_specs += warp_points.get((prec, kind, size), [])
                point_specs += block_points.get((prec, kind, size), [])
                stage2.append(piece("fine", 5, prec, kind, size, point_specs))
    if not timed([x for x in stage2 if x[-1]], "stage 2 (every size), a point a piece"):
        return _budget_reached(results_path)
    click.echo(f"sweep complete in {time.time() - start:.0f} s")
    return 0


def _this_gpu() -> tuple[str, str]:
    """(arch, device) of the GPU of this machine, which the tuner measures on."""
    from gemmgen.harness.check import device_arch
    from gemmgen.harness.core.toolchain import gpu_available

    if not gpu_available():
        raise click.ClickException("no GPU present; gemmgen tune wmma measures on the GPU it runs on")
    return device_arch()


def _budget_reached(results_path: Path) -> int:
    click.echo(f"budget reached; results so far are in {results_path} (run again to resume)")
    return 3


# Variants a piece of the sweep's check holds: a few seconds of a GPU, so that a budget stops soon.
CHECK_PIECE = 64


def check_variant(lib, spec) -> tuple[bool, float]:
    """Every path of a variant against the float64 CuPy reference (gpu_check): an odd shape with
    padded leading dimensions, and where the variant has them its cp.async ring, its copies of
    contiguous matrices (warp kernels) and its raw packed ring."""
    f, takes_shape = spec_launcher(lib, spec)
    shape = (37, 45, 29) if takes_shape else spec.shape
    ok, err = gpu_check(f, spec.precision, *shape, takes_shape)
    if ok and getattr(spec, "stages", 0):   # and the cp.async ring's own path
        ok, err = gpu_check(f, spec.precision, *shape, takes_shape, batch=2000, aligned=True)
    if ok and spec.family == "wmmawarp":   # and its copies of contiguous matrices
        ok, err = gpu_check(f, spec.precision, *shape, takes_shape, batch=2000, packed=True)
    if ok and takes_shape and spec.stages:   # and the general kernel's raw packed ring
        packed_shape = (spec.blk_m - 3, spec.blk_n - 5, 2 * spec.blk_k + 1)
        ok, err = gpu_check(f, spec.precision, *packed_shape, takes_shape, batch=2000, packed=True)
    return ok, err


def check_piece(specs, results_path: Path, jobs: int, stop, library: str, base: dict) -> int:
    """A piece of the sweep's check on this process's GPU (as results.in_turn, or a worker of
    `gemmgen tune --gpus`, calls it): each variant through check_variant, a refusal appended to
    results_path (stage "check"); stops between variants where stop() says so.  Returns the variants
    checked."""
    lib = load_library(library)
    checked = 0
    with busy.on_gpu():
        for spec in specs:
            if stop():
                break
            row = {**base, "name": spec.name, "precision": spec.precision, "stage": "check"}
            try:
                ok, err = check_variant(lib, spec)
            except Exception as exc:   # a launch failure is a result
                append_result(results_path, {**row, "status": "launch-failed", "reason": str(exc)[:300]})
            else:
                if not ok:
                    append_result(results_path, {**row, "status": "wrong-answer", "reason": f"relative error {err:.3g}"})
            checked += 1
    return checked


def time_piece(piece: tuple, results_path: Path, jobs: int, stop, library: str, base: dict) -> int:
    """One point of the sweep on this process's GPU: piece = (stage, repeats, precision, kind, size,
    the variants to time there), each timing appended to results_path as it comes; stops between
    timings where stop() says so.  Returns the timings made."""
    stage, reps, prec, kind, size, specs = piece
    lib = load_library(library)
    m, n, k = shape_of(kind, size)
    made = 0
    with busy.on_gpu():
        bandwidth = copy_bandwidth_once()
        work = None
        try:
            for spec in specs:
                if stop():
                    break
                if work is None:
                    work = Workload(prec, m, n, k, max(MIN_BATCH, batch_for_megabytes(prec, m, n, k, MEGABYTES)))
                row = {**base, "name": spec.name, "family": spec.family, "precision": spec.precision,
                       "kind": kind, "size": size, "m": m, "n": n, "k": k, "stage": stage}
                try:
                    f, takes_shape = spec_launcher(lib, spec)
                    t = _time(work, f, takes_shape, reps)
                except Exception as exc:
                    row.update(status="launch-failed", reason=str(exc)[:300])
                else:
                    row.update(status="ok", **t, floor_fraction=t["bytes"] / bandwidth / (t["time_us"] * 1e-6))
                append_result(results_path, row)
                made += 1
        finally:
            if work is not None:
                work.release()
    return made


def run_final(results_path: Path, build_dir: Path, precisions, jobs: int, max_tuples: int = MAX_TUPLES,
              stop=None, resume: bool = False, arch: str | None = None, device: str | None = None,
              spread=in_turn) -> int:
    """--final-only: at each point where the table weighs a warp kernel against the rest (_contenders,
    from the stage-2 results in the file), time both with FINAL_MEGABYTES of data, beta = 0 and 1, in
    this run (rows with stage "final", `beta` and this run's `run`); write_tuning_table then decides
    between them on each one's worse fraction of the floor (_final_times).  resume: leave out the points
    where both kernels have both betas timed already (gemmgen tune, going on after its budget stopped
    it); stop(): asked between points, ends the run with 3.  The kernels are compiled here; the points
    go through `spread` (final_piece, one point each), as in run_tune."""
    if arch is None:
        arch, device = _this_gpu()
    start = time.time()
    base = {"arch": arch, "device": device, "stage": "final", "run": int(start)}
    rows = load_results(results_path)
    timed = _final_times(rows, device) if resume else {}
    points = [(prec, kind, size, (warp, rest)) for prec, kind, size, _, _, rest, warp, _, _
              in _contenders(_best_by_point(rows, device, "fine"), max_tuples)
              if warp and prec in precisions
              and not all((prec, kind, size, r["name"]) in timed for r in (warp, rest))]
    if not points:
        click.echo(f"{device} ({arch}): no point where the table weighs a warp kernel against the rest left to time")
        return 0
    names = sorted({r["name"] for *_, pair in points for r in pair})
    specs = [parse_kernel(n) for n in names]
    by_name = dict(zip(names, specs))
    click.echo(f"{device} ({arch}): {len(points)} points, {len(specs)} kernels, {FINAL_MEGABYTES} MB, beta 0 and 1")
    root = build_dir / arch
    bundles = _write_sources(root, specs, BUNDLE)
    built = build_library(root, root / "build", (arch,), jobs or None, sources=bundles, library_name="libfinal_wmma.so")
    never = lambda: False   # noqa: E731
    pieces = [(prec, kind, size, tuple((r["name"], r["family"], by_name[r["name"]]) for r in pair))
              for prec, kind, size, pair in points]
    spread(pieces, functools.partial(final_piece, library=str(built.library), base=base), results_path, jobs,
           stop or never)
    if stop and stop():
        return _budget_reached(results_path)
    click.echo(f"final stage complete in {time.time() - start:.0f} s")
    return 0


def final_piece(piece: tuple, results_path: Path, jobs: int, stop, library: str, base: dict) -> int:
    """One point of the final stage on this process's GPU: piece = (precision, kind, size, the pair
    as (name, family, spec)), each kernel at beta = 0 and 1 with FINAL_MEGABYTES of data.  Returns the
    timings made (none where stop() says so before the point)."""
    from gemmgen.harness.core.timing import median_time_ms

    prec, kind, size, pair = piece
    if stop():
        return 0
    lib = load_library(library)
    m, n, k = shape_of(kind, size)
    batch = batch_for_megabytes(prec, m, n, k, FINAL_MEGABYTES)
    made = 0
    with busy.on_gpu():
        bandwidth = copy_bandwidth_once()
        work = Workload(prec, m, n, k, batch)
        try:
            for name, family, spec in pair:   # (a row's family says "wmma" for a block kernel serving a range: the spec's does not)
                f, takes_shape = spec_launcher(lib, spec)
                for beta in (0.0, 1.0):
                    ms = median_time_ms(work.ours(f, 1.0, beta, takes_shape=takes_shape))
                    append_result(results_path, {
                        **base, "name": name, "family": family, "precision": prec, "kind": kind,
                        "size": size, "m": m, "n": n, "k": k, "beta": beta, "batch": batch, "status": "ok",
                        "time_us": ms * 1e3,
                        "floor_fraction": bytes_moved(prec, m, n, k, batch, beta != 0) / bandwidth / (ms * 1e-3)})
                    made += 1
        finally:
            work.release()
    return made


def _spills(spec, built, stem) -> bool:
    """Whether one of a bundle's kernels that spilled is this variant's (matched by the template
    arguments in the mangled name; an unmatched spill refuses every member)."""
    import re

    spilled = [r.function for r in built.local_memory_kernels if Path(r.source).stem == stem]
    if spec.family == "wmma":
        want = [spec.tc_m, spec.tc_n, spec.tc_k, spec.blk_m, spec.blk_n, spec.blk_k, spec.dim_x, spec.dim_y, spec.warps]
    elif spec.family == "wmmablock":
        want = [spec.blk_m, spec.blk_n, spec.blk_k, spec.warps_m, spec.warps_n, spec.stages, spec.min_blocks]
    else:
        return True
    for fn in spilled:
        ints = [int(x) for x in re.findall(r"Li(\d+)E", fn)]
        if ints[:len(want)] == want or not ints:
            return True
    return False


def _nearest(grid, size):
    """The coarse points on either side of `size` (one when it is outside the grid)."""
    below = [g for g in grid if g <= size]
    above = [g for g in grid if g >= size]
    return sorted({below[-1] if below else grid[0], above[0] if above else grid[-1]})


def refusals(rows: list[dict], device: str, builds: bool = True) -> set[str]:
    """The variants refused on `device` (results.standing_refusals: a refusal at build gives way to a
    later successful result of the same name; a wrong answer, a launch failure or a refusal in the
    table's all-transposes verification stands).  builds=False: the standing refusals alone."""
    standing, at_build = standing_refusals((r for r in rows if r.get("device") == device),
                                           lambda r: r.get("stage") == "build")
    return standing | at_build if builds else standing


def _best_by_point(rows, device, stage) -> dict[tuple, list[dict]]:
    """Per (precision, kind, size), the stage's timings fastest first, one per variant: its latest (a
    `--*-only` run measures its kernels again after a change to their template)."""
    refused = refusals(rows, device)
    latest: dict[tuple, dict] = {}
    for r in rows:   # in the order they were appended
        if r.get("device") == device and r.get("stage") == stage and r["status"] == "ok" \
                and r["name"] not in refused:
            latest[(r["precision"], r["kind"], r["size"], r["name"])] = r
    out: dict[tuple, list[dict]] = defaultdict(list)
    for (prec, kind, size, _), r in latest.items():
        out[(prec, kind, size)].append(r)
    for v in out.values():
        v.sort(key=lambda r: r["time_us"])
    return out


def _cover(general: dict, best: dict, max_tuples: int) -> list[str]:
    """Greedy choice of at most `max_tuples` tuples minimising Σ over the sizes of (time of the
    fastest chosen tuple / best time), a size no chosen tuple was measured at costing UNMEASURED."""
    names = sorted({n for g in general.values() for n in g})
    current = {pt: UNMEASURED for pt in general if general[pt]}
    chosen: list[str] = []
    while len(chosen) < max_tuples and names:
        def total(name):
            return sum(min(cost, general[pt][name]["time_us"] / best[pt] if name in general[pt] else cost)
                       for pt, cost in current.items())
        pick = min(names, key=total)
        if chosen and total(pick) >= sum(current.values()) - 1e-9:
            break
        chosen.append(pick)
        names.remove(pick)
        current = {pt: min(cost, general[pt][pick]["time_us"] / best[pt] if pick in general[pt] else cost)
                   for pt, cost in current.items()}
    return chosen


def _contenders(rows: dict[tuple, list[dict]], max_tuples: int):
    """Per precision and point (kind, size) of the stage-2 results (_best_by_point), what the table
    weighs: w, the fastest of the precision's chosen wmma tuples (`_cover`); block, the fastest chosen
    block kernel where it beats w by BLOCK_MIN_GAIN; rest, the fastest kernel that runs before sm_80
    too (small, tiny, or w/block as "wmma"); warp, the fastest warp kernel (or None); best, the fastest
    wmma time measured at the point; tried, the variants timed there.  Yields (prec, kind, size, w,
    block, rest, warp, best, tried); a point with no chosen tuple measured is left out (the closest
    size's row serves it)."""
    for prec in sorted({p for p, _, _ in rows}, key=list(PRECISIONS).index):
        points = sorted((kind, size) for p, kind, size in rows if p == prec)
        times = {pt: {r["name"]: r for r in rows[(prec, *pt)]} for pt in points}
        general = {pt: {n: r for n, r in t.items() if r["family"] == "wmma"} for pt, t in times.items()}
        best = {pt: min((r["time_us"] for r in g.values()), default=math.inf) for pt, g in general.items()}
        chosen = _cover(general, best, max_tuples)
        block_times = {pt: {n: r for n, r in t.items() if r["family"] == "wmmablock"} for pt, t in times.items()}
        best_block = {pt: min((r["time_us"] for r in g.values()), default=math.inf) for pt, g in block_times.items()}
        chosen_blocks = _cover(block_times, best_block, MAX_BLOCKS)
        for pt in points:
            mine = [general[pt][n] for n in chosen if n in general[pt]]
            if not mine:
                continue
            w = min(mine, key=lambda r: r["time_us"])
            # From sm_80 the size's range takes the fastest chosen block kernel where it is clearly faster
            # (one source serves many sizes; the general tuple still serves older devices).
            blocks = [block_times[pt][n] for n in chosen_blocks if n in block_times[pt]]
            block = min(blocks, key=lambda r: r["time_us"]) if blocks else None
            block = block if block and block["time_us"] * BLOCK_MIN_GAIN <= w["time_us"] else None
            ranged = {**(block or w), "family": "wmma"}   # "wmma": whichever kernel the range runs
            others = [r for r in times[pt].values() if r["family"] not in ("wmma", "wmmablock")]
            # The warp kernel needs sm_80; before it, the fastest of the rest serves (manifest.py).
            rest = min([r for r in others if r["family"] != "wmmawarp"] + [ranged], key=lambda r: r["time_us"])
            warps = [r for r in others if r["family"] == "wmmawarp"]
            warp = min(warps, key=lambda r: r["time_us"]) if warps else None
            yield prec, pt[0], pt[1], w, block, rest, warp, best[pt], len(times[pt])


def _final_times(rows: list[dict], device: str) -> dict[tuple, float]:
    """Per (precision, kind, size, name), from its latest `final` run that timed both betas: the worse
    of its two fractions of the floor (the issues' bars hold for each beta, so a kernel is as good as
    its slower case)."""
    parts: dict[tuple, dict] = {}
    for r in rows:
        if r.get("device") == device and r.get("stage") == "final" and r["status"] == "ok":
            parts.setdefault((r["precision"], r["kind"], r["size"], r["name"], r["run"]), {})[r["beta"]] = \
                r["floor_fraction"]
    out: dict[tuple, float] = {}
    for (prec, kind, size, name, _), by_beta in parts.items():   # in file order: the latest run wins
        if set(by_beta) == {0.0, 1.0}:
            out[(prec, kind, size, name)] = min(by_beta.values())
    return out


def write_tuning_table(results_path: Path, arch: str, device: str, max_tuples: int = MAX_TUPLES) -> Path:
    """The `wmma` section of gemmgen/generator/tuning/<arch>.json from the stage-2 results.

    Per precision: `_cover` picks at most `max_tuples` wmma tuples; every size then uses the
    fastest chosen one.  Where a small-family or tiny kernel of the shape beats it, the row says
    so (`choice`), which is the tuned cut-off between the families.  Where a `--final-only` run timed
    the point's warp kernel and the rest's choice with data far past L2 (`final`), that comparison
    decides between them: each kernel's worse fraction of the floor over beta = 0 and 1 (WARP_MIN_GAIN
    still applies, unless only the warp kernel reaches WARP_BAR)."""
    results = load_results(results_path)
    rows = _best_by_point(results, device, "fine")
    final = _final_times(results, device)
    table = writable_table(arch)
    out_rows = []
    for prec, kind, size, w, block, rest, warp, best, tried in _contenders(rows, max_tuples):
        block_fields = {"block": block["name"], "block_time_us": round(block["time_us"], 3)} if block else {}
        # Each warp kernel adds a source to the set (its tuple is its shape): it must be clearly faster.
        fastest = warp if warp and warp["time_us"] * WARP_MIN_GAIN <= rest["time_us"] else rest
        final_fields = {}
        if warp and (prec, kind, size, warp["name"]) in final and (prec, kind, size, rest["name"]) in final:
            f_warp, f_rest = final[(prec, kind, size, warp["name"])], final[(prec, kind, size, rest["name"])]
            fastest = warp if f_warp >= f_rest * WARP_MIN_GAIN or f_rest < WARP_BAR <= f_warp else rest
            final_fields = {"final_warp_floor": round(f_warp, 4), "final_rest_floor": round(f_rest, 4)}
        fallback = {"fallback_choice": rest["family"], "fallback_kernel": rest["name"]} \
            if fastest is warp else {}
        out_rows.append({
            "precision": prec, "kind": kind, "size": size, "wmma": w["name"],
            "wmma_time_us": round(w["time_us"], 3), "best_wmma_time_us": round(best, 3),
            "choice": fastest["family"], "kernel": fastest["name"],
            "time_us": round(fastest["time_us"], 3),
            "floor_fraction": round(fastest["floor_fraction"], 4), "batch": fastest["batch"],
            "candidates_tried": tried, "device": device, **block_fields, **fallback, **final_fields})
    table.update({"arch": arch, "device": device})
    table.setdefault("commands", {})["wmma"] = (
        f"gemmgen tune wmma (results: {results_path}); stage 2 batch: {MEGABYTES} MB of data, "
        f"at least {MIN_BATCH} GEMMs")
    table["wmma"] = out_rows
    return save_table(arch, table)


def verify_table(results_path: Path, arch: str, device: str, build_dir: Path, jobs: int,
                 max_tuples: int = MAX_TUPLES, archs: tuple[str, ...] | None = None) -> int:
    """The sweep compiles NN launchers for one architecture; a kernel in the table must also be
    free of local memory with every transpose pair on every default architecture, and on the table's
    own architecture alone (a build for it alone compiles its PTX at that level, where the registers
    come out differently).  Write the table, compile its kernels in full, record a refusal for each
    that spills, and repeat until none does.  Needs nvcc only (no GPU).  Returns the number of
    refusals recorded."""
    from gemmgen.generator.arch import DEFAULT_ARCHS

    archs = archs or DEFAULT_ARCHS
    refused = 0
    while True:
        write_tuning_table(results_path, arch, device, max_tuples)
        rows = load_table(arch)["wmma"]
        names = sorted({r["wmma"] for r in rows} | {r["block"] for r in rows if "block" in r}
                       | {r["kernel"] for r in rows if r["choice"] in ("wmmatiny", "wmmawarp")})
        specs = [wmma.parse_name(n) for n in names]
        root = build_dir / "verify"
        command = "gemmgen tune wmma (verify)"
        for rel, text in support_files(command, archs, ("h", "hc")).items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        sources = []
        for spec in specs:
            path = root / kernel_source_path(spec)
            path.parent.mkdir(parents=True, exist_ok=True)
            text = kernel_source(spec, command)
            if not path.exists() or path.read_text() != text:
                path.write_text(text)
            sources.append(path)
        spilling = {}
        for arch_set in dict.fromkeys((tuple(archs), (arch,))):
            built = build_library(root, root / f"build_{'_'.join(arch_set)}", arch_set, jobs or None, sources=sources,
                                  link=False)
            for r in built.local_memory_kernels:
                spilling.setdefault(Path(r.source).stem, r)
        if not spilling:
            return refused
        for name, r in sorted(spilling.items()):
            append_result(results_path, {
                "arch": arch, "device": device, "name": name, "precision": name.split("_")[1],
                "stage": "verify", "status": "local-memory",
                "reason": f"all-transposes build: {r.arch} stack {r.stack_bytes} B, "
                          f"spills {r.spill_stores}/{r.spill_loads} B"})
            refused += 1
