"""`gemmgen tune` without a subcommand: a complete tuning of the GPU present (and of this CPU) as one
run, with a budget, resumable.

The stages and their order are tune_plan.plan's (`tune --plan` prints the same list).  A runner runs
each stage; GpuRunner calls the tuners' own functions, the ones the subcommands (`tune small`,
`tune wmma`, ...) call, with three things of the run's:
- the results folder: each family's results file (the JSON lines the subcommands append to, by
  default in the same folder) is there, the device's table is written there (generator.tuning.tables_from: never
  into the package), and the builds go beneath it, so that a run again finds its objects;
- stop(): the budget, which the tuners ask between units of work (a variant timed, a piece of
  variants compiled; a compile under way runs to its end);
- resume: a tuner leaves out what its results file already holds (by variant name, or by variant
  and point where a variant is timed at several).
The state file (state.json in the folder) says which stages are complete and under which command
(a run with other --sizes runs them again, resuming variant by variant), the time each took, and
which lines of its results file each wrote, from which the summary counts the variants tried and
refused.  Nothing here needs a GPU: tests give a runner of their own (Runner)."""
from __future__ import annotations

import json
import math
import os
import re
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

import click

from gemmgen.harness import tune_plan
from gemmgen.harness.core.results import Stopped, in_turn
from gemmgen.harness.tune_plan import Stage

STATE = "state.json"
# The small and cpu sweeps compile, then time, about this many variants at a time, so that a budget
# stops after a piece rather than after compiling a whole sweep (25,000 variants for the small family).
CHUNK = 256
BUDGET_STOPPED = 3   # the exit status of a run the budget stopped (as `tune wmma --budget-s`)


class NoGpu(RuntimeError):
    pass


def parse_budget(text: str) -> float:
    """'2h', '30m', '90s', '1h30m' -> seconds."""
    compact = text.strip().lower().replace(" ", "")
    parts = re.findall(r"(\d+(?:\.\d+)?)([hms])", compact)
    if not parts or "".join(n + u for n, u in parts) != compact:
        raise ValueError(f"bad --budget {text!r}: write e.g. 2h, 30m, 90s or 1h30m")
    seconds = sum(float(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in parts)
    if seconds <= 0:
        raise ValueError(f"bad --budget {text!r}: give some time, e.g. 30m")
    return seconds


def duration(seconds: float) -> str:
    seconds = round(seconds)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"


def now() -> float:
    """The run's clock (tests put one of their own in its place)."""
    return time.monotonic()


class Budget:
    """The run's time: spent() once `seconds` have passed since it was made (never, for None)."""

    def __init__(self, seconds: float | None):
        self.seconds, self.start = seconds, now()

    def spent(self) -> bool:
        return self.seconds is not None and now() - self.start >= self.seconds

    def deadline(self) -> float | None:
        """When it is spent, by the wall clock (time.time()), for workers in other processes and
        hosts, which do not share this process's clock (None: never)."""
        return None if self.seconds is None else time.time() + self.seconds - (now() - self.start)


def check_results_path(path: Path) -> None:
    """Refuse a results folder inside the installed package (its tables are the packaged defaults,
    and a reinstall would lose the folder) or one that cannot be written; writes nothing."""
    package = Path(__file__).resolve().parent.parent   # gemmgen/: its generator, harness and templates
    resolved = path.resolve()
    if resolved == package or package in resolved.parents:
        raise ValueError(f"--results {path} is inside gemmgen's package ({package}); give a folder of "
                         "your own (default: ./gemmgen-tuning)")
    if resolved.exists() and not resolved.is_dir():
        raise ValueError(f"--results {path} exists and is not a folder")
    existing = next(p for p in (resolved, *resolved.parents) if p.exists())
    if not existing.is_dir():
        raise ValueError(f"--results {path} cannot be made: {existing} is a file")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"--results {path} is not writable ({existing} is not)")


