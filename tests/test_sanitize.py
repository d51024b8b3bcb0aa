"""`gemmgen check --sanitize`: tool names, reading compute-sanitizer's logs, the exact-extent arithmetic
and the one-line refusals (no GPU needed)."""
import json
import sys

import pytest
from click.testing import CliRunner

from gemmgen.cli import main
from gemmgen.harness.core import cases as check_cases
from gemmgen.harness import sanitize
from gemmgen.harness.core.toolchain import gpu_available


def test_tools_are_parsed_and_bad_ones_refused():
    assert sanitize.parse_tools("all") == sanitize.TOOLS
    assert sanitize.parse_tools("memcheck, racecheck") == ("memcheck", "racecheck")
    with pytest.raises(ValueError, match="unknown sanitizer tool leakcheck"):
        sanitize.parse_tools("memcheck,leakcheck")
    with pytest.raises(ValueError):
        sanitize.parse_tools(" , ")


def test_logs_of_several_processes_are_summed():
    log = "\n".join([
        "========= COMPUTE-SANITIZER",
        "========= Invalid __global__ read of size 16 bytes",
        "=========     at small_ring_kernel+0x1a0",
        "========= ERROR SUMMARY: 1 error",
        "========= ERROR SUMMARY: 0 errors",
        "========= RACECHECK SUMMARY: 3 hazards displayed (2 errors, 1 warning)",
    ])
    errors, warnings, reports = sanitize.parse_log(log)
    assert (errors, warnings) == (2, 1)
    assert reports == ["========= Invalid __global__ read of size 16 bytes"]
    assert sanitize.parse_log("========= ERROR SUMMARY: 0 errors\n")[:2] == (0, 0)


def test_a_clean_run_needs_every_count_at_zero():
    clean = sanitize.ToolRun("memcheck", 0, 0, 0, 10, 0, 1.0, "log", [])
    assert clean.clean
    for change in ({"exit_code": 86}, {"errors": 1}, {"warnings": 1}, {"checks_failed": 1}):
        assert not sanitize.ToolRun(**{**clean.__dict__, **change}).clean


def test_exact_extent_ends_at_the_last_element():
    # 3 matrices of 4 rows x 2 columns, ld 6, stride 20: the last one's last element is 2*20 + 6 + 3
    assert check_cases.extent(4, 2, 6, 20, 3) == 2 * 20 + 6 + 4
    assert check_cases.extent(0, 2, 6, 20, 3) == 0
    assert check_cases.extent(4, 2, 6, 20, 0) == 0


def test_regression_cases_cover_the_reported_kernels_and_the_quick_return():
    cases = sanitize.regression_cases()
    assert any(c.precision == "hc" and (c.m, c.n, c.k) == (3, 3, 3) and c.interface == "array" for c in cases)
    assert {c.transa + c.transb for c in cases} >= {"NN", "NT", "TN", "TT"}
    assert sum(c.kind.endswith(check_cases.UNTOUCHED_KIND) for c in cases) == 4


@pytest.mark.skipif(gpu_available(), reason="checks the refusal on a machine without a GPU")
def test_sanitize_without_a_gpu_is_refused_in_one_line():
    result = CliRunner().invoke(main, ["check", "--sanitize", "memcheck"])
    assert result.exit_code == 1
    assert "no GPU present" in result.output


def test_bad_tool_or_precision_is_refused():
    result = CliRunner().invoke(main, ["check", "--sanitize", "memchek"])
    assert result.exit_code == 2 and "unknown sanitizer tool memchek" in result.output
    result = CliRunner().invoke(main, ["check", "--precisions", "q"])
    assert result.exit_code == 2 and "unknown precision q" in result.output


def test_run_tools_splits_schedules_and_sums(tmp_path):
    """The (tool, precision, part) processes, with a stand-in for compute-sanitizer that writes the
    log and the check counts an inner run would: every shard runs once, one line each in
    shards.jsonl, a tool's counts and errors summed; a shard with a report makes its tool unclean."""
    fake = tmp_path / "fake-sanitizer"
    fake.write_text(f"""#!{sys.executable}
import json, sys
args = sys.argv[1:]
log, counts, part = (args[args.index(flag) + 1] for flag in ("--log-file", "--counts", "--part"))
tool = args[args.index("--tool") + 1]
bad = tool == "racecheck" and "_s_1" in log
with open(log, "w") as f:
    f.write("========= COMPUTE-SANITIZER\\n")
    f.write("========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)\\n" if bad
            else "========= ERROR SUMMARY: 0 errors\\n")
json.dump({{"passed": 3, "failed": 0}}, open(counts, "w"))
sys.exit(86 if bad else 0)
""")
    fake.chmod(0o755)
    runs = sanitize.run_tools(fake, ("memcheck", "racecheck"), tmp_path / "lib.so", tmp_path, tmp_path,
                              quick=True, jobs=4, precisions=("h", "s"))
    parts = sanitize.PARTS["h"] + sanitize.PARTS["s"]
    lines = [json.loads(x) for x in (tmp_path / "shards.jsonl").read_text().splitlines()]
    assert len(lines) == 2 * parts
    assert {(x["tool"], x["precision"], x["part"]) for x in lines} == {
        (t, p, i) for t in ("memcheck", "racecheck") for p in ("h", "s") for i in range(sanitize.PARTS[p])}
    memcheck, racecheck = runs
    assert memcheck.clean and memcheck.checks_passed == 3 * parts
    assert not racecheck.clean and racecheck.errors == 1 and racecheck.exit_code == sanitize.SANITIZER_EXIT


