"""What docs/perf keeps of a check report: harness.check_summary (no GPU needed)."""
import gzip
import json

from gemmgen.harness.check_summary import main, summarize


def _case(prec, kind, err, bound, passed=True, interface="strided"):
    return {"precision": prec, "m": 3, "n": 3, "k": 3, "transa": "N", "transb": "T", "interface": interface,
            "batch": 7, "kind": kind, "rc": 0, "max_error": err, "bound": bound, "untouched_ok": True,
            "exact_ok": None, "passed": passed, "note": ""}


def test_the_summary_keeps_counts_the_worst_error_and_every_failure(tmp_path):
    cases = [_case("h", "random", 1e-3, 1e-2), _case("h", "exact", 5e-3, 1e-2, interface="array"),
             _case("d", "random", 2.0, 1.0, passed=False), _case("d", "not-generated", 0.0, 0.0, interface="api"),
             _case("s", "random", 1e-7, 1e-6, interface="tsm2_s_n4_t128x4x8_s4/split1")]
    report = {"device": "GPU", "command": "gemmgen check", "passed": 4, "failed": 1,
              "build": {"local_memory": [f"k{i}" for i in range(20)], "failures": []}, "results": cases}
    summary = summarize(report)
    assert summary["device"] == "GPU" and summary["build"] == {"local_memory": 20, "failures": []}
    r = summary["results"]
    assert (r["cases"], r["passed"], r["failed"]) == (5, 4, 1) and r["failures"] == [cases[2]]
    h = r["by_precision"]["h"]
    assert h["kinds"] == {"exact": 1, "random": 1} and h["interfaces"] == {"array": 1, "strided": 1}
    assert h["largest_error_over_bound"] == 0.5 and h["largest_at"]["kind"] == "exact"
    assert r["by_precision"]["s"]["interfaces"] == {"tsm2": 1}
    path = tmp_path / "report.json.gz"
    path.write_bytes(gzip.compress(json.dumps(report).encode()))
    assert main([str(path), str(tmp_path / "s.json"), "--recorded-in", "abc1234"]) == 0
    written = json.loads((tmp_path / "s.json").read_text())
    assert written["summary_of"] == "report.json.gz" and written["recorded_in"] == "abc1234"
    assert written["results"] == r


def test_a_check_report_is_whole_while_the_checks_run_and_says_whether_they_finished(tmp_path):
    """run_check writes its report every 2% of the cases (complete false) and at the end (true),
    each time whole, through a temporary file: a run cut short leaves what it checked."""
    from gemmgen.harness.check import write_report
    from gemmgen.harness.core.cases import CaseResult

    results = [CaseResult(**{**_case("d", "random", 0.1, 1.0), "passed": ok}) for ok in (True, False)]
    path = tmp_path / "reports" / "check.json"
    write_report(path, {"device": "GPU", "arch": "sm_90"}, results[:1], complete=False)
    first = json.loads(path.read_text())
    assert (first["complete"], first["passed"], first["failed"], len(first["results"])) == (False, 1, 0, 1)
    assert first["device"] == "GPU" and summarize(first)["complete"] is False
    write_report(path, {"device": "GPU", "arch": "sm_90"}, results, complete=True)
    last = json.loads(path.read_text())
    assert (last["complete"], last["passed"], last["failed"], len(last["results"])) == (True, 1, 1, 2)
    assert [p.name for p in path.parent.iterdir()] == ["check.json"]   # no temporary file left
