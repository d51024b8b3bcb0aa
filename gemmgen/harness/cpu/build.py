"""Build the cpu family of an emitted set with g++ (or a cross g++): one object per source, in
parallel and cached by content, linked into a shared library (loaded with ctypes) or, with a
runner's main(), into an executable (run under qemu-user for a foreign architecture).

The flags are those a vendoring project would use: no -m<isa> flag, the ISA of every kernel comes
from its target pragma; -Wall -Wextra -Werror so a warning in any emitted source fails the check."""
from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from gemmgen.harness.core import cache
from gemmgen.harness.core.unity import largest_first, unity_units

HERE = Path(__file__).resolve().parent
RUNNER_SOURCE = HERE / "cpu_runner.cpp"

# What a vendoring project builds with.  The test suite compiles with -Og instead: these fully
# unrolled kernels take g++ about five times longer at -O2 (AVX2 units 30 s -> 6 s, NEON 46 s -> 9 s),
# which CI on two cores cannot afford; `gemmgen check` still builds and checks them at -O2.
DEFAULT_OPTIMIZATION = "-O2"


def compile_flags(optimization: str = DEFAULT_OPTIMIZATION) -> tuple[str, ...]:
    return ("-std=c++14", optimization, "-Wall", "-Wextra", "-Werror", "-fPIC")

# Kernel sources per translation unit when a whole set is built (the checks and the tests; the
# benchmark builds one unit per kernel, as a vendoring project does): the headers are parsed once
# per 8 kernels, and about 50 units per ISA group keep both cores of a small machine busy.
UNITY_SOURCES = 8


class CpuBuildError(RuntimeError):
    pass


@dataclass(frozen=True)
class Toolchain:
    """A C++ compiler and how to run what it builds (qemu for a foreign architecture)."""
    name: str
    cxx: str
    run_prefix: tuple[str, ...] = ()
    static: bool = False       # link executables statically (no target sysroot for qemu)

    def available(self) -> bool:
        return shutil.which(self.cxx) is not None and all(shutil.which(p) for p in self.run_prefix[:1])


NATIVE = Toolchain("native", os.environ.get("CXX", "g++"))
AARCH64 = Toolchain("aarch64", "aarch64-linux-gnu-g++", ("qemu-aarch64",), static=True)

# Sanitizer builds: the flags of every compile and link (the runner aborts on the first report).
# No -g: UBSan's reports carry their source lines without it, and it doubles the compile time.
SANITIZE_FLAGS = ("-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer")


def aarch64_dynamic() -> Toolchain:
    """AArch64 linked against the cross sysroot's shared libraries and run by qemu-aarch64 -L
    <sysroot>: the sanitizer runtimes cannot be linked statically (g++ refuses -static with
    -fsanitize=address)."""
    libc = subprocess.run([AARCH64.cxx, "-print-file-name=libc.so.6"], capture_output=True, text=True).stdout.strip()
    sysroot = Path(libc).resolve().parent.parent
    return Toolchain("aarch64-dynamic", AARCH64.cxx, ("qemu-aarch64", "-L", str(sysroot)))


@dataclass
class CpuBuild:
    output: Path | None
    objects: list[Path] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)


def cpu_sources(generated: Path, isas: Iterable[str] | None = None) -> list[Path]:
    """The kernel sources of the set (optionally of some ISAs) plus the dispatch source."""
    root = generated / "src" / "cpu"
    if not root.is_dir():
        raise CpuBuildError(f"no CPU sources under {root}; run gemmgen generate first")
    wanted = set(isas) if isas is not None else None
    kernels = [s for s in sorted(root.rglob("*.cpp")) if s.parent.parent.parent == root
               and (wanted is None or s.parent.parent.name in wanted)]
    return [root / "gemmgen_cpu_dispatch.cpp", *kernels]


def _headers_digest(generated: Path) -> bytes:
    h = hashlib.sha256()
    for header in sorted([*(generated / "src" / "cpu").glob("*.h"), *(generated / "include").glob("*.h")]):
        h.update(header.name.encode())
        h.update(header.read_bytes())
    return h.digest()


@functools.lru_cache(maxsize=None)
def compiler_version(cxx: str) -> str:
    """`g++ --version`: part of every object's key, so another compiler rebuilds everything."""
    return subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout.strip()


