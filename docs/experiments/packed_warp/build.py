"""Builds the packed-warp experiment (packed_warp.cuh) into one shared library: entry points
xp_h_m<M>n<N>k<K>_w<W>_s<S>_<f16|f32>_strided with the fixed-shape launcher signature.

Usage: python docs/experiments/packed_warp/build.py OUT_DIR"""
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
SQUARES = (9, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31, 33, 37, 41, 45, 48, 49, 53, 57, 61, 63)
RANKS = (19, 23, 27, 31, 33, 37, 41, 45, 48, 49, 53, 57, 61, 63)
SHAPES = [(s, s, s) for s in SQUARES] + [(m, m, 16) for m in RANKS]
VARIANTS = [(w, s, acc) for w in (4, 8) for s in (2, 3) for acc in ("f16", "f32")]

LAUNCH = r'''
#include "packed_warp.cuh"
#include <cuda_runtime.h>

template <int M, int N, int K, typename ACC, int STAGES, char TA, char TB>
static int run(int warps, float alpha, const __half* A, long long sa, const __half* B, long long sb,
               float beta, __half* C, long long sc, int batch, cudaStream_t stream)
{
    auto k = packed_warp::kernel<M, N, K, TA, TB, ACC, STAGES>;
    const int per_warp = STAGES * packed_warp::Layout<M, N, K>::STAGE * 2;
    int dev = 0, optin = 0, sms = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    while (warps > 1 && warps * per_warp > optin) --warps;
    const int bytes = warps * per_warp;
    if (bytes > optin) return -1;
    if (cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) != cudaSuccess) return -3;
    int resident = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, k, 32 * warps, bytes) != cudaSuccess || resident < 1)
        return -4;
    long long blocks = ((long long)batch + warps - 1) / warps;
    if (blocks > (long long)resident * sms) blocks = (long long)resident * sms;
    k<<<(unsigned)blocks, 32 * warps, bytes, stream>>>(A, sa, B, sb, C, sc, alpha, beta, batch);
    return cudaGetLastError() == cudaSuccess ? 0 : -5;
}

template <int M, int N, int K, typename ACC, int STAGES>
static int launch(char ta, char tb, int warps, float alpha, const __half* A, int lda, long long sa,
                  const __half* B, int ldb, long long sb, float beta, __half* C, int ldc, long long sc,
                  int batch, cudaStream_t stream)
{
    const bool tA = ta == 'T' || ta == 't', tB = tb == 'T' || tb == 't';
    if (lda != (tA ? K : M) || ldb != (tB ? N : K) || ldc != M) return -10;
    if (!tA && !tB) return run<M, N, K, ACC, STAGES, 'N', 'N'>(warps, alpha, A, sa, B, sb, beta, C, sc, batch, stream);
    if (!tA && tB) return run<M, N, K, ACC, STAGES, 'N', 'T'>(warps, alpha, A, sa, B, sb, beta, C, sc, batch, stream);
    if (tA && !tB) return run<M, N, K, ACC, STAGES, 'T', 'N'>(warps, alpha, A, sa, B, sb, beta, C, sc, batch, stream);
    return run<M, N, K, ACC, STAGES, 'T', 'T'>(warps, alpha, A, sa, B, sb, beta, C, sc, batch, stream);
}
'''

ENTRY = '''
extern "C" int xp_h_m{m}n{n}k{k}_w{w}_s{s}_{acc}_strided(char ta, char tb, float alpha, const __half* A, int lda,
    long long sa, const __half* B, int ldb, long long sb, float beta, __half* C, int ldc, long long sc, int batch,
    cudaStream_t stream)
{{
    return launch<{m}, {n}, {k}, {acct}, {s}>(ta, tb, {w}, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch, stream);
}}
'''


def source(shape) -> str:
    m, n, k = shape
    text = LAUNCH
    for w, s, acc in VARIANTS:
        text += ENTRY.format(m=m, n=n, k=k, w=w, s=s, acc=acc, acct="__half" if acc == "f16" else "float")
    return text


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    objects = []
    jobs = []
    for shape in SHAPES:
        name = "xp_m{}n{}k{}".format(*shape)
        cu = out / f"{name}.cu"
        cu.write_text(source(shape))
        obj = out / f"{name}.o"
        objects.append(obj)
        jobs.append(["nvcc", "-O3", "-std=c++17", "-arch=sm_90", "-Xcompiler", "-fPIC", "-I", str(HERE),
                     "-Xptxas", "-warn-spills", "-c", str(cu), "-o", str(obj)])

    def compile_one(cmd):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode or r.stderr.strip():
            print(" ".join(cmd[-3:]), r.stderr[-2000:], flush=True)
        return r.returncode

    with ThreadPoolExecutor(int(sys.argv[2]) if len(sys.argv) > 2 else 2) as pool:
        assert all(rc == 0 for rc in pool.map(compile_one, jobs))
    subprocess.run(["nvcc", "-shared", "-o", str(out / "libpackedwarp.so"), *map(str, objects)], check=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
