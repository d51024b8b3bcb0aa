"""Emit a manifest's files: one source per kernel variant, the shared device headers, the dispatch
source, the public header, CMakeLists.txt and manifest.json.  The output is a pure function of the
manifest (sorted, no timestamps), so regenerating gives byte-identical files."""
from __future__ import annotations

import json
from pathlib import Path

from . import __version__, cpu
from .arch import ARCHS, CP_ASYNC_MIN_CC, TENSOR_COPY_END_CC, TENSOR_COPY_MIN_CC, code_path_tokens
from .manifest import BAND_SPLIT_CC, BELOW, FROM, Manifest, kernel_bands
from .precision import PRECISION_ORDER, PRECISIONS
from .families import BUILD_GROUPS, GROUP_OF_FOLDER, family_of
from .render import banner, render
from . import tallskinny, wmma
from .small import MAX_SIZE
from .spec import format_ranges


def kernel_source_path(spec) -> str:
    return f"src/{spec.family}/{spec.precision}/{spec.name}.cu"


# The kernel headers, by template folder (gemmgen/templates/FOLDER/NAME.j2, emitted as src/NAME): a header per
# kernel with its launcher and one per layer its kernels share; each kernel source includes those its spec's
# `headers` name.  gemmgen_small.cuh and gemmgen_wmma.cuh include every kernel of their family.
DEVICE_HEADERS = {
    "small": ("gemmgen_small.cuh", "gemmgen_small_launch.cuh", "gemmgen_small_tile.cuh", "gemmgen_small_stage.cuh",
              "gemmgen_small_mma.cuh", "gemmgen_small_staged.cuh", "gemmgen_small_ring_product.cuh", "gemmgen_small_ring.cuh",
              "gemmgen_small_elementwise.cuh"),
    "tallskinny": ("gemmgen_tallskinny_common.cuh", "gemmgen_tallskinny_tsm2.cuh", "gemmgen_tallskinny_ism2.cuh",
                   "gemmgen_tallskinny_tsmma.cuh"),
    "wmma": ("gemmgen_wmma.cuh", "gemmgen_wmma_common.cuh", "gemmgen_wmma_copy.cuh", "gemmgen_wmma_tensor_copy.cuh",
             "gemmgen_wmma_mma.cuh", "gemmgen_wmma_wgmma.cuh", "gemmgen_wmma_general.cuh", "gemmgen_wmma_packed.cuh",
             "gemmgen_wmma_ring.cuh", "gemmgen_wmma_whole.cuh", "gemmgen_wmma_warp.cuh",
             "gemmgen_wmma_block_wgmma.cuh", "gemmgen_wmma_block.cuh", "gemmgen_wmma_tiny.cuh"),
}


def support_files(command: str, archs, small_precisions, tallskinny_ns=tallskinny.DEFAULT_NS) -> dict[str, str]:
    """The headers every kernel source includes (also used by the tuner's throw-away sets)."""
    common = {"banner": banner(command), "version": __version__}
    precisions = [PRECISIONS[k] for k in PRECISION_ORDER]   # the API always has all six
    ts_precisions = [p for p in small_precisions if p in tallskinny.PRECISIONS_TS] if tallskinny_ns else []
    return {
        "src/gemmgen_device.cuh": render("common/gemmgen_device.cuh.j2", selection_macros=SELECTION_MACROS,
                                          band_macros=tuple(BAND_MACROS.values()), band_split=BAND_SPLIT_CC,
                                          **common),
        "src/gemmgen_current_device.h": render("common/gemmgen_current_device.h.j2", **common),
        **{f"src/{name}": render(f"{folder}/{name}.j2", skew=wmma.SKEW, **common)
           for folder, names in DEVICE_HEADERS.items() for name in names},
        "include/gemmgen.h": render("gemmgen.h.j2", precisions=precisions, archs=archs,
                                    small_precisions=small_precisions, small_max_size=MAX_SIZE,
                                    wmma_precisions=[p for p in small_precisions if p in wmma.PRECISIONS_WMMA],
                                    tallskinny_precisions=ts_precisions,
                                    tallskinny_ns=format_ranges(tallskinny_ns), **common),
    }


