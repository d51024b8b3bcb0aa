"""The tuners' append-only results files (JSON lines), shared by every family's sweep: a row is
written as soon as it exists, so an interrupted sweep resumes where it stopped, and a variant that
was skipped keeps its reason.

A results file whose name ends in .gz (as the records in docs/perf, kept compressed) is read and
appended to through gzip: each append adds a gzip member, which gzip and zcat read as one stream."""
from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path
from typing import Callable, Iterable, TextIO


class Stopped(Exception):
    """A tuner's budget (gemmgen tune --budget) is spent: it stops between two timings; the results so
    far are in its file, and a run again goes on from there."""


def in_turn(pieces: Iterable[list], work: Callable[..., int], results: Path, jobs: int,
            stop: Callable[[], bool]) -> int:
    """Run the pieces of a sweep one after the other on this machine: `work(piece, results_path=,
    jobs=, stop=)` compiles and times one piece, appending its rows to `results`, and returns the
    variants it did.  stop() is asked before each piece.  Returns the variants done.
    (harness.distributed.Workers.spread runs the same pieces on several GPUs at once.)"""
    done = 0
    for piece in pieces:
        if stop():
            break
        done += work(piece, results_path=results, jobs=jobs, stop=stop)
    return done


def open_results(path: Path, mode: str = "r") -> TextIO:
    """A results file opened as text ("r" or "a"), through gzip where its name ends in .gz."""
    if path.suffix == ".gz":
        return gzip.open(path, mode + "t")
    return path.open(mode)


def _lines(path: Path) -> list[str]:
    lines = []
    with open_results(path) as f:
        try:
            for line in f:
                lines.append(line)
        except (EOFError, gzip.BadGzipFile, zlib.error):
            pass   # a compressed file cut by an interruption: the lines before the cut count
    return lines


def load_results(path: Path) -> list[dict]:
    if not path.exists():
        return []
    rows = []
    for line in _lines(path):
        line = line.strip()
        if line:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue   # a line cut by an interruption
    return rows


def append_result(path: Path, row: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open_results(path, "a") as f:
        f.write(json.dumps(row, sort_keys=True) + "\n")
        f.flush()


def standing_refusals(rows: Iterable[dict], at_build: Callable[[dict], bool]) -> tuple[set[str], set[str]]:
    """The variant names refused by `rows` (in the order they were appended), as (standing, at build).

    A wrong answer, a launch failure or a refusal in a table's all-transposes verification stands
    whatever came after.  A refusal at the sweep's build (`at_build`: local memory, a failed
    compile) is a property of the code of its day: a later successful result of the same name (a
    sweep builds every variant again, so a template change that removes a spill brings it back)
    supersedes it.  Both tuners (small, wmma) decide by this one rule."""
    standing: set[str] = set()
    built_refused: set[str] = set()
    for r in rows:
        if r["status"] == "ok":
            built_refused.discard(r["name"])
        elif at_build(r):
            built_refused.add(r["name"])
        else:
            standing.add(r["name"])
    return standing, built_refused
