// The check runner of the cpu family: reads check cases (inputs, poisoned C) from a file, calls
// the gemmgen CPU C API on each, writes the return code and C back.  The harness uses it where
// ctypes cannot load the library: kernels of a foreign architecture (AArch64 NEON under
// qemu-user).  One process runs every case, so the emulator starts once.
//
// Usage: gemmgen_cpu_runner CASES OUT [ISA]
// Case (little endian): int32 precision (0 s, 1 d, 2 c, 3 z), interface (0 strided, 1 array),
// transa, transb, m, n, k, lda, ldb, ldc, batch, offset; int64 strideA, strideB, strideC, elements
// of A, B and C; float64 alpha (re, im), beta (re, im); then A, B and C.  Out: int32 rc, then C.
// A, B and C each live in an allocation of exactly their bytes, starting `offset` bytes past a
// 16-byte boundary, so that a sanitizer build sees any access outside them and any misaligned one.
#include "gemmgen_cpu.h"

#include <complex>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <vector>

namespace {

struct Header {
    int32_t precision, interface_, transa, transb, m, n, k, lda, ldb, ldc, batch, offset;
    int64_t stride_a, stride_b, stride_c, len_a, len_b, len_c;
    double alpha_re, alpha_im, beta_re, beta_im;
};

// `len` elements at `offset` bytes past a 16-byte boundary, the allocation ending where they end.
template <class S>
class Placed {
public:
    Placed(int64_t len, int offset) : len_(size_t(len))
    {
        if (posix_memalign(&raw_, 16, size_t(offset) + len_ * sizeof(S)) != 0)
            throw std::bad_alloc();
        data_ = reinterpret_cast<S*>(static_cast<char*>(raw_) + offset);
    }
    ~Placed() { std::free(raw_); }
    Placed(const Placed&) = delete;
    Placed& operator=(const Placed&) = delete;
    S* data() const { return data_; }
    size_t size() const { return len_; }

private:
    void* raw_ = nullptr;
    S* data_ = nullptr;
    size_t len_;
};

template <class S>
S scalar(double re, double im);
template <>
float scalar<float>(double re, double) { return float(re); }
template <>
double scalar<double>(double re, double) { return re; }
template <>
std::complex<float> scalar<std::complex<float>>(double re, double im) { return {float(re), float(im)}; }
template <>
std::complex<double> scalar<std::complex<double>>(double re, double im) { return {re, im}; }

template <class S>
int call(const Header& h, const Placed<S>& a, const Placed<S>& b, Placed<S>& c,
         int (*strided)(char, char, int, int, int, S, const S*, int, long long, const S*, int, long long, S, S*, int,
                        long long, int),
         int (*array)(char, char, int, int, int, S, const S* const*, int, const S* const*, int, S, S* const*, int, int))
{
    const S alpha = scalar<S>(h.alpha_re, h.alpha_im), beta = scalar<S>(h.beta_re, h.beta_im);
    if (h.interface_ == 0)
        return strided(char(h.transa), char(h.transb), h.m, h.n, h.k, alpha, a.data(), h.lda, h.stride_a, b.data(),
                       h.ldb, h.stride_b, beta, c.data(), h.ldc, h.stride_c, h.batch);
    std::vector<const S*> pa(h.batch), pb(h.batch);
    std::vector<S*> pc(h.batch);
    for (int i = 0; i < h.batch; ++i) {
        pa[i] = a.data() + i * h.stride_a;
        pb[i] = b.data() + i * h.stride_b;
        pc[i] = c.data() + i * h.stride_c;
    }
    return array(char(h.transa), char(h.transb), h.m, h.n, h.k, alpha, pa.data(), h.lda, pb.data(), h.ldb, beta,
                 pc.data(), h.ldc, h.batch);
}

template <class S>
bool one_case(const Header& h, std::FILE* in, std::FILE* out,
              int (*strided)(char, char, int, int, int, S, const S*, int, long long, const S*, int, long long, S, S*,
                             int, long long, int),
              int (*array)(char, char, int, int, int, S, const S* const*, int, const S* const*, int, S, S* const*,
                           int, int))
{
    Placed<S> a(h.len_a, h.offset), b(h.len_b, h.offset), c(h.len_c, h.offset);
    if (std::fread(a.data(), sizeof(S), a.size(), in) != a.size() ||
        std::fread(b.data(), sizeof(S), b.size(), in) != b.size() ||
        std::fread(c.data(), sizeof(S), c.size(), in) != c.size())
        return false;
    const int32_t rc = call<S>(h, a, b, c, strided, array);
    std::fwrite(&rc, sizeof rc, 1, out);
    std::fwrite(c.data(), sizeof(S), c.size(), out);
    return true;
}

}  // namespace

int main(int argc, char** argv)
{
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s CASES OUT [ISA]\n", argv[0]);
        return 2;
    }
    if (argc > 3 && gemmgen_cpu_set_isa(argv[3]) != 0) {
        std::fprintf(stderr, "this CPU has no %s\n", argv[3]);
        return 3;
    }
    std::FILE* in = std::fopen(argv[1], "rb");
    std::FILE* out = std::fopen(argv[2], "wb");
    if (!in || !out) {
        std::perror("open");
        return 2;
    }
    Header h;
    int cases = 0;
    while (std::fread(&h, sizeof h, 1, in) == 1) {
        bool ok = false;
        switch (h.precision) {
        case 0: ok = one_case<float>(h, in, out, gemmgen_cpu_sgemm_batched_strided, gemmgen_cpu_sgemm_batched); break;
        case 1: ok = one_case<double>(h, in, out, gemmgen_cpu_dgemm_batched_strided, gemmgen_cpu_dgemm_batched); break;
        case 2:
            ok = one_case<std::complex<float>>(h, in, out, gemmgen_cpu_cgemm_batched_strided, gemmgen_cpu_cgemm_batched);
            break;
        case 3:
            ok = one_case<std::complex<double>>(h, in, out, gemmgen_cpu_zgemm_batched_strided, gemmgen_cpu_zgemm_batched);
            break;
        }
        if (!ok) {
            std::fprintf(stderr, "case %d: bad input\n", cases);
            return 4;
        }
        ++cases;
    }
    std::fclose(out);
    std::printf("%d cases, isa %s\n", cases, gemmgen_cpu_isa());
    return 0;
}
