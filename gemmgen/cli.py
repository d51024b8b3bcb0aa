"""The `gemmgen` command line: list, generate, check, tune, bench.

Bad input ends with a one-line reason and a non-zero exit; nothing is written before the input
has been validated."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from . import __version__
from .generator import tallskinny
from .generator.arch import DEFAULT_ARCHS
from .generator.manifest import MAX_SIZE as SIZES_MAX
from .generator.manifest import Manifest, Selection, build_manifest
from .generator.precision import PRECISION_ORDER
from .generator.small import MAX_SIZE

DEFAULT_OUT = Path("generated")


def _selection(arch: str, precisions: str, sizes: str | None, shapes: str,
               tallskinny_n: str | None = None, max_size: int = SIZES_MAX) -> Selection:
    try:
        return Selection.parse(arch, precisions, sizes, shapes, tallskinny_n, max_size)
    except ValueError as err:
        raise click.ClickException(str(err)) from None


def _default_sizes(ctx: click.Context, param: click.Parameter, value: str) -> str | None:
    """None where --sizes was not given: the default asks for no size that the precisions lack
    (s, d, c, z stop at 32), where the same sizes written out are refused for s, d, c, z alone."""
    return None if ctx.get_parameter_source(param.name) is click.core.ParameterSource.DEFAULT else value


def selection_options(func):
    """The options that say what to generate (shared by list and generate)."""
    func = click.option("--shapes", default="", show_default=True,
                        help="Extra rectangular shapes MxNxK, e.g. 3x5x7,2x4x8 (each ≤ 32).")(func)
    func = click.option("--sizes", default=f"1-{SIZES_MAX}", show_default=True, callback=_default_sizes,
                        help=f"Square sizes N (M = N = K), e.g. 1-{SIZES_MAX} or 2,4,8.  Above {MAX_SIZE} only h and hc "
                             "have exact-shape kernels (one warp per GEMM, where the tuned table chose one; "
                             "otherwise their general Tensor Core kernel serves): s, d, c, z skip those sizes, "
                             "and asking for them with s, d, c, z alone is an error.")(func)
    func = click.option("--precisions", default=",".join(PRECISION_ORDER), show_default=True,
                        help="Comma-separated subset of h,hc,s,d,c,z (or 'all').")(func)
    func = click.option("--arch", default=",".join(DEFAULT_ARCHS), show_default=True,
                        help="Target architectures, e.g. sm_80,sm_90.")(func)
    return func


def tables_option(func):
    """--tables DIR: a folder of tables made by `gemmgen tune` (list and generate); more than once for
    several devices."""
    return click.option("--tables", type=click.Path(path_type=Path), multiple=True,
                        help="A folder of tuning tables made by `gemmgen tune --results` (<device>.json, "
                             "cpu_<isa>.json): each family's rows there serve instead of the packaged table's "
                             "of the same architecture (default: the packaged tables alone).  Again for "
                             "another device's folder: the first folder's table serves every GPU of its "
                             "architecture, a later one's small rows serve only its device (chosen by "
                             "cudaDeviceProp.name at run time).")(func)


def _with_tables(selection: Selection, tables: tuple[Path, ...]) -> tuple[Selection, list[str]]:
    """The selection reading `tables` (checked: each a folder holding at least one usable table, and
    together no device twice for an architecture), and what of the later folders is not used."""
    if not tables:
        return selection, []
    import dataclasses

    from .generator.tuning import TableError, stack_notes

    try:
        notes = stack_notes(tables)
    except TableError as err:
        raise click.ClickException(f"--tables: {err}") from None
    return dataclasses.replace(selection, tables=tuple(str(t) for t in tables)), notes


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gemmgen")
def main() -> None:
    """gemmgen: size-specialized batched small-GEMM kernels for CUDA (and C++ SIMD)."""


def _print_manifest(manifest: Manifest) -> None:
    from .generator.cost import build_cost
    from .generator.tuning import row_key_label

    click.echo(f"# {manifest.selection.command()}")
    click.echo(f"# {len(manifest.kernels)} kernels, {len(manifest.dispatch)} dispatch entries")
    for line in manifest.table_summary():
        click.echo(f"# {line}")
    for line in manifest.tables_not_used:
        click.echo(f"# {line}")
    click.echo(f"# to compile: {build_cost(manifest).summary()}")
    for e in manifest.dispatch:
        narrow = row_key_label({**({"for_device": e.device} if e.device else {}),
                                **({"max_megabytes": e.max_megabytes} if e.max_megabytes else {})})
        click.echo(f"{e.precision:>2} {e.m:>2}x{e.n:>2}x{e.k:<2} sm_{e.cc}+  {e.kernel.name:<40} "
                   f"{e.kernel.threads:>4} threads {e.kernel.smem_bytes:>6} B smem  ({e.source})"
                   + (f"  [only {narrow}]" if narrow else ""))
    for note in manifest.notes:
        click.echo(f"note: {note}")


@main.command("list")
@selection_options
@tables_option
@click.option("--json", "as_json", is_flag=True, help="Print the manifest as JSON.")
@click.option("--tallskinny-n", default="1-32", show_default=True,
              help="n of the tall-skinny families (TSM2/ISM2, h/s/d), any n up to 256; '' for none.")
def list_cmd(arch, precisions, sizes, shapes, tables, as_json, tallskinny_n):
    """Show which kernel variants a selection would emit, which serves each shape, and what compiling
    them costs: the CUDA sources and the kernel builds (kernels ptxas compiles, over every transpose
    pair, interface and target architecture)."""
    manifest = build_manifest(_with_tables(_selection(arch, precisions, sizes, shapes, tallskinny_n), tables)[0])
    if as_json:
        from .generator.cost import build_cost

        cost = build_cost(manifest)
        listing = {**manifest.to_json(), "build_cost": {
            "cuda_sources": cost.sources, "kernels_by_arch": cost.kernels_by_arch,
            "kernel_builds": cost.kernel_builds}}
        click.echo(json.dumps(listing, indent=1, sort_keys=True))
    else:
        _print_manifest(manifest)


@main.command()
@selection_options
@tables_option
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=DEFAULT_OUT, show_default=True,
              help="Output folder.")
@click.option("--dry-run", is_flag=True, help="Print the manifest and the files, write nothing.")
@click.option("--tallskinny-n", default="1-32", show_default=True,
              help="n of the tall-skinny families (TSM2/ISM2, h/s/d), any n up to 256; '' for none.")
@click.option("--cpu-isa", default="all", show_default=True,
              help="ISAs of the cpu family: generic,avx2,avx512,neon (generic is always emitted).")
def generate(arch, precisions, sizes, shapes, tables, out_dir: Path, dry_run, tallskinny_n, cpu_isa):
    """Emit CUDA and C++ sources, include/gemmgen.h, include/gemmgen_cpu.h, CMakeLists.txt and
    manifest.json."""
    import dataclasses

    from .generator import cpu
    from .generator.emit import plan, write

    selection, not_used = _with_tables(_selection(arch, precisions, sizes, shapes, tallskinny_n), tables)
    try:
        selection = dataclasses.replace(selection, cpu_isas=cpu.parse_isas(cpu_isa))
    except ValueError as err:
        raise click.ClickException(str(err)) from None
    if out_dir.exists() and not out_dir.is_dir():
        raise click.ClickException(f"output {out_dir} exists and is not a folder")
    manifest = build_manifest(selection)
    for line in not_used:
        click.echo(f"gemmgen: {line}", err=True)
    if dry_run:
        _print_manifest(manifest)
        for rel in sorted(plan(manifest)):
            click.echo(f"would write {out_dir / rel}")
        return
    written = write(manifest, out_dir)
    click.echo(f"wrote {len(written)} files ({len(manifest.kernels)} kernels, "
               f"{len(manifest.cpu_kernels)} CPU kernels) to {out_dir}")


@main.command()
@click.option("--generated", "gen_dir", type=click.Path(path_type=Path), default=DEFAULT_OUT,
              show_default=True, help="Emitted set to build and check.")
@click.option("--build-dir", type=click.Path(path_type=Path), default=Path("build"), show_default=True)
@click.option("--arch", default="", help="Architectures to compile, or 'all' for every one of the set "
              "(default: the GPU's when one is present, else the newest of the set).")
@click.option("--jobs", "-j", type=int, default=0,
              help="Parallel nvcc processes, and processes running the GPU checks (at most 8) "
                   "(default: all cores).")
@click.option("--report", type=click.Path(path_type=Path), default=None,
              help="Write the check results as JSON here; rewritten as the checks go, with "
                   "\"complete\": false until they end.")
@click.option("--quick", is_flag=True, help="Random data for one transpose pair per shape only.")
@click.option("--cpu/--no-cpu", "with_cpu", default=True, show_default=True,
              help="Also build the CPU kernels with g++ and check them (every ISA this machine runs; "
                   "NEON under qemu-aarch64 where installed).")
@click.option("--cpu-report", type=click.Path(path_type=Path), default=None,
              help="Write the CPU check results as JSON here.")
@click.option("--recheck", is_flag=True,
              help="Run the CPU checks even where they all passed on an identical build before.")
@click.option("--sanitize", "sanitize_tools", default="", metavar="TOOLS",
              help="Run the GPU checks under compute-sanitizer instead, once per tool (memcheck, racecheck, "
                   "synccheck, initcheck, or all), every operand in an allocation of exactly its bytes; "
                   "fails on any report.  --report then gets the sanitizer summary.")
@click.option("--precisions", "only", default="", help="GPU checks of these precisions only (default: all).")
@click.option("--sanitize-parts", "sanitize_parts", default="", metavar="PARTS",
              help="With --sanitize: only these parts of each precision's checks (e.g. 0-3 or 4,5; h and hc "
                   "are split into 8 parts, s, d and c into 2, the others are one part, 0), so that a long "
                   "tool can be run in pieces.")
def check(gen_dir: Path, build_dir: Path, arch, jobs, report, quick, with_cpu, cpu_report, recheck, sanitize_tools,
          only, sanitize_parts):
    """Compile everything emitted (no spills, local memory or nvcc warning allowed), check every CUDA kernel in
    every precision and transpose against NumPy where a GPU is present, and check the CPU kernels
    on every ISA this machine runs."""
    from gemmgen.harness.check import run_check

    precisions = tuple(p.strip() for p in only.split(",") if p.strip())
    unknown = [p for p in precisions if p not in PRECISION_ORDER]
    if unknown:
        raise click.BadParameter(f"unknown precision {', '.join(unknown)}; known: {', '.join(PRECISION_ORDER)}",
                                 param_hint="--precisions")
    if sanitize_parts and not sanitize_tools:
        raise click.BadParameter("only with --sanitize", param_hint="--sanitize-parts")
    if sanitize_tools:
        from gemmgen.harness.sanitize import parse_parts, parse_tools, run_sanitize

        try:
            tools = parse_tools(sanitize_tools)
        except ValueError as err:
            raise click.BadParameter(str(err), param_hint="--sanitize")
        try:
            parts = parse_parts(sanitize_parts)
        except ValueError as err:
            raise click.BadParameter(str(err), param_hint="--sanitize-parts")
        sys.exit(run_sanitize(gen_dir, build_dir, arch, jobs, tools, report, quick, precisions, parts))
    status = run_check(gen_dir, build_dir, arch, jobs, report, quick, precisions)
    if with_cpu and (gen_dir / "src" / "cpu").is_dir():
        from gemmgen.harness.cpu.check import run_cpu_check

        status = max(status, run_cpu_check(gen_dir, build_dir, quick, cpu_report, click.echo, recheck))
    sys.exit(status)


DEFAULT_RESULTS = Path("gemmgen-tuning")


@main.group(invoke_without_command=True)
@click.option("--plan", is_flag=True,
              help="Print the stages a complete tuning of the families runs, in order: the command of each, "
                   "the variants it compiles and times, what it writes; then the totals.  No GPU, nothing "
                   "compiled.")
@click.option("--families", default="small,wmma,tallskinny,cpu", show_default=True,
              help="Subset of small,wmma,tallskinny,cpu (or 'all').")
@click.option("--precisions", default=",".join(PRECISION_ORDER), show_default=True,
              help="Subset of h,hc,s,d,c,z (or 'all'); each family tunes those it has.")
@click.option("--sizes", default=f"1-{MAX_SIZE}", show_default=True,
              help="Square sizes of the small and cpu families (wmma and tall-skinny tune their own).")
@click.option("--arch", default="sm_90", show_default=True,
              help="With --plan: the architecture of the GPU to tune (a run tunes the GPU present).")
@click.option("--results", type=click.Path(path_type=Path), default=DEFAULT_RESULTS, show_default=True,
              help="The run's folder: every stage's results, its state, and the tables of the device "
                   "(<device>.json, cpu_<isa>.json) that `gemmgen generate --tables` reads.")
@click.option("--budget", default=None,
              help="Stop between units of work once this much time is spent (e.g. 2h, 30m, 90s); the same "
                   "command again goes on.  Default: run to the end.")
@click.option("--jobs", "-j", type=int, default=0, help="Parallel compiler processes (default: all cores).")
@click.option("--gpus", default="1", show_default=True,
              help="The GPUs of this host to tune on at once: all, a number (the first N) or indices (0,2); "
                   "more than one needs `pip install gemmgen[tune]` (Dask distributed).")
@click.option("--scheduler", default=None, metavar="tcp://HOST:PORT",
              help="Tune on the workers (a GPU each) of a running Dask cluster; they must see --results "
                   "at the same path (docs/tuning.md).")
@click.pass_context
def tune(ctx, plan, families, precisions, sizes, arch, results, budget, jobs, gpus, scheduler):
    """Tune the GPU present (and this CPU) in one run: every stage of `tune --plan`, in order, into
    --results, resumable.  Each subcommand runs one stage, into ./gemmgen-tuning (its --results) and the
    packaged tables."""
    names = ("families", "precisions", "sizes", "arch", "results", "budget", "jobs", "gpus", "scheduler")
    given = [f"--{name}" for name in names
             if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT]
    if ctx.invoked_subcommand is not None:
        if plan or given:
            raise click.UsageError(f"{' '.join(['--plan'] * plan + given)} takes no subcommand "
                                   f"(the subcommand's own options go after its name)")
        return
    from gemmgen.harness import tune_plan

    fams = tuple(f.strip() for f in families.split(",") if f.strip())
    fams = tune_plan.FAMILIES if fams == ("all",) else fams
    if not fams or any(f not in tune_plan.FAMILIES for f in fams):
        raise click.ClickException(f"--families must be a subset of {','.join(tune_plan.FAMILIES)}, "
                                   f"not {families!r}")
    if plan:
        run_only = [g for g in given if g in ("--results", "--budget", "--jobs", "--gpus", "--scheduler")]
        if run_only:
            raise click.UsageError(f"{', '.join(run_only)}: not with --plan (the plan runs nothing)")
        selection = _selection(arch, precisions, sizes, "", max_size=MAX_SIZE)
        if len(selection.archs) != 1:
            raise click.ClickException(f"--arch: one architecture, the GPU's, not {arch!r}")
        for line in tune_plan.render(_tune_stages(selection, fams, families, precisions, sizes), selection.archs[0]):
            click.echo(line)
        return
    if "--arch" in given:
        raise click.UsageError("--arch: only with --plan (a run tunes the GPU present)")
    _tune_run(ctx, fams, families, precisions, sizes, results, budget, jobs, gpus, scheduler)


def _tune_stages(selection: Selection, fams, families: str, precisions: str, sizes: str) -> list:
    from gemmgen.harness import tune_plan

    stages = tune_plan.plan(selection, fams, selection.archs[0])
    if not stages:
        raise click.ClickException(f"nothing to tune: {families} in {precisions} at sizes {sizes or chr(39) * 2}")
    return stages


def _tune_run(ctx, fams, families: str, precisions: str, sizes: str, results: Path, budget: str | None,
              jobs: int, gpus: str, scheduler: str | None) -> None:
    """`gemmgen tune` without --plan (harness.tune_run).  Nothing is written before the input is checked:
    the budget, the results folder, the selection, the GPUs (or the cluster)."""
    import contextlib
    import shlex

    from gemmgen.harness import distributed, tune_plan, tune_run

    from .generator.tuning import tables_from

    try:
        seconds = tune_run.parse_budget(budget) if budget is not None else None
        tune_run.check_results_path(results)
    except ValueError as err:
        raise click.ClickException(str(err)) from None
    _selection("sm_90", precisions, sizes, "", max_size=MAX_SIZE)   # a bad --precisions or --sizes: said now
    need_gpu = any(f in tune_plan.GPU_FAMILIES for f in fams)
    cluster = contextlib.ExitStack()
    try:
        gpus_given = ctx.get_parameter_source("gpus") is not click.core.ParameterSource.DEFAULT
        runner = distributed.runner(cluster, gpus, gpus_given, scheduler) if need_gpu else None
        runner = runner or tune_run.make_runner(need_gpu)
    except tune_run.NoGpu:
        raise click.ClickException("no CUDA GPU found; `gemmgen tune --plan` works without one") from None
    # The command that goes on where this one stops: the options given, and the results folder.
    command = " ".join(["gemmgen tune"] + [f"--{name} {shlex.quote(str(value))}" for name, value in (
        ("families", families), ("precisions", precisions), ("sizes", sizes), ("jobs", jobs), ("gpus", gpus),
        ("scheduler", scheduler))
        if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT]
        + [f"--results {shlex.quote(str(results))}"])
    with cluster, tables_from(results, runner.device):
        stages = _tune_stages(_selection(runner.arch, precisions, sizes, "", max_size=MAX_SIZE), fams,
                              families, precisions, sizes)
        try:
            results.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise click.ClickException(f"--results {results} is not writable ({err.strerror or err})") from None
        clock = tune_run.Budget(seconds)
        status = tune_run.run(runner, stages, tune_run.Context(results, jobs, clock.spent, command,
                                                               deadline=clock.deadline), clock,
                              command + (f" --budget {shlex.quote(budget)}" if budget is not None else ""))
    sys.exit(status)


@tune.command("small")
@click.option("--precisions", default=",".join(PRECISION_ORDER), show_default=True)
@click.option("--sizes", default=f"1-{MAX_SIZE}", show_default=True)
@click.option("--shapes", default="", help="Extra rectangular shapes MxNxK.")
@click.option("--results", type=click.Path(path_type=Path), default=DEFAULT_RESULTS / "tune_small_results.jsonl",
              show_default=True, help="Append-only results file (survives interruption; .gz is read and "
                                      "appended to through gzip).")
@click.option("--build-dir", type=click.Path(path_type=Path), default=Path("build/tune"), show_default=True)
@click.option("--megabytes", type=int, default=256, show_default=True,
              help="Data moved per launch (A, B and C); below 200 MB the timed launches rotate over copies of the operands so that none is timed from L2.")
@click.option("--write-table/--no-write-table", default=True, show_default=True,
              help="Write gemmgen/generator/tuning/<arch>.json from the results.")
@click.option("--around-table", is_flag=True,
              help="Only the present table's tuples with tba halved, kept and doubled, each with both "
                   "stagings, all measured again in this run (a short re-tune after a new knob).")
@click.option("--arrays", is_flag=True,
              help="Time the pointer-array interface of the present table's tuples without a ring, with "
                   "and without a ring for pointer arrays alone (array_stages), and the neighbourhood of "
                   "its tuples with a ring through both interfaces, all in this run.")
@click.option("--table-only", is_flag=True,
              help="Measure nothing: compile the results' winners with every transpose for the default "
                   "architectures (nvcc, no GPU), refuse those with local memory, write the table.")
@click.option("--table-arch", default="sm_90", show_default=True,
              help="With --table-only or --narrow-rows: the architecture whose table is written (--arch always "
                   "names a target).")
@click.option("--narrow-rows", is_flag=True,
              help="Measure nothing: from --results, a device's sweep at a launch past 128 MB and at one "
                   "below it (--megabytes 256 and 50), write the table rows for that device and for its "
                   "launches up to 128 MB where another tuple beats the shape's row by 3% or more "
                   "(docs/tuning.md).")
@click.option("--confirm", nargs=2, type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              metavar="BEFORE AFTER",
              help="With --narrow-rows: keep only the rows that `gemmgen bench workload` on that device "
                   "confirms (AFTER: its JSON for a set with the rows, BEFORE: without them).")
@click.option("--jobs", "-j", type=int, default=0)
def tune_small(precisions, sizes, shapes, results, build_dir, megabytes, write_table, around_table,
               arrays, table_only, table_arch, narrow_rows, confirm, jobs):
    """Sweep tba, the N̂ blocking and the staging of the small family."""
    from gemmgen.harness.small import tune as tuner

    if narrow_rows:
        from gemmgen.harness.small.narrow import write_narrow_rows

        if not results.exists():
            raise click.ClickException(f"{results} does not exist")
        command = f"gemmgen tune small --narrow-rows --results {results}" + \
            (f" --confirm {confirm[0]} {confirm[1]}" if confirm else "")
        for line in write_narrow_rows([results], table_arch, command, confirm):
            click.echo(line)
        return
    if table_only:
        devices = [r["device"] for r in tuner.load_results(results) if r.get("arch") == table_arch]
        if not devices:
            raise click.ClickException(f"{results} holds no {table_arch} results")
        tuner.verify_and_write_table(results, table_arch, devices[-1], build_dir, jobs,
                                     "gemmgen tune small --table-only")
        return
    selection = _selection(",".join(DEFAULT_ARCHS), precisions, sizes, shapes, max_size=MAX_SIZE)
    if arrays and around_table:
        raise click.UsageError("--arrays and --around-table are separate runs")
    sys.exit(tuner.run_tune(selection, results, build_dir, megabytes, write_table, jobs, around_table, arrays))


@tune.command("wmma")
@click.option("--precisions", default="h,hc", show_default=True, help="Subset of h,hc.")
@click.option("--results", type=click.Path(path_type=Path), default=DEFAULT_RESULTS / "tune_wmma_results.jsonl",
              show_default=True, help="Append-only results file (survives interruption; .gz is read and "
                                      "appended to through gzip).")
@click.option("--build-dir", type=click.Path(path_type=Path), default=Path("build/tune_wmma"), show_default=True)
@click.option("--budget-s", type=float, default=1e9, help="Stop measuring after this many seconds (resume later).")
@click.option("--table-only", is_flag=True,
              help="Only write the wmma section of gemmgen/generator/tuning/<arch>.json from the results, after "
                   "compiling its kernels with every transpose for the default architectures (nvcc, no GPU).")
@click.option("--table-arch", default="sm_90", show_default=True,
              help="With --table-only or --narrow-rows: the architecture whose table is written (--arch always "
                   "names a target).")
@click.option("--max-tuples", type=int, default=12, show_default=True,
              help="wmma tuples per precision kept in the table (greedy cover of the sizes).")
@click.option("--async-only", is_flag=True,
              help="Sweep only the tuples with a cp.async ring (stages > 0), comparing with the results "
                   "already in the file for the rest.")
@click.option("--small-only", is_flag=True,
              help="Measure only the small family's table kernels at the square sizes up to 32 (after "
                   "`tune small`), comparing with the wmma and tiny results already in the file: the "
                   "cut-off between the families, measured again (the latest result of a kernel counts).")
@click.option("--warp-only", is_flag=True,
              help="Measure only the one-warp-per-GEMM kernels (h, and hc from 13; sizes up to 64) at every stage-2 shape, "
                   "comparing with the results already in the file (measured again where they are there: "
                   "the latest result of a kernel counts).")
@click.option("--block-only", is_flag=True,
              help="Measure only the block kernels (raw mma.sync, h and hc, sizes from 32) at every stage-2 "
                   "shape, comparing with the results already in the file (measured again where they are "
                   "there: the latest result of a kernel counts).")
@click.option("--final-only", is_flag=True,
              help="After the sweep: where the table weighs a warp kernel against the rest, time both with "
                   "256 MB of data (far past L2) and beta = 0 and 1; the table then decides between them "
                   "on those times.")
@click.option("--jobs", "-j", type=int, default=0)
def tune_wmma(precisions, results, build_dir, budget_s, table_only, table_arch, max_tuples, async_only,
              small_only, warp_only, block_only, final_only, jobs):
    """The brute-force sweep of the wmma tuples (§5.8), the tiny-size kernels (§8.1), the warp
    kernels, the block kernels and the small-family cut-off, on square sizes and rank-16 updates up
    to 256."""
    from gemmgen.generator import wmma
    from gemmgen.harness.wmma import tune as wmma_tune

    precs = tuple(p.strip() for p in precisions.split(",") if p.strip())
    bad = [p for p in precs if p not in wmma.PRECISIONS_WMMA]
    if bad or not precs:
        raise click.ClickException(f"the wmma family covers h and hc, not {','.join(bad) or 'nothing'}")
    if table_only:
        rows = wmma_tune.load_results(results)
        devices = sorted({r["device"] for r in rows if r.get("arch") == table_arch})
        if not devices:
            raise click.ClickException(f"{results} holds no {table_arch} results")
        refused = wmma_tune.verify_table(results, table_arch, devices[-1], build_dir, jobs, max_tuples)
        click.echo(f"compiled the table's kernels with every transpose for the default architectures: "
                   f"{refused} refused for local memory")
        click.echo(f"wrote gemmgen/generator/tuning/{table_arch}.json")
        return
    if async_only + small_only + warp_only + block_only + final_only > 1:
        raise click.ClickException("--async-only, --small-only, --warp-only, --block-only and --final-only each "
                                   "measure a different part; give one")
    if final_only:
        sys.exit(wmma_tune.run_final(results, build_dir, precs, jobs, max_tuples))
    sys.exit(wmma_tune.run_tune(results, build_dir, precs, jobs, budget_s, max_tuples, async_only, small_only,
                                warp_only, block_only))


@tune.command("tallskinny")
@click.option("--precisions", default="h,s,d", show_default=True, help="Subset of h,s,d.")
@click.option("--tsm2-n", default=",".join(map(str, tallskinny.TUNED_NS)), show_default=True,
              help="n values for the TSM2 sweep (other n borrow the nearest tuned n's blocking).")
@click.option("--ism2-n", default=",".join(map(str, tallskinny.TUNED_ISM2_NS)), show_default=True, help="n values (k = n) for the ISM2 sweep.")
@click.option("--results", type=click.Path(path_type=Path),
              default=DEFAULT_RESULTS / "tune_tallskinny_results.jsonl", show_default=True,
              help="Append-only results file (survives interruption; .gz is read and appended to through "
                   "gzip); the note tune_tallskinny_<arch>.md goes beside it.")
@click.option("--build-dir", type=click.Path(path_type=Path), default=Path("build/ts"), show_default=True)
@click.option("--write-table/--no-write-table", default=True, show_default=True,
              help="Write the tallskinny section of gemmgen/generator/tuning/<arch>.json.")
@click.option("--jobs", "-j", type=int, default=0)
def tune_tallskinny(precisions, tsm2_n, ism2_n, results, build_dir, write_table, jobs):
    """Sweep TSM2's t1, t2, t3 and ISM2's t1, t3, opt and tcf, measure the TSM2/ISM2 cut-off in
    k, and compare the performance model's choice (Algorithm 5) with the measured best."""
    from gemmgen.harness.core.toolchain import gpu_available
    from gemmgen.harness.tallskinny.tune import tune

    try:
        precs = tuple(p for p in "hsd" if p in precisions.split(","))
        ts_ns, is_ns = tallskinny.parse_ns(tsm2_n), tallskinny.parse_ns(ism2_n)
    except ValueError as err:
        raise click.ClickException(str(err)) from None
    if not gpu_available():
        raise click.ClickException("no GPU present; gemmgen tune measures on the GPU it runs on")
    tune(precs, ts_ns, is_ns, results, build_dir, write_table, jobs, results.parent)


