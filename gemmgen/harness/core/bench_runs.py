"""Benchmark files that several runs fill, one set of precisions each (`gemmgen bench small` and
`bench wmma`): a run replaces only its precisions' rows and keeps the others' with the run that measured
them, so a long sweep can be split over device calls without merging files by hand."""
from __future__ import annotations

from gemmgen.generator.precision import PRECISION_ORDER


def keep_other_precisions(payload: dict, previous: dict) -> dict:
    """`payload` (this run: `runs` per precision and `rows`, each row with its `precision`) merged over
    `previous` (the file it replaces): the rows of precisions this run did not measure stay, with their
    run.  Same device and architecture only; a file from elsewhere is replaced whole."""
    if (previous.get("device"), previous.get("arch")) != (payload["device"], payload["arch"]):
        return payload
    old_runs = previous.get("runs") or {   # files written before runs were kept per precision
        p: {"command": previous["command"], "copy_bandwidth_gbs": previous["copy_bandwidth_gbs"]}
        for p in {r["precision"] for r in previous["rows"]}}
    kept = [p for p in old_runs if p not in payload["runs"]]
    runs = {p: old_runs[p] for p in kept} | payload["runs"]
    rows = [r for r in previous["rows"] if r["precision"] in kept] + payload["rows"]

    def order(p: str) -> int:
        return PRECISION_ORDER.index(p) if p in PRECISION_ORDER else len(PRECISION_ORDER)

    return {**payload, "runs": dict(sorted(runs.items(), key=lambda kv: order(kv[0]))),
            "rows": sorted(rows, key=lambda r: order(r["precision"]))}   # stable: each run's row order stays


def run_lines(payload: dict) -> list[str]:
    """One line per run for a file's header: the precisions it measured, its command and bandwidth."""
    groups: dict[tuple, list[str]] = {}
    for prec, run in payload["runs"].items():
        groups.setdefault((run["command"], run["copy_bandwidth_gbs"]), []).append(prec)
    return [f"{', '.join(precs)} rows: `{command}`, copy bandwidth measured in the same run {bandwidth:.0f} GB/s "
            "(bytes read + written)." for (command, bandwidth), precs in groups.items()]