def _cuts(entry, index: int) -> str:
    values = [str(c[index]) + ("LL" if index == 0 else "") for c in entry.tcf]
    values += ["0"] * (tallskinny.MAX_TCF_CUTS - len(values))
    return ", ".join(values)


# The kernel families a CMake build of the CUDA library chooses from (GEMMGEN_FAMILIES).
BUILD_FAMILIES = BUILD_GROUPS


# The macros a CMake build sets to leave out precisions and families (CMakeLists.txt.j2); gemmgen_device.cuh
# defaults each to 1.
SELECTION_MACROS = tuple(f"GEMMGEN_WITH_{name.upper()}" for name in PRECISION_ORDER + BUILD_FAMILIES)
# manifest.kernel_bands' two sides -> the macro that says a build has them
BAND_MACROS = {BELOW: f"GEMMGEN_BUILT_BELOW_{BAND_SPLIT_CC}", FROM: f"GEMMGEN_BUILT_FROM_{BAND_SPLIT_CC}"}


def tallskinny_dispatch_source(entries, kernels, common: dict, routes=()) -> str:
    """src/gemmgen_tallskinny_dispatch.cu: the tall-skinny C API over these dispatch entries and kernels, and
    the Tensor Core routes (tallskinny.TensorCoreRoute) of the precisions that have one."""
    return render("tallskinny/tallskinny_dispatch.cu.j2", precisions=[PRECISIONS[k] for k in PRECISION_ORDER],
                  entries=entries, kernels=kernels, max_cuts=tallskinny.MAX_TCF_CUTS, cut_m=lambda e: _cuts(e, 0),
                  cut_tcf=lambda e: _cuts(e, 1), routes={r.precision: r for r in routes}, **common)


def build_groups(paths: list[str]) -> list[tuple[str, str, list[str]]]:
    """Kernel sources as (build family, precision, sources) in CMakeLists.txt's order.  The one
    source without a precision folder is the sm_90a hc kernel (src/wmmahopper/gemmgen_wgmma_hc.cu)."""
    groups: dict[tuple[str, str], list[str]] = {}
    for path in paths:
        parts = path.split("/")
        precision = "hc" if path == wmma.WGMMA_HC_SOURCE else parts[2]
        groups.setdefault((GROUP_OF_FOLDER[parts[1]], precision), []).append(path)
    order = {name: i for i, name in enumerate(BUILD_FAMILIES)}
    return [(f, p, sorted(g)) for (f, p), g in sorted(
        groups.items(), key=lambda kv: (order[kv[0][0]], PRECISION_ORDER.index(kv[0][1])))]


TALLSKINNY_TRANS = (("N", "N"), ("N", "T"), ("T", "N"), ("T", "T"))


def tallskinny_source(spec, command: str, trans_pairs=None) -> str:
    return render(family_of(spec).template, spec=spec, p=PRECISIONS[spec.precision],
                  cp_async_min_cc=CP_ASYNC_MIN_CC, trans_pairs=launch_pairs(spec, trans_pairs),
                  banner=banner(command), version=__version__)


def launch_pairs(spec, trans_pairs=None) -> tuple[tuple[str, str], ...]:
    """The (TA, TB) pairs a variant's source launches a kernel for: every transpose pair of its precision
    (or `trans_pairs`), or their stored layouts where the kernel conjugates at run time; tall-skinny: NN,
    NT, TN, TT."""
    family = family_of(spec)
    if family.tallskinny:   # (TSMMA serves op(A) = A only)
        pairs = TALLSKINNY_TRANS if trans_pairs is None else tuple(trans_pairs)
        return tuple(pair for pair in pairs if pair[0] in getattr(spec, "a_layouts", ("N", "T")))
    pairs = PRECISIONS[spec.precision].trans_pairs if trans_pairs is None else trans_pairs
    return layout_pairs(pairs) if family.conjugate_at_run_time else tuple(pairs)


