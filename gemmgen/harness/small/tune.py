"""`gemmgen tune small`: sweep tba and the N̂ blocking of every shape on the GPU present.

Kernel Tuner's habits: the candidates and their restrictions are data (generator.small.
sweep_candidates), every result goes to an append-only JSON-lines file as soon as it exists (an
interrupted sweep resumes where it stopped), and a variant that is skipped keeps its reason:
refused by the spec, did not compile, used local memory, gave a wrong answer, failed to launch."""
from __future__ import annotations

import ctypes
import functools
import hashlib
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import click
import numpy as np

from gemmgen.generator import small, wmma
from gemmgen.generator.emit import kernel_source, kernel_source_path, support_files
from gemmgen.generator.arch import DEFAULT_ARCHS
from gemmgen.generator.manifest import Selection
from gemmgen.generator.tuning import is_keyed_row, load_table, row_order, save_table, writable_table

from gemmgen.harness.core import reference as ref
from gemmgen.harness.core.api import variant_function
from gemmgen.harness.core import busy
from gemmgen.harness.core.build import BuildError, build_library, sweep_unity, write_if_changed
from gemmgen.harness.core.results import append_result, in_turn, load_results, standing_refusals
from gemmgen.harness.check import device_arch
from gemmgen.harness.core.timing import copy_bandwidth, median_time_ms
from gemmgen.harness.core.toolchain import gpu_available
from gemmgen.harness.core.workload import Workload, batch_for_megabytes, bytes_moved, rotation_sets
from gemmgen.harness.small.narrow import NARROW_MEGABYTES, launch_megabytes

def correct(f, spec: small.SmallSpec, arrays: bool = False) -> tuple[bool, float]:
    """One NN launch on a small packed batch (not a multiple of tba) against NumPy; `arrays`: f
    is the variant's pointer-array launcher, given pointers to the same matrices."""
    import cupy as cp

    work = Workload(spec.precision, spec.m, spec.n, spec.k, 37)
    host = {name: ref.from_storage(spec.precision, cp.asnumpy(getattr(work, name)).reshape(
        (-1, 2) if spec.precision == "hc" else (-1,))) for name in "ABC"}
    (work.ours_array(f, 1.0, 0.5, takes_shape=False) if arrays else work.ours(f, 1.0, 0.5))(0)
    cp.cuda.runtime.deviceSynchronize()
    got = ref.from_storage(spec.precision, cp.asnumpy(work.C).reshape((-1, 2) if spec.precision == "hc" else (-1,)))
    m, n, k, b = spec.m, spec.n, spec.k, 37
    a = ref.matrices(host["A"], b, m, k, m, m * k)
    bb = ref.matrices(host["B"], b, k, n, k, k * n)
    c0 = ref.matrices(host["C"], b, m, n, m, m * n)
    expected = ref.reference("N", "N", 1.0, a, bb, 0.5, c0)
    err = float(np.max(ref.relative_errors(ref.matrices(got, b, m, n, m, m * n), expected, 1.0, a, bb, 0.5, c0)))
    work.release()
    return err <= ref.error_bound(spec.precision, k), err


def sweep(selection: Selection, arch: str, around_table: bool, arrays: bool = False) -> list[small.SmallSpec]:
    """The candidates of a run: the full sweep of every selected shape, (around_table) the
    neighbourhood of each selected shape's row in the present table, or (arrays) each row without a
    ring with every pointer-array ring depth, 0 included, and for each row with a ring the ring
    tuples of its neighbourhood (timed through both interfaces: best_variants says why)."""
    if arrays:
        rows = [r for r in load_table(arch).get("small", [])
                if r["precision"] in selection.precisions and (r["m"], r["n"], r["k"]) in selection.all_shapes]
        staged = [spec for r in rows if not r.get("stages") for depth in (0, *small.RING_STAGES)
                  for spec in (replace(small.SmallSpec.from_row(r), array_stages=depth),) if spec.is_valid(arch)]
        ringed = {spec for r in rows if r.get("stages")
                  for spec in (small.SmallSpec.from_row(r), *small.neighbourhood(r, arch)) if spec.stages}
        return sorted(set(staged) | ringed)
    if not around_table:
        return [spec for p in selection.precisions for shape in selection.all_shapes
                for spec in small.sweep_candidates(p, *shape, arch=arch)]
    rows = {(r["precision"], r["m"], r["n"], r["k"]): r for r in load_table(arch).get("small", [])}
    return [spec for p in selection.precisions for shape in selection.all_shapes
            if (p, *shape) in rows for spec in small.neighbourhood(rows[(p, *shape)], arch)]


