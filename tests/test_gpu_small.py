"""GPU checks of the small family through the C API (skipped where no GPU is present).  The full
sweep over every kernel, precision and transpose is `gemmgen check`; its record is in docs/perf/."""
import numpy as np
import pytest

from harness import check_small
from harness.api import GemmgenLibrary

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def lib(root, tmp_path_factory):
    from harness.build import build_library
    from harness.run_check import device_arch

    arch, _ = device_arch()
    build = build_library(root / "generated", root / "build" / arch, (arch,))
    assert not build.local_memory_kernels
    return GemmgenLibrary(build.library)


@pytest.mark.parametrize("prec", ["h", "hc", "s", "d", "c", "z"])
def test_every_transpose_and_interface(lib, prec):
    rng = np.random.default_rng(5)
    shapes = {prec: [(1, 1, 1), (2, 2, 2), (7, 7, 7), (16, 16, 16), (23, 23, 23), (32, 32, 32)]}
    cases = list(check_small.default_cases(shapes, rng)) + list(check_small.edge_cases([prec]))
    failed = [r for r in check_small.run_cases(lib, cases) if not r.passed]
    assert not failed, failed[:3]


def test_offsets_past_2_to_the_31(lib):
    assert check_small.check_large_stride(lib, "h").passed


def test_worker_processes_give_the_serial_results(lib):
    # Each case draws from its own stream (seed, index), so splitting the cases over processes must
    # reproduce the serial run's errors exactly, in the same order.
    rng = np.random.default_rng(6)
    cases = list(check_small.default_cases({"hc": [(5, 5, 5), (19, 19, 19)]}, rng))[:24]
    serial = check_small.run_cases(lib, cases, seed=11)
    parallel = check_small.run_cases(lib, cases, seed=11, workers=3)
    assert [r.to_json() for r in parallel] == [r.to_json() for r in serial]
    assert all(r.passed for r in serial)
