"""The cpu family: spec rules, and every kernel of the default set built with g++ and checked against
NumPy through the AVX2 path, the portable fallback, AVX-512 (run where the CPU has it, compiled
with -Werror everywhere) and NEON (cross-compiled, run under qemu-aarch64).

The emitted set is generated into build/test_cpu/generated and compiled once per session; objects
are cached by content, so a later session only relinks."""
from __future__ import annotations

import json
import platform
import zlib
from pathlib import Path

import numpy as np
import pytest

from gemmgen.generator import cpu
from gemmgen.generator.emit import write
from gemmgen.generator.manifest import Selection, build_manifest
from gemmgen.generator.spec import SpecError
from gemmgen.harness.cpu import build as cpu_build
from gemmgen.harness.cpu import check as cpu_check

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "test_cpu"
X86 = platform.machine() in ("x86_64", "AMD64")
# g++ -Og, not -O2: five times faster on these unrolled kernels, which keeps CI on two cores under
# its limit (harness.cpu.build.DEFAULT_OPTIMIZATION); `gemmgen check` checks the -O2 build.
OPT = "-Og"


# ---- spec -----------------------------------------------------------------------------------------
def test_name_parses_back():
    spec = cpu.CpuSpec("z", 7, 5, 3, "avx2", 2, 2).validate()
    assert spec.name == "cpu_z_m7n5k3_avx2_r2x2"
    assert cpu.CpuSpec.parse(spec.name) == spec


@pytest.mark.parametrize("args, rule", [
    (("h", 4, 4, 4, "avx2", 1, 1), "precision"),
    (("d", 4, 4, 4, "sse9", 1, 1), "isa"),
    (("d", 33, 4, 4, "avx2", 1, 1), "size"),
    (("d", 4, 4, 4, "avx2", 2, 1), "tile within C"),     # m = 4 is one AVX2 vector of doubles
    (("d", 4, 4, 4, "avx2", 1, 5), "tile within C"),
    (("d", 32, 32, 32, "avx2", 4, 4), "registers"),      # 16 + 4 + 1 > 16
    (("d", 16, 16, 16, "generic", 2, 2, 1), "prefetch distance"),   # shared tiles do not prefetch
])
def test_spec_rules_are_named(args, rule):
    with pytest.raises(SpecError) as err:
        cpu.CpuSpec(*args).validate()
    assert err.value.rule == rule


def test_bad_names_are_refused():
    for name in ("cpu_d_m4n4k4_avx2", "cpu_d_m4n4k4_avx2_r9x9", "small_d_m4n4k4_dim4x4_tba1"):
        with pytest.raises(SpecError):
            cpu.CpuSpec.parse(name)


@pytest.mark.parametrize("isa", cpu.ISA_ORDER)
@pytest.mark.parametrize("prec", cpu.CPU_PRECISIONS)
def test_tiles_cover_c_exactly_once(prec, isa):
    for m, n, k in [(s, s, s) for s in range(1, 33)] + [(3, 17, 5), (32, 1, 9)]:
        spec = cpu.heuristic(prec, m, n, k, isa)
        assert cpu.CpuSpec.parse(spec.name) == spec
        covered = np.zeros((m, n), dtype=int)
        for t in spec.tiles():
            rows = (t.mr - 1) * spec.lanes + t.last
            covered[t.row:t.row + rows, t.col:t.col + t.nr] += 1
        assert (covered == 1).all(), spec.name
        assert all(s.is_valid() for s in cpu.sweep_candidates(prec, m, n, k, isa))


def test_default_selection_has_all_cpu_kernels():
    manifest = build_manifest(Selection())
    assert len(manifest.cpu_kernels) == 4 * 32 * len(cpu.ISA_ORDER)
    assert {s.isa for s in manifest.cpu_kernels} == set(cpu.ISA_ORDER)
    assert "--cpu-isa" not in Selection().command()


# ---- the built set --------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def cpu_set() -> Path:
    """The default selection emitted once (unchanged files are not rewritten, so the object cache
    holds across sessions)."""
    out = BUILD / "generated"
    write(build_manifest(Selection()), out)
    return out


@pytest.fixture(scope="session")
def shapes(cpu_set):
    return cpu_check.shapes_from_manifest(json.loads((cpu_set / "manifest.json").read_text()))


@pytest.fixture(scope="session")
def x86_lib(cpu_set):
    if not X86:
        pytest.skip("x86-64 kernels need an x86-64 machine")
    build = cpu_build.build(cpu_set, BUILD / "x86", isas=["generic", "avx2", "avx512"],
                            unity=cpu_build.UNITY_SOURCES, optimization=OPT)
    return cpu_check.CpuLibrary(build.output)