MEGABYTES = 256   # data moved per launch (A, B and C), far above L2


def run_tune(selection: Selection, results_path: Path, build_dir: Path, megabytes: int,
             write_table: bool, jobs: int, around_table: bool = False, arrays: bool = False) -> int:
    """arrays: time the pointer-array interface (results marked "interface": "array") of the
    table's tuples without a ring, with and without a ring for arrays alone (array_stages), and the
    neighbourhood of the tuples with a ring through both interfaces."""
    if not gpu_available():
        click.echo("error: no GPU present; gemmgen tune measures on the GPU it runs on", err=True)
        return 2
    arch, device = device_arch()
    # A full sweep skips what this device measured before (it resumes); a neighbourhood or arrays
    # run measures its few candidates again so that they are compared within one run.
    measure_sweep(selection, arch, device, results_path, build_dir, megabytes, jobs, around_table, arrays,
                  resume=not (around_table or arrays))
    if write_table:
        verify_and_write_table(results_path, arch, device, build_dir, jobs, "gemmgen tune small")
    return 0


def measured_names(rows: list[dict], device: str, arrays: bool = False) -> set[str]:
    """The variants a sweep finds done in its results: any result of the name on this device (a
    timing or a refusal); for an `arrays` run only the rows of an arrays run ("sweep": "arrays"),
    as the squares' timings of the same tuples are no pointer-array timings."""
    return {r["name"] for r in rows if r.get("device") == device and "name" in r
            and (not arrays or r.get("sweep") == "arrays")}


def _chunks(specs: list[small.SmallSpec], size: int) -> list[list[small.SmallSpec]]:
    """The variants in shape order, cut into pieces of whole shapes of about `size` variants (0: one
    piece): each piece is compiled, then timed, so a budget stops after a piece's compile, not all."""
    by_shape = defaultdict(list)
    for spec in specs:
        by_shape[(spec.precision, spec.shape)].append(spec)
    pieces: list[list[small.SmallSpec]] = [[]]
    for _, group in sorted(by_shape.items()):
        if size and pieces[-1] and len(pieces[-1]) + len(group) > size:
            pieces.append([])
        pieces[-1].extend(group)
    return [p for p in pieces if p]


def measure_sweep(selection: Selection, arch: str, device: str, results_path: Path, build_dir: Path,
                  megabytes: int, jobs: int, around_table: bool = False, arrays: bool = False,
                  resume: bool = True, stop=None, chunk: int = 0, time_chunk=None, spread=in_turn) -> int:
    """Compile and time the sweep's candidates (sweep()), appending every result to results_path;
    resume: leave out those measured_names finds done.  `stop()` (a budget) is asked between
    variants: once it says so, the rest waits for another run.  Returns the variants left untimed.
    chunk: compile and time about this many variants at a time (0: all at once); time_chunk: what
    compiles and times one piece (_time_chunk; tests give a fake); spread: what runs the pieces
    (results.in_turn, or harness.distributed's workers, one piece a GPU)."""
    candidates = sweep(selection, arch, around_table, arrays)
    done = measured_names(load_results(results_path), device, arrays) if resume else set()
    todo = [s for s in candidates if s.name not in done]
    click.echo(f"{device} ({arch}): {len(candidates)} candidates, {len(todo)} not yet measured")
    base = {"arch": arch, "device": device, **({"sweep": "arrays"} if arrays else {})}
    work = functools.partial(time_chunk or _time_chunk, selection=selection, arch=arch, base=base,
                             build_dir=build_dir, megabytes=megabytes, arrays=arrays)
    return len(todo) - spread(_chunks(todo, chunk), work, results_path, jobs, stop or (lambda: False))


