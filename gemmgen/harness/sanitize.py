"""`gemmgen check --sanitize`: the GPU checks of an emitted set under NVIDIA's compute-sanitizer.

The set is built once (as `gemmgen check` builds it); then, for each tool (memcheck, racecheck,
synccheck, initcheck) and each precision, this module runs itself as `python -m gemmgen.harness.sanitize`
under `compute-sanitizer --tool TOOL`, several such processes at once (the h and hc checks split in
parts).  That inner run is the ordinary check (every kernel, both batch
interfaces, packed and padded operands, β = 0 and ≠ 0, the cp.async rings' long batches, the
sm_90a paths where the GPU has them, tall-skinny) with every operand in an allocation of exactly
the bytes the call describes (CuPy's memory pool off): a read or write past the last matrix lands
outside its allocation and memcheck reports it.  Writes past the end are also caught without a
sanitizer: the ordinary check puts poison after C and checks it (check_cases.C_GUARD).

A tool passes when the sanitizer reports no error and no hazard and every check passes."""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import click

from gemmgen.generator.precision import PRECISION_ORDER

TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
# What each tool is told beyond --tool.  memcheck: no leak report (CuPy and the CUDA runtime keep
# allocations for the life of the process); racecheck: shared-memory hazards and their analysis;
# initcheck: reads of device memory never written.
TOOL_FLAGS = {
    "memcheck": ("--leak-check", "no"),
    "racecheck": ("--racecheck-report", "all"),
    "synccheck": (),
    "initcheck": (),
}
SANITIZER_EXIT = 86   # compute-sanitizer's exit code when it reported anything (--error-exitcode)


def parse_tools(text: str) -> tuple[str, ...]:
    """'all' or a comma-separated list of TOOLS."""
    if text.strip() == "all":
        return TOOLS
    tools = tuple(t.strip() for t in text.split(",") if t.strip())
    unknown = [t for t in tools if t not in TOOLS]
    if unknown or not tools:
        raise ValueError(f"unknown sanitizer tool {', '.join(unknown) or repr(text)}; "
                         f"known: {', '.join(TOOLS)}, all")
    return tools


_ERRORS = re.compile(r"ERROR SUMMARY: (\d+) errors?")
_HAZARDS = re.compile(r"RACECHECK SUMMARY: (\d+) hazards? displayed \((\d+) errors?, (\d+) warnings?\)")


@dataclass
class ToolRun:
    tool: str
    exit_code: int
    errors: int          # errors over every process the tool followed
    warnings: int        # racecheck's warning-level hazards
    checks_passed: int
    checks_failed: int
    seconds: float       # summed over its processes
    log: str             # the sanitizer's log files
    first_reports: list  # the first lines of its reports

    @property
    def clean(self) -> bool:
        return self.exit_code == 0 and self.errors == 0 and self.warnings == 0 and self.checks_failed == 0


def parse_log(text: str) -> tuple[int, int, list[str]]:
    """(errors, warnings, first report lines) of a compute-sanitizer log of one or more processes."""
    errors = sum(int(m.group(1)) for m in _ERRORS.finditer(text))
    hazards = [(int(m.group(2)), int(m.group(3))) for m in _HAZARDS.finditer(text)]
    errors = max(errors, sum(e for e, _ in hazards))
    warnings = sum(w for _, w in hazards)
    reports = [line for line in text.splitlines()
               if line.startswith("========= ") and "SUMMARY" not in line
               and ("Invalid" in line or "hazard" in line.lower()
                                                     or "Error" in line or "Uninitialized" in line
                                                     or "barrier" in line.lower())]
    return errors, warnings, reports[:40]


def shard_command(sanitizer: Path, tool: str, library: Path, gen_dir: Path, log: Path, counts: Path,
                  quick: bool, jobs: int, precisions: tuple[str, ...], part: tuple[int, int]) -> list[str]:
    """compute-sanitizer running part `part` of the inner check of `precisions` under `tool`."""
    return [str(sanitizer), "--tool", tool, *TOOL_FLAGS[tool], "--target-processes", "all",
            "--error-exitcode", str(SANITIZER_EXIT), "--print-limit", "100", "--log-file", str(log),
            sys.executable, "-m", "gemmgen.harness.sanitize", "--library", str(library), "--generated", str(gen_dir),
            "--counts", str(counts), "--jobs", str(jobs)] + (["--quick"] if quick else []) \
        + (["--precisions", ",".join(precisions)] if precisions else []) + ["--part", f"{part[0]}/{part[1]}"]


