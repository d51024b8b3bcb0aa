"""The tuners' append-only results files (JSON lines), shared by every family's sweep: a row is
written as soon as it exists, so an interrupted sweep resumes where it stopped, and a variant that
was skipped keeps its reason."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Iterable


class Stopped(Exception):
    """A tuner's budget (gemmgen tune --budget) is spent: it stops between two timings; the results so
    far are in its file, and a run again goes on from there."""


def load_results(path: Path) -> list[dict]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue   # a line cut by an interruption
    return rows


def append_result(path: Path, row: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
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
