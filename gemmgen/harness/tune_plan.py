"""`gemmgen tune --plan`: the stages a complete tuning of one GPU runs, in the order they must run,
with the command that runs each today and the variants it compiles and times, counted by the
tuners' own candidate functions (no GPU, nothing compiled).

Where a stage's candidates come from an earlier stage's results, the stage says which
(`depends_on`) and its count is an upper bound where the candidate functions give one (`bound`),
else the count with the present table where the earlier stage writes the table the candidates come
from (the new table may give another), or None: unknown until that stage ran."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from gemmgen.generator import cpu, small, tallskinny, wmma
from gemmgen.generator.arch import DEFAULT_ARCHS
from gemmgen.generator.manifest import Selection, ranges_arg
from gemmgen.generator.precision import PRECISION_ORDER

from gemmgen.harness.cpu import tune as cpu_tune

from gemmgen.harness.small import tune as tune_small

from gemmgen.harness.tallskinny import tune as tune_tallskinny

from gemmgen.harness.wmma import tune as wmma_tune

FAMILIES = ("small", "wmma", "tallskinny", "cpu")
GPU_FAMILIES = ("small", "wmma", "tallskinny")
# Each family's append-only results file, in the results folder: the subcommands' default, ./gemmgen-tuning
# (RESULTS_DIR), or the folder of `gemmgen tune` (harness.tune_run, the same default).  The sm_90 table's
# records are these files gzip-compressed in docs/perf.
RESULTS_DIR = "gemmgen-tuning"
RESULTS = {"small": "tune_small_results.jsonl", "wmma": "tune_wmma_results.jsonl",
           "tallskinny": "tune_tallskinny_results.jsonl", "cpu": "tune_cpu_results.jsonl"}
SMALL_SIZES = tuple(range(1, small.MAX_SIZE + 1))   # `tune small` and `tune cpu` default to these
CPU_ISA = "avx2"                                     # `tune cpu`'s default ISA


@dataclass(frozen=True)
class Stage:
    family: str
    name: str
    command: str             # the command that runs it today
    variants: int | None     # kernels it compiles and times (see the module docstring); None: unknown
    depends_on: str | None   # the key of the earlier stage whose results decide its candidates
    writes: str
    bound: bool = False      # variants is an upper bound
    note: str = ""
    # what the stage tunes (its precisions, sizes, shapes): the command's, for `gemmgen tune` to run it
    selection: Selection | None = field(default=None, compare=False, repr=False)

    @property
    def key(self) -> str:
        return f"{self.family} {self.name}"


def _command(sub: str, *flags: str) -> str:
    return " ".join(["gemmgen tune", sub, *(f for f in flags if f)])


def _flag(name: str, value: tuple, default: tuple) -> str:
    """`--name value` where value is not the command's default."""
    if value == default:
        return ""
    if name == "--sizes":
        return f"{name} {ranges_arg(value)}"
    return f"{name} {','.join(map(str, value))}"


def _table(arch: str, section: str) -> str:
    return f"the {section} section of gemmgen/generator/tuning/{arch}.json"


def _rank_shapes(selection: Selection) -> tuple:
    """The rank-16 updates (m = n, k = 16) whose small kernels `tune wmma` weighs against its own, as the
    sm_90 table was tuned: every selected m below small.MAX_SIZE but 16 (the square)."""
    return tuple((m, m, wmma.RANK_K_MAX) for m in selection.sizes
                 if m < small.MAX_SIZE and m != wmma.RANK_K_MAX)


