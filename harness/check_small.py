"""GPU checks of the small family through the generated C API (libgemmgen.so via ctypes, data
through CuPy), against the float64 NumPy reference of harness.reference.

Every case draws fresh inputs, uses leading dimensions and strides larger than the matrices,
poisons C's padding and the gaps between batch entries and checks they come back untouched."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Callable, Iterator

import numpy as np

from generator.precision import PRECISIONS

from . import reference as ref
from .api import GemmgenLibrary

POISON = -999.0   # exactly representable in every precision, never a plausible result


@dataclass
class CaseResult:
    precision: str
    m: int
    n: int
    k: int
    transa: str
    transb: str
    interface: str
    batch: int
    kind: str            # "random", "exact", "beta0-nan", "alpha0", "k0", ...
    rc: int
    max_error: float
    bound: float
    untouched_ok: bool
    exact_ok: bool | None
    passed: bool
    note: str = ""

    def to_json(self) -> dict:
        d = asdict(self)
        d["max_error"] = None if math.isnan(self.max_error) else self.max_error
        return d


@dataclass(frozen=True)
class Case:
    precision: str
    m: int
    n: int
    k: int
    transa: str = "N"
    transb: str = "N"
    interface: str = "strided"
    batch: int = 37
    kind: str = "random"
    alpha: complex = 1.0
    beta: complex = 0.0
    pad: int = 2          # extra rows of every leading dimension and gap between batch entries;
                          # 0 packs the batch (ld = rows, stride = matrix size)


def _stored_shape(trans: str, rows: int, cols: int) -> tuple[int, int]:
    return (rows, cols) if trans.upper() == "N" else (cols, rows)


def run_case(lib: GemmgenLibrary, case: Case, rng: np.random.Generator) -> CaseResult:
    import cupy as cp

    p = case.precision
    m, n, k, batch = case.m, case.n, case.k, case.batch
    integer = case.kind == "exact"
    ra, ca = _stored_shape(case.transa, m, k)
    rb, cb = _stored_shape(case.transb, k, n)
    lda, ldb, ldc = max(ra, 1) + case.pad, max(rb, 1) + case.pad, max(m, 1) + case.pad
    gap = case.pad + 1 if case.pad else 0   # pad = 0: packed batch (the kernels' 16-byte load path)
    sa, sb, sc = lda * ca + gap, ldb * cb + gap, ldc * n + gap

    def operand(length: int) -> np.ndarray:
        return ref.random_values(rng, p, length, integer)

    a_vals = operand(sa * batch)
    b_vals = operand(sb * batch)
    c_vals = np.full(sc * batch, POISON, dtype=np.complex128 if ref.is_complex(p) else np.float64)
    c0 = operand(batch * m * n).reshape(batch, m, n)
    if case.kind == "beta0-nan":
        c0 = np.full_like(c0, np.nan)
    item = c_vals.itemsize
    c_blocks = np.lib.stride_tricks.as_strided(c_vals, shape=(batch, m, n),
                                               strides=(sc * item, item, ldc * item))
    c_blocks[...] = c0

    d_a = cp.asarray(ref.to_storage(p, a_vals))
    d_b = cp.asarray(ref.to_storage(p, b_vals))
    c_stored = ref.to_storage(p, c_vals)
    d_c = cp.asarray(c_stored)
    elem = PRECISIONS[p].element_bytes
    if case.interface == "strided":
        rc = lib.strided(p, case.transa, case.transb, m, n, k, case.alpha, d_a.data.ptr, lda, sa,
                         d_b.data.ptr, ldb, sb, case.beta, d_c.data.ptr, ldc, sc, batch)
    else:
        idx = np.arange(batch, dtype=np.uint64)
        pa = cp.asarray(np.uint64(d_a.data.ptr) + idx * np.uint64(sa * elem))
        pb = cp.asarray(np.uint64(d_b.data.ptr) + idx * np.uint64(sb * elem))
        pc = cp.asarray(np.uint64(d_c.data.ptr) + idx * np.uint64(sc * elem))
        rc = lib.array(p, case.transa, case.transb, m, n, k, case.alpha, pa.data.ptr, lda,
                       pb.data.ptr, ldb, case.beta, pc.data.ptr, ldc, batch)
    cp.cuda.runtime.deviceSynchronize()
    out_stored = cp.asnumpy(d_c)

    a = ref.matrices(a_vals, batch, ra, ca, lda, sa)
    b = ref.matrices(b_vals, batch, rb, cb, ldb, sb)
    expected = ref.reference(case.transa, case.transb, case.alpha, a, b, case.beta, c0)
    out_vals = ref.from_storage(p, out_stored)
    got = ref.matrices(out_vals, batch, m, n, ldc, sc)

    # Everything outside the m×n blocks must still be the poison, bit for bit.
    mask = np.ones(c_vals.shape, dtype=bool)
    np.lib.stride_tricks.as_strided(mask, shape=(batch, m, n), strides=(sc, 1, ldc))[...] = False
    untouched = bool(np.array_equal(out_stored[mask], c_stored[mask]))

    errors = ref.relative_errors(got, expected, case.alpha, a, b, case.beta, c0)
    max_err = float(np.max(errors)) if errors.size else 0.0
    if errors.size and np.isnan(errors).any():
        max_err = float("nan")
    exact = bool(np.array_equal(got, expected)) if integer else None
    bound = ref.error_bound(p, k)
    verdict = ref.Verdict(max_err, bound, untouched, exact)
    passed = rc == 0 and verdict.passed
    return CaseResult(p, m, n, k, case.transa, case.transb, case.interface, batch, case.kind, rc,
                      max_err, bound, untouched, exact, passed)


def _scalars(rng: np.random.Generator, prec: str) -> tuple[complex, complex]:
    def one():
        v = rng.uniform(0.5, 1.5) * rng.choice([-1, 1])
        if ref.is_complex(prec):
            v = complex(v, rng.uniform(0.5, 1.5) * rng.choice([-1, 1]))
        return v
    return one(), one()


def default_cases(shapes_by_precision: dict[str, list[tuple[int, int, int]]], rng: np.random.Generator,
                  thorough: bool = True) -> Iterator[Case]:
    """Every precision × shape × transpose pair × interface with random data, plus per shape a
    bit-exact integer case, beta = 0 over NaN, alpha = 0, and the k = 0 path."""
    for prec, shapes in shapes_by_precision.items():
        pairs = PRECISIONS[prec].trans_pairs
        for (m, n, k) in shapes:
            for ta, tb in pairs:
                for interface in ("strided", "array"):
                    if not thorough and (ta, tb) != pairs[-1] and interface == "array":
                        continue
                    alpha, beta = _scalars(rng, prec)
                    yield Case(prec, m, n, k, ta, tb, interface, int(rng.integers(1, 60)), "random",
                               alpha, beta)
            ta, tb = pairs[int(rng.integers(len(pairs)))]
            alpha, beta = _scalars(rng, prec)
            yield Case(prec, m, n, k, ta, tb, "strided", int(rng.integers(1, 130)), "packed", alpha,
                       beta, pad=0)
            yield Case(prec, m, n, k, ta, tb, "strided", 33, "exact", 1.0, 1.0)
            alpha, _ = _scalars(rng, prec)
            yield Case(prec, m, n, k, ta, tb, "strided", 21, "beta0-nan", alpha, 0.0)
            _, beta = _scalars(rng, prec)
            yield Case(prec, m, n, k, ta, tb, "array", 17, "alpha0", 0.0, beta)


def edge_cases(precisions: list[str]) -> Iterator[Case]:
    """The contract's corners: k = 0 scales C, batch over 65,535."""
    for prec in precisions:
        yield Case(prec, 5, 3, 0, "N", "N", "strided", 9, "k0", 1.0, 0.5)
        yield Case(prec, 2, 2, 2, "N", "T", "strided", 70_001, "batch>65535", 1.0, 0.5, pad=0)
        yield Case(prec, 2, 2, 2, "T", "N", "array", 70_001, "batch>65535", 1.0, 0.0, pad=0)


