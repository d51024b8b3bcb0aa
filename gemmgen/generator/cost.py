"""What compiling an emitted set costs, known without compiling it: its CUDA sources and its kernel
builds, the `__global__` instantiations ptxas compiles (ptxas -v: one "Compiling entry function" each).

Every source compiles each of its kernels once per target architecture: a code path (`gemmgen-code-paths`)
only changes which PTX an architecture's SASS comes from (sm_90 from compute_90a where a source has wgmma
code), never which kernels exist, and a kernel empty below sm_80 is still built there.  So

    kernel builds = (kernels of every source, summed) x architectures,

less the architectures a kernel that only devices on one side of sm_80 run is not built for
(manifest.kernel_bands).

A source's kernels follow its launchers (gemmgen/templates/): per launched transpose pair (emit.launch_pairs:
stored layout pairs where the kernel conjugates at run time, every pair for the tiny kernel, NN, NT, TN,
TT for tall-skinny) the kernels of each path the launcher can take, plus kernels whose template arguments
do not include the pair (the sm_90 whole-GEMM kernel, the h block kernels' wgmma kernel, the 1x1x1
elementwise kernel, tall-skinny's beta scaling).  Those are counted once per source, as a build of that
source alone (CMake's) compiles them; the harness's grouped builds (harness.core.unity) merge the ones that
sources of one unit share, so `gemmgen check` reports a few fewer (the default set for sm_90: 3591 kernels
there, 3768 here).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from . import wmma
from .emit import DISPATCH_SOURCE, TALLSKINNY_DISPATCH_SOURCE, cuda_source_paths, kernel_source_path, launch_pairs
from .emit import variant_specs, wgmma_hc_source
from .arch import ARCHS
from .manifest import Manifest, builds_on, kernel_bands
from .precision import PRECISION_ORDER, PRECISIONS


def variant_kernels(spec) -> frozenset[tuple]:
    """The kernels one variant's source instantiates, each named by a tuple (its template's arguments
    that vary, enough to tell them apart)."""
    pairs = launch_pairs(spec)
    if spec.family == "small":
        # launch_small: the staged kernel; with a ring (stages, else array_stages) the ring kernel for
        # pointer arrays, and for strided batches where stages is set
        paths = (["staged"] + (["ring_array"] if spec.copies_through_ring else [])
                 + (["ring_strided"] if spec.stages else []))
        out = {(spec.name, path, ta, tb) for ta, tb in pairs for path in paths}
        if spec.elementwise:
            out.add(("elementwise", spec.precision))   # elementwise_kernel<S>: no transpose in it
        return frozenset(out)
    if spec.family == "wmmawarp":
        # launch_wmma_warp: pointer arrays with the address queue; strided batches too where the accumulators
        # take more than 8 registers, else an instance of their own without it
        paths = ["lookahead"] + ([] if spec.accumulator_registers > 8 else ["strided"])
        return frozenset((spec.name, path, ta, tb) for ta, tb in pairs for path in paths)
    if spec.family == "wmma":
        # launch_wmma_async (a cp.async ring): the packed ring, the register-staged kernel and the ring kernel
        # with and without old C; otherwise launch_wmma alone.  h with fp16 sums: launch_wmma_whole's kernel.
        paths = ["packed", "staged", "ring", "ring_old_c"] if spec.stages else ["staged"]
        out = {(spec.name, path, ta, tb) for ta, tb in pairs for path in paths}
        if spec.whole_path:
            out |= {("whole", ta, tb) for ta, tb in pairs}   # wmma_whole_kernel<8, TA, TB>
        return frozenset(out)
    if spec.family == "wmmablock":
        # wmma_block_kernel<..., NARROW>: 16-byte copies, and 8- and 4-byte ones (operands off 16 bytes)
        out = {(spec.name, ta, tb, narrow) for ta, tb in pairs for narrow in (False, True)}
        if spec.precision == "h":   # WgmmaPath<__half>: wgmma_block_kernel<N_TILE, WGMMA_STAGES>
            out.add(("wgmma_block", spec.blk_n if spec.blk_n % 16 == 0 and spec.blk_n <= 128 else 16))
        return frozenset(out)
    out = {(spec.name, ta, tb) for ta, tb in pairs}   # wmmatiny, tsm2, ism2, tsmma: one kernel per pair
    if spec.family in ("tsm2", "tsmma"):
        out.add(("scale", spec.precision))   # their launchers scale C first where k is split: scale_kernel<S>
    return frozenset(out)


def fixed_source_kernels(path: str) -> frozenset[tuple]:
    """The kernels of the sources that are not one variant's: each dispatch source has a beta-scaling
    kernel for every precision of the API (all six, whatever the set; the tall-skinny one is tsm2's
    scale_kernel<S>), the hc wgmma source one with and one without old C for each of its tile widths."""
    if path == DISPATCH_SOURCE:
        return frozenset(("scale_c", p) for p in PRECISION_ORDER)
    if path == TALLSKINNY_DISPATCH_SOURCE:
        return frozenset(("scale", p) for p in PRECISION_ORDER)
    assert path == wmma.WGMMA_HC_SOURCE, path
    tiles = re.findall(r"\{\d+, launch_hc<(\d+), (\d+)>\}", wgmma_hc_source({"banner": "", "version": ""}))
    return frozenset(("wgmma_hc", int(bn), int(stages), read_c) for bn, stages in tiles for read_c in (False, True))


def source_kernels(manifest: Manifest) -> dict[str, frozenset[tuple]]:
    """Every CUDA source `generate` writes for `manifest` (emit.cuda_source_paths) -> the kernels it
    compiles for each architecture; a build that puts several sources in one translation unit compiles
    the union of theirs."""
    by_path = {kernel_source_path(s): variant_kernels(s) for s in variant_specs(manifest)}
    return {path: by_path[path] if path in by_path else fixed_source_kernels(path)
            for path in cuda_source_paths(manifest)}


@dataclass(frozen=True)
class BuildCost:
    kernels: dict[str, int]       # CUDA source -> kernels it compiles for each architecture it is built for
    archs: tuple[str, ...]
    # sources built for only some of archs: kernels only devices on one side of sm_80 run (kernel_bands)
    source_archs: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def archs_of(self, source: str) -> tuple[str, ...]:
        return self.source_archs.get(source, self.archs)

    @property
    def sources(self) -> int:
        return len(self.kernels)

    @property
    def kernels_by_arch(self) -> dict[str, int]:
        return {a: sum(n for path, n in self.kernels.items() if a in self.archs_of(path)) for a in self.archs}

    @property
    def kernel_builds(self) -> int:
        return sum(self.kernels_by_arch.values())

    def summary(self) -> str:
        by_arch = self.kernels_by_arch
        if len(set(by_arch.values())) == 1:
            per = (f"{next(iter(by_arch.values()))} kernels for each of {len(self.archs)} "
                   f"architecture{'s' if len(self.archs) != 1 else ''}: {','.join(self.archs)}")
        else:
            per = ", ".join(f"{n} kernels for {a}" for a, n in by_arch.items())
        return f"{self.sources} CUDA sources, {self.kernel_builds} kernel builds ({per})"


def build_cost(manifest: Manifest) -> BuildCost:
    """The CUDA sources and kernel builds of `manifest`'s set, compiled one source at a time (as CMake
    does), from the manifest and the emit plan's source list: nothing compiled, nothing rendered but
    the hc wgmma source."""
    kernels = {path: len(keys) for path, keys in source_kernels(manifest).items()}
    bands = kernel_bands(manifest.to_json()["dispatch"])
    archs = manifest.selection.archs
    source_archs = {path: tuple(a for a in archs if builds_on(bands[Path(path).stem], ARCHS[a].cc))
                    for path in kernels if Path(path).stem in bands}
    return BuildCost(kernels, archs, source_archs)
