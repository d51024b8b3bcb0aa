// Benchmark driver of the cpu family (gemmgen/harness/cpu/bench.py builds and runs it): in one process and
// on the same buffers, C += A*B over a batch of N x N matrices with
//   gemmgen   gemmgen_cpu_?gemm_batched_strided (ISA forced with gemmgen_cpu_set_isa),
//   libxsmm   LIBXSMM 1.17 JIT kernels (libxsmm_?mmdispatch once, then called in a loop),
//   eigen     Eigen 3.4 fixed-size products, c.noalias() += a * b on Maps,
//   openblas  cblas_?gemm in a loop (OpenBLAS itself single-threaded),
// each single-threaded or with the batch split statically over OpenMP threads, taking turns within
// every repetition (median per library); plus the memory bandwidth of the same access pattern
// (c[i] += a[i]*b[i]: three streams read, one written; plain and with software prefetch), alone
// or ("large") taking turns with gemmgen on data far larger than the caches, so that the kernel's
// share of the bandwidth compares two measures of the same minutes.
// Prints one JSON object per measurement: the median and every repetition's GB/s in order.
//
// Usage: cpu_bench PREC SIZES BATCH THREADS ISA REPS      (PREC s d c z; SIZES 2,3,...)
//        cpu_bench bandwidth MEGABYTES THREADS REPS
//        cpu_bench large PREC N BATCH THREADS ISA REPS MEGABYTES   (MEGABYTES: the stream loops' data)
#include "gemmgen_cpu.h"

#include <Eigen/Core>
#include <cblas.h>
#include <libxsmm.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <complex>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

extern "C" void openblas_set_num_threads(int);

namespace {

double now()
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Several functions timed in turns: every repetition runs each once (who goes first rotates), so
// a change in the machine's load or memory speed during the run hits them all alike.  Returns each
// one's seconds in the order of the repetitions.
std::vector<std::vector<double>> seconds_in_turns(int reps, const std::vector<std::function<void()>>& fs)
{
    const size_t n = fs.size();
    for (const auto& f : fs)
        f();   // warm-up: page faults, JIT, first-touch, frequency ramp
    std::vector<std::vector<double>> t(n);
    for (int r = 0; r < reps; ++r)
        for (size_t j = 0; j < n; ++j) {
            const size_t i = (j + r) % n;
            const double t0 = now();
            fs[i]();
            t[i].push_back(now() - t0);
        }
    return t;
}

double median(std::vector<double> x)
{
    std::sort(x.begin(), x.end());
    return x[x.size() / 2];
}

// Static split of [0, batch) over the team, as gemmgen does, so every library touches the same
// entries from the same thread (the buffers were first-touched that way).
template <class F>
void for_batch(int batch, int threads, F&& f)
{
#pragma omp parallel num_threads(threads)
    {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        const long long lo = (long long)batch * t / nt, hi = (long long)batch * (t + 1) / nt;
        for (long long i = lo; i < hi; ++i)
            f(i);
    }
}

template <class S>
struct Traits;
template <>
struct Traits<float> {
    static constexpr const char* name = "s";
    static int gemmgen(int n, const float* a, const float* b, float* c, int batch)
    {
        return gemmgen_cpu_sgemm_batched_strided('N', 'N', n, n, n, 1.0f, a, n, (long long)n * n, b, n,
                                                 (long long)n * n, 1.0f, c, n, (long long)n * n, batch);
    }
    static void blas(int n, const float* a, const float* b, float* c)
    {
        cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 1.0f, c, n);
    }
};
template <>
struct Traits<double> {
    static constexpr const char* name = "d";
    static int gemmgen(int n, const double* a, const double* b, double* c, int batch)
    {
        return gemmgen_cpu_dgemm_batched_strided('N', 'N', n, n, n, 1.0, a, n, (long long)n * n, b, n,
                                                 (long long)n * n, 1.0, c, n, (long long)n * n, batch);
    }
    static void blas(int n, const double* a, const double* b, double* c)
    {
        cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0, a, n, b, n, 1.0, c, n);
    }
};
template <>
struct Traits<std::complex<float>> {
    static constexpr const char* name = "c";
    static int gemmgen(int n, const std::complex<float>* a, const std::complex<float>* b, std::complex<float>* c,
                       int batch)
    {
        const std::complex<float> one(1.0f, 0.0f);
        return gemmgen_cpu_cgemm_batched_strided('N', 'N', n, n, n, one, a, n, (long long)n * n, b, n,
                                                 (long long)n * n, one, c, n, (long long)n * n, batch);
    }
    static void blas(int n, const std::complex<float>* a, const std::complex<float>* b, std::complex<float>* c)
    {
        const std::complex<float> one(1.0f, 0.0f);
        cblas_cgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, n, n, n, &one, a, n, b, n, &one, c, n);
    }
};
template <>
struct Traits<std::complex<double>> {
    static constexpr const char* name = "z";
    static int gemmgen(int n, const std::complex<double>* a, const std::complex<double>* b, std::complex<double>* c,
                       int batch)
    {
        const std::complex<double> one(1.0, 0.0);
        return gemmgen_cpu_zgemm_batched_strided('N', 'N', n, n, n, one, a, n, (long long)n * n, b, n,
                                                 (long long)n * n, one, c, n, (long long)n * n, batch);
    }
    static void blas(int n, const std::complex<double>* a, const std::complex<double>* b, std::complex<double>* c)
    {
        const std::complex<double> one(1.0, 0.0);
        cblas_zgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, n, n, n, &one, a, n, b, n, &one, c, n);
    }
};

