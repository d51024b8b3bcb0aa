"""Build an emitted set with nvcc: one object per source (in parallel, cached by content), linked
into a shared library the harness loads with ctypes.  ptxas's resource report is kept for every
kernel; spills and local memory are failures."""
from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import threading
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
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


# The kernels' machine code compressed in the fat binary, as the emitted CMakeLists.txt builds it
# (GEMMGEN_COMPRESS_DEVICE_CODE): nvcc compresses only PTX by default, and the SASS of these fully
# unrolled kernels shrinks about sixfold (the default set for sm_90: 143 MB -> 22 MB, the library
# 35 MB; fatbinary spends about 0.06 s on a 4 MB unit); the driver expands a module's code when it
# loads it.
COMPRESS_DEVICE_CODE = ("-Xfatbin=-compress-all",)

# Every nvcc warning an error (front end, cicc and ptxas), as strict projects build CUDA: `gemmgen check`
# and the tests' build of the default set compile every emitted source this way, so a warning in any
# kernel of any family fails them; the tuner's sweeps do not (a sweep records what fails to compile and
# goes on).
STRICT_WARNINGS = ("-Werror", "all-warnings")


@dataclass(frozen=True)
class DeviceCode:
    """The machine-code images in the fat binaries of an object, library or executable."""
    images: int
    raw_images: int          # stored uncompressed (nvcc's link step adds one of about 1.5 KB)
    raw_bytes: int
    stored_bytes: int        # their payloads as stored
    expanded_bytes: int      # their size once the driver has expanded them


_FATBIN_MAGIC = 0xBA55ED50
_FATBIN_COMPRESSED = 0x8000       # an entry's flag: its payload is compressed
_FATBIN_MACHINE_CODE = (0x2, 0x10)   # entry kinds holding an ELF image (0x1 is PTX)


def device_code(binary: Path) -> DeviceCode | None:
    """Walk the .nv_fatbin section's containers (a 16-byte header: magic, version, header size, the
    size of its entries; each entry a header giving its kind, header size, payload size, flags and,
    when compressed, the expanded size) and count the machine-code images.  None without objcopy,
    or where the binary has no fat binary."""
    import struct

    tool = shutil.which("objcopy")
    if tool is None:
        return None
    section = binary.with_name(f".{binary.name}.{os.getpid()}.nv_fatbin")
    try:
        proc = subprocess.run([tool, "-O", "binary", "--only-section=.nv_fatbin", str(binary), str(section)],
                              capture_output=True, text=True)
        data = section.read_bytes() if proc.returncode == 0 and section.exists() else b""
    finally:
        section.unlink(missing_ok=True)
    if not data:
        return None
    images = raw = raw_bytes = stored = expanded = 0
    at = 0
    while at + 16 <= len(data):
        magic, _, header, size = struct.unpack_from("<IHHQ", data, at)
        if magic != _FATBIN_MAGIC:      # padding between the containers of several objects
            at += 8
            continue
        entry, end = at + header, at + header + size
        while entry + 64 <= end:
            kind, _, entry_header, payload = struct.unpack_from("<HHIQ", data, entry)
            flags, _, expanded_size = struct.unpack_from("<QQQ", data, entry + 40)
            if kind in _FATBIN_MACHINE_CODE:
                images += 1
                stored += payload
                if flags & _FATBIN_COMPRESSED:
                    expanded += expanded_size
                else:
                    raw += 1
                    raw_bytes += payload
                    expanded += payload
            if entry_header == 0:
                break
            entry += entry_header + payload
        at = end
    return DeviceCode(images, raw, raw_bytes, stored, expanded) if images else None


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

    @property
    def built_sources(self) -> int:
        """The sources compiled into objects, alone or in a unit."""
        return len(self.objects) - len(self.units) + sum(len(m) for m in self.units.values())


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

# The most variants per translation unit in a sweep (sweep_unity).  Measured on a 2-core machine
# (sm_90, GEMMGEN_CACHE_DIR=off, 2 jobs, fresh build folders) on 64 small d sweep variants, 32 of
# size 13 and 32 of 29, written as _time_chunk writes them: one source per compile 29.8 s, units of
# 8 13.6 s, units of 16 12.2 s.  Past 8 the per-source overhead left (about 0.8 s a compile) gains
# little, while a unit that fails costs its members compiled again one by one, and a 256-variant
# piece of `gemmgen tune --gpus` (tune_run.CHUNK) on 16 cores keeps 2 units a core.
SWEEP_UNITY_SOURCES = 8


