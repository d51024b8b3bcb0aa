"""`gemmgen bench cpu`: the cpu family against LIBXSMM 1.17 (JIT), Eigen 3.4 fixed-size products,
an OpenBLAS cblas loop and numpy's batched matmul, in one run on the same data (C += A·B, batch
`--batch`, single thread and all threads), plus the machine's memory bandwidth for the same access
pattern and our kernels' share of it on data far larger than the caches (the bandwidth loop taking
turns with each kernel, see large_row).

Writes docs/perf/cpu_bench.json (every measurement, the machine, the command), cpu_bench.md (the
tables) and cpu_bench.png (the plot); runs of another ISA than AVX2 (the reference ISA of the
issue's table) write cpu_bench_<isa>.*, so they do not replace it."""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import click

from gemmgen.harness.cpu import build as cpu_build
from gemmgen.harness.core.timing import headless_pyplot
from gemmgen.harness.cpu.tune import cpu_model

HERE = Path(__file__).resolve().parent
LIBS = ("gemmgen", "libxsmm", "eigen", "openblas", "numpy")


# What Eigen's and the loops' code is compiled for, per ISA gemmgen runs: the same vector width.
DRIVER_ISA_FLAGS = {"avx2": ("-mavx2", "-mfma"), "avx512": ("-mavx512f", "-mavx2", "-mfma"), "generic": ()}


def build_driver(lib: Path, include: Path, out: Path, isa: str = "avx2") -> Path:
    """The C++ driver, compiled for the ISA gemmgen runs (Eigen's and the loops' code; LIBXSMM JITs
    for the target LIBXSMM_TARGET names; gemmgen picks its ISA at run time, set by the driver)."""
    exe = out / ("cpu_bench" if isa == "avx2" else f"cpu_bench_{isa}")
    # Eigen's 4 x 32 fixed-size instantiations take minutes to compile: rebuild only when stale
    # (the library is linked dynamically, so relinking it needs no rebuild).
    if exe.exists() and exe.stat().st_mtime > (HERE / "cpu_bench.cpp").stat().st_mtime:
        return exe
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "libxsmm", "eigen3"], capture_output=True,
                           text=True).stdout.split()
    cmd = [cpu_build.NATIVE.cxx, "-std=c++14", "-O3", *DRIVER_ISA_FLAGS[isa], "-fopenmp", "-DNDEBUG",
           f"-I{include}", str(HERE / "cpu_bench.cpp"), "-o", str(exe),
           f"-L{lib.parent}", f"-Wl,-rpath,{lib.parent}", "-l:" + lib.name, *flags, "-lopenblas", "-lpthread", "-lm"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"building the benchmark driver failed:\n{proc.stderr[-3000:]}")
    return exe


