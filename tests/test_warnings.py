"""The emitted code compiles warning-free under the flags strict projects use: a consumer that vendors
a set with CMake, CUDA at -Werror all-warnings with ptxas's spill warnings, C++ at -Wall -Wextra
-Wpedantic -Werror under g++ (C++14) and clang++ (C++17).  (Every CUDA source of the committed set is
compiled with -Werror all-warnings for the oldest and the newest generated architecture by the
default_set_build fixture, tests/test_compile.py.)"""
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from gemmgen.cli import main
from gemmgen.harness.core.build import STRICT_WARNINGS
from gemmgen.harness.core.toolchain import find_nvcc

pytestmark = pytest.mark.slow

STRICT_CUDA = list(STRICT_WARNINGS)
STRICT_CXX = "-Wall -Wextra -Wpedantic -Werror"


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake not installed")
@pytest.mark.parametrize("cxx, std", [("g++", 14), ("clang++", 17)])
def test_strict_consumer_builds(tmp_path, cxx, std):
    if shutil.which(cxx) is None:
        pytest.skip(f"{cxx} not installed")
    gen = tmp_path / "generated"
    # The small family from 1×1×1, TSM2 and ISM2, the portable CPU kernels, the dispatch headers.
    result = CliRunner().invoke(main, ["generate", "--out", str(gen), "--arch", "sm_90", "--precisions", "d",
                                       "--sizes", "1-4", "--tallskinny-n", "4", "--cpu-isa", "generic"])
    assert result.exit_code == 0, result.output
    build = tmp_path / "build"
    root = Path(__file__).resolve().parent.parent
    configure = subprocess.run(
        ["cmake", "-S", str(root / "examples" / "consumer"), "-B", str(build), f"-DGEMMGEN_DIR={gen}",
         f"-DCMAKE_CUDA_COMPILER={find_nvcc()}", "-DCMAKE_CUDA_ARCHITECTURES=90",
         f"-DCMAKE_CXX_COMPILER={shutil.which(cxx)}", f"-DCMAKE_CXX_STANDARD={std}",
         "-DCMAKE_CUDA_FLAGS=" + " ".join(STRICT_CUDA + ["-Xptxas", "-warn-spills", "-Xptxas", "-warn-lmem-usage"]),
         f"-DCMAKE_CXX_FLAGS={STRICT_CXX}"],
        capture_output=True, text=True)
    assert configure.returncode == 0, configure.stdout[-3000:] + configure.stderr[-3000:]
    compiled = subprocess.run(["cmake", "--build", str(build), "-j", "2"], capture_output=True, text=True)
    assert compiled.returncode == 0, compiled.stdout[-3000:] + compiled.stderr[-3000:]


@pytest.mark.parametrize("compiler, flags", [
    ("g++", ["-x", "c++", "-std=c++14"]), ("clang++", ["-x", "c++", "-std=c++17"]),
    ("gcc", ["-x", "c", "-std=c99"]), ("clang", ["-x", "c", "-std=c11"]),
])
def test_headers_compile_without_warnings_in_a_consumer(root, tmp_path, compiler, flags):
    # gemmgen_cpu.h is plain C and C++; gemmgen.h needs the CUDA runtime headers (C++ only here).
    if shutil.which(compiler) is None:
        pytest.skip(f"{compiler} not installed")
    include = root / "generated" / "include"
    nvcc = find_nvcc()
    cuda_include = next((d for d in (nvcc.parent.parent / "include", nvcc.resolve().parent.parent / "include")
                         if (d / "cuda_runtime.h").exists()), None)
    headers = ["gemmgen_cpu.h"] + (["gemmgen.h"] if "c++" in flags and cuda_include else [])
    unit = tmp_path / "unit.inc"
    unit.write_text("".join(f'#include "{h}"\n' for h in headers) + "int main(void) { return 0; }\n")
    system = ["-isystem", str(cuda_include)] if cuda_include else []
    proc = subprocess.run([compiler, *flags, *STRICT_CXX.split(), "-fsyntax-only", "-I", str(include), *system,
                           str(unit)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_a_warning_fails_the_strict_build(tmp_path):
    """What makes `gemmgen check` and the default_set_build fixture warning-free: with strict_warnings a
    source nvcc warns about (an unused device variable) does not build; without, it does."""
    from gemmgen.harness.core.build import BuildError, build_library

    source = tmp_path / "gen" / "src" / "warns.cu"
    source.parent.mkdir(parents=True)
    source.write_text('extern "C" __global__ void warns(float* x) { int unused = 3; x[0] = 1.0f; }\n')
    built = build_library(tmp_path / "gen", tmp_path / "lax", ("sm_75",), 1, sources=[source], link=False)
    assert built.objects
    with pytest.raises(BuildError, match="unused"):
        build_library(tmp_path / "gen", tmp_path / "strict", ("sm_75",), 1, sources=[source], link=False,
                      strict_warnings=True)
