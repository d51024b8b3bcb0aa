"""`gemmgen bench small`: the small family against cuBLAS's strided batched GEMM, in one run on the
same buffers, with the copy-bandwidth floor measured in that run.  Writes JSON, a Markdown table
and a plot (fraction of the floor and GF/s per size, like the paper's figures) into docs/perf/."""
from __future__ import annotations

import json
from pathlib import Path

import click

from gemmgen.generator.manifest import Selection

from gemmgen.harness.core.api import GemmgenLibrary
from gemmgen.harness.check import build_set, device_arch
from gemmgen.harness.core.bench_runs import keep_other_precisions, run_lines
from gemmgen.harness.core.timing import copy_bandwidth, headless_pyplot, timed
from gemmgen.harness.core.toolchain import gpu_available
from gemmgen.harness.core.workload import Workload, batch_for_megabytes, bytes_moved, flops


def _measure(work: Workload, launch_factory, beta: float) -> dict:
    return timed(lambda: launch_factory(beta=beta))   # cuBLAS refusing a type (hc) is a result


def run_bench(gen_dir: Path, build_dir: Path, selection: Selection, megabytes: int,
              batches: tuple[int, ...], out_dir: Path) -> int:
    if not gpu_available():
        click.echo("error: no GPU present; gemmgen bench needs CuPy and a CUDA device", err=True)
        return 2
    arch, device = device_arch()
    result = build_set(gen_dir, build_dir, (arch,), 0)
    lib = GemmgenLibrary(result.library)
    bandwidth = copy_bandwidth()
    click.echo(f"{device} ({arch}): device-to-device copy {bandwidth / 1e9:.0f} GB/s (read + write)")
    rows = []
    plan = []
    for prec in selection.precisions:
        for size in selection.sizes:
            plan.append((prec, size, "≫L2", batch_for_megabytes(prec, size, size, size, megabytes)))
            plan.extend((prec, size, str(b), b) for b in batches)
    with click.progressbar(plan, label="bench small", show_pos=True) as bar:
        for prec, size, label, batch in bar:
            work = Workload(prec, size, size, size, batch)
            ours = getattr(lib.lib, f"gemmgen_{prec}gemm_batched_strided")
            row = {"precision": prec, "n": size, "batch": batch, "data": label,
                   "kernel": lib.selected_kernel(prec, size, size, size)}
            for beta in (0.0, 1.0):
                tag = "beta0" if beta == 0 else "beta1"
                floor_ms = bytes_moved(prec, size, size, size, batch, beta != 0) / bandwidth * 1e3
                for who, factory in (("ours", lambda beta: work.ours(ours, 1.0, beta)),
                                     ("cublas", lambda beta: work.cublas(1.0, beta))):
                    m = _measure(work, factory, beta)
                    if "ms" in m:
                        m["gflops"] = flops(prec, size, size, size, batch) / (m["ms"] * 1e-3) / 1e9
                        m["floor_fraction"] = floor_ms / m["ms"]
                    row[f"{who}_{tag}"] = m
                o, c = row[f"ours_{tag}"], row[f"cublas_{tag}"]
                if "ms" in o and "ms" in c:
                    row[f"speedup_{tag}"] = c["ms"] / o["ms"]
            # The pointer-array interface on the same matrices (beta = 0).
            array_fn = getattr(lib.lib, f"gemmgen_{prec}gemm_batched")
            m = _measure(work, lambda beta: work.ours_array(array_fn, 1.0, beta), 0.0)
            if "ms" in m:
                floor_ms = bytes_moved(prec, size, size, size, batch, False) / bandwidth * 1e3
                m["floor_fraction"] = floor_ms / m["ms"]
                # The A, B and C pointers are bytes that must move too (24 per GEMM, as much as
                # the matrices of an h GEMM with N = 2): the floor that counts them.
                m["floor_fraction_with_pointers"] = (floor_ms + POINTER_BYTES * batch / bandwidth * 1e3) / m["ms"]
            row["ours_array_beta0"] = m
            work.release()
            rows.append(row)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"bench_small_{arch}"
    command = (f"gemmgen bench small --precisions {','.join(selection.precisions)} --sizes "
               f"{selection.sizes[0]}-{selection.sizes[-1]} --megabytes {megabytes} "
               f"--batches {','.join(map(str, batches))}"
               + (f" --generated {gen_dir}" if Path(gen_dir) != Path("generated") else "")
               + (f" --build-dir {build_dir}" if Path(build_dir) != Path("build") else ""))
    runs = {prec: {"command": command, "copy_bandwidth_gbs": bandwidth / 1e9} for prec in selection.precisions}
    payload = {"device": device, "arch": arch, "runs": runs, "rows": rows}
    if (out_dir / f"{stem}.json").exists():
        payload = keep_other_precisions(payload, json.loads((out_dir / f"{stem}.json").read_text()))
    (out_dir / f"{stem}.json").write_text(json.dumps(payload, indent=1) + "\n")
    (out_dir / f"{stem}.md").write_text(markdown_table(payload))
    plot(payload, out_dir / f"{stem}.png")
    click.echo(markdown_table(payload, only="≫L2"))
    return 0


def _fmt(row: dict, who: str, tag: str, key: str, fmt: str) -> str:
    m = row.get(f"{who}_{tag}", {})
    return format(m[key], fmt) if key in m else "n/a"


def _array_cell(row: dict) -> str:
    """The pointer-array floor, and the floor counting the pointers where the run measured it."""
    cell = _fmt(row, "ours_array", "beta0", "floor_fraction", ".2f")
    if "floor_fraction_with_pointers" in row.get("ours_array_beta0", {}):
        cell += " / " + _fmt(row, "ours_array", "beta0", "floor_fraction_with_pointers", ".2f")
    return cell