def sweep_unity(sources: int, jobs: int | None) -> int:
    """The `unity` for a sweep of `sources` variants on `jobs` cores: at most SWEEP_UNITY_SOURCES a
    unit and at least 2 units a core (so that at most a core's worth of work is left when the others
    run dry); 0 (one source per compile) where that leaves less than 2 a unit, or without objdump
    (kernel_members could then place no template kernel, and every unit would be compiled twice)."""
    per_unit = min(SWEEP_UNITY_SOURCES, sources // (2 * max(1, jobs or os.cpu_count() or 1)))
    return per_unit if per_unit >= 2 and shutil.which("objdump") else 0


# The host flags of a sweep's unit: every function and datum in a section of its own, so that the
# object's relocations say which kernels each member's host code launches (kernel_members).
UNIT_HOST_SECTIONS = ("-Xcompiler", "-ffunction-sections,-fdata-sections")

# Sections that hold several members' data at once (without -fdata-sections, or made by nvcc): the
# search for a member's kernels does not go through them (.init_array leads to the registration of
# every kernel of the unit).
_SHARED_SECTIONS = {".text", ".data", ".bss", ".rodata", ".data.rel", ".data.rel.local", ".data.rel.ro",
                    ".data.rel.ro.local", ".init_array", ".fini_array", ".eh_frame", ".nvFatBinSegment",
                    ".nv_fatbin", "__nv_module_id", ".text.startup._ZL24__sti____cudaRegisterAllv"}
_SYMBOL = re.compile(r"^[0-9a-fA-F]+ .{7} (\S+)\t[0-9a-fA-F]+ +(?:\.hidden +)?(\S+)$")
_RELOCATIONS = re.compile(r"^RELOCATION RECORDS FOR \[(.+)\]:$")
_RELOCATION = re.compile(r"^[0-9a-fA-F]+ +\S+ +(\S+?)(?:[+-]0x[0-9a-fA-F]+)?$")


def _host_name(name: str) -> str:
    """A kernel's mangled name as its host stub and the device code share it: cudafe makes the stub
    of a template kernel static, which puts an `L` before its name (`_ZN7gemmgenL17small_gemm_...`)."""
    return re.sub(r"L(?=\d)", "", name)


def host_references(obj: Path) -> tuple[dict[str, str], dict[str, set[str]]] | None:
    """`objdump -rt` of a host object: symbol -> its section, and section -> the sections its
    relocations name; None without objdump or where it fails."""
    tool = shutil.which("objdump")
    if tool is None:
        return None
    proc = subprocess.run([tool, "-rt", str(obj)], capture_output=True, text=True)
    if proc.returncode != 0:
        return None
    section_of: dict[str, str] = {}
    refs: dict[str, set[str]] = {}
    current: str | None = None
    for line in proc.stdout.splitlines():
        if m := _RELOCATIONS.match(line):
            current = m.group(1)
            refs.setdefault(current, set())
        elif current is not None and (m := _RELOCATION.match(line)):
            refs[current].add(m.group(1))
        elif current is None and (m := _SYMBOL.match(line)):
            section_of[m.group(2)] = m.group(1)
            section_of.setdefault(m.group(1), m.group(1))
    edges = {sec: {section_of.get(t, t) for t in targets} for sec, targets in refs.items()}
    return section_of, edges


def kernel_members(functions: Iterable[str], stems: Iterable[str], obj: Path) -> dict[str, list[str]] | None:
    """The members (by stem) of a unit each of its kernels (`functions`, mangled, as ptxas names
    them) belongs to, as a compile of that member alone would report it; None where some kernel
    cannot be placed (the caller then compiles the members alone).  A kernel whose name holds the
    namespace of a member (`gemmgen_<stem>`; the longest such stem, as names may be prefixes of one
    another) is that member's.  The others (templates in namespace gemmgen, instantiated with plain
    numbers, and kernels several members share) belong to each member whose host code reaches the
    kernel's stub through the object's relocations: the unit is compiled with UNIT_HOST_SECTIONS."""
    by_length = sorted(stems, key=len, reverse=True)
    owners: dict[str, list[str]] = {}
    rest = []
    for function in dict.fromkeys(functions):
        stem = next((s for s in by_length if f"gemmgen_{s}" in function), None)
        if stem is None:
            rest.append(function)
        else:
            owners[function] = [stem]
    if not rest:
        return owners
    found = host_references(obj)
    if found is None:
        return None
    section_of, edges = found
    host_sections = {_host_name(sym): sec for sym, sec in section_of.items()}

    def member_of(symbol: str) -> str | None:   # a member's namespace, or its extern "C" entry points
        return next((s for s in by_length if f"gemmgen_{s}" in symbol or symbol.startswith(f"{s}_")), None)

    reached: dict[str, set[str]] = {s: set() for s in by_length}
    for sym, sec in section_of.items():
        if sec not in _SHARED_SECTIONS and (stem := member_of(sym)) is not None:
            reached[stem].add(sec)
    for stem, seen in reached.items():
        pending = list(seen)
        while pending:
            for target in edges.get(pending.pop(), ()):
                if target not in seen and target not in _SHARED_SECTIONS:
                    seen.add(target)
                    pending.append(target)
    for function in rest:
        sec = host_sections.get(_host_name(function))
        members = [s for s in by_length if sec is not None and sec in reached[s]]
        if not members:
            return None
        owners[function] = sorted(members)
    return owners


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
             *COMPRESS_DEVICE_CODE, *extra]
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


