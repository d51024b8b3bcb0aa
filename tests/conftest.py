"""Shared fixtures: the repository root, and one build of the default emitted set per session."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from gemmgen.harness.core.toolchain import gpu_available

ROOT = Path(__file__).resolve().parent.parent

# The tests' builds share a cache of their own inside the checkout (build/ is ignored), not the user's
# (~/.cache/gemmgen): a test run neither fills nor reads a cache outside the tree.
os.environ.setdefault("GEMMGEN_CACHE_DIR", str(ROOT / "build" / "cache"))


def pytest_collection_modifyitems(config, items):
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU and CuPy; none present")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


def compiled_archs(archs: tuple[str, ...]) -> tuple[str, ...]:
    """The oldest and the newest of the architectures generated/ was made for.  Every code path of the
    sources (`gemmgen-code-paths`: below sm_80, sm_80 and up, sm_90a) compiles in one of them; an
    architecture between them compiles the same sm_80+ paths as the newest, and costs as much: ptxas
    on one unit of the default set took 19 s for sm_75, 36 s for sm_80 and 42 s for sm_90, and CI's
    run of 2026-11-27 took 29.5 of its 30 minutes with all three.  The README's main job (`gemmgen
    check` on a machine without a GPU) compiles the newest architecture of the manifest, and every
    one with `--arch all`, failing on local memory in any of them."""
    from gemmgen.generator.arch import ARCHS

    ordered = sorted(archs, key=lambda a: ARCHS[a].cc)
    return tuple(dict.fromkeys((ordered[0], ordered[-1])))


@pytest.fixture(scope="session")
def default_set_build():
    """generated/ compiled for the oldest and the newest architecture it was generated for
    (compiled_archs; cached by content under build/, so a second session only relinks), every nvcc
    warning an error as `gemmgen check` builds it: a warning in any source fails the build."""
    import json

    from gemmgen.harness.core.build import UNITY_SOURCES, build_library

    archs = compiled_archs(tuple(json.loads((ROOT / "generated" / "manifest.json").read_text())["archs"]))
    # Host code at -O0: it only serves the argument-check tests, and it is 5 % of CI's longest step.
    return build_library(ROOT / "generated", ROOT / "build" / ("test_" + "_".join(archs)), archs,
                         unity=UNITY_SOURCES, host_optimization="-O0", strict_warnings=True)
