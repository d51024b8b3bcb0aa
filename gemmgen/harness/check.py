"""`gemmgen check`: build an emitted set, refuse local memory, and run every NumPy check on the GPU
present (or say that nothing ran)."""
from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import click

from gemmgen.generator import small
from gemmgen.generator.arch import ARCHS, parse_archs
from gemmgen.generator.families import parse_kernel
from gemmgen.generator.manifest import builds_on, kernel_bands

from gemmgen.harness.core.build import UNITY_SOURCES, BuildError, build_library, device_code, write_atomically
from gemmgen.harness.core.toolchain import ToolchainError, gpu_available

# Processes running the GPU checks (each its own CUDA context; more add contexts, not speed: the
# cases' NumPy side is what they share out).
CHECK_WORKERS = 8


def device_arch() -> tuple[str, str]:
    import cupy as cp

    props = cp.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return f"sm_{props['major']}{props['minor']}", name


def build_set(gen_dir: Path, build_dir: Path, archs: tuple[str, ...], jobs: int):
    """The set compiled by harness.core.build.build_library, every nvcc warning an error (`gemmgen check`
    and the benches build the same objects), with a progress bar on a terminal and, in a
    log (no terminal), a line at every tenth of the units with the time so far and an estimate of
    the rest (units go largest first, so the estimate errs long)."""
    label = ",".join(archs)
    start, shown = time.monotonic(), [0]
    on_terminal = click.get_text_stream("stdout").isatty()   # the bar shows itself there

    def log_line(done: int, total: int) -> None:
        if done * 10 // total > shown[0] or done == total:
            shown[0] = done * 10 // total
            spent = time.monotonic() - start
            left = spent * (total - done) / done
            click.echo(f"nvcc {label}: {done}/{total} translation units in {spent:.0f} s"
                       + (f", about {left:.0f} s left" if done < total else ""))
    with click.progressbar(length=1, label=f"nvcc {label}", show_pos=True) as bar:
        def progress(done, total):
            bar.length = total
            bar.update(done - bar.pos)
            if not on_terminal and done:
                log_line(done, total)
        result = build_library(gen_dir, build_dir / "_".join(archs), archs, jobs or None,
                               progress=progress, unity=UNITY_SOURCES, strict_warnings=True)
    return result


@dataclass
class BuiltSet:
    manifest: dict
    archs: tuple[str, ...]
    result: object          # harness.core.build.BuildResult
    has_gpu: bool
    device_name: str | None


def build_for_check(gen_dir: Path, build_dir: Path, arch: str, jobs: int) -> BuiltSet | int:
    """Build an emitted set for the checks (the GPU's architecture when one is present) and report
    kernels with local memory; an exit status where that fails."""
    manifest_path = gen_dir / "manifest.json"
    if not manifest_path.exists():
        click.echo(f"error: {manifest_path} not found; run gemmgen generate first", err=True)
        return 2
    manifest = json.loads(manifest_path.read_text())
    has_gpu = gpu_available()
    device_name = None
    try:
        if arch.strip().lower() == "all":
            archs = tuple(manifest["archs"])
        elif arch:
            archs = parse_archs(arch)
        elif has_gpu:
            gpu_arch, device_name = device_arch()
            archs = (gpu_arch,)
        else:
            # Without a GPU, the newest architecture of the set: the one the packaged tables were tuned
            # on, and the one whose code paths (cp.async, sm_90a) are the most numerous.  Each further
            # architecture costs about as much again to compile; `--arch all` asks for every one.
            archs = (max(manifest["archs"], key=lambda a: ARCHS[a].cc),)
            if len(manifest["archs"]) > 1:
                click.echo(f"no GPU here: compiling for {archs[0]}, the newest architecture of the set "
                           f"(--arch all: {','.join(manifest['archs'])})")
    except ValueError as err:
        click.echo(f"error: {err}", err=True)
        return 2
    try:
        result = build_set(gen_dir, build_dir, archs, jobs)
    except (BuildError, ToolchainError) as err:
        click.echo(f"error: {err}", err=True)
        return 1
    local = result.local_memory_kernels
    sources = sum(len(m) for m in result.units.values()) + len(result.objects) - len(result.units)
    size = ""
    if result.library:
        size = f", library {result.library.stat().st_size / 1e6:.0f} MB"
        code = device_code(result.library)
        if code is not None:
            size += f" (machine code {code.stored_bytes / 1e6:.0f} MB, {code.expanded_bytes / 1e6:.0f} MB expanded)"
    click.echo(f"compiled {sources} sources ({len(result.objects)} translation units) for {','.join(archs)}: "
               f"{len(result.resources)} kernel builds, {len(local)} with local memory or spills{size}")
    for r in local[:20]:
        click.echo(f"  local memory: {r.source} {r.function} {r.arch} stack {r.stack_bytes} B, spills "
                   f"{r.spill_stores}/{r.spill_loads} B")
    return BuiltSet(manifest, archs, result, has_gpu, device_name)


