"""The tall-and-skinny families TSM2 and ISM2 (Rivera et al.), their specs and
the paper's performance model (§3.6.2, Algorithm 5).

TSM2 (§3): C = alpha·op(A)·op(B) + beta·C with op(A) m×k large and op(B) k×n tall and skinny.
One thread per row of C (outer-product form, Alg. 2), t1 threads per block which also load a
t1×t2 tile of op(B) into shared memory (Alg. 3), t2 columns of C in registers per pass, t3
elements of A loaded at a time, next A chunk and next B tile prefetched into registers (Alg. 4).
Beyond the paper: `kg` groups of t1 threads per block split k inside the block (each group owns a
contiguous k-range, partial sums are reduced through shared memory, deterministic): on an H100
m = 10240 rows are 78 threads per SM, far too few bytes in flight for Little's law.  kg is a
launch-time choice (the dispatch derives it from m and the SM count), not part of the kernel.

ISM2 (§5): op(A) tall and skinny, op(B) tiny.  m/tcf threads each handle tcf rows (grid-stride);
optimization 1 (Alg. 6) runs the TSM2 body per row, optimization 2 (Alg. 7) walks the B tiles in
the outer loop and keeps the partial sums in C.  tcf is a launch-time choice as well.

Every variant is specialized on n (compile time) and handles any m, k, lda, ldb, ldc (no
divisibility assumed; 64-bit offsets wherever row·ld or col·ld can pass 2^31).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace

from .arch import ARCHS
from .precision import PRECISIONS
from .spec import Spec, SpecError, ceil_div, parse_ranges, require

PRECISIONS_TS = ("h", "s", "d")      # real precisions; h = fp16 storage, fp32 accumulation
DEFAULT_NS = tuple(range(1, 33))
TUNED_NS = (2, 4, 8, 16, 24, 32)     # swept by `gemmgen tune tallskinny`: the papers' n, and 24, 32 for n > 16;
                                     # every other n borrows the nearest tuned n's blocking
TUNED_ISM2_NS = (8, 16)              # swept by `gemmgen tune tallskinny` for ISM2 (k = n)
MAX_N = 256                          # "any n on request": t2 ≤ n keeps registers bounded
MAX_REGS = 255
THREAD_BLOCK_SIZES = (32, 64, 128, 256, 512)
SMEM_LIMIT = 48 * 1024               # dynamic shared memory without an opt-in attribute
RING_SMEM_LIMIT = 64 * 1024          # a ring group's opt-in shared memory: every listed arch allows it
RING_STAGES = (2, 3, 4, 5, 6, 7, 8)

_TSM2_NAME = re.compile(r"^tsm2_(h|s|d)_n(\d+)_t(\d+)x(\d+)x(\d+)(?:_r(\d+))?(?:_s(\d+))?$")
_ISM2_NAME = re.compile(r"^ism2_(h|s|d)_n(\d+)_t(\d+)x(\d+)x(\d+)_opt([12])$")
_TSMMA_NAME = re.compile(r"^tsmma_([dh])_upto(\d+)_w(\d+)x(\d+)_k(\d+)(?:_g(\d+))?_s(\d+)$")


def compute_bytes(precision: str) -> int:
    """Bytes of the accumulation type (fp16 accumulates in fp32)."""
    return 8 if precision == "d" else 4


def storage_bytes(precision: str) -> int:
    return PRECISIONS[precision].element_bytes


def smem_row(precision: str, t2: int) -> int:
    """Shared-memory row length (elements) of a B tile: t2 rounded up to 16 bytes so a thread
    reads a row of op(B) with 128-bit broadcast loads."""
    per16 = 16 // compute_bytes(precision)
    return ceil_div(t2, per16) * per16


def register_estimate(precision: str, t2: int, t3: int, setup: int = 24, rows: int = 1) -> int:
    """§3.6.2: R_thread = (3·t2 + 2·t3)·bytes_per_element/bytes_per_register + C (C = `setup`,
    the fixed registers of indexing and loop control, from ptxas reports).  With `rows` rows of C
    per thread (beyond the paper) the C and A registers are per row: (t2·(rows + 2) + 2·t3·rows)."""
    words = compute_bytes(precision) // 4
    return (t2 * (rows + 2) + 2 * t3 * rows) * words + setup


def ring_register_estimate(precision: str, t2: int, rows: int, setup: int = 52) -> int:
    """The ring path holds no chunk of A in registers: t2·rows accumulators, t2 values of the B
    row and one element of A per row, a 64-bit pointer per row, plus `setup`.  The factor 1.25 and
    setup = 52 are fitted to ptxas on sm_90 over all transpose pairs (d with 2 rows: n = 16 uses
    170 registers, n = 25 fits, n = 26 and 27 spill; s n = 32 with 2 rows: 168), so a spec that
    passes this rule does not spill."""
    words = compute_bytes(precision) // 4
    return math.ceil(1.25 * (t2 * (rows + 1) + rows) * words) + 2 * rows + setup


@dataclass(frozen=True, order=True)
class Tsm2Spec(Spec):
    precision: str
    n: int
    t1: int     # threads per group = rows of C per block = rows of a B tile
    t2: int     # columns of C per pass (registers)
    t3: int     # elements of A per load (memory concurrency)
    rows: int = 1   # rows of C per thread (beyond the paper: B values reused from registers)
    stages: int = 0  # 0: A chunks through registers (Alg. 4); else a ring of this many chunks in
                     # shared memory filled by cp.async (beyond the paper: bytes in flight without
                     # registers, which bound n = 16 on the H100); fp16 copies pairs of rows

    family = "tsm2"
    headers = ("gemmgen_tallskinny_tsm2.cuh",)   # what its source includes

    @property
    def name(self) -> str:
        base = f"tsm2_{self.precision}_n{self.n}_t{self.t1}x{self.t2}x{self.t3}"
        return (base + (f"_r{self.rows}" if self.rows != 1 else "")
                + (f"_s{self.stages}" if self.stages else ""))

    @classmethod
    def parse(cls, name: str) -> "Tsm2Spec":
        m = _TSM2_NAME.match(name)
        if not m:
            raise SpecError("name", f"{name!r} is not a tsm2 kernel name "
                                    "(tsm2_<prec>_n<N>_t<t1>x<t2>x<t3>[_r<rows>][_s<stages>])")
        prec, n, t1, t2, t3, rows, stages = m.groups()
        return cls(prec, int(n), int(t1), int(t2), int(t3), int(rows or 1), int(stages or 0)).validate()

    @property
    def t2p(self) -> int:
        return smem_row(self.precision, self.t2)

    @property
    def ring_bytes(self) -> int:
        return self.stages * self.rows * self.t3 * self.t1 * storage_bytes(self.precision)

    @property
    def smem_per_group(self) -> int:
        """The B tile and the ring, or the groups' partial sums after the k loop (same space)."""
        cb = compute_bytes(self.precision)
        return max(self.t1 * self.t2p * cb + self.ring_bytes, self.t1 * self.rows * self.t2 * cb)

    @property
    def registers(self) -> int:
        path = register_estimate(self.precision, self.t2, self.t3, rows=self.rows)
        if not self.stages:
            return path
        ring = ring_register_estimate(self.precision, self.t2, self.rows)
        # fp16 rings keep the register path for unaligned or transposed A in the same kernel.
        return max(ring, path) if storage_bytes(self.precision) == 2 else ring

    def validate(self, arch: str | None = None) -> "Tsm2Spec":
        _common_rules(self.precision, self.n, self.t1, self.t2, self.t3)
        require(self.rows in (1, 2, 4), "rows", f"rows={self.rows} must be 1, 2 or 4")
        require(self.stages == 0 or self.stages in RING_STAGES, "stages",
                f"stages={self.stages} must be 0 (no ring) or {RING_STAGES[0]}..{RING_STAGES[-1]}")
        require(self.stages == 0 or storage_bytes(self.precision) in (4, 8) or self.rows % 2 == 0,
                "cp.async element", f"cp.async copies at least 4 bytes: a {self.precision} ring copies pairs "
                                    f"of adjacent rows, so rows must be 2 or 4 (rows={self.rows})")
        require(self.registers <= MAX_REGS, "registers",
                f"{self.rows} rows per thread need about {self.registers} registers (> {MAX_REGS})")
        limit = RING_SMEM_LIMIT if self.stages else SMEM_LIMIT
        require(self.smem_per_group <= limit, "shared memory",
                f"one group needs {self.smem_per_group} bytes (> {limit})")
        return self


