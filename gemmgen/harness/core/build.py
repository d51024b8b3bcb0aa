"""Build an emitted set with nvcc: one object per source (in parallel, cached by content), linked
into a shared library the harness loads with ctypes.  ptxas's resource report is kept for every
kernel; spills and local memory are failures."""
from __future__ import annotations

import functools
import hashlib
import os
import re
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from gemmgen.generator.arch import ARCHS, code_path_tokens
from gemmgen.generator.emit import BAND_MACROS
from gemmgen.generator.manifest import BAND_SPLIT_CC, BELOW, FROM, builds_on, kernel_bands

from gemmgen.harness.core import busy, cache
from gemmgen.harness.core.toolchain import find_nvcc, nvcc_environment
from gemmgen.harness.core.unity import largest_first, unity_units


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
    units: dict[str, list[str]] = field(default_factory=dict)  # unity source -> the sources it holds

    @property
    def local_memory_kernels(self) -> list[KernelResources]:
        return [r for r in self.resources if r.uses_local_memory]


# The target as ptxas names it: sm_90, or sm_90a for code built from compute_90a (a source's `90a` path)
_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\d+a?)'")
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


# Sources per translation unit when a whole emitted set is built (gemmgen check, the tests): 16
# keeps about 40 units for the default set, enough to keep every core busy to the end.
UNITY_SOURCES = 16

def code_paths(source_text: str) -> tuple[int, ...]:
    """The compute capabilities at which a source's device code changes."""
    return tuple(sorted(int(x.rstrip("a")) for x in code_path_tokens(source_text)))


def arch_specific_paths(source_text: str) -> tuple[int, ...]:
    """The code paths written with an `a` (`90a`): code there uses instructions of that exact
    architecture (wgmma: sm_90a), so it is compiled from compute_90a PTX into sm_90a code."""
    return tuple(sorted(int(x[:-1]) for x in code_path_tokens(source_text) if x.endswith("a")))


def gencode_flags(archs: Iterable[str], paths: tuple[int, ...] = (), specific: tuple[int, ...] = ()) -> list[str]:
    """One PTX per code path, for the lowest target architecture on it, assembled into SASS for
    every target on that path.  The front end (cicc), most of the compile time of these fully
    unrolled kernels, then runs once per code path instead of once per architecture; ptxas still
    builds, and reports resources, for each target.  `paths` are the capabilities where the code
    changes (a cp.async ring: 80), so sm_80 and sm_90 get the cp.async PTX, as CMake builds them.
    `specific`: paths of arch-specific code (90: wgmma), whose band is that one architecture's
    compute_90a -> sm_90a."""
    ccs = sorted({ARCHS[a].cc for a in archs})
    bands: dict[int, list[int]] = {}
    for cc in ccs:
        bands.setdefault(sum(cc >= p for p in paths), []).append(cc)
    flags: list[str] = []
    for band in bands.values():
        if band[0] in specific and band[0] in paths:   # the path starts a band of its own
            flags += ["-gencode", f"arch=compute_{band[0]}a,code=[sm_{band[0]}a]"]
            band = band[1:]
            if not band:
                continue
        flags += ["-gencode", f"arch=compute_{band[0]},code=[{','.join(f'sm_{cc}' for cc in band)}]"]
    return flags


@functools.lru_cache(maxsize=None)
def compiler_version(nvcc: Path) -> str:
    """`nvcc --version`: part of every object's cache key, so a new toolkit rebuilds everything."""
    proc = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, env=nvcc_environment(nvcc))
    return proc.stdout.strip()


_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)


def included_headers(texts: Iterable[str], include_dirs: list[Path]) -> list[Path]:
    """The headers of include_dirs that these texts include, directly or through one another, in a
    fixed order.  Every #include "..." counts, whatever #if surrounds it (a superset is safe); the
    toolkit's own headers (<...>) are the compiler's version's business."""
    found: dict[str, Path] = {}
    pending = [name for text in texts for name in _INCLUDE.findall(text)]
    while pending:
        name = pending.pop()
        if name in found:
            continue
        for inc in include_dirs:
            if (inc / name).is_file():
                found[name] = inc / name
                pending += _INCLUDE.findall(found[name].read_text())
                break
    return [found[name] for name in sorted(found)]


