"""ctypes binding of libgemmgen.so: the harness calls the generated C API exactly as a user would,
with device pointers from CuPy (or plain integers, for the argument checks that run without a GPU)."""
from __future__ import annotations

import ctypes
from pathlib import Path

from gemmgen.generator.families import family_of
from gemmgen.generator.precision import PRECISION_ORDER, PRECISIONS

NOT_GENERATED = 1
LAUNCH_FAILED = 2


class _FloatComplex(ctypes.Structure):
    _fields_ = [("x", ctypes.c_float), ("y", ctypes.c_float)]


class _DoubleComplex(ctypes.Structure):
    _fields_ = [("x", ctypes.c_double), ("y", ctypes.c_double)]


_SCALAR = {"float": ctypes.c_float, "double": ctypes.c_double,
           "cuFloatComplex": _FloatComplex, "cuDoubleComplex": _DoubleComplex}


def scalar(prec: str, value: complex | float):
    ctype = _SCALAR[PRECISIONS[prec].scalar]
    if PRECISIONS[prec].is_complex:
        value = complex(value)
        return ctype(value.real, value.imag)
    return ctype(float(value.real if isinstance(value, complex) else value))


_c, _i, _ll, _p = ctypes.c_char, ctypes.c_int, ctypes.c_longlong, ctypes.c_void_p


# The argument types of the batched C API, declared once for every binding: the public entry points
# (gemmgen_?gemm_batched_strided, gemmgen_?gemm_batched), a kernel's own launchers (without m, n, k
# where the kernel has one shape) and the CPU library's (no stream).
def strided_argtypes(prec: str, shape: bool = True, stream: bool = True) -> list:
    """(transa, transb, [m, n, k,] alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc, strideC, batch
    [, stream])"""
    s = _SCALAR[PRECISIONS[prec].scalar]
    return [_c, _c, *([_i] * 3 if shape else []), s, _p, _i, _ll, _p, _i, _ll, s, _p, _i, _ll, _i] + (
        [_p] if stream else [])


def array_argtypes(prec: str, shape: bool = True, stream: bool = True) -> list:
    """(transa, transb, [m, n, k,] alpha, A_array, lda, B_array, ldb, beta, C_array, ldc, batch [, stream])"""
    s = _SCALAR[PRECISIONS[prec].scalar]
    return [_c, _c, *([_i] * 3 if shape else []), s, _p, _i, _p, _i, s, _p, _i, _i] + ([_p] if stream else [])


def bind_tallskinny(lib) -> None:
    """Argument types of gemmgen_?gemm_tallskinny and the tall-skinny queries (when present)."""
    for key in PRECISION_ORDER:
        f = getattr(lib, f"gemmgen_{key}gemm_tallskinny", None)
        if f is None:
            return
        s = _SCALAR[PRECISIONS[key].scalar]
        f.restype = _i
        f.argtypes = [_c, _c, _i, _i, _i, s, _p, _i, _p, _i, s, _p, _i, _p]
    lib.gemmgen_tallskinny_is_generated.restype = _i
    lib.gemmgen_tallskinny_is_generated.argtypes = [ctypes.c_char_p, _i]
    lib.gemmgen_tallskinny_selected_kernel.restype = ctypes.c_char_p
    lib.gemmgen_tallskinny_selected_kernel.argtypes = [ctypes.c_char_p, _i, _i, _i]


def variant_launcher(lib, name: str, prec: str):
    """A tall-skinny kernel's own entry point (TSM2, ISM2, TSMMA): (ta, tb, m, n, k, alpha, A, lda, B, ldb,
    beta, C, ldc, split, stream) with split = k-groups (TSM2), tcf (ISM2) or k-slices (d TSMMA), 0 =
    chosen at launch; an n the kernel does not serve returns GEMMGEN_NOT_GENERATED."""
    f = getattr(lib, name)
    s = _SCALAR[PRECISIONS[prec].scalar]
    f.restype = _i
    f.argtypes = [_c, _c, _i, _i, _i, s, _p, _i, _p, _i, s, _p, _i, _i, _p]
    return f


class TallSkinnyLibrary:
    """The tall-skinny part of the C API (also loads a tall-skinny-only library)."""

    def __init__(self, path: Path, lib: ctypes.CDLL | None = None):
        """`lib`: the library at `path` as loaded already (core.build.load_library)."""
        self.path = Path(path)
        self.lib = lib if lib is not None else ctypes.CDLL(str(self.path))
        bind_tallskinny(self.lib)

    def tallskinny(self, prec, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc,
                   stream=0) -> int:
        f = getattr(self.lib, f"gemmgen_{prec}gemm_tallskinny")
        return f(transa.encode(), transb.encode(), m, n, k, scalar(prec, alpha), A, lda, B, ldb,
                 scalar(prec, beta), C, ldc, stream)

    def tallskinny_is_generated(self, prec: str, n: int) -> bool:
        return bool(self.lib.gemmgen_tallskinny_is_generated(prec.encode(), n))

    def tallskinny_selected_kernel(self, prec: str, m: int, n: int, k: int) -> str | None:
        name = self.lib.gemmgen_tallskinny_selected_kernel(prec.encode(), m, n, k)
        return name.decode() if name else None

    def variant(self, name: str):
        return variant_launcher(self.lib, name, name.split("_")[1])


def variant_function(lib, name: str, interface: str):
    """A small or wmma kernel's own launcher `<name>_strided` or `<name>_array` with its argument
    types: the C API's arguments without the precision, and without m, n, k for fixed-shape
    kernels (small, tiny wmma); scalars as harness.core.api.scalar makes them."""
    prec = name.split("_")[1]
    f = getattr(lib, f"{name}_{'strided' if interface == 'strided' else 'array'}")
    f.restype = _i
    f.argtypes = (strided_argtypes if interface == "strided" else array_argtypes)(prec, family_of(name).any_shape)
    return f