def _small(selection: Selection, arch: str) -> list[Stage]:
    results = f"{RESULTS_DIR}/{RESULTS['small']}"
    sizes = _flag("--sizes", selection.sizes, SMALL_SIZES)
    verify = (f"each shape's winner is then compiled with every transpose for {', '.join(DEFAULT_ARCHS)} "
              "(nvcc); one with local memory is refused and the next taken")
    stages = []
    squares = tune_small.sweep(selection, arch, False)
    if squares:
        stages.append(Stage("small", "squares", _command("small", _flag("--precisions", selection.precisions,
                                                                          PRECISION_ORDER), sizes),
                            len(squares), None, f"{results}; {_table(arch, 'small')}", note=verify,
                            selection=selection))
    halves = tuple(p for p in selection.precisions if p in wmma.PRECISIONS_WMMA)
    ranks = _rank_shapes(selection) if halves else ()
    if ranks:
        shapes = "--shapes " + ",".join(f"{m}x{n}x{k}" for m, n, k in ranks)
        sel = replace(selection, precisions=halves, sizes=(), shapes=ranks)
        stages.append(Stage("small", "rank-16 updates", _command("small", f"--precisions {','.join(halves)}",
                                                                  "--sizes ''", shapes),
                            len(tune_small.sweep(sel, arch, False)), None,
                            f"{results}; {_table(arch, 'small')}",
                            note=f"the small kernels of h and hc rank-16 updates, which tune wmma weighs; {verify}",
                            selection=sel))
    if stages:
        sel = replace(selection, shapes=ranks)
        arrays = len(tune_small.sweep(sel, arch, False, arrays=True)) or None
        stages.append(Stage("small", "pointer arrays", _command(
            "small", "--arrays", _flag("--precisions", selection.precisions, PRECISION_ORDER), sizes,
            "--shapes " + ",".join(f"{m}x{n}x{k}" for m, n, k in ranks) if ranks else ""),
            arrays, stages[-1].key, f"{results} (interface \"array\"); {_table(arch, 'small')} (array_stages)",
            note="the table's tuples through the pointer-array interface, with and without a ring for "
                 "pointer arrays alone, and the neighbourhood of its ring tuples through both interfaces",
            selection=sel))
    return stages


def _wmma(selection: Selection, arch: str, after: str | None) -> list[Stage]:
    precs = tuple(p for p in selection.precisions if p in wmma.PRECISIONS_WMMA)
    if not precs:
        return []
    results = f"{RESULTS_DIR}/{RESULTS['wmma']}"
    sel = replace(selection, precisions=precs)
    precisions = _flag("--precisions", precs, wmma.PRECISIONS_WMMA)
    arch_flag = f"--table-arch {arch}" if arch != "sm_90" else ""
    cands = wmma_tune.sweep_candidates(precs, arch)
    # The final stage times, at each point where the table weighs a warp kernel against the rest, the
    # two: only points where the sweep timed a warp kernel can be such points.
    warp_points = sum(1 for specs in cands.warp_points.values() if specs)
    return [
        Stage("wmma", "sweep", _command("wmma", precisions), len(cands.specs), after, results,
              note=f"{len(cands.general)} wmma tuples, {len(cands.tiny)} tiny, {len(cands.small)} small "
                   f"(the small table's), {len(cands.warps)} warp and {len(cands.blocks)} block kernels; stage 1 "
                   f"times the tuples on a coarse grid, stage 2 the best {wmma_tune.STAGE2_TOP} of the two "
                   "nearest coarse points and the other kernels at every size 1-64 and every 8th to 256 "
                   "(squares and rank-16 updates: its own sizes, not --sizes)", selection=sel),
        Stage("wmma", "final", _command("wmma", "--final-only", precisions), 2 * warp_points, "wmma sweep",
              f"{results} (stage \"final\")", bound=True,
              note=f"a warp kernel and the rest's choice at each point where the table weighs them, "
                   f"{wmma_tune.FINAL_MEGABYTES} MB of data, beta = 0 and 1", selection=sel),
        Stage("wmma", "table", _command("wmma", "--table-only", arch_flag), None, "wmma final",
              _table(arch, "wmma"),
              note=f"the table's kernels compiled with every transpose for {', '.join(DEFAULT_ARCHS)} and "
                   f"for {arch} alone (nvcc, no GPU); one with local memory is refused and the table chosen again",
              selection=sel),
    ]


