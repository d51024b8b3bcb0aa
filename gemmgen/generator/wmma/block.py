"""The wmma family's block kernels (`WmmaBlockSpec`, sm_80+, h and hc): a BLK_M×BLK_N block of C per
thread block with warps_m×warps_n warps, each a fixed tile of it on raw mma.sync.m16n8k16 (fragments
reused across the tile, ldmatrix from slices kept as stored, a cp.async ring, each warp writing its own
tile of C in 16-byte chunks); hc is multiplied as the real product it embeds (interleaved A as M×2K
real, B expanded to 2×2 real blocks in registers), so no planes anywhere.  The tuned table names one
per size where it is clearly faster than the general tuple (`block`), and the dispatch takes it from
sm_80 on where the operands' columns start on 16 bytes (elsewhere it would copy element by element).
The tuples the sweep times are data here too (SWEEP_BLOCK)."""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..arch import ARCHS, DEFAULT_ARCHS
from ..spec import Spec, SpecError, require, require_no_local_memory
from .spec import ACCUMULATORS, MAX_STAGES, MAX_THREADS, PRECISIONS_WMMA

_BLOCK = re.compile(r"^wmmablock_(hc|h)_blk(\d+)x(\d+)x(\d+)_w(\d+)x(\d+)_s(\d+)_(f32|f16)_b(\d+)$")
BLOCK_MAX_ACC_REGISTERS = 128   # a warp's accumulators per thread, 32-bit registers