@dataclass
class Context:
    """What every stage of one run shares."""
    results_dir: Path
    jobs: int
    stop: Callable[[], bool]
    command: str          # the run's command, recorded in the tables it writes
    # what runs the pieces of a sweep that can be split (results.in_turn: one after the other, here;
    # harness.distributed: at once, one a GPU)
    spread: Callable[..., int] = in_turn
    # the budget's deadline by the wall clock, for workers in other processes (Budget.deadline)
    deadline: Callable[[], float | None] = lambda: None

    def results(self, family: str) -> Path:
        return self.results_dir / tune_plan.RESULTS[family]

    def build(self, family: str) -> Path:
        return self.results_dir / "build" / family


@dataclass
class Outcome:
    complete: bool
    left: int | None = None   # the stage's variants left untimed, where the stage knows


class Runner(Protocol):
    device: str | None    # the GPU's name (None where only the cpu family is tuned)
    arch: str

    def run(self, stage: Stage, ctx: Context) -> Outcome: ...

    def report(self, wall: float) -> list[str]: ...


def make_runner(need_gpu: bool) -> "GpuRunner":
    from gemmgen.harness.core.toolchain import gpu_available

    if need_gpu and not gpu_available():
        raise NoGpu
    return GpuRunner(need_gpu)


class GpuRunner:
    """The stages on the GPU present, through the tuners' functions (what the subcommands run), each
    with the budget's stop(), resuming from the results folder.  `found`: the (arch, device) of GPUs
    found elsewhere (harness.distributed's workers), for a runner that runs stages needing no GPU here
    or is sent to run one on a worker."""

    def __init__(self, need_gpu: bool = True, found: tuple[str, str | None] | None = None):
        if found:
            self.arch, self.device = found
        elif need_gpu:
            from gemmgen.harness.check import device_arch

            self.arch, self.device = device_arch()
        else:   # the cpu family alone: no GPU, and the plan's architecture does not matter
            self.arch, self.device = "sm_90", None

    def run(self, stage: Stage, ctx: Context) -> Outcome:
        return getattr(self, IMPLEMENTATIONS[stage.key])(stage, ctx)

    def report(self, wall: float) -> list[str]:
        """Lines for the end of the summary (one GPU: the stages' times say it all)."""
        return []

    def small_sweep(self, stage: Stage, ctx: Context, arrays: bool = False) -> Outcome:
        from gemmgen.harness.small import tune as tune_small

        left = tune_small.measure_sweep(stage.selection, self.arch, self.device, ctx.results("small"),
                                        ctx.build("small"), tune_small.MEGABYTES, ctx.jobs, arrays=arrays,
                                        resume=True, stop=ctx.stop, chunk=CHUNK, spread=ctx.spread)
        return Outcome(False, left) if left else self.small_table(stage, ctx)

    def small_arrays(self, stage: Stage, ctx: Context) -> Outcome:
        return self.small_sweep(stage, ctx, arrays=True)

    def small_table(self, stage: Stage, ctx: Context) -> Outcome:
        from gemmgen.harness.small import tune as tune_small

        tune_small.verify_and_write_table(ctx.results("small"), self.arch, self.device, ctx.build("small"),
                                          ctx.jobs, ctx.command)
        return Outcome(True)

    def wmma_sweep(self, stage: Stage, ctx: Context) -> Outcome:
        from gemmgen.harness.wmma import tune as wmma_tune

        rc = wmma_tune.run_tune(ctx.results("wmma"), ctx.build("wmma"), stage.selection.precisions, ctx.jobs,
                                math.inf, wmma_tune.MAX_TUPLES, stop=ctx.stop, arch=self.arch, device=self.device,
                                spread=ctx.spread)
        return Outcome(rc == 0)

    def wmma_final(self, stage: Stage, ctx: Context) -> Outcome:
        from gemmgen.harness.wmma import tune as wmma_tune

        rc = wmma_tune.run_final(ctx.results("wmma"), ctx.build("wmma"), stage.selection.precisions, ctx.jobs,
                                 wmma_tune.MAX_TUPLES, stop=ctx.stop, resume=True, arch=self.arch,
                                 device=self.device, spread=ctx.spread)
        return Outcome(rc == 0)

    def wmma_table(self, stage: Stage, ctx: Context) -> Outcome:
        from gemmgen.harness.wmma import tune as wmma_tune

        refused = wmma_tune.verify_table(ctx.results("wmma"), self.arch, self.device, ctx.build("wmma"), ctx.jobs)
        click.echo(f"compiled the wmma table's kernels with every transpose: {refused} refused for local memory")
        return Outcome(True)

    def tallskinny_sweep(self, stage: Stage, ctx: Context) -> Outcome:
        from gemmgen.generator import tallskinny

        from gemmgen.harness.tallskinny import tune as tune_tallskinny

        try:
            tune_tallskinny.tune(stage.selection.precisions, tallskinny.TUNED_NS, tallskinny.TUNED_ISM2_NS,
                                 ctx.results("tallskinny"), ctx.build("tallskinny"), True, ctx.jobs,
                                 ctx.results_dir, stop=ctx.stop, resume=True, arch=self.arch, device=self.device,
                                 spread=ctx.spread)
        except Stopped:
            return Outcome(False)
        return Outcome(True)

    def _cpu_blockings(self, stage: Stage, ctx: Context):
        from gemmgen.harness.cpu import tune as cpu_tune

        isa = tune_plan.CPU_ISA
        device, build = cpu_tune.device_name(isa), cpu_tune.prepare_build(ctx.build("cpu"))
        specs, measured, left = cpu_tune.blocking_stage(
            stage.selection.precisions, stage.selection.all_shapes, isa, device, build, ctx.results("cpu"),
            cpu_tune.REPS, ctx.jobs, resume=True, stop=ctx.stop, chunk=CHUNK)
        if measured is None:
            raise click.ClickException(f"{stage.key}: the tuning driver failed (see above)")
        return isa, device, build, specs, measured, left

    def cpu_blocking(self, stage: Stage, ctx: Context) -> Outcome:
        left = self._cpu_blockings(stage, ctx)[-1]
        return Outcome(not left, left)

    def cpu_distance(self, stage: Stage, ctx: Context) -> Outcome:
        from gemmgen.harness.cpu import tune as cpu_tune

        # the blockings' timings, from the results file (the stage before timed them all)
        isa, device, build, specs, measured, _ = self._cpu_blockings(stage, ctx)
        best, measured2, left = cpu_tune.distance_stage(specs, measured, isa, device, build, ctx.results("cpu"),
                                                        cpu_tune.BATCH, cpu_tune.REPS, ctx.jobs, resume=True,
                                                        stop=ctx.stop, chunk=CHUNK)
        if measured2 is None:
            raise click.ClickException(f"{stage.key}: the tuning driver failed (see above)")
        if left:
            return Outcome(False, left)
        click.echo(f"wrote {cpu_tune.write_tuning_table(best, measured2, isa, device, cpu_tune.BATCH)}")
        return Outcome(True)