// LIBXSMM 1.17 JIT-compiles real GEMMs only.
template <class S>
bool libxsmm_loop(int, const S*, const S*, S*, int, int) { return false; }
template <>
bool libxsmm_loop<double>(int n, const double* a, const double* b, double* c, int batch, int threads)
{
    const double alpha = 1.0, beta = 1.0;
    const libxsmm_dmmfunction k = libxsmm_dmmdispatch(n, n, n, &n, &n, &n, &alpha, &beta, nullptr, nullptr);
    if (!k)
        return false;
    const long long nn = (long long)n * n;
    for_batch(batch, threads, [&](long long i) { k(a + i * nn, b + i * nn, c + i * nn); });
    return true;
}
template <>
bool libxsmm_loop<float>(int n, const float* a, const float* b, float* c, int batch, int threads)
{
    const float alpha = 1.0f, beta = 1.0f;
    const libxsmm_smmfunction k = libxsmm_smmdispatch(n, n, n, &n, &n, &n, &alpha, &beta, nullptr, nullptr);
    if (!k)
        return false;
    const long long nn = (long long)n * n;
    for_batch(batch, threads, [&](long long i) { k(a + i * nn, b + i * nn, c + i * nn); });
    return true;
}

// Eigen's fixed-size product for one compile-time N.
template <class S, int N>
void eigen_loop(const S* a, const S* b, S* c, int batch, int threads)
{
    using M = Eigen::Matrix<S, N, N>;
    for_batch(batch, threads, [&](long long i) {
        Eigen::Map<const M> ma(a + i * N * N), mb(b + i * N * N);
        Eigen::Map<M> mc(c + i * N * N);
        mc.noalias() += ma * mb;
    });
}

template <class S, int... Ns>
bool eigen_dispatch(int n, const S* a, const S* b, S* c, int batch, int threads, std::integer_sequence<int, Ns...>)
{
    bool done = false;
    // One fixed-size instantiation per N; the run-time n picks one.
    using expand = int[];
    (void)expand{0, ((n == Ns + 1 ? (eigen_loop<S, Ns + 1>(a, b, c, batch, threads), done = true) : false), 0)...};
    return done;
}

// One measurement: `seconds` holds every repetition in order; the median is what counts, the
// repetitions show how much the machine moved meanwhile.
void emit(const char* lib, const char* prec, int n, int batch, int threads, const char* isa,
          const std::vector<double>& seconds, double flops, double bytes)
{
    std::string each;
    char number[32];
    for (double s : seconds) {
        std::snprintf(number, sizeof number, "%s%.6g", each.empty() ? "" : ", ", bytes / s * 1e-9);
        each += number;
    }
    const double t = median(seconds);
    std::printf("{\"library\": \"%s\", \"precision\": \"%s\", \"n\": %d, \"batch\": %d, \"threads\": %d, "
                "\"isa\": \"%s\", \"seconds\": %.9g, \"gflops\": %.6g, \"gbytes_per_s\": %.6g, "
                "\"gbytes_per_s_each\": [%s]}\n",
                lib, prec, n, batch, threads, isa, t, flops / t * 1e-9, bytes / t * 1e-9, each.c_str());
    std::fflush(stdout);
}

// A, B and C of a batch of N x N matrices, first-touched by the team that will use them.
template <class S>
struct Operands {
    const int n, batch;
    const size_t count;
    S *a, *b, *c;
    double flops, bytes;

