"""Finding the compilers: nvcc on PATH, under CUDA_HOME, or from PyPI's CUDA wheels."""
from __future__ import annotations

import os
import shutil
import site
import sys
from pathlib import Path


class ToolchainError(RuntimeError):
    pass


def _wheel_candidates(tool: str = "nvcc") -> list[Path]:
    """A CUDA tool as installed by NVIDIA's PyPI wheels (cu12 layout nvidia/cuda_<x>/bin, cu13
    layout nvidia/cu13/bin), in any site-packages of this interpreter."""
    roots = list(site.getsitepackages()) + [site.getusersitepackages()] + sys.path
    found = []
    for root in roots:
        base = Path(root) / "nvidia"
        if base.is_dir():
            found.extend(sorted(base.glob(f"*/bin/{tool}")))
    return found


def find_cuobjdump() -> Path:
    """cuobjdump beside nvcc, on PATH, or from the nvidia-cuda-cuobjdump wheel (the dev extra)."""
    candidates = []
    try:
        candidates.append(find_nvcc().parent / "cuobjdump")
    except ToolchainError:
        pass
    if shutil.which("cuobjdump"):
        candidates.append(Path(shutil.which("cuobjdump")))
    candidates.extend(_wheel_candidates("cuobjdump"))
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    raise ToolchainError("cuobjdump not found; install it with: pip install -e '.[dev]'")


def find_nvcc() -> Path:
    # A toolkit's own bin/nvcc first: CMake derives the toolkit root from the compiler's
    # location, which a wrapper script on PATH (e.g. /usr/local/bin/nvcc) would hide.
    candidates: list[Path] = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(Path(os.environ[var]) / "bin" / "nvcc")
    candidates.append(Path("/usr/local/cuda/bin/nvcc"))
    on_path = shutil.which("nvcc")
    if on_path:
        candidates.append(Path(on_path))
    candidates.extend(_wheel_candidates())
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    raise ToolchainError(
        "nvcc not found on PATH, in CUDA_HOME or in PyPI's CUDA wheels; "
        "install it with: pip install -e '.[cuda-toolkit]'")


def nvcc_environment(nvcc: Path) -> dict[str, str]:
    """The environment nvcc needs: a wheel-installed nvcc finds its headers relative to itself,
    but ptxas and friends must be on PATH."""
    env = dict(os.environ)
    env["PATH"] = str(nvcc.parent) + os.pathsep + env.get("PATH", "")
    return env


def gpu_available() -> bool:
    """True when CuPy imports and sees at least one CUDA device."""
    try:
        import cupy  # noqa: F401
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def find_compute_sanitizer() -> Path:
    """compute-sanitizer beside nvcc, under CUDA_HOME, or on PATH (it ships with the CUDA toolkit,
    not with PyPI's compiler wheels)."""
    candidates: list[Path] = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(Path(os.environ[var]) / "bin" / "compute-sanitizer")
    candidates.append(Path("/usr/local/cuda/bin/compute-sanitizer"))
    try:
        candidates.append(find_nvcc().resolve().parent / "compute-sanitizer")
    except ToolchainError:
        pass
    if shutil.which("compute-sanitizer"):
        candidates.append(Path(shutil.which("compute-sanitizer")))
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    raise ToolchainError("compute-sanitizer not found beside nvcc, under CUDA_HOME or on PATH; "
                         "it comes with the CUDA toolkit")

