// A C++ program that calls gemmgen's batched DGEMM on the GPU, falls back to something else when
// the shape was not generated, and checks the result against a plain loop on the host.
#include <cmath>
#include <cstdio>
#include <vector>

#include <cuda_runtime.h>

#include "gemmgen.h"

int main()
{
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("gemmgen %s (%s): no CUDA device, nothing to run\n", GEMMGEN_VERSION, GEMMGEN_ARCHS);
        return 0;
    }
    const int n = 4, batch = 1000;
    if (!gemmgen_small_is_generated("d", n, n, n)) {
        std::printf("d %dx%dx%d not generated: call cuBLAS instead\n", n, n, n);
        return 0;
    }
    const long long stride = (long long)n * n;
    std::vector<double> a(stride * batch), b(stride * batch), c(stride * batch, 0.0);
    for (size_t i = 0; i < a.size(); ++i) {
        a[i] = std::sin(0.1 * i);
        b[i] = std::cos(0.3 * i);
    }
    double *dA, *dB, *dC;
    const size_t bytes = sizeof(double) * a.size();
    if (cudaMalloc(&dA, bytes) != cudaSuccess || cudaMalloc(&dB, bytes) != cudaSuccess ||
        cudaMalloc(&dC, bytes) != cudaSuccess) {
        std::printf("cudaMalloc failed\n");
        return 1;
    }
    cudaMemcpy(dA, a.data(), bytes, cudaMemcpyHostToDevice);
    cudaMemcpy(dB, b.data(), bytes, cudaMemcpyHostToDevice);
    const int rc = gemmgen_dgemm_batched_strided('N', 'T', n, n, n, 1.0, dA, n, stride, dB, n, stride,
                                                 0.0, dC, n, stride, batch, /*stream=*/0);
    if (rc != 0) {
        std::printf("gemmgen_dgemm_batched_strided returned %d\n", rc);
        return 1;
    }
    cudaMemcpy(c.data(), dC, bytes, cudaMemcpyDeviceToHost);
    double worst = 0.0;
    for (int e = 0; e < batch; ++e)
        for (int j = 0; j < n; ++j)
            for (int i = 0; i < n; ++i) {
                double ref = 0.0;
                for (int l = 0; l < n; ++l)  // A * B^T
                    ref += a[e * stride + i + l * n] * b[e * stride + j + l * n];
                worst = std::fmax(worst, std::fabs(ref - c[e * stride + i + j * n]));
            }
    std::printf("kernel %s, largest difference from the host loop %.3g\n",
                gemmgen_small_selected_kernel("d", n, n, n), worst);
    cudaFree(dA);
    cudaFree(dB);
    cudaFree(dC);
    return worst < 1e-12 ? 0 : 1;
}
