"""GPU checks of the small family through the C API (skipped where no GPU is present).  The full
sweep over every kernel, precision and transpose is `gemmgen check`; its record is in docs/perf/."""
import os
import subprocess
import sys

import numpy as np
import pytest

from gemmgen.harness.core import cases as check_cases
from gemmgen.harness.core.api import GemmgenLibrary

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def lib(root, tmp_path_factory):
    from gemmgen.harness.core.build import build_library
    from gemmgen.harness.check import device_arch

    arch, _ = device_arch()
    build = build_library(root / "generated", root / "build" / arch, (arch,))
    assert not build.local_memory_kernels
    return GemmgenLibrary(build.library)


@pytest.mark.parametrize("prec", ["h", "hc", "s", "d", "c", "z"])
def test_every_transpose_and_interface(lib, prec):
    rng = np.random.default_rng(5)
    shapes = {prec: [(1, 1, 1), (2, 2, 2), (7, 7, 7), (16, 16, 16), (23, 23, 23), (32, 32, 32)]}
    cases = list(check_cases.default_cases(shapes, rng)) + list(check_cases.edge_cases([prec]))
    failed = [r for r in check_cases.run_cases(lib, cases) if not r.passed]
    assert not failed, failed[:3]


def test_offsets_past_2_to_the_31(lib):
    assert check_cases.check_large_stride(lib, "h").passed


def test_worker_processes_give_the_serial_results(lib):
    # Each case draws from its own stream (seed, index), so splitting the cases over processes must
    # reproduce the serial run's errors exactly, in the same order.
    rng = np.random.default_rng(6)
    cases = list(check_cases.default_cases({"hc": [(5, 5, 5), (19, 19, 19)]}, rng))[:24]
    serial = check_cases.run_cases(lib, cases, seed=11)
    parallel = check_cases.run_cases(lib, cases, seed=11, workers=3)
    assert [r.to_json() for r in parallel] == [r.to_json() for r in serial]
    assert all(r.passed for r in serial)


def test_exact_buffers_and_the_beta_one_quick_return(lib, monkeypatch):
    # Each operand in an allocation that ends at its last element (what `check --sanitize` runs), C with
    # Inf and beta = 1 where alpha or k is 0: results right, C untouched bit for bit.
    from gemmgen.harness import sanitize

    monkeypatch.setenv(check_cases.EXACT_BUFFERS_ENV, "1")
    failed = [r for r in check_cases.run_cases(lib, sanitize.regression_cases()) if not r.passed]
    assert not failed, failed[:3]


def test_memcheck_and_racecheck_clean_on_the_regression_cases(lib, root, tmp_path):
    # The over-read that compute-sanitizer found (16-byte cp.async chunks past a pointer array's last
    # matrix) and any shared-memory hazard on the same kernels, under the real sanitizer.
    from gemmgen.harness import sanitize
    from gemmgen.harness.core.toolchain import ToolchainError, find_compute_sanitizer

    try:
        tool = find_compute_sanitizer()
    except ToolchainError as err:
        pytest.skip(str(err))
    for name in ("memcheck", "racecheck"):
        log = tmp_path / f"{name}.log"
        proc = subprocess.run([str(tool), "--tool", name, *sanitize.TOOL_FLAGS[name], "--error-exitcode", "86",
                               "--log-file", str(log), sys.executable, "-m", "gemmgen.harness.sanitize", "--regression",
                               "--library", str(lib.path), "--generated", str(root / "generated"),
                               "--counts", str(tmp_path / "counts.json")],
                              cwd=root, env=dict(os.environ, **{check_cases.EXACT_BUFFERS_ENV: "1"}))
        errors, warnings, reports = sanitize.parse_log(log.read_text())
        assert proc.returncode == 0 and errors == 0 and warnings == 0, reports[:5]
