// Experiment (2026-11-24): h GEMMs of one fixed shape, one warp per GEMM, on Tensor Cores through raw
// mma.sync.m16n8k16, for packed batches of any size (odd leading dimensions included).
//
// Each warp runs its own ring of STAGES stages: its lanes copy the 16-byte chunks that cover a GEMM's A
// and B (and C when beta != 0) with cp.async, so the stage holds each matrix exactly as it is stored,
// shifted by the matrix's offset from a 16-byte boundary.  Fragments are read element by element at
// compile-time offsets (no alignment needed), the products go into a staging of C laid out like C in
// global memory, and the lanes write its whole 16-byte chunks with 16-byte stores, the few elements
// shared with the neighbouring GEMMs one by one.  No block-wide barrier anywhere.
#pragma once
#include <cuda_fp16.h>

namespace packed_warp {

__device__ __forceinline__ unsigned smem_address(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void copy16(void* dst, const void* src)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_address(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

// Halves of a stage region that holds ELEMS contiguous halves starting anywhere (up to 7 halves past a
// 16-byte boundary), in whole 16-byte chunks.
template <int ELEMS> struct Cover {
    static constexpr int CHUNKS = (ELEMS + 7 + 7) / 8;
    static constexpr int HALVES = 8 * CHUNKS;
};

// Copies the chunks covering src[0, ELEMS) to dst; returns where src[0] lands (0..7).
template <int ELEMS>
__device__ __forceinline__ int copy_cover(__half* dst, const __half* src, int lane)
{
    const unsigned long long address = (unsigned long long)src;
    const int offset = (int)(address & 15) >> 1;
    const char* base = (const char*)(address & ~15ull);
    const int chunks = (offset + ELEMS + 7) >> 3;
#pragma unroll
    for (int i = 0; i < (Cover<ELEMS>::CHUNKS + 31) / 32; ++i) {
        const int c = lane + 32 * i;
        if (c < chunks)
            copy16(dst + 8 * c, base + 16 * c);
    }
    return offset;
}

__device__ __forceinline__ unsigned pack(__half lo, __half hi)
{
    return (unsigned)__half_as_ushort(lo) | ((unsigned)__half_as_ushort(hi) << 16);
}

// Accumulators of one m16n8 tile: fp16 sums (2 registers) or fp32 sums (4).  value(i): element i of the
// thread's four, at row g + 8 * (i / 2), column 2 t + i % 2.
template <typename ACC> struct Tile;
template <> struct Tile<__half> {
    unsigned d[2];
    __device__ __forceinline__ void zero() { d[0] = d[1] = 0u; }
    __device__ __forceinline__ void mma(const unsigned (&a)[4], const unsigned (&b)[2])
    {
        asm("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0, %1}, {%2, %3, %4, %5}, {%6, %7}, {%0, %1};\n"
            : "+r"(d[0]), "+r"(d[1])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
    __device__ __forceinline__ float value(int i) const
    {
        const unsigned w = d[i >> 1];
        return __half2float(__ushort_as_half((unsigned short)((i & 1) ? (w >> 16) : (w & 0xffff))));
    }
};
template <> struct Tile<float> {
    float d[4];
    __device__ __forceinline__ void zero() { d[0] = d[1] = d[2] = d[3] = 0.0f; }
    __device__ __forceinline__ void mma(const unsigned (&a)[4], const unsigned (&b)[2])
    {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
    __device__ __forceinline__ float value(int i) const { return d[i]; }
};

// op(A)(r, k) of an M x K op(A) stored packed ('N': M x K column-major, 'T': K x M), zero outside.
template <int M, int K, char TA>
__device__ __forceinline__ __half op_a(const __half* s, int r, int k)
{
    if (r >= M || k >= K)
        return __ushort_as_half(0);
    return s[TA == 'N' ? r + k * M : k + r * K];
}
// op(B)(k, c) of a K x N op(B) stored packed ('N': K x N column-major, 'T': N x K).
template <int K, int N, char TB>
__device__ __forceinline__ __half op_b(const __half* s, int k, int c)
{
    if (k >= K || c >= N)
        return __ushort_as_half(0);
    return s[TB == 'N' ? k + c * K : c + k * N];
}

template <int M, int N, int K> struct Layout {
    static constexpr int A = Cover<M * K>::HALVES, B = Cover<K * N>::HALVES, C = Cover<M * N>::HALVES;
    static constexpr int STAGE = A + B + C;
    static constexpr int RT = (M + 15) / 16, CT = (N + 7) / 8, KT = (K + 15) / 16;
};

// Blocks of 256 threads that must fit an SM's registers: two while the accumulators take at most 48
// registers (ptxas's own target spilled some fp32 kernels at 80), else one.
template <int M, int N, int K, typename ACC> struct MinBlocks {
    static constexpr int value = Layout<M, N, K>::RT * Layout<M, N, K>::CT * (int)sizeof(ACC) > 48 ? 1 : 2;
};

template <int M, int N, int K, char TA, char TB, typename ACC, int STAGES>
__global__ void __launch_bounds__(256, (MinBlocks<M, N, K, ACC>::value)) kernel(const __half* __restrict__ A, long long sa,
                                              const __half* __restrict__ B, long long sb, __half* C,
                                              long long sc, float alpha, float beta, long long batch)
{
    using L = Layout<M, N, K>;
    extern __shared__ __align__(16) __half smem[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int warps = blockDim.x >> 5;
    __half* ring = smem + warp * STAGES * L::STAGE;
    const long long step = (long long)gridDim.x * warps;
    const bool read_c = beta != 0.0f;
    // Where a matrix lands in its stage region: its offset from a 16-byte boundary, in halves (recomputed
    // when the stage is read rather than kept per stage, which would put the table in local memory).
    auto offset = [](const void* p) { return (int)((unsigned long long)p & 15) >> 1; };
    auto issue = [&](long long item, int s) {
        if (item < batch) {
            __half* st = ring + s * L::STAGE;
            copy_cover<M * K>(st, A + item * sa, lane);
            copy_cover<K * N>(st + L::A, B + item * sb, lane);
            if (read_c)
                copy_cover<M * N>(st + L::A + L::B, C + item * sc, lane);
        }
        commit();
    };

    long long next = blockIdx.x * (long long)warps + warp;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        issue(next, s);
        next += step;
    }
    int s = 0;
    for (long long item = blockIdx.x * (long long)warps + warp; item < batch; item += step) {
        // stage s - 1 was released at the end of the last item
        issue(next, s == 0 ? STAGES - 1 : s - 1);
        next += step;
        wait<STAGES - 1>();
        __syncwarp();

        const int oa = offset(A + item * sa), ob = offset(B + item * sb), oc = offset(C + item * sc);
        const __half* st = ring + s * L::STAGE;
        const __half* As = st + oa;
        const __half* Bs = st + L::A + ob;
        __half* Cs = ring + s * L::STAGE + L::A + L::B + oc;

        Tile<ACC> acc[L::RT][L::CT];
#pragma unroll
        for (int rt = 0; rt < L::RT; ++rt)
#pragma unroll
            for (int ct = 0; ct < L::CT; ++ct)
                acc[rt][ct].zero();
#pragma unroll
        for (int kt = 0; kt < L::KT; ++kt) {
            unsigned a[L::RT][4];
#pragma unroll
            for (int rt = 0; rt < L::RT; ++rt)
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int r = rt * 16 + g + 8 * (i & 1), k = kt * 16 + 2 * t + 8 * (i >> 1);
                    a[rt][i] = pack(op_a<M, K, TA>(As, r, k), op_a<M, K, TA>(As, r, k + 1));
                }
#pragma unroll
            for (int ct = 0; ct < L::CT; ++ct) {
                unsigned b[2];
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    const int k = kt * 16 + 2 * t + 8 * j, c = ct * 8 + g;
                    b[j] = pack(op_b<K, N, TB>(Bs, k, c), op_b<K, N, TB>(Bs, k + 1, c));
                }
#pragma unroll
                for (int rt = 0; rt < L::RT; ++rt)
                    acc[rt][ct].mma(a[rt], b);
            }
        }

        // alpha AB (+ beta C) into the staging, laid out as C is in global memory
#pragma unroll
        for (int rt = 0; rt < L::RT; ++rt)
#pragma unroll
            for (int ct = 0; ct < L::CT; ++ct)
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int r = rt * 16 + g + 8 * (i >> 1), c = ct * 8 + 2 * t + (i & 1);
                    if (r < M && c < N) {
                        float v = alpha * acc[rt][ct].value(i);
                        if (read_c)
                            v += beta * __half2float(Cs[r + c * M]);
                        Cs[r + c * M] = __float2half_rn(v);
                    }
                }
        __syncwarp();
        __half* Cg = C + item * sc;
        constexpr int MN = M * N;
        const int head = min(MN, (8 - oc) & 7);
        const int body = (MN - head) >> 3, tail = (MN - head) & 7;
        for (int c = lane; c < body; c += 32)
            reinterpret_cast<int4*>(Cg + head)[c] = reinterpret_cast<const int4*>(Cs + head)[c];
        if (lane < head)
            Cg[lane] = Cs[lane];
        else if (lane >= 8 && lane - 8 < tail)
            Cg[head + 8 * body + lane - 8] = Cs[head + 8 * body + lane - 8];
        __syncwarp();
        s = s + 1 == STAGES ? 0 : s + 1;
    }
    wait<0>();
}

}  // namespace packed_warp
