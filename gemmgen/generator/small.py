"""The "small" family (magma-small): one thread block computes `tba` whole GEMMs of size M×N×K ≤ 32.

Design (Masliah et al. §6; Abdelfattah et al. §8 for h and hc):
- A and B of every GEMM of the block are read once from global memory into shared memory
  (§6.1); op(A)/op(B) (N, T or C) are applied while storing into shared memory.
- C lives in registers.  Each GEMM gets a DIM_M×DIM_N group of threads; a thread owns the
  ⌈M/DIM_M⌉×⌈N/DIM_N⌉ elements C(tx + i·DIM_M, ty + j·DIM_N).  With DIM = N̂ and
  1 < N/N̂ ≤ 2 this is exactly the 2×2 recursive blocking of §6.4 (C00, C01, C10, C11 per thread);
  N/N̂ up to 4 is one more level of the same recursion.  On sm_80+ the whole A and B fit in shared
  memory, so the staged loads the P100 needed are unnecessary: the blocking here buys register
  reuse (fewer shared-memory reads per FMA) and fewer threads per GEMM.
- `tba` GEMMs are aggregated into one thread block (§6.3) so tiny sizes still launch whole warps.
- Every loop has compile-time bounds and is fully unrolled (§6.5 instruction mix).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace

from .arch import ARCHS
from .precision import PRECISIONS
from .spec import Spec, SpecError, ceil_div, require, require_no_local_memory

MAX_SIZE = 32
MAX_RECURSION_RATIO = 4        # N / N̂ ≤ 4: two levels of §6.4's 2×2 blocking
MAX_TBA = 256

_NAME = re.compile(r"^small_(hc|h|s|d|c|z)_m(\d+)n(\d+)k(\d+)_dim(\d+)x(\d+)_tba(\d+)(_hoist)?(?:_ring(\d+))?(?:_aring(\d+))?(_acc16)?(_mma)?(_pairs)?$")
RING_STAGES = (2, 3)           # the `stages` knob: 0 (no ring) or one of these
# Where the tuner tries the ring (the knob itself is valid at every size and precision).  fp16
# from N = 1: its staged kernels stayed at 0.60-0.80 of the floor up to N = 16 (staging unpacks,
# converts and stores each element, twice the work per byte of fp32); the ring copies raw 16-byte
# chunks while the block multiplies and widens on reading (h N = 8: 0.63 -> 1.01 with the table's
# own blocking).  s, d, c, z from 16: below it the staged kernels reach 0.85-1.07 of the floor.
RING_MIN_SIZE = {"h": 1, "hc": 1, "s": 16, "d": 16, "c": 16, "z": 16}
MMA_PRECISIONS = ("d", "z")    # the `mma` knob: fp64 Tensor Cores
# Where the tuner tries it: below, the FMA product keeps up with memory (d, z at 0.9-1.07 of the floor).
MMA_MIN_SIZE = 16
# The blockings the tuner tries with it: 2, 4 and 8 warps per GEMM.  The few blockings of whole warps
# that also divide the size evenly leave most sizes one (8×8 at N = 29 and 30: 0.88 of the floor, z),
# or none (N = 28).
MMA_BLOCKINGS = ((8, 8), (8, 16), (16, 8), (16, 16))


@dataclass(frozen=True, order=True)
class SmallSpec(Spec):
    precision: str
    m: int
    n: int
    k: int
    dim_m: int      # threads per GEMM along M (N̂ of §6.4 for square sizes)
    dim_n: int      # threads per GEMM along N
    tba: int        # GEMMs per thread block (§6.3)
    # Packed strided operands: issue all of a thread's 16-byte loads of an operand before its
    # first shared-memory store (all in flight at once) instead of load-store per vector.  It
    # needs a register per vector, so it is a tuning knob: faster at most odd sizes, and the
    # tuner refuses the tuples where ptxas then spills.
    hoist: bool = False
    # sm_80+, packed strided operands: a persistent block that copies the A and B of the GEMMs it
    # takes next into a ring of `stages` shared-memory buffers with cp.async while it multiplies
    # (gemmgen/templates/small/gemmgen_small_ring.cuh.j2 says why).  0 = no ring.  The buffers keep the operands
    # as stored (fp16 too) and op() and the widening to the compute type are applied on reading them.
    stages: int = 0
    # sm_80+, pointer arrays to contiguous matrices, on a tuple without a ring (stages = 0): the
    # ring kernel for pointer arrays with this many stages (each matrix copied on its own, any
    # alignment), where the staged kernel would read the array, wait at a barrier, then load.  0 =
    # the staged kernel.  A tuple with a ring takes it for both interfaces.  Its own knob because
    # each array ring adds kernels to every sm_80/sm_90 build (and to CI's); `tune small
    # --arrays` sets it where it pays.
    array_stages: int = 0
    # h and hc, a tuple with a ring (either interface): its ring kernel accumulates in fp16 with
    # paired FMAs (HFMA2) instead of widening every element read to fp32 (the template's
    # multiply_acc16 says why: fp16 kernels from N ≈ 12 are bound by those instructions).  Within
    # The error bound (docs/api.md, Accuracy) for fp16 (u = 2⁻¹¹), as the wmma tuples with fp16 accumulators; the
    # staged kernel, which runs on sm_75 and unaligned operands, keeps fp32.  A tuning knob.
    acc16: bool = False
    # d and z, sm_80+: the staged kernel multiplies on the fp64 Tensor Cores (mma.sync.m8n8k4), the
    # GEMM's dim_m·dim_n threads as whole warps that split C's 8×8 tiles (the template's
    # mma_product says why); before sm_80, and in a ring kernel, the same tuple multiplies with FMAs
    # on its thread tiles.  A tuning knob.
    mma: bool = False
    # h, a tuple with a ring and fp32 sums, odd K: the ring kernel reads each fp16 column that k runs
    # along (stored B 'N', stored A 'T') as the aligned 32-bit words covering it, one byte permute per
    # element, instead of one two-byte load per element: at odd K a column starts on a 4-byte boundary
    # only every other time, so ptxas cannot pair the loads itself (at even K it does).  Fewer
    # shared-memory loads for more ALU instructions: h 9×9×9 0.76 -> 0.83 of the floor at one blocking,
    # slower at 5, 7, 15, 17 and 23 (the template's multiply_paired).  A tuning knob.
    pairs: bool = False

    family = "small"

    @property
    def copies_through_ring(self) -> bool:
        return bool(self.stages or self.array_stages)

    @property
    def elementwise(self) -> bool:
        """Whether launch_small has the elementwise kernel (1×1×1 on packed operands; not z, whose 16-byte
        element the GEMM kernel moves as fast)."""
        return (self.m, self.n, self.k) == (1, 1, 1) and PRECISIONS[self.precision].element_bytes < 16

    @property
    def headers(self) -> tuple[str, ...]:
        """The headers its source includes: launch_small with the staged kernel, and the ring's and the
        elementwise kernel's where the tuple uses them (launch_small refuses to compile without them)."""
        return (("gemmgen_small_launch.cuh",) + (("gemmgen_small_ring.cuh",) if self.copies_through_ring else ())
                + (("gemmgen_small_elementwise.cuh",) if self.elementwise else ()))

    # ---- identity -------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return (f"small_{self.precision}_m{self.m}n{self.n}k{self.k}"
                f"_dim{self.dim_m}x{self.dim_n}_tba{self.tba}" + ("_hoist" if self.hoist else "")
                + (f"_ring{self.stages}" if self.stages else "")
                + (f"_aring{self.array_stages}" if self.array_stages else "")
                + ("_acc16" if self.acc16 else "") + ("_mma" if self.mma else "") + ("_pairs" if self.pairs else ""))

    @classmethod
    def parse(cls, name: str) -> "SmallSpec":
        match = _NAME.match(name)
        if not match:
            raise SpecError("name", f"{name!r} is not a small-family kernel name "
                                    "(small_<prec>_m<M>n<N>k<K>_dim<X>x<Y>_tba<T>[_hoist][_ring<S>][_aring<S>][_acc16][_mma][_pairs])")
        prec, m, n, k, dim_m, dim_n, tba, hoist, stages, array_stages, acc16, mma, pairs = match.groups()
        spec = cls(prec, int(m), int(n), int(k), int(dim_m), int(dim_n), int(tba), hoist=hoist is not None,
                   stages=int(stages) if stages else 0, array_stages=int(array_stages) if array_stages else 0,
                   acc16=acc16 is not None, mma=mma is not None, pairs=pairs is not None)
        spec.validate()
        return spec

    @classmethod
    def from_row(cls, row: dict, precision: str | None = None, shape: tuple[int, int, int] | None = None) -> "SmallSpec":
        """The tuple a tuning-table row (or results line) names, every knob included (a row from
        before a knob existed has its default).  Not validated: callers validate for their arch."""
        m, n, k = shape or (row["m"], row["n"], row["k"])
        return cls(precision or row["precision"], m, n, k, row["dim_m"], row["dim_n"], row["tba"],
                   row.get("hoist", False), row.get("stages", 0), row.get("array_stages", 0),
                   row.get("acc16", False), row.get("mma", False), row.get("pairs", False))

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.m, self.n, self.k)

    # ---- derived quantities ------------------------------------------------------------------
    @property
    def tile_m(self) -> int:
        return ceil_div(self.m, self.dim_m)

    @property
    def tile_n(self) -> int:
        return ceil_div(self.n, self.dim_n)

    @property
    def threads(self) -> int:
        return self.tba * self.dim_m * self.dim_n

    @property
    def mma_warps(self) -> int:
        """Warps per GEMM of the Tensor Core product (the `mma` knob)."""
        return self.dim_m * self.dim_n // 32

    @property
    def compute_words(self) -> int:
        """32-bit registers one compute-type value takes."""
        p = PRECISIONS[self.precision]
        real_words = 2 if p.real_bytes == 8 else 1
        return real_words * (2 if p.is_complex else 1)

    @property
    def stored_as_computed(self) -> bool:
        """Storage is the compute type (s, d, c, z); fp16 (h, hc) is widened to fp32 on the way."""
        return PRECISIONS[self.precision].element_bytes == 4 * self.compute_words

    @property
    def smem_lda(self) -> int:
        # The layout pair that takes the most: stored Aᵀ is stored across threads with this stride,
        # odd so that their stores spread over the banks ('N' and fp16 keep M; the template says why).
        return self.m | 1 if self.stored_as_computed else self.m

    @property
    def smem_ldb(self) -> int:
        # B is read as B(l, ty + j·DIM_N) by threads of different ty: an odd leading dimension
        # puts the columns in different banks.
        return self.k | 1

    @property
    def smem_bytes(self) -> int:
        per_gemm = self.k * self.smem_lda + self.n * self.smem_ldb
        # + the A and B pointers of the block's GEMMs (pointer-array interface)
        return self.tba * per_gemm * self.compute_words * 4 + 2 * 8 * self.tba

    @property
    def ring_operand_bytes(self) -> tuple[int, int]:
        """Bytes of one group's stored A and B (a ring stage holds both, packed)."""
        size = PRECISIONS[self.precision].element_bytes
        return (self.tba * self.m * self.k * size, self.tba * self.k * self.n * size)

    @property
    def ring_bytes(self) -> int:
        """Dynamic shared memory of the strided ring kernel (0 without a ring), for the layout pair
        that takes the most: where K's columns are an even number of 16-byte chunks, the stage pads
        each of them by one chunk for stored Aᵀ and stored B (RingLayout in the template says why)."""
        column_bytes = self.k * PRECISIONS[self.precision].element_bytes
        padded = column_bytes % 32 == 0 and self.stored_as_computed
        padding = 16 * self.tba * (self.m + self.n) if padded else 0
        return self.stages * (sum(self.ring_operand_bytes) + padding)

    # ---- rules ---------------------------------------------------------------------------------
    def validate(self, arch: str | None = None) -> "SmallSpec":
        require(self.precision in PRECISIONS, "precision",
                f"unknown precision {self.precision!r}")
        for dim, value in (("m", self.m), ("n", self.n), ("k", self.k)):
            require(1 <= value <= MAX_SIZE, "size",
                    f"{dim}={value} is outside 1..{MAX_SIZE} (the small family covers sizes up to 32)")
        for dim, size, threads in (("m", self.m, self.dim_m), ("n", self.n, self.dim_n)):
            require(1 <= threads <= size, "blocking",
                    f"dim_{dim}={threads} must be between 1 and {dim}={size}")
            ratio = ceil_div(size, threads)
            require(ratio <= MAX_RECURSION_RATIO, "recursive blocking",
                    f"{dim}/dim_{dim} = {size}/{threads} needs {ratio} blocks per thread; §6.4's "
                    f"2x2 recursion allows at most {MAX_RECURSION_RATIO} (1 < N/N̂ ≤ 2 per level)")
            # (A Tensor Core tuple's blocking sets its warps; its FMA product, before sm_80, takes
            # partial thread tiles where the threads do not divide the size evenly.)
            require(self.mma or ceil_div(size, ratio) == threads, "no idle threads",
                    f"dim_{dim}={threads} leaves threads without work; use ceil({size}/{ratio})"
                    f" = {ceil_div(size, ratio)}")
        require(1 <= self.tba <= MAX_TBA, "tba", f"tba={self.tba} must be in 1..{MAX_TBA}")
        require(isinstance(self.hoist, bool), "hoist", f"hoist={self.hoist!r} must be True or False")
        if self.hoist:
            block_bytes = [self.tba * rows * cols * PRECISIONS[self.precision].element_bytes
                           for rows, cols in ((self.m, self.k), (self.k, self.n))]
            require(any(b % 16 == 0 for b in block_bytes), "hoist",
                    f"neither A's nor B's block ({block_bytes[0]} and {block_bytes[1]} bytes for "
                    f"tba={self.tba}) is whole 16-byte vectors, so no load could be hoisted")
        require(self.stages == 0 or self.stages in RING_STAGES, "ring stages",
                f"stages={self.stages!r} must be 0 (no ring) or one of {RING_STAGES}")
        if self.stages:
            chunked = [b % 16 == 0 for b in self.ring_operand_bytes]
            require(all(chunked), "ring chunks",
                    f"A's and B's blocks ({self.ring_operand_bytes[0]} and {self.ring_operand_bytes[1]} bytes for "
                    f"tba={self.tba}) must both be whole 16-byte chunks for cp.async")
        require(self.array_stages == 0 or self.array_stages in RING_STAGES, "array ring stages",
                f"array_stages={self.array_stages!r} must be 0 (staged kernel) or one of {RING_STAGES}")
        require(not (self.array_stages and self.stages), "array ring stages",
                f"a tuple with a ring (stages={self.stages}) takes it for pointer arrays too; "
                "array_stages is for tuples without one")
        require(isinstance(self.acc16, bool), "acc16", f"acc16={self.acc16!r} must be True or False")
        if self.acc16:
            require(PRECISIONS[self.precision].real_bytes == 2, "acc16",
                    f"fp16 accumulation is for the fp16 precisions (h, hc), not {self.precision}")
            require(bool(self.stages or self.array_stages), "acc16",
                    "fp16 accumulation is a property of the ring kernel; this tuple has no ring "
                    "(stages = array_stages = 0)")
        require(isinstance(self.mma, bool), "mma", f"mma={self.mma!r} must be True or False")
        if self.mma:
            require(self.precision in MMA_PRECISIONS, "mma",
                    f"the fp64 Tensor Core product (mma.sync.m8n8k4) is for {', '.join(MMA_PRECISIONS)}, "
                    f"not {self.precision}")
            require(self.dim_m * self.dim_n % 32 == 0, "mma warps",
                    f"the Tensor Core product needs whole warps per GEMM; dim_m·dim_n = "
                    f"{self.dim_m * self.dim_n} is not a multiple of 32")
            require(not self.stages, "mma",
                    f"the Tensor Core product is the staged kernel's; this tuple runs the ring kernel "
                    f"(stages={self.stages}) for every interface")
        require(isinstance(self.pairs, bool), "pairs", f"pairs={self.pairs!r} must be True or False")
        if self.pairs:
            require(self.precision == "h", "pairs",
                    f"paired reads are of real fp16 elements (h); {self.precision} elements are "
                    f"{PRECISIONS[self.precision].element_bytes} bytes already")
            require(not self.acc16, "pairs", "paired reads feed the fp32 product; acc16 sums in fp16")
            require(bool(self.stages or self.array_stages), "pairs",
                    "paired reads are the ring kernel's; this tuple has no ring (stages = array_stages = 0)")
            require(self.k % 2 == 1 and self.k > 1, "pairs",
                    f"k={self.k}: paired reads are for odd k > 1 (at even k ptxas pairs the loads itself)")
        require(self.threads <= 1024, "threads per block",
                f"tba·dim_m·dim_n = {self.threads} exceeds 1024")
        archs = [arch] if arch else list(ARCHS)
        for a in archs:
            limit = ARCHS[a].static_smem_per_block
            require(self.smem_bytes <= limit, "shared memory",
                    f"{self.smem_bytes} bytes of shared memory exceed {limit} on {a}")
            if self.stages and arch and ARCHS[a].cc >= 80:   # below sm_80 the staged kernel runs
                optin = ARCHS[a].smem_per_sm - 1024   # the opt-in maximum per block
                require(self.ring_bytes <= optin, "shared memory",
                        f"the ring's {self.ring_bytes} bytes exceed the {optin} a block may have on {a}")
        if self.stages and not arch:
            # Without a target the ring must fit one architecture with cp.async; where it does
            # not fit (an sm_86 for a ring sized for sm_90), the launcher runs the staged kernel.
            largest = max(ARCHS[a].smem_per_sm - 1024 for a in ARCHS if ARCHS[a].cc >= 80)
            require(self.ring_bytes <= largest, "shared memory",
                    f"the ring's {self.ring_bytes} bytes exceed the {largest} a block may have on any architecture")
        require_no_local_memory(self.name, arch)
        return self