def compile_object(tc: Toolchain, source: Path, obj: Path, includes: list[Path], flags: tuple[str, ...],
                   headers: bytes, members: tuple[Path, ...] = ()) -> Path:
    """Compile one source (a unity unit: `members` are the sources it includes, hashed for the
    cache); skipped when the object is up to date, copied from the shared cache (core.cache) where
    an earlier build compiled the same.  The key hashes the compiler's version, the flags, the
    headers and the sources by name and text, no path (a unity unit includes its members by path:
    the members are hashed instead of it)."""
    digest = hashlib.sha256(headers)
    digest.update(compiler_version(tc.cxx).encode())
    for part in members or (source,):
        digest.update(part.name.encode())
        digest.update(part.read_bytes())
    digest.update(" ".join((tc.cxx, *flags)).encode())
    key = digest.hexdigest()
    stamp = obj.with_suffix(".sha256")
    if obj.exists() and stamp.exists() and stamp.read_text() == key:
        return obj
    shared = cache.shared(Path(tc.cxx).name)
    if shared is not None and shared.fetch(key, {"object.o": obj}):
        stamp.write_text(key)
        return obj
    obj.parent.mkdir(parents=True, exist_ok=True)
    cmd = [tc.cxx, *flags, *(f"-I{i}" for i in includes), "-c", str(source), "-o", str(obj)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise CpuBuildError(f"{tc.cxx} failed on {source}:\n{proc.stderr[-4000:]}")
    stamp.write_text(key)
    if shared is not None:
        shared.store(key, {"object.o": obj})
    return obj


class PendingBuild:
    """A build whose compiles are submitted to a pool: result() waits for them and links.  Two
    builds sharing one pool (the native library and the AArch64 runner of `gemmgen check`) keep the
    cores busy across both, and the first can be used while the second still compiles."""

    def __init__(self, generated: Path, futures: list[tuple[Path, Future]],
                 link: Callable[[list[Path]], Path | None], tolerate_failures: bool):
        self.generated, self.futures, self.link, self.tolerate_failures = generated, futures, link, tolerate_failures
        self._result: CpuBuild | None = None

    def result(self) -> CpuBuild:
        if self._result is None:
            built, failures = [], {}
            for source, fut in self.futures:   # objects link in list order
                try:
                    built.append(fut.result())
                except CpuBuildError as err:
                    if not self.tolerate_failures:
                        raise
                    failures[str(source.relative_to(self.generated))] = str(err)
            self._result = CpuBuild(self.link(built) if built else None, built, failures)
        return self._result


def build(generated: Path, build_dir: Path, tc: Toolchain = NATIVE, *, jobs: int | None = None,
          **options) -> CpuBuild:
    """Compile (jobs compiles at a time, default: all cores) and link; the options are start_build's."""
    with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
        return start_build(generated, build_dir, tc, pool=pool, **options).result()


def start_build(generated: Path, build_dir: Path, tc: Toolchain = NATIVE, *, pool: Executor,
                isas: Iterable[str] | None = None, sources: list[Path] | None = None, openmp: bool = True,
                link: str = "shared", extra_flags: tuple[str, ...] = (), tolerate_failures: bool = False,
                output_name: str | None = None, unity: int = 0,
                optimization: str = DEFAULT_OPTIMIZATION) -> PendingBuild:
    """Submit the compiles to `pool` (largest unit first) and return the build, linked by its
    result().  link: "shared" (lib for ctypes), "runner" (the check runner executable),
    or "none" (compile only, e.g. AVX-512 sources with -Werror on a machine that cannot run them).
    unity > 0 compiles the kernel sources of each ISA and precision in units of that many
    (harness.core.unity); a sweep that tolerates failures keeps one source per compile.  optimization:
    g++'s -O flag (the tests use -Og, see DEFAULT_OPTIMIZATION).  extra_flags go to every compile
    and link (e.g. -fsanitize=..., which both need)."""
    if link not in ("shared", "runner", "none"):
        raise ValueError(f"link must be shared, runner or none, not {link!r}")
    generated = generated.resolve()
    build_dir = build_dir.resolve()
    sources = sources if sources is not None else cpu_sources(generated, isas)
    members: dict[Path, tuple[Path, ...]] = {s: () for s in sources}
    if unity > 0 and not tolerate_failures:
        kernels_root = generated / "src" / "cpu"

        def group(source: Path) -> str | None:   # src/cpu/<isa>/<precision>/<kernel>.cpp
            folder = source.parent.relative_to(kernels_root) if source.is_relative_to(kernels_root) else None
            return "_".join(folder.parts) if folder is not None and len(folder.parts) == 2 else None
        members = unity_units(sources, group, build_dir / "unity", unity, ".cpp")
        sources = list(members)
    includes = [generated / "include", generated / "src" / "cpu"]
    flags = compile_flags(optimization) + extra_flags
    # Only the dispatch (and the runner) has OpenMP pragmas: the kernels' objects are the same for
    # the threaded and the serial build, and a serial build only recompiles the dispatch.
    omp_flags = flags + (("-fopenmp",) if openmp else ())
    headers = _headers_digest(generated)
    objects = []
    for s in sources:
        rel = (s.relative_to(generated) if s.is_relative_to(generated) else s.relative_to(build_dir)).with_suffix(".o")
        if s.name == "gemmgen_cpu_dispatch.cpp":
            rel = rel.with_name(f"gemmgen_cpu_dispatch{'_omp' if openmp else '_serial'}.o")
        objects.append(build_dir / "obj" / rel)
    object_of = dict(zip(sources, objects))
    futures = {s: pool.submit(compile_object, tc, s, object_of[s], includes,
                              omp_flags if s.name == "gemmgen_cpu_dispatch.cpp" else flags, headers, members[s])
               for s in largest_first(members)}
    link_flags = (*extra_flags, *(("-fopenmp",) if openmp else ()))

    def link_objects(built: list[Path]) -> Path | None:
        if link == "none":
            return None
        if link == "shared":
            out = build_dir / (output_name or "libgemmgen_cpu.so")
            cmd = [tc.cxx, "-shared", *link_flags, "-o", str(out), *map(str, built)]
        else:
            runner = compile_object(tc, RUNNER_SOURCE, build_dir / "obj" / "cpu_runner.o", includes, omp_flags, headers)
            out = build_dir / (output_name or "gemmgen_cpu_runner")
            cmd = [tc.cxx, *(("-static",) if tc.static else ()), *link_flags, "-o", str(out), str(runner),
                   *map(str, built)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise CpuBuildError(f"linking {out} failed:\n{proc.stderr[-4000:]}")
        return out
    return PendingBuild(generated, [(s, futures[s]) for s in sources], link_objects, tolerate_failures)