# Host memory: racecheck's shadow state makes one of its processes weigh as much as this many others.
WEIGHT = {"racecheck": 2}
# What one process of weight 1 held on the host (the h checks under synccheck on an H100: 9.5-10 GB
# resident each; 16 of them on a 125 GB machine were killed for memory).
PROCESS_HOST_BYTES = 11 << 30


def host_memory_slots(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """How many weight-1 processes the host's available memory holds (None where /proc/meminfo is not
    there to say)."""
    try:
        fields = dict(line.split(":", 1) for line in meminfo.read_text().splitlines() if ":" in line)
        available = int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return None
    return max(1, available // PROCESS_HOST_BYTES)
# The h and hc checks hold the Tensor Core families' cases too: each is split over this many processes.
PARTS = {"h": 8, "hc": 8, "s": 2, "d": 2, "c": 2}


def parse_parts(text: str) -> frozenset[int] | None:
    """'0-3', '4,5' or '' (every part) -> the part indices to run."""
    if not text.strip():
        return None
    parts: set[int] = set()
    for item in text.split(","):
        lo, dash, hi = item.strip().partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()) or (hi and int(hi) < int(lo)):
            raise ValueError(f"bad part range {item.strip()!r}; write e.g. 0-3 or 4,5")
        parts.update(range(int(lo), int(hi or lo) + 1))
    if max(parts) >= max(PARTS.values()):
        raise ValueError(f"no part {max(parts)}: a precision has at most {max(PARTS.values())} parts (0-"
                         f"{max(PARTS.values()) - 1})")
    return frozenset(parts)


def shard_files(out_dir: Path, key: tuple[str, str, int]) -> tuple[Path, Path]:
    """The log and the check counts of one (tool, precision, part) process."""
    stem = "sanitize_{}_{}_{}".format(*key)
    return out_dir / f"{stem}.log", out_dir / f"{stem}_checks.json"


def record_shard(out_dir: Path, key: tuple[str, str, int], exit_code: int, seconds: float) -> None:
    """One line of shards.jsonl per finished process, so that a run cut off (a time limit, a lost
    machine) still says what it checked."""
    log, counts = shard_files(out_dir, key)
    errors, warnings, reports = parse_log(log.read_text(errors="replace") if log.exists() else "")
    checks = json.loads(counts.read_text()) if counts.exists() else None
    line = dict(zip(("tool", "precision", "part"), key), exit_code=exit_code, errors=errors, warnings=warnings,
                checks=checks, seconds=round(seconds, 1), first_reports=reports[:5])
    with open(out_dir / "shards.jsonl", "a") as f:
        f.write(json.dumps(line) + "\n")


def run_tools(sanitizer: Path, tools: tuple[str, ...], library: Path, gen_dir: Path, out_dir: Path,
              quick: bool, jobs: int, precisions: tuple[str, ...], parts: frozenset[int] | None = None) -> list[ToolRun]:
    """Every tool over every precision, one process per (tool, precision, part), up to `jobs` of them
    at once (a racecheck process counting for WEIGHT of them): the sanitizers' cost is on the host (patching and tracking every access), so one GPU keeps
    several busy.  The results of one tool's processes are summed into its ToolRun; each process's own
    output (its progress lines) goes to a .out file beside its log."""
    from gemmgen.harness.core.cases import EXACT_BUFFERS_ENV

    env = dict(os.environ, **{EXACT_BUFFERS_ENV: "1", "PYTHONUNBUFFERED": "1"})
    shards = [(tool, prec, i) for tool in tools for prec in precisions for i in range(PARTS.get(prec, 1))
              if parts is None or i in parts]
    # `parallel` is a capacity in weight units (a racecheck process takes WEIGHT of them), so it is not
    # cut to the number of shards before weighting: 4 racecheck shards with 16 jobs run 4 at once.
    parallel = max(1, jobs or os.cpu_count() or 1)
    memory_slots = host_memory_slots()
    held_by_memory = memory_slots is not None and memory_slots < parallel
    if held_by_memory:
        parallel = memory_slots
    heaviest = max(WEIGHT.get(tool, 1) for tool in tools)
    click.echo(f"{len(shards)} sanitizer runs ({', '.join(tools)} × {', '.join(precisions)}), up to "
               f"{min(len(shards), max(1, parallel // heaviest))} at once"
               + (f" (host memory: {PROCESS_HOST_BYTES * heaviest >> 30} GB each)" if held_by_memory else "")
               + f"; logs in {out_dir}")
    (out_dir / "shards.jsonl").unlink(missing_ok=True)
    pending, running, done = list(shards), {}, {}
    started = time.monotonic()
    while pending or running:
        while pending and (not running or sum(WEIGHT.get(k[0], 1) for k in running)
                                               + WEIGHT.get(pending[0][0], 1) <= parallel):
            tool, prec, i = key = pending.pop(0)
            log, counts = shard_files(out_dir, key)
            for stale in (log, counts):
                stale.unlink(missing_ok=True)
            cmd = shard_command(sanitizer, tool, library, gen_dir, log, counts, quick, 1, (prec,),
                                (i, PARTS.get(prec, 1)))
            with open(log.with_suffix(".out"), "w") as out:
                running[key] = (subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT),
                                time.monotonic())
        time.sleep(0.5)
        for key, (proc, t0) in list(running.items()):
            if proc.poll() is not None:
                done[key] = (proc.returncode, time.monotonic() - t0)
                del running[key]
                record_shard(out_dir, key, *done[key])
                click.echo(f"  {key[0]} {key[1]} part {key[2]}: exit {proc.returncode} after {done[key][1]:.0f} s "
                           f"({len(done)}/{len(shards)}, {time.monotonic() - started:.0f} s)")
    runs = []
    for tool in tools:
        errors = warnings = passed = failed = 0
        reports, exit_code, seconds = [], 0, 0.0
        for key in [k for k in shards if k[0] == tool]:
            code, secs = done[key]
            log, counts = shard_files(out_dir, key)
            prec = key[1]
            e, w, r = parse_log(log.read_text(errors="replace") if log.exists() else "")
            errors, warnings, reports = errors + e, warnings + w, reports + [f"[{prec}] {line}" for line in r]
            if counts.exists():
                c = json.loads(counts.read_text())
                passed, failed = passed + c["passed"], failed + c["failed"]
            else:
                failed += 1   # the inner run died before it could count
            exit_code = exit_code or code
            seconds += secs
        runs.append(ToolRun(tool, exit_code, errors, warnings, passed, failed, round(seconds, 1),
                            str(out_dir / f"sanitize_{tool}_*.log"), reports[:40]))
    return runs


