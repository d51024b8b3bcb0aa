"""Build an emitted set with nvcc: one object per source (in parallel, cached by content), linked
into a shared library the harness loads with ctypes.  ptxas's resource report is kept for every
kernel; spills and local memory are failures."""
from __future__ import annotations

import hashlib
import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from generator.arch import ARCHS

from .toolchain import find_nvcc, nvcc_environment


class BuildError(RuntimeError):
    pass


@dataclass(frozen=True)
class KernelResources:
    source: str
    function: str      # mangled name
    arch: str
    registers: int
    stack_bytes: int
    spill_stores: int
    spill_loads: int
    smem_bytes: int

    @property
    def uses_local_memory(self) -> bool:
        return self.stack_bytes > 0 or self.spill_stores > 0 or self.spill_loads > 0


@dataclass
class BuildResult:
    library: Path | None
    objects: list[Path]
    resources: list[KernelResources] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)   # source -> compiler message

    @property
    def local_memory_kernels(self) -> list[KernelResources]:
        return [r for r in self.resources if r.uses_local_memory]


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\d+)'")
_USED = re.compile(r"Used (\d+) registers.*?(?:(\d+) bytes smem)?")
_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_SMEM = re.compile(r"(\d+) bytes smem")


def parse_ptxas_report(source: str, text: str) -> list[KernelResources]:
    """Turn `ptxas -v` output into one record per (kernel, arch)."""
    out: list[KernelResources] = []
    current: dict | None = None
    for line in text.splitlines():
        if m := _ENTRY.search(line):
            current = {"function": m.group(1), "arch": m.group(2), "stack": 0, "ss": 0, "sl": 0,
                       "regs": 0, "smem": 0}
            continue
        if current is None:
            continue
        if m := _STACK.search(line):
            current["stack"], current["ss"], current["sl"] = (int(x) for x in m.groups())
        if "Used" in line and (m := _USED.search(line)):
            current["regs"] = int(m.group(1))
            if s := _SMEM.search(line):
                current["smem"] = int(s.group(1))
            out.append(KernelResources(source, current["function"], current["arch"], current["regs"],
                                       current["stack"], current["ss"], current["sl"], current["smem"]))
            current = None
    return out


def gencode_flags(archs: Iterable[str]) -> list[str]:
    """One PTX, for the lowest architecture, assembled into SASS for every target.  The front end
    (cicc), most of the compile time of these fully unrolled kernels, then runs once instead of
    once per architecture; ptxas still builds, and reports resources, for each target."""
    ccs = sorted({ARCHS[a].cc for a in archs})
    return ["-gencode", f"arch=compute_{ccs[0]},code=[{','.join(f'sm_{cc}' for cc in ccs)}]"]


def compile_object(nvcc: Path, source: Path, obj: Path, include_dirs: list[Path], archs: tuple[str, ...],
                   extra: tuple[str, ...] = ()) -> str:
    """Compile one source; returns ptxas's report.  Skips the work when the object is up to date
    for this exact source text and flag set."""
    flags = ["-O3", "-std=c++14", "-Xcompiler", "-fPIC", "-Xptxas", "-v", *gencode_flags(archs), *extra]
    for inc in include_dirs:
        flags += ["-I", str(inc)]
    digest = hashlib.sha256()
    digest.update(source.read_bytes())
    for inc in include_dirs:   # every header a source may include (.h and .cuh)
        for header in sorted(p for p in inc.iterdir() if p.suffix in (".h", ".cuh", ".hpp")):
            digest.update(header.read_bytes())
    digest.update(" ".join(flags).encode())
    stamp = obj.with_suffix(".sha256")
    report = obj.with_suffix(".ptxas.txt")
    key = digest.hexdigest()
    if obj.exists() and stamp.exists() and stamp.read_text() == key and report.exists():
        return report.read_text()
    obj.parent.mkdir(parents=True, exist_ok=True)
    cmd = [str(nvcc), *flags, "-c", str(source), "-o", str(obj)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=nvcc_environment(nvcc))
    if proc.returncode != 0:
        raise BuildError(f"nvcc failed on {source}:\n{proc.stderr[-4000:]}")
    report.write_text(proc.stderr)
    stamp.write_text(key)
    return proc.stderr


def build_library(generated: Path, build_dir: Path, archs: tuple[str, ...], jobs: int | None = None,
                  link: bool = True, progress: Callable[[int, int], None] | None = None,
                  sources: list[Path] | None = None, tolerate_failures: bool = False,
                  library_name: str = "libgemmgen.so") -> BuildResult:
    """Compile every .cu of an emitted set (or `sources`) and link them into one shared library.
    With tolerate_failures a source that does not compile is recorded and left out (the tuner's
    sweep goes on); otherwise it raises BuildError."""
    nvcc = find_nvcc()
    generated = generated.resolve()
    if sources is None:
        sources = sorted((generated / "src").rglob("*.cu"))
    sources = [Path(s).resolve() for s in sources]
    if not sources:
        raise BuildError(f"no CUDA sources under {generated / 'src'}; run gemmgen generate first")
    includes = [generated / "include", generated / "src"]
    jobs = jobs or os.cpu_count() or 1
    objects = [build_dir / "obj" / s.relative_to(generated).with_suffix(".o") for s in sources]
    resources: list[KernelResources] = []
    failures: dict[str, str] = {}
    built: list[Path] = []
    done = 0
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(compile_object, nvcc, s, o, includes, archs) for s, o in zip(sources, objects)]
        for source, obj, fut in zip(sources, objects, futures):
            rel = str(source.relative_to(generated))
            try:
                report = fut.result()
            except BuildError as err:
                if not tolerate_failures:
                    raise
                failures[rel] = str(err)
            else:
                resources.extend(parse_ptxas_report(rel, report))
                built.append(obj)
            done += 1
            if progress:
                progress(done, len(sources))
    library = None
    if link and built:
        library = build_dir / library_name
        cmd = [str(nvcc), "-shared", *gencode_flags(archs), "-o", str(library), *map(str, built)]
        wheel_libs = nvcc.parent.parent / "lib"   # PyPI wheel layout keeps cudart here, not in lib64
        if (wheel_libs / "libcudart_static.a").exists():
            cmd += ["-L", str(wheel_libs)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=nvcc_environment(nvcc))
        if proc.returncode != 0:
            raise BuildError(f"linking {library} failed:\n{proc.stderr[-4000:]}")
    return BuildResult(library, built, resources, failures)