@main.group()
def bench():
    """Benchmarks against the vendor library, measured in one run on the same data."""


@bench.command("small")
@click.option("--generated", "gen_dir", type=click.Path(path_type=Path), default=DEFAULT_OUT, show_default=True)
@click.option("--build-dir", type=click.Path(path_type=Path), default=Path("build"), show_default=True)
@click.option("--precisions", default=",".join(PRECISION_ORDER), show_default=True)
@click.option("--sizes", default=f"2-{MAX_SIZE}", show_default=True)
@click.option("--megabytes", type=int, default=512, show_default=True,
              help="Data moved per launch for the 'data ≫ L2' runs.")
@click.option("--batches", default="10000,100000", show_default=True,
              help="The paper's batch counts, reported as well.")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("docs/perf"), show_default=True)
def bench_small(gen_dir, build_dir, precisions, sizes, megabytes, batches, out_dir):
    """Small family vs cuBLAS strided batched GEMM: GF/s, fraction of the bandwidth floor, speedup."""
    from gemmgen.harness.small.bench import run_bench

    selection = _selection(",".join(DEFAULT_ARCHS), precisions, sizes, "", max_size=MAX_SIZE)
    try:
        batch_list = tuple(int(b) for b in batches.split(",") if b.strip())
    except ValueError:
        raise click.ClickException(f"bad --batches {batches!r}; write e.g. 10000,100000") from None
    sys.exit(run_bench(gen_dir, build_dir, selection, megabytes, batch_list, out_dir))