def _time_chunk(todo: list[small.SmallSpec], selection: Selection, arch: str, base: dict, results_path: Path,
                build_dir: Path, megabytes: int, jobs: int, arrays: bool, stop) -> int:
    """Compile `todo` (NN launchers, one library) and time each variant on the GPU, appending its result
    (or its refusal) to results_path; stops early where stop() says so.  Returns the variants done."""
    command = "gemmgen tune small"
    root = build_dir / arch
    for rel, text in support_files(command, (arch,), selection.precisions).items():
        write_if_changed(root / rel, text)   # (the headers every piece includes, shared by the workers)
    sources = []
    for spec in todo:
        path = root / kernel_source_path(spec)
        write_if_changed(path, kernel_source(spec, command, trans_pairs=(('N', 'N'),)))
        sources.append(path)
    # One library per set of variants: a process that times several pieces (gemmgen tune) must not get
    # an earlier piece's library back from dlopen, which hands out a loaded library by its path.
    tag = hashlib.sha1(" ".join(sorted(s.name for s in todo)).encode()).hexdigest()[:12]
    # In unity units (sweep_unity): a unit that fails is compiled again one source at a time, and
    # resources name each variant's own source, so refusals stay per variant.
    with click.progressbar(length=len(sources), label="nvcc sweep", show_pos=True) as bar:
        def progress(done, total):
            bar.length = total   # (compiles: units, and a failed unit's members)
            bar.update(done - bar.pos)
        built = build_library(root, root / "build", (arch,), jobs or None, sources=sources,
                              tolerate_failures=True, library_name=f"libtune_{tag}.so", progress=progress,
                              unity=sweep_unity(len(sources), jobs))
    for rel, message in built.failures.items():
        spec = small.SmallSpec.parse(Path(rel).stem)
        append_result(results_path, {**base, **_interface(spec, arrays), **_spec_fields(spec),
                                     "status": "compile-failed", "reason": message[-500:]})
    with busy.on_gpu():   # (a worker of a distributed run compiles its next piece meanwhile)
        return len(built.failures) + _time_built(todo, built, arch, base, results_path, megabytes, arrays, stop)


def _time_built(todo: list[small.SmallSpec], built, arch: str, base: dict, results_path: Path, megabytes: int,
                arrays: bool, stop) -> int:
    """_time_chunk's timings of the variants `built` holds; returns the variants done."""
    done = 0
    local = {Path(r.source).stem for r in built.local_memory_kernels}
    lib = ctypes.CDLL(str(built.library)) if built.library else None
    bandwidth = copy_bandwidth()
    click.echo(f"copy bandwidth {bandwidth / 1e9:.0f} GB/s")
    failed_names = {Path(rel).stem for rel in built.failures}
    by_shape = defaultdict(list)
    for spec in todo:
        if spec.name not in failed_names:
            by_shape[(spec.precision, spec.shape)].append(spec)
    with click.progressbar(sorted(by_shape.items()), label="measure", show_pos=True) as bar:
        for (prec, (m, n, k)), specs in bar:
            if stop():
                break
            batch = batch_for_megabytes(prec, m, n, k, megabytes)
            sets = rotation_sets(bytes_moved(prec, m, n, k, batch, False))   # --megabytes below L2
            work = Workload(prec, m, n, k, batch, sets=sets)
            floor_ms = bytes_moved(prec, m, n, k, batch, False) / bandwidth * 1e3
            for spec in specs:
                if stop():
                    break
                done += 1
                if spec.name in local:
                    append_result(results_path, {**base, **_interface(spec, arrays), **_spec_fields(spec),
                                                 "batch": batch, "status": "local-memory",
                                                 "reason": "ptxas reported stack or spills"})
                    continue
                for array in ((False, True) if arrays and spec.stages else (arrays,)):
                    row = {**base, **({"interface": "array"} if array else {}), **_spec_fields(spec), "batch": batch}
                    try:
                        f = variant_function(lib, spec.name, "array" if array else "strided")
                        ok, err = correct(f, spec, array)
                        if not ok:
                            append_result(results_path, {**row, "status": "wrong-answer",
                                                         "reason": f"relative error {err:.3g}"})
                            continue
                        launch = work.ours_array(f, 1.0, 0.0, takes_shape=False) if array else work.ours(f, 1.0, 0.0)
                        ms = median_time_ms(launch, launches_per_graph=max(5, sets), repeats=7)
                    except Exception as exc:
                        append_result(results_path, {**row, "status": "launch-failed", "reason": str(exc)[:300]})
                        continue
                    append_result(results_path, {**row, "status": "ok", "time_us": ms * 1e3,
                                                 "floor_fraction": floor_ms / ms})
            work.release()
    return done


