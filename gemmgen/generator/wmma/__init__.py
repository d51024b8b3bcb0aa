"""The wmma family (Abdelfattah et al.): Tensor Core batched HGEMM and half-complex HCGEMM for any
M, N, K.  `spec`: the kernel variants and their rules (general, tiny, warp); `block`: the block
kernels and their sweep; `sweep`: the general and tiny tuning space as data; `dispatch`: which tuple
serves which problems.  Everything public is re-exported here, so callers write wmma.WmmaSpec,
wmma.sweep_space, wmma.build_ranges, and `parse_name` gives any of the family's kernel names back
as its spec."""
from .spec import (  # noqa: F401
    PRECISIONS_WMMA,
    TC_SHAPES,
    ACCUMULATORS,
    SKEW,
    MAX_THREADS,
    REGISTER_BUDGET,
    TINY_TC,
    MAX_STAGES,
    ASYNC_TC,
    WARP_MAX_SIZE,
    WARP_MAX_ACC_REGISTERS,
    WmmaSpec,
    WmmaTinySpec,
    WmmaWarpSpec,
    PARTIAL_READ_COST,
    parts_of,
    warp_k_slots,
    warp_k,
    warp_k_stride,
    WGMMA_HC_MIN_SIZE,
    WGMMA_HC_MIN_K,
    WGMMA_HC_SOURCE,
    SWEEP_WARP,
    WARP_ACC_HC,
    WARP_MIN_SIZE_HC,
    warp_candidates,
)
from .block import (  # noqa: F401
    BLOCK_MAX_ACC_REGISTERS,
    WmmaBlockSpec,
    SWEEP_BLOCK,
    BLOCK_MIN_SIZE,
    block_candidates,
)
from .sweep import (  # noqa: F401
    SWEEP_BLK_MN,
    SWEEP_BLK_K,
    SWEEP_THREADS,
    SWEEP_DIM_X,
    SWEEP_TINY_WARPS,
    SWEEP_ASYNC_BLK_MN,
    SWEEP_ASYNC_THREADS,
    SWEEP_ASYNC_STAGES,
    sweep_space,
    async_sweep_space,
    tiny_candidates,
    heuristic,
)
from .dispatch import (  # noqa: F401
    KINDS,
    RANK_K_MAX,
    WmmaRange,
    size_key,
    ranges_from_rows,
    table_rows,
    build_ranges,
    fixed_shapes,
    shape_choice,
)


def parse_name(name: str):
    """Any kernel name of the family (wmma_, wmmatiny_, wmmawarp_, wmmablock_) -> its spec, validated."""
    if name.startswith("wmmawarp_"):
        return WmmaWarpSpec.parse(name)
    if name.startswith("wmmablock_"):
        return WmmaBlockSpec.parse(name)
    return (WmmaTinySpec if name.startswith("wmmatiny_") else WmmaSpec).parse(name)