# Each stage of tune_plan.plan, by key, and the GpuRunner method that runs it.
IMPLEMENTATIONS = {
    "small squares": "small_sweep",
    "small rank-16 updates": "small_sweep",
    "small pointer arrays": "small_arrays",
    "wmma sweep": "wmma_sweep",
    "wmma final": "wmma_final",
    "wmma table": "wmma_table",
    "small table": "small_table",
    "tallskinny sweep": "tallskinny_sweep",
    "cpu blocking": "cpu_blocking",
    "cpu prefetch distance": "cpu_distance",
}


def _line_count(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def _rows(path: Path, ranges: list) -> list[dict]:
    """The rows of a results file in the line ranges [start, end) that a stage wrote."""
    if not path.exists() or not ranges:
        return []
    lines = path.read_bytes().split(b"\n")   # (lines as _line_count counts them)
    rows = []
    for start, end in ranges:
        for line in lines[start:end]:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue   # a line cut by an interruption
    return rows


def tally(rows: list[dict]) -> tuple[int, Counter]:
    """(variants tried, variants refused by reason) of a stage's result rows: a variant is tried once
    it has a row, refused where one of its rows is not a timing (its first such row's status: a
    compile failure, local memory, a wrong answer, a failed launch)."""
    tried: set[str] = set()
    refused: dict[str, str] = {}
    for r in rows:
        name = r.get("name") or r.get("kernel")   # (the cpu tuner's rows say "kernel")
        if not name:
            continue
        tried.add(name)
        status = r.get("status") or ("compile-failed" if "skipped" in r else "ok")
        if status != "ok":
            refused.setdefault(name, status)
    return len(tried), Counter(refused.values())


class State:
    """state.json: per stage, the command it ran as, whether it is complete, its time so far and the
    line ranges it wrote in its family's results file."""

    def __init__(self, folder: Path, device: str | None, arch: str):
        self.path = folder / STATE
        data = json.loads(self.path.read_text()) if self.path.exists() else {}
        if data.get("device") and device and data["device"] != device:
            raise click.ClickException(f"{folder} holds the tuning of {data['device']}, not of the {device} "
                                       "present; give another --results")
        self.data = {"device": data.get("device") or device, "arch": arch, "stages": data.get("stages", {})}

    def entry(self, stage: Stage) -> dict:
        """The stage's record, started afresh where it ran under another command (other --sizes, say)."""
        e = self.data["stages"].get(stage.key)
        if e is None or e.get("command") != stage.command:
            e = {"command": stage.command, "complete": False, "seconds": 0.0, "lines": [], "tried": 0, "refused": {}}
            self.data["stages"][stage.key] = e
        return e

    def complete(self, stage: Stage) -> bool:
        e = self.data["stages"].get(stage.key)
        return bool(e and e.get("command") == stage.command and e.get("complete"))

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, sort_keys=True) + "\n")
        tmp.replace(self.path)


