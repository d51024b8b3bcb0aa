"""GPU timing as docs/design.md (Measurement) describes: CUDA events, warm-up, median of many runs, launches captured in a
CUDA graph so tiny kernels are not measuring launch gaps, and the copy bandwidth of the same run."""
from __future__ import annotations

import functools
import statistics
from typing import Callable


def median_time_ms(launch: Callable[[int], None], launches_per_graph: int = 10, repeats: int = 15,
                   warmup: int = 2) -> float:
    """Median time of one launch.  `launch(stream_ptr)` enqueues one launch on that stream.  The
    launches are captured in a CUDA graph (fallback: plain back-to-back launches) and the graph is
    replayed `repeats` times between events."""
    import cupy as cp

    # The inputs (and pointer arrays) were made on the legacy default stream, which a non-blocking
    # stream does not wait for: without this, the first launches can read pointers not yet written.
    cp.cuda.runtime.deviceSynchronize()
    stream = cp.cuda.Stream(non_blocking=True)
    graph = None
    with stream:
        for _ in range(warmup):
            launch(stream.ptr)
        stream.synchronize()
        try:
            stream.begin_capture()
            for _ in range(launches_per_graph):
                launch(stream.ptr)
            graph = stream.end_capture()
            graph.launch(stream)
            stream.synchronize()
        except Exception:
            graph = None
            if stream.is_capturing():
                stream.end_capture()
        times = []
        for _ in range(repeats):
            start, stop = cp.cuda.Event(), cp.cuda.Event()
            start.record(stream)
            if graph is not None:
                graph.launch(stream)
            else:
                for _ in range(launches_per_graph):
                    launch(stream.ptr)
            stop.record(stream)
            stop.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, stop) / launches_per_graph)
    return statistics.median(times)


_COPY_KERNEL = r"""
extern "C" __global__ void gemmgen_copy16(const int4* __restrict__ src, int4* __restrict__ dst, long long n)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        dst[i] = src[i];
}
"""


def copy_kernel_launch(pairs: list[tuple[int, int]], nbytes: int):
    """A launch(stream_ptr) closure of the 16-byte grid-stride copy kernel: `nbytes` (rounded up to
    16) read from src and written to dst, each launch taking the next (src, dst) device-pointer pair
    of `pairs` (rotating like Workload's sets).  At most 8 blocks of 512 threads per SM, fewer where
    the copy is small (idle blocks would only add launch work a copy of that size does not need)."""
    import cupy as cp
    import numpy as np

    kernel = cp.RawKernel(_COPY_KERNEL, "gemmgen_copy16")
    vectors = -(-nbytes // 16)
    sms = cp.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]
    blocks = max(1, min(sms * 8, -(-vectors // 512)))
    counter = [0]

    def launch(stream_ptr: int) -> None:
        src, dst = pairs[counter[0] % len(pairs)]
        counter[0] += 1
        kernel((blocks,), (512,), (np.uint64(src), np.uint64(dst), np.int64(vectors)),
               stream=cp.cuda.ExternalStream(stream_ptr))
    return launch


def copy_bandwidth(nbytes: int = 1 << 30) -> float:
    """Device-to-device copy bandwidth in bytes/s, counting bytes read plus bytes written: the
    better of cudaMemcpyAsync and a 16-byte-per-thread copy kernel (the copy engine path alone
    under-reports what kernels can stream on Hopper)."""
    import cupy as cp

    src = cp.empty(nbytes, dtype=cp.uint8)
    dst = cp.empty(nbytes, dtype=cp.uint8)
    src.fill(1)

    def memcpy(stream_ptr: int) -> None:
        cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes,
                                    cp.cuda.runtime.memcpyDeviceToDevice, stream_ptr)

    copy_kernel = copy_kernel_launch([(src.data.ptr, dst.data.ptr)], nbytes)
    best_ms = min(median_time_ms(memcpy, launches_per_graph=5, repeats=10),
                  median_time_ms(copy_kernel, launches_per_graph=5, repeats=10))
    return 2 * nbytes / (best_ms * 1e-3)


def timed(launch_factory: Callable[[], Callable[[int], None]], timer: Callable[..., float] = median_time_ms,
          **timing) -> dict:
    """{"ms": timer(launch_factory(), **timing)} (by default median_time_ms), or {"error": its first
    line} where making or running the launches fails: a type cuBLAS refuses, or a launch that fails,
    is a result of a benchmark, not the end of it."""
    try:
        return {"ms": timer(launch_factory(), **timing)}
    except Exception as err:
        return {"error": str(err).splitlines()[0][:200] if str(err) else type(err).__name__}


def headless_pyplot():
    """matplotlib.pyplot on the Agg backend (no display needed), or None where matplotlib is not
    installed: the benchmarks then write their JSON and tables without a plot."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


@functools.lru_cache(maxsize=None)
def copy_bandwidth_once() -> float:
    """copy_bandwidth of this process's GPU, measured at its first call: a tuning process (or a worker
    of `gemmgen tune --gpus`) times piece after piece on the same GPU."""
    import click

    bandwidth = copy_bandwidth()
    click.echo(f"copy bandwidth {bandwidth / 1e9:.0f} GB/s")
    return bandwidth
