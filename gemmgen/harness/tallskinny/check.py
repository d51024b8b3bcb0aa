"""GPU checks of the tall-skinny families (TSM2, ISM2 optimizations 1 and 2, TSMMA) against the float64
NumPy reference: through the public gemmgen_?gemm_tallskinny and through every emitted variant's
own entry point with forced k-groups / tcf, on random shapes that are multiples of no tile, all four
transpose pairs, leading dimensions larger than the rows, C's padding poisoned and checked
untouched, bit-exact small-integer cases, beta = 0 over NaN, alpha = 0, k = 0, and operands with
more than 2^31 elements (very tall m).

With exact buffers (`run_manifest_checks(..., exact_buffers=True)`, or GEMMGEN_EXACT_BUFFERS set
as `gemmgen check --sanitize` sets it) every operand is its own cudaMalloc of exactly the bytes the
call describes: A ends at element lda·(cols - 1) + rows, B and C likewise, no pool and no slack, so
compute-sanitizer's memcheck sees any read or write past them.  The exact-extent cases (odd m and k,
lda not a multiple of 8, operands starting one element past a 16-byte boundary, alpha = 0 / k = 0
with beta = 1 over Inf and NaN, A and B NULL with alpha = 0) run in both modes."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from gemmgen.harness.core import reference as ref
from gemmgen.harness.core.cases import POISON, UNTOUCHED_KIND, CaseResult
from gemmgen.harness.core.cases import exact_buffers as exact_buffers_from_env
from gemmgen.harness.core.cases import extent as batch_extent

TRANS = (("N", "N"), ("N", "T"), ("T", "N"), ("T", "T"))


@dataclass(frozen=True)
class TsCase:
    precision: str
    m: int
    n: int
    k: int
    transa: str = "N"
    transb: str = "N"
    kind: str = "random"
    alpha: float = 1.0
    beta: float = 0.0
    target: str = "api"     # "api" or a variant name
    split: int = 0          # k-groups (tsm2) or tcf (ism2); 0 = chosen at launch
    pad: int = 3            # leading dimension = rows as stored + pad
    offset: int = 0         # A, B and C start this many elements past their allocation's start


# alpha = 0 with A = B = NULL: C = beta·C, A and B never read.  (UNTOUCHED_KIND, from the small
# family's check: alpha = 0 or k = 0 with beta = 1, C holding Inf and NaN, must come back bit for bit.)
NULL_AB_KIND = "alpha0-null-ab"


def _stored(trans: str, rows: int, cols: int) -> tuple[int, int]:
    return (rows, cols) if trans == "N" else (cols, rows)


def extent(rows: int, cols: int, ld: int) -> int:
    """Elements from a matrix's first element to its last, inclusive (0 for an empty matrix)."""
    return batch_extent(rows, cols, ld, 0, 1)


class DeviceBuffer:
    """`stored[:length]` in its own cudaMalloc (no CuPy pool), starting `offset` elements into it:
    with length = the operand's extent the allocation ends at its last element."""

    def __init__(self, stored: np.ndarray, length: int, offset: int = 0):
        import cupy as cp

        self.stored = np.ascontiguousarray(stored[:length])
        self.item = stored.itemsize
        self.nbytes = self.stored.nbytes
        total = offset * self.item + self.nbytes
        self.mem = cp.cuda.memory.Memory(total) if total else None
        self.ptr = self.mem.ptr + offset * self.item if self.mem is not None else 0
        if self.nbytes:
            cp.cuda.runtime.memcpy(self.ptr, self.stored.ctypes.data, self.nbytes,
                                   cp.cuda.runtime.memcpyHostToDevice)

    def read(self) -> np.ndarray:
        import cupy as cp

        out = np.empty_like(self.stored)
        if self.nbytes:
            cp.cuda.runtime.memcpy(out.ctypes.data, self.ptr, self.nbytes, cp.cuda.runtime.memcpyDeviceToHost)
        return out