@busy.counted("compiling")
def build_library(generated: Path, build_dir: Path, archs: tuple[str, ...], jobs: int | None = None,
                  link: bool = True, progress: Callable[[int, int], None] | None = None,
                  sources: list[Path] | None = None, tolerate_failures: bool = False,
                  library_name: str = "libgemmgen.so", unity: int = 0, host_optimization: str = "-O3",
                  strict_warnings: bool = False) -> BuildResult:
    """Compile every .cu of an emitted set (or `sources`) and link them into one shared library.
    With tolerate_failures a source that does not compile is recorded and left out (the tuner's
    sweep goes on); otherwise it raises BuildError.  unity > 0 compiles the per-variant sources in
    units of that many (harness.core.unity; the default set then builds in about 60 % of the time),
    and `units` lists what each unit holds.  Without tolerate_failures (gemmgen check) resources
    then name the unit.  With it (a sweep) the build keeps what one compile per source gives: a
    unit's resources name the member each kernel belongs to (kernel_members), and a unit that fails,
    or has a kernel no member can be found for, has its members compiled alone, so that a source
    that does not compile is in `failures` under its own name and the others are built; such a
    unit is left out of `units` (its members' objects are built alone).  strict_warnings: every
    warning is an error (STRICT_WARNINGS)."""
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
    extra = band_definitions(archs) + (STRICT_WARNINGS if strict_warnings else ())
    if unity > 0:
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
        units = unity_units(sources, group, build_dir / "unity", unity, ".cu", named_by_members=tolerate_failures)
    else:
        units = {s: () for s in sources}

    def name(source: Path) -> str:
        return str(source.relative_to(generated if source.is_relative_to(generated) else build_dir))

    def object_path(source: Path) -> Path:
        return build_dir / "obj" / Path(name(source)).with_suffix(".o")

    order = largest_first(units)
    by_member = tolerate_failures and unity > 0   # a sweep's units: resources go to their members
    reports: dict[Path, str] = {}                 # what compiled -> ptxas's report
    failed: dict[Path, str] = {}                  # what did not -> the compiler's message
    owners: dict[Path, dict[str, list[str]]] = {}  # a sweep's unit -> its kernels' members (stems)
    alone: set[Path] = set()                      # units whose members were compiled one by one
    total, done = len(order), 0
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        def submit(source: Path, members: tuple[Path, ...]):
            return pool.submit(compile_object, nvcc, source, object_path(source), includes,
                               source_archs[(members or (source,))[0]],
                               (*extra, *UNIT_HOST_SECTIONS) if by_member and members else extra, members,
                               host_optimization)

        pending = {submit(u, units[u]): u for u in order}
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in finished:
                source = pending.pop(fut)
                members = units.get(source, ())
                try:
                    report = fut.result()
                except BuildError as err:
                    if not tolerate_failures:
                        raise
                    if members:
                        alone.add(source)
                    else:
                        failed[source] = str(err)
                else:
                    placed = None
                    if by_member and members:
                        placed = kernel_members([r.function for r in parse_ptxas_report("", report)],
                                                [m.stem for m in members], object_path(source))
                    if by_member and members and placed is None:
                        alone.add(source)
                    else:
                        reports[source] = report
                        if placed is not None:
                            owners[source] = placed
                if source in alone:   # (the pool's queue: they start once the units before them have)
                    for member in members:
                        pending[submit(member, ())] = member
                    total += len(members)
                done += 1
                if progress:
                    progress(done, total)
    resources: list[KernelResources] = []
    failures: dict[str, str] = {}
    built: list[Path] = []
    for unit in order:
        for source in units[unit] if unit in alone else (unit,):
            rel = name(source)
            if source in failed:
                failures[rel] = failed[source]
                continue
            built.append(object_path(source))
            found = parse_ptxas_report(rel, reports[source])
            if source in owners:
                member = {m.stem: name(m) for m in units[source]}
                found = [replace(r, source=member[stem]) for r in found for stem in owners[source][r.function]]
            resources.extend(found)
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
    members = {name(u): [name(m) for m in ms] for u, ms in units.items() if ms and u not in alone}
    return BuildResult(library, sorted(built), resources, failures, members)


def load_library(path: Path | str):
    """The shared library at `path` as it was built last, loaded once per process.  dlopen hands out
    a library it already holds by its path, so a process that outlives a build (a worker of a Dask
    cluster serving one `gemmgen tune` run after another) would time the old kernels after a rebuild
    to the same path: each build is loaded through a hard link named by its modification time."""
    path = Path(path)
    alias = path.with_name(f".{path.stem}.{path.stat().st_mtime_ns}{path.suffix}")
    if not alias.exists():
        partial = alias.with_name(f"{alias.name}.{os.getpid()}.{threading.get_ident()}")
        try:
            os.link(path, partial)
        except OSError:   # (a file system without hard links)
            shutil.copyfile(path, partial)
        partial.replace(alias)
    return _load(str(alias))


@functools.lru_cache(maxsize=None)
def _load(path: str):
    import ctypes

    return ctypes.CDLL(path)
