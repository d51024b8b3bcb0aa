"""NumPy side of every check: inputs in each precision, the float64/complex128 reference, and the
error measure and bound of docs/api.md (Accuracy).  Pure NumPy, so it runs (and is tested) without a GPU."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import as_strided

from gemmgen.generator.precision import PRECISIONS

# c in the bound err <= c·k·u: a real dot product of length k is off by at most k·u·Σ|a||b|, the
# alpha/beta scaling adds about 2u; a complex product is two real products per term.
BOUND_FACTOR = {False: 2.0, True: 4.0}


def host_dtype(prec: str) -> np.dtype:
    """NumPy dtype of one stored element ('hc' is a pair of float16: shape (..., 2))."""
    return np.dtype({"h": np.float16, "hc": np.float16, "s": np.float32, "d": np.float64,
                     "c": np.complex64, "z": np.complex128}[prec])


def is_complex(prec: str) -> bool:
    return PRECISIONS[prec].is_complex


def round_to(prec: str, values: np.ndarray) -> np.ndarray:
    """Round float64/complex128 values to what the precision can store, back in float64/complex128
    (fp16 inputs are upcast exactly, so the reference sees exactly the stored numbers)."""
    if prec in ("h", "hc"):
        if is_complex(prec):
            return (values.real.astype(np.float16).astype(np.float64)
                    + 1j * values.imag.astype(np.float16).astype(np.float64))
        return values.astype(np.float16).astype(np.float64)
    if prec == "s":
        return values.astype(np.float32).astype(np.float64)
    if prec == "c":
        return values.astype(np.complex64).astype(np.complex128)
    return values.astype(np.complex128 if is_complex(prec) else np.float64)


def round_scalar(prec: str, value: complex | float) -> complex | float:
    """alpha or beta as the C API receives it (float / cuFloatComplex for h, hc, s, c): the
    reference must use the rounded value, or the rounding alone can exceed the bound at k = 1."""
    single = PRECISIONS[prec].scalar in ("float", "cuFloatComplex")
    if is_complex(prec):
        return complex(np.complex64(value)) if single else complex(value)
    return float(np.float32(np.real(value))) if single else float(np.real(value))


def to_storage(prec: str, values: np.ndarray) -> np.ndarray:
    """float64/complex128 values -> the array whose bytes the GPU kernels read."""
    if prec == "hc":
        out = np.empty(values.shape + (2,), dtype=np.float16)
        out[..., 0] = values.real
        out[..., 1] = values.imag
        return out
    return values.astype(host_dtype(prec))


def from_storage(prec: str, stored: np.ndarray) -> np.ndarray:
    if prec == "hc":
        return stored[..., 0].astype(np.float64) + 1j * stored[..., 1].astype(np.float64)
    return stored.astype(np.complex128 if is_complex(prec) else np.float64)


def random_values(rng: np.random.Generator, prec: str, count: int, integer: bool = False) -> np.ndarray:
    """Fresh values of both signs, never zero.  integer=True gives small integers (±1, ±2), whose
    products and sums up to k = 32 are exact in every precision: the bit-exact check."""
    def draw():
        if integer:
            return rng.choice(np.array([-2.0, -1.0, 1.0, 2.0]), size=count)
        mag = rng.uniform(0.25, 1.0, size=count)
        return np.where(rng.random(count) < 0.5, -mag, mag)
    v = draw() + (1j * draw() if is_complex(prec) else 0)
    return round_to(prec, v)


def matrices(buffer: np.ndarray, batch: int, rows: int, cols: int, ld: int, stride: int) -> np.ndarray:
    """View a flat column-major buffer as (batch, rows, cols)."""
    item = buffer.itemsize
    return as_strided(buffer, shape=(batch, rows, cols), strides=(stride * item, item, ld * item),
                      writeable=False)


def op(x: np.ndarray, trans: str) -> np.ndarray:
    t = trans.upper()
    if t == "N":
        return x
    y = np.swapaxes(x, -1, -2)
    return y.conj() if t == "C" else y


def reference(transa: str, transb: str, alpha, a: np.ndarray, b: np.ndarray, beta, c0: np.ndarray) -> np.ndarray:
    """alpha·op(A)·op(B) + beta·C in float64/complex128, batched over the first axis."""
    result = alpha * np.matmul(op(a, transa), op(b, transb))
    if beta != 0:
        result = result + beta * c0
    return result


def relative_errors(c: np.ndarray, ref: np.ndarray, alpha, a: np.ndarray, b: np.ndarray, beta,
                    c0: np.ndarray) -> np.ndarray:
    """Per matrix: ‖C − C_ref‖_F / (|alpha|·‖A‖_F·‖B‖_F + |beta|·‖C0‖_F); NaN stays NaN."""
    num = np.linalg.norm((c - ref).reshape(len(c), -1), axis=1)
    den = (abs(alpha) * np.linalg.norm(a.reshape(len(a), -1), axis=1)
           * np.linalg.norm(b.reshape(len(b), -1), axis=1))
    if beta != 0:
        den = den + abs(beta) * np.linalg.norm(c0.reshape(len(c0), -1), axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return num / np.where(den == 0, 1.0, den)


def error_bound(prec: str, k: int) -> float:
    """c·k·u, with k taken as at least 2: the scalings by alpha and beta round once each, which at k = 1
    can pass 2u (alpha·(a·b) + beta·c rounded four times: up to 3u of the denominator)."""
    p = PRECISIONS[prec]
    return BOUND_FACTOR[p.is_complex] * max(k, 2) * p.unit_roundoff


@dataclass
class Verdict:
    max_error: float
    bound: float
    untouched_ok: bool
    exact_ok: bool | None = None

    @property
    def passed(self) -> bool:
        # NaN compares false, so a NaN error never passes.
        ok = bool(self.max_error <= self.bound) and self.untouched_ok
        return ok and (self.exact_ok is not False)
