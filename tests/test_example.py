"""The example consumer vendors an emitted set with add_subdirectory and builds with CMake.  A
small regenerated set keeps this quick; the full set's compilation is test_compile's job."""
import shutil
import subprocess

import pytest
from click.testing import CliRunner

from generator.cli import main
from harness.toolchain import find_nvcc

pytestmark = pytest.mark.slow


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake not installed")
def test_example_consumer_builds(root, tmp_path):
    gen = tmp_path / "generated"
    # One tall-skinny n and the portable CPU kernels only: the folder's layout and CMake targets are
    # the same as the default set's (the full set took this test from 13 s to about 3 minutes).
    result = CliRunner().invoke(main, ["generate", "--out", str(gen), "--arch", "sm_90",
                                       "--precisions", "d", "--sizes", "2-4", "--tallskinny-n", "4",
                                       "--cpu-isa", "generic"])
    assert result.exit_code == 0, result.output
    build = tmp_path / "build"
    configure = subprocess.run(
        ["cmake", "-S", str(root / "examples" / "consumer"), "-B", str(build), f"-DGEMMGEN_DIR={gen}",
         f"-DCMAKE_CUDA_COMPILER={find_nvcc()}", "-DCMAKE_CUDA_ARCHITECTURES=90"],
        capture_output=True, text=True)
    assert configure.returncode == 0, configure.stdout[-3000:] + configure.stderr[-3000:]
    compiled = subprocess.run(["cmake", "--build", str(build), "-j", "2"], capture_output=True, text=True)
    assert compiled.returncode == 0, compiled.stdout[-3000:] + compiled.stderr[-3000:]
    program = build / "consumer"
    assert program.exists()
    ran = subprocess.run([str(program)], capture_output=True, text=True, timeout=120)
    # Without a GPU the program says so and exits 0; with one it checks its own result.
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "gemmgen" in ran.stdout or "kernel small_d_m4n4k4" in ran.stdout