@dataclass(frozen=True, order=True)
class Ism2Spec(Spec):
    precision: str
    n: int
    t1: int     # threads per block = rows of a B tile
    t2: int
    t3: int
    opt: int    # 1: Alg. 6 (TSM2 body per row), 2: Alg. 7 (B tiles outside, partial sums in C)

    family = "ism2"
    headers = ("gemmgen_tallskinny_ism2.cuh",)   # what its source includes

    @property
    def name(self) -> str:
        return f"ism2_{self.precision}_n{self.n}_t{self.t1}x{self.t2}x{self.t3}_opt{self.opt}"

    @classmethod
    def parse(cls, name: str) -> "Ism2Spec":
        m = _ISM2_NAME.match(name)
        if not m:
            raise SpecError("name", f"{name!r} is not an ism2 kernel name "
                                    "(ism2_<prec>_n<N>_t<t1>x<t2>x<t3>_opt<1|2>)")
        prec, *nums = m.groups()
        return cls(prec, *(int(x) for x in nums)).validate()

    @property
    def t2p(self) -> int:
        return smem_row(self.precision, self.t2)

    @property
    def smem_per_group(self) -> int:
        return self.t1 * self.t2p * compute_bytes(self.precision)

    @property
    def registers(self) -> int:
        return register_estimate(self.precision, self.t2, self.t3)

    def validate(self, arch: str | None = None) -> "Ism2Spec":
        _common_rules(self.precision, self.n, self.t1, self.t2, self.t3)
        require(self.opt in (1, 2), "opt", f"opt={self.opt}: ISM2 has optimizations 1 and 2 (§5.2)")
        return self


TSMMA_PRECISIONS = ("d", "h")
TSMMA_MAX_N = 32                 # NT = 4 tiles of 8 columns: the accumulators of 8 row tiles fit the registers
TSMMA_SMEM_LIMIT = 99 * 1024     # opt-in shared memory of a block on every sm_80+ architecture (sm_86/89: 99 KB)
TSMMA_MIN_CC = 80                # mma.sync (m8n8k4.f64, m16n8k16.f16) and cp.async
TSMMA_TILE_ROWS = {"d": 8, "h": 16}          # rows of the mma's C tile
TSMMA_BK = {"d": (4, 8, 16, 32), "h": (16, 32, 64)}   # multiples of the mma's k (4, 16)
# A block of at most 256 threads: h blocks of 512 (4 warps × 4 k groups) spilled with op(B) = B^T under
# CUDA 13.0's ptxas, which held them to 64 registers (the H200 host's nvcc did not).
TSMMA_MAX_THREADS = 256