    Operands(int n_, int batch_, int threads) : n(n_), batch(batch_), count((size_t)n_ * n_ * batch_)
    {
        const double cw = sizeof(S) / sizeof(typename Eigen::NumTraits<S>::Real) == 2 ? 4.0 : 1.0;   // real flops per multiply-add / 2
        flops = 2.0 * cw * n * n * (double)n * batch;
        bytes = 4.0 * count * sizeof(S);   // A, B, C read; C written
        // malloc leaves the pages untouched: the first touch below places them per thread.
        a = static_cast<S*>(std::malloc(count * sizeof(S)));
        b = static_cast<S*>(std::malloc(count * sizeof(S)));
        c = static_cast<S*>(std::malloc(count * sizeof(S)));
        gemmgen_cpu_set_num_threads(threads);
        for (S* p : {a, b, c})
            gemmgen_cpu_first_touch(p, (long long)n * n * sizeof(S), batch);
        for (size_t i = 0; i < count; ++i) {
            a[i] = S(((i * 7) % 13) * 0.01 - 0.06);
            b[i] = S(((i * 5) % 11) * 0.01 - 0.05);
            c[i] = S(0);
        }
    }
    Operands(const Operands&) = delete;
    Operands& operator=(const Operands&) = delete;
    ~Operands()
    {
        std::free(a);
        std::free(b);
        std::free(c);
    }
    void gemmgen() const { Traits<S>::gemmgen(n, a, b, c, batch); }
};

template <class S>
void bench(const std::vector<int>& sizes, int batch, int threads, int reps)
{
    for (int n : sizes) {
        const Operands<S> ops(n, batch, threads);
        S *a = ops.a, *b = ops.b, *c = ops.c;
        const long long nn = (long long)n * n;
        std::vector<const char*> names = {"gemmgen"}, isas = {gemmgen_cpu_isa()};
        std::vector<std::function<void()>> runs = {[&] { ops.gemmgen(); }};
        if (libxsmm_loop<S>(n, a, b, c, batch, threads)) {
            names.push_back("libxsmm");
            isas.push_back("jit");
            runs.push_back([&] { libxsmm_loop<S>(n, a, b, c, batch, threads); });
        }
        names.push_back("eigen");
        isas.push_back("compiled");
        runs.push_back([&] { eigen_dispatch<S>(n, a, b, c, batch, threads, std::make_integer_sequence<int, 32>{}); });
        names.push_back("openblas");
        isas.push_back("cblas");
        runs.push_back([&] {
            for_batch(batch, threads, [&](long long i) { Traits<S>::blas(n, a + i * nn, b + i * nn, c + i * nn); });
        });
        const auto t = seconds_in_turns(reps, runs);
        for (size_t i = 0; i < runs.size(); ++i)
            emit(names[i], Traits<S>::name, n, batch, threads, isas[i], t[i], ops.flops, ops.bytes);
    }
}

// The memory bandwidth of the kernels' access pattern: c[i] += a[i]*b[i] over three arrays of
// doubles (MEGABYTES in all), first-touched by the team that runs the loops.
struct Stream {
    const long long count;
    const int threads;
    double *a, *b, *c;

    Stream(long long megabytes, int threads_) : count(megabytes * (1LL << 20) / 3 / sizeof(double)), threads(threads_)
    {
        double** p[] = {&a, &b, &c};
        gemmgen_cpu_set_num_threads(threads);
        for (double** x : p) {
            *x = static_cast<double*>(std::malloc(count * sizeof(double)));
            gemmgen_cpu_first_touch(*x, sizeof(double) * 4096, (int)(count / 4096));
        }
        for (long long i = 0; i < count; ++i) {
            a[i] = 1.0;
            b[i] = 1e-9;
            c[i] = 0.0;
        }
    }
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;
    ~Stream()
    {
        std::free(a);
        std::free(b);
        std::free(c);
    }

    void plain() const
    {
#pragma omp parallel for schedule(static) num_threads(threads)
        for (long long i = 0; i < count; ++i)
            c[i] += a[i] * b[i];
    }

