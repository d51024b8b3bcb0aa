"""`gemmgen bench wmma`: the paper's figures (Abdelfattah et al. §7, §8) on the GPU
present, in one run against cuBLAS through CuPy, with the copy bandwidth of the same run.

- h: square sizes up to 128 and rank-16 updates (M = N, K = 16), batch 1000, 100 and 10, and
  data far larger than L2; against cuBLAS's strided batched GEMM on fp16 (fp32 compute).
- hc (interleaved): the same up to 256; against cuBLAS on planar data: four real fp16 batched
  GEMMs (Cr = Ar·Br − Ai·Bi, Ci = Ar·Bi + Ai·Br), kernel time only, as the paper measured.
- tiny sizes N ≤ 16 with batch 10,000: gemmgen's dispatch (small family or tiny Tensor Core
  kernel, whichever the table chose), the tiny kernel and the general kernel alone.
- the "≫L2" rows also with beta = 1 (C read as well: C += A·B), ours and the baseline.
Batches of a few MB rotate over several copies of the data (up to 32), so fewer of them sit in
L2 between launches; the "≫L2" rows move at least 256 MB per launch.
Writes docs/perf/bench_wmma_<arch>.{json,md,png}."""
from __future__ import annotations

import json
import math
from pathlib import Path

import click

from gemmgen.harness.core.bench_runs import keep_other_precisions, run_lines
from gemmgen.harness.core.timing import headless_pyplot, timed
from gemmgen.harness.core.api import variant_function
from gemmgen.harness.core.workload import Workload, batch_for_megabytes, bytes_moved, flops, set_elements

SQUARE = {"h": tuple(range(1, 65)) + tuple(range(72, 129, 8)),
          "hc": tuple(range(1, 65)) + tuple(range(72, 257, 8))}
BATCHES = (1000, 100, 10)
TINY_BATCH = 10_000
ROTATE_BYTES = 200e6
MAX_SETS = 32
BIG_MEGABYTES = 256


def _sets(prec, m, n, k, batch) -> int:
    per = bytes_moved(prec, m, n, k, batch, True)
    return max(1, min(MAX_SETS, math.ceil(ROTATE_BYTES / per)))


class Planar:
    """hc through cuBLAS the only way it allows: real and imaginary parts in separate fp16 arrays,
    four strided batched HGEMMs per complex GEMM (split-complex, §6.2)."""

    def __init__(self, work: Workload):
        import cupy as cp
        import numpy as np

        self.work = work
        m, n, k, b, s = work.m, work.n, work.k, work.batch, work.sets
        self.parts = {name: cp.random.uniform(-1, 1, size=s * set_elements(b * size, 2)).astype(cp.float16)
                      for name, size in (("Ar", m * k), ("Ai", m * k), ("Br", k * n), ("Bi", k * n),
                                         ("Cr", m * n), ("Ci", m * n))}
        self._one, self._minus, self._zero = (np.array(v, dtype=np.float32) for v in (1.0, -1.0, 0.0))

    def launch_factory(self, beta: float):
        from cupy_backends.cuda.libs import cublas
        import cupy as cp
        import numpy as np

        handle = cp.cuda.device.get_cublas_handle()
        w = self.work
        m, n, k, b = w.m, w.n, w.k, w.batch
        beta_v = np.array(beta, dtype=np.float32)
        p = self.parts
        counter = [0]

        def ptr(name, size):
            return p[name].data.ptr + (counter[0] % w.sets) * set_elements(b * size, 2) * 2

        def gemm(stream_ptr, a, b_, c, alpha, beta_):
            cublas.gemmStridedBatchedEx(handle, 0, 0, m, n, k, alpha.ctypes.data, a, 2, m, m * k,
                                        b_, 2, k, k * n, beta_.ctypes.data, c, 2, m, m * n,
                                        w.batch, 68, -1)

        def launch(stream_ptr: int) -> None:
            cublas.setStream(handle, stream_ptr)
            ar, ai, br, bi = ptr("Ar", m * k), ptr("Ai", m * k), ptr("Br", k * n), ptr("Bi", k * n)
            cr, ci = ptr("Cr", m * n), ptr("Ci", m * n)
            gemm(stream_ptr, ar, br, cr, self._one, beta_v)
            gemm(stream_ptr, ai, bi, cr, self._minus, self._one)
            gemm(stream_ptr, ar, bi, ci, self._one, beta_v)
            gemm(stream_ptr, ai, br, ci, self._one, self._one)
            counter[0] += 1
        return launch

    def release(self):
        self.parts = None


