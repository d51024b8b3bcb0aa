"""One batched-GEMM workload on the GPU, shared by the tuner and the benchmarks: packed strided
operands filled with random data of both signs, the bytes that must move, the flops, and launches
of our kernels and of cuBLAS on the very same buffers."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gemmgen.generator.families import family_of
from gemmgen.generator.precision import PRECISIONS

from gemmgen.harness.core import reference as ref

# cudaDataType and cublasComputeType_t values (library_types.h, cublas_api.h)
_CUDA_TYPE = {"h": 2, "hc": 6, "s": 0, "d": 1, "c": 4, "z": 5}
_COMPUTE = {"h": 68, "hc": 68, "s": 68, "d": 70, "c": 68, "z": 70}   # 32F (no TF32), or 64F
_SCALAR_NP = {"h": np.float32, "hc": np.complex64, "s": np.float32, "d": np.float64,
              "c": np.complex64, "z": np.complex128}


def bytes_moved(prec: str, m: int, n: int, k: int, batch: int, beta_nonzero: bool) -> int:
    """A and B read once, C written once and read once more if beta ≠ 0."""
    elem = PRECISIONS[prec].element_bytes
    return elem * batch * (m * k + k * n + m * n * (2 if beta_nonzero else 1))


def flops(prec: str, m: int, n: int, k: int, batch: int) -> float:
    return (8.0 if PRECISIONS[prec].is_complex else 2.0) * m * n * k * batch


# Each rotation set of an operand starts on its own 256-byte boundary, as a separate cudaMalloc would:
# packed back to back, the sets of an odd size would start off 16-byte boundaries every other time,
# and the launches on those (kernels that copy 16-byte chunks pass them over) would be mixed into the
# timing of the aligned ones.
SET_ALIGN_BYTES = 256


def set_elements(count: int, element_bytes: int) -> int:
    """Elements one rotation set of `count` elements takes, rounded up to SET_ALIGN_BYTES."""
    per_align = SET_ALIGN_BYTES // element_bytes
    return -(-count // per_align) * per_align


# A CUDA graph of launches on the same pointers would time L2 hits, not a user's launch: the launches
# of a timing rotate over copies of the operands until they span 4× the H100's 50 MB L2.
ROTATE_BYTES = 200e6
ROTATE_LIMIT_BYTES = 2e9       # never more device memory than this for the copies
MAX_LAUNCHES_PER_GRAPH = 32    # where more sets would be needed (small batch-1000 launches)


def rotation_sets(footprint: int) -> int:
    """Copies of a launch's operands (`footprint` bytes) that a graph rotates over: enough to span
    ROTATE_BYTES, at most one per launch of the graph and within ROTATE_LIMIT_BYTES."""
    return max(1, min(MAX_LAUNCHES_PER_GRAPH, int(ROTATE_BYTES // footprint) + 1,
                      int(ROTATE_LIMIT_BYTES // footprint)))


def batch_for_megabytes(prec: str, m: int, n: int, k: int, megabytes: float) -> int:
    per = bytes_moved(prec, m, n, k, 1, False)
    return max(1, int(megabytes * 1e6 // per))


@dataclass
class Workload:
    """`sets` copies of the batch side by side; each launch closure uses the next copy, so a CUDA
    graph of several launches rotates through more data than L2 holds (docs/design.md, Measurement)."""
    prec: str
    m: int
    n: int
    k: int
    batch: int
    sets: int = 1

    def _rotating(self, build):
        """A launch closure that builds each launch from the next set's (A, B, C) offsets."""
        counter = [0]

        def launch(stream_ptr: int) -> None:
            i = counter[0] % self.sets
            counter[0] += 1
            build(i, stream_ptr)
        return launch

    def offsets(self, i: int) -> tuple[int, int, int]:
        """Device pointers of set i's A, B and C."""
        elem = PRECISIONS[self.prec].element_bytes
        m, n, k, b = self.m, self.n, self.k, self.batch
        return tuple(buf.data.ptr + i * set_elements(b * size, elem) * elem
                     for buf, size in ((self.A, m * k), (self.B, k * n), (self.C, m * n)))

    def __post_init__(self):
        import cupy as cp

        cp.random.seed(12345)
        width = 2 if self.prec == "hc" else 1
        dtype = ref.host_dtype(self.prec)

        def fill(count: int):
            if PRECISIONS[self.prec].is_complex and self.prec != "hc":
                real = cp.random.uniform(-1, 1, size=2 * count)
                return real.astype(np.float32 if self.prec == "c" else np.float64).view(dtype)
            return cp.random.uniform(-1, 1, size=count * width).astype(dtype)

        elem = PRECISIONS[self.prec].element_bytes
        self.A = fill(self.sets * set_elements(self.batch * self.m * self.k, elem))
        self.B = fill(self.sets * set_elements(self.batch * self.k * self.n, elem))
        self.C = fill(self.sets * set_elements(self.batch * self.m * self.n, elem))

    # packed layout: lda = m, ldb = k, ldc = m, strides = matrix sizes
    def ours(self, function, alpha=1.0, beta=0.0, takes_shape=None, trans=(b"N", b"N")):
        """A launch(stream_ptr) closure for a launcher `<kernel>_strided` or the public
        gemmgen_?gemm_batched_strided (ctypes function and argument conversion from gemmgen.harness.core.api).
        Fixed-shape launchers (small, tiny wmma) take no m, n, k; the public entry points and the
        general wmma launchers do (`takes_shape`, by default told from the name: its family's
        any_shape).  `trans`: op(A) and op(B) (any pair reads the same packed buffers where m = n = k)."""
        from gemmgen.harness.core.api import scalar

        m, n, k = self.m, self.n, self.k
        a, b = scalar(self.prec, alpha), scalar(self.prec, beta)
        if takes_shape is None:
            name = function.__name__
            takes_shape = name.startswith("gemmgen_") or family_of(name).any_shape

        def launch(i: int, stream_ptr: int) -> None:
            A, B, C = self.offsets(i)
            if takes_shape:
                rc = function(*trans, m, n, k, a, A, m, m * k, B, k, k * n, b, C, m, m * n,
                              self.batch, stream_ptr)
            else:
                rc = function(*trans, a, A, m, m * k, B, k, k * n, b, C, m, m * n, self.batch,
                              stream_ptr)
            if rc != 0:
                raise RuntimeError(f"{function.__name__} returned {rc}")
        return self._rotating(launch)

    def ours_array(self, function, alpha=1.0, beta=0.0, takes_shape=True):
        """A launch(stream_ptr) closure for the pointer-array entry point gemmgen_?gemm_batched
        (or, takes_shape False, a fixed-shape launcher `<kernel>_array`), with pointers to the same
        packed matrices."""
        import cupy as cp

        from gemmgen.harness.core.api import scalar

        m, n, k = self.m, self.n, self.k
        elem = PRECISIONS[self.prec].element_bytes
        idx = cp.arange(self.batch, dtype=cp.uint64)
        self._arrays = [cp.uint64(buf.data.ptr) + idx * cp.uint64(size * elem)
                        for buf, size in ((self.A, m * k), (self.B, k * n), (self.C, m * n))]
        a, b = scalar(self.prec, alpha), scalar(self.prec, beta)
        pa, pb, pc = (x.data.ptr for x in self._arrays)

        def launch(stream_ptr: int) -> None:
            shape = (m, n, k) if takes_shape else ()
            rc = function(b"N", b"N", *shape, a, pa, m, pb, k, b, pc, m, self.batch, stream_ptr)
            if rc != 0:
                raise RuntimeError(f"{function.__name__} returned {rc}")
        return launch

    def cublas(self, alpha=1.0, beta=0.0):
        """A launch(stream_ptr) closure for cublasGemmStridedBatchedEx on the same buffers."""
        import cupy as cp
        from cupy_backends.cuda.libs import cublas

        handle = cp.cuda.device.get_cublas_handle()
        scalar_type = _SCALAR_NP[self.prec]
        self._alpha = np.array(alpha, dtype=scalar_type)
        self._beta = np.array(beta, dtype=scalar_type)
        t = _CUDA_TYPE[self.prec]
        m, n, k = self.m, self.n, self.k

        def launch(i: int, stream_ptr: int) -> None:
            A, B, C = self.offsets(i)
            cublas.setStream(handle, stream_ptr)
            cublas.gemmStridedBatchedEx(
                handle, 0, 0, m, n, k, self._alpha.ctypes.data, A, t, m, m * k,
                B, t, k, k * n, self._beta.ctypes.data, C, t, m, m * n,
                self.batch, _COMPUTE[self.prec], -1)
        return self._rotating(launch)

    def release(self):
        del self.A, self.B, self.C
        self._arrays = None