@tune.command("cpu")
@click.option("--precisions", default="s,d,c,z", show_default=True)
@click.option("--sizes", default=f"1-{MAX_SIZE}", show_default=True)
@click.option("--shapes", default="", help="Extra rectangular shapes MxNxK.")
@click.option("--isa", default="avx2", show_default=True, help="The ISA to tune (this CPU must have it).")
@click.option("--results", type=click.Path(path_type=Path), default=DEFAULT_RESULTS / "tune_cpu_results.jsonl",
              show_default=True, help="Append-only results file (.gz is read and appended to through gzip).")
@click.option("--build-dir", type=click.Path(path_type=Path), default=Path("build/tune_cpu"), show_default=True)
@click.option("--batch", type=int, default=10000, show_default=True,
              help="Entries per timed call, as in `bench cpu` (large sizes then stream from memory).")
@click.option("--reps", type=int, default=15, show_default=True)
@click.option("--write-table/--no-write-table", default=True, show_default=True,
              help="Write gemmgen/generator/tuning/cpu_<isa>.json from the results.")
@click.option("--jobs", "-j", type=int, default=0)
def tune_cpu(precisions, sizes, shapes, isa, results, build_dir, batch, reps, write_table, jobs):
    """Sweep the register blocking (mr x nr) of the cpu family on this machine's CPU."""
    from gemmgen.harness.cpu.tune import run_tune

    from .generator import cpu

    selection = _selection(",".join(DEFAULT_ARCHS), precisions, sizes, shapes, max_size=MAX_SIZE)
    if isa not in cpu.ISAS:
        raise click.ClickException(f"unknown ISA {isa!r}; choose from {', '.join(cpu.ISAS)}")
    precs = [p for p in selection.precisions if p in cpu.CPU_PRECISIONS]
    sys.exit(run_tune(precs, selection.all_shapes, isa, results, build_dir, batch, reps, write_table, jobs))


