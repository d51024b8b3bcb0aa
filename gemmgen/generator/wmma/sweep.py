"""The wmma family's sweep space as data: the tuples `gemmgen tune wmma` times, and the heuristic
tuple where no table has a row."""
from __future__ import annotations

from ..arch import ARCHS
from .spec import ACCUMULATORS, ASYNC_TC, TC_SHAPES, WmmaSpec, WmmaTinySpec


# ---- the sweep space as data ------------------------------------------------------------------------
SWEEP_BLK_MN = (16, 32, 48, 64, 96, 128)
SWEEP_BLK_K = (16, 32, 64)
SWEEP_THREADS = (32, 64, 128, 256)
# DIM_X below 8 reads fewer than 16 bytes of a column per warp row: never faster, so not swept
# (the spec still accepts it).
SWEEP_DIM_X = (8, 16, 32, 64, 128, 256)
SWEEP_TINY_WARPS = (1, 2, 4, 8)
# The cp.async ring (stages > 0): 16×16×16 only (a rule), square blocks plus 128×64 and 64×128,
# DIM_X = 16 (DIM only shapes the epilogue's writes there), fp16 accumulation (the register-staged
# sweep chose it at nearly every size).  80 is a block size here: N = 65..80 otherwise pays for a
# 96- or 128-wide block.
SWEEP_ASYNC_BLK_MN = ((32, 32), (48, 48), (64, 64), (80, 80), (96, 96), (128, 128), (128, 64), (64, 128))
SWEEP_ASYNC_THREADS = (64, 128, 256)
SWEEP_ASYNC_STAGES = (3, 4, 6)


def sweep_space(precision: str, arch: str = "sm_90") -> list[WmmaSpec]:
    """Every eligible tuple: the three Tensor Core shapes, BLK_M/BLK_N from SWEEP_BLK_MN, BLK_K
    from SWEEP_BLK_K, 1..8 warps in every DIM_X×DIM_Y regrouping with DIM_X ≥ 8, fp32 and fp16
    accumulators, filtered by the rules of WmmaSpec.validate; then the cp.async ring's tuples."""
    out = []
    for tc_m, tc_n, tc_k in TC_SHAPES:
        for blk_m in SWEEP_BLK_MN:
            for blk_n in SWEEP_BLK_MN:
                for blk_k in SWEEP_BLK_K:
                    for threads in SWEEP_THREADS:
                        for dim_x in SWEEP_DIM_X:
                            if threads % dim_x:
                                continue
                            for acc in ACCUMULATORS:
                                spec = WmmaSpec(precision, tc_m, tc_n, tc_k, blk_m, blk_n, blk_k,
                                                dim_x, threads // dim_x, threads // 32, acc)
                                if spec.is_valid(arch):
                                    out.append(spec)
    return sorted(out) + async_sweep_space(precision, arch)


def async_sweep_space(precision: str, arch: str = "sm_90") -> list[WmmaSpec]:
    """The tuples with a cp.async ring (SWEEP_ASYNC_*), filtered by the rules; none for hc or below sm_80."""
    if precision != "h" or ARCHS[arch].cc < 80:
        return []
    out = []
    for blk_m, blk_n in SWEEP_ASYNC_BLK_MN:
        for blk_k in SWEEP_BLK_K:
            for threads in SWEEP_ASYNC_THREADS:
                for stages in SWEEP_ASYNC_STAGES:
                    spec = WmmaSpec(precision, *ASYNC_TC, blk_m, blk_n, blk_k, 16, threads // 16, threads // 32,
                                    "f16", stages)
                    # valid on `arch` and on every default one, so a tuned row serves them all
                    if spec.is_valid(arch) and spec.is_valid():
                        out.append(spec)
    return sorted(out)


def tiny_candidates(precision: str, m: int, n: int, k: int, arch: str = "sm_90") -> list[WmmaTinySpec]:
    return [s for w in SWEEP_TINY_WARPS
            if (s := WmmaTinySpec(precision, m, n, k, w)).is_valid(arch)]


def heuristic(precision: str, size: int) -> WmmaSpec:
    """The untuned choice for problems of about `size` (used where no table exists): the paper's
    Fig. 7 setting scaled down for small sizes, fp32 accumulation."""
    if size <= 16:
        spec = WmmaSpec(precision, 16, 16, 16, 16, 16, 16, 8, 4, 1)
    elif size <= 32:
        spec = WmmaSpec(precision, 16, 16, 16, 32, 32, 32, 16, 8, 4)
    else:
        spec = WmmaSpec(precision, 16, 16, 16, 64, 64, 32, 16, 8, 4)
    return spec.validate()