@dataclass(frozen=True, order=True)
class TsmmaSpec(Spec):
    """TSM2's product on the Tensor Cores (beyond the paper; gemmgen_tallskinny_tsmma.cuh says how): d on
    the fp64 mma, h on the fp16 mma with fp32 sums.  `warps` warps per block stacked along m, each `tiles`
    row tiles of C (8 rows in d, 16 in h) by every column, `bk` columns of op(A) per stage of a
    `stages`-deep cp.async ring; h only: `kgroups` groups of those warps split each stage's columns and
    add their sums in the block (fp16 C takes no atomic sums across blocks).  op(A) = A only (the
    dispatch sends op(A) = A^T to TSM2); sm_80 and up.  `max_n` (8, 16, 24 or 32): the columns of C a block
    holds, as max_n / 8 tiles of the mma's 8 columns; one kernel serves every n from max_n - 7 to max_n, n
    being a launch argument (the kernel masks the columns past it), so a table that chooses one blocking
    for several n compiles it once."""
    precision: str
    max_n: int
    warps: int
    tiles: int
    bk: int
    stages: int
    kgroups: int = 1

    family = "tsmma"
    headers = ("gemmgen_tallskinny_tsmma.cuh",)
    a_layouts = ("N",)           # the op(A) its launchers serve

    @property
    def name(self) -> str:
        groups = f"_g{self.kgroups}" if self.precision == "h" else ""
        return f"tsmma_{self.precision}_upto{self.max_n}_w{self.warps}x{self.tiles}_k{self.bk}{groups}_s{self.stages}"

    @classmethod
    def parse(cls, name: str) -> "TsmmaSpec":
        m = _TSMMA_NAME.match(name)
        if not m:
            raise SpecError("name", f"{name!r} is not a tsmma kernel name "
                                    "(tsmma_d_upto<N>_w<warps>x<tiles>_k<bk>_s<stages>, "
                                    "tsmma_h_upto<N>_w<warps>x<tiles>_k<bk>_g<kgroups>_s<stages>)")
        prec, max_n, warps, tiles, bk, groups, stages = m.groups()
        if (groups is None) != (prec == "d"):
            raise SpecError("name", f"{name!r}: h TSMMA names carry _g<kgroups>, d ones do not")
        return cls(prec, int(max_n), int(warps), int(tiles), int(bk), int(stages), int(groups or 1)).validate()

    @property
    def tile_rows(self) -> int:
        return TSMMA_TILE_ROWS.get(self.precision, 8)

    @property
    def block_rows(self) -> int:
        return self.tile_rows * self.tiles * self.warps

    @property
    def t1(self) -> int:          # manifest.json's tall-skinny fields: threads per block,
        return 32 * self.warps * self.kgroups

    @property
    def t2(self) -> int:          # columns of C per pass (all it serves),
        return self.max_n

    def serves(self, n: int) -> bool:
        """The n this kernel is for: those of its last 8-column tile (a smaller n runs on a kernel of
        fewer tiles; the launcher refuses any other n with GEMMGEN_NOT_GENERATED)."""
        return self.max_n - 8 < n <= self.max_n

    @property
    def t3(self) -> int:          # columns of op(A) per stage
        return self.bk * self.kgroups

    @property
    def smem_bytes(self) -> int:
        """The ring, as TsmmaShape (d) and TsmmaHalfShape (h) lay it out."""
        np_ = self.max_n
        if self.precision == "h":
            ks, bm = self.bk * self.kgroups, self.block_rows
            lda, ldb_n, ldb_t = (ceil_div(bm, 32) * 32 + 8, ceil_div(ks, 32) * 32 + 8, ceil_div(np_, 32) * 32 + 8)
            ring = self.stages * (ks * lda + max(np_ * ldb_n, ks * ldb_t)) * 2
            sums = (self.kgroups - 1) * self.warps * 32 * self.tiles * (np_ // 8) * 4 * 4
            return max(ring, sums)
        lda = self.block_rows + (24 - self.block_rows % 16) % 16     # A: LDA ≡ 8 mod 16 doubles
        ldb = self.bk + (20 - self.bk % 16) % 16                     # B: LDB ≡ 4 mod 16
        return self.stages * (self.bk * lda + np_ * ldb) * 8

    @property
    def registers(self) -> int:
        """A bound for the rule, not a fit.  d: 2 per double: the accumulators (tiles × column tiles × 2),
        one A and one B fragment per tile, plus 40 for the indexing (ptxas on sm_90, n = 32: 4 warps × 4
        tiles 96 registers against 120 estimated, 2 × 8 tiles 194-202 against 192).  h: 4 fp32 sums per
        tile pair, 4 A and 2 B registers per tile, the lane's offsets (2 + 2 per column tile) plus 40.
        Every emitted TSMMA kernel is checked spill-free when it is built."""
        nt = self.max_n // 8
        if self.precision == "h":
            return 4 * self.tiles * nt + 4 * self.tiles + 4 * nt + 2 + 40
        return 2 * (2 * self.tiles * nt + self.tiles + nt) + 40

    def validate(self, arch: str | None = None) -> "TsmmaSpec":
        require(self.precision in TSMMA_PRECISIONS, "precision",
                f"{self.precision!r}: TSMMA multiplies on the Tensor Cores in {', '.join(TSMMA_PRECISIONS)}")
        require(self.max_n % 8 == 0 and 8 <= self.max_n <= TSMMA_MAX_N, "max_n",
                f"max_n={self.max_n} must be 8, 16, 24 or 32 (whole 8-column tiles up to {TSMMA_MAX_N})")
        require(self.warps in (1, 2, 4, 8), "warps", f"warps={self.warps} must be 1, 2, 4 or 8")
        require(self.tiles in (1, 2, 4, 8), "tiles", f"tiles={self.tiles} must be 1, 2, 4 or 8")
        bks = TSMMA_BK[self.precision]
        require(self.bk in bks, "bk", f"bk={self.bk} must be one of {', '.join(map(str, bks))} in "
                                      f"{self.precision} (a multiple of the mma's k)")
        require(2 <= self.stages <= 8, "stages", f"stages={self.stages} must be 2..8")
        require(self.kgroups in ((1, 2, 4, 8) if self.precision == "h" else (1,)), "kgroups",
                f"kgroups={self.kgroups}: h splits k among 1, 2, 4 or 8 groups of warps, d across blocks (1)")
        require(self.t1 <= TSMMA_MAX_THREADS, "threads",
                f"{self.warps} warps × {self.kgroups} k groups = {self.t1} threads (> {TSMMA_MAX_THREADS})")
        regs_cap = min(MAX_REGS, 65536 // self.t1)   # one block must fit the register file
        require(self.registers <= regs_cap, "registers",
                f"{self.tiles} row tiles by {self.max_n // 8} column tiles need about {self.registers} "
                f"registers (> {regs_cap} for {self.t1} threads)")
        require(self.smem_bytes <= TSMMA_SMEM_LIMIT, "shared memory",
                f"the ring needs {self.smem_bytes} bytes (> {TSMMA_SMEM_LIMIT})")
        require(arch is None or ARCHS[arch].cc >= TSMMA_MIN_CC, "architecture",
                f"{arch} has no mma.sync and cp.async for TSMMA (sm_{TSMMA_MIN_CC} and up)")
        return self


def _common_rules(precision: str, n: int, t1: int, t2: int, t3: int) -> None:
    require(precision in PRECISIONS_TS, "precision",
            f"{precision!r}: the tall-skinny families cover {', '.join(PRECISIONS_TS)}")
    require(1 <= n <= MAX_N, "n", f"n={n} is outside 1..{MAX_N}")
    require(t1 % 32 == 0 and 32 <= t1 <= 1024, "t1",
            f"t1={t1} must be a multiple of the warp size in 32..1024 (a group syncs as whole warps)")
    require(1 <= t2 <= n, "t2", f"t2={t2} must be between 1 and n={n} (§3.6.1)")
    require(1 <= t3 <= t1 and t1 % t3 == 0, "t3",
            f"t3={t3} must divide t1={t1} (the A chunks tile a B tile exactly)")
    regs = register_estimate(precision, t2, t3)
    require(regs <= MAX_REGS, "registers",
            f"(3·t2 + 2·t3)·words + C = {regs} registers exceed {MAX_REGS} (§3.6.2)")
    smem = t1 * smem_row(precision, t2) * compute_bytes(precision)
    require(smem <= SMEM_LIMIT, "shared memory",
            f"a {t1}x{t2} B tile needs {smem} bytes (> {SMEM_LIMIT})")


# ---- the performance model (§3.6.2) ------------------------------------------------------------------
@dataclass(frozen=True)
class DeviceModel:
    """What the model needs to know about a GPU.  Latencies are the paper's profiling constants."""
    name: str
    sms: int
    clock_hz: float
    regs_per_sm: int
    smem_per_sm: int
    max_threads_per_sm: int
    bandwidth: float                      # bytes/s (peak, or the measured copy bandwidth)
    peak_flops: dict = field(default_factory=dict)   # precision -> flop/s (FMA = 2)
    latency_mem: float = 600.0            # cycles, global load
    latency_comp: float = 4.0             # cycles, FMA (fp64: 8)
    latency_comp_fp64: float = 8.0

    def flops(self, precision: str) -> float:
        return self.peak_flops[precision]


H100_SXM = DeviceModel(
    "NVIDIA H100 80GB HBM3", sms=132, clock_hz=1.98e9, regs_per_sm=65536, smem_per_sm=228 * 1024,
    max_threads_per_sm=2048, bandwidth=3.35e12,
    peak_flops={"h": 66.9e12, "s": 66.9e12, "d": 33.5e12})   # non-tensor FMA rates


def device_model_from_cupy(bandwidth: float | None = None) -> DeviceModel:
    """The model's device from the GPU present (SM count, register file, shared memory, clock);
    peak rates per SM scale the H100's numbers by SM count and clock."""
    import cupy as cp

    p = cp.cuda.runtime.getDeviceProperties(0)
    name = p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])
    sms = int(p["multiProcessorCount"])
    clock = float(p.get("clockRate", 0) or 0) * 1e3 or H100_SXM.clock_hz
    scale = sms * clock / (H100_SXM.sms * H100_SXM.clock_hz)
    return DeviceModel(name, sms, clock, int(p["regsPerMultiprocessor"]),
                       int(p["sharedMemPerMultiprocessor"]), int(p["maxThreadsPerMultiProcessor"]),
                       bandwidth or H100_SXM.bandwidth,
                       {k: v * scale for k, v in H100_SXM.peak_flops.items()})