@bench.command("wmma")
@click.option("--generated", "gen_dir", type=click.Path(path_type=Path), default=DEFAULT_OUT, show_default=True)
@click.option("--build-dir", type=click.Path(path_type=Path), default=Path("build/bench"), show_default=True)
@click.option("--precisions", default="h,hc", show_default=True, help="Subset of h,hc.")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("docs/perf"), show_default=True)
@click.option("--jobs", "-j", type=int, default=0)
def bench_wmma(gen_dir, build_dir, precisions, out_dir, jobs):
    """The wmma family (and the h/hc dispatch) against cuBLAS: square sizes and rank-16 updates,
    batch 1000/100/10 and data ≫ L2, tiny sizes with batch 10,000; hc against planar cuBLAS."""
    from gemmgen.generator import wmma
    from gemmgen.harness.core.api import GemmgenLibrary
    from gemmgen.harness.wmma.bench import run_bench
    from gemmgen.harness.check import build_set, device_arch
    from gemmgen.harness.core.timing import copy_bandwidth
    from gemmgen.harness.core.toolchain import gpu_available

    precs = tuple(p.strip() for p in precisions.split(",") if p.strip())
    if not precs or any(p not in wmma.PRECISIONS_WMMA for p in precs):
        raise click.ClickException(f"--precisions must be a subset of h,hc, not {precisions!r}")
    if not gpu_available():
        raise click.ClickException("no GPU present; gemmgen bench needs CuPy and a CUDA device")
    listing = json.loads((gen_dir / "manifest.json").read_text())
    arch, device = device_arch()
    cc = int(arch[3:])
    ranges = [r for r in listing.get("wmma", {}).get("dispatch", []) if r["from_cc"] <= cc]

    def general_name(prec, kind, m, n, k):
        size = wmma.size_key(kind, m, n, k)
        fits = [r for r in ranges if r["precision"] == prec and r["kind"] == kind and r["lo"] <= size
                and (r["hi"] == 0 or size <= r["hi"])]
        return max(fits, key=lambda r: r["from_cc"])["kernel"] if fits else None

    lib = GemmgenLibrary(build_set(gen_dir, build_dir, (arch,), jobs).library)
    run_bench(lib, device, arch, copy_bandwidth(), precs, out_dir,
              f"gemmgen bench wmma --precisions {','.join(precs)}", general_name)