def kernel_source(spec, command: str, trans_pairs=None) -> str:
    """One variant's source with launchers for every transpose pair (or only `trans_pairs`: the
    tuner times NN and need not compile the other eight)."""
    family = family_of(spec)
    if family.tallskinny:
        return tallskinny_source(spec, command, trans_pairs)
    return render(family.template, spec=spec, p=PRECISIONS[spec.precision], cp_async_min_cc=CP_ASYNC_MIN_CC,
                  tensor_copy_min_cc=TENSOR_COPY_MIN_CC, tensor_copy_end_cc=TENSOR_COPY_END_CC,
                  trans_pairs=launch_pairs(spec, trans_pairs),
                  conjugate_at_run_time=family.conjugate_at_run_time, banner=banner(command),
                  version=__version__)


def layout_pairs(trans_pairs) -> tuple[tuple[str, str], ...]:
    """The stored layouts behind transpose pairs ('C' is stored like 'T'), each once, in order."""
    return tuple(dict.fromkeys((a.replace("C", "T"), b.replace("C", "T")) for a, b in trans_pairs))


DISPATCH_SOURCE = "src/gemmgen_dispatch.cu"
TALLSKINNY_DISPATCH_SOURCE = "src/gemmgen_tallskinny_dispatch.cu"


def variant_specs(manifest: Manifest) -> tuple:
    """The kernels with a source of their own: the fixed-shape ones, the general Tensor Core ones, the
    tall-skinny ones."""
    return manifest.kernels + manifest.wmma_kernels + manifest.tallskinny_kernels


def has_wgmma_hc(manifest: Manifest) -> bool:
    """sm_90a's hc kernel for m, n, k from wmma.WGMMA_HC_MIN_SIZE up (k from WGMMA_HC_MIN_K with beta ≠ 0),
    which the dispatch tries before the table: a source of its own where the set has hc and sm_90."""
    return "hc" in manifest.selection.precisions and "sm_90" in manifest.selection.archs


def wgmma_hc_source(common: dict) -> str:
    return render("wmma/wgmma_hc.cu.j2", min_size=wmma.WGMMA_HC_MIN_SIZE, min_k=wmma.WGMMA_HC_MIN_K, **common)


def cuda_source_paths(manifest: Manifest) -> list[str]:
    """Every CUDA source `plan` writes, sorted: one per kernel variant, the two dispatch sources and,
    where the set has hc and sm_90, the hc wgmma source."""
    return sorted([kernel_source_path(s) for s in variant_specs(manifest)] + [DISPATCH_SOURCE, TALLSKINNY_DISPATCH_SOURCE]
                  + ([wmma.WGMMA_HC_SOURCE] if has_wgmma_hc(manifest) else []))