def max_occupancy(dev: DeviceModel, precision: str, t2: float, t3: float) -> float:
    """MaxOccup_SM = min(HW_MAX, R_SM / R_thread, S_SM / S_thread), threads per SM."""
    r_thread = register_estimate(precision, t2, t3)
    s_thread = t2 * compute_bytes(precision)
    return min(dev.max_threads_per_sm, dev.regs_per_sm / r_thread, dev.smem_per_sm / s_thread)


def util_mem(dev: DeviceModel, precision: str, t2: float, t3: float) -> float:
    """Little's law: bytes in flight per SM over latency × bandwidth per SM per cycle."""
    concurrent = max_occupancy(dev, precision, t2, t3) * t3 * storage_bytes(precision)
    needed = dev.latency_mem * dev.bandwidth / (dev.sms * dev.clock_hz)
    return min(1.0, concurrent / needed)


def util_comp(dev: DeviceModel, precision: str, t2: float, t3: float) -> float:
    concurrent = max_occupancy(dev, precision, t2, t3) * t3 * t2          # FMAs in flight
    latency = dev.latency_comp_fp64 if precision == "d" else dev.latency_comp
    needed = latency * dev.flops(precision) / 2 / (dev.sms * dev.clock_hz)
    return min(1.0, concurrent / needed)