def _small_table(arch: str) -> Stage:
    return Stage("small", "table", _command("small", "--table-only", f"--table-arch {arch}" if arch != "sm_90" else ""),
                 None, "wmma table", _table(arch, "small"),
                 note="the small table again, now that the wmma table says which shapes the dispatch gives "
                      "the small family (a pointer-array ring only there) (nvcc, no GPU)")


def _tallskinny(selection: Selection, arch: str) -> list[Stage]:
    precs = tuple(p for p in tallskinny.PRECISIONS_TS if p in selection.precisions)
    if not precs:
        return []
    ns, ism2_ns = tallskinny.TUNED_NS, tallskinny.TUNED_ISM2_NS
    variants = tune_tallskinny.sweep(precs, ns, ism2_ns, arch)
    return [Stage("tallskinny", "sweep", _command("tallskinny", _flag("--precisions", precs, tallskinny.PRECISIONS_TS)),
                  len(variants), None,
                  f"{RESULTS_DIR}/{RESULTS['tallskinny']}; {_table(arch, 'tallskinny')}; "
                  f"{RESULTS_DIR}/tune_tallskinny_{arch}.md",
                  note=f"TSM2 at n = {','.join(map(str, ns))}, ISM2 at n = k = {','.join(map(str, ism2_ns))} "
                       f"(each at {len(tallskinny.ISM2_SWEEP_TCF)} tcf), built with the tall-skinny set of those n; "
                       f"then the TSM2/ISM2 cut-off in k: each ISM2 n's best two at k = "
                       f"{','.join(map(str, tune_tallskinny.CUTOFF_KS))} (its own n, not --sizes)",
                  selection=replace(selection, precisions=precs))]


def _cpu(selection: Selection) -> list[Stage]:
    precs = tuple(p for p in selection.precisions if p in cpu.CPU_PRECISIONS)
    blockings = cpu_tune.blocking_candidates(precs, selection.all_shapes, CPU_ISA)
    if not blockings:
        return []
    command = _command("cpu", _flag("--precisions", precs, cpu.CPU_PRECISIONS),
                       _flag("--sizes", selection.sizes, SMALL_SIZES))
    # Stage 2 takes each shape's STAGE2_BLOCKINGS fastest blockings at their prefetch distances: at most
    # the shape's STAGE2_BLOCKINGS blockings with the most distances.
    per_shape: dict[tuple, list[int]] = {}
    for spec in blockings:
        per_shape.setdefault((spec.precision, spec.m, spec.n, spec.k), []).append(
            len(cpu.distance_candidates(spec)))
    distances = sum(sum(sorted(counts, reverse=True)[:cpu_tune.STAGE2_BLOCKINGS]) for counts in per_shape.values())
    results = f"{RESULTS_DIR}/{RESULTS['cpu']}"
    sel = replace(selection, precisions=precs)
    return [
        Stage("cpu", "blocking", command, len(blockings), None, results,
              note=f"this machine's CPU, no GPU; ISA {CPU_ISA} (--isa for another), "
                   f"{cpu_tune.TILE_STAGE_KILOBYTES} kB of data per shape", selection=sel),
        Stage("cpu", "prefetch distance", command, distances, "cpu blocking",
              f"{results}; gemmgen/generator/tuning/{cpu.table_name(CPU_ISA)}.json", bound=True,
              note=f"each shape's {cpu_tune.STAGE2_BLOCKINGS} fastest blockings at every prefetch distance, "
                   "on the benchmark's batch", selection=sel),
    ]


def plan(selection: Selection, families=FAMILIES, arch: str = "sm_90") -> list[Stage]:
    """The stages of a complete tuning of `families` for `selection` on a GPU of `arch`, in order:
    the small family's table first (tune wmma weighs its kernels), then wmma's (the small table's
    pointer-array rings follow its dispatch), then tall-skinny and cpu, which depend on neither."""
    small_stages = _small(selection, arch) if "small" in families else []
    stages = list(small_stages)
    if "wmma" in families:
        wmma_stages = _wmma(selection, arch, small_stages[-1].key if small_stages else None)
        stages += wmma_stages
        if wmma_stages and small_stages:
            stages.append(_small_table(arch))
    if "tallskinny" in families:
        stages += _tallskinny(selection, arch)
    if "cpu" in families:
        stages += _cpu(selection)
    return stages


