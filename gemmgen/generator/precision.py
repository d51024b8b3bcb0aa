"""The six precisions of the C API contract (docs/api.md), as data.

Every family and the dispatch header read the C types from here, so a precision is described once.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Precision:
    key: str            # prefix in names and in the C API: gemmgen_<key>gemm_...
    storage: str        # element type in device memory
    compute: str        # type of the epilogue's arithmetic (fp16 is widened to fp32 for it)
    scalar: str         # type of alpha and beta in the C API
    is_complex: bool
    real_bytes: int     # bytes of one real component in storage
    unit_roundoff: float  # u of the stored result (docs/api.md, Accuracy)
    numpy_real: str     # numpy dtype of one real component (complex data is interleaved pairs)
    description: str

    @property
    def element_bytes(self) -> int:
        return self.real_bytes * (2 if self.is_complex else 1)

    @property
    def transposes(self) -> tuple[str, ...]:
        # For real data 'C' means the same as 'T'; the launchers map it before dispatching.
        return ("N", "T", "C") if self.is_complex else ("N", "T")

    @property
    def trans_pairs(self) -> tuple[tuple[str, str], ...]:
        return tuple((a, b) for a in self.transposes for b in self.transposes)


PRECISIONS: dict[str, Precision] = {
    p.key: p
    for p in (
        Precision("h", "__half", "float", "float", False, 2, 2.0**-11, "float16",
                  "fp16 storage"),
        Precision("hc", "__half2", "float2", "cuFloatComplex", True, 2, 2.0**-11, "float16",
                  "interleaved half complex (.x real, .y imaginary)"),
        Precision("s", "float", "float", "float", False, 4, 2.0**-24, "float32", "fp32"),
        Precision("d", "double", "double", "double", False, 8, 2.0**-53, "float64", "fp64"),
        Precision("c", "cuFloatComplex", "float2", "cuFloatComplex", True, 4, 2.0**-24,
                  "float32", "single complex"),
        Precision("z", "cuDoubleComplex", "double2", "cuDoubleComplex", True, 8, 2.0**-53,
                  "float64", "double complex"),
    )
}

PRECISION_ORDER = tuple(PRECISIONS)


def parse_precisions(text: str) -> tuple[str, ...]:
    """'d,z' or 'all' -> ('d', 'z') in canonical order; unknown names raise ValueError."""
    if text.strip() in ("", "all"):
        return PRECISION_ORDER
    names = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [n for n in names if n not in PRECISIONS]
    if unknown:
        raise ValueError(
            f"unknown precision {', '.join(unknown)!s}; choose from {', '.join(PRECISION_ORDER)}")
    return tuple(p for p in PRECISION_ORDER if p in names)