def object_key(compiler: str, flags: list[str], source: Path, include_dirs: list[Path],
               members: tuple[Path, ...] = ()) -> str:
    """The cache key of one object: the compiler's version, the flags, the source (and a unity
    source's members, in order: the unit itself only #includes them by absolute path) and the
    headers it includes, by name and content.  No path enters it, so a build folder carried to
    another checkout or machine with the same toolkit is reused there, and a changed header
    rebuilds only the sources that include it."""
    digest = hashlib.sha256(compiler.encode())
    parts = members or (source,)
    for part in parts:
        digest.update(part.name.encode())
        digest.update(part.read_bytes())
    for header in included_headers((p.read_text() for p in parts), include_dirs):
        digest.update(header.name.encode())
        digest.update(header.read_bytes())
    digest.update(" ".join(flags).encode())
    return digest.hexdigest()


def compile_object(nvcc: Path, source: Path, obj: Path, include_dirs: list[Path], archs: tuple[str, ...],
                   extra: tuple[str, ...] = (), members: tuple[Path, ...] = (), host_optimization: str = "-O3") -> str:
    """Compile one source; returns ptxas's report.  Skips the work when the object is up to date
    (object_key).  `members`: the sources a unity source includes (their text decides the flags
    and the cache key).  host_optimization: nvcc's -O, which applies to the host code only (the
    device code is compiled at full optimization either way)."""
    texts = [p.read_text() for p in (members or (source,))]
    paths = tuple(sorted({cc for t in texts for cc in code_paths(t)}))
    specific = tuple(sorted({cc for t in texts for cc in arch_specific_paths(t)}))
    flags = [host_optimization, "-std=c++14", "-Xcompiler", "-fPIC", "-Xptxas", "-v", *gencode_flags(archs, paths, specific),
             *extra]
    key = object_key(compiler_version(nvcc), flags, source, include_dirs, members)
    for inc in include_dirs:
        flags += ["-I", str(inc)]
    stamp = obj.with_suffix(".sha256")
    report = obj.with_suffix(".ptxas.txt")
    if obj.exists() and stamp.exists() and stamp.read_text() == key and report.exists():
        return report.read_text()
    shared = cache.shared("nvcc")
    entry = {"object.o": obj, "ptxas.txt": report}
    if shared is not None and shared.fetch(key, entry):
        write_atomically(stamp, key)
        return report.read_text()
    obj.parent.mkdir(parents=True, exist_ok=True)
    # nvcc writes to a name of this process's own and the object, report and stamp are renamed into
    # place, the stamp last: workers of `gemmgen tune --gpus` share one build folder, and a reader
    # never sees half an object, nor a stamp whose object is not yet there.
    partial = obj.with_name(f".{obj.stem}.{os.getpid()}.{threading.get_ident()}{obj.suffix}")
    cmd = [str(nvcc), *flags, "-c", str(source), "-o", str(partial)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=nvcc_environment(nvcc))
    if proc.returncode != 0:
        partial.unlink(missing_ok=True)
        raise BuildError(f"nvcc failed on {source}:\n{proc.stderr[-4000:]}")
    partial.replace(obj)
    write_atomically(report, proc.stderr)
    write_atomically(stamp, key)
    if shared is not None:
        shared.store(key, entry)
    return proc.stderr


def write_atomically(path: Path, text: str) -> None:
    """Write `path` through a name of this process and thread, then rename it into place: a reader
    (another worker's nvcc, its cache check) sees the old text or the new, never a part."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    partial.write_text(text)
    partial.replace(path)


def write_if_changed(path: Path, text: str) -> None:
    """A source or header of a build, written (atomically) only where its text changed, so that an
    unchanged file keeps its object cached and a worker compiling beside this one never reads it
    half written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        write_atomically(path, text)


@busy.counted("compiling")
def set_bands(generated: Path) -> dict[str, str]:
    """manifest.kernel_bands of an emitted set, by kernel (= source stem); empty without a manifest."""
    import json

    path = generated / "manifest.json"
    return kernel_bands(json.loads(path.read_text())["dispatch"]) if path.exists() else {}


def band_definitions(archs: Iterable[str]) -> tuple[str, ...]:
    """-D flags that tell the dispatch which side of sm_80 a build has no architecture on."""
    ccs = [ARCHS[a].cc for a in archs]
    sides = {BELOW: any(cc < BAND_SPLIT_CC for cc in ccs), FROM: any(cc >= BAND_SPLIT_CC for cc in ccs)}
    return tuple(f"-D{BAND_MACROS[band]}=0" for band, present in sides.items() if not present)