def run_sanitize(gen_dir: Path, build_dir: Path, arch: str, jobs: int, tools: tuple[str, ...],
                 report: Path | None, quick: bool, precisions: tuple[str, ...] = (),
                 parts: frozenset[int] | None = None) -> int:
    from gemmgen.harness.check import build_for_check
    from gemmgen.harness.core.toolchain import ToolchainError, find_compute_sanitizer, gpu_available

    if not gpu_available():   # before the build: the sanitizer runs kernels, it has nothing to do here
        click.echo("error: no GPU present: --sanitize runs the kernels under compute-sanitizer", err=True)
        return 1
    try:
        sanitizer = find_compute_sanitizer()
    except ToolchainError as err:
        click.echo(f"error: {err}", err=True)
        return 1
    built = build_for_check(gen_dir, build_dir, arch, jobs)
    if isinstance(built, int):
        return built
    out_dir = (report.parent if report else build_dir) / "sanitize"
    out_dir.mkdir(parents=True, exist_ok=True)
    present = precisions or tuple(p for p in PRECISION_ORDER
                                  if any(e["precision"] == p for e in built.manifest["dispatch"])
                                  or any(e["precision"] == p for e in built.manifest.get("tallskinny", {})
                                         .get("dispatch", [])))
    if parts is not None and not any(i < PARTS.get(p, 1) for p in present for i in parts):
        click.echo(f"error: the checks of {', '.join(present)} have no part {', '.join(map(str, sorted(parts)))}",
                   err=True)
        return 2
    runs = run_tools(sanitizer, tools, built.result.library, gen_dir, out_dir, quick, jobs, present, parts)
    for r in runs:
        click.echo(f"{r.tool}: {'clean' if r.clean else 'NOT CLEAN'}: {r.errors} errors, {r.warnings} warnings, "
                   f"checks {r.checks_passed} passed {r.checks_failed} failed, exit {r.exit_code}, {r.seconds:.0f} s")
        for line in r.first_reports[:10]:
            click.echo(f"  {line}")
    if report:
        from gemmgen.harness.check import device_arch

        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(json.dumps({
            "device": built.device_name or device_arch()[1],
            "arch": built.archs[0],
            "command": f"gemmgen check --generated {gen_dir} --sanitize {','.join(tools)}"
                       + (" --quick" if quick else "") + (f" --precisions {','.join(precisions)}" if precisions else "")
                       + (f" --sanitize-parts {','.join(map(str, sorted(parts)))}" if parts else ""),
            "generated_with": built.manifest["command"],
            "sanitizer": subprocess.run([str(sanitizer), "--version"], capture_output=True,
                                        text=True).stdout.strip().splitlines()[-1:],
            "host": platform.node(),
            "buffers": "each operand in its own cudaMalloc of exactly its extent (no pool, no slack)",
            "clean": all(r.clean for r in runs),
            "tools": [dict(asdict(r), clean=r.clean) for r in runs],
        }, indent=1) + "\n")
        click.echo(f"wrote {report}")
    return 0 if all(r.clean for r in runs) else 1