def run_cases(lib: GemmgenLibrary, cases: list[Case], seed: int = 2026,
              progress: Callable[[int, int], None] | None = None) -> list[CaseResult]:
    rng = np.random.default_rng(seed)
    results = []
    for i, case in enumerate(cases):
        results.append(run_case(lib, case, rng))
        if progress:
            progress(i + 1, len(cases))
    return results


def check_large_stride(lib: GemmgenLibrary, prec: str = "h", n: int = 4) -> CaseResult:
    """Two GEMMs whose second matrices start past element 2^31 (64-bit offsets in the kernels)."""
    import cupy as cp

    rng = np.random.default_rng(7)
    stride = 2**31 + 64
    elem = PRECISIONS[prec].element_bytes
    total = stride + n * n
    dtype = ref.host_dtype(prec)
    width = 2 if prec == "hc" else 1
    bufs = [cp.empty(total * width, dtype=dtype) for _ in range(3)]
    vals = {}
    for name, buf in zip("ABC", bufs):
        v = ref.random_values(rng, prec, 2 * n * n).reshape(2, n, n)
        vals[name] = v
        for i in range(2):
            block = ref.to_storage(prec, v[i].T.reshape(-1))   # column-major
            offset = i * stride * width
            buf[offset:offset + n * n * width] = cp.asarray(block.reshape(-1))
    rc = lib.strided(prec, "N", "N", n, n, n, 1.0, bufs[0].data.ptr, n, stride, bufs[1].data.ptr, n,
                     stride, 1.0, bufs[2].data.ptr, n, stride, 2)
    cp.cuda.runtime.deviceSynchronize()
    got = []
    for i in range(2):
        offset = i * stride * width
        raw = cp.asnumpy(bufs[2][offset:offset + n * n * width])
        got.append(ref.from_storage(prec, raw.reshape(n * n, 2) if width == 2 else raw).reshape(n, n).T)
    got = np.stack(got)
    a, b, c0 = vals["A"], vals["B"], vals["C"]
    expected = ref.reference("N", "N", 1.0, a, b, 1.0, c0)
    err = float(np.max(ref.relative_errors(got, expected, 1.0, a, b, 1.0, c0)))
    bound = ref.error_bound(prec, n)
    del bufs
    cp.get_default_memory_pool().free_all_blocks()
    return CaseResult(prec, n, n, n, "N", "N", "strided", 2, "stride>2^31", rc, err, bound, True,
                      None, rc == 0 and err <= bound, f"stride {stride} elements, {elem} bytes each")
