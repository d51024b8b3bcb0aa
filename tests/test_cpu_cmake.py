"""The CPU kernels as a C++ project uses them: an emitted set added with CMake's add_subdirectory,
the target gemmgen::cpu linked, no CUDA compiler involved (the generated CMakeLists.txt then builds
the CPU library only), and a small C++ program that calls gemmgen_cpu_dgemm_batched_strided and
checks every result against a plain loop.  A small emitted set keeps the build quick; every kernel
of the default set is checked by test_cpu.py."""
from __future__ import annotations

import re
import shutil
import subprocess
import textwrap

import pytest
from click.testing import CliRunner

from gemmgen.cli import main

CONSUMER_CMAKE = """\
cmake_minimum_required(VERSION 3.18)
project(gemmgen_cpu_consumer LANGUAGES CXX)
add_subdirectory(${GEMMGEN_DIR} gemmgen)
add_executable(cpu_consumer main.cpp)
target_link_libraries(cpu_consumer PRIVATE gemmgen::cpu)
"""

# Three calls: the common C += A·B (alpha = beta = 1, strided, op(A) = A), a general one with both
# operands transposed, alpha = 0.5, beta = -2 and padded leading dimensions, and a shape that was
# not generated (GEMMGEN_NOT_GENERATED, C untouched).
CONSUMER_MAIN = r"""
#include <gemmgen_cpu.h>

#include <cmath>
#include <cstdio>
#include <vector>

static int check(char ta, char tb, int n, int lda, int ldb, int ldc, double alpha, double beta, int batch)
{
    const long long sa = (long long)lda * n, sb = (long long)ldb * n, sc = (long long)ldc * n;
    std::vector<double> a(sa * batch), b(sb * batch), c(sc * batch), ref;
    for (size_t i = 0; i < a.size(); ++i) a[i] = std::sin(0.7 * i);
    for (size_t i = 0; i < b.size(); ++i) b[i] = std::cos(0.3 * i);
    for (size_t i = 0; i < c.size(); ++i) c[i] = std::sin(1.3 * i + 0.5);
    ref = c;
    const int rc = gemmgen_cpu_dgemm_batched_strided(ta, tb, n, n, n, alpha, a.data(), lda, sa, b.data(), ldb, sb,
                                                     beta, c.data(), ldc, sc, batch);
    if (rc != 0) {
        std::printf("%c%c n=%d: return code %d\n", ta, tb, n, rc);
        return 1;
    }
    double worst = 0.0;
    for (int e = 0; e < batch; ++e) {
        const double* A = a.data() + e * sa;
        const double* B = b.data() + e * sb;
        for (int j = 0; j < n; ++j)
            for (int i = 0; i < n; ++i) {   // rows n..ldc-1 are padding: they must come back untouched
                double& r = ref[e * sc + i + (long long)j * ldc];
                double s = 0.0;
                for (int l = 0; l < n; ++l)
                    s += (ta == 'N' ? A[i + l * lda] : A[l + i * lda]) * (tb == 'N' ? B[l + j * ldb] : B[j + l * ldb]);
                r = alpha * s + beta * r;
            }
    }
    for (size_t i = 0; i < c.size(); ++i)
        worst = std::fmax(worst, std::fabs(c[i] - ref[i]));
    std::printf("%c%c n=%d alpha=%g beta=%g batch=%d kernel %s: max |error| %.3g\n", ta, tb, n, alpha, beta, batch,
                gemmgen_cpu_selected_kernel("d", n, n, n), worst);
    return worst <= 1e-12 * n ? 0 : 1;
}

int main()
{
    std::printf("gemmgen %s, CPU ISA %s\n", GEMMGEN_CPU_VERSION, gemmgen_cpu_isa());
    int failures = check('N', 'N', 4, 4, 4, 4, 1.0, 1.0, 1000) + check('T', 'T', 3, 5, 4, 6, 0.5, -2.0, 999);
    std::vector<double> x(25, 1.0), y(25, 1.0), z(25, 7.0);
    const int rc = gemmgen_cpu_dgemm_batched_strided('N', 'N', 5, 5, 5, 1.0, x.data(), 5, 25, y.data(), 5, 25, 1.0,
                                                     z.data(), 5, 25, 1);
    if (rc != GEMMGEN_NOT_GENERATED || z[0] != 7.0) {
        std::printf("5x5x5 was not generated: expected GEMMGEN_NOT_GENERATED, got %d\n", rc);
        ++failures;
    }
    std::printf(failures ? "FAILED\n" : "OK\n");
    return failures;
}
"""


def exported_symbols(library) -> set[str]:
    """The functions and objects a shared library exports (nm -D --defined-only)."""
    listed = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True, check=True)
    return {line.split()[-1] for line in listed.stdout.splitlines() if line.split()[-2:-1] != ["A"]}


def declared_functions(header) -> set[str]:
    """The functions gemmgen_cpu.h declares: the documented API."""
    return set(re.findall(r"\b(gemmgen_cpu_\w+)\(", header.read_text()))


@pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("g++") is None, reason="cmake or g++ missing")
@pytest.mark.parametrize("shared", [False, True], ids=["static", "shared"])
def test_cpu_library_builds_with_cmake_and_computes(tmp_path, shared):
    """Static and shared builds; the shared library exports exactly the functions of gemmgen_cpu.h."""
    gen = tmp_path / "generated"
    result = CliRunner().invoke(main, ["generate", "--out", str(gen), "--arch", "sm_90", "--precisions", "d",
                                       "--sizes", "3,4", "--cpu-isa", "avx2,neon"])
    assert result.exit_code == 0, result.output
    consumer = tmp_path / "consumer"
    consumer.mkdir()
    (consumer / "CMakeLists.txt").write_text(CONSUMER_CMAKE)
    (consumer / "main.cpp").write_text(textwrap.dedent(CONSUMER_MAIN))
    build = tmp_path / "build"
    # CMAKE_CUDA_COMPILER preset to NOTFOUND: check_language(CUDA) is skipped, so the emitted
    # CMakeLists.txt builds gemmgen::cpu alone even where nvcc is installed.
    configure = subprocess.run(
        ["cmake", "-S", str(consumer), "-B", str(build), f"-DGEMMGEN_DIR={gen}", "-DCMAKE_BUILD_TYPE=Release",
         "-DCMAKE_CUDA_COMPILER=NOTFOUND", f"-DGEMMGEN_SHARED={'ON' if shared else 'OFF'}"],
        capture_output=True, text=True)
    assert configure.returncode == 0, configure.stdout[-3000:] + configure.stderr[-3000:]
    assert "building the CPU kernels only" in configure.stdout
    compiled = subprocess.run(["cmake", "--build", str(build), "-j", "2"], capture_output=True, text=True)
    assert compiled.returncode == 0, compiled.stdout[-3000:] + compiled.stderr[-3000:]
    assert not list(build.rglob("*.cu.o")), "a CUDA source was compiled"
    ran = subprocess.run([str(build / "cpu_consumer")], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert ran.stdout.rstrip().endswith("OK"), ran.stdout
    if shared and shutil.which("nm"):
        library = next(build.rglob("libgemmgen_cpu.so"))
        api = declared_functions(gen / "include" / "gemmgen_cpu.h")
        assert "gemmgen_cpu_dgemm_batched_strided" in api
        assert exported_symbols(library) == api