def _interface(spec: small.SmallSpec, arrays: bool) -> dict:
    """The interface mark of a refusal at build in an `arrays` run: "array" for a variant timed on
    pointer arrays alone; none for a tuple with a ring, timed through both launchers, so that the
    refusal stands for both."""
    return {"interface": "array"} if arrays and not spec.stages else {}


def verify_and_write_table(results_path: Path, arch: str, device: str, build_dir: Path, jobs: int,
                           command: str) -> Path:
    """The last step of a sweep, also run on its own (nvcc only, no GPU): refuse the winners with
    local memory in any transpose or default architecture, then write the table."""
    refused = verify_winners(results_path, device, arch, build_dir, jobs)
    click.echo(f"verified the winners with every transpose on {', '.join(DEFAULT_ARCHS)}: "
               f"{refused} refused for local memory")
    path = write_tuning_table(results_path, arch, device, command)
    click.echo(f"wrote {path}")
    return path


def verify_winners(results_path: Path, device: str, arch: str, build_dir: Path, jobs: int,
                   archs: tuple[str, ...] = DEFAULT_ARCHS, shapes: set[tuple] | None = None) -> int:
    """The sweep compiles and times NN launchers only; a winner must also be free of local memory
    with every transpose pair and on every default architecture.  Compile each shape's fastest
    remaining variant in full; record a refusal for one that spills and try the next.  Returns
    the number of refusals recorded.  `shapes` ((precision, m, n, k), ...): only these (after a
    template change that made a few table kernels spill; the NN timings stay valid)."""
    refused = 0
    while True:
        winners = {key: v for key, v in table_specs(results_path, device, arch).items()
                   if shapes is None or key in shapes}
        root = build_dir / "verify"
        for rel, text in support_files("gemmgen tune small (verify)", archs, ()).items():
            write_if_changed(root / rel, text)
        sources = []
        for _, spec in winners.values():
            path = root / kernel_source_path(spec)
            write_if_changed(path, kernel_source(spec, "gemmgen tune small (verify)"))
            sources.append(path)
        # In unity units whose resources name each winner's own source (a failure still stops here)
        built = build_library(root, root / "build", archs, jobs or None, sources=sources, link=False,
                              tolerate_failures=True, unity=sweep_unity(len(sources), jobs))
        if built.failures:
            raise BuildError("\n".join(built.failures.values()))
        spilling = {}
        for r in built.local_memory_kernels:
            spilling.setdefault(Path(r.source).stem, r)
        if not spilling:
            return refused
        for name, r in sorted(spilling.items()):
            spec = small.SmallSpec.parse(name)
            # a tuple with a pointer-array ring is refused as an array variant: its strided winner stays
            interface = {"interface": "array"} if spec.array_stages else {}
            append_result(results_path, {
                "arch": arch, "device": device, **interface, **_spec_fields(spec), "status": "local-memory",
                "reason": f"all-transposes build: {r.arch} {r.function[:60]} stack {r.stack_bytes} B, "
                          f"spills {r.spill_stores}/{r.spill_loads} B"})
            refused += 1


ARRAY_RING_MIN_GAIN = 1.10  # a pointer-array ring must be this much faster than the staged path


def _refused_at_build(row: dict) -> bool:
    """A refusal by the sweep's own build (a failed compile, local memory), as opposed to one by
    verify_winners's all-transposes build, a wrong answer or a failed launch."""
    return row["status"] == "compile-failed" or (
        row["status"] == "local-memory" and not row.get("reason", "").startswith("all-transposes"))


def _latest(rows: list[dict]) -> dict[str, dict]:
    """Per variant name, its latest result if it was measured correct and is not refused
    (results.standing_refusals: a refusal at the sweep's build gives way to a later clean result,
    any other stands whatever was measured before or after).  The latest time counts: a
    re-measurement happened in a run that compared the variant with its neighbours."""
    standing, at_build = standing_refusals(rows, _refused_at_build)
    refused = standing | at_build
    return {r["name"]: r for r in rows if r["status"] == "ok" and r["name"] not in refused}


def per_gemm(row: dict) -> float:
    """A result's time per GEMM (µs): runs with different --megabytes time different batches."""
    return row["time_us"] / row["batch"]


