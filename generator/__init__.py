"""gemmgen: a generator of size-specialized batched small-GEMM kernels (CUDA and C++14 SIMD)."""
__version__ = "0.1.0"
