"""The "cpu" family: C++14 SIMD kernels for batched very small GEMM (Masliah et al. §5).

Design, translated from the paper's row-major description to the column-major BLAS contract:
- §5.1: one source of C++ overloads per ISA (AVX-512, AVX2+FMA, NEON and a portable fallback
  without intrinsics), selected by `std::integral_constant<int, bits>` tags; the kernel body is
  written once against those overloads.
- §5.2/§5.3 (register reuse): in column-major storage the paper's "rows of B" are the columns of
  op(A): C(:, j) = Σ_l op(A)(:, l)·op(B)(l, j).  A register tile holds `mr` SIMD vectors of a
  column of op(A) and `nr` broadcast elements of op(B), and accumulates an mr×nr block of C
  (mr vectors × nr columns) in registers: every loaded vector of A is reused nr times and every
  broadcast of B mr times, so loads per FMA drop from O(1) to 1/nr + 1/mr.  C is read (if
  beta ≠ 0) and written exactly once, in the epilogue (Algorithm 1, line 12).  `mr` and `nr` are
  the tuning parameters (§5.3 "the amount of data kept in registers"), chosen per size,
  precision and ISA by `gemmgen tune cpu`.
- Every size is a compile-time constant: the tile list is unrolled by the generator, the loops
  inside a tile by the compiler (§5.4 "each matrix-matrix product function generated at compile
  time").  op(A) = A^T or A^H is packed once per GEMM into a padded buffer so the tiles always
  read contiguous columns; op(B) needs no packing (its elements are broadcast).
- §5.5: the batch is split statically over OpenMP threads; a first-touch helper places each
  thread's share of the batch in its NUMA node.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from .precision import PRECISIONS
from .spec import Spec, SpecError, ceil_div, require

MAX_SIZE = 32
CPU_PRECISIONS = ("s", "d", "c", "z")


@dataclass(frozen=True)
class CpuIsa:
    name: str          # in kernel names and in gemmgen_cpu_set_isa()
    bits: int          # SIMD register width
    registers: int     # architectural SIMD registers (the register-blocking budget)
    macro: str         # GEMMGEN_CPU_ISA_<macro> selects the overloads in gemmgen_cpu_simd.h
    index: int         # position in the dispatch tables (generic first: always present)
    guard: str         # preprocessor condition under which its sources compile to anything
    target: str        # GCC/clang target attribute its sources are compiled for ("" = baseline)
    description: str
    widths: tuple[int, ...] = (128,)   # register widths its overloads offer, narrowest first
    # Tiles as out-of-line functions, one per tile shape, shared by every tile of a product, in
    # place of one inlined copy per tile.  For the portable fallback, whose compile time matters
    # more than its speed: fully inlined, g++ -O2 took 27 s for generic z 32^3 and about 500 s of
    # CPU for the 128 generic sources; shared, z 24^3 takes 0.7 s instead of 27 s.  The price is
    # a call per tile and no software prefetch (the prefetch share is per tile index).
    shared_tiles: bool = False


ISAS: dict[str, CpuIsa] = {
    i.name: i
    for i in (
        CpuIsa("generic", 128, 16, "GENERIC", 0, "1", "", "portable C++ (no intrinsics), any CPU",
               shared_tiles=True),
        CpuIsa("avx2", 256, 16, "AVX2", 1, "GEMMGEN_CPU_X86", "avx2,fma", "x86-64 AVX2 + FMA", (128, 256)),
        CpuIsa("avx512", 512, 32, "AVX512", 2, "GEMMGEN_CPU_X86", "avx512f,avx2,fma",
               "x86-64 AVX-512F", (128, 256, 512)),
        # Advanced SIMD is part of every AArch64 CPU: no target attribute, no runtime check.
        CpuIsa("neon", 128, 32, "NEON", 3, "GEMMGEN_CPU_AARCH64", "", "AArch64 Advanced SIMD"),
    )
}
ISA_ORDER = tuple(ISAS)

_NAME = re.compile(r"^cpu_(s|d|c|z)_m(\d+)n(\d+)k(\d+)_(generic|avx2|avx512|neon)_r(\d+)x(\d+)(?:_p(\d+))?$")
MAX_DISTANCE = 8
FAST_LOOP_MAX_WORK = MAX_SIZE ** 3   # m·n·k up to which a kernel has the fast C += A·B loop (all)


@dataclass(frozen=True)
class Tile:
    """One register tile of C: rows row..row+mr·lanes-1 (the last vector holds `last` rows, in a
    register `last_bits` wide), columns col..col+nr-1."""
    row: int
    col: int
    mr: int
    nr: int
    last: int
    last_bits: int


@dataclass(frozen=True, order=True)
class CpuSpec(Spec):
    precision: str
    m: int
    n: int
    k: int
    isa: str
    mr: int     # SIMD vectors of C's rows per register tile
    nr: int     # columns of C per register tile
    distance: int = 0   # software prefetch of the batch entry this far ahead (0: none)

    family = "cpu"

    # ---- identity -------------------------------------------------------------------------
    @property
    def name(self) -> str:
        suffix = f"_p{self.distance}" if self.distance else ""
        return f"cpu_{self.precision}_m{self.m}n{self.n}k{self.k}_{self.isa}_r{self.mr}x{self.nr}{suffix}"

    @classmethod
    def parse(cls, name: str) -> "CpuSpec":
        match = _NAME.match(name)
        if not match:
            raise SpecError("name", f"{name!r} is not a cpu-family kernel name "
                                    "(cpu_<prec>_m<M>n<N>k<K>_<isa>_r<MR>x<NR>[_p<distance>])")
        prec, m, n, k, isa, mr, nr, distance = match.groups()
        return cls(prec, int(m), int(n), int(k), isa, int(mr), int(nr), int(distance or 0)).validate()

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.m, self.n, self.k)

    # ---- derived quantities ------------------------------------------------------------------
    @property
    def is_complex(self) -> bool:
        return PRECISIONS[self.precision].is_complex

    @property
    def bits(self) -> int:
        """The register width the kernel computes in: the ISA's own, or on x86 the narrowest
        width whose vector holds a whole column of C when m is that small (m = 2 doubles or up
        to 4 floats fit 128 bits: no lane masks, half the bytes per move)."""
        isa = ISAS[self.isa]
        elem = PRECISIONS[self.precision].element_bytes
        for bits in isa.widths:
            if self.m * elem * 8 <= bits:
                return bits
        return isa.bits

    @property
    def lanes(self) -> int:
        """Elements of C (complex ones count once) in one SIMD vector."""
        p = PRECISIONS[self.precision]
        return self.bits // (8 * p.element_bytes)

    @property
    def row_vectors(self) -> int:
        return ceil_div(self.m, self.lanes)

    @property
    def padded_m(self) -> int:
        """Rows of the packed op(A) buffer: whole vectors, so packed tiles never need masking."""
        return self.row_vectors * self.lanes

    @property
    def holds_b(self) -> bool:
        """Real tiles with 3 <= nr < mr keep the nr broadcasts of op(B) in registers and load one
        vector of op(A) at a time; the others keep the mr vectors of op(A) and broadcast one
        element of op(B) at a time.  (With nr <= 2 the compiler folds each load of A into the
        FMAs, and such tiles ran at 55-60 % of the 4 x 3 and 3 x 4 ones on Zen 5: d 6x2 34 GF/s,
        3x4 59 in L2; so they are not offered.)"""
        return not self.is_complex and 3 <= self.nr < self.mr

    @property
    def registers_needed(self) -> int:
        """Accumulators (two per complex C vector: the products with Re b and Im b), the operand
        kept across the tile's inner loop (nr broadcasts of B or mr vectors of A) and the one
        loaded or broadcast in it."""
        return self.mr * self.nr * (2 if self.is_complex else 1) + (self.nr if self.holds_b else self.mr) + 1

    @property
    def whole_vector(self) -> bool:
        """m = n = k = 2 in s, d or c on x86: the fast loop computes contiguous products with all of
        C in one vector (gemmgen_cpu_simd.h, whole_2x2), several per register where the batch is
        packed and the ISA is wide enough (whole_2x2_grouped: s on AVX2, s and d on AVX-512),
        whatever the blocking; the tiles serve the other calls only."""
        return self.m == self.n == self.k == 2 and self.precision != "z" and self.isa in ("avx2", "avx512")

    @property
    def fast_loop(self) -> bool:
        """A second batch loop for the common call (strided, op(A) = A, alpha = beta = 1) in which
        the loop's own bookkeeping and the epilogue's run-time tests on alpha and beta are folded
        away.  Every size has it: from N = 17 on it was first left out (compile time), but the
        tests on alpha and beta around every accumulator of every tile cost d N = 17 and 24
        about 10 % in L2 (34.3 -> 37.8, 51.3 -> 56.7 GF/s), and a kernel still compiles in
        under 2 s."""
        return self.m * self.n * self.k <= FAST_LOOP_MAX_WORK

    @property
    def tail_bits(self) -> int:
        """The width of the last vector of each column: the narrowest register of the ISA that
        holds its rows.  A partial last vector at full width would load, multiply and store
        masked lanes that carry nothing (d m = 9 on AVX-512: one row in a 512-bit vector, half
        the tile's FMA work); in 128 bits the same row costs a quarter of the bits per FMA and
        plain moves instead of masks (AVX2: 128-bit moves instead of vmaskmov)."""
        tail = self.m - (self.row_vectors - 1) * self.lanes
        need = tail * PRECISIONS[self.precision].element_bytes * 8
        return min(w for w in ISAS[self.isa].widths + (self.bits,) if need <= w <= self.bits)

    def tiles(self) -> tuple[Tile, ...]:
        """The tile list the variant's source unrolls: columns outer, rows inner."""
        out = []
        tail = self.m - (self.row_vectors - 1) * self.lanes
        for col in range(0, self.n, self.nr):
            nr = min(self.nr, self.n - col)
            for v in range(0, self.row_vectors, self.mr):
                mr = min(self.mr, self.row_vectors - v)
                at_end = v + mr == self.row_vectors
                out.append(Tile(v * self.lanes, col, mr, nr, tail if at_end else self.lanes,
                                self.tail_bits if at_end else self.bits))
        return tuple(out)

    # ---- rules ---------------------------------------------------------------------------------
    def validate(self, arch: str | None = None) -> "CpuSpec":   # arch: GPU only; the ISA is in the spec
        require(self.precision in CPU_PRECISIONS, "precision",
                f"{self.precision!r} has no CPU kernels; choose from {', '.join(CPU_PRECISIONS)}")
        require(self.isa in ISAS, "isa", f"unknown ISA {self.isa!r}; choose from {', '.join(ISAS)}")
        for dim, value in (("m", self.m), ("n", self.n), ("k", self.k)):
            require(1 <= value <= MAX_SIZE, "size",
                    f"{dim}={value} is outside 1..{MAX_SIZE} (the cpu family covers sizes up to 32)")
        require(1 <= self.mr <= self.row_vectors, "tile within C",
                f"mr={self.mr} vectors exceed the {self.row_vectors} vectors of m={self.m} "
                f"({self.lanes} {self.precision} elements per {self.isa} vector)")
        require(1 <= self.nr <= self.n, "tile within C", f"nr={self.nr} must be between 1 and n={self.n}")
        require(0 <= self.distance <= MAX_DISTANCE, "prefetch distance",
                f"distance={self.distance} must be between 0 (no software prefetch) and {MAX_DISTANCE}")
        require(self.distance == 0 or not ISAS[self.isa].shared_tiles, "prefetch distance",
                f"{self.isa} tiles are shared out-of-line functions without software prefetch: distance must be 0")
        budget = ISAS[self.isa].registers
        require(self.registers_needed <= budget, "registers",
                f"a {self.mr}x{self.nr} tile needs {self.registers_needed} SIMD registers "
                f"(accumulators + {'nr broadcasts of B + 1 vector of A' if self.holds_b else 'mr vectors of A + 1 broadcast of B'}); "
                f"{self.isa} has {budget}")
        return self


# ---- choosing variants ----------------------------------------------------------------------------
def candidates(precision: str, m: int, n: int, k: int, isa: str) -> list[CpuSpec]:
    """Every valid register blocking for one shape and ISA (the tuner's sweep)."""
    probe = CpuSpec(precision, m, n, k, isa, 1, 1)
    out = []
    for mr in range(1, probe.row_vectors + 1):
        for nr in range(1, n + 1):
            spec = CpuSpec(precision, m, n, k, isa, mr, nr)
            if spec.is_valid():
                out.append(spec)
    return out


FMA_PORTS = 2        # vector FMAs issued per cycle (Haswell and later, Zen, Neoverse)
FMA_LATENCY = 4      # cycles before an accumulator can take its next FMA
LOAD_PORTS = 3       # vector loads per cycle
BROADCAST_COST = 2   # a broadcast from memory counts as two loads (fitted: on Zen 5, s 24 in L2,
                     # 1x12 tiles ran at 0.76 of 3x4 and 2x6 at 0.88, as this ranks them)


def model_cycles(spec: CpuSpec) -> float:
    """A throughput model of one GEMM: per k step of a tile, mr vector loads and nr broadcasts
    (two for complex: Re and Im) over the load ports, mr·nr vector FMAs (complex: twice) over the
    FMA ports, and the FMA latency of each accumulator's dependency chain, whichever is the
    bottleneck; plus the epilogue's load/store of C.  Wasted lanes of partial tiles count as
    work.  It only ranks the candidates the tuner then measures."""
    cw = 2 if spec.is_complex else 1
    total = 0.0
    for t in spec.tiles():
        loads = (t.mr + BROADCAST_COST * t.nr * cw) / LOAD_PORTS
        per_k = max(t.mr * t.nr * cw / FMA_PORTS, loads, FMA_LATENCY)
        total += spec.k * per_k + t.mr * t.nr * 1.5
    return total


PREFETCH_MIN_BYTES = 4096   # an entry's A, B and C from this size on: prefetch the next entry


def default_distance(spec: CpuSpec) -> int:
    """Untuned prefetch distance: one entry ahead once an entry's operands span a few kB (there
    a product lasts long enough to hide the next one's misses, and the hardware prefetchers,
    which do not cross pages, lose track of the interleaved short streams); none below, where
    the batch streams through the caches fast and the prefetch instructions only cost."""
    if ISAS[spec.isa].shared_tiles:
        return 0
    elem = PRECISIONS[spec.precision].element_bytes
    return 1 if (spec.m * spec.k + spec.k * spec.n + spec.m * spec.n) * elem >= PREFETCH_MIN_BYTES else 0


def _rank(spec: CpuSpec):
    return (model_cycles(spec), spec.registers_needed, -spec.nr, spec.mr)


def heuristic(precision: str, m: int, n: int, k: int, isa: str) -> CpuSpec:
    """The untuned choice: the blocking the throughput model prices lowest (ties: fewer
    registers, then wider nr — more reuse of each vector of A), with default_distance."""
    best = min(candidates(precision, m, n, k, isa), key=_rank)
    return dataclasses.replace(best, distance=default_distance(best))


SWEEP_DISTANCES = (0, 1, 2, 4)   # the prefetch distances the tuner's second stage measures


def sweep_candidates(precision: str, m: int, n: int, k: int, isa: str, limit: int = 12) -> list[CpuSpec]:
    """The first stage of `gemmgen tune cpu`: the `limit` blockings the model ranks best (the
    model is only a filter; the measurement decides), without prefetch; the heuristic's blocking
    is always among them."""
    if CpuSpec(precision, m, n, k, isa, 1, 1).whole_vector:
        # The benchmark's call never reaches the tiles: timing blockings would pick noise.
        return [dataclasses.replace(heuristic(precision, m, n, k, isa), distance=0)]
    return sorted(sorted(candidates(precision, m, n, k, isa), key=_rank)[:limit])


def distance_candidates(spec: CpuSpec) -> list[CpuSpec]:
    """The second stage: one of the first stage's fastest blockings at every distance of
    SWEEP_DISTANCES (none for the whole-vector 2 x 2 products, whose loop does not prefetch, nor
    for shared tiles)."""
    if spec.whole_vector or ISAS[spec.isa].shared_tiles:
        return [dataclasses.replace(spec, distance=0)]
    return sorted({dataclasses.replace(spec, distance=d) for d in SWEEP_DISTANCES})


def parse_isas(text: str) -> tuple[str, ...]:
    """'avx2,neon' -> ('generic', 'avx2', 'neon'): the portable fallback is always emitted, so
    every CPU has a kernel; unknown names raise ValueError."""
    names = [t.strip() for t in text.split(",") if t.strip()] if text.strip() not in ("", "all") else list(ISAS)
    unknown = [n for n in names if n not in ISAS]
    if unknown:
        raise ValueError(f"unknown CPU ISA {', '.join(unknown)}; choose from {', '.join(ISAS)}")
    return tuple(i for i in ISA_ORDER if i in names or i == "generic")


# ---- selection and emission ----------------------------------------------------------------------
CPU_TYPE = {"s": "float", "d": "double", "c": "gemmgen_cpu_complex_float", "z": "gemmgen_cpu_complex_double"}
REAL_TYPE = {"s": "float", "d": "double", "c": "float", "z": "double"}


def table_name(isa: str) -> str:
    """The tuning table of one ISA: gemmgen/generator/tuning/cpu_<isa>.json."""
    return f"cpu_{isa}"


def select(precisions, shapes, isas) -> tuple[list[CpuSpec], list[str]]:
    """One kernel per CPU precision, shape and ISA: the tuned blocking when the ISA's table has a
    valid row for it, otherwise the heuristic.  Refused rows become notes."""
    from .tuning import load_table

    notes: list[str] = []
    specs: list[CpuSpec] = []
    for isa in isas:
        rows = {(r["precision"], r["m"], r["n"], r["k"]): r
                for r in load_table(table_name(isa)).get("cpu", [])}
        for prec in (p for p in precisions if p in CPU_PRECISIONS):
            for m, n, k in shapes:
                spec = None
                row = rows.get((prec, m, n, k))
                if row is not None:
                    try:
                        spec = CpuSpec(prec, m, n, k, isa, row["mr"], row["nr"])
                        # Rows tuned before the prefetch distance existed take the default one.
                        spec = dataclasses.replace(spec, distance=row.get("distance", default_distance(spec)))
                        spec = spec.validate()
                    except SpecError as err:
                        notes.append(f"{table_name(isa)} row for {prec} {m}x{n}x{k} refused: {err}")
                specs.append(spec or heuristic(prec, m, n, k, isa))
    return sorted(specs, key=lambda s: s.name), notes


def source_path(spec: CpuSpec) -> str:
    return f"src/cpu/{spec.isa}/{spec.precision}/{spec.name}.cpp"


def _precision_context(keys) -> list[dict]:
    return [{"key": k, "cpu_type": CPU_TYPE[k], "description": PRECISIONS[k].description}
            for k in CPU_PRECISIONS if k in keys]


def kernel_source(spec: CpuSpec, banner: str) -> str:
    from .render import render

    return render("cpu/cpu_variant.cpp.j2", spec=spec, isa=ISAS[spec.isa], tiles=spec.tiles(),
                  real=REAL_TYPE[spec.precision], p=PRECISIONS[spec.precision], banner=banner)


def files(specs: list[CpuSpec], isas, banner: str, version: str) -> dict[str, str]:
    """Everything the cpu family adds to an emitted set: headers, one source per kernel, the
    dispatch source.  The API always has s, d, c and z (uncovered shapes return
    GEMMGEN_NOT_GENERATED), and the dispatch tables always have a column per known ISA."""
    from .render import render

    all_isas = [ISAS[i] for i in ISA_ORDER]
    chosen = [ISAS[i] for i in isas]
    precisions = _precision_context(CPU_PRECISIONS)
    common = {"banner": banner, "version": version, "isas": chosen, "all_isas": all_isas}
    entries: dict[str, list] = {p: [] for p in CPU_PRECISIONS}
    by_shape: dict[tuple, dict[str, CpuSpec]] = {}
    for s in specs:
        by_shape.setdefault((s.precision, s.shape), {})[s.isa] = s
    for (prec, shape), by_isa in sorted(by_shape.items(), key=lambda kv: (CPU_PRECISIONS.index(kv[0][0]), kv[0][1])):
        entries[prec].append((shape, by_isa))
    out = {
        "include/gemmgen_cpu.h": render("cpu/gemmgen_cpu.h.j2", precisions=precisions, max_size=MAX_SIZE, **common),
        "src/cpu/gemmgen_cpu_internal.h": render("cpu/gemmgen_cpu_internal.h.j2", **common),
        **{f"src/cpu/{name}": render(f"cpu/{name}.j2", **common)
           for name in ("gemmgen_cpu_isa.h", "gemmgen_cpu_simd.h", "gemmgen_cpu_kernel.h")},
        "src/cpu/gemmgen_cpu_dispatch.cpp": render(
            "cpu/gemmgen_cpu_dispatch.cpp.j2", precisions=precisions, entries=entries, kernels=specs,
            isa_index={i.name: i.index for i in all_isas}, **common),
    }
    for spec in specs:
        out[source_path(spec)] = kernel_source(spec, banner)
    return out