def _variants(stage: Stage) -> str:
    if stage.variants is None:
        return "compiles the table's kernels" if stage.name == "table" else "variants unknown until now"
    return f"{'at most ' if stage.bound else ''}{stage.variants} variants" + (
        " with the table at the start" if stage.depends_on and not stage.bound else "")


def _estimate(stage: Stage, state: State, stages: list[Stage], ctx: Context) -> str:
    """Seconds a variant took in this tuning so far, in the family's stages where it has some, times
    the variants left: a rough guide (the families' variants cost very different times)."""
    rates: dict[str | None, list[float]] = {}
    for s in stages:
        e = state.data["stages"].get(s.key)
        if e and e.get("command") == s.command:
            tried = e["tried"]
            if tried:
                for key in (s.family, None):
                    r = rates.setdefault(key, [0.0, 0])
                    r[0] += e["seconds"]
                    r[1] += tried
    rate = rates.get(stage.family) or rates.get(None)
    if not rate or stage.variants is None:
        return "no estimate yet"
    left = stage.variants - state.entry(stage)["tried"]
    return f"about {duration(max(left, 0) * rate[0] / rate[1])} at {rate[0] / rate[1]:.2f} s a variant so far"


def _left(stages: list[Stage], state: State, ctx: Context, current: Stage | None, outcome: Outcome | None) -> list[str]:
    out = []
    for s in stages:
        if state.complete(s):
            continue
        if s is current and outcome and outcome.left is not None:
            out.append(f"{s.key} ({outcome.left} variants left)")
        elif s.variants is not None and s is current:
            tried = state.entry(s)["tried"]
            out.append(f"{s.key} (about {max(s.variants - tried, 0)} of {_variants(s)} left)")
        else:
            out.append(f"{s.key} ({_variants(s)})")
    return out