    // The same loop with software prefetch 4 kB ahead in each stream.  Where a core's hardware
    // prefetchers keep too few lines in flight (a VM's two cores: the plain loop measured 50 GB/s
    // while the GEMM kernels, which prefetch, moved up to 73), the plain loop understates what the
    // memory can deliver; the benchmark takes the faster of the two as its bandwidth.
    void prefetched() const
    {
        constexpr long long LINE = 64 / sizeof(double), AHEAD = 4096 / sizeof(double);
        const long long lines = (count + LINE - 1) / LINE;
#pragma omp parallel for schedule(static) num_threads(threads)
        for (long long l = 0; l < lines; ++l) {
            const long long i0 = l * LINE, i1 = i0 + LINE < count ? i0 + LINE : count;
            __builtin_prefetch(a + i0 + AHEAD);   // a prefetch past the end is dropped, not a fault
            __builtin_prefetch(b + i0 + AHEAD);
            __builtin_prefetch(c + i0 + AHEAD, 1);
            for (long long i = i0; i < i1; ++i)
                c[i] += a[i] * b[i];
        }
    }

    void report(const std::vector<double>& plain_seconds, const std::vector<double>& prefetched_seconds) const
    {
        const double flops = 2.0 * count, bytes = 4.0 * count * sizeof(double);
        emit("bandwidth", "d", 0, 0, threads, "c+=a*b", plain_seconds, flops, bytes);
        emit("bandwidth", "d", 0, 0, threads, "c+=a*b prefetch", prefetched_seconds, flops, bytes);
    }
};

void bandwidth(long long megabytes, int threads, int reps)
{
    const Stream stream(megabytes, threads);
    const auto t = seconds_in_turns(reps, {[&] { stream.plain(); }, [&] { stream.prefetched(); }});
    stream.report(t[0], t[1]);
}

// gemmgen on data far larger than the caches, taking turns with both stream loops within every
// repetition on the same threads: the memory's speed on a shared machine drifts from minute to
// minute, so a bandwidth measured at another moment is no sound limit for the kernel's GB/s.
template <class S>
void large(int n, int batch, int threads, int reps, long long stream_megabytes)
{
    const Operands<S> ops(n, batch, threads);
    const Stream stream(stream_megabytes, threads);
    const auto t = seconds_in_turns(reps, {[&] { ops.gemmgen(); }, [&] { stream.plain(); },
                                           [&] { stream.prefetched(); }});
    emit("gemmgen", Traits<S>::name, n, batch, threads, gemmgen_cpu_isa(), t[0], ops.flops, ops.bytes);
    stream.report(t[1], t[2]);
}

// Calls f with a value of the scalar type PREC names (s d c z); false for another letter.
template <class F>
bool with_precision(char prec, F&& f)
{
    switch (prec) {
    case 's': f(float{}); return true;
    case 'd': f(double{}); return true;
    case 'c': f(std::complex<float>{}); return true;
    case 'z': f(std::complex<double>{}); return true;
    default: return false;
    }
}

std::vector<int> parse_sizes(const char* text)
{
    std::vector<int> out;
    for (const char* s = text; *s;) {
        out.push_back(std::atoi(s));
        while (*s && *s != ',') ++s;
        if (*s == ',') ++s;
    }
    return out;
}

}  // namespace

int main(int argc, char** argv)
{
    openblas_set_num_threads(1);   // the batch loop is what runs in parallel
    libxsmm_init();
    const bool is_bandwidth = argc == 5 && std::strcmp(argv[1], "bandwidth") == 0;
    const bool is_large = argc == 9 && std::strcmp(argv[1], "large") == 0;
    if (!is_bandwidth && !is_large && argc != 7) {
        std::fprintf(stderr, "usage: %s PREC SIZES BATCH THREADS ISA REPS | bandwidth MB THREADS REPS"
                             " | large PREC N BATCH THREADS ISA REPS MB\n", argv[0]);
        return 2;
    }
    if (is_bandwidth) {
        bandwidth(std::atoll(argv[2]), std::atoi(argv[3]), std::atoi(argv[4]));
        return 0;
    }
    char** arg = argv + (is_large ? 2 : 1);   // PREC SIZES BATCH THREADS ISA REPS [MB]
    const std::vector<int> sizes = parse_sizes(arg[1]);
    const int batch = std::atoi(arg[2]), threads = std::atoi(arg[3]), reps = std::atoi(arg[5]);
    if (gemmgen_cpu_set_isa(arg[4]) != 0) {
        std::fprintf(stderr, "this CPU has no %s\n", arg[4]);
        return 3;
    }
    const bool known = with_precision(arg[0][0], [&](auto scalar) {
        using S = decltype(scalar);
        if (is_large)
            large<S>(sizes.at(0), batch, threads, reps, std::atoll(arg[6]));
        else
            bench<S>(sizes, batch, threads, reps);
    });
    libxsmm_finalize();
    return known ? 0 : 2;
}