def spec_launcher(lib, spec):
    """(strided launcher, takes_shape) of a variant built into lib: general and block kernels take m, n, k."""
    return variant_function(lib, spec.name, "strided"), family_of(spec).any_shape


def strided_function(lib, symbol: str, prec: str):
    """`symbol` of `lib` with the argument types of the public strided entry point of `prec` (m, n, k
    included; scalars as harness.core.api.scalar makes them): the entry points themselves, and launchers of that
    signature such as gemmgen_wgmma_hc_strided and the experiments' own."""
    f = getattr(lib, symbol)
    f.restype = _i
    f.argtypes = strided_argtypes(prec)
    return f


class GemmgenLibrary(TallSkinnyLibrary):
    def __init__(self, path: Path, lib: ctypes.CDLL | None = None):
        super().__init__(path, lib)
        for key in PRECISION_ORDER:
            strided_function(self.lib, f"gemmgen_{key}gemm_batched_strided", key)
            g = getattr(self.lib, f"gemmgen_{key}gemm_batched")
            g.restype, g.argtypes = _i, array_argtypes(key)
        for query in (self.lib.gemmgen_small_is_generated, self.lib.gemmgen_is_generated):
            query.restype = _i
            query.argtypes = [ctypes.c_char_p, _i, _i, _i]
        self.lib.gemmgen_small_selected_kernel.restype = ctypes.c_char_p
        self.lib.gemmgen_small_selected_kernel.argtypes = [ctypes.c_char_p, _i, _i, _i]
        self.lib.gemmgen_selected_kernel_strided.restype = ctypes.c_char_p
        self.lib.gemmgen_selected_kernel_strided.argtypes = [ctypes.c_char_p, _i, _i, _i] + [_i, ctypes.c_longlong] * 3
        self.lib.gemmgen_selected_kernel_strided_batch.restype = ctypes.c_char_p
        self.lib.gemmgen_selected_kernel_strided_batch.argtypes = \
            [ctypes.c_char_p, _i, _i, _i] + [_i, ctypes.c_longlong] * 3 + [_i]
        self.lib.gemmgen_kernel_count.restype = _i
        self.lib.gemmgen_kernel_name.restype = ctypes.c_char_p
        self.lib.gemmgen_kernel_name.argtypes = [_i]

    def strided(self, prec, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB,
                beta, C, ldc, strideC, batch, stream=0) -> int:
        f = getattr(self.lib, f"gemmgen_{prec}gemm_batched_strided")
        return f(transa.encode(), transb.encode(), m, n, k, scalar(prec, alpha), A, lda, strideA,
                 B, ldb, strideB, scalar(prec, beta), C, ldc, strideC, batch, stream)

    def array(self, prec, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, batch,
              stream=0) -> int:
        f = getattr(self.lib, f"gemmgen_{prec}gemm_batched")
        return f(transa.encode(), transb.encode(), m, n, k, scalar(prec, alpha), A, lda, B, ldb,
                 scalar(prec, beta), C, ldc, batch, stream)

    def is_generated(self, prec: str, m: int, n: int, k: int) -> bool:
        """Whether the batched entry points cover this shape (exact-shape or general kernel)."""
        return bool(self.lib.gemmgen_is_generated(prec.encode(), m, n, k))

    def small_is_generated(self, prec: str, m: int, n: int, k: int) -> bool:
        return bool(self.lib.gemmgen_small_is_generated(prec.encode(), m, n, k))

    def selected_kernel(self, prec: str, m: int, n: int, k: int) -> str | None:
        """The kernel the dispatch runs for this shape with every stored column on 16 bytes."""
        name = self.lib.gemmgen_small_selected_kernel(prec.encode(), m, n, k)
        return name.decode() if name else None

    def selected_kernel_packed(self, prec: str, m: int, n: int, k: int, batch: int | None = None) -> str | None:
        """The kernel the dispatch runs for a packed strided batch of this shape (NN, lda = m, ldb = k,
        ldc = m, strides the matrix sizes): where those columns are off 16 bytes, not the same as above.
        With `batch`, the kernel of that batch (a table row may serve this GPU model or launches up to a
        size only); without it, the kernel of launches past those rows."""
        packed = (m, m * k, k, k * n, m, m * n)
        name = (self.lib.gemmgen_selected_kernel_strided(prec.encode(), m, n, k, *packed) if batch is None else
                self.lib.gemmgen_selected_kernel_strided_batch(prec.encode(), m, n, k, *packed, batch))
        return name.decode() if name else None

    def variant_entry(self, name: str, interface: str):
        """A kernel's own launcher, callable like `strided`/`array` without the precision:
        (transa, transb, m, n, k, alpha, ...).  Fixed-shape kernels (small, tiny wmma) take no
        m, n, k: the ones given must be the kernel's shape and are dropped."""
        prec = name.split("_")[1]
        f = variant_function(self.lib, name, interface)
        takes_shape = family_of(name).any_shape

        beta_slot = 6 if interface == "strided" else 4   # after alpha: A, lda, [sA,] B, ldb, [sB,] beta

        def call(transa, transb, m, n, k, alpha, *rest):
            rest = list(rest)
            rest[beta_slot] = scalar(prec, rest[beta_slot])
            dims = (m, n, k) if takes_shape else ()
            return f(transa.encode(), transb.encode(), *dims, scalar(prec, alpha), *rest, 0)
        return call

    def kernel_names(self) -> list[str]:
        return [self.lib.gemmgen_kernel_name(i).decode() for i in range(self.lib.gemmgen_kernel_count())]
