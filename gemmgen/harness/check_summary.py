"""A check report in short: what docs/perf keeps of a `gemmgen check --report` (or of a report with
the same cases, as tallskinny.device_run's), the whole report staying in git history.

The summary keeps every field of the report but its lists of cases (a list of more than LIST_MAX
items, as a build's local-memory kernels, becomes its length), and for each list of cases: the cases,
passed and failed, per precision the cases by check kind and by interface, the largest error / bound
and the case it came from, and every failed case in full.

    python -m gemmgen.harness.check_summary REPORT[.gz] OUT.json [--recorded-in REV] [--full-report TEXT]"""
from __future__ import annotations

import argparse
import gzip
import json
from collections import Counter
from pathlib import Path

CASE_LISTS = ("results", "results_tuned")   # the report's lists of check cases (harness.core.cases.CaseResult)
LIST_MAX = 8
WHERE = ("m", "n", "k", "transa", "transb", "interface", "batch", "kind", "note")   # a case, in short


def _interface(case: dict) -> str:
    """strided, array, api, or the family of a tall-skinny variant (its interface names the variant)."""
    iface = case.get("interface", "")
    return iface if iface in ("strided", "array", "api") else iface.split("_")[0]


def summarize_cases(cases: list[dict]) -> dict:
    by_precision: dict[str, dict] = {}
    for prec in sorted({c["precision"] for c in cases}):
        mine = [c for c in cases if c["precision"] == prec]
        measured = [c for c in mine if c.get("bound")]
        worst = max(measured, key=lambda c: c["max_error"] / c["bound"], default=None)
        by_precision[prec] = {
            "cases": len(mine),
            "failed": sum(not c["passed"] for c in mine),
            "kinds": dict(sorted(Counter(c["kind"] for c in mine).items())),
            "interfaces": dict(sorted(Counter(_interface(c) for c in mine).items())),
            "largest_error_over_bound": None if worst is None else round(worst["max_error"] / worst["bound"], 4),
            "largest_at": None if worst is None else {k: worst[k] for k in WHERE if k in worst},
        }
    failed = [c for c in cases if not c["passed"]]
    return {"cases": len(cases), "passed": len(cases) - len(failed), "failed": len(failed),
            "by_precision": by_precision, "failures": failed}


def _short(value):
    if isinstance(value, list) and len(value) > LIST_MAX:
        return len(value)
    if isinstance(value, dict):
        return {k: _short(v) for k, v in value.items()}
    return value


def summarize(report: dict) -> dict:
    return {key: summarize_cases(value) if key in CASE_LISTS else _short(value) for key, value in report.items()}


def read_report(path: Path) -> dict:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--recorded-in", help="the commit that recorded the whole report")
    parser.add_argument("--full-report", help="where the whole report is, e.g. a git show command")
    args = parser.parse_args(argv)
    summary = {"summary_of": args.report.name}
    summary.update({k: v for k, v in (("recorded_in", args.recorded_in), ("full_report", args.full_report)) if v})
    summary.update(summarize(read_report(args.report)))
    args.out.write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