@pytest.fixture(scope="session")
def cases(shapes):
    return cpu_check.cases_for(shapes, np.random.default_rng(20261122))


def _assert_all_pass(results):
    failed = [r for r in results if not r.passed]
    assert not failed, "\n".join(cpu_check.summarize(results))


@pytest.mark.parametrize("isa", ["avx2", "generic", "avx512"])
def test_every_kernel_against_numpy(x86_lib, cases, isa):
    if not x86_lib.supports(isa):
        pytest.skip(f"this CPU has no {isa} (its sources were compiled with -Werror)")
    results = cpu_check.run_checks(cpu_check.CtypesExecutor(x86_lib, isa), cases, seed=zlib.crc32(isa.encode()) % 1000)
    assert len(results) == len(cases)
    _assert_all_pass(results)
    # The dispatch really ran that ISA's kernels.
    assert x86_lib.set_isa(isa)
    try:
        assert f"_{isa}_" in x86_lib.selected_kernel("d", 8, 8, 8)
        assert f"_{isa}_" in x86_lib.selected_kernel("z", 3, 3, 3)
    finally:
        x86_lib.set_isa("auto")


def test_kernel_list_and_isa_choice(x86_lib):
    names = x86_lib.kernel_names()
    assert len(names) == 4 * 32 * len(cpu.ISA_ORDER)
    assert all(cpu.CpuSpec.parse(n) for n in names)
    widest = "avx512" if x86_lib.supports("avx512") else "avx2" if x86_lib.supports("avx2") else "generic"
    assert x86_lib.isa() == widest
    assert not x86_lib.set_isa("neon") and not x86_lib.set_isa("bogus")
    assert x86_lib.isa() == widest


def test_large_stride(x86_lib):
    result = cpu_check.check_large_stride(x86_lib, "s")
    assert result.passed, result


def _strided(lib, p="d", ta="N", tb="N", m=4, n=4, k=4, lda=4, ldb=4, ldc=4, sa=16, sb=16, sc=16, batch=2,
             a=None, b=None, c=None, alpha=1.0, beta=0.0):
    buf = np.zeros(64, dtype=np.float64)
    ptr = buf.ctypes.data
    return lib.strided(p, ta, tb, m, n, k, alpha, ptr if a is None else a, lda, sa, ptr if b is None else b, ldb, sb,
                       beta, ptr if c is None else c, ldc, sc, batch)


def test_argument_codes(x86_lib):
    assert _strided(x86_lib, ta="X") == -1
    assert _strided(x86_lib, tb="?") == -2
    assert _strided(x86_lib, m=-1) == -3
    assert _strided(x86_lib, k=-1) == -5
    assert _strided(x86_lib, a=0) == -7
    assert _strided(x86_lib, lda=3) == -8
    assert _strided(x86_lib, ldb=2) == -11
    assert _strided(x86_lib, c=0) == -14
    assert _strided(x86_lib, ldc=3) == -15
    assert _strided(x86_lib, sc=15) == -16            # outputs of two entries would overlap
    assert _strided(x86_lib, batch=-1) == -17
    assert _strided(x86_lib, m=0, a=0, b=0, c=0) == 0   # nothing to do: no pointer is looked at
    assert _strided(x86_lib, m=0, lda=0, a=0, b=0, c=0) == -8   # lda is checked even then (reference BLAS)
    assert _strided(x86_lib, alpha=0.0, beta=1.0, a=0, b=0) == 0   # A and B are not read
    assert _strided(x86_lib, k=0, beta=1.0, a=0, b=0, c=0) == -14   # the quick return still needs C
    assert _strided(x86_lib, sa=0, sb=0) == 0   # the same A and B for every entry
    assert _strided(x86_lib, sa=-1) == -9 and _strided(x86_lib, sb=-1) == -12
    assert _strided(x86_lib, m=33, n=33, k=33, lda=33, ldb=33, ldc=33, sa=0, sb=0, sc=33 * 33,
                    batch=1) == cpu_check.NOT_GENERATED
    assert x86_lib.array("d", "N", "N", 4, 4, 4, 1.0, 0, 4, 0, 4, 0.0, 0, 4, 1) == -7
    assert x86_lib.array("d", "N", "N", 4, 4, 4, 0.0, 0, 4, 0, 4, 0.0, 0, 4, 1) == -12