def _fastest(rows: list[dict], key) -> dict[tuple, dict]:
    """Per key(row), the fastest variant (_latest: correct, never refused, latest time)."""
    best: dict[tuple, dict] = {}
    for r in _latest(rows).values():
        k = key(r)
        if k not in best or per_gemm(r) < per_gemm(best[k]):
            best[k] = r
    return best


# fp16 accumulation (the acc16 knob) gives up accuracy (sums rounded to fp16 at every step, fp16's
# range) for fewer instructions, so the table takes it only for a clear gain, not for a difference
# within the run-to-run spread of the sweep's timings.
ACC16_MIN_GAIN = 1.05


# One tuple serves both interfaces, and tuples within a few per cent of each other on strided
# batches differ by up to 1.5x on pointer arrays (the `--arrays` run of 2026-11-24: s 28×28×28 0.99
# and 0.98 of the floor strided, 0.61 and 0.90 through pointer arrays).  So where an `--arrays` run
# timed a shape's ring tuples through both launchers, the shape's tuple comes from that comparison
# (and from any variant timed after it): the strided winner among them, traded for the fastest on
# pointer arrays among those within BALANCE_STRIDED_TOLERANCE of it (same accumulator) where that
# one beats the winner there by BALANCE_ARRAY_MIN_GAIN (less is within the spread).  Variants timed
# only in earlier runs lost to the row's tuple then, and their old times are no match for one run's.
BALANCE_STRIDED_TOLERANCE = 1.05
BALANCE_ARRAY_MIN_GAIN = 1.10


def _strided_winners(rows: list[dict], shape) -> dict[tuple, dict]:
    """Per shape, the fastest on strided batches; one accumulating in fp16 only where it beats the
    fastest fp32 one by ACC16_MIN_GAIN."""
    fp32 = _fastest([r for r in rows if not r.get("acc16")], shape)
    fp16 = _fastest([r for r in rows if r.get("acc16")], shape)
    best = dict(fp32)
    for key, row in fp16.items():
        if key not in fp32 or per_gemm(row) * ACC16_MIN_GAIN <= per_gemm(fp32[key]):
            best[key] = row
    return best


def best_variants(results_path: Path, device: str, arch: str) -> dict[tuple, dict]:
    """Per precision and shape, the strided winner (the sweep's measure, _strided_winners), or where
    an `--arrays` run timed the shape through both interfaces, the choice that run's comparison
    makes (BALANCE_*)."""
    # (launches up to NARROW_MEGABYTES rank the narrow rows, not these: narrow.py)
    results = [{**r, "_line": i} for i, r in enumerate(load_results(results_path))
               if r.get("device") == device and r.get("arch") == arch
               and ("batch" not in r or launch_megabytes(r) > NARROW_MEGABYTES)]
    rows = [r for r in results if r.get("interface", "strided") == "strided"]
    shape = lambda r: (r["precision"], r["m"], r["n"], r["k"])   # noqa: E731
    best = _strided_winners(rows, shape)
    # pointer-array timings of tuples with a ring (their array path is that ring; array_stages is 0)
    ring_arrays = [r for r in results if r.get("interface") == "array" and r.get("stages")]
    on_arrays = _latest(ring_arrays)
    last_arrays_run = {}
    for r in ring_arrays:
        last_arrays_run[shape(r)] = max(last_arrays_run.get(shape(r), -1), r["_line"])
    latest = _latest(rows)
    compared = [r for r in rows if shape(r) in last_arrays_run
                and (r["name"] in on_arrays or latest.get(r["name"], r)["_line"] > last_arrays_run[shape(r)])]
    compared_latest = _latest(compared)
    for key, winner in _strided_winners(compared, shape).items():
        best[key] = winner
        if winner["name"] not in on_arrays:
            continue   # a variant timed after the arrays run won: nothing to compare it with
        near = [r for r in compared_latest.values() if shape(r) == key and r["name"] in on_arrays
                and bool(r.get("acc16")) == bool(winner.get("acc16"))
                and per_gemm(r) <= per_gemm(winner) * BALANCE_STRIDED_TOLERANCE]
        pick = min(near, key=lambda r: per_gemm(on_arrays[r["name"]]))
        if per_gemm(on_arrays[pick["name"]]) * BALANCE_ARRAY_MIN_GAIN <= per_gemm(on_arrays[winner["name"]]):
            best[key] = pick
    return {key: {k: v for k, v in row.items() if k != "_line"} for key, row in best.items()}


