"""The emitted code compiles warning-free under the flags strict projects use: every CUDA family's
device and host code with nvcc's -Werror all-warnings (a sample of the committed set, front end, for
the oldest and the newest generated architecture), and a consumer that vendors a set with CMake,
CUDA at -Werror all-warnings with ptxas's spill warnings, C++ at -Wall -Wextra -Wpedantic -Werror
under g++ (C++14) and clang++ (C++17)."""
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from click.testing import CliRunner

from gemmgen.generator.arch import code_path_tokens
from gemmgen.cli import main
from gemmgen.harness.core.toolchain import find_nvcc, nvcc_environment

pytestmark = pytest.mark.slow

STRICT_CUDA = ["-Werror", "all-warnings"]
STRICT_CXX = "-Wall -Wextra -Wpedantic -Werror"


def sample_sources(generated: Path) -> list[Path]:
    """The dispatch sources, and per family folder and precision its first and last source in name order
    (the tiniest and largest shapes: 1×1×1 and 2×2×2 kernels are where dead branches divide by zero)."""
    src = generated / "src"
    picked = [src / "gemmgen_dispatch.cu", src / "gemmgen_tallskinny_dispatch.cu"]
    for folder in sorted(p for p in src.glob("*/*") if p.is_dir() and p.parts[-2] != "cpu"):
        sources = sorted(folder.glob("*.cu"))
        picked += sources[:1] + sources[-1:]
        picked += [s for s in sources if "_m1n1k1_" in s.name or "_m2n2k2_" in s.name or "_opt1" in s.name][:3]
        # the cp.async rings (sm_80+ code): both interfaces, and blocks of fewer than 32 threads
        picked += [s for s in sources if "_aring" in s.name][:2] + [s for s in sources if "_ring" in s.name][:2]
        picked += [s for s in sources if "ring" in s.name and "_dim2x3_tba4_" in s.name][:1]
    return sorted(set(p for p in picked if p.exists()))


# Sources per translation unit of the sample (sources of one set of code paths, whatever their family:
# the emitted sources concatenate, each in its own namespace): the front end parses the headers once
# per unit rather than once per source.
SAMPLE_UNIT = 8


def test_every_family_compiles_without_warnings(root, tmp_path):
    generated = root / "generated"
    nvcc = find_nvcc()
    groups: dict[tuple, list[Path]] = {}
    for source in sample_sources(generated):
        paths = tuple(code_path_tokens(source.read_text()))
        alone = source.parent == generated / "src"   # the dispatch sources
        groups.setdefault((paths, source.name if alone else ""), []).append(source)
    jobs = []
    for (paths, _), members in sorted(groups.items()):
        sm90 = "sm_90a" if "90a" in paths else "sm_90"
        for i in range(0, len(members), SAMPLE_UNIT):
            chunk = members[i:i + SAMPLE_UNIT]
            unit = tmp_path / f"unit_{len(jobs):03d}.cu"
            unit.write_text("".join(f'#include "{m}"\n' for m in chunk))
            for arch in (sm90, "sm_75"):
                jobs.append((unit, [m.name for m in chunk], arch))

    def front_end(job):
        unit, names, arch = job
        proc = subprocess.run([str(nvcc), "-std=c++14", f"-arch={arch}", "-cuda", *STRICT_CUDA,
                               "-I", str(generated / "include"), "-I", str(generated / "src"), str(unit),
                               "-o", "/dev/null"], capture_output=True, text=True, env=nvcc_environment(nvcc))
        return names, arch, proc.returncode, proc.stderr[-1500:]

    with ThreadPoolExecutor(2) as pool:
        failed = [r for r in pool.map(front_end, jobs) if r[2] != 0]
    assert sum(len(names) for _, names, _ in jobs) > 80   # (each source for two architectures)
    assert not failed, failed[:3]


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