def test_threads_give_the_same_bits(x86_lib):
    """The batch split over threads changes nothing in any result (each entry is computed whole by
    one thread); the first-touch helper zeroes exactly its buffer."""
    lib = x86_lib.lib
    rng = np.random.default_rng(5)
    n, batch = 8, 3001
    a, b, c0 = (rng.standard_normal(n * n * batch) for _ in range(3))
    outs = []
    for threads in (1, 2, 3):
        lib.gemmgen_cpu_set_num_threads(threads)
        c = c0.copy()
        assert x86_lib.strided("d", "N", "T", n, n, n, 1.5, a.ctypes.data, n, n * n, b.ctypes.data, n, n * n,
                               0.5, c.ctypes.data, n, n * n, batch) == 0
        outs.append(c)
    lib.gemmgen_cpu_set_num_threads(0)
    assert all(np.array_equal(outs[0], o) for o in outs[1:])
    buf = np.full(1000, 7.0)
    assert lib.gemmgen_cpu_first_touch(buf.ctypes.data, 8 * 10, 99) == 0
    assert (buf[:990] == 0).all() and (buf[990:] == 7.0).all()


def test_serial_build(cpu_set, shapes):
    """Without OpenMP the same kernels run serially (only the dispatch is recompiled)."""
    if not X86:
        pytest.skip("x86-64 only")
    build = cpu_build.build(cpu_set, BUILD / "x86", isas=["generic", "avx2", "avx512"], openmp=False,
                            output_name="libgemmgen_cpu_serial.so", unity=cpu_build.UNITY_SOURCES,
                            optimization=OPT)
    lib = cpu_check.CpuLibrary(build.output)
    assert lib.lib.gemmgen_cpu_get_num_threads() == 1
    few = {p: [s for s in v if s[0] in (3, 16, 29)] for p, v in shapes.items()}
    cases = cpu_check.cases_for(few, np.random.default_rng(9), thorough=False)
    _assert_all_pass(cpu_check.run_checks(cpu_check.CtypesExecutor(lib, "avx2" if lib.supports("avx2") else "generic"), cases))


# ---- NEON under qemu ------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def aarch64_runner(cpu_set):
    if not cpu_build.AARCH64.available():
        pytest.skip("needs aarch64-linux-gnu-g++ and qemu-aarch64 (Debian g++-aarch64-linux-gnu, qemu-user)")
    build = cpu_build.build(cpu_set, BUILD / "aarch64", cpu_build.AARCH64, isas=["generic", "neon"], link="runner",
                            unity=cpu_build.UNITY_SOURCES, optimization=OPT)
    return build.output


@pytest.fixture(scope="session")
def lean_cases(shapes):
    """One transpose pair per shape and interface: every kernel still runs, in a third of the time."""
    return cpu_check.cases_for(shapes, np.random.default_rng(20261123), thorough=False)


@pytest.mark.parametrize("isa", ["neon", "generic"])
def test_aarch64_under_qemu(aarch64_runner, cases, lean_cases, isa):
    # The portable kernels are the sources test_every_kernel_against_numpy[generic] checks in full
    # on x86; under qemu they get the lean list (CI's time), NEON the full one.
    chosen = cases if isa == "neon" else lean_cases
    executor = cpu_check.RunnerExecutor(aarch64_runner, isa, cpu_build.AARCH64.run_prefix)
    results = cpu_check.run_checks(executor, chosen, seed=7 if isa == "neon" else 8)
    assert len(results) == len(chosen)
    _assert_all_pass(results)


# ---- sanitizers -----------------------------------------------------------------------------------
# The check runner and a few shapes' kernels built with ASan and UBSan: the runner aborts on the
# first report, which fails the run.  The shapes take every code path of the kernel body: 1 and 2
# (128-bit vectors, whole 2 x 2 products, grouped ones), 3 and 5 (partial vectors), 9 (a last
# vector narrower than the tile's), 13 (op(B) held in registers, software prefetch); every ISA, the
# strided and pointer-array loops, packing, the epilogues, and the regression cases of
# harness.cpu.check (misaligned operands, the quick return of beta = 1).  The runner places A, B and
# C in allocations of exactly their size.
SANITIZED_SIZES = (1, 2, 3, 5, 9, 13)


@pytest.fixture(scope="session")
def sanitized_set() -> Path:
    out = BUILD / "sanitize" / "generated"
    write(build_manifest(Selection(sizes=SANITIZED_SIZES)), out)
    return out