def t2_threshold(dev: DeviceModel, precision: str) -> float:
    """t2 where the inner loop turns compute-bound: Peak Perf. / Peak Band. × bytes_per_elem."""
    return dev.flops(precision) / dev.bandwidth * storage_bytes(precision)


def _gradient_descent(f, lo, hi, step=0.1, tol=1e-4, max_iter=20000):
    """The paper's GD: start at (1, 1), step 0.1, stop when the objective changes by < 1e-4
    (relative); numeric gradient, box constraints by clamping."""
    x = [1.0, 1.0]
    prev = f(*x)
    for _ in range(max_iter):
        grad = []
        for i in range(2):
            h = 1e-3
            xp = list(x)
            xp[i] = min(hi[i], xp[i] + h)
            xm = list(x)
            xm[i] = max(lo[i], xm[i] - h)
            grad.append((f(*xp) - f(*xm)) / max(xp[i] - xm[i], 1e-12))
        scale = max(abs(g) for g in grad) or 1.0
        x = [min(hi[i], max(lo[i], x[i] - step * grad[i] / scale)) for i in range(2)]
        cur = f(*x)
        if abs(prev - cur) <= tol * abs(prev):
            # A flat plateau (utilization saturated) also stops here.
            break
        prev = cur
    return x


@dataclass(frozen=True)
class ModelChoice:
    t2: int
    t3: int
    bound: str          # "memory" or "compute"
    t2_threshold: float
    time_s: float       # the model's time for the chosen parameters
    util: float


def algorithm5(dev: DeviceModel, precision: str, m: int, n: int, k: int,
               max_t3: int = 16) -> ModelChoice:
    """Algorithm 5: choose t2 and t3 by gradient descent on the model's time, rounded to
    integers; then the integer neighbourhood is searched so rounding cannot land on an invalid or
    worse point (ties: fewer registers)."""
    elem = storage_bytes(precision)
    thr = t2_threshold(dev, precision)

    def mem_time(t2, t3):
        return m * k * (n / t2) * elem / (dev.bandwidth * max(util_mem(dev, precision, t2, t3), 1e-9))

    def comp_time(t2, t3):
        return 2.0 * m * k * n / (dev.flops(precision) * max(util_comp(dev, precision, t2, t3), 1e-9))

    def refine(f, t2_lo, t2_hi, x):
        best = None
        c2 = round(x[0])
        for t2 in range(max(1, t2_lo, c2 - 2), min(t2_hi, c2 + 2) + 1):
            for t3 in range(1, max_t3 + 1):
                if register_estimate(precision, t2, t3) > MAX_REGS:
                    continue
                key = (f(t2, t3) * (1 + 1e-9), register_estimate(precision, t2, t3))
                if best is None or key < best[0]:
                    best = (key, t2, t3)
        return best[1], best[2]

    if n <= thr:
        x = _gradient_descent(mem_time, (1, 1), (n, max_t3))
        t2, t3 = refine(mem_time, 1, n, x)
        # t2 = n whenever registers allow: §3.6.3, A read once.
        return ModelChoice(t2, t3, "memory", thr, mem_time(t2, t3), util_mem(dev, precision, t2, t3))
    lo = max(1, math.ceil(thr))
    x1 = _gradient_descent(comp_time, (lo, 1), (n, max_t3))
    a = refine(comp_time, lo, n, x1)
    x2 = _gradient_descent(mem_time, (1, 1), (max(1, math.floor(thr)), max_t3))
    b = refine(mem_time, 1, max(1, math.floor(thr)), x2)
    if comp_time(*a) < mem_time(*b):
        return ModelChoice(a[0], a[1], "compute", thr, comp_time(*a), util_comp(dev, precision, *a))
    return ModelChoice(b[0], b[1], "memory", thr, mem_time(*b), util_mem(dev, precision, *b))


# ---- untuned choices and the sweep ------------------------------------------------------------------
DEFAULT_T1 = 128         # the paper's t1 on K40c/P100 (§4.2, §4.4)
DEFAULT_ISM2_T1 = 128
ISM2_MAX_REGS = 160
MODEL_SHAPE = (30720, 30720)   # the model's m, k for TSM2 choices (its choice of t2, t3 does not
                               # depend on m, k in the memory-bound branch)


def _fit_t3(precision: str, t1: int, t2: int, t3: int) -> int:
    t3 = max(1, min(t3, t1))
    while t1 % t3 or register_estimate(precision, t2, t3) > MAX_REGS:
        t3 -= 1
    return t3


def model_tsm2(precision: str, n: int, t1: int = DEFAULT_T1, dev: DeviceModel = H100_SXM) -> Tsm2Spec:
    """The model's TSM2 variant for n (Algorithm 5 for t2, t3; t1 is the paper's profiled 128)."""
    c = algorithm5(dev, precision, MODEL_SHAPE[0], n, MODEL_SHAPE[1])
    t2 = min(c.t2, n)
    while register_estimate(precision, t2, 1) > MAX_REGS:
        t2 -= 1
    return Tsm2Spec(precision, n, t1, t2, _fit_t3(precision, t1, t2, c.t3)).validate()


