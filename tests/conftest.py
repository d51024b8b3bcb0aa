"""Shared fixtures: the repository root, and one build of the default emitted set per session."""
from __future__ import annotations

from pathlib import Path

import pytest

from harness.toolchain import gpu_available

ROOT = Path(__file__).resolve().parent.parent


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


@pytest.fixture(scope="session")
def default_set_build():
    """generated/ compiled for every architecture it was generated for (cached by content under
    build/, so a second session only relinks)."""
    import json

    from harness.build import UNITY_SOURCES, build_library

    archs = tuple(json.loads((ROOT / "generated" / "manifest.json").read_text())["archs"])
    # Host code at -O0: it only serves the argument-check tests, and it is 5 % of CI's longest step.
    return build_library(ROOT / "generated", ROOT / "build" / ("test_" + "_".join(archs)), archs,
                         unity=UNITY_SOURCES, host_optimization="-O0")