def regression_cases() -> list:
    """The cases that found this harness's first reports, for a short run under the sanitizer: pointer
    arrays and packed strided batches whose matrices end mid-chunk (hc and h 3×3×3 rings, the h 9×9×9
    paired ring, the h 13×13×13 warp kernel), every transpose, β = 0 and ≠ 0, and the quick return."""
    from gemmgen.harness.core.cases import Case, edge_cases

    cases = []
    for prec, n in (("hc", 3), ("h", 3), ("h", 9), ("h", 13)):
        for i, (ta, tb) in enumerate((("N", "N"), ("T", "N"), ("N", "T"), ("T", "T"))):
            for interface in ("array", "strided"):
                cases.append(Case(prec, n, n, n, ta, tb, interface, 6 if i % 2 else 1001, "regression",
                                  1.0, 0.5 if i < 2 else 0.0, pad=0, offset=i % 2))
    return cases + [c for c in edge_cases(["hc", "z"]) if "untouched" in c.kind]


def main(argv: list[str] | None = None) -> int:
    """The inner run, under compute-sanitizer: the GPU checks with exact-size buffers."""
    parser = argparse.ArgumentParser(prog="python -m gemmgen.harness.sanitize")
    parser.add_argument("--library", type=Path, required=True)
    parser.add_argument("--generated", type=Path, required=True)
    parser.add_argument("--counts", type=Path, required=True)
    parser.add_argument("--jobs", type=int, default=0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--precisions", default="")
    parser.add_argument("--regression", action="store_true", help="regression_cases() only")
    parser.add_argument("--part", default="0/1", help="I/N: every N-th case from the I-th (run_check.gpu_checks)")
    args = parser.parse_args(argv)
    from gemmgen.harness.core import cases as check_cases
    from gemmgen.harness.check import gpu_checks, summarize

    os.environ[check_cases.EXACT_BUFFERS_ENV] = "1"
    check_cases.use_exact_allocations()
    manifest = json.loads((args.generated / "manifest.json").read_text())
    precisions = tuple(p for p in args.precisions.split(",") if p)
    if args.regression:
        from gemmgen.harness.core.api import GemmgenLibrary

        results = check_cases.run_cases(GemmgenLibrary(args.library), regression_cases())
    else:
        index, parts = (int(x) for x in args.part.split("/"))
        results = gpu_checks(args.library, manifest, args.quick, args.jobs, precisions, progress_lines=True,
                             part=(index, parts))
    summarize(results)
    failed = [r for r in results if not r.passed]
    args.counts.write_text(json.dumps({"passed": len(results) - len(failed), "failed": len(failed)}) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