def run_ts_case(lib, case: TsCase, rng: np.random.Generator, exact_buffers: bool = False) -> CaseResult:
    """One case.  exact_buffers: A, B and C each end at their last element (see DeviceBuffer);
    otherwise A and B keep their last column's padding and C has `pad` poisoned elements after it."""
    import cupy as cp

    p, m, n, k = case.precision, case.m, case.n, case.k
    integer = case.kind == "exact"
    ra, ca = _stored(case.transa, m, k)
    rb, cb = _stored(case.transb, k, n)
    lda, ldb, ldc = max(ra, 1) + case.pad, max(rb, 1) + case.pad, max(m, 1) + case.pad
    a_vals = ref.random_values(rng, p, lda * max(ca, 1), integer)
    b_vals = ref.random_values(rng, p, ldb * max(cb, 1), integer)
    c_vals = np.full(ldc * n + case.pad, POISON)
    c0 = ref.random_values(rng, p, m * n, integer).reshape(1, m, n)
    if case.kind == "beta0-nan":
        c0 = np.full_like(c0, np.nan)
    if case.kind == UNTOUCHED_KIND and m * n:
        c0[0, 0, 0], c0[0, -1, -1] = np.inf, np.nan
        if m * n > 2:
            c0[0, m // 2, n // 2] = -np.inf
    item = c_vals.itemsize
    np.lib.stride_tricks.as_strided(c_vals, shape=(1, m, n), strides=(item, item, ldc * item))[...] = c0
    c_stored = ref.to_storage(p, c_vals)
    if exact_buffers:
        lengths = (extent(ra, ca, lda), extent(rb, cb, ldb), extent(m, n, ldc))
    else:
        lengths = (len(a_vals), len(b_vals), len(c_vals))
    d_a = DeviceBuffer(ref.to_storage(p, a_vals), lengths[0], case.offset)
    d_b = DeviceBuffer(ref.to_storage(p, b_vals), lengths[1], case.offset)
    d_c = DeviceBuffer(c_stored, lengths[2], case.offset)
    pa, pb = (0, 0) if case.kind == NULL_AB_KIND else (d_a.ptr, d_b.ptr)
    if case.target == "api":
        rc = lib.tallskinny(p, case.transa, case.transb, m, n, k, case.alpha, pa, lda, pb, ldb, case.beta,
                            d_c.ptr, ldc)
    else:
        from gemmgen.harness.core.api import scalar

        f = lib.variant(case.target)
        rc = f(case.transa.encode(), case.transb.encode(), m, n, k, scalar(p, case.alpha), pa, lda, pb, ldb,
               scalar(p, case.beta), d_c.ptr, ldc, case.split, 0)
    cp.cuda.runtime.deviceSynchronize()
    # Past the end of an exact C nothing was allocated: those elements count as they were.
    out_stored = c_stored.copy()
    out_stored[:lengths[2]] = d_c.read()
    label = case.target if case.target == "api" else f"{case.target}/split{case.split}"
    if case.kind == UNTOUCHED_KIND:
        same = bool(np.array_equal(out_stored.view(np.uint8), c_stored.view(np.uint8)))
        return CaseResult(p, m, n, k, case.transa, case.transb, label, 1, case.kind, rc, 0.0,
                          ref.error_bound(p, k), same, None, rc == 0 and same,
                          "" if same else "C changed (must come back bit for bit)")
    a = ref.matrices(a_vals, 1, ra, ca, lda, 0)
    b = ref.matrices(b_vals, 1, rb, cb, ldb, 0)
    expected = ref.reference(case.transa, case.transb, case.alpha, a, b, case.beta, c0)
    got = ref.matrices(ref.from_storage(p, out_stored), 1, m, n, ldc, 0)
    mask = np.ones(c_vals.shape, dtype=bool)
    np.lib.stride_tricks.as_strided(mask, shape=(m, n), strides=(1, ldc))[...] = False
    untouched = bool(np.array_equal(out_stored[mask], c_stored[mask]))
    errors = ref.relative_errors(got, expected, case.alpha, a, b, case.beta, c0)
    max_err = float(np.max(errors)) if errors.size else 0.0
    if errors.size and np.isnan(errors).any():
        max_err = float("nan")
    exact = bool(np.array_equal(got, expected)) if integer else None
    bound = ref.error_bound(p, k)
    passed = rc == 0 and ref.Verdict(max_err, bound, untouched, exact).passed
    return CaseResult(p, m, n, k, case.transa, case.transb, label, 1, case.kind, rc, max_err, bound,
                      untouched, exact, passed, "")


def _tsm2_shape(rng) -> tuple[int, int]:
    """m, k for TSM2: k past every tile size, neither a multiple of 32 nor of any t1."""
    m = int(rng.integers(33, 800)) | 1
    k = int(rng.integers(33, 700)) | 1
    return m, k


def _ism2_shape(rng) -> tuple[int, int]:
    m = int(rng.integers(1000, 12000)) | 1
    k = int(rng.integers(1, 32))
    return m, k


def _one_per_n(entries) -> Iterator:
    """The first dispatch entry of each (precision, n) and of each GPU model with entries of its own: the
    others serve other compute capabilities, and a case through the API runs whichever entry the GPU
    present selects (a GPU model's entry: its kernels are checked directly on any GPU)."""
    seen = set()
    for e in entries:
        key = (e.precision, e.n, getattr(e, "device", None))
        if key not in seen:
            seen.add(key)
            yield e


def default_cases(entries, rng: np.random.Generator, api_ns=None) -> Iterator[TsCase]:
    """Per dispatch entry (precision, n): the public API on a TSM2 shape and an ISM2 shape in all
    four transposes, every variant directly (TSM2 with 1 and 3 k-groups and the launch-time
    choice, ISM2 opt 1 / opt 2 with tcf 1, 3 and the launch-time choice, including k past a B tile
    for the multi-tile paths), an exact integer case, beta = 0 over NaN, alpha = 0."""
    for e in _one_per_n(entries):
        p, n = e.precision, e.n

        def scal():
            return float(rng.uniform(0.5, 1.5) * rng.choice([-1, 1]))

        for ta, tb in TRANS:
            for shape in (_tsm2_shape(rng), _ism2_shape(rng)):
                yield TsCase(p, shape[0], n, shape[1], ta, tb, "random", scal(), scal())
        ta, tb = TRANS[int(rng.integers(4))]
        for split in (0, 1, 3):
            m, k = _tsm2_shape(rng)
            yield TsCase(p, m, n, k, ta, tb, "random", scal(), scal(), e.tsm2.name, split)
        # k long enough that the launcher also splits k across blocks (atomic partial sums)
        for kind, beta in (("random", scal()), ("beta0-nan", 0.0)):
            yield TsCase(p, int(rng.integers(33, 300)) | 1, n, 8 * e.tsm2.t1 + int(rng.integers(1, 900)),
                         ta, tb, kind, scal(), beta, e.tsm2.name, 1)
        for spec in (k for k in e.ism2_reachable if k is not None):   # the emitted ones only
            for split in (0, 1, 3):
                m, k = _ism2_shape(rng)
                yield TsCase(p, m, n, k, ta, tb, "random", scal(), scal(), spec.name, split)
            # k past one B tile (and n past t2 where t2 < n): the multi-tile path
            yield TsCase(p, int(rng.integers(500, 3000)) | 1, n, spec.t1 + int(rng.integers(1, 90)),
                         ta, tb, "random", scal(), scal(), spec.name, 2)
        m, k = _tsm2_shape(rng)
        yield TsCase(p, m, n, min(k, 200), ta, tb, "exact", 1.0, 1.0)
        m, k = _ism2_shape(rng)
        yield TsCase(p, m, n, k, ta, tb, "exact", 1.0, 1.0)
        yield TsCase(p, m, n, k, ta, tb, "beta0-nan", scal(), 0.0)
        m, k = _tsm2_shape(rng)
        yield TsCase(p, m, n, k, ta, tb, "beta0-nan", scal(), 0.0, e.tsm2.name, 2)
        yield TsCase(p, m, n, k, ta, tb, "alpha0", 0.0, scal())


def edge_cases(entries) -> Iterator[TsCase]:
    """k = 0, a 1-row product and a long k with fewer rows than a block, per precision, at the
    emitted n nearest 5, 3 and 1 (a set generated with fewer n must not be checked at n it lacks)."""
    ns = {}
    for e in entries:
        ns.setdefault(e.precision, set()).add(e.n)
    for p in sorted(ns):
        def near(n):
            return min(ns[p], key=lambda emitted: (abs(emitted - n), emitted))
        yield TsCase(p, 37, near(5), 0, "N", "N", "k0", 1.0, 0.5)
        yield TsCase(p, 37, near(5), 0, "T", "T", "k0-beta0", 1.0, 0.0)
        yield TsCase(p, 1, near(3), 1, "N", "N", "tiny", 1.0, 0.5)
        yield TsCase(p, 3, near(1), 5000, "T", "N", "m<t1,long k", 1.0, 0.5)


def _odd(rng, lo: int, hi: int) -> int:
    return int(rng.integers(lo, hi)) | 1


def exact_extent_cases(entries, rng: np.random.Generator) -> Iterator[TsCase]:
    """Per dispatch entry, the cases an exact-size allocation exposes (issue 39): odd m and k; lda
    even over odd m (pad 1: the fp16 ring's pairs of rows, whose last pair is half past m) and lda
    odd (pad 2: the register path); A, B and C one element past a 16-byte boundary (2 bytes in
    fp16, 4 in fp32, 8 in fp64); TSM2 with several k-groups (their partial sums meet in shared
    memory); ISM2; alpha = 0 and k = 0 with beta = 1 over Inf and NaN; alpha = 0 with A = B = NULL."""
    for e in _one_per_n(entries):
        p, n = e.precision, e.n
        for ta, tb in TRANS:
            m, k = _odd(rng, 65, 700), _odd(rng, 2 * e.tsm2.t1 + 1, 900)
            yield TsCase(p, m, n, k, ta, tb, "exact-extent", 0.75, 0.5, pad=1)
            yield TsCase(p, _odd(rng, 33, 400), n, k, ta, tb, "exact-extent", -1.25, 0.0, pad=2, offset=1)
        ta, tb = TRANS[int(rng.integers(4))]
        m, k = _odd(rng, 65, 700), _odd(rng, 2 * e.tsm2.t1 + 1, 900)
        yield TsCase(p, m, n, k, "N", tb, "exact-extent", 1.0, 0.5, e.tsm2.name, 3, pad=1)
        yield TsCase(p, m, n, k, "T", tb, "exact-extent", 1.0, 0.5, e.tsm2.name, 3, pad=1, offset=1)
        if any(s is not None for s in e.ism2_reachable):
            yield TsCase(p, _odd(rng, 1000, 5000), n, _odd(rng, 1, 32), ta, tb, "exact-extent", 1.0, 0.5,
                         pad=1, offset=1)
        yield TsCase(p, _odd(rng, 33, 400), n, _odd(rng, 1, 300), ta, tb, UNTOUCHED_KIND, 0.0, 1.0, pad=1)
        yield TsCase(p, _odd(rng, 33, 400), n, 0, ta, tb, UNTOUCHED_KIND, 1.0, 1.0, pad=1)
        yield TsCase(p, _odd(rng, 33, 400), n, _odd(rng, 1, 300), ta, tb, NULL_AB_KIND, 0.0, 0.5, pad=1)


def tensor_core_route_cases(entries, routes: list[dict], rng: np.random.Generator) -> Iterator[TsCase]:
    """Per (precision, n) that a Tensor Core route serves (manifest: tallskinny.tensor_core): the public API
    on an A tall enough for it (m from the route's min_m, k in TSM2's region) with every leading dimension
    on 16-byte chunks, in the four transposes (op(B) transposed keeps ldb = n, on chunks only where n is a
    multiple of the chunk: TSM2 serves the others), lda past m, beta = 0 over NaN; and the same shapes one
    element off 16 bytes, where TSM2 serves instead."""
    by_precision = {r["precision"]: r for r in routes}
    for e in _one_per_n(entries):
        route = by_precision.get(e.precision)
        if route is None or e.n > route["max_n"]:
            continue
        chunk = 16 // ref.host_dtype(e.precision).itemsize

        def tall():
            m = route["min_m"] + chunk * int(rng.integers(0, 64))
            k = chunk * (e.ism2_max_k // chunk + int(rng.integers(1, 48)))
            return m, k
        for ta, tb in TRANS:
            m, k = tall()
            yield TsCase(e.precision, m, e.n, k, ta, tb, "tensor-core route", 0.75, -0.5, pad=0)
        m, k = tall()
        yield TsCase(e.precision, m, e.n, k, "N", "N", "tensor-core route", 1.25, 0.0, pad=chunk)
        yield TsCase(e.precision, m, e.n, k, "T", "N", "beta0-nan", 1.0, 0.0, pad=0)
        yield TsCase(e.precision, m, e.n, k, "N", "N", "tensor-core route, A off 16 bytes", 1.0, 0.5, pad=0, offset=1)


def tsmma_cases(entries, rng: np.random.Generator, quick: bool = False) -> Iterator[TsCase]:
    """Per dispatch entry with a TSMMA kernel (fp64 Tensor Cores, op(A) = A): the public API where the
    entry sends calls to it (m from its cut-off, k in TSM2's region) with op(B) = B and B^T; the kernel
    directly with k split in 1 and 3 slices and at the launch's choice; m and k off every tile (an m
    below one block, a k below one stage); lda odd (A copied element by element), lda even over odd m
    (16-byte chunks, the last one half past m), A one element off 16 bytes; beta = 0 over NaN and an
    exact integer case."""
    # (among the entries that have one: an architecture's table serves sm_80+ with TSMMA and sm_75 without)
    for e in _one_per_n(e for e in entries if e.mma is not None):
        spec = e.mma
        p, n = e.precision, e.n

        def scal():
            return float(rng.uniform(0.5, 1.5) * rng.choice([-1, 1]))

        def tall():
            return max(e.mma_min_m, _odd(rng, 33, 900)), e.ism2_max_k + _odd(rng, 1, 700)
        for tb in ("N", "T"):
            m, k = tall()
            yield TsCase(p, m, n, k, "N", tb, "tsmma", scal(), scal(), pad=int(rng.integers(0, 2)))
        m, k = tall()
        yield TsCase(p, m, n, k, "N", "N", "beta0-nan", scal(), 0.0)
        yield TsCase(p, m, n, min(k, 300), "N", "T", "exact", 1.0, 1.0)
        if quick:
            continue
        for split in (0, 1, 3):
            m, k = _odd(rng, 33, 900), _odd(rng, 8 * spec.bk + 1, 3000)
            yield TsCase(p, m, n, k, "N", "NT"[split % 2], "tsmma", scal(), scal(), spec.name, split)
        yield TsCase(p, _odd(rng, 1, spec.block_rows), n, _odd(rng, 1, spec.bk), "N", "N", "tsmma: m, k below a tile",
                     scal(), scal(), spec.name, 0)
        k = _odd(rng, 3 * spec.bk, 2000)
        yield TsCase(p, _odd(rng, 33, 900), n, k, "N", "T", "exact-extent", 0.75, 0.5, spec.name, 2, pad=0)
        yield TsCase(p, _odd(rng, 33, 900), n, k, "N", "N", "exact-extent", 0.75, 0.5, spec.name, 2, pad=1)
        yield TsCase(p, _odd(rng, 33, 900), n, k, "N", "N", "exact-extent", -1.25, 0.0, spec.name, 0, pad=1,
                     offset=1)
        yield TsCase(p, _odd(rng, 33, 900), n, k, "N", "T", "beta0-nan", scal(), 0.0, spec.name, 3)


def run_cases(lib, cases, seed: int = 2027, progress: Callable | None = None,
              exact_buffers: bool = False) -> list[CaseResult]:
    rng = np.random.default_rng(seed)
    out = []
    for i, case in enumerate(cases):
        try:
            out.append(run_ts_case(lib, case, rng, exact_buffers))
        except Exception as err:   # a crash is a failed check, and the run goes on
            out.append(CaseResult(case.precision, case.m, case.n, case.k, case.transa, case.transb,
                                  case.target, 1, case.kind, -999, float("nan"), 0.0, False, None,
                                  False, f"exception: {str(err)[:200]}"))
        if progress:
            progress(i + 1, len(cases))
    return out


def check_not_generated(lib, ns) -> list[CaseResult]:
    """n outside the emitted set and the complex precisions return GEMMGEN_NOT_GENERATED."""
    from gemmgen.harness.core.api import NOT_GENERATED

    out = []
    outside = max(ns) + 1
    for p, n in (("s", outside), ("d", outside), ("h", outside), ("z", 4), ("c", 4), ("hc", 4)):
        rc = lib.tallskinny(p, "N", "N", 10, n, 10, 1.0, 8, 10, 8, 10, 0.0, 8, 10)
        out.append(CaseResult(p, 10, n, 10, "N", "N", "api", 1, "not-generated", rc, 0.0, 0.0, True,
                              None, rc == NOT_GENERATED, f"expected {NOT_GENERATED}"))
    return out


def check_tall(lib, prec: str, m: int, n: int, k: int, transa: str, seed: int = 11,
               target: str = "api", split: int = 0) -> CaseResult:
    """op(A) with more than 2^31 elements: generated on the GPU; rows sampled at the start, the
    end, at random and past element 2^31 are compared with the float64 reference."""
    import cupy as cp

    rs = cp.random.RandomState(seed)
    ra, ca = _stored(transa, m, k)
    lda = ra
    dtype = ref.host_dtype(prec)
    total = lda * ca
    d_a = cp.empty(total, dtype=dtype)
    chunk = 1 << 28
    for s in range(0, total, chunk):
        e = min(total, s + chunk)
        d_a[s:e] = (rs.uniform(-1, 1, size=e - s, dtype=np.float32)).astype(dtype)
    b_host = ref.random_values(np.random.default_rng(seed), prec, k * n).reshape(k, n)   # op(B), k×n
    d_b = cp.asarray(ref.to_storage(prec, b_host.reshape(-1, order="F")))
    ldb = k
    ldc = m
    d_c = cp.empty(m * n, dtype=dtype)
    d_c[:] = cp.asarray(np.array(np.nan, dtype=dtype))
    alpha = 0.75
    if target == "api":
        rc = lib.tallskinny(prec, transa, "N", m, n, k, alpha, d_a.data.ptr, lda, d_b.data.ptr, ldb,
                            0.0, d_c.data.ptr, ldc)
    else:
        from gemmgen.harness.core.api import scalar

        rc = lib.variant(target)(transa.encode(), b"N", m, n, k, scalar(prec, alpha), d_a.data.ptr, lda,
                                 d_b.data.ptr, ldb, scalar(prec, 0.0), d_c.data.ptr, ldc, split, 0)
    cp.cuda.runtime.deviceSynchronize()
    rng = np.random.default_rng(seed)
    past = (2**31) // k + 1      # rows whose elements lie past 2^31 (either layout)
    rows = np.unique(np.concatenate([np.arange(256), np.arange(m - 256, m),
                                     rng.integers(0, m, 512), rng.integers(min(past, m - 1), m, 512)]))
    d_rows = cp.asarray(rows)
    cols = cp.arange(k)
    if transa == "N":
        idx = d_rows[:, None] + cols[None, :] * lda
    else:
        idx = d_rows[:, None] * lda + cols[None, :]
    a_rows = cp.asnumpy(d_a[idx]).astype(np.float64)
    c_rows = cp.asnumpy(d_c[d_rows[:, None] + cp.arange(n)[None, :] * ldc]).astype(np.float64)
    expected = alpha * a_rows @ b_host
    c0 = np.zeros_like(expected)
    err = float(ref.relative_errors(c_rows[None], expected[None], alpha, a_rows[None], b_host[None],
                                    0.0, c0[None])[0])
    bound = ref.error_bound(prec, k)
    elements = m * k
    del d_a, d_b, d_c
    cp.get_default_memory_pool().free_all_blocks()
    return CaseResult(prec, m, n, k, transa, "N", target, 1, "A>2^31 elements", rc, err, bound, True,
                      None, rc == 0 and err <= bound,
                      f"{elements} elements in A ({elements / 2**31:.2f}·2^31), {len(rows)} rows sampled")


def entries_from_manifest(manifest: dict) -> list:
    """The tall-skinny dispatch entries of an emitted set's manifest.json, with parsed specs (an ISM2
    kernel that was not emitted, which the cut-offs never choose, is None, as in ism2_reachable)."""
    from types import SimpleNamespace

    from gemmgen.generator.tallskinny import parse_spec

    out = []
    for e in manifest.get("tallskinny", {}).get("dispatch", []):
        out.append(SimpleNamespace(precision=e["precision"], n=e["n"], ism2_max_k=e["ism2_max_k"],
                                   tsm2=parse_spec(e["tsm2"]),
                                   ism2_reachable=tuple(e[key] and parse_spec(e[key])
                                                        for key in ("ism2_opt1", "ism2_opt2")),
                                   mma=parse_spec(e["tsmma"]) if e.get("tsmma") else None,
                                   mma_min_m=e.get("tsmma_min_m") or 0, device=e.get("for_device")))
    return out


def manifest_cases(manifest: dict, rng: np.random.Generator, quick: bool = False) -> list:
    """What `gemmgen check` runs for the tall-skinny part of a set."""
    entries = entries_from_manifest(manifest)
    if not entries:
        return []
    cases = list(default_cases(entries, rng))
    if quick:
        cases = [c for c in cases if c.target == "api" or c.kind != "random"]
    exact = list(exact_extent_cases(entries, rng))
    if quick:
        exact = [c for c in exact if c.target == "api"]
    routes = manifest["tallskinny"].get("tensor_core", [])
    return (cases + list(edge_cases(entries)) + exact + list(tensor_core_route_cases(entries, routes, rng))
            + list(tsmma_cases(entries, rng, quick)))


def run_manifest_checks(lib, manifest: dict, quick: bool = False, exact_buffers: bool | None = None,
                        progress: Callable | None = None) -> list[CaseResult]:
    """The tall-skinny checks of an emitted set.  exact_buffers=True puts every operand of every
    case in its own allocation of exactly its extent (for compute-sanitizer); None takes it from
    GEMMGEN_EXACT_BUFFERS.  progress(done, total) after each case."""
    if exact_buffers is None:
        exact_buffers = exact_buffers_from_env()
    cases = manifest_cases(manifest, np.random.default_rng(20261123), quick)
    if not cases:
        return []
    ns = manifest["tallskinny"]["n"]
    results = run_cases(lib, cases, exact_buffers=exact_buffers, progress=progress)
    results += check_not_generated(lib, ns)
    precs = {e.precision for e in entries_from_manifest(manifest)}
    if not quick and "h" in precs and 16 in ns:
        results.append(check_tall(lib, "h", 2**31 // 16 + 4099, 16, 16, "N"))
    tsmma = [e.mma for e in entries_from_manifest(manifest) if e.mma is not None]
    for prec in sorted({s.precision for s in tsmma} if not quick else ()):
        # A of more than 2^31 elements through the TSMMA kernel of the largest n, per precision
        spec = max((s for s in tsmma if s.precision == prec), key=lambda s: s.max_n)
        results.append(check_tall(lib, spec.precision, 2**31 // 40 + 4099, spec.max_n, 40, "N", target=spec.name))
    return results
