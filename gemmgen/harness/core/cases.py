"""GPU checks of the small family through the generated C API (libgemmgen.so via ctypes, data
through CuPy), against the float64 NumPy reference of harness.core.reference.

Every case draws fresh inputs, uses leading dimensions and strides larger than the matrices,
poisons C's padding and the gaps between batch entries and checks they come back untouched."""
from __future__ import annotations

import math
import multiprocessing
import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from gemmgen.generator.precision import PRECISIONS

from gemmgen.harness.core import reference as ref
from gemmgen.harness.core.api import GemmgenLibrary

POISON = -999.0   # exactly representable in every precision, never a plausible result
# Cases with beta = 1 and alpha = 0 or k = 0, C holding Inf: C must come back as it was.
UNTOUCHED_KIND = "beta1-untouched"


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
    kernel: str = ""      # call this variant's own launcher instead of the public entry point
    align: int = 1        # leading dimensions and strides rounded up to a multiple of this (the
                          # wmma cp.async ring runs only on 16-byte aligned operands: align = 8)
    offset: int = 0       # elements before A's and B's first matrix in their GPU buffers: an odd
                          # offset starts a packed batch between 16-byte boundaries
    c_offset: int = 0     # the same for C (the wmma cp.async ring copies C too only when aligned)
    shuffle: bool = False  # pointer arrays: entry i takes the matrices of a random permutation's
                           # i-th index (A, B and C alike), so neighbours in the array are not
                           # neighbours in memory


def _stored_shape(trans: str, rows: int, cols: int) -> tuple[int, int]:
    return (rows, cols) if trans.upper() == "N" else (cols, rows)


@dataclass
class Prepared:
    """A case's inputs: values (float64/complex128) for the reference and stored arrays for the
    library under test.  Shared by the GPU checks here and the CPU checks (harness.cpu.check)."""
    case: Case             # alpha and beta already rounded as the C API receives them
    lda: int
    ldb: int
    ldc: int
    sa: int
    sb: int
    sc: int
    a_vals: np.ndarray
    b_vals: np.ndarray
    c0: np.ndarray
    a: np.ndarray          # stored arrays passed to the library
    b: np.ndarray
    c: np.ndarray