def model_ism2(precision: str, n: int, opt: int = 1, k: int = 16, t1: int = DEFAULT_ISM2_T1,
               dev: DeviceModel = H100_SXM) -> Ism2Spec:
    """ISM2 keeps TSM2's t2 (one pass over the n columns when registers allow) and loads the
    whole (small) k of a row at once: t3 = 16 or what registers allow."""
    tsm2 = model_tsm2(precision, n, t1, dev)
    t3 = max(tsm2.t3, k)
    while t3 > tsm2.t3 and register_estimate(precision, tsm2.t2, t3) > ISM2_MAX_REGS:
        t3 //= 2          # ptxas keeps the row loop spill-free below about 150 estimated registers
    t3 = _fit_t3(precision, t1, tsm2.t2, max(t3, tsm2.t3))
    return Ism2Spec(precision, n, t1, tsm2.t2, t3, opt).validate()


TSM2_SWEEP_T1 = (32, 64, 128, 256)
TSM2_SWEEP_T3 = (2, 4, 8, 16)
RING_SWEEP_T1 = (64, 128, 256)
RING_SWEEP_T3 = (2, 4, 8)
RING_SWEEP_ROWS = (1, 2, 4)
RING_SWEEP_STAGES = (4, 8)
ISM2_SWEEP_T1 = (128, 256)
ISM2_SWEEP_T3 = (8, 16)
ISM2_SWEEP_TCF = (1, 2, 4, 8, 16, 32)


