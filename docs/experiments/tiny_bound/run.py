"""How far the tiny rows of `gemmgen bench wmma` (h and hc, N <= 8, batch 10,000) can go against cuBLAS at all.

Issue 5 asks the tiny path for at least 10x cuBLAS at N <= 8.  The bench times every launch inside a CUDA graph of 32
launches that rotate over up to 32 copies of the data (146-205 MB here, past the 50 MB L2), so each launch reads its
A and B from DRAM.  A batch of 10,000 tiny GEMMs is 0.06-6.4 MB, so a launch is a few microseconds and its fixed cost
(start, drain, one DRAM round trip) is a large part of it.  This script measures, in the bench's way, for each shape:

- ours:     the kernel the dispatch table picks (the bench's `kernel` column), through its fixed-shape launcher;
- cublas:   cublasGemmStridedBatchedEx (fp16, fp32 compute), as the bench; for hc the bench's planar baseline
            (four real GEMMs on split data);
- stream:   a kernel that only moves the same bytes (reads A and B, writes C; one 16-byte vector per thread,
            every load issued before any store), the fastest any GEMM kernel could be on this data;
- empty:    a kernel with one block that does nothing: the graph's cost per launch;
each with the data rotated (the bench) and with one copy (warm in L2, as a user calling it in a loop on the same
batch sees it).  `bound` = cublas / stream: no kernel can be faster than that against this cuBLAS.

Usage (on the GPU machine, repository root): python docs/experiments/tiny_bound/run.py LIB.so OUT.json
LIB.so: the tiny kernels built by build.sh (their `<name>_strided` launchers)."""
import ctypes
import json
import sys
from pathlib import Path

from gemmgen.generator.precision import PRECISIONS
from gemmgen.harness.wmma.bench import MAX_SETS, TINY_BATCH, Planar, _sets
from gemmgen.harness.core.timing import median_time_ms
from gemmgen.harness.core.api import variant_function
from gemmgen.harness.core.workload import Workload, bytes_moved

STREAM = r"""
extern "C" __global__ void stream_abc(const int4* __restrict__ a, long long na, const int4* __restrict__ b,
                                      long long nb, int4* __restrict__ c, long long nc)
{
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    int4 x = make_int4(0, 0, 0, 0), y = x;
    if (i < na) x = a[i];
    if (i < nb) y = b[i];
    if (i < nc) c[i] = make_int4(x.x ^ y.x, x.y ^ y.y, x.z ^ y.z, x.w ^ y.w);
}
extern "C" __global__ void empty_kernel() {}
"""


def kernels_from_bench(path: Path) -> list[tuple[str, int, int, int, str, float, float]]:
    rows = json.loads(path.read_text())["rows"]
    base = {"h": "cublas", "hc": "cublas_planar"}
    return [(r["precision"], r["m"], r["n"], r["k"], r["kernel"], r["ours"]["ms"], r[base[r["precision"]]]["ms"])
            for r in rows if r.get("tiny_row") and r["m"] <= 8]


def main(lib_path: str, out_path: str) -> None:
    import cupy as cp

    lib = ctypes.CDLL(lib_path)
    module = cp.RawModule(code=STREAM)
    stream_kernel, empty = module.get_function("stream_abc"), module.get_function("empty_kernel")
    time = lambda launch: median_time_ms(launch, launches_per_graph=MAX_SETS, repeats=7)   # noqa: E731
    rows = []
    for prec, m, n, k, name, bench_ours, bench_cublas in kernels_from_bench(Path("docs/perf/bench_wmma_sm_90.json")):
        row = {"precision": prec, "m": m, "n": n, "k": k, "kernel": name, "bench_ours_ms": bench_ours,
               "bench_cublas_ms": bench_cublas}
        elem = PRECISIONS[prec].element_bytes
        for label, sets in (("rotated", _sets(prec, m, n, k, TINY_BATCH)), ("warm", 1)):
            work = Workload(prec, m, n, k, TINY_BATCH, sets=sets)
            launcher = variant_function(lib, name, "strided")
            baseline = Planar(work).launch_factory(0.0) if prec == "hc" else work.cublas()
            counts = [(size * TINY_BATCH * elem + 15) // 16 for size in (m * k, k * n, m * n)]
            counter = [0]

            def streamed(stream_ptr, work=work, counts=counts, counter=counter):
                A, B, C = work.offsets(counter[0] % work.sets)
                counter[0] += 1
                threads = 256
                blocks = (max(counts) + threads - 1) // threads
                with cp.cuda.ExternalStream(stream_ptr):
                    stream_kernel((blocks,), (threads,), (cp.uint64(A), cp.int64(counts[0]), cp.uint64(B),
                                                          cp.int64(counts[1]), cp.uint64(C), cp.int64(counts[2])))

            def nothing(stream_ptr):
                with cp.cuda.ExternalStream(stream_ptr):
                    empty((1,), (32,), ())

            row[label] = {"sets": sets,
                          "ours_us": 1e3 * time(work.ours(launcher, takes_shape=False)),
                          "cublas_us": 1e3 * time(baseline),
                          "stream_us": 1e3 * time(streamed),
                          "empty_us": 1e3 * time(nothing)}
            r = row[label]
            r["speedup"] = r["cublas_us"] / r["ours_us"]
            r["bound"] = r["cublas_us"] / r["stream_us"]
            r["ours_of_stream"] = r["stream_us"] / r["ours_us"]
            work.release()
        row["mbytes"] = bytes_moved(prec, m, n, k, TINY_BATCH, False) / 1e6
        rows.append(row)
        print(f"{prec} {m}x{n}x{k} {row['mbytes']:.2f} MB  " + "  ".join(
            f"{lab}: ours {row[lab]['ours_us']:.2f} cublas {row[lab]['cublas_us']:.2f} stream {row[lab]['stream_us']:.2f}"
            f" empty {row[lab]['empty_us']:.2f} speedup {row[lab]['speedup']:.1f} bound {row[lab]['bound']:.1f}"
            for lab in ("rotated", "warm")), flush=True)
    Path(out_path).write_text(json.dumps({"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                                          "batch": TINY_BATCH, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:3])
