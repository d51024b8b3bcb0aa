"""GPU architectures the generator knows: the resource limits a spec is checked against."""
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Arch:
    name: str                    # "sm_90"
    cc: int                      # 90
    static_smem_per_block: int   # bytes a kernel may declare statically
    smem_per_sm: int             # bytes of shared memory per multiprocessor usable by blocks
    max_threads_per_block: int
    regs_per_thread: int


# Every architecture CUDA 13's nvcc targets (`nvcc --list-gpu-arch`).  The limits are those of the CUDA C++
# Programming Guide's table of technical specifications per compute capability (the toolkit's
# cuda_occupancy.h and CCCL's cuda::arch_traits agree): 48 KB of static shared memory per block, 1024 threads
# per block and 255 registers per thread everywhere; shared memory per SM 64 KB (7.5), 164 KB (8.0, 8.7),
# 100 KB (8.6, 8.8, 8.9, 12.x), 228 KB (9.0, 10.x, 11.0), of which a block may opt in to all but 1 KB
# (7.5: all 64 KB).  Only sm_90 has run the kernels (H100, H200); the others are compiled, not run.
ARCHS: dict[str, Arch] = {
    a.name: a
    for a in (
        Arch("sm_75", 75, 48 * 1024, 64 * 1024, 1024, 255),
        Arch("sm_80", 80, 48 * 1024, 164 * 1024, 1024, 255),
        Arch("sm_86", 86, 48 * 1024, 100 * 1024, 1024, 255),
        Arch("sm_87", 87, 48 * 1024, 164 * 1024, 1024, 255),
        Arch("sm_88", 88, 48 * 1024, 100 * 1024, 1024, 255),
        Arch("sm_89", 89, 48 * 1024, 100 * 1024, 1024, 255),
        Arch("sm_90", 90, 48 * 1024, 228 * 1024, 1024, 255),
        Arch("sm_100", 100, 48 * 1024, 228 * 1024, 1024, 255),
        Arch("sm_103", 103, 48 * 1024, 228 * 1024, 1024, 255),
        Arch("sm_110", 110, 48 * 1024, 228 * 1024, 1024, 255),
        Arch("sm_120", 120, 48 * 1024, 100 * 1024, 1024, 255),
        Arch("sm_121", 121, 48 * 1024, 100 * 1024, 1024, 255),
    )
}

DEFAULT_ARCHS = ("sm_75", "sm_80", "sm_90")

# The compute capability from which cp.async exists: code that uses it branches on
# `__CUDA_ARCH__ >= 800`, and its sources say so with a `gemmgen-code-paths:` line (see
# harness.core.build.gencode_flags), so builds give each side of the branch its own PTX.  The fp64 Tensor
# Cores (mma.sync.m8n8k4.f64, the small family's `mma` knob) start there too and branch the same way.
CP_ASYNC_MIN_CC = 80
# The tensor copy engine (cp.async.bulk.tensor, mbarrier transaction counts): the wmma whole-GEMM path.
TENSOR_COPY_MIN_CC = 90
# ... which ends before sm_120: ptxas gave its kernel a stack frame there (gemmgen_wmma_whole.cuh says more), so
# its sources compile sm_120 and up from PTX of their own, where the kernel is empty and never launched.
TENSOR_COPY_END_CC = 120


def parse_archs(text: str) -> tuple[str, ...]:
    """'sm_80,sm_90' (or '80,90') -> ('sm_80', 'sm_90') sorted by compute capability."""
    names = []
    for token in (t.strip() for t in text.split(",")):
        if not token:
            continue
        name = token if token.startswith("sm_") else f"sm_{token}"
        if name not in ARCHS:
            raise ValueError(f"unknown architecture {token!r}; known: {', '.join(ARCHS)}")
        names.append(name)
    if not names:
        raise ValueError("no architecture given")
    return tuple(sorted(set(names), key=lambda n: ARCHS[n].cc))


# An emitted source names the capabilities where its device code changes on one line, `gemmgen-code-paths:
# 80 90a`; an `a` marks code of that exact architecture (wgmma: sm_90a), which the harness and CMake build
# from compute_90a.
_CODE_PATHS = re.compile(r"gemmgen-code-paths:((?: \d+a?)+)")


def code_path_tokens(source_text: str) -> tuple[str, ...]:
    """A source's `gemmgen-code-paths:` line as written ("80", "90a"; none for most sources)."""
    m = _CODE_PATHS.search(source_text)
    return tuple(m.group(1).split()) if m else ()