@pytest.fixture(scope="session")
def sanitized_cases(sanitized_set):
    manifest = json.loads((sanitized_set / "manifest.json").read_text())
    # The same kernels as the default set's for these sizes.
    default = {s.name for s in build_manifest(Selection()).cpu_kernels}
    assert {k["name"] for k in manifest["cpu_kernels"]} <= default
    return cpu_check.cases_for(cpu_check.shapes_from_manifest(manifest), np.random.default_rng(17), thorough=False)


def _run_sanitized(runner, isas, cases, prefix=(), env=None):
    for isa in isas:
        executor = cpu_check.RunnerExecutor(runner, isa, prefix, env=env)
        try:
            results = cpu_check.run_checks(executor, cases, seed=31)
        except RuntimeError as err:   # the runner's exit code and the sanitizer's report
            pytest.fail(f"{isa}: {err}")
        _assert_all_pass(results)


def test_x86_under_sanitizers(sanitized_set, sanitized_cases):
    """AVX2 and the portable fallback run (AVX-512 too where the CPU has it; compiled always)."""
    if not X86:
        pytest.skip("x86-64 only")
    build = cpu_build.build(sanitized_set, BUILD / "sanitize" / "x86", isas=["generic", "avx2", "avx512"],
                            link="runner", extra_flags=cpu_build.SANITIZE_FLAGS, unity=cpu_build.UNITY_SOURCES,
                            optimization=OPT)
    flags = Path("/proc/cpuinfo").read_text().split() if Path("/proc/cpuinfo").exists() else []
    isas = [isa for isa, needs in (("avx2", ("avx2", "fma")), ("generic", ()), ("avx512", ("avx512f", "avx2", "fma")))
            if all(f in flags for f in needs)]
    _run_sanitized(build.output, isas, sanitized_cases)


def test_aarch64_under_sanitizers(sanitized_set, sanitized_cases):
    """NEON and the portable fallback under qemu-aarch64, ASan included (it works under qemu-user;
    only its leak checker does not, so that one is off)."""
    if not cpu_build.AARCH64.available():
        pytest.skip("needs aarch64-linux-gnu-g++ and qemu-aarch64 (Debian g++-aarch64-linux-gnu, qemu-user)")
    tc = cpu_build.aarch64_dynamic()
    build = cpu_build.build(sanitized_set, BUILD / "sanitize" / "aarch64", tc, isas=["generic", "neon"],
                            link="runner", extra_flags=cpu_build.SANITIZE_FLAGS, unity=cpu_build.UNITY_SOURCES,
                            optimization=OPT)
    _run_sanitized(build.output, ["neon", "generic"], sanitized_cases, tc.run_prefix,
                   env={"ASAN_OPTIONS": "detect_leaks=0"})


def test_tuner_stage_two_takes_the_fastest_blockings_of_each_shape():
    from gemmgen.harness.cpu.tune import _best, _fastest

    specs = [cpu.CpuSpec("d", 9, 9, 9, "avx512", mr, nr) for mr, nr in ((2, 9), (2, 8), (1, 9), (2, 5))]
    specs.append(cpu.CpuSpec("s", 4, 4, 4, "avx512", 1, 4))
    seconds = {"r2x9": 1.0, "r2x8": 1.2, "r1x9": 1.1, "r2x5": 3.0}
    measured = {s.name: (seconds[s.name.rsplit("_", 1)[1]] if s.precision == "d" else 5.0, 0.0) for s in specs}
    measured.pop(specs[2].name)   # a candidate that did not compile is not measured
    leaders = _fastest(specs, measured, 3)
    assert [s.name for s in leaders[("d", 9, 9, 9)]] == [specs[0].name, specs[1].name, specs[3].name]
    assert [s.name for s in leaders[("s", 4, 4, 4)]] == [specs[4].name]
    assert _best(specs, measured)[("d", 9, 9, 9)] == specs[0]


def test_check_of_a_set_without_s_4x4x4(tmp_path):
    """`gemmgen check`'s CPU step checks 64-bit offsets on a square the set has (it asked for s 4x4x4,
    which a d-only set does not have, and failed)."""
    from click.testing import CliRunner

    from gemmgen.cli import main
    from gemmgen.harness.cpu.check import run_cpu_check

    out = tmp_path / "gen"
    result = CliRunner().invoke(main, ["generate", "--arch", "sm_90", "--precisions", "d", "--sizes", "2",
                                       "--tallskinny-n", "", "--cpu-isa", "generic", "--out", str(out)])
    assert result.exit_code == 0, result.output
    lines = []
    assert run_cpu_check(out, tmp_path / "build", quick=True, echo=lines.append) == 0, "\n".join(lines)
    assert any(" d: " in line and " 0 failed" in line for line in lines), lines