@bench.command("workload")
@click.option("--generated", "gen_dir", type=click.Path(path_type=Path), default=DEFAULT_OUT, show_default=True)
@click.option("--build-dir", type=click.Path(path_type=Path), default=Path("build/bench"), show_default=True)
@click.option("--jobs", "-j", type=int, default=0)
@click.option("--precisions", default=",".join(PRECISION_ORDER), show_default=True)
@click.option("--families", default="small,large,rect,tallskinny", show_default=True,
              help="Subset of small (squares 1-32), large (h/hc squares past 32), rect, tallskinny.")
@click.option("--quick", is_flag=True, help="A few points of each family: a smoke run of a minute or so.")
@click.option("--big-megabytes", type=click.IntRange(1), default=256, show_default=True,
              help="Data of the launch far past L2 (the other two: 1,000 GEMMs and about 50 MB).")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("docs/perf"), show_default=True)
@click.option("--from-json", "from_json", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Write the .md and .png again from this run's JSON (beside it); no GPU needed.")
def bench_workload(gen_dir, build_dir, jobs, precisions, families, quick, big_megabytes, out_dir, from_json):
    """What a user sees: the public entry points (the dispatch choosing the kernel) against cuBLAS on
    the same buffers, every precision, squares 1-32, h/hc squares to 256, rectangular shapes and
    tall-skinny GEMMs, at batch 1000, about 50 MB and far past L2, beta = 0 and 1."""
    from gemmgen.harness import bench_workload as bw

    if from_json:
        for path in bw.render(from_json):
            click.echo(f"wrote {path}")
        return
    precs = tuple(p.strip() for p in precisions.split(",") if p.strip())
    fams = tuple(f.strip() for f in families.split(",") if f.strip())
    if not precs or any(p not in PRECISION_ORDER for p in precs):
        raise click.ClickException(f"--precisions must be a subset of {','.join(PRECISION_ORDER)}, not {precisions!r}")
    if not fams or any(f not in bw.FAMILIES for f in fams):
        raise click.ClickException(f"--families must be a subset of {','.join(bw.FAMILIES)}, not {families!r}")
    points = bw.grid(quick, precs, fams, big_megabytes)
    if not points:
        raise click.ClickException(f"no point to time: the families {families} have none in {precisions}")

    from gemmgen.harness.core.toolchain import gpu_available

    if not gpu_available():
        raise click.ClickException("no GPU present; gemmgen bench workload needs CuPy and a CUDA device "
                                   "(--from-json renders an existing run without one)")
    if not (gen_dir / "manifest.json").exists():
        raise click.ClickException(f"{gen_dir / 'manifest.json'} not found; run gemmgen generate first")
    from gemmgen.harness.core.api import GemmgenLibrary
    from gemmgen.harness.check import build_set, device_arch

    arch, device = device_arch()
    lib = GemmgenLibrary(build_set(gen_dir, build_dir, (arch,), jobs).library)
    command = ("gemmgen bench workload" + (" --quick" if quick else "")
               + (f" --precisions {','.join(precs)}" if precs != PRECISION_ORDER else "")
               + (f" --families {','.join(fams)}" if fams != bw.FAMILIES else "")
               + (f" --big-megabytes {big_megabytes}" if big_megabytes != bw.BIG_MEGABYTES else "")
               + (f" --generated {gen_dir}" if gen_dir != DEFAULT_OUT else ""))
    bw.run(lib, device, arch, points, out_dir, command)


@bench.command("cpu")
@click.option("--generated", "gen_dir", type=click.Path(path_type=Path), default=DEFAULT_OUT, show_default=True)
@click.option("--build-dir", type=click.Path(path_type=Path), default=Path("build/bench_cpu"), show_default=True)
@click.option("--precisions", default="s,d,c,z", show_default=True)
@click.option("--sizes", default=f"2-{MAX_SIZE}", show_default=True)
@click.option("--batch", type=int, default=10000, show_default=True)
@click.option("--isa", default="avx2", show_default=True, help="The ISA gemmgen runs (LIBXSMM JITs for the same).")
@click.option("--reps", type=int, default=11, show_default=True)
@click.option("--megabytes", type=int, default=1536, show_default=True,
              help="Data per call for the bandwidth runs (far above the caches).")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("docs/perf"), show_default=True)