# Where each stage runs on several GPUs (`gemmgen tune --gpus`, harness.distributed).  The small
# family's sweeps are cut into pieces of whole shapes, each compiled and timed on one GPU.  The wmma
# and tall-skinny stages are compiled here, one library each, and timed in pieces on the GPUs: the
# wmma sweep checks its variants (pieces of a few dozen), then times stage 1 and stage 2 a point a
# piece (stage 2 takes stage 1's best, so it starts when stage 1 is done), its final stage a point a
# piece; the tall-skinny sweep a kernel family, precision and n a piece, then its cut-off in k (which
# takes the sweep's best) a precision and n a piece.  The tables are nvcc's work alone, and the CPU
# is timed one timing at a time.
WHERE = {
    "split": "split over the GPUs (--gpus): pieces of whole shapes, one a GPU at a time; then the table "
             "on this machine (nvcc)",
    "built here, split": "compiled on this machine (nvcc, one library), then timed in pieces split over the "
                         "GPUs (--gpus), one a GPU at a time",
    "nvcc": "this machine (nvcc, no GPU)",
    "cpu": "this machine's CPU, one timing at a time",
}
SPLIT = ("split", "built here, split")   # the places whose pieces go to the GPUs through the run's spread


def where(stage: Stage) -> str:
    """Which of WHERE runs `stage` on several GPUs."""
    if stage.family == "small" and stage.name != "table":
        return "split"
    if stage.family == "cpu":
        return "cpu"
    return "nvcc" if stage.name == "table" else "built here, split"


def _count(stage: Stage) -> str:
    if stage.variants is None:
        return f"unknown until {stage.depends_on} ran"
    if stage.depends_on is None:
        return f"{stage.variants}"
    if stage.bound:
        return f"at most {stage.variants} (depends on {stage.depends_on})"
    return f"{stage.variants} with the present table (depends on {stage.depends_on})"


def _total(stages: list[Stage]) -> str:
    exact = sum(s.variants for s in stages if s.variants is not None and s.depends_on is None)
    bound = sum(s.variants for s in stages if s.variants is not None and s.depends_on and s.bound)
    table = sum(s.variants for s in stages if s.variants is not None and s.depends_on and not s.bound)
    unknown = sum(1 for s in stages if s.variants is None)
    parts = [f"{exact}"] if exact or not (bound or table) else []
    if bound:
        parts.append(f"at most {bound}")
    if table:
        parts.append(f"{table} with the present table")
    if unknown:
        parts.append(f"{unknown} stage{'s' if unknown > 1 else ''} unknown")
    return " + ".join(parts)


def render(stages: list[Stage], arch: str) -> list[str]:
    """The plan as lines: each stage with its command (one already run by the stage above says so),
    its variants, what it writes; then the totals per family and overall."""
    lines = [f"# a complete tuning on a GPU of {arch}: {len(stages)} stages, in this order"]
    previous = None
    for i, s in enumerate(stages, 1):
        lines.append(f"{i:>2}. {s.key}")
        lines.append(f"    run:      {s.command}" + (" (the same run as the stage above)"
                                                    if s.command == previous else ""))
        lines.append(f"    variants: {_count(s)}")
        lines.append(f"    writes:   {s.writes}")
        lines.append(f"    gpus:     {WHERE[where(s)]}")
        if s.note:
            lines.append(f"    what:     {s.note}")
        previous = s.command
    lines.append("totals (variants compiled and timed):")
    for family in FAMILIES:
        mine = [s for s in stages if s.family == family]
        if mine:
            lines.append(f"  {family:<11} {_total(mine)}")
    lines.append(f"  {'overall':<11} {_total(stages)}")
    return lines
