"""`gemmgen bench tallskinny`: the papers' workloads on the GPU present, ours (through
gemmgen_?gemm_tallskinny) against cuBLAS (cublasGemmEx through CuPy) in one run on the same
buffers, with the copy-bandwidth floor measured in that run.
- TSM2 (§4): A square, m = k = 10240..30720, n = 2, 4, 8, 16;
- ISM2 (§6): m = 10^4..10^7, (k, n) = (8, 8) and (16, 16);
single and double precision, beta = 0.  Writes JSON, a Markdown table and a plot into docs/perf/."""
from __future__ import annotations

import json
from pathlib import Path

import click

from gemmgen.harness.core.timing import copy_bandwidth, headless_pyplot
from gemmgen.harness.tallskinny.workload import TsWorkload, bytes_moved, flops

TSM2_SIZES = (10240, 15360, 20480, 25600, 30720)
TSM2_NS = (2, 4, 8, 16)
ISM2_MS = (10**4, 10**5, 10**6, 10**7)
ISM2_KN = ((8, 8), (16, 16))


def _measure(work: TsWorkload, launch) -> dict:
    try:
        return {"ms": work.time_ms(launch)}
    except Exception as err:
        return {"error": str(err).splitlines()[0][:200]}


def bench_case(lib, family: str, prec: str, m: int, n: int, k: int, bandwidth: float, A=None) -> dict:
    work = TsWorkload(prec, m, n, k, A=A)
    floor_ms = bytes_moved(prec, m, n, k) / bandwidth * 1e3
    row = {"family": family, "precision": prec, "m": m, "n": n, "k": k, "sets": work.sets,
           "kernel": lib.tallskinny_selected_kernel(prec, m, n, k), "floor_ms": floor_ms}
    for who, launch in (("ours", work.public(lib)), ("cublas", work.cublas())):
        r = _measure(work, launch)
        if "ms" in r:
            r["floor_fraction"] = floor_ms / r["ms"]
            r["gflops"] = flops(m, n, k) / (r["ms"] * 1e-3) / 1e9
        row[who] = r
    if "ms" in row["ours"] and "ms" in row["cublas"]:
        row["speedup"] = row["cublas"]["ms"] / row["ours"]["ms"]
    work.release()
    return row


def run_bench(lib, device: str, arch: str, out_dir: Path, precisions=("s", "d"), sizes=TSM2_SIZES,
              ns=TSM2_NS, ms=ISM2_MS, kns=ISM2_KN, bandwidth: float | None = None,
              command: str = "gemmgen bench tallskinny", stem: str | None = None) -> dict:
    import cupy as cp

    bandwidth = bandwidth or copy_bandwidth()
    click.echo(f"{device} ({arch}): copy bandwidth {bandwidth / 1e9:.0f} GB/s")
    rows = []
    for prec in precisions:
        for size in sizes:
            A = cp.empty(size * size, dtype={"s": cp.float32, "d": cp.float64, "h": cp.float16}[prec])
            A[:] = cp.random.uniform(-1, 1, size * size, dtype=cp.float32).astype(A.dtype)
            for n in ns:
                rows.append(bench_case(lib, "tsm2", prec, size, n, size, bandwidth, A=A))
                _echo(rows[-1])
            del A
            cp.get_default_memory_pool().free_all_blocks()
        for k, n in kns:
            for m in ms:
                rows.append(bench_case(lib, "ism2", prec, m, n, k, bandwidth))
                _echo(rows[-1])
    payload = {"device": device, "arch": arch, "copy_bandwidth_gbs": bandwidth / 1e9,
               "command": command, "rows": rows}
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = stem or f"bench_tallskinny_{arch}"
    (out_dir / f"{stem}.json").write_text(json.dumps(payload, indent=1) + "\n")
    (out_dir / f"{stem}.md").write_text(markdown_table(payload))
    plot(payload, out_dir / f"{stem}.png")
    return payload


def _echo(r: dict) -> None:
    o, c = r["ours"], r["cublas"]
    click.echo(f"{r['family']} {r['precision']} m={r['m']} n={r['n']} k={r['k']}: ours "
               f"{o.get('floor_fraction', float('nan')):.2f} of floor, cuBLAS "
               f"{c.get('floor_fraction', float('nan')):.3f}, speedup {r.get('speedup', float('nan')):.2f} "
               f"({r['kernel']})")


def _f(d: dict, key: str, fmt: str) -> str:
    return format(d[key], fmt) if key in d else "n/a"