def run_check(gen_dir: Path, build_dir: Path, arch: str, jobs: int, report: Path | None,
              quick: bool, precisions: tuple[str, ...] = ()) -> int:
    built = build_for_check(gen_dir, build_dir, arch, jobs)
    if isinstance(built, int):
        return built
    manifest, archs, result, device_name = built.manifest, built.archs, built.result, built.device_name
    local = result.local_memory_kernels
    if not built.has_gpu:
        click.echo("no GPU present: no CUDA kernel ran (compile-only check of the CUDA sources)")
        return 1 if local else 0

    header = {
        "device": device_name or device_arch()[1],
        "arch": archs[0],
        "command": f"gemmgen check --generated {gen_dir}" + (" --quick" if quick else "")
                   + (f" --precisions {','.join(precisions)}" if precisions else ""),
        "generated_with": manifest["command"],
        "host": platform.node(),
        "local_memory_kernels": len(local),
    }
    partial = (lambda so_far: write_report(report, header, so_far, complete=False)) if report else None
    results = gpu_checks(result.library, manifest, quick, jobs, precisions, partial=partial)
    summarize(results)
    failed = [r for r in results if not r.passed]
    if report:
        write_report(report, header, results, complete=True)
        click.echo(f"wrote {report}")
    click.echo(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed or local else 0


def write_report(path: Path, header: dict, results: list, complete: bool) -> None:
    """The check's JSON report: `header`, the counts and every result so far.  Written while the checks
    run too (complete false), through a temporary file renamed over the report, so that a run cut
    short (a time limit, a crash) leaves a whole report of what it checked."""
    failed = sum(not r.passed for r in results)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps({**header, "complete": complete, "passed": len(results) - failed,
                                       "failed": failed, "results": [r.to_json() for r in results]},
                                      indent=1) + "\n")


def manifest_shapes(manifest: dict) -> dict[str, list[tuple[int, int, int]]]:
    """The (m, n, k) of every dispatch entry, per precision, in manifest order."""
    shapes: dict[str, list] = {}
    for e in manifest["dispatch"]:
        shape = (e["m"], e["n"], e["k"])
        if shape not in shapes.setdefault(e["precision"], []):
            shapes[e["precision"]].append(shape)
    return shapes


def narrow_entry_cases(manifest: dict, cases: list) -> Iterator:
    """Where a shape has a row for one GPU model or for launches up to a size next to its plain row, the
    public entry points reach one of its kernels on the device present (and the checks' launches are
    small): every kernel of such a shape runs the shape's strided cases through its own launcher (the
    only interface those rows serve)."""
    narrowed: dict[tuple, set] = {}
    for e in manifest["dispatch"]:
        narrowed.setdefault((e["precision"], e["m"], e["n"], e["k"]), set()).add(e["kernel"])
    keyed = {(e["precision"], e["m"], e["n"], e["k"]) for e in manifest["dispatch"]
             if e.get("device") or e.get("max_megabytes")}
    for case in cases:
        shape = (case.precision, case.m, case.n, case.k)
        if shape in keyed and not case.kernel and case.interface == "strided" and case.alpha != 0:
            for name in sorted(narrowed[shape]):
                yield replace(case, kernel=name)