def tsm2_sweep(precision: str, n: int, half_t2: bool = False) -> list[Tsm2Spec]:
    """t1 × t2 × t3 with t2 = n (and n/2 on request: the model's alternative below the
    threshold), plus the model's own (t2, t3) with every t1: the paper profiles t1 once t2 and t3
    are chosen (§3.6.3)."""
    t2s = sorted({n} | ({n // 2} if half_t2 and n >= 8 else set()))
    out = [Tsm2Spec(precision, n, t1, t2, t3) for t1 in TSM2_SWEEP_T1 for t2 in t2s
           for t3 in TSM2_SWEEP_T3]
    model = model_tsm2(precision, n)
    out += [Tsm2Spec(precision, n, t1, model.t2, model.t3) for t1 in TSM2_SWEEP_T1]
    if n >= 8:   # two rows per thread: half the shared-memory reads per FMA
        out += [Tsm2Spec(precision, n, t1, n, t3, 2) for t1 in TSM2_SWEEP_T1 for t3 in (2, 4, 8)]
    # the cp.async ring (fp16: pairs of rows, so an even number of rows)
    ring_rows = RING_SWEEP_ROWS if storage_bytes(precision) >= 4 else (2, 4)
    out += [Tsm2Spec(precision, n, t1, n, t3, rows, stages) for t1 in RING_SWEEP_T1
            for t3 in RING_SWEEP_T3 for rows in ring_rows for stages in RING_SWEEP_STAGES]
    return sorted({s for s in out if s.is_valid()})


def ism2_sweep(precision: str, n: int) -> list[Ism2Spec]:
    out = [Ism2Spec(precision, n, t1, n, t3, opt) for t1 in ISM2_SWEEP_T1 for t3 in ISM2_SWEEP_T3
           for opt in (1, 2)]
    out += [model_ism2(precision, n, opt) for opt in (1, 2)]
    return sorted({s for s in out if s.is_valid()})


# The sweep per precision: (warps, tiles, bk, stages, k groups).
# d: every winner of the H200's first sweep (bk 8-32, 3-6 stages) had bk = 8 and 3 stages, the sweep's
# smallest: the sweep now reaches below them and no longer times the larger stages.
# h: blocks of 32-256 rows with 2-8 k groups (at most 256 threads) and 2-3 stages.  A timing of 419
# variants on the H200 (n = 8 and 32, m = 12345-50000) put every leader among 4-row-tile warps, 4-8 k
# groups and 2-3 stages; one k group and one tile per warp were never near them.
TSMMA_SWEEP = {
    "d": ((2, 4, 8), (2, 4, 8), (4, 8, 16), (2, 3, 4), (1,)),
    "h": ((1, 2, 4), (2, 4), (16, 32, 64), (2, 3), (2, 4, 8)),
}


def tsmma_max_n(n: int) -> int:
    """The TSMMA kernels that serve n: those of n's 8-column tiles."""
    return ceil_div(n, 8) * 8


def tsmma_sweep(precision: str, n: int) -> list[TsmmaSpec]:
    """TSMMA's candidates at n (none outside its precisions and n): warps × row tiles × k per stage ×
    ring depth × k groups, the valid ones (threads, registers, shared memory)."""
    if precision not in TSMMA_PRECISIONS or n > TSMMA_MAX_N:
        return []
    warps, tiles, bks, stages, groups = TSMMA_SWEEP[precision]
    out = [TsmmaSpec(precision, tsmma_max_n(n), w, t, bk, st, g)
           for w in warps for t in tiles for bk in bks for st in stages for g in groups]
    return sorted(s for s in out if s.is_valid())


def parse_spec(name: str):
    if name.startswith("tsm2_"):
        return Tsm2Spec.parse(name)
    if name.startswith("ism2_"):
        return Ism2Spec.parse(name)
    if name.startswith("tsmma_"):
        return TsmmaSpec.parse(name)
    raise SpecError("name", f"{name!r} is not a tall-skinny kernel name")


def parse_ns(text: str) -> tuple[int, ...]:
    """'1-32' or '2,4,8,16' or '40' -> sorted n values in 1..MAX_N."""
    return parse_ranges(text, 1, MAX_N, "tall-skinny n", "1-32 or 2,4,8,16")


# TSM2 and ISM2 specs are arch-independent (48 KB dynamic shared memory fits every listed arch); TSMMA's
# validate(arch) refuses architectures before sm_80.


# ---- what the dispatch serves (the manifest's tall-skinny part) -------------------------------------
NEVER = 1 << 62


@dataclass(frozen=True, order=True)
class TallSkinnyEntry:
    """From compute capability `cc` upward, these kernels and cut-offs serve (precision, n)."""
    precision: str
    n: int
    cc: int
    tsm2: Tsm2Spec
    ism2_opt1: Ism2Spec
    ism2_opt2: Ism2Spec
    ism2_max_k: int                     # k ≤ this: ISM2, else TSM2
    opt2_min_m: int                     # m ≥ this: ISM2 optimization 2, else 1
    tcf: tuple[tuple[int, int], ...]    # (m_min, tcf) ascending; tcf 0 = chosen at launch
    source: str
    mma: TsmmaSpec | None = None        # in TSM2's region with op(A) = A and m ≥ mma_min_m: TSMMA instead
    mma_min_m: int = NEVER
    device: str | None = None           # serves only the GPU of this name (a row's for_device); None: any

    @property
    def ism2_reachable(self) -> tuple[Ism2Spec | None, Ism2Spec | None]:
        """The ISM2 kernels the dispatch can choose (None for the others): optimization 1 where some
        k ≤ ism2_max_k (k = 0 never launches a kernel), optimization 2 where also some m reaches
        opt2_min_m.  Only these are emitted: the tuned table leaves ISM2 unused for 8 of the 96
        (precision, n) entries and optimization 2 for 62, and compiling them cost CI about a third of
        the ISM2 build for kernels no call could reach."""
        opt1 = self.ism2_opt1 if self.ism2_max_k > 0 else None
        opt2 = self.ism2_opt2 if opt1 is not None and self.opt2_min_m < NEVER else None
        return opt1, opt2

    @property
    def kernels(self):
        return ((self.tsm2,) + tuple(k for k in self.ism2_reachable if k is not None)
                + ((self.mma,) if self.mma is not None else ()))

    def to_json(self) -> dict:
        opt1, opt2 = self.ism2_reachable
        return {"precision": self.precision, "n": self.n, "from_cc": self.cc, "tsm2": self.tsm2.name,
                "ism2_opt1": opt1.name if opt1 else None, "ism2_opt2": opt2.name if opt2 else None,
                "ism2_max_k": self.ism2_max_k,
                "opt2_min_m": None if self.opt2_min_m >= NEVER else self.opt2_min_m,
                "tcf": [list(t) for t in self.tcf], "source": self.source,
                "tsmma": self.mma.name if self.mma else None,
                "tsmma_min_m": self.mma_min_m if self.mma else None, "for_device": self.device}


# ---- the Tensor Core route of the h entry point ---------------------------------------------------------
# TSM2 multiplies on CUDA cores, which caps fp16 at n ≥ 8 well below the bandwidth (0.13-0.36 of the copy
# floor at m = k = 20000 on the H100), while the Tensor Core block kernel below streams the same A at
# 0.67-0.70 of it for every n 1-32 (docs/experiments/tallskinny_tensor_core/README.md).  So where A is
# tall (m ≥ TENSOR_CORE_MIN_M rows: at least two 64-row blocks per SM of a large GPU), n fits one block
# column (A is read once), TSM2's region (k past ISM2's cut-off), every operand on 16-byte chunks (the
# kernel's fast copies; elsewhere it runs at a few percent of the floor) and cp.async exists (sm_80), the
# entry point runs this kernel on one GEMM.  Its f32 accumulation matches TSM2's for h.
TENSOR_CORE_KERNELS = {"h": "wmmablock_h_blk64x64x64_w2x2_s3_f32_b1"}
TENSOR_CORE_MIN_M = 16384


@dataclass(frozen=True)
class TensorCoreRoute:
    precision: str
    kernel: object        # the wmma block spec (generator.wmma), built and launched through its strided launcher
    min_m: int
    max_n: int            # its block's columns
    cc: int

    def to_json(self) -> dict:
        return {"precision": self.precision, "kernel": self.kernel.name, "min_m": self.min_m,
                "max_n": self.max_n, "from_cc": self.cc}


DEFAULT_ISM2_MAX_K = 32
MAX_TCF_CUTS = 4


def default_entry(precision: str, n: int, cc: int) -> TallSkinnyEntry:
    return TallSkinnyEntry(precision, n, cc, model_tsm2(precision, n), model_ism2(precision, n, 1),
                           model_ism2(precision, n, 2), DEFAULT_ISM2_MAX_K, NEVER, (), "model")


def entry_from_row(row: dict, cc: int, n: int | None = None) -> TallSkinnyEntry:
    """A tuned table row -> entry; missing parts fall back to the model's choice.  With `n` other
    than the row's own, the row's blocking serves that n (t2 = n where the row's t2 covers all of
    its n, else the row's t2 capped at n); the spec rules still apply."""
    prec, row_n = row["precision"], row["n"]
    n = row_n if n is None else n
    base = default_entry(prec, n, cc)

    def spec(key, cls, default, **extra):
        r = row.get(key)
        if not r:
            return default
        if cls is Tsm2Spec:
            extra = {"rows": int(r.get("rows", 1)), "stages": int(r.get("stages", 0))}
        t2 = n if r["t2"] >= row_n else min(r["t2"], n)
        if n == row_n:
            return cls(prec, n, r["t1"], t2, r["t3"], **extra).validate()
        # Another n: the row's blocking, with fewer rows per thread where a larger n needs the
        # registers; the model's choice for this part where nothing fits.
        while True:
            try:
                return cls(prec, n, r["t1"], t2, r["t3"], **extra).validate()
            except SpecError:
                if extra.get("rows", 1) == 1:
                    return default
                extra = {**extra, "rows": extra["rows"] // 2}

    tcf = tuple(sorted((int(a), int(b)) for a, b in row.get("tcf", [])))[:MAX_TCF_CUTS]
    opt2 = row.get("opt2_min_m")
    source = f"tuned on {row.get('device', 'unknown')}"
    mma, mma_min_m = None, NEVER
    r = row.get("tsmma")
    if r and cc >= TSMMA_MIN_CC:
        candidate = TsmmaSpec(prec, tsmma_max_n(n), r["warps"], r["tiles"], r["bk"], r["stages"],
                              int(r.get("kgroups", 1)))
        if candidate.is_valid() or n == row_n:   # another n: where the row's blocking fits it
            mma, mma_min_m = candidate.validate(), int(r.get("min_m", 0))
    return TallSkinnyEntry(prec, n, cc, spec("tsm2", Tsm2Spec, base.tsm2),
                           spec("ism2_opt1", Ism2Spec, base.ism2_opt1, opt=1),
                           spec("ism2_opt2", Ism2Spec, base.ism2_opt2, opt=2),
                           int(row.get("ism2_max_k", base.ism2_max_k)),
                           NEVER if opt2 is None else int(opt2), tcf,
                           source if n == row_n else f"{source} for n={row_n}", mma, mma_min_m)


def nearest_tuned_n(tuned: list[int], n: int) -> int | None:
    """The tuned n whose blocking an untuned n borrows: the nearest, the smaller one on a tie (on
    the H100, d n = 24 ran at 0.87-0.95 of the floor with n = 16's blocking, 0.67-0.73 with
    n = 32's: more rows per thread where registers allow)."""
    return min(tuned, key=lambda t: (abs(t - n), t)) if tuned else None


def _choices(entry: TallSkinnyEntry) -> tuple:
    """What an entry makes the dispatch do (its source aside)."""
    return entry.kernels, entry.ism2_max_k, entry.opt2_min_m, entry.tcf, entry.mma_min_m


def _entry_from_rows(rows: dict, prec: str, n: int, cc: int, where: str, notes: list) -> TallSkinnyEntry | None:
    """The entry of (prec, n) from tuned rows {(precision, n): row}: n's own row or the nearest tuned n's
    (the model's register-path choice is far slower where a tuned table exists: docs/perf/); None where
    there is none, or it is refused (said in `notes`)."""
    near = nearest_tuned_n(sorted(t for p, t in rows if p == prec), n)
    if near is None:
        return None
    try:
        entry = entry_from_row(rows[(prec, near)], cc, n)
        # TSMMA borrows from a tuned n with as many 8-column tiles where there is one: the kernel serving n
        # is that n's (the tiles set the accumulators and the registers), and so is its cut-off against
        # TSM2.  On the H200, h n = 25-28 on n = 24's 512-thread blocking ran at 0.39x cuBLAS (one block per
        # SM), n = 21-24 at 0.55x; on the H100, d n = 26-28 took n = 24's cut-off (TSMMA from m = 30720)
        # and ran TSM2 at 0.56-0.63x cuBLAS at m = k = 20000, where n = 29-32 ran TSMMA at 0.97x.
        tiles = [t for p, t in rows if p == prec and ceil_div(t, 8) == ceil_div(n, 8) and rows[(p, t)].get("tsmma")]
        mma_near = nearest_tuned_n(sorted(tiles), n)
        if mma_near is not None and mma_near != near:
            other = entry_from_row(rows[(prec, mma_near)], cc, n)
            entry = replace(entry, mma=other.mma, mma_min_m=other.mma_min_m)
        return entry
    except (SpecError, KeyError, TypeError, ValueError) as err:
        notes.append(f"{where} tallskinny row for {prec} n={near} refused for n={n}: {err}")
        return None


def build_entries(precisions, ns, archs, load_table, notes: list) -> tuple[TallSkinnyEntry, ...]:
    """The dispatch entries of (precision, n) per architecture: each architecture's tuned rows (or the
    model's choice), one entry where the choices change from the architecture below; and, from the
    rows of an architecture's own table (not a borrowed one: load_table's "source") that carry
    `for_device` (a cudaDeviceProp.name), an entry for that GPU model where its choices differ."""
    from .precision import PRECISION_ORDER

    entries = []
    for prec in precisions:
        if prec not in PRECISIONS_TS:
            continue
        for n in ns:
            previous = None
            for arch in archs:
                table = load_table(arch)
                section = table.get("tallskinny", [])
                cc = ARCHS[arch].cc
                rows = {(r["precision"], r["n"]): r for r in section if "for_device" not in r}
                entry = _entry_from_rows(rows, prec, n, cc, arch, notes) or default_entry(prec, n, cc)
                if previous is None or _choices(previous) != _choices(entry):
                    entries.append(entry)
                    previous = entry
                if table.get("source", arch) != arch:
                    continue   # rows for one GPU model serve only from their architecture's own table
                for device in sorted({r["for_device"] for r in section if "for_device" in r}):
                    own = {(r["precision"], r["n"]): r for r in section if r.get("for_device") == device}
                    mine = _entry_from_rows(own, prec, n, cc, f"{arch} ({device})", notes)
                    if mine is not None and _choices(mine) != _choices(entry):
                        entries.append(replace(mine, device=device, source=f"{mine.source}, for {device}"))
    return tuple(sorted(entries, key=lambda e: (PRECISION_ORDER.index(e.precision), e.n, e.cc, e.device or "")))