def plan(manifest: Manifest) -> dict[str, str]:
    """relative path -> file content, for everything `generate` writes."""
    command = manifest.selection.command()
    common = {"banner": banner(command), "version": __version__}
    precisions = [PRECISIONS[k] for k in PRECISION_ORDER]
    kernels = manifest.kernels
    files = support_files(command, manifest.selection.archs, manifest.selection.precisions,
                          manifest.selection.tallskinny_ns)
    for spec in variant_specs(manifest):
        files[kernel_source_path(spec)] = kernel_source(spec, command)
    wmma_kernels = manifest.wmma_kernels
    ts_kernels = manifest.tallskinny_kernels
    files[TALLSKINNY_DISPATCH_SOURCE] = tallskinny_dispatch_source(manifest.tallskinny, ts_kernels, common,
                                                                    manifest.tallskinny_routes)
    entries = {p.key: [e for e in manifest.dispatch if e.precision == p.key] for p in precisions}
    ranges = {p.key: [r for r in manifest.wmma_ranges if r.precision == p.key] for p in precisions}
    wgmma_hc = has_wgmma_hc(manifest)
    if wgmma_hc:
        files[wmma.WGMMA_HC_SOURCE] = wgmma_hc_source(common)
    listing = manifest.to_json()
    bands = kernel_bands(listing["dispatch"])
    files[DISPATCH_SOURCE] = render(
        "dispatch.cu.j2", kernels=kernels, precisions=precisions, entries=entries, bands=bands,
        band_macro=BAND_MACROS,
        wmma_kernels=wmma_kernels, wmma_ranges=ranges, wmma_kinds=wmma.KINDS,
        rank_k_max=wmma.RANK_K_MAX, precision_of=PRECISIONS, wgmma_hc=wgmma_hc,
        wgmma_hc_min_size=wmma.WGMMA_HC_MIN_SIZE, **common)
    cuda_sources = [path for path in cuda_source_paths(manifest) if path != DISPATCH_SOURCE]
    # sources with sm_90a code (wgmma), which CMake builds apart: from compute_90a where 90 is targeted
    sm90a = [path for path in cuda_sources if "90a" in code_path_tokens(files[path])]
    kernel_sources = [path for path in cuda_sources if path not in sm90a and path != TALLSKINNY_DISPATCH_SOURCE]
    # kernels only devices on one side of sm_80 run (manifest.kernel_bands): CMake builds them apart, for
    # the architectures on that side alone
    banded = {band: [path for path in kernel_sources if bands.get(Path(path).stem) == band] for band in (BELOW, FROM)}
    kernel_sources = [path for path in kernel_sources if Path(path).stem not in bands]
    files["CMakeLists.txt"] = render(
        "CMakeLists.txt.j2", source_groups=build_groups(kernel_sources), sm90a_groups=build_groups(sm90a),
        band_groups={band: build_groups(paths) for band, paths in banded.items()}, band_macro=BAND_MACROS,
        band_split=BAND_SPLIT_CC,
        precisions=list(manifest.selection.precisions), families=list(BUILD_FAMILIES),
        archs=manifest.selection.archs,
        cmake_archs=[str(ARCHS[a].cc) for a in manifest.selection.archs],
        cpu_sources=sorted(cpu.source_path(s) for s in manifest.cpu_kernels), **common)
    files.update(cpu.files(list(manifest.cpu_kernels), manifest.selection.cpu_isas, common["banner"], __version__))
    listing["generator"] = f"gemmgen {__version__}"
    listing["files"] = sorted(files) + ["manifest.json"]
    files["manifest.json"] = json.dumps(listing, indent=1, sort_keys=True) + "\n"
    return files


def write(manifest: Manifest, out_dir: Path) -> list[Path]:
    """Write the files; remove files an earlier `generate` wrote there that are no longer part of
    the set (read from the old manifest.json), so the folder always equals a fresh generation."""
    if out_dir.exists() and not out_dir.is_dir():
        raise NotADirectoryError(f"output {out_dir} exists and is not a folder")
    files = plan(manifest)
    old_manifest = out_dir / "manifest.json"
    if old_manifest.exists():
        try:
            stale = set(json.loads(old_manifest.read_text()).get("files", [])) - set(files)
        except json.JSONDecodeError:
            stale = set()
        for rel in sorted(stale):
            path = out_dir / rel
            if path.is_file():
                path.unlink()
    written = []
    for rel, content in sorted(files.items()):
        path = out_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != content:
            path.write_text(content)
        written.append(path)
    _remove_empty_dirs(out_dir)
    return written


def _remove_empty_dirs(root: Path) -> None:
    for folder in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts),
                         reverse=True):
        if not any(folder.iterdir()):
            folder.rmdir()
