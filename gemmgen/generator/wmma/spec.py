"""The wmma family: batched HGEMM (h) and interleaved half-complex HCGEMM (hc) on Tensor Cores
through the WMMA API (Abdelfattah et al.), for any M, N, K.

Design, with the paper's sections:
- §4.1 grid: a thread block computes one BLK_M×BLK_N block of C of one GEMM; the blocks of all
  GEMMs of the batch are numbered along one grid dimension (so batches past 65,535 work).
- §5.2 double-sided recursive blocking: blocks of A, B and C move between global memory and the
  block as DIM_X×DIM_Y thread tiles; the Tensor Cores see them as TC_M×TC_N×TC_K pieces.
- §5.3 two-stage loads: the next BLK_K slice of A and B is read into registers (zero-padded past
  the matrix edge) while the Tensor Cores work on the current one in shared memory.
- §5.4/§5.5 multi-warp round robin: the (BLK_M/TC_M)·(BLK_N/TC_N) Tensor Core tiles of C are dealt
  to the warps in turn; a warp keeps ⌈tiles/warps⌉ accumulator fragments, and the last round is
  guarded (the clean-up step).  hc splits real and imaginary parts into separate shared-memory
  buffers when storing them (the interleaved data is never copied to a planar layout in global
  memory) and does the four real products of a complex product.
- §5.6 post-processing: accumulators go to shared memory, then each thread applies alpha and (only
  when beta ≠ 0) beta·C while writing its DIM_X×DIM_Y tile of C.
- §5.8 tuning parameters and rules: `WmmaSpec.validate` (each refusal names its rule).
- sm_80+ (h only), `stages` > 0: the blocks of A and B go global -> shared memory through a ring of
  `stages` BLK_K slices filled by 16-byte cp.async copies, with no registers in between, and each
  thread block stays resident and works through several blocks of C (a persistent grid), so the
  copies of its next block are in flight during the Tensor Core work and the epilogue of the
  current one.  With beta != 0 and C aligned too, the old C block rides the ring with its item's
  last slice (a kernel of its own): read from global memory in the epilogue, each old value cost a
  full memory round trip, since the compiler cannot move a load of C above a store to C (h N = 64:
  0.66 of the floor with beta = 1 against 0.87 with beta = 0; with C in the ring 0.93).
  Register-staged loads (§5.3) keep too few bytes in flight to reach the memory bandwidth on an
  H100 (measured: 0.4-0.7 of the copy-bandwidth floor for N = 48..256, where cuBLAS's deep
  shared-memory pipeline reaches 0.86-1.0).  Shared memory mirrors the stored layout
  (a 16-byte chunk is 8 consecutive stored elements), so op(A) is row- or column-major in shared
  memory as A is transposed or not, and the fragments follow.  A launch whose operands are not
  16-byte aligned (leading dimensions or strides not multiples of 8, pointer arrays) or that runs
  below sm_80 takes the same tuple's register-staged kernel instead.
- sm_80+, `WmmaBlockSpec` (h and hc): blocks of warps on raw mma.sync, in the module `block`.
- §8.1 tiny sizes: `WmmaTinySpec` packs ⌊16/M⌋ GEMMs into one 16×16×16 Tensor Core operation
  (A's stacked down the rows, B's across the columns; the diagonal blocks of the product are the
  wanted GEMMs), fully unrolled for its shape like the small family.

Shared-memory layout (why): op(A) is kept as BLK_M rows of BLK_K (k contiguous) and op(B) as BLK_N
columns of BLK_K, each row padded by SKEW = 8 halves.  BLK_K + 8 is an odd multiple of 8, so every
fragment pointer is 32-byte aligned (a WMMA requirement) whatever TC_M and TC_N are, and the rows
of one ldmatrix fall in different banks.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import numpy as np

from ..arch import ARCHS, DEFAULT_ARCHS
from ..precision import PRECISIONS
from ..spec import Spec, SpecError, ceil_div, require, require_no_local_memory

PRECISIONS_WMMA = ("h", "hc")
TC_SHAPES = ((16, 16, 16), (32, 8, 16), (8, 32, 16))   # the WMMA fp16 shapes (§3)
ACCUMULATORS = ("f32", "f16")
SKEW = 8            # halves of padding per shared-memory row (see the module docstring)
MAX_THREADS = 512
REGISTER_BUDGET = 168   # estimated 32-bit registers per thread above which ptxas starts to spill
TINY_TC = 16        # the tiny variant uses the 16x16x16 shape

_NAME = re.compile(r"^wmma_(hc|h)_tc(\d+)x(\d+)x(\d+)_blk(\d+)x(\d+)x(\d+)_dim(\d+)x(\d+)_w(\d+)_(f32|f16)"
                   r"(?:_s(\d+))?$")
MAX_STAGES = 8
ASYNC_TC = (16, 16, 16)   # fragment pointers along a contiguous M or N must stay 32-byte aligned
_TINY = re.compile(r"^wmmatiny_(hc|h)_m(\d+)n(\d+)k(\d+)_w(\d+)$")
_WARP = re.compile(r"^wmmawarp_(h|hc)_m(\d+)n(\d+)k(\d+)_w(\d+)_s(\d+)_(f32|f16)$")
WARP_MAX_SIZE = 64          # one warp per GEMM: M, N, K up to this
WARP_MAX_ACC_REGISTERS = 128   # and its C's accumulators at most this many registers per thread


@dataclass(frozen=True, order=True)
class WmmaSpec(Spec):
    precision: str
    tc_m: int
    tc_n: int
    tc_k: int
    blk_m: int
    blk_n: int
    blk_k: int
    dim_x: int
    dim_y: int
    warps: int
    acc: str = "f32"
    stages: int = 0     # > 0: the sm_80+ cp.async ring of that many BLK_K slices (module docstring)

    family = "wmma"

    @property
    def headers(self) -> tuple[str, ...]:
        """The headers its source includes: the ring kernel's (whose launcher falls back on the register-staged
        kernel) where it has a ring, else the register-staged kernel's; the whole-GEMM path's where it has it."""
        return ((f"gemmgen_wmma_{'ring' if self.stages else 'general'}.cuh",)
                + (("gemmgen_wmma_whole.cuh",) if self.whole_path else ()))

    @property
    def name(self) -> str:
        return (f"wmma_{self.precision}_tc{self.tc_m}x{self.tc_n}x{self.tc_k}"
                f"_blk{self.blk_m}x{self.blk_n}x{self.blk_k}_dim{self.dim_x}x{self.dim_y}"
                f"_w{self.warps}_{self.acc}" + (f"_s{self.stages}" if self.stages else ""))

    @classmethod
    def parse(cls, name: str) -> "WmmaSpec":
        match = _NAME.match(name)
        if not match:
            raise SpecError("name", f"{name!r} is not a wmma kernel name "
                                    "(wmma_<h|hc>_tc<M>x<N>x<K>_blk<M>x<N>x<K>_dim<X>x<Y>_w<W>_<f32|f16>)")
        prec, *numbers, acc, stages = match.groups()
        spec = cls(prec, *(int(x) for x in numbers), acc, int(stages or 0))
        spec.validate()
        return spec

    # ---- derived quantities ------------------------------------------------------------------
    @property
    def parts(self) -> int:
        """Real buffers per operand: 2 for hc (real and imaginary split, §5.3)."""
        return 2 if self.precision == "hc" else 1

    @property
    def threads(self) -> int:
        return self.dim_x * self.dim_y

    @property
    def tc_tiles(self) -> int:
        """TC_BLOCKS of §5.5: Tensor Core tiles of C per thread block."""
        return (self.blk_m // self.tc_m) * (self.blk_n // self.tc_n)

    @property
    def fragments(self) -> int:
        """NFRAG of §5.5: accumulator fragments each warp keeps."""
        return ceil_div(self.tc_tiles, self.warps)

    @property
    def smem_ld(self) -> int:
        return self.blk_k + SKEW

    @property
    def input_smem_bytes(self) -> int:
        return (self.blk_m + self.blk_n) * self.smem_ld * 2 * self.parts

    @property
    def acc_bytes(self) -> int:
        return 4 if self.acc == "f32" else 2

    @property
    def output_smem_bytes(self) -> int:
        """Post-processing staging of C: one TC_M×TC_N tile after another (tile-major), so every
        store_matrix_sync pointer is aligned."""
        return self.blk_m * self.blk_n * self.acc_bytes * self.parts

    @property
    def smem_bytes(self) -> int:
        # The staging of C reuses the input buffers once the main loop is over.
        return max(self.input_smem_bytes, self.output_smem_bytes)

    @property
    def async_stage_bytes(self) -> int:
        """One slice of the ring: op(A) and op(B) blocks, each laid out as stored (rows of the
        stored-contiguous dimension padded by SKEW; the larger of the two layouts, since the
        transposes are chosen at run time)."""
        def block(outer: int) -> int:
            return max(outer * (self.blk_k + SKEW), self.blk_k * (outer + SKEW)) * 2
        return block(self.blk_m) + block(self.blk_n)

    @property
    def async_smem_bytes(self) -> int:
        """The ring plus its own staging of C (the next block's copies land while C is written)."""
        return self.stages * self.async_stage_bytes + self.output_smem_bytes

    @property
    def async_old_c_bytes(self) -> int:
        """With beta != 0 and C aligned, each slice of the ring also carries the old C block of the
        item whose last slice it is (BLK_M stored rows padded by SKEW, BLK_N columns)."""
        return self.stages * self.blk_n * (self.blk_m + SKEW) * 2

    @property
    def whole_path(self) -> bool:
        """Whether the tuple's source also holds the sm_90 whole-GEMM kernel (h with fp16
        accumulators): for rank-k updates (k ≤ 16, m, n ≤ 128, m·n ≥ 64·64, multiples of 8) with
        beta = 0 and aligned columns, a launch takes whole GEMMs through the tensor copy engine instead
        of the tuple's own kernels (the template's `wmma_whole_kernel` says why and what it measured).
        It has its own 8 warps, not the tuple's blocking."""
        return self.precision == "h" and self.acc == "f16"

    @property
    def register_estimate(self) -> int:
        """32-bit registers per thread: the prefetch buffers of A and B (one register per element;
        a __half2 is one), the accumulators, one A and one B fragment, and ~40 for addresses."""
        prefetch = (self.blk_m + self.blk_n) * self.blk_k // self.threads
        acc = self.fragments * self.tc_m * self.tc_n // 32 * self.acc_bytes // 4 * self.parts
        frags = (self.tc_m + self.tc_n) * self.tc_k // 32 // 2 * (2 if self.parts == 2 else 1)
        return prefetch + max(acc, 1) + frags + 40

    # ---- rules (§5.8 and the architecture) ----------------------------------------------------
    def validate(self, arch: str | None = None) -> "WmmaSpec":
        require(self.precision in PRECISIONS_WMMA, "precision",
                f"the wmma family covers h and hc, not {self.precision!r}")
        tc = (self.tc_m, self.tc_n, self.tc_k)
        require(tc in TC_SHAPES, "tensor core shape",
                f"TC {tc[0]}x{tc[1]}x{tc[2]} is not a WMMA fp16 shape "
                f"({', '.join('x'.join(map(str, s)) for s in TC_SHAPES)})")
        require(self.acc in ACCUMULATORS, "accumulator", f"acc must be f32 or f16, not {self.acc!r}")
        for dim, blk, t in (("M", self.blk_m, self.tc_m), ("N", self.blk_n, self.tc_n),
                            ("K", self.blk_k, self.tc_k)):
            require(blk > 0 and blk % t == 0, "TC divides BLK",
                    f"TC_{dim}={t} must divide BLK_{dim}={blk}")
        for name, d in (("DIM_X", self.dim_x), ("DIM_Y", self.dim_y)):
            for dim, blk in (("M", self.blk_m), ("N", self.blk_n), ("K", self.blk_k)):
                require(d > 0 and blk % d == 0, "DIM divides BLK",
                        f"{name}={d} must divide BLK_{dim}={blk} (blocks are read and written in "
                        "DIM_X×DIM_Y tiles)")
        require(self.threads % 32 == 0, "full warps",
                f"DIM_X·DIM_Y = {self.threads} is not a multiple of 32")
        require(self.warps * 32 == self.threads, "warps match threads",
                f"{self.warps} warps need DIM_X·DIM_Y = {self.warps * 32}, not {self.threads}")
        require(self.threads <= MAX_THREADS, "threads per block",
                f"{self.threads} threads exceed {MAX_THREADS}")
        require(self.warps <= self.tc_tiles, "no idle warps",
                f"{self.warps} warps for {self.tc_tiles} Tensor Core tiles of C leave "
                f"{self.warps - self.tc_tiles} warps without work (§5.4)")
        require(self.register_estimate <= REGISTER_BUDGET, "registers",
                f"about {self.register_estimate} registers per thread (prefetch of "
                f"{(self.blk_m + self.blk_n) * self.blk_k // self.threads} elements, "
                f"{self.fragments} accumulator fragments) exceed {REGISTER_BUDGET}")
        for a in ([arch] if arch else list(ARCHS)):
            limit = ARCHS[a].static_smem_per_block
            require(self.smem_bytes <= limit, "shared memory",
                    f"{self.smem_bytes} bytes of shared memory exceed {limit} on {a}")
        if self.stages:
            self._validate_async(arch)
        require_no_local_memory(self.name, arch)
        return self

    def _validate_async(self, arch: str | None) -> None:
        require(2 <= self.stages <= MAX_STAGES, "stages",
                f"stages={self.stages} must be 0 (register-staged loads) or 2..{MAX_STAGES}")
        require(self.precision == "h", "async precision",
                "the cp.async ring copies elements as stored; hc is split into real and imaginary "
                "planes on the way to shared memory, which needs registers (stages must be 0)")
        require((self.tc_m, self.tc_n, self.tc_k) == ASYNC_TC, "async tensor core shape",
                f"the cp.async ring keeps op(A) column-major and op(B) row-major for some transposes, "
                f"where a fragment at a multiple of TC_M or TC_N must be 32-byte aligned: TC must be "
                f"{'x'.join(map(str, ASYNC_TC))}, not {self.tc_m}x{self.tc_n}x{self.tc_k}")
        # Without an arch: the default ones (the ring's shared memory differs by architecture; a
        # table row that does not fit another one is refused there when its dispatch is built).
        for a in ([arch] if arch else DEFAULT_ARCHS):
            if ARCHS[a].cc < 80:
                continue   # the register-staged kernel runs there
            limit = ARCHS[a].smem_per_sm - 1024   # the opt-in maximum per block
            require(self.async_smem_bytes <= limit, "async shared memory",
                    f"{self.stages} stages of {self.async_stage_bytes} bytes and {self.output_smem_bytes} "
                    f"bytes of C staging exceed {limit} on {a}")


@dataclass(frozen=True, order=True)
class WmmaTinySpec(Spec):
    """§8.1: several GEMMs of one shape (M, N, K ≤ 16) per 16×16×16 Tensor Core operation."""
    precision: str
    m: int
    n: int
    k: int
    warps: int

    family = "wmmatiny"
    headers = ("gemmgen_wmma_tiny.cuh",)   # what its source includes

    @property
    def name(self) -> str:
        return f"wmmatiny_{self.precision}_m{self.m}n{self.n}k{self.k}_w{self.warps}"

    @classmethod
    def parse(cls, name: str) -> "WmmaTinySpec":
        match = _TINY.match(name)
        if not match:
            raise SpecError("name", f"{name!r} is not a tiny wmma kernel name "
                                    "(wmmatiny_<h|hc>_m<M>n<N>k<K>_w<W>)")
        prec, *numbers = match.groups()
        spec = cls(prec, *(int(x) for x in numbers))
        spec.validate()
        return spec

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.m, self.n, self.k)

    @property
    def parts(self) -> int:
        return 2 if self.precision == "hc" else 1

    @property
    def per_op(self) -> int:
        """GEMMs packed into one Tensor Core operation (Fig. 16)."""
        return min(TINY_TC // self.m, TINY_TC // self.n)

    @property
    def gemms_per_block(self) -> int:
        return self.per_op * self.warps

    @property
    def threads(self) -> int:
        return 32 * self.warps

    @property
    def tc_utilization(self) -> float:
        """Fig. 17: the fraction of a 16×16×16 operation's multiply-adds that are wanted."""
        return self.per_op * self.m * self.n * self.k / TINY_TC ** 3

    @property
    def smem_bytes(self) -> int:
        # Per warp: the A and B tiles (their zero padding must survive, so the fp32 staging of
        # the product does not reuse them).
        inputs = 2 * TINY_TC * (TINY_TC + SKEW) * 2 * self.parts
        staging = TINY_TC * TINY_TC * 4 * self.parts
        return self.warps * (inputs + staging)

    def validate(self, arch: str | None = None) -> "WmmaTinySpec":
        require(self.precision in PRECISIONS_WMMA, "precision",
                f"the wmma family covers h and hc, not {self.precision!r}")
        for dim, value in (("m", self.m), ("n", self.n), ("k", self.k)):
            require(1 <= value <= TINY_TC, "size",
                    f"{dim}={value} is outside 1..{TINY_TC} (one 16x16x16 Tensor Core operation)")
        require(1 <= self.warps <= 16, "warps", f"warps={self.warps} must be in 1..16")
        for a in ([arch] if arch else list(ARCHS)):
            limit = ARCHS[a].static_smem_per_block
            require(self.smem_bytes <= limit, "shared memory",
                    f"{self.smem_bytes} bytes of shared memory exceed {limit} on {a}")
        require_no_local_memory(self.name, arch)
        return self


@dataclass(frozen=True, order=True)
class WmmaWarpSpec(Spec):
    """One warp per GEMM of a fixed shape (M, N, K ≤ 64) on raw mma.sync.m16n8k16, each warp with its
    own ring of `stages` stages that hold a GEMM's A, B and C as stored (gemmgen_wmma_warp.cuh,
    wmma_warp_kernel, says why); `warps` warps per block, fp32 or fp16 sums.  h and hc: hc is
    multiplied as the real product it embeds (M × 2K times 2K × 2N), interleaved throughout.  sm_80+
    only (cp.async, m16n8k16): before it the kernel compiles empty and the dispatch takes the table
    row's other choice (manifest._shape_choice)."""
    precision: str
    m: int
    n: int
    k: int
    warps: int
    stages: int
    acc: str

    family = "wmmawarp"
    headers = ("gemmgen_wmma_warp.cuh",)   # what its source includes
    copies_through_ring = True   # each warp its own ring

    @property
    def name(self) -> str:
        return f"wmmawarp_{self.precision}_m{self.m}n{self.n}k{self.k}_w{self.warps}_s{self.stages}_{self.acc}"

    @classmethod
    def parse(cls, name: str) -> "WmmaWarpSpec":
        match = _WARP.match(name)
        if not match:
            raise SpecError("name", f"{name!r} is not a warp wmma kernel name "
                                    "(wmmawarp_<h|hc>_m<M>n<N>k<K>_w<W>_s<S>_<f32|f16>)")
        prec, m, n, k, w, st, acc = match.groups()
        spec = cls(prec, int(m), int(n), int(k), int(w), int(st), acc)
        spec.validate()
        return spec

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.m, self.n, self.k)

    @property
    def threads(self) -> int:
        return 32 * self.warps

    @staticmethod
    def _cover_halves(halves: int) -> int:
        return 8 * ((halves + 14) // 8)   # whole 16-byte chunks, room for any start within a chunk

    @property
    def parts(self) -> int:
        """Halves per element: 1 (h), 2 (hc, interleaved)."""
        return parts_of(self.precision)

    @property
    def stage_bytes(self) -> int:
        m, n, k, parts = self.m, self.n, self.k, self.parts
        return 2 * sum(self._cover_halves(parts * e) for e in (m * k, k * n, m * n))

    @property
    def accumulator_registers(self) -> int:
        """Per lane: one m16n8 tile of the real product (hc: M × 2N) takes 4 fp32 or 2 fp16x2 registers."""
        tiles = -(-self.m // 16) * -(-self.parts * self.n // 8)
        return tiles * (4 if self.acc == "f32" else 2)

    @property
    def smem_bytes(self) -> int:
        return self.warps * self.stages * self.stage_bytes

    def validate(self, arch: str | None = None) -> "WmmaWarpSpec":
        require(self.precision in PRECISIONS_WMMA, "precision",
                f"the warp kernel covers {', '.join(PRECISIONS_WMMA)}, not {self.precision!r}")
        for dim, value in (("m", self.m), ("n", self.n), ("k", self.k)):
            require(1 <= value <= WARP_MAX_SIZE, "size",
                    f"{dim}={value} is outside 1..{WARP_MAX_SIZE} (one warp per GEMM)")
        # The accumulators of an h 64×64 C take 128 registers per thread with fp32 sums; an hc C of the
        # same size, twice as many real columns, would take 256.
        require(self.accumulator_registers <= WARP_MAX_ACC_REGISTERS, "accumulator registers",
                f"{self.m}×{self.n} {self.precision} with {self.acc} sums takes {self.accumulator_registers} "
                f"accumulator registers per thread, over {WARP_MAX_ACC_REGISTERS}")
        require(1 <= self.warps <= 8, "warps", f"warps={self.warps} must be in 1..8 (blocks of up to 256 threads)")
        require(2 <= self.stages <= 4, "stages", f"stages={self.stages} must be in 2..4")
        require(self.acc in ACCUMULATORS, "accumulator", f"acc must be f32 or f16, not {self.acc!r}")
        # One warp's stages must fit a block's opt-in shared memory (the launcher runs fewer warps per
        # block where all of them do not).
        for a in ([arch] if arch else DEFAULT_ARCHS):
            limit = ARCHS[a].smem_per_sm - 1024
            require(self.stages * self.stage_bytes <= limit, "shared memory",
                    f"{self.stages} stages of {self.stage_bytes} bytes exceed {limit} on {a}")
        require_no_local_memory(self.name, arch)
        return self

    def k_stride(self, ta: str, tb: str) -> int:
        """The order of k in the kernel's fragments for A and B stored as ta, tb (warp_k_stride)."""
        return warp_k_stride(self.precision, self.m, self.n, self.k, ta, tb)


# The warp kernel reads its fragments element by element from stages that hold A and B as stored (no
# padding: a contiguous matrix is one cp.async range).  In the m16n8k16 fragments the four lanes t of a
# row group read k = 2t + const (hc: complex k = t + const), so with 'N' A they read halves 2·M apart:
# M = 63 puts them on one bank (4-way conflicts; 0.53 of the floor in the tuner's 64 MB runs against
# 0.79 at M = 60).  Σ_k A(r, k)·B(k, c) does not care in which order k runs, so each lane's k slots
# q = 0, 1, ... (h: q = 4·kt + 2j + h for the register halves h of k-step kt; hc: q = 2·kt + j) read
#     k = q mod s + s·t + 4s·⌊q / s⌋,
# a permutation of 0 .. KP − 1 (K padded to whole k-steps) for every stride s dividing the lane's slot
# count, taken by A and B alike.  s = 2 (h) or 1 (hc) is the order of the PTX fragments; k stays affine
# in t, so every read is still one base register plus a constant.  warp_k_stride picks s per shape and
# stored layout pair by a model of the kernel's reads (every lane's address, both starts of a matrix
# within a word): the cheapest reads (_read_cost), the PTX order where nothing is cheaper.
# A read that some lanes of a warp skip (their k is past K) costs a predicate and a zeroing move on top
# of its wavefronts (a read no lane makes is not emitted at all): counted as half a wavefront.  (h 55:
# stride 16 against the PTX order saved 16 wavefronts for 120 more such reads, and fell from 0.84 to 0.80
# of the floor at batch 1000, docs/experiments/warp_k_order/.)
PARTIAL_READ_COST = 0.5


def _read_cost(addresses: np.ndarray, valid: np.ndarray) -> float:
    """The cost of warp-wide shared-memory reads: addresses (bytes) and valid are (..., 32), one row per
    read.  A read takes, over the 32 banks, the most distinct 4-byte words asked of one bank
    (wavefronts), plus PARTIAL_READ_COST where only some lanes read."""
    valid = valid.reshape(-1, 32)
    words = np.where(valid, addresses.reshape(-1, 32) // 4, -1)
    words.sort(axis=1)
    first = (words >= 0) & np.concatenate([np.ones((len(words), 1), bool), words[:, 1:] != words[:, :-1]], axis=1)
    per_bank = ((words[:, :, None] % 32 == np.arange(32)) & first[:, :, None]).sum(axis=1)
    partial = valid.any(axis=1) & ~valid.all(axis=1)
    return float(per_bank.max(axis=1).sum() + PARTIAL_READ_COST * partial.sum())


def parts_of(precision: str) -> int:
    """Halves per element: 1 (h), 2 (hc, interleaved)."""
    return PRECISIONS[precision].element_bytes // 2


def warp_k_slots(precision: str, k: int) -> int:
    """The k slots of one lane in the warp kernel: a quarter of K padded to whole k-steps."""
    parts = parts_of(precision)
    return -(-parts * k // 16) * 16 // parts // 4


def warp_k(q, t, stride: int):
    """k of lane t's slot q in the warp kernel's fragments (the template's warp_k)."""
    return q % stride + stride * t + 4 * stride * (q // stride)


@functools.lru_cache(maxsize=None)
def warp_k_stride(precision: str, m: int, n: int, k: int, ta: str, tb: str) -> int:
    """The stride s of the warp kernel's k order for A and B stored as ta, tb ('C' is stored as 'T'):
    the one whose fragment reads cost least (_read_cost; see above)."""
    parts = parts_of(precision)
    element = 2 * parts                              # bytes
    slots = warp_k_slots(precision, k)
    g = np.arange(8)[:, None]                        # lane = 4·g + t: arrays below are (..., 8, 4)
    t = np.arange(4)[None, :]
    rows = np.stack([16 * rt + g + 8 * i + 0 * t for rt in range(-(-m // 16)) for i in (0, 1)])   # A fragments
    cols = np.stack([8 // parts * ct + g // parts + 0 * t for ct in range(-(-parts * n // 8))])  # B fragments
    starts = np.arange(0, 4, element)[:, None, None, None, None]   # the matrix's start within a word
    r, c = rows[None, None], cols[None, None]                        # (1, 1, groups, 8, 4)

    def cost(stride: int) -> float:
        kk = np.stack([warp_k(q, t, stride) + 0 * g for q in range(slots)])[None, :, None]   # (1, slots, 1, 8, 4)
        a = (r + kk * m if ta == "N" else kk + r * k) * element + starts
        b = (kk + c * k if tb == "N" else c + kk * n) * element + starts
        return (_read_cost(a, np.broadcast_to((r < m) & (kk < k), a.shape))
                + _read_cost(b, np.broadcast_to((c < n) & (kk < k), b.shape)))

    in_order = 2 // parts
    # h: even strides only, so that a register's two halves stay k and k + 1 as in PTX order (stride 1
    # took h 13×13×13 from 80 to 86 registers, two blocks per SM instead of three: 0.80 → 0.71 of the
    # floor in the tuner, and 37, 38 the same way).
    costs = {s: cost(s) for s in range(in_order, slots + 1, in_order) if slots % s == 0}
    return min(costs, key=lambda s: (costs[s], s != in_order, s))


# hc GEMMs from this size (m, n and k) run sm_90a's wgmma kernel where it applies, before the table's
# choice (gemmgen/templates/wmma/wgmma_hc.cu.j2).  Since its producer warp it is ahead of the tuned block kernels
# from 72 up (72: 34.9 against 45.1 us, 104: 52.3 against 95.6 us at batch 1000, H100) and ties them at 64
# (20.4 against 21.3 us) (docs/experiments/wgmma_hc_tiles/).
WGMMA_HC_MIN_SIZE = 64
# With beta ≠ 0 it runs too (old C brought in by the copy engine), with k from WGMMA_HC_MIN_K: squares with
# beta = 1 1.1-2.8x as fast as the table's kernels at batch 1000 on the H100, rank-16 updates 1.0-1.9x
# (0.93-0.96x at 128 and 256); rank-16 updates with beta = 0 stay with the table's kernels, which were as fast
# or faster at 96-128 and 232-256 past L2 (docs/experiments/wgmma_hc_beta/).
WGMMA_HC_MIN_K = 16
WGMMA_HC_SOURCE = "src/wmmahopper/gemmgen_wgmma_hc.cu"


SWEEP_WARP = tuple((w, s, acc) for w in (4, 8) for s in (2, 3) for acc in ACCUMULATORS)
# hc: fp16 sums only (its real product is twice as wide, so fp32 sums would take twice the registers
# and stop at 32×32; the hc tables chose fp16 sums at every size from 13 anyway), and from size 13:
# below it the small family reaches 0.89–1.05 of the floor (docs/perf/bench_small_sm_90.md).
WARP_ACC_HC = ("f16",)
WARP_MIN_SIZE_HC = 13


def warp_candidates(precision: str, m: int, n: int, k: int, arch: str = "sm_90") -> list[WmmaWarpSpec]:
    """The warp kernels the sweep times at a shape (valid on `arch` and every default architecture)."""
    if precision == "hc" and max(m, n, k) < WARP_MIN_SIZE_HC:
        return []
    return [s for w, st, acc in SWEEP_WARP
            if precision == "h" or acc in WARP_ACC_HC
            if (s := WmmaWarpSpec(precision, m, n, k, w, st, acc)).is_valid(arch) and s.is_valid()]