def run_driver(exe: Path, args: list[str], env: dict) -> list[dict]:
    proc = subprocess.run([str(exe), *args], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{exe.name} {' '.join(args)} failed: {proc.stderr[-2000:]}")
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


_NUMPY = r"""
import json, sys, time, statistics, numpy as np
prec, sizes, batch, threads, reps = sys.argv[1], [int(s) for s in sys.argv[2].split(",")], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
dtype = {"s": np.float32, "d": np.float64, "c": np.complex64, "z": np.complex128}[prec]
cw = 4 if prec in "cz" else 1
for n in sizes:
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((batch, n, n)).astype(dtype) for _ in range(2))
    c = np.zeros((batch, n, n), dtype)
    def once():
        c.__iadd__(np.matmul(a, b))
    once()
    t = []
    for _ in range(reps):
        t0 = time.perf_counter(); once(); t.append(time.perf_counter() - t0)
    s = statistics.median(t)
    print(json.dumps({"library": "numpy", "precision": prec, "n": n, "batch": batch, "threads": threads,
                      "isa": "matmul", "seconds": s, "gflops": 2 * cw * n**3 * batch / s * 1e-9,
                      "gbytes_per_s": 4 * c.nbytes / s * 1e-9}))
"""


def run_numpy(prec: str, sizes, batch: int, threads: int, reps: int) -> list[dict]:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    proc = subprocess.run([sys.executable, "-c", _NUMPY, prec, ",".join(map(str, sizes)), str(batch), str(threads),
                           str(reps)], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    return [json.loads(line) for line in proc.stdout.splitlines()]


def large_row(measured: list[dict]) -> dict:
    """gemmgen's row of one `cpu_bench large` call (the kernel and the two stream loops in turns)
    with its share of the bandwidth measured next to it: the kernel's median GB/s over the faster
    loop's median GB/s (plain or prefetching) of the same repetitions.  Keeps both loops' rows,
    every repetition included, and the faster loop's slowest and fastest repetition, so a reader
    sees how much the memory moved while the kernel ran."""
    kernel = next(r for r in measured if r["library"] == "gemmgen")
    loops = [r for r in measured if r["library"] == "bandwidth"]
    best = max(loops, key=lambda r: r["gbytes_per_s"])
    return dict(kernel, bandwidth=loops, bandwidth_loop=best["isa"], bandwidth_gbytes_per_s=best["gbytes_per_s"],
                bandwidth_range_gbytes_per_s=[min(best["gbytes_per_s_each"]), max(best["gbytes_per_s_each"])],
                fraction_of_bandwidth=kernel["gbytes_per_s"] / best["gbytes_per_s"])


def _table(rows: list[dict], prec: str, threads: int, sizes) -> list[str]:
    by = {(r["library"], r["n"]): r["gflops"] for r in rows if r["precision"] == prec and r["threads"] == threads
          and r.get("batch") != "large"}
    libs = [lib for lib in LIBS if any((lib, n) in by for n in sizes)]
    out = [f"| N | {' | '.join(libs)} | vs LIBXSMM | vs Eigen |", "|" + " --- |" * (len(libs) + 3)]
    for n in sizes:
        ours = by.get(("gemmgen", n))
        cells = [f"{by[(lib, n)]:.1f}" if (lib, n) in by else "—" for lib in libs]
        rel = [f"{ours / by[(lib, n)]:.2f}x" if ours and (lib, n) in by else "—" for lib in ("libxsmm", "eigen")]
        out.append(f"| {n} | {' | '.join(cells)} | {' | '.join(rel)} |")
    return out


def _summary(rows: list[dict], precisions, sizes) -> list[str]:
    """Per precision: at how many sizes one thread of gemmgen beat LIBXSMM and Eigen, the smallest
    ratios, and the sizes where it did not."""
    by = {(r["library"], r["precision"], r["n"]): r["gflops"] for r in rows if r["threads"] == 1
          and r.get("batch") != "large" and r["library"] != "bandwidth"}
    out = ["| precision | vs LIBXSMM: faster at | smallest ratio | vs Eigen: faster at | smallest ratio | slower at |",
           "| --- | --- | --- | --- | --- | --- |"]
    for prec in precisions:
        cells, slower = [], []
        for lib in ("libxsmm", "eigen"):
            ratios = {n: by[("gemmgen", prec, n)] / by[(lib, prec, n)] for n in sizes
                      if ("gemmgen", prec, n) in by and (lib, prec, n) in by}
            if not ratios:
                cells += ["—", "—"]
                continue
            worst = min(ratios, key=ratios.get)
            cells += [f"{sum(r > 1 for r in ratios.values())} of {len(ratios)}", f"{ratios[worst]:.2f}x (N = {worst})"]
            slower += [f"{lib} N = {n} ({r:.2f}x)" for n, r in sorted(ratios.items()) if r <= 1]
        out.append(f"| {prec} | {' | '.join(cells)} | {', '.join(slower) or 'none'} |")
    return out


def run_bench(gen_dir: Path, build_dir: Path, precisions, sizes, batch: int, isa: str, reps: int,
              large_megabytes: int, out_dir: Path, command: str) -> int:
    load_at_start = os.getloadavg()[0]
    # The tests' flags (-O2), one translation unit per kernel as a vendoring project builds them.
    build = cpu_build.build(gen_dir, build_dir, isas=["generic", "avx2", "avx512"])
    exe = build_driver(build.output, gen_dir / "include", build_dir, isa)
    threads_all = os.cpu_count() or 1
    # LIBXSMM JITs for the ISA asked for (hsw = AVX2), so both sides use the same vector width.
    xsmm_target = {"avx2": "hsw", "avx512": "skx", "generic": "generic"}.get(isa, "hsw")
    env = dict(os.environ, LIBXSMM_TARGET=xsmm_target, OMP_PROC_BIND="close", OPENBLAS_NUM_THREADS="1")
    rows: list[dict] = []
    for prec in precisions:
        for threads in sorted({1, threads_all}):
            click.echo(f"{prec}: {threads} thread(s)")
            rows += run_driver(exe, [prec, ",".join(map(str, sizes)), str(batch), str(threads), isa, str(reps)], env)
            rows += run_numpy(prec, sizes, batch, threads, reps)
    # One thread's bandwidth, for reading the one-thread tables (the larger sizes stream from memory).
    one_thread = run_driver(exe, ["bandwidth", str(large_megabytes), "1", str(reps)], env)
    rows += one_thread
    # Data far larger than the caches, all threads: our kernels' bytes moved per second against
    # the bandwidth of the same access pattern, measured in turns with each kernel (large_row).
    large = []
    for prec in precisions:
        elem = {"s": 4, "d": 8, "c": 8, "z": 16}[prec]
        for n in (4, 8, 16, 32):
            if n not in sizes:
                continue
            big_batch = large_megabytes * 2**20 // (3 * n * n * elem)
            large.append(large_row(run_driver(exe, ["large", prec, str(n), str(big_batch), str(threads_all), isa,
                                                    str(max(3, reps // 2)), str(large_megabytes)], env)))
    machine = {"cpu": cpu_model(), "cores": threads_all, "platform": platform.platform(),
               "isa": isa, "libxsmm_target": xsmm_target,
               # Other work on the machine distorts every number: say how busy it was.
               "load_average_at_start": load_at_start, "load_average_at_end": os.getloadavg()[0]}
    report = {"command": command, "machine": machine, "batch": batch, "reps": reps,
              "measured": time.strftime("%Y-%m-%d"),
              "results": rows, "large": large}
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = "cpu_bench" if isa == "avx2" else f"cpu_bench_{isa}"
    (out_dir / f"{stem}.json").write_text(json.dumps(report, indent=1) + "\n")
    lines = ["# CPU benchmark: gemmgen vs LIBXSMM 1.17, Eigen 3.4, OpenBLAS, numpy", "",
             f"Command: `{command}`  ", f"Machine: {machine['cpu']}, {threads_all} cores, {machine['platform']}  ",
             f"gemmgen ISA: {isa}; LIBXSMM JIT target: {xsmm_target}; Eigen and the loops compiled with "
             f"-O3 {' '.join(DRIVER_ISA_FLAGS[isa])}.  C += A·B, column-major N×N, batch {batch}, median of {reps} runs, GF/s.  ",
             f"Load average when it started / finished: {machine['load_average_at_start']:.1f} / "
             f"{machine['load_average_at_end']:.1f} (above the core count, other processes shared the cores "
             f"and the numbers are noisy).  ",
             f"One thread's memory bandwidth (c[i] += a[i]·b[i], {large_megabytes} MB, median of {reps}): "
             + ", ".join(f"{r['isa']} {r['gbytes_per_s']:.1f} GB/s" for r in one_thread) + ".", ""]
    lines += ["## Summary: one thread, gemmgen against the best of LIBXSMM and Eigen", ""] + _summary(rows, precisions, sizes)
    lines += [""]
    for prec in precisions:
        for threads in sorted({1, threads_all}):
            lines += [f"## {prec}, {threads} thread(s)", ""] + _table(rows, prec, threads, sizes) + [""]
    lines += [f"## All threads, data ≫ caches ({large_megabytes} MB per call)", "",
              f"Each kernel took turns with two bandwidth loops (c[i] += a[i]·b[i] over {large_megabytes} MB, plain and "
              "prefetching 4 kB ahead) within every repetition, on the same threads.  Bandwidth: the faster loop's "
              "median GB/s (its slowest–fastest repetition in brackets); fraction: the kernel's median GB/s over it.",
              "", "| precision | N | GF/s | GB/s | bandwidth next to it, GB/s | fraction of bandwidth |",
              "| --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {r['precision']} | {r['n']} | {r['gflops']:.1f} | {r['gbytes_per_s']:.1f} | "
              f"{r['bandwidth_gbytes_per_s']:.1f} ({r['bandwidth_range_gbytes_per_s'][0]:.1f}–"
              f"{r['bandwidth_range_gbytes_per_s'][1]:.1f}) | {r['fraction_of_bandwidth']:.2f} |" for r in large]
    (out_dir / f"{stem}.md").write_text("\n".join(lines) + "\n")
    _plot(rows, precisions, sizes, out_dir / f"{stem}.png", machine)
    click.echo((out_dir / f"{stem}.md").read_text())
    return 0


def _plot(rows, precisions, sizes, path: Path, machine: dict) -> None:
    plt = headless_pyplot()
    if plt is None:
        click.echo("matplotlib missing: no plot (pip install matplotlib)")
        return
    fig, axes = plt.subplots(1, len(precisions), figsize=(4.5 * len(precisions), 3.8), squeeze=False)
    for ax, prec in zip(axes[0], precisions):
        for lib in LIBS:
            pts = sorted((r["n"], r["gflops"]) for r in rows if r["library"] == lib and r["precision"] == prec
                         and r["threads"] == 1)
            if pts:
                ax.plot(*zip(*pts), marker="o", ms=3, label=lib)
        ax.set_title(f"{prec}gemm, 1 thread")
        ax.set_xlabel("N")
        ax.set_ylabel("GF/s")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"C += A·B batched, {machine['cpu']} ({machine['isa']})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