def gpu_checks(library: Path, manifest: dict, quick: bool, jobs: int, precisions: tuple[str, ...] = (),
               progress_lines: bool = False, part: tuple[int, int] = (0, 1),
               partial: Callable[[list], None] | None = None) -> list:
    """Every NumPy check of an emitted set's CUDA kernels on the GPU present, through the C API of
    `library`: the small and wmma families' cases (every shape, transpose pair, interface, packed
    and padded, β = 0 and ≠ 0, the cp.async rings' long batches), 64-bit strides, tall-skinny.
    precisions: only these (all when empty).  progress_lines: a line every 2% of the cases with the
    time so far (for logs, where the progress bar shows nothing; also whenever stdout is not a
    terminal, so that a run cut short says how far it got).  part (i, n): the i-th of n parts
    of the cases, drawn in a fixed random order (cases come in groups of a shape's variants, which a
    plain stride would split unevenly), and the large-stride and tall-skinny checks in part 0 only
    (to split one check over processes).  partial: called with the results so far every 2% of the
    cases (a report that a run cut short still leaves)."""
    import numpy as np

    from gemmgen.harness.core import cases as check_cases
    from gemmgen.harness.core.api import GemmgenLibrary

    lib = GemmgenLibrary(library)
    if precisions:
        manifest = dict(manifest, dispatch=[e for e in manifest["dispatch"] if e["precision"] in precisions])
        if "tallskinny" in manifest:
            manifest["tallskinny"] = dict(manifest["tallskinny"], dispatch=[
                e for e in manifest["tallskinny"].get("dispatch", []) if e["precision"] in precisions])
    shapes = manifest_shapes(manifest)
    rng = np.random.default_rng(20261122)
    # Shapes whose kernel copies contiguous matrices through a cp.async ring: a small kernel with
    # `stages` or `array_stages`, or a warp wmma kernel (each warp its own ring).
    ring_shapes = frozenset((e["precision"], e["m"], e["n"], e["k"]) for e in manifest["dispatch"]
                            if parse_kernel(e["kernel"]).copies_through_ring)
    cases = list(check_cases.default_cases(shapes, rng, thorough=not quick, ring_shapes=ring_shapes))
    cases += list(narrow_entry_cases(manifest, cases))
    cases += list(check_cases.edge_cases(list(shapes)))
    if manifest.get("wmma", {}).get("kernels"):
        from gemmgen.harness.wmma import check as check_wmma

        cases += check_wmma.manifest_cases(manifest, rng, thorough=not quick)
    if precisions:
        cases = [c for c in cases if c.precision in precisions]
    # a kernel called through its own launcher must have been built for this device (kernel_bands)
    bands, cc = kernel_bands(manifest["dispatch"]), int(device_arch()[0][3:])
    cases = [c for c in cases if not c.kernel or builds_on(bands.get(c.kernel), cc)]
    index, parts = part
    if parts > 1:
        order = np.random.default_rng(parts).permutation(len(cases))
        cases = [cases[j] for j in sorted(order[index::parts])]
    progress_lines = progress_lines or not sys.stdout.isatty()
    start = time.monotonic()

    results: list = []

    def every_2_percent(done: int, total: int) -> bool:
        return done % max(1, total // 50) == 0 or done == total

    def lines(label: str):
        def line(done: int, total: int) -> None:
            if every_2_percent(done, total):
                click.echo(f"{label} {done}/{total} in {time.monotonic() - start:.0f} s")
        return line

    def with_partial(progress: Callable[[int, int], None]) -> Callable[[int, int], None]:
        def step(done: int, total: int) -> None:
            progress(done, total)
            if partial and every_2_percent(done, total):
                partial(results)
        return step
    with click.progressbar(length=len(cases), label="checks", show_pos=True) as bar:
        progress = lines("checks") if progress_lines else lambda done, total: bar.update(1)
        check_cases.run_cases(lib, cases, progress=with_partial(progress),
                              workers=min(jobs or os.cpu_count() or 1, CHECK_WORKERS), into=results)
    if index:
        return results
    for prec in ("h", "s") if not precisions else [p for p in ("h", "s") if p in precisions]:
        # 4×4×4, or the largest square under it that the set covers (a set of sizes 1-3 has no 4)
        n = max((size for size in range(1, 5) if lib.is_generated(prec, size, size, size)), default=0)
        if prec in shapes and n:
            results.append(check_cases.check_large_stride(lib, prec, n))
    if manifest.get("tallskinny", {}).get("dispatch"):
        from gemmgen.harness.tallskinny import check as check_tallskinny

        click.echo("tall-skinny checks (TSM2, ISM2, TSMMA)")
        progress = lines("tall-skinny checks") if progress_lines else None
        results += check_tallskinny.run_manifest_checks(lib, manifest, quick, progress=progress)
    return results


def summarize(results: list) -> None:
    """Per precision: passed, failed, the largest error over its bound; the first failures."""
    failed = [r for r in results if not r.passed]
    by_prec = Counter((r.precision, r.passed) for r in results)
    for prec in sorted({r.precision for r in results}):
        worst = max((r.max_error / r.bound for r in results if r.precision == prec and r.bound > 0
                     and r.max_error == r.max_error), default=0.0)
        click.echo(f"{prec:>2}: {by_prec[(prec, True)]} passed, {by_prec[(prec, False)]} failed; "
                   f"largest error/bound {worst:.3g}")
    for r in failed[:30]:
        click.echo(f"FAIL {r.precision} {r.m}x{r.n}x{r.k} {r.transa}{r.transb} {r.interface} "
                   f"{r.kind} batch {r.batch}: rc {r.rc}, err {r.max_error:.3g} (bound {r.bound:.3g}), "
                   f"untouched {r.untouched_ok}, exact {r.exact_ok}")