# ---- choosing variants ----------------------------------------------------------------------------
def threads_for(size: int, ratio: int) -> int:
    """Threads along one dimension so each owns at most `ratio` elements and none is idle."""
    dim = ceil_div(size, ratio)
    return ceil_div(size, ceil_div(size, dim))


def heuristic(precision: str, m: int, n: int, k: int) -> SmallSpec:
    """The paper's untuned choice (§6.4, last paragraph): sizes ≤ 10 one thread per element and
    tba > 1, 11..19 one thread per element and tba = 1, 20..32 the 2×2 blocking (N̂ = ⌈N/2⌉)."""
    size = max(m, n)
    ratio = 1 if size < 20 else 2
    dim_m, dim_n = threads_for(m, ratio), threads_for(n, ratio)
    tba = 1
    if size <= 10:
        tba = min(MAX_TBA, max(2, 256 // (dim_m * dim_n)))
    spec = SmallSpec(precision, m, n, k, dim_m, dim_n, tba)
    while not spec.is_valid() and spec.tba > 1:
        spec = SmallSpec(precision, m, n, k, dim_m, dim_n, spec.tba // 2)
    return spec.validate()


SWEEP_TBA = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def sweep_candidates(precision: str, m: int, n: int, k: int, arch: str = "sm_90") -> list[SmallSpec]:
    """Every tuple the tuner tries for one shape: blocking ratios 1..4 per dimension (differing by
    at most one level), tba from SWEEP_TBA, and each with both stagings (hoist); from the
    precision's RING_MIN_SIZE each of those also with the cp.async ring (every RING_STAGES)."""
    out = []
    for rm in range(1, MAX_RECURSION_RATIO + 1):
        for rn in range(1, MAX_RECURSION_RATIO + 1):
            if abs(rm - rn) > 1:
                continue
            dim_m, dim_n = threads_for(m, rm), threads_for(n, rn)
            if ceil_div(m, dim_m) != rm or ceil_div(n, dim_n) != rn:
                continue  # that ratio does not exist for this size (e.g. 3 blocks of 2 rows)
            for tba in SWEEP_TBA:
                spec = SmallSpec(precision, m, n, k, dim_m, dim_n, tba)
                # Aggregated blocks stay at or under 512 threads (bigger ones only lengthen the
                # sweep); a block under one warp only where tba cannot grow further.
                if spec.threads > (1024 if tba == 1 else 512):
                    continue
                if spec.threads < 32 and tba != SWEEP_TBA[-1]:
                    continue
                out += [s for s in (spec, replace(spec, hoist=True)) if s.is_valid(arch)]
    if max(m, n) >= RING_MIN_SIZE[precision]:
        out += [ring for spec in list(out) for stages in RING_STAGES
                for ring in (replace(spec, stages=stages),) if ring.is_valid(arch)]
    return sorted(set(out + with_acc16(out, arch) + with_pairs(out, arch) + with_mma(out, arch)))


def with_acc16(specs: list[SmallSpec], arch: str = "sm_90") -> list[SmallSpec]:
    """The fp16-accumulating twin (the `acc16` knob) of every h or hc tuple with a ring among specs."""
    return [twin for spec in specs if PRECISIONS[spec.precision].real_bytes == 2 and (spec.stages or spec.array_stages)
            for twin in (replace(spec, acc16=True),) if twin.is_valid(arch)]


def with_pairs(specs: list[SmallSpec], arch: str = "sm_90") -> list[SmallSpec]:
    """The paired-read twin (the `pairs` knob) of every h tuple with a ring and fp32 sums among specs
    (odd k only)."""
    return [twin for spec in specs if spec.precision == "h" and (spec.stages or spec.array_stages) and not spec.acc16
            for twin in (replace(spec, pairs=True),) if twin.is_valid(arch)]


def with_mma(specs: list[SmallSpec], arch: str = "sm_90") -> list[SmallSpec]:
    """The Tensor Core tuples (the `mma` knob) of the d and z shapes among specs from MMA_MIN_SIZE
    up: the twin of each tuple without a ring whose blocking is whole warps, and every MMA_BLOCKINGS
    with the tba and stagings of specs."""
    out = []
    for spec in specs:
        if spec.precision not in MMA_PRECISIONS or max(spec.m, spec.n) < MMA_MIN_SIZE or spec.stages:
            continue
        out += [replace(spec, mma=True)]
        out += [replace(spec, dim_m=dm, dim_n=dn, mma=True) for dm, dn in MMA_BLOCKINGS]
    return sorted({spec for spec in out if spec.threads <= 512 and spec.is_valid(arch)})


def neighbourhood(row: dict, arch: str = "sm_90") -> list[SmallSpec]:
    """A short sweep around a tuned table row, measured in one run, to re-tune a knob added after
    the full sweep without repeating the thousands of tuples the full sweep already ranked: the
    row's blocking with tba halved, kept and doubled, each with both stagings; and from the
    precision's RING_MIN_SIZE up, the ring (`stages`) with every blocking of the full sweep at tba
    1, 2 and the row's tba halved, kept and doubled, since a block that keeps loading while it
    multiplies favours other blockings than one that waits (z N = 25: 25×13 threads staged, 13×13
    with the ring).  (The odd fp16 sizes need tba a multiple of 8 for whole 16-byte chunks.)  For h
    and hc, each ring tuple also with fp16 accumulation (`acc16`), and for h at odd k with paired reads
    (`pairs`), the row's own knobs kept too.  For d
    and z from MMA_MIN_SIZE, the Tensor Core product (`mma`) with every whole-warp blocking of the full
    sweep at tba 1, 2 and 4, with both stagings (the row's blocking was chosen for the FMA product)."""
    out = []
    for tba in (row["tba"] // 2, row["tba"], row["tba"] * 2):
        for hoist in (False, True):
            spec = replace(SmallSpec.from_row(row), tba=tba, hoist=hoist)
            if spec.is_valid(arch):
                out.append(spec)
    size = max(row["m"], row["n"])
    ring = size >= RING_MIN_SIZE[row["precision"]]
    mma = row["precision"] in MMA_PRECISIONS and size >= MMA_MIN_SIZE
    full = sweep_candidates(row["precision"], row["m"], row["n"], row["k"], arch) if ring or mma else []
    if ring:
        ring_tba = (1, 2, row["tba"] // 2, row["tba"], row["tba"] * 2)
        for spec in full:
            if not spec.stages and not spec.mma and spec.tba in ring_tba and spec.hoist == row.get("hoist", False):
                for stages in RING_STAGES[:1] if (spec.dim_m, spec.dim_n) != (row["dim_m"], row["dim_n"]) \
                        else RING_STAGES:
                    ringed = replace(spec, stages=stages)
                    if ringed.is_valid(arch):
                        out.append(ringed)
    out = [replace(spec, acc16=False, pairs=False) for spec in out]
    if mma:
        out += [spec for spec in full if spec.mma and spec.tba in (1, 2, 4)]
    return sorted(set(out + with_acc16(out, arch) + with_pairs(out, arch)))