def table_specs(results_path: Path, device: str, arch: str) -> dict[tuple, tuple[dict, small.SmallSpec]]:
    """Per precision and shape, the strided winner's row and the tuple the table names: the winner
    with the pointer-array ring depth (array_stages) that was fastest on pointer arrays in the
    latest `--arrays` run that measured this very tuple, where it beats the same tuple's staged
    pointer-array path by ARRAY_RING_MIN_GAIN (0 where none did), and only at shapes the dispatch
    gives the small family: where the wmma table sends an h/hc shape to a Tensor Core kernel, the
    small kernel serves direct calls by name alone, and a ring there would only add compile time."""
    rows = [r for r in load_results(results_path) if r.get("device") == device and r.get("arch") == arch
            and r.get("interface") == "array"]
    # keyed by the tuple without its array ring: the strided winner's own name
    arrays = _fastest(rows, lambda r: replace(small.SmallSpec.parse(r["name"]), array_stages=0).name)
    staged = _fastest([r for r in rows if not small.SmallSpec.parse(r["name"]).array_stages], lambda r: r["name"])
    wmma_rows = load_table(arch).get("wmma", [])
    out = {}
    for key, row in best_variants(results_path, device, arch).items():
        spec = small.SmallSpec.from_row(row, shape=key[1:])
        choice = wmma.shape_choice(wmma.table_rows(wmma_rows, key[0]), *key[1:])
        dispatched = choice is None or choice["choice"] == "small"
        ring = arrays.get(row["name"]) if dispatched and not spec.stages else None
        plain = staged.get(row["name"])
        # A ring is adopted only when it clearly pays: each one adds a kernel per transpose pair
        # and ring architecture to the default set (compile time, CI's budget), and a gain of a
        # few per cent is within the run-to-run spread of pointer-array timings.
        if ring and (plain is None or per_gemm(ring) * ARRAY_RING_MIN_GAIN <= per_gemm(plain)):
            spec = replace(spec, array_stages=small.SmallSpec.parse(ring["name"]).array_stages)
        out[key] = (row, spec)
    return out


def _spec_fields(spec: small.SmallSpec) -> dict:
    return {"name": spec.name, "precision": spec.precision, "m": spec.m, "n": spec.n, "k": spec.k,
            "dim_m": spec.dim_m, "dim_n": spec.dim_n, "tba": spec.tba, "hoist": spec.hoist, "stages": spec.stages,
            "array_stages": spec.array_stages, "acc16": spec.acc16, "mma": spec.mma, "pairs": spec.pairs}


def write_tuning_table(results_path: Path, arch: str, device: str, command: str) -> Path:
    """The fastest correct variant per precision and shape, from every result of this device, with
    its pointer-array ring depth (table_specs)."""
    best = table_specs(results_path, device, arch)
    counts: dict[tuple, int] = defaultdict(int)
    for r in load_results(results_path):
        if r.get("device") == device and r.get("arch") == arch:
            counts[(r["precision"], r["m"], r["n"], r["k"])] += 1
    table = writable_table(arch)
    table.update({"arch": arch, "device": device})
    table.setdefault("commands", {})["small"] = f"{command} (results: {results_path})"
    table["small"] = sorted([
        {"precision": r["precision"], "m": r["m"], "n": r["n"], "k": r["k"], "dim_m": r["dim_m"],
         "dim_n": r["dim_n"], "tba": r["tba"], "hoist": r.get("hoist", False), "stages": r.get("stages", 0),
         **({"array_stages": spec.array_stages} if spec.array_stages else {}),
         **({"acc16": True} if spec.acc16 else {}), **({"mma": True} if spec.mma else {}),
         **({"pairs": True} if spec.pairs else {}),
         "time_us": round(r["time_us"], 3),
         "floor_fraction": round(r["floor_fraction"], 4), "batch": r["batch"], "device": device,
         "candidates_tried": counts[key]}
        for key, (r, spec) in best.items()
    ] + [r for r in table.get("small", []) if is_keyed_row(r)], key=row_order)   # narrow.py's rows stay
    return save_table(arch, table)