def _time(factory) -> dict:
    return timed(factory, launches_per_graph=MAX_SETS, repeats=7)   # a refused type or launch is a result


def _row(lib, prec, kind, m, n, k, batch, label, bandwidth, sets, extra=(), betas=(0.0,)) -> dict:
    """One problem: ours and the baseline with beta = 0 (keys "ours", "cublas"/"cublas_planar"),
    and with each further beta in `betas` (keys suffixed "_beta1" for beta = 1)."""
    work = Workload(prec, m, n, k, batch, sets=sets)
    public = getattr(lib.lib, f"gemmgen_{prec}gemm_batched_strided")
    row = {"precision": prec, "kind": kind, "m": m, "n": n, "k": k, "batch": batch, "data": label,
           "sets": sets, "kernel": lib.selected_kernel(prec, m, n, k)}
    base_name = "cublas_planar" if prec == "hc" else "cublas"
    planar = Planar(work) if prec == "hc" else None
    for beta in betas:
        suffix = "" if beta == 0 else f"_beta{beta:g}"
        floor_ms = bytes_moved(prec, m, n, k, batch, beta != 0) / bandwidth * 1e3
        who = [("ours", lambda: work.ours(public, 1.0, beta)),
               (base_name, (lambda: planar.launch_factory(beta)) if planar else (lambda: work.cublas(1.0, beta)))]
        if beta == 0:
            who += [(name, lambda fn=fn: work.ours(fn, 1.0, 0.0)) for name, fn in extra]
        for name, factory in who:
            r = _time(factory)
            if "ms" in r:
                r["gflops"] = flops(prec, m, n, k, batch) / (r["ms"] * 1e-3) / 1e9
                r["floor_fraction"] = floor_ms / r["ms"]
            row[name + suffix] = r
        base, ours = row.get(base_name + suffix, {}), row["ours" + suffix]
        if "ms" in base and "ms" in ours:
            row["speedup" + suffix] = base["ms"] / ours["ms"]
    work.release()
    if planar:
        planar.release()
    return row


def run_bench(lib, device: str, arch: str, bandwidth: float, precisions, out_dir: Path, command: str,
              general_names) -> Path:
    """general_names(prec, kind, m, n, k): the general kernel the dispatch table has for that
    problem (for the tiny rows, which also time it alone)."""
    rows = []
    plan = []
    for prec in precisions:
        for size in SQUARE[prec]:
            for kind, shape in (("square", (size, size, size)), ("rank", (size, size, 16))):
                big = max(1000, batch_for_megabytes(prec, *shape, BIG_MEGABYTES))
                plan.append((prec, kind, shape, big, "≫L2", 1))
                for batch in (BATCHES if kind == "square" else BATCHES[:1]):
                    plan.append((prec, kind, shape, batch, f"batch {batch}", _sets(prec, *shape, batch)))
        for size in range(1, 17):
            for kind, shape in (("square", (size, size, size)), ("rank", (size, size, 16))):
                plan.append((prec, "tiny " + kind, shape, TINY_BATCH, f"batch {TINY_BATCH}",
                             _sets(prec, *shape, TINY_BATCH)))
    with click.progressbar(plan, label="bench wmma", show_pos=True) as bar:
        for prec, kind, (m, n, k), batch, label, sets in bar:
            extra = []
            if kind.startswith("tiny"):   # also the general kernel alone, as in the paper's Fig. 18/19
                name = general_names(prec, kind.split()[1], m, n, k)
                if name:
                    extra.append(("only_wmma", variant_function(lib.lib, name, "strided")))
            rows.append(_row(lib, prec, kind.split()[-1], m, n, k, batch, label, bandwidth, sets, extra,
                             betas=(0.0, 1.0) if label == "≫L2" else (0.0,)))
            rows[-1]["tiny_row"] = kind.startswith("tiny")
    runs = {prec: {"command": command, "copy_bandwidth_gbs": bandwidth / 1e9} for prec in precisions}
    payload = {"device": device, "arch": arch, "runs": runs, "rows": rows}
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"bench_wmma_{arch}"
    if stem.with_suffix(".json").exists():
        payload = keep_other_precisions(payload, json.loads(stem.with_suffix(".json").read_text()))
    stem.with_suffix(".json").write_text(json.dumps(payload, indent=1) + "\n")
    stem.with_suffix(".md").write_text(markdown(payload))
    plot(payload, stem.with_suffix(".png"))
    click.echo("\n".join(summary(payload)))
    return stem.with_suffix(".json")