def build_library(generated: Path, build_dir: Path, archs: tuple[str, ...], jobs: int | None = None,
                  link: bool = True, progress: Callable[[int, int], None] | None = None,
                  sources: list[Path] | None = None, tolerate_failures: bool = False,
                  library_name: str = "libgemmgen.so", unity: int = 0, host_optimization: str = "-O3") -> BuildResult:
    """Compile every .cu of an emitted set (or `sources`) and link them into one shared library.
    With tolerate_failures a source that does not compile is recorded and left out (the tuner's
    sweep goes on); otherwise it raises BuildError.  unity > 0 compiles the per-variant sources in
    units of that many (harness.core.unity; the default set then builds in about 60 % of the time);
    resources then name the unit, and `units` lists what each unit holds.  A sweep that tolerates
    failures keeps one source per compile."""
    nvcc = find_nvcc()
    generated = generated.resolve()
    if sources is None:
        sources = sorted((generated / "src").rglob("*.cu"))
    sources = [Path(s).resolve() for s in sources]
    if not sources:
        raise BuildError(f"no CUDA sources under {generated / 'src'}; run gemmgen generate first")
    includes = [generated / "include", generated / "src"]
    jobs = jobs or os.cpu_count() or 1
    # Kernels only devices on one side of sm_80 run are built for the architectures on that side alone
    # (none there: left out, and the dispatch's entries for them with them), as CMake builds them.
    bands = set_bands(generated)
    source_archs = {s: tuple(a for a in archs if builds_on(bands.get(s.stem), ARCHS[a].cc)) for s in sources}
    sources = [s for s in sources if source_archs[s]]
    extra = band_definitions(archs)
    if unity > 0 and not tolerate_failures:
        def group(source: Path) -> str | None:
            # one family per folder (family/precision) and code path; the dispatch tables,
            # directly under src/, stay alone
            if not source.is_relative_to(generated / "src"):
                return None
            folder = source.parent.relative_to(generated / "src")
            if not folder.parts:
                return None
            return ("_".join(folder.parts) + "".join(f"_p{t}" for t in code_path_tokens(source.read_text()))
                    + (f"_{bands[source.stem]}{BAND_SPLIT_CC}" if source.stem in bands else ""))
        units = unity_units(sources, group, build_dir / "unity", unity, ".cu")
    else:
        units = {s: () for s in sources}

    def name(source: Path) -> str:
        return str(source.relative_to(generated if source.is_relative_to(generated) else build_dir))

    def object_path(source: Path) -> Path:
        return build_dir / "obj" / Path(name(source)).with_suffix(".o")

    order = largest_first(units)
    resources: list[KernelResources] = []
    failures: dict[str, str] = {}
    built: list[Path] = []
    done = 0
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(compile_object, nvcc, u, object_path(u), includes,
                               source_archs[(units[u] or (u,))[0]], extra, units[u], host_optimization)
                   for u in order]
        for unit, fut in zip(order, futures):
            rel = name(unit)
            try:
                report = fut.result()
            except BuildError as err:
                if not tolerate_failures:
                    raise
                failures[rel] = str(err)
            else:
                resources.extend(parse_ptxas_report(rel, report))
                built.append(object_path(unit))
            done += 1
            if progress:
                progress(done, len(order))
    shared = cache.shared("nvcc")
    if shared is not None and shared.root.is_dir():
        shared.trim()
    library = None
    if link and built:
        library = build_dir / library_name
        cmd = [str(nvcc), "-shared", *gencode_flags(archs), "-o", str(library), *map(str, sorted(built))]
        wheel_libs = nvcc.parent.parent / "lib"   # PyPI wheel layout keeps cudart here, not in lib64
        if (wheel_libs / "libcudart_static.a").exists():
            cmd += ["-L", str(wheel_libs)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=nvcc_environment(nvcc))
        if proc.returncode != 0:
            raise BuildError(f"linking {library} failed:\n{proc.stderr[-4000:]}")
    members = {name(u): [name(m) for m in ms] for u, ms in units.items() if ms}
    return BuildResult(library, sorted(built), resources, failures, members)
