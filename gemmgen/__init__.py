"""gemmgen: a generator of size-specialized batched small-GEMM kernels (CUDA and C++14 SIMD).

Three layers: `gemmgen.generator` (specs, rules, tuning tables, emission from `templates/`),
`gemmgen.harness` (compile, check against NumPy, tune and benchmark what was emitted) and
`gemmgen.cli`, the command line over both."""
__version__ = "0.1.0"