GOALS = {("tsm2", "s"): 0.90, ("tsm2", "d"): 0.95}


def goal_text(r: dict) -> str:
    ours = r["ours"].get("floor_fraction")
    if ours is None:
        return "n/a"
    if r["family"] == "tsm2":
        # The goals are set for the papers' n (2, 4, 8, 16) in s and d.
        goal = GOALS.get(("tsm2", r["precision"])) if r["n"] in TSM2_NS else None
        return "n/a" if goal is None else ("met" if ours >= goal else f"missed (< {goal:.2f})")
    parts = []
    if r["m"] >= 10**6:
        parts.append("≥0.80 met" if ours >= 0.80 else "≥0.80 missed")
    sp = r.get("speedup")
    parts.append("faster" if sp and sp > 1 else "slower than cuBLAS")
    return ", ".join(parts)


def markdown_table(payload: dict) -> str:
    lines = [f"# tall-and-skinny GEMM vs cuBLAS on {payload['device']} ({payload['arch']})", "",
             f"Command: `{payload['command']}`", "",
             f"Copy bandwidth measured in the same run: {payload['copy_bandwidth_gbs']:.0f} GB/s "
             "(bytes read + written). Floor = (A + B read once, C written once) / that bandwidth; "
             "'floor' = fraction of it reached. beta = 0, column-major, NN. Each time is the median "
             "of CUDA-graph replays; operand sets smaller than the L2 are rotated.", "",
             "| family | prec | m | k | n | ours µs | ours floor | cuBLAS µs | cuBLAS floor | speedup | goal | kernel |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in payload["rows"]:
        o, c = r["ours"], r["cublas"]
        us = lambda d: format(d["ms"] * 1e3, ".1f") if "ms" in d else d.get("error", "n/a")  # noqa: E731
        lines.append(f"| {r['family']} | {r['precision']} | {r['m']} | {r['k']} | {r['n']} | {us(o)} "
                     f"| {_f(o, 'floor_fraction', '.3f')} | {us(c)} | {_f(c, 'floor_fraction', '.3f')} "
                     f"| {format(r['speedup'], '.2f') if 'speedup' in r else 'n/a'} | {goal_text(r)} "
                     f"| {r['kernel']} |")
    return "\n".join(lines) + "\n"


def plot(payload: dict, path: Path) -> None:
    plt = headless_pyplot()
    if plt is None:
        return
    precs = sorted({r["precision"] for r in payload["rows"]}, key="hsd".index)
    fig, axes = plt.subplots(len(precs), 2, figsize=(11, 4 * len(precs)), squeeze=False)
    for row_axes, prec in zip(axes, precs):
        ax = row_axes[0]
        for n in sorted({r["n"] for r in payload["rows"] if r["family"] == "tsm2"}):
            rs = [r for r in payload["rows"] if r["family"] == "tsm2" and r["precision"] == prec and r["n"] == n]
            xs = [r["m"] for r in rs]
            line, = ax.plot(xs, [r["ours"].get("floor_fraction", float("nan")) for r in rs], "o-",
                            label=f"gemmgen n={n}", markersize=3)
            ax.plot(xs, [r["cublas"].get("floor_fraction", float("nan")) for r in rs], "s--",
                    color=line.get_color(), label=f"cuBLAS n={n}", markersize=3, alpha=0.6)
        ax.set_title(f"TSM2 {prec}: fraction of bandwidth floor (m = k)")
        ax.set_xlabel("m = k")
        ax.set_ylim(0, 1.1)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
        ax = row_axes[1]
        for kn in sorted({(r["k"], r["n"]) for r in payload["rows"] if r["family"] == "ism2"}):
            rs = [r for r in payload["rows"] if r["family"] == "ism2" and r["precision"] == prec
                  and (r["k"], r["n"]) == kn]
            xs = [r["m"] for r in rs]
            line, = ax.plot(xs, [r["ours"].get("floor_fraction", float("nan")) for r in rs], "o-",
                            label=f"gemmgen k=n={kn[0]}", markersize=3)
            ax.plot(xs, [r["cublas"].get("floor_fraction", float("nan")) for r in rs], "s--",
                    color=line.get_color(), label=f"cuBLAS k=n={kn[0]}", markersize=3, alpha=0.6)
        ax.set_xscale("log")
        ax.set_title(f"ISM2 {prec}: fraction of bandwidth floor")
        ax.set_xlabel("m")
        ax.set_ylim(0, 1.1)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"tall-and-skinny GEMM, {payload['device']}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