def run(runner: Runner, stages: list[Stage], ctx: Context, budget: Budget, command: str,
        echo: Callable[[str], None] = click.echo) -> int:
    """Run the stages not yet complete, in order, until done (0) or the budget is spent
    (BUDGET_STOPPED, with what is left and the command that goes on); then the summary."""
    state = State(ctx.results_dir, runner.device, runner.arch)
    state.save()
    began = now()
    echo(f"# tuning {runner.device or 'no GPU'} ({runner.arch}) in {ctx.results_dir}: {len(stages)} stages")
    stopped_in, outcome = None, None
    for i, stage in enumerate(stages, 1):
        tag = f"[{i}/{len(stages)}] {stage.key}"
        if state.complete(stage):
            echo(f"{tag}: complete earlier ({duration(state.entry(stage)['seconds'])}), skipped")
            continue
        if budget.spent():
            stopped_in, outcome = stage, None
            break
        entry = state.entry(stage)
        before = f", {entry['tried']} of them tried before" if entry["tried"] else ""
        echo(f"{tag}: {_variants(stage)}{before}; {_estimate(stage, state, stages, ctx)}")
        path = ctx.results(stage.family)
        first, start = _line_count(path), now()

        def record(complete: bool) -> None:
            entry["seconds"] += now() - start
            end = _line_count(path)
            if end > first:
                entry["lines"].append([first, end])
            tried, refused = tally(_rows(path, entry["lines"]))
            entry.update(complete=complete, tried=tried, refused=dict(refused))
            state.save()

        try:
            outcome = runner.run(stage, ctx)
        except BaseException:   # an error or ^C: keep the time and the results so far
            record(False)
            echo(f"{tag}: stopped before its end; state in {state.path}; to go on: {command}")
            raise
        record(outcome.complete)
        echo(f"{tag}: {'complete' if outcome.complete else 'stopped by the budget'} after {duration(entry['seconds'])}; "
             f"{entry['tried']} variants tried, {sum(entry['refused'].values())} refused")
        if not outcome.complete:
            stopped_in = stage
            break
    if stopped_in is not None:
        echo(f"budget spent: stopped in {stopped_in.key}; state in {state.path}")
        echo("left: " + "; ".join(_left(stages, state, ctx, stopped_in, outcome)))
        echo(f"to go on: {command}")
    for line in summary(stages, state, ctx) + runner.report(now() - began):
        echo(line)
    return BUDGET_STOPPED if stopped_in is not None else 0


def summary(stages: list[Stage], state: State, ctx: Context) -> list[str]:
    """Per stage: its time, the variants tried and refused by reason; then the tables in the folder."""
    from gemmgen.generator.tuning import folder_tables

    lines = [f"# summary ({ctx.results_dir}): time, variants tried, refused by reason"]
    total_time, total_tried, total_refused = 0.0, 0, Counter()
    for s in stages:
        e = state.data["stages"].get(s.key)
        if not e or e.get("command") != s.command:
            lines.append(f"  {s.key:<24} not started")
            continue
        tried, refused = e.get("tried", 0), Counter(e.get("refused", {}))
        total_time, total_tried = total_time + e["seconds"], total_tried + tried
        total_refused += refused
        why = ", ".join(f"{k} {v}" for k, v in sorted(refused.items()))
        lines.append(f"  {s.key:<24} {duration(e['seconds']):>7} {tried:>7} tried {sum(refused.values()):>6} refused"
                     + (f" ({why})" if why else "") + ("" if e.get("complete") else "  [not complete]"))
    why = ", ".join(f"{k} {v}" for k, v in sorted(total_refused.items()))
    lines.append(f"  {'total':<24} {duration(total_time):>7} {total_tried:>7} tried {sum(total_refused.values()):>6} "
                 "refused" + (f" ({why})" if why else ""))
    tables = folder_tables(ctx.results_dir, state.data["device"]) if ctx.results_dir.is_dir() else {}
    if tables:
        lines.append("tables: " + ", ".join(str(p) for p in sorted(set(tables.values()))))
        lines.append(f"use them: gemmgen generate --tables {ctx.results_dir}")
    else:
        lines.append("tables: none written yet")
    return lines