POINTER_BYTES = 3 * 8   # the pointer-array interface reads an A, a B and a C address per GEMM

GOALS = {"h": (0.80, 16), "hc": (0.80, 16), "s": (0.85, 32), "d": (0.85, 32), "c": (0.85, 32),
         "z": (0.85, 32)}   # issue 2: fraction of the floor with data ≫ L2, up to this N
ARRAY_GOAL = 0.70          # issue 2: the pointer-array interface, every N


def summary(payload: dict) -> list[str]:
    """Per precision, data ≫ L2: the weakest fraction of the floor, the sizes under the goal, and
    the range of speedups over cuBLAS."""
    lines = ["| prec | goal | min floor β=0 (N) | min floor β=1 (N) | N under goal (β=0 / β=1) "
             "| speedup over cuBLAS β=0, min–max (N of min) | pointer-array floor β=0: min (N); N under the goal "
             "counting the pointers' bytes |",
             "|---|---|---|---|---|---|---|"]
    for prec, (goal, upto) in GOALS.items():
        rows = [r for r in payload["rows"] if r["precision"] == prec and r["data"] == "≫L2"]
        if not rows:
            continue

        def frac(r, key):
            return r.get(key, {}).get("floor_fraction", float("nan"))

        def worst(key):
            measured = [r for r in rows if "floor_fraction" in r.get(key, {})]
            if not measured:
                return "not measured"
            r = min(measured, key=lambda r: frac(r, key))
            return f"{frac(r, key):.2f} ({r['n']})"

        def array_summary():
            key = "ours_array_beta0"
            measured = [r for r in rows if "floor_fraction" in r.get(key, {})]
            if not measured:
                return "not measured"
            low = [r["n"] for r in measured if r[key].get("floor_fraction_with_pointers", frac(r, key)) < ARRAY_GOAL]
            return f"{worst(key)}; with pointers under {ARRAY_GOAL:.2f}: {','.join(map(str, low)) or '–'}"

        under0 = [r["n"] for r in rows if r["n"] <= upto and frac(r, "ours_beta0") < goal]
        under1 = [r["n"] for r in rows if r["n"] <= upto and frac(r, "ours_beta1") < goal]
        speed = [r for r in rows if "speedup_beta0" in r]
        sp = "n/a (cuBLAS refused the type)"
        if speed:
            lo = min(speed, key=lambda r: r["speedup_beta0"])
            sp = (f"{lo['speedup_beta0']:.2f}–{max(r['speedup_beta0'] for r in speed):.1f} "
                  f"({lo['n']})")
        lines.append(f"| {prec} | ≥ {goal:.2f} for N ≤ {upto} | {worst('ours_beta0')} | "
                     f"{worst('ours_beta1')} | {','.join(map(str, under0)) or '–'} / "
                     f"{','.join(map(str, under1)) or '–'} | {sp} | {array_summary()} |")
    return lines


def markdown_table(payload: dict, only: str | None = None) -> str:
    lines = [f"# small family vs cuBLAS on {payload['device']} ({payload['arch']})", "",
             *run_lines(payload),
             "", "Floor = bytes that must move / that bandwidth; "
             "'floor' columns are the fraction of it reached (1.0 = at the bandwidth limit).", "",
             "## Summary (data ≫ L2)", "", *summary(payload), "", "## Every measurement", "",
             "| prec | N | batch | data | ours GF/s β=0 | floor β=0 | cuBLAS floor β=0 | speedup β=0 "
             "| floor β=1 | cuBLAS floor β=1 | speedup β=1 | pointer-array floor β=0 (matrices / with pointers) | kernel |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in payload["rows"]:
        if only and r["data"] != only:
            continue
        lines.append(
            f"| {r['precision']} | {r['n']} | {r['batch']} | {r['data']} "
            f"| {_fmt(r, 'ours', 'beta0', 'gflops', '.1f')} "
            f"| {_fmt(r, 'ours', 'beta0', 'floor_fraction', '.2f')} "
            f"| {_fmt(r, 'cublas', 'beta0', 'floor_fraction', '.2f')} "
            f"| {format(r['speedup_beta0'], '.2f') if 'speedup_beta0' in r else 'n/a'} "
            f"| {_fmt(r, 'ours', 'beta1', 'floor_fraction', '.2f')} "
            f"| {_fmt(r, 'cublas', 'beta1', 'floor_fraction', '.2f')} "
            f"| {format(r['speedup_beta1'], '.2f') if 'speedup_beta1' in r else 'n/a'} "
            f"| {_array_cell(r)} "
            f"| {r['kernel']} |")
    return "\n".join(lines) + "\n"


def plot(payload: dict, path: Path) -> None:
    plt = headless_pyplot()
    if plt is None:
        return
    precs = sorted({r["precision"] for r in payload["rows"]}, key=["h", "hc", "s", "d", "c", "z"].index)
    fig, axes = plt.subplots(2, (len(precs) + 1) // 2, figsize=(4.5 * ((len(precs) + 1) // 2), 7),
                             squeeze=False)
    for ax, prec in zip(axes.flat, precs):
        rows = [r for r in payload["rows"] if r["precision"] == prec and r["data"] == "≫L2"]
        ns = [r["n"] for r in rows]
        for who, style in (("ours", "o-"), ("cublas", "s--")):
            ys = [r[f"{who}_beta0"].get("floor_fraction", float("nan")) for r in rows]
            ax.plot(ns, ys, style, label="gemmgen" if who == "ours" else "cuBLAS", markersize=3)
        ax.set_title(f"{prec}: fraction of bandwidth floor (β=0)")
        ax.set_xlabel("N (M = N = K)")
        ax.set_ylim(0, 1.1)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(f"batched small GEMM, data ≫ L2, {payload['device']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
