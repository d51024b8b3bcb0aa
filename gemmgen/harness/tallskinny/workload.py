"""One tall-and-skinny GEMM on the GPU, shared by the tuner and the benchmark: column-major
operands (lda = m, ldb = k, ldc = m) filled with random data of both signs, several copies when
one set is smaller than the L2 cache (launches rotate among them), the bytes that must move, and
launches of our kernels and of cuBLAS (cublasGemmEx through CuPy) on the very same buffers."""
from __future__ import annotations

import numpy as np

from gemmgen.generator.precision import PRECISIONS

from gemmgen.harness.core import reference as ref
from gemmgen.harness.core.timing import median_time_ms

_CUDA_TYPE = {"h": 2, "s": 0, "d": 1}
_COMPUTE = {"h": 68, "s": 68, "d": 70}        # CUBLAS_COMPUTE_32F (no TF32) / 64F
_SCALAR_NP = {"h": np.float32, "s": np.float32, "d": np.float64}
ROTATE_BYTES = 160e6                           # > 3× the H100's 50 MB L2
MAX_SETS = 256


def bytes_moved(prec: str, m: int, n: int, k: int, beta_nonzero: bool = False) -> int:
    elem = PRECISIONS[prec].element_bytes
    return elem * (m * k + k * n + m * n * (2 if beta_nonzero else 1))


def flops(m: int, n: int, k: int) -> float:
    return 2.0 * m * n * k


class TsWorkload:
    def __init__(self, prec: str, m: int, n: int, k: int, A=None, seed: int = 1234):
        import cupy as cp

        self.prec, self.m, self.n, self.k = prec, m, n, k
        dtype = ref.host_dtype(prec)
        per_set = bytes_moved(prec, m, n, k)
        self.sets = int(min(MAX_SETS, max(1, -(-ROTATE_BYTES // per_set))))
        rs = cp.random.RandomState(seed)

        def fill(count):
            out = cp.empty(count, dtype=dtype)
            chunk = 1 << 28
            for s in range(0, count, chunk):
                e = min(count, s + chunk)
                out[s:e] = rs.uniform(-1, 1, size=e - s, dtype=np.float32).astype(dtype)
            return out

        # A may be shared between workloads of the same m, k (the paper's n sweep on one A).
        self.A = [A] if A is not None and self.sets == 1 else [fill(m * k) for _ in range(self.sets)]
        self.B = [fill(k * n) for _ in range(self.sets)]
        self.C = [fill(m * n) for _ in range(self.sets)]
        self._i = 0

    def _next(self):
        i = self._i % self.sets
        self._i += 1
        return self.A[i].data.ptr, self.B[i].data.ptr, self.C[i].data.ptr

    def public(self, lib, alpha=1.0, beta=0.0):
        """launch(stream) through gemmgen_?gemm_tallskinny."""
        from gemmgen.harness.core.api import scalar

        f = getattr(lib.lib, f"gemmgen_{self.prec}gemm_tallskinny")
        a, b = scalar(self.prec, alpha), scalar(self.prec, beta)
        m, n, k = self.m, self.n, self.k

        def launch(stream):
            A, B, C = self._next()
            rc = f(b"N", b"N", m, n, k, a, A, m, B, k, b, C, m, stream)
            if rc != 0:
                raise RuntimeError(f"gemmgen_{self.prec}gemm_tallskinny returned {rc}")
        return launch

    def variant(self, f, split: int, alpha=1.0, beta=0.0):
        """launch(stream) through one variant's own entry point with k-groups / tcf = split."""
        from gemmgen.harness.core.api import scalar

        a, b = scalar(self.prec, alpha), scalar(self.prec, beta)
        m, n, k = self.m, self.n, self.k

        def launch(stream):
            A, B, C = self._next()
            rc = f(b"N", b"N", m, n, k, a, A, m, B, k, b, C, m, split, stream)
            if rc != 0:
                raise RuntimeError(f"variant returned {rc}")
        return launch

    def cublas(self, alpha=1.0, beta=0.0):
        import cupy as cp
        from cupy_backends.cuda.libs import cublas

        handle = cp.cuda.device.get_cublas_handle()
        self._alpha = np.array(alpha, dtype=_SCALAR_NP[self.prec])
        self._beta = np.array(beta, dtype=_SCALAR_NP[self.prec])
        t = _CUDA_TYPE[self.prec]
        m, n, k = self.m, self.n, self.k

        def launch(stream):
            A, B, C = self._next()
            cublas.setStream(handle, stream)
            cublas.gemmEx(handle, 0, 0, m, n, k, self._alpha.ctypes.data, A, t, m, B, t, k,
                          self._beta.ctypes.data, C, t, m, _COMPUTE[self.prec], -1)
        return launch

    def time_ms(self, launch, budget_launches: int = 16) -> float:
        """Median per-launch time; a graph holds every rotation set at least once."""
        per_graph = max(self.sets, 3)
        repeats = max(3, min(9, budget_launches // per_graph if per_graph < budget_launches else 3))
        return median_time_ms(launch, launches_per_graph=per_graph, repeats=repeats, warmup=1)

    def release(self):
        del self.A, self.B, self.C