def test_host_memory_caps_the_processes_at_once(tmp_path, monkeypatch, capsys):
    """16 synccheck processes of the h checks (about 10 GB each) ran a 125 GB host out of memory: the
    processes at once are capped by the available memory, a racecheck process counting twice."""
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       131072000 kB\nMemAvailable:   24117248 kB\n")   # 23 GiB
    assert sanitize.host_memory_slots(meminfo) == 2
    assert sanitize.host_memory_slots(tmp_path / "missing") is None
    monkeypatch.setattr(sanitize, "host_memory_slots", lambda: 2)
    running = tmp_path / "running"
    running.mkdir()
    fake = tmp_path / "fake-sanitizer"
    fake.write_text(f"""#!{sys.executable}
import json, os, sys, time
args = sys.argv[1:]
log, counts = (args[args.index(flag) + 1] for flag in ("--log-file", "--counts"))
weight = 2 if args[args.index("--tool") + 1] == "racecheck" else 1
marker = os.path.join({str(running)!r}, str(os.getpid()))
open(marker + ".tmp", "w").write(str(weight))
os.rename(marker + ".tmp", marker)   # whole, for the others to read
time.sleep(0.3)
def weight_of(name):   # a process that finished between listdir and open no longer counts
    try:
        return int(open(os.path.join({str(running)!r}, name)).read())
    except FileNotFoundError:
        return 0
load = sum(weight_of(m) for m in os.listdir({str(running)!r}) if not m.endswith(".tmp"))
with open({str(tmp_path / "loads")!r}, "a") as f:
    f.write(f"{{load}}\\n")
os.remove(marker)
open(log, "w").write("========= ERROR SUMMARY: 0 errors\\n")
json.dump({{"passed": 1, "failed": 0}}, open(counts, "w"))
""")
    fake.chmod(0o755)
    runs = sanitize.run_tools(fake, ("synccheck", "racecheck"), tmp_path / "lib.so", tmp_path, tmp_path,
                              quick=True, jobs=16, precisions=("s",))
    assert all(r.clean for r in runs)
    loads = [int(x) for x in (tmp_path / "loads").read_text().split()]
    assert len(loads) == 2 * sanitize.PARTS["s"] and max(loads) <= 2
    assert "up to 1 at once (host memory: 22 GB each)" in capsys.readouterr().out


def test_parts_select_shards_and_bad_ranges_are_refused(tmp_path):
    assert sanitize.parse_parts("") is None
    assert sanitize.parse_parts("0-2,5") == {0, 1, 2, 5}
    for bad in ("3-1", "x", "1-", "8"):
        with pytest.raises(ValueError):
            sanitize.parse_parts(bad)
    result = CliRunner().invoke(main, ["check", "--sanitize-parts", "0-1"])
    assert result.exit_code != 0 and "only with --sanitize" in result.output
    result = CliRunner().invoke(main, ["check", "--sanitize", "racecheck", "--sanitize-parts", "9"])
    assert result.exit_code != 0 and "at most 8 parts" in result.output


def test_run_tools_runs_the_selected_parts_only(tmp_path):
    fake = tmp_path / "fake-sanitizer"
    fake.write_text(f"""#!{sys.executable}
import json, sys
args = sys.argv[1:]
log, counts = (args[args.index(flag) + 1] for flag in ("--log-file", "--counts"))
open(log, "w").write("========= ERROR SUMMARY: 0 errors\\n")
json.dump({{"passed": 1, "failed": 0}}, open(counts, "w"))
""")
    fake.chmod(0o755)
    runs = sanitize.run_tools(fake, ("racecheck",), tmp_path / "lib.so", tmp_path, tmp_path, quick=True, jobs=4,
                              precisions=("hc", "s", "z"), parts=frozenset({1, 6}))
    lines = [json.loads(x) for x in (tmp_path / "shards.jsonl").read_text().splitlines()]
    assert sorted((x["precision"], x["part"]) for x in lines) == [("hc", 1), ("hc", 6), ("s", 1)]
    assert runs[0].clean and runs[0].checks_passed == 3