def bench_cpu(gen_dir, build_dir, precisions, sizes, batch, isa, reps, megabytes, out_dir):
    """CPU kernels vs LIBXSMM, Eigen, OpenBLAS and numpy, single thread and all threads, plus the
    memory bandwidth: JSON, table and plot into docs/perf/."""
    from gemmgen.harness.cpu.bench import run_bench

    from .generator import cpu

    selection = _selection(",".join(DEFAULT_ARCHS), precisions, sizes, "", max_size=MAX_SIZE)
    precs = [p for p in selection.precisions if p in cpu.CPU_PRECISIONS]
    command = (f"gemmgen bench cpu --precisions {','.join(precs)} --sizes {sizes} --batch {batch} --isa {isa} "
               f"--reps {reps} --megabytes {megabytes}")
    sys.exit(run_bench(gen_dir, build_dir, precs, selection.sizes, batch, isa, reps, megabytes, out_dir, command))


@bench.command("tallskinny")
@click.option("--precisions", default="s,d", show_default=True, help="Subset of h,s,d.")
@click.option("--ns", default="2,4,8,16", show_default=True,
              help="n of the TSM2 workloads (the papers' 2,4,8,16; others go to a table of their own).")
@click.option("--build-dir", type=click.Path(path_type=Path), default=Path("build/ts"), show_default=True)
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("docs/perf"), show_default=True)
@click.option("--jobs", "-j", type=int, default=0)
def bench_tallskinny(precisions, ns, build_dir, out_dir, jobs):
    """The TSM2 and ISM2 papers' workloads vs cuBLAS (one run, same buffers): fraction of the
    copy-bandwidth floor, speedup; JSON, table and plot into docs/perf/."""
    from gemmgen.harness.core.api import TallSkinnyLibrary
    from gemmgen.harness.tallskinny.bench import TSM2_NS, run_bench
    from gemmgen.harness.check import device_arch
    from gemmgen.harness.tallskinny.build import build_tallskinny
    from gemmgen.harness.core.toolchain import gpu_available

    try:
        n_values = tallskinny.parse_ns(ns)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--ns") from None
    if not gpu_available():
        raise click.ClickException("no GPU present; gemmgen bench needs CuPy and a CUDA device")
    precs = tuple(p for p in "hsd" if p in precisions.split(","))
    arch, device = device_arch()
    build, _ = build_tallskinny(build_dir / "set", build_dir / "obj", precs, tallskinny.DEFAULT_NS, arch,
                                (), jobs or None, library_name="libgemmgen_tallskinny_bench.so")
    papers = n_values == TSM2_NS
    run_bench(TallSkinnyLibrary(build.library), device, arch, out_dir, precs, ns=n_values,
              **({} if papers else {"ms": (), "stem": f"bench_tallskinny_other_n_{arch}"}),
              command=f"gemmgen bench tallskinny --precisions {','.join(precs)}"
                      + ("" if papers else f" --ns {ns}"))


if __name__ == "__main__":
    main()