def _f(r: dict, who: str, key: str, fmt: str) -> str:
    v = r.get(who, {}).get(key)
    return "n/a" if v is None else format(v, fmt)


def summary(payload: dict) -> list[str]:
    """The issue's goals against what was measured."""
    rows = payload["rows"]
    out = ["| goal | measured | met |", "|---|---|---|"]
    h_big = [r for r in rows if r["precision"] == "h" and r["data"] == "≫L2" and not r["tiny_row"]]
    mem = [r for r in h_big if "floor_fraction" in r["ours"] and
           r["ours"]["gflops"] < 0.5 * _peak_gflops(payload)]
    if mem:
        worst = min(mem, key=lambda r: r["ours"]["floor_fraction"])
        under = sorted({(r["kind"], r["m"]) for r in mem if r["ours"]["floor_fraction"] < 0.8})
        out.append(f"| h ≥ 80% of the floor where memory-bound (≫L2) | worst {worst['ours']['floor_fraction']:.2f} "
                   f"({worst['kind']} {worst['m']}); {len(under)} of {len(mem)} points under | {'yes' if not under else 'no'} |")
    for prec in ("h", "hc"):
        b1 = [r for r in rows if r["precision"] == prec and r["data"] == "≫L2" and not r["tiny_row"]
              and "floor_fraction" in r.get("ours_beta1", {}) and "floor_fraction" in r["ours"]]
        if b1:
            worst = min(b1, key=lambda r: r["ours_beta1"]["floor_fraction"])
            lag = sorted(b1, key=lambda r: r["ours_beta1"]["floor_fraction"] - r["ours"]["floor_fraction"])[0]
            out.append(f"| {prec} with beta = 1 (≫L2; no goal set, reported) | worst {worst['ours_beta1']['floor_fraction']:.2f} "
                       f"({worst['kind']} {worst['m']}); largest drop from beta = 0: "
                       f"{lag['ours']['floor_fraction']:.2f} → {lag['ours_beta1']['floor_fraction']:.2f} "
                       f"({lag['kind']} {lag['m']}) | – |")
    h1000 = [r for r in rows if r["precision"] == "h" and r["data"] == "batch 1000" and not r["tiny_row"]
             and r["kind"] == "square" and r["m"] <= 128 and "speedup" in r]
    if h1000:
        lo = min(h1000, key=lambda r: r["speedup"])
        slower = [r["m"] for r in h1000 if r["speedup"] < 1]
        out.append(f"| h faster than cuBLAS for N ≤ 128, batch 1000 | speedup {lo['speedup']:.2f} (N={lo['m']}) to "
                   f"{max(r['speedup'] for r in h1000):.1f}; slower at N = {slower or '–'} | {'yes' if not slower else 'no'} |")
    hc = [r for r in rows if r["precision"] == "hc" and not r["tiny_row"] and r["data"] == "batch 1000" and "speedup" in r]
    if hc:
        lo = min(hc, key=lambda r: r["speedup"])
        under = sorted({(r["kind"], r["m"]) for r in hc if r["speedup"] < 2})
        out.append(f"| hc ≥ 2× cuBLAS planar up to 256 (batch 1000) | {lo['speedup']:.2f} ({lo['kind']} {lo['m']}) to "
                   f"{max(r['speedup'] for r in hc):.1f}; under 2× at {len(under)} points | {'yes' if not under else 'no'} |")
    tiny = [r for r in rows if r["tiny_row"] and r["m"] <= 8 and "speedup" in r]
    if tiny:
        for prec in ("h", "hc"):
            t = [r for r in tiny if r["precision"] == prec]
            if t:
                lo = min(t, key=lambda r: r["speedup"])
                out.append(f"| {prec} tiny path ≥ 10× cuBLAS for N ≤ 8 (batch 10,000) | {lo['speedup']:.1f} (N={lo['m']}) to "
                           f"{max(r['speedup'] for r in t):.1f} | {'yes' if lo['speedup'] >= 10 else 'no'} |")
    return out


