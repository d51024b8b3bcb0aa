"""The build cache shared between build folders and checkouts (harness.core.cache)."""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from gemmgen.harness.core import cache


def test_where_the_cache_lives(monkeypatch, tmp_path):
    monkeypatch.setenv("GEMMGEN_CACHE_DIR", str(tmp_path / "c"))
    assert cache.cache_root() == tmp_path / "c"
    for off in ("off", "OFF", "0", ""):
        monkeypatch.setenv("GEMMGEN_CACHE_DIR", off)
        assert cache.cache_root() is None and cache.shared("nvcc") is None
    monkeypatch.delenv("GEMMGEN_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_root() == tmp_path / "xdg" / "gemmgen"
    monkeypatch.setenv("GEMMGEN_CACHE_MAX_GB", "0.5")
    assert cache.max_bytes() == 500_000_000
    monkeypatch.setenv("GEMMGEN_CACHE_MAX_GB", "lots")
    assert cache.max_bytes() == int(cache.DEFAULT_MAX_GB * 1e9)


def test_an_entry_goes_in_whole_and_comes_back_anywhere(tmp_path):
    store = cache.ObjectCache(tmp_path / "cache", "g++")
    obj, report = tmp_path / "a" / "x.o", tmp_path / "a" / "x.txt"
    obj.parent.mkdir()
    obj.write_bytes(b"\x7fELF object")
    report.write_text("ptxas says")
    assert not store.fetch("ab12", {"object.o": tmp_path / "b" / "x.o"})
    store.store("ab12", {"object.o": obj, "report.txt": report})
    assert store.added
    elsewhere = {"object.o": tmp_path / "b" / "y.o", "report.txt": tmp_path / "b" / "y.txt"}
    assert store.fetch("ab12", elsewhere)
    assert elsewhere["object.o"].read_bytes() == b"\x7fELF object"
    assert elsewhere["report.txt"].read_text() == "ptxas says"
    # an entry missing a file it is asked for is no entry
    assert not store.fetch("ab12", {"object.o": tmp_path / "c.o", "other.txt": tmp_path / "c.txt"})
    assert not list((tmp_path / "cache" / "tmp").iterdir())   # nothing half written left behind


def test_trim_removes_the_least_recently_used(tmp_path):
    store = cache.ObjectCache(tmp_path / "cache", "nvcc")
    blob = tmp_path / "blob"
    blob.write_bytes(b"x" * 1000)
    for i, key in enumerate(("aa01", "bb02", "cc03")):
        store.store(key, {"object.o": blob})
        os.utime(store._entry(key), (time.time() - 100 + 10 * i,) * 2)
    assert store.fetch("aa01", {"object.o": tmp_path / "out.o"})   # used now: the newest
    assert store.trim(limit=2000) == 1000
    assert [k for k in ("aa01", "bb02", "cc03") if store._entry(k).exists()] == ["aa01", "cc03"]


def test_a_cpu_object_compiled_in_one_folder_is_not_compiled_again_in_another(monkeypatch, tmp_path):
    from gemmgen.harness.cpu import build as cpu_build

    monkeypatch.setenv("GEMMGEN_CACHE_DIR", str(tmp_path / "cache"))
    tc = cpu_build.NATIVE
    if not tc.available():
        pytest.skip("no native C++ compiler")
    for tree in ("one", "two"):
        (tmp_path / tree / "src").mkdir(parents=True)
        (tmp_path / tree / "src" / "k.cpp").write_text("int gemmgen_answer() { return 42; }\n")
    flags = ("-O2", "-fPIC")
    first = cpu_build.compile_object(tc, tmp_path / "one" / "src" / "k.cpp", tmp_path / "one" / "k.o", [], flags, b"")
    cpu_build.compiler_version(tc.cxx)            # asked once per process, before the compiler is taken away

    def no_compiler(*args, **kwargs):
        raise AssertionError(f"compiled again: {args[0]}")
    monkeypatch.setattr(subprocess, "run", no_compiler)
    second = cpu_build.compile_object(tc, tmp_path / "two" / "src" / "k.cpp", tmp_path / "two" / "k.o", [], flags, b"")
    assert second.read_bytes() == first.read_bytes()
    # another text is another key: it would compile (and here fails for want of a compiler)
    (tmp_path / "two" / "src" / "k.cpp").write_text("int gemmgen_answer() { return 43; }\n")
    with pytest.raises(AssertionError, match="compiled again"):
        cpu_build.compile_object(tc, tmp_path / "two" / "src" / "k.cpp", tmp_path / "two" / "k.o", [], flags, b"")


def test_cpu_checks_that_passed_on_an_identical_build_are_not_run_again(monkeypatch, tmp_path):
    from gemmgen.harness.core.cases import CaseResult
    from gemmgen.harness.cpu import check as cpu_check

    runs = []

    def result(passed, error=0.5):
        return CaseResult("d", 2, 2, 2, "N", "N", "strided", 3, "random", 0, error, 1.0, True, None, passed)

    outcome = [result(True), result(True, float("nan"))]
    monkeypatch.setattr(cpu_check, "run_checks",
                        lambda executor, cases, note="", prepared=None: runs.append(note) or list(outcome))
    binary = tmp_path / "lib.so"
    binary.write_bytes(b"one build")
    cases = ["case a", "case b"]
    lines = []
    first = cpu_check.checks_once(tmp_path, binary, None, cases, "avx2", echo=lines.append)
    again = cpu_check.checks_once(tmp_path, binary, None, cases, "avx2", echo=lines.append)
    assert runs == ["avx2"] and len(again) == 2 and again[0] == first[0]
    assert all(r.passed for r in again) and again[1].max_error != again[1].max_error   # NaN comes back NaN
    assert lines == ["cpu: avx2: 2 checks passed on an identical build before, not run again (--recheck runs them)"]
    cpu_check.checks_once(tmp_path, binary, None, cases, "avx2", recheck=True, echo=lines.append)
    cpu_check.checks_once(tmp_path, binary, None, cases, "neon", echo=lines.append)     # another ISA
    cpu_check.checks_once(tmp_path, binary, None, cases[:1], "avx2", echo=lines.append)   # other cases
    binary.write_bytes(b"another build")
    cpu_check.checks_once(tmp_path, binary, None, cases, "avx2", echo=lines.append)
    assert runs == ["avx2", "avx2", "neon", "avx2", "avx2"]
    outcome[:] = [result(False)]                    # a failure is never recorded: it runs every time
    binary.write_bytes(b"a broken build")
    cpu_check.checks_once(tmp_path, binary, None, cases, "avx2", echo=lines.append)
    cpu_check.checks_once(tmp_path, binary, None, cases, "avx2", echo=lines.append)
    assert runs[-2:] == ["avx2", "avx2"]