def prepare(case: Case, rng: np.random.Generator) -> Prepared:
    """Fresh inputs for one case: leading dimensions and strides `pad` larger than the matrices
    (pad = 0: a packed batch), C poisoned outside its m×n blocks."""
    p = case.precision
    case = replace(case, alpha=ref.round_scalar(p, case.alpha), beta=ref.round_scalar(p, case.beta))
    m, n, k, batch = case.m, case.n, case.k, case.batch
    integer = case.kind == "exact"
    ra, ca = _stored_shape(case.transa, m, k)
    rb, cb = _stored_shape(case.transb, k, n)
    up = lambda x: -(-x // case.align) * case.align   # noqa: E731
    lda, ldb, ldc = up(max(ra, 1) + case.pad), up(max(rb, 1) + case.pad), up(max(m, 1) + case.pad)
    gap = case.pad + 1 if case.pad else 0
    sa, sb, sc = up(lda * ca + gap), up(ldb * cb + gap), up(ldc * n + gap)
    a_vals = ref.random_values(rng, p, sa * batch, integer)
    b_vals = ref.random_values(rng, p, sb * batch, integer)
    c_vals = np.full(sc * batch, POISON, dtype=np.complex128 if ref.is_complex(p) else np.float64)
    c0 = ref.random_values(rng, p, batch * m * n, integer).reshape(batch, m, n)
    if case.kind.endswith("beta0-nan"):   # C is NaN wherever beta = 0 must not read it
        c0 = np.full_like(c0, np.nan)
    if case.kind.endswith(UNTOUCHED_KIND):   # complex 1·(Inf, 0) would come back (Inf, NaN)
        c0[:, 0, 0] = np.inf
    item = c_vals.itemsize
    np.lib.stride_tricks.as_strided(c_vals, shape=(batch, m, n),
                                    strides=(sc * item, item, ldc * item))[...] = c0
    return Prepared(case, lda, ldb, ldc, sa, sb, sc, a_vals, b_vals, c0,
                    np.ascontiguousarray(ref.to_storage(p, a_vals)),
                    np.ascontiguousarray(ref.to_storage(p, b_vals)),
                    np.ascontiguousarray(ref.to_storage(p, c_vals)))


def verdict(pr: Prepared, rc: int, out_stored: np.ndarray, note: str = "") -> CaseResult:
    """Compare the library's C with the reference, and its padding with the poison, bit for bit."""
    case = pr.case
    p, m, n, k, batch = case.precision, case.m, case.n, case.k, case.batch
    if case.kind.endswith(UNTOUCHED_KIND):   # BLAS's quick return: all of C bit for bit as it was
        same = bool(np.array_equal(out_stored.view(np.uint8), pr.c.view(np.uint8)))
        return CaseResult(p, m, n, k, case.transa, case.transb, case.interface, batch, case.kind, rc, 0.0,
                          ref.error_bound(p, k), same, None, rc == 0 and same, note)
    ra, ca = _stored_shape(case.transa, m, k)
    rb, cb = _stored_shape(case.transb, k, n)
    a = ref.matrices(pr.a_vals, batch, ra, ca, pr.lda, pr.sa)
    b = ref.matrices(pr.b_vals, batch, rb, cb, pr.ldb, pr.sb)
    expected = ref.reference(case.transa, case.transb, case.alpha, a, b, case.beta, pr.c0)
    got = ref.matrices(ref.from_storage(p, out_stored), batch, m, n, pr.ldc, pr.sc)
    # One flag per element (hc storage has a trailing axis of 2: the mask must not follow it).
    mask = np.ones(len(pr.c), dtype=bool)
    np.lib.stride_tricks.as_strided(mask, shape=(batch, m, n), strides=(pr.sc, 1, pr.ldc))[...] = False
    # Compare bytes, so that no float comparison rule can hide a changed padding element.
    untouched = bool(np.array_equal(out_stored[mask].view(np.uint8), pr.c[mask].view(np.uint8)))
    errors = ref.relative_errors(got, expected, case.alpha, a, b, case.beta, pr.c0)
    max_err = float(np.max(errors)) if errors.size else 0.0
    if errors.size and np.isnan(errors).any():
        max_err = float("nan")
    exact = bool(np.array_equal(got, expected)) if case.kind == "exact" else None
    bound = ref.error_bound(p, k)
    passed = rc == 0 and ref.Verdict(max_err, bound, untouched, exact).passed
    return CaseResult(p, m, n, k, case.transa, case.transb, case.interface, batch, case.kind, rc,
                      max_err, bound, untouched, exact, passed, note)


# Set (to anything but "" or "0") by `gemmgen check --sanitize` for the processes it runs under
# compute-sanitizer: every operand's allocation ends at its last element, with CuPy's memory pool
# off, so a read or write past the bytes a call describes is outside its allocation and reported.
EXACT_BUFFERS_ENV = "GEMMGEN_EXACT_BUFFERS"
# Elements of poison after the end of C in the ordinary check (exact buffers have none): a write
# past the last matrix changes them and fails the case.
C_GUARD = 64


def exact_buffers() -> bool:
    return os.environ.get(EXACT_BUFFERS_ENV, "") not in ("", "0")


def use_exact_allocations() -> None:
    """Every CuPy allocation from now on its own cudaMalloc of exactly the bytes asked for."""
    import cupy as cp

    cp.cuda.set_allocator(None)
    cp.cuda.set_pinned_memory_allocator(None)


def extent(rows: int, cols: int, ld: int, stride: int, batch: int) -> int:
    """Elements from the first matrix's first element to the last matrix's last one, inclusive."""
    if rows <= 0 or cols <= 0 or batch <= 0:
        return 0
    return (batch - 1) * stride + (cols - 1) * ld + rows


def _on_gpu(stored: np.ndarray, offset: int, length: int | None = None, guard: int = 0):
    """A GPU copy of stored[:length] that starts `offset` elements into its allocation and is
    followed by `guard` elements of poison in it."""
    import cupy as cp

    part = stored[:length] if length is not None else stored
    if not offset and not guard:
        return cp.asarray(part)
    buf = cp.full((offset + len(part) + guard,) + stored.shape[1:], POISON, dtype=stored.dtype)
    buf[offset:offset + len(part)] = cp.asarray(part)
    return buf[offset:]


def run_case(lib: GemmgenLibrary, case: Case, rng: np.random.Generator) -> CaseResult:
    """One case on the GPU through the C API."""
    import cupy as cp

    pr = prepare(case, rng)
    case = pr.case
    p = case.precision
    exact = exact_buffers()
    if exact:   # each allocation ends at its operand's last element
        ra, ca = _stored_shape(case.transa, case.m, case.k)
        rb, cb = _stored_shape(case.transb, case.k, case.n)
        lengths = (extent(ra, ca, pr.lda, pr.sa, case.batch), extent(rb, cb, pr.ldb, pr.sb, case.batch),
                   extent(case.m, case.n, pr.ldc, pr.sc, case.batch))
    else:
        lengths = (None, None, None)
    guard = 0 if exact else C_GUARD
    d_a, d_b = _on_gpu(pr.a, case.offset, lengths[0]), _on_gpu(pr.b, case.offset, lengths[1])
    d_c = _on_gpu(pr.c, case.c_offset, lengths[2], guard)
    target = lib.variant_entry(case.kernel, case.interface) if case.kernel else None
    if case.interface == "strided":
        args = (case.m, case.n, case.k, case.alpha, d_a.data.ptr, pr.lda, pr.sa, d_b.data.ptr, pr.ldb,
                pr.sb, case.beta, d_c.data.ptr, pr.ldc, pr.sc, case.batch)
        rc = target(case.transa, case.transb, *args) if target else lib.strided(p, case.transa, case.transb, *args)
    else:
        elem = PRECISIONS[p].element_bytes
        idx = np.arange(case.batch, dtype=np.uint64)
        if case.shuffle:
            idx = rng.permutation(idx)
        pa, pb, pc = (cp.asarray(np.uint64(buf.data.ptr) + idx * np.uint64(stride * elem))
                      for buf, stride in ((d_a, pr.sa), (d_b, pr.sb), (d_c, pr.sc)))
        args = (case.m, case.n, case.k, case.alpha, pa.data.ptr, pr.lda, pb.data.ptr, pr.ldb, case.beta,
                pc.data.ptr, pr.ldc, case.batch)
        rc = target(case.transa, case.transb, *args) if target else lib.array(p, case.transa, case.transb, *args)
    cp.cuda.runtime.deviceSynchronize()
    out = cp.asnumpy(d_c)
    guard_ok = bool(np.all(out[len(out) - guard:].view(np.uint8) == _poison_bytes(out.dtype, guard, out.shape[1:])))
    whole = pr.c.copy()   # C as stored beyond the allocation's end: untouched by definition
    whole[:len(out) - guard] = out[:len(out) - guard]
    result = verdict(pr, rc, whole, note=case.kernel)
    if not guard_ok:
        result.untouched_ok = result.passed = False
        result.note = (result.note + " " if result.note else "") + "wrote past the end of C"
    return result


def _poison_bytes(dtype, count: int, tail: tuple) -> np.ndarray:
    return np.full((count,) + tail, POISON, dtype=dtype).view(np.uint8)


def _scalars(rng: np.random.Generator, prec: str) -> tuple[complex, complex]:
    def one():
        v = rng.uniform(0.5, 1.5) * rng.choice([-1, 1])
        if ref.is_complex(prec):
            v = complex(v, rng.uniform(0.5, 1.5) * rng.choice([-1, 1]))
        return v
    return one(), one()


def default_cases(shapes_by_precision: dict[str, list[tuple[int, int, int]]], rng: np.random.Generator,
                  thorough: bool = True, ring_shapes: frozenset = frozenset()) -> Iterator[Case]:
    """Every precision × shape × transpose pair × interface with random data, plus per shape a
    bit-exact integer case, beta = 0 over NaN, alpha = 0, and the k = 0 path.  `ring_shapes`
    ((precision, m, n, k) whose kernel has a cp.async ring, for both interfaces or for pointer
    arrays alone, which runs on packed operands and applies op() when reading shared memory):
    every transpose pair packed,
    a batch long enough that every block takes several groups (β ≠ 0, and β = 0 over NaN), and
    a batch that leaves the last group short; and the same shapes through pointer arrays (the ring
    kernel for pointer arrays): every transpose pair, matrices on and between 16-byte boundaries,
    arrays in memory order and shuffled, long batches."""
    for prec, shapes in shapes_by_precision.items():
        pairs = PRECISIONS[prec].trans_pairs
        for (m, n, k) in shapes:
            if (prec, m, n, k) in ring_shapes:
                for ta, tb in pairs:
                    alpha, beta = _scalars(rng, prec)
                    yield Case(prec, m, n, k, ta, tb, "strided", int(rng.integers(1, 130)), "ring-packed",
                               alpha, beta, pad=0)
                ta, tb = pairs[int(rng.integers(len(pairs)))]
                alpha, beta = _scalars(rng, prec)
                yield Case(prec, m, n, k, ta, tb, "strided", 3001, "ring-long", alpha, beta, pad=0)
                ta, tb = pairs[int(rng.integers(len(pairs)))]
                yield Case(prec, m, n, k, ta, tb, "strided", 2999, "ring-long-beta0-nan", alpha, 0.0, pad=0)
                # Pointer arrays to contiguous matrices take the ring too, each matrix copied on its
                # own: every transpose pair, matrices on and between 16-byte boundaries, in memory
                # order and shuffled, several groups per block.
                for i, (ta, tb) in enumerate(pairs):
                    alpha, beta = _scalars(rng, prec)
                    yield Case(prec, m, n, k, ta, tb, "array", int(rng.integers(1, 130)), "ring-array",
                               alpha, beta, pad=0, offset=i % 2, shuffle=i % 3 == 1)
                ta, tb = pairs[int(rng.integers(len(pairs)))]
                alpha, beta = _scalars(rng, prec)
                yield Case(prec, m, n, k, ta, tb, "array", 3001, "ring-array-long", alpha, beta, pad=0,
                           offset=1, shuffle=True)
                ta, tb = pairs[int(rng.integers(len(pairs)))]
                yield Case(prec, m, n, k, ta, tb, "array", 2999, "ring-array-long-beta0-nan", alpha, 0.0,
                           pad=0, shuffle=True)
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
            ta, tb = pairs[int(rng.integers(len(pairs)))]
            alpha, beta = _scalars(rng, prec)
            yield Case(prec, m, n, k, ta, tb, "strided", int(rng.integers(1, 130)), "packed-offset", alpha,
                       beta, pad=0, offset=1)
            # Pointer arrays to contiguous matrices (ld = stored rows): the 16-byte paths of the
            # pointer-array interface, on matrices that start on and between 16-byte boundaries.
            for kind, offset in (("array-packed", 0), ("array-packed-offset", 1)):
                ta, tb = pairs[int(rng.integers(len(pairs)))]
                alpha, beta = _scalars(rng, prec)
                yield Case(prec, m, n, k, ta, tb, "array", int(rng.integers(1, 130)), kind, alpha, beta,
                           pad=0, offset=offset)
            yield Case(prec, m, n, k, ta, tb, "strided", 33, "exact", 1.0, 1.0)
            alpha, _ = _scalars(rng, prec)
            yield Case(prec, m, n, k, ta, tb, "strided", 21, "beta0-nan", alpha, 0.0)
            _, beta = _scalars(rng, prec)
            yield Case(prec, m, n, k, ta, tb, "array", 17, "alpha0", 0.0, beta)


def edge_cases(precisions: list[str]) -> Iterator[Case]:
    """The contract's corners: k = 0 scales C, alpha = 0 or k = 0 with beta = 1 leaves C as it was,
    batch over 65,535."""
    for prec in precisions:
        yield Case(prec, 5, 3, 0, "N", "N", "strided", 9, "k0", 1.0, 0.5)
        yield Case(prec, 5, 3, 0, "N", "N", "strided", 9, "k0-" + UNTOUCHED_KIND, 1.0, 1.0)
        yield Case(prec, 3, 4, 2, "N", "T", "array", 7, "alpha0-" + UNTOUCHED_KIND, 0.0, 1.0)
        yield Case(prec, 2, 2, 2, "N", "T", "strided", 70_001, "batch>65535", 1.0, 0.5, pad=0)
        yield Case(prec, 2, 2, 2, "T", "N", "array", 70_001, "batch>65535", 1.0, 0.0, pad=0)


def case_rng(seed: int, index: int) -> np.random.Generator:
    """Case `index`'s own random stream: its inputs do not depend on which process runs it."""
    return np.random.default_rng((seed, index))


_WORKER_LIB = None   # a check worker process's library (run_cases with workers > 1)


def _worker_start(library_type: type, path: str) -> None:
    global _WORKER_LIB
    if exact_buffers():
        use_exact_allocations()
    _WORKER_LIB = library_type(Path(path))


def _worker_case(job: tuple[int, int, Case]) -> CaseResult:
    seed, index, case = job
    return run_case(_WORKER_LIB, case, case_rng(seed, index))


def run_cases(lib: GemmgenLibrary, cases: list[Case], seed: int = 2026,
              progress: Callable[[int, int], None] | None = None, workers: int = 1,
              into: list[CaseResult] | None = None) -> list[CaseResult]:
    """Every case through `lib`, results in the order of `cases`.  workers > 1: that many processes,
    each loading the library into its own CUDA context on the same GPU.  The NumPy side (fresh
    inputs, the float64 reference, the comparison) is most of a check's time, the GPU mostly waits:
    the hc set's ~6,000 cases took about 15 CPU-minutes of it (2026-11-24).  `into`: the list the
    results are appended to as they come (returned), so that `progress` can see those so far."""
    results: list[CaseResult] = into if into is not None else []
    done_before = len(results)
    if workers <= 1 or len(cases) < 2 * workers:
        for i, case in enumerate(cases):
            results.append(run_case(lib, case, case_rng(seed, i)))
            if progress:
                progress(i + 1, len(cases))
        return results
    # spawn, not fork: a forked child would inherit the parent's CUDA state, which CUDA does not allow
    with multiprocessing.get_context("spawn").Pool(workers, initializer=_worker_start,
                                                   initargs=(type(lib), str(lib.path))) as pool:
        for result in pool.imap(_worker_case, [(seed, i, c) for i, c in enumerate(cases)], chunksize=4):
            results.append(result)
            if progress:
                progress(len(results) - done_before, len(cases))
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