def _peak_gflops(payload) -> float:
    best = max((r["ours"].get("gflops", 0) for r in payload["rows"] if r["precision"] == "h"), default=1)
    return best


def markdown(payload: dict) -> str:
    lines = [f"# wmma family vs cuBLAS on {payload['device']} ({payload['arch']})", "",
             *run_lines(payload), "",
             "floor = bytes that must move (A, B read, C written; β = 1: C read too) / that bandwidth; the "
             "columns give the fraction of it reached. hc is compared with cuBLAS on planar data "
             "(four fp16 GEMMs, kernel time only, same floor as the interleaved data).", "",
             "## Goals", "", *summary(payload), "", "## Every measurement", "",
             "| prec | kind | M×N×K | batch | data | ours GF/s | ours floor | cuBLAS GF/s | cuBLAS floor | speedup "
             "| ours floor β=1 | cuBLAS floor β=1 | speedup β=1 | kernel | extra |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in payload["rows"]:
        base = "cublas_planar" if r["precision"] == "hc" else "cublas"
        extra = "; ".join(f"{k}: {v['floor_fraction']:.2f}" for k, v in r.items()
                          if k.startswith("only_") and isinstance(v, dict) and "floor_fraction" in v)
        lines.append(f"| {r['precision']} | {'tiny' if r['tiny_row'] else r['kind']} | {r['m']}×{r['n']}×{r['k']} "
                     f"| {r['batch']} | {r['data']} | {_f(r, 'ours', 'gflops', '.0f')} "
                     f"| {_f(r, 'ours', 'floor_fraction', '.2f')} | {_f(r, base, 'gflops', '.0f')} "
                     f"| {_f(r, base, 'floor_fraction', '.2f')} "
                     f"| {format(r['speedup'], '.2f') if 'speedup' in r else 'n/a'} "
                     f"| {_f(r, 'ours_beta1', 'floor_fraction', '.2f')} | {_f(r, base + '_beta1', 'floor_fraction', '.2f')} "
                     f"| {format(r['speedup_beta1'], '.2f') if 'speedup_beta1' in r else '–'} | {r['kernel']} | {extra} |")
    return "\n".join(lines) + "\n"


def plot(payload: dict, path: Path) -> None:
    plt = headless_pyplot()
    if plt is None:
        return
    panels = [("h", "square", "batch 1000"), ("h", "rank", "batch 1000"), ("h", "square", "≫L2"),
              ("hc", "square", "batch 1000"), ("hc", "rank", "batch 1000"), ("hc", "square", "≫L2")]
    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    for ax, (prec, kind, data) in zip(axes.flat, panels):
        rows = [r for r in payload["rows"] if r["precision"] == prec and r["kind"] == kind
                and r["data"] == data and not r["tiny_row"]]
        base = "cublas_planar" if prec == "hc" else "cublas"
        xs = [r["m"] for r in rows]
        for who, style, label in (("ours", "o-", "gemmgen"), (base, "s--", base.replace("_", " "))):
            ax.plot(xs, [r[who].get("gflops", float("nan")) / 1e3 for r in rows], style, label=label, markersize=3)
        ax.set_title(f"{prec} {kind} ({data})")
        ax.set_xlabel("N" + (" (K = 16)" if kind == "rank" else " (M = N = K)"))
        ax.set_ylabel("TFLOP/s")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(f"batched HGEMM / HCGEMM on Tensor Cores, {payload['device']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
