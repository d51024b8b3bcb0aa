"""The example consumer vendors an emitted set with add_subdirectory and builds with CMake.  A
small regenerated set keeps this quick; the full set's compilation is test_compile's job."""
import shutil
import subprocess

import pytest
from click.testing import CliRunner

from gemmgen.cli import main
from gemmgen.harness.core.build import device_code
from gemmgen.harness.core.toolchain import find_nvcc

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
    code = device_code(program)
    if shutil.which("objcopy"):   # the kernels' machine code is compressed in the fat binary
        assert code is not None and code.raw_bytes < 100_000 and code.stored_bytes * 2 < code.expanded_bytes, code
    ran = subprocess.run([str(program)], capture_output=True, text=True, timeout=120)
    # Without a GPU the program says so and exits 0; with one it checks its own result.
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "gemmgen" in ran.stdout or "kernel small_d_m4n4k4" in ran.stdout


@pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("nm") is None, reason="cmake or nm not installed")
def test_shared_library_exports_only_the_header(tmp_path):
    """A shared build of an emitted set exports the functions gemmgen.h declares and nothing else:
    the per-kernel entry points (e.g. small_d_m2n2k2_..._strided) and internals stay hidden."""
    import re

    gen = tmp_path / "generated"
    result = CliRunner().invoke(main, ["generate", "--out", str(gen), "--arch", "sm_90", "--precisions", "d",
                                       "--sizes", "2", "--tallskinny-n", "4", "--cpu-isa", "generic"])
    assert result.exit_code == 0, result.output
    build = tmp_path / "build"
    configure = subprocess.run(
        ["cmake", "-S", str(gen), "-B", str(build), "-DGEMMGEN_SHARED=ON",
         f"-DCMAKE_CUDA_COMPILER={find_nvcc()}", "-DCMAKE_CUDA_ARCHITECTURES=90"],
        capture_output=True, text=True)
    assert configure.returncode == 0, configure.stdout[-3000:] + configure.stderr[-3000:]
    compiled = subprocess.run(["cmake", "--build", str(build), "--target", "gemmgen", "-j", "2"],
                              capture_output=True, text=True)
    assert compiled.returncode == 0, compiled.stdout[-3000:] + compiled.stderr[-3000:]
    header = (gen / "include" / "gemmgen.h").read_text()
    declared = set(re.findall(r"^GEMMGEN_API [^(]*?\b(gemmgen_\w+)\(", header, flags=re.M))
    library = next(build.glob("libgemmgen.so*"))
    nm = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True, check=True)
    exported = {line.split()[-1] for line in nm.stdout.splitlines() if line.split()[1:2] == ["T"]}
    assert {"gemmgen_dgemm_batched_strided", "gemmgen_dgemm_batched", "gemmgen_dgemm_tallskinny"} <= exported
    assert exported <= declared, sorted(exported - declared)


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake not installed")
@pytest.mark.parametrize("shared", [False, True])
def test_installed_set_is_found_by_find_package(root, tmp_path, shared):
    """cmake --install of an emitted set, then examples/consumer_installed finds it with
    find_package(gemmgen CONFIG REQUIRED) and links gemmgen::gemmgen."""
    gen, build, prefix = tmp_path / "generated", tmp_path / "build", tmp_path / "prefix"
    result = CliRunner().invoke(main, ["generate", "--out", str(gen), "--arch", "sm_90", "--precisions", "d",
                                       "--sizes", "2-4", "--tallskinny-n", "4", "--cpu-isa", "generic"])
    assert result.exit_code == 0, result.output
    nvcc = [f"-DCMAKE_CUDA_COMPILER={find_nvcc()}", "-DCMAKE_CUDA_ARCHITECTURES=90"]
    steps = [
        ["cmake", "-S", str(gen), "-B", str(build), *nvcc, f"-DGEMMGEN_SHARED={'ON' if shared else 'OFF'}"],
        ["cmake", "--build", str(build), "-j", "2"],
        ["cmake", "--install", str(build), "--prefix", str(prefix)],
        ["cmake", "-S", str(root / "examples" / "consumer_installed"), "-B", str(tmp_path / "consumer"), *nvcc,
         f"-DCMAKE_PREFIX_PATH={prefix}"],
        ["cmake", "--build", str(tmp_path / "consumer"), "-j", "2"],
    ]
    for step in steps:
        proc = subprocess.run(step, capture_output=True, text=True)
        assert proc.returncode == 0, " ".join(step) + "\n" + proc.stdout[-3000:] + proc.stderr[-3000:]
    installed = {p.relative_to(prefix).as_posix() for p in prefix.rglob("*") if p.is_file()}
    assert {"include/gemmgen.h", "include/gemmgen_cpu.h", "lib/cmake/gemmgen/gemmgenConfig.cmake",
            "lib/cmake/gemmgen/gemmgenConfigVersion.cmake"} <= {p.replace("lib64/", "lib/") for p in installed}
    ran = subprocess.run([str(tmp_path / "consumer" / "consumer")], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stdout + ran.stderr


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake not installed")
def test_cmake_builds_the_chosen_precisions_and_families(tmp_path):
    """GEMMGEN_PRECISIONS and GEMMGEN_FAMILIES leave kernels out of the CUDA library: nothing of them
    is compiled, the C API still has every function, and their shapes come back as not generated.
    An unknown name stops the configuration with a one-line reason."""
    from gemmgen.harness.core.api import GemmgenLibrary

    gen = tmp_path / "generated"
    result = CliRunner().invoke(main, ["generate", "--out", str(gen), "--arch", "sm_90", "--precisions", "s,d",
                                       "--sizes", "2,3", "--tallskinny-n", "4", "--cpu-isa", "generic"])
    assert result.exit_code == 0, result.output
    nvcc = [f"-DCMAKE_CUDA_COMPILER={find_nvcc()}", "-DCMAKE_CUDA_ARCHITECTURES=90"]
    refused = subprocess.run(["cmake", "-S", str(gen), "-B", str(tmp_path / "bad"), *nvcc, "-DGEMMGEN_PRECISIONS=d;q"],
                             capture_output=True, text=True)
    assert refused.returncode != 0
    assert "GEMMGEN_PRECISIONS: 'q' is not one of this set's: s, d" in refused.stderr
    build = tmp_path / "build"
    configure = subprocess.run(["cmake", "-S", str(gen), "-B", str(build), *nvcc, "-DGEMMGEN_SHARED=ON",
                                "-DGEMMGEN_PRECISIONS=d", "-DGEMMGEN_FAMILIES=small"], capture_output=True, text=True)
    assert configure.returncode == 0, configure.stdout[-3000:] + configure.stderr[-3000:]
    compiled = subprocess.run(["cmake", "--build", str(build), "--target", "gemmgen", "-j", "2"],
                              capture_output=True, text=True)
    assert compiled.returncode == 0, compiled.stdout[-3000:] + compiled.stderr[-3000:]
    objects = {p.name for p in build.rglob("*.o")}
    assert any(name.startswith("small_d_") for name in objects)
    assert not [name for name in objects if name.startswith(("small_s_", "tsm2_", "ism2_"))]
    lib = GemmgenLibrary(next(build.glob("libgemmgen.so*")))
    assert lib.kernel_names() and all(name.startswith("small_d_") for name in lib.kernel_names())
    assert lib.is_generated("d", 3, 3, 3) and not lib.is_generated("s", 3, 3, 3)
    assert not lib.tallskinny_is_generated("d", 4)