@dataclass(frozen=True, order=True)
class WmmaBlockSpec(Spec):
    """A BLK_M×BLK_N block of C (elements) per thread block with warps_m×warps_n warps, each a fixed
    tile of it on raw mma.sync.m16n8k16, BLK_K slices of A and B through a ring of `stages` slices
    kept as stored, any M, N, K (gemmgen_wmma_block.cuh, wmma_block_kernel, says why).  h and hc: hc is
    multiplied as the real product it embeds, interleaved all the way to the registers.  sm_80+ only
    (cp.async, m16n8k16): older devices take the table row's general tuple.  min_blocks: thread blocks
    ptxas must fit on an SM at once (1 or 2; 2 caps 256 threads at 128 registers, which some tuples pay
    for in spills)."""
    precision: str
    blk_m: int
    blk_n: int
    blk_k: int
    warps_m: int
    warps_n: int
    stages: int
    acc: str
    min_blocks: int = 1

    family = "wmmablock"
    headers = ("gemmgen_wmma_block.cuh",)   # what its source includes (with its sm_90a wgmma path)

    @property
    def name(self) -> str:
        return (f"wmmablock_{self.precision}_blk{self.blk_m}x{self.blk_n}x{self.blk_k}_w{self.warps_m}x{self.warps_n}"
                f"_s{self.stages}_{self.acc}_b{self.min_blocks}")

    @classmethod
    def parse(cls, name: str) -> "WmmaBlockSpec":
        match = _BLOCK.match(name)
        if not match:
            raise SpecError("name", f"{name!r} is not a block wmma kernel name "
                                    "(wmmablock_<h|hc>_blk<M>x<N>x<K>_w<WM>x<WN>_s<S>_<f32|f16>_b<B>)")
        prec, *numbers, acc, min_blocks = match.groups()
        spec = cls(prec, *(int(x) for x in numbers), acc, int(min_blocks))
        spec.validate()
        return spec

    @property
    def parts(self) -> int:
        """Halves per element: 2 for hc."""
        return 2 if self.precision == "hc" else 1

    @property
    def warps(self) -> int:
        return self.warps_m * self.warps_n

    @property
    def threads(self) -> int:
        return 32 * self.warps

    @property
    def warp_tile(self) -> tuple[int, int]:
        """A warp's tile of C in elements (rows, columns)."""
        return self.blk_m // self.warps_m, self.blk_n // self.warps_n

    @property
    def acc_registers(self) -> int:
        """32-bit accumulator registers per thread: 4 (fp32) or 2 (fp16) per m16n8 tile of the warp."""
        rows, cols = self.warp_tile
        return (rows // 16) * (cols * self.parts // 8) * (4 if self.acc == "f32" else 2)

    def _slice_halves(self, outer: int) -> int:
        """One slice of op(X) as stored, the larger of its two layouts (the transposes are chosen at run
        time): lines of the stored-contiguous dimension, padded as BlockGeometry pads them."""
        p = self.parts

        def lines(along: int, count: int, words: bool) -> int:
            pad = min((16 - along) % 64, (48 - along) % 64) if words else 8
            return count * (along + pad)
        return max(lines(self.blk_k * p, outer, False), lines(outer * p, self.blk_k, p == 2))

    @property
    def stage_bytes(self) -> int:
        return 2 * (self._slice_halves(self.blk_m) + self._slice_halves(self.blk_n))

    @property
    def staging_bytes(self) -> int:
        """Each warp's staging of its tile of C (columns of rows·parts + 8 halves)."""
        rows, cols = self.warp_tile
        return 2 * self.warps * cols * (rows * self.parts + 8)

    @property
    def smem_bytes(self) -> int:
        return self.stages * self.stage_bytes + self.staging_bytes

    @property
    def wgmma_path(self) -> bool:
        """Whether the kernel also carries the sm_90a path (gemmgen_wmma_block_wgmma.cuh, wgmma_block_kernel): h blocks
        of at most 128 rows whose columns are a whole number of wgmma n16 steps up to 128.  Where a GEMM
        fits one such block, the launch takes it on sm_90 devices, built from compute_90a."""
        return self.precision == "h" and self.blk_m <= 128 and self.blk_n % 16 == 0 and self.blk_n <= 128

    def validate(self, arch: str | None = None) -> "WmmaBlockSpec":
        require(self.precision in PRECISIONS_WMMA, "precision",
                f"the wmma family covers h and hc, not {self.precision!r}")
        require(self.acc in ACCUMULATORS, "accumulator", f"acc must be f32 or f16, not {self.acc!r}")
        require(self.warps_m >= 1 and self.warps_n >= 1 and self.threads <= MAX_THREADS, "warps",
                f"{self.warps_m}x{self.warps_n} warps: at least one each way, at most {MAX_THREADS // 32} in all")
        require(self.blk_m > 0 and self.blk_m % (16 * self.warps_m) == 0, "warp tile rows",
                f"BLK_M={self.blk_m} must split into {self.warps_m} warp tiles of a multiple of 16 rows (m16 tiles)")
        require(self.blk_n > 0 and self.blk_n * self.parts % (16 * self.warps_n) == 0, "warp tile columns",
                f"BLK_N={self.blk_n} must split into {self.warps_n} warp tiles of a multiple of {16 // self.parts} "
                "columns (16 real columns: two n8 tiles per ldmatrix)")
        require(self.blk_k > 0 and self.blk_k * self.parts % 16 == 0, "k steps",
                f"BLK_K={self.blk_k} must be a multiple of {16 // self.parts} (k16 steps of real k)")
        require(2 <= self.stages <= MAX_STAGES, "stages", f"stages={self.stages} must be in 2..{MAX_STAGES}")
        require(self.acc_registers <= BLOCK_MAX_ACC_REGISTERS, "registers",
                f"a {self.warp_tile[0]}x{self.warp_tile[1]} warp tile takes {self.acc_registers} accumulator "
                f"registers per thread, more than {BLOCK_MAX_ACC_REGISTERS}")
        require(self.min_blocks in (1, 2), "min blocks", f"min_blocks={self.min_blocks} must be 1 or 2")
        if self.min_blocks == 2:
            # 65,536 registers per SM: two blocks of up to 256 threads at 128 registers each
            require(self.threads <= 256 and self.acc_registers <= 48, "min blocks",
                    f"two blocks of {self.threads} threads with {self.acc_registers} accumulator registers each "
                    "do not fit an SM's registers without spilling (at most 256 threads and 48 accumulator registers)")
        if arch is not None:
            require(ARCHS[arch].cc >= 80, "architecture",
                    f"{arch} has no cp.async or mma.sync.m16n8k16 (sm_80 and later); the general tuple serves it")
        for a in ([arch] if arch else DEFAULT_ARCHS):
            if ARCHS[a].cc < 80:
                continue
            limit = ARCHS[a].smem_per_sm - 1024   # the opt-in maximum per block
            require(self.smem_bytes <= limit, "shared memory",
                    f"{self.stages} stages of {self.stage_bytes} bytes and {self.staging_bytes} bytes of C staging "
                    f"exceed {limit} on {a}")
        require_no_local_memory(self.name, arch)
        return self


# The block kernels the sweep times (precision, BLK_M, BLK_N, BLK_K, warps_m, warps_n, stages, acc): blocks
# that tile the sizes 64-256 with little waste, picked from docs/experiments/mma_block/ (H100).
SWEEP_BLOCK = (
    ("h", 64, 64, 32, 2, 2, 4, "f32"), ("h", 64, 64, 32, 2, 2, 4, "f16"), ("h", 64, 64, 64, 2, 2, 3, "f32"),
    ("h", 96, 96, 32, 2, 2, 3, "f32"), ("h", 96, 96, 32, 2, 2, 3, "f16"), ("h", 96, 96, 32, 3, 2, 3, "f32"),
    ("h", 128, 64, 32, 2, 2, 4, "f32"), ("h", 128, 128, 32, 2, 4, 3, "f16"), ("h", 128, 128, 32, 2, 4, 3, "f32"),
    ("h", 128, 128, 64, 2, 4, 3, "f16"),
    # One k16 step per slice, for the rank-16 updates (K = 16: a 32-deep slice is half zeros), and blocks
    # of 80 and 112, which tile N = 65-80 and 97-112 with less padding than 96 and 128 (2026-11-26).
    ("h", 64, 64, 16, 2, 2, 4, "f32"), ("h", 80, 80, 16, 5, 1, 4, "f16"), ("h", 80, 80, 16, 5, 1, 4, "f32"),
    ("h", 80, 80, 16, 1, 5, 4, "f16"), ("h", 80, 80, 32, 5, 1, 3, "f16"), ("h", 96, 96, 16, 2, 2, 4, "f16"),
    ("h", 96, 96, 16, 3, 2, 4, "f32"), ("h", 112, 112, 16, 7, 1, 4, "f16"), ("h", 112, 112, 32, 7, 1, 3, "f16"),
    ("h", 128, 128, 16, 2, 4, 4, "f16"),
    ("hc", 32, 32, 32, 2, 2, 4, "f32"), ("hc", 48, 48, 32, 3, 2, 4, "f32"), ("hc", 48, 48, 32, 3, 2, 4, "f16"),
    ("hc", 64, 32, 32, 2, 2, 4, "f32"), ("hc", 64, 64, 32, 2, 4, 3, "f32"), ("hc", 64, 64, 32, 2, 4, 3, "f16"),
    ("hc", 64, 128, 16, 2, 4, 4, "f16"), ("hc", 128, 64, 32, 4, 2, 3, "f16"), ("hc", 80, 80, 32, 5, 2, 3, "f16"),
    ("hc", 96, 96, 32, 2, 4, 3, "f16"), ("hc", 96, 96, 32, 3, 2, 3, "f16"), ("hc", 128, 128, 32, 4, 4, 3, "f16"),
)
BLOCK_MIN_SIZE = 32   # below it the warp kernel (h) or the general tuples' small blocks serve


def block_candidates(precision: str, arch: str = "sm_90") -> list[WmmaBlockSpec]:
    """The block kernels the sweep times for a precision, each with one and with two blocks per SM where
    two are allowed (valid on `arch` and every default sm_80+ one)."""
    return [s for p, *rest in SWEEP_BLOCK if p == precision for b in (1, 2)
            if (s := WmmaBlockSpec(p, *rest, b)).is_valid(arch) and s.is_valid()]
