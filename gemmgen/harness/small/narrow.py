"""`gemmgen tune small --narrow-rows`: table rows for one GPU model and for launches of tens of MB.

The small table holds one tuple per shape, ranked at launches far past L2 on the GPU that was tuned.
Two things change the ranking:
- another GPU of the same architecture (an H200 runs the H100's table: more bandwidth, so other
  tuples keep it busy);
- a launch of a few tens of MB: a few waves of blocks at most, so a tuple whose blocks overlap their
  loads and products within a wave (more threads per GEMM, a ring) beats one that relies on many
  waves of blocks to hide latency.
From the results of one device's sweep at a launch past NARROW_MEGABYTES and at one below it (the
same candidates timed in both: `gemmgen tune small --megabytes 50` and `--megabytes 256`), this
writes, per shape, a row for that device (`for_device`) where the fastest tuple past the bound beats
the shape's table row on that device, and a row for that device and launches up to NARROW_MEGABYTES
(`max_megabytes`) where the fastest tuple there beats the one that would otherwise serve them, each
by at least NARROW_MIN_GAIN in the same run.  The dispatch takes these rows for strided batches only:
they were timed on strided batches, and pointer arrays keep the shape's row (and its array ring).
"""
from __future__ import annotations

from pathlib import Path

from gemmgen.generator import small
from gemmgen.generator.precision import PRECISIONS
from gemmgen.generator.tuning import is_keyed_row, row_order, save_table, strided_kernel, writable_table
from gemmgen.harness.core.results import load_results
from gemmgen.harness.core.workload import bytes_moved

NARROW_MEGABYTES = 128      # launches up to this take the launch-size rows (timed at 50 MB; the plain rows at 256)
NARROW_MIN_GAIN = 1.03      # less is within the run-to-run spread of one sweep's timings
# The sweep times β = 0 at one launch size; a row also serves β = 1 and the other launch sizes below its
# bound, where another tuple can lose (a ring that wins at β = 0 reads C more slowly: 0.89-0.95 at
# β = 1 on the H200).  confirm_rows keeps a row only where the workload bench found its kernel no slower
# than the kernel it replaced, within this spread, at every point it served.
CONFIRM_TOLERANCE = 0.97


def launch_megabytes(row: dict) -> float:
    return bytes_moved(row["precision"], row["m"], row["n"], row["k"], row["batch"], False) / 1e6


def _fastest_by_name(rows: list[dict]) -> dict[tuple, dict[str, dict]]:
    """Per shape, each strided tuple's latest correct time (the tuple without its pointer-array ring:
    on strided batches a tuple with `array_stages` runs its staged kernel)."""
    out: dict[tuple, dict[str, dict]] = {}
    for r in rows:
        if r.get("status") != "ok" or r.get("interface", "strided") != "strided":
            continue
        name = strided_kernel(r).name
        out.setdefault((r["precision"], r["m"], r["n"], r["k"]), {})[name] = r
    return out


def _row(spec: small.SmallSpec, measured: dict, device: str, gain: float, max_megabytes: int = 0) -> dict:
    fields = {"precision": spec.precision, "m": spec.m, "n": spec.n, "k": spec.k, "dim_m": spec.dim_m,
              "dim_n": spec.dim_n, "tba": spec.tba, "hoist": spec.hoist, "stages": spec.stages,
              **({"acc16": True} if spec.acc16 else {}), **({"mma": True} if spec.mma else {}),
              **({"pairs": True} if spec.pairs else {})}
    return {**fields, "for_device": device, **({"max_megabytes": max_megabytes} if max_megabytes else {}),
            "time_us": round(measured["time_us"], 3), "floor_fraction": round(measured["floor_fraction"], 4),
            "batch": measured["batch"], "device": device, "gain": round(gain, 3)}


def narrow_rows(results: list[dict], device: str, table_rows: list[dict]) -> tuple[list[dict], list[str]]:
    """The rows for `device` (see the module's text) and a line per shape on what was decided."""
    plain = {(r["precision"], r["m"], r["n"], r["k"]): strided_kernel(r).name
             for r in table_rows if not is_keyed_row(r)}
    mine = [r for r in results if r.get("device") == device]
    big = _fastest_by_name([r for r in mine if launch_megabytes(r) > NARROW_MEGABYTES])
    mid = _fastest_by_name([r for r in mine if launch_megabytes(r) <= NARROW_MEGABYTES])
    rows, lines = [], []
    order = lambda key: (list(PRECISIONS).index(key[0]), key[1:])   # noqa: E731
    for shape in sorted(set(big) | set(mid), key=order):
        serving = plain.get(shape)
        label = f"{shape[0]} {shape[1]}x{shape[2]}x{shape[3]}"
        if serving is None:
            lines.append(f"{label}: no row in the table; skipped")
            continue
        for times, bound in ((big.get(shape), 0), (mid.get(shape), NARROW_MEGABYTES)):
            if not times:
                continue
            where = f"launches up to {bound} MB" if bound else "launches past it"
            best = min(times.values(), key=lambda r: r["time_us"])
            best_name = strided_kernel(best).name
            if serving not in times:
                lines.append(f"{label}, {where}: {serving} not timed in this run; no row")
                continue
            gain = times[serving]["time_us"] / best["time_us"]
            if best_name != serving and gain >= NARROW_MIN_GAIN:
                rows.append(_row(small.SmallSpec.parse(best_name), best, device, gain, bound))
                lines.append(f"{label}, {where}: {best_name} {gain:.2f}x faster than {serving}")
                if not bound:
                    serving = best_name   # the launches below the bound fall back to this row
            else:
                lines.append(f"{label}, {where}: {serving} kept (best {best_name}, {gain:.2f}x)")
    return rows, lines


def _bench_points(path: Path) -> tuple[str, dict[tuple, dict]]:
    """A `gemmgen bench workload` JSON's device and small-family points: (prec, m, n, k, launch, β) ->
    {"kernel", "ms"}."""
    import json

    payload = json.loads(Path(path).read_text())
    points = {}
    for row in payload["rows"]:
        for beta in ("beta0", "beta1"):
            ours = row.get(beta, {}).get("ours", {})
            if row.get("family") == "small" and "ms" in ours:
                points[(row["prec"], row["m"], row["n"], row["k"], row["launch"], beta)] = \
                    {"kernel": row["kernel"], "ms": ours["ms"]}
    return payload["device"], points


def confirm_rows(rows: list[dict], before: Path, after: Path) -> tuple[list[dict], list[str]]:
    """The rows the workload bench confirms: `after` ran a set with the rows, `before` one without, both
    on the rows' device; a row stays where at every point whose kernel it became, `after` is no slower
    than `before` by more than CONFIRM_TOLERANCE (a row the bench never reached is dropped)."""
    device_before, old = _bench_points(before)
    device_after, new = _bench_points(after)
    kept, lines = [], []
    for row in rows:
        name = small.SmallSpec.from_row(row).name
        label = f"{name} ({row_label(row)})"
        if not device_before == device_after == row["for_device"]:
            lines.append(f"{label}: the benches ran on {device_before} and {device_after}; dropped")
            continue
        served = [key for key, point in new.items() if point["kernel"] == name and key in old]
        ratios = {key: old[key]["ms"] / new[key]["ms"] for key in served}
        if ratios and min(ratios.values()) >= CONFIRM_TOLERANCE:
            kept.append({**row, "confirmed_min_ratio": round(min(ratios.values()), 3)})
            lines.append(f"{label}: confirmed at {len(ratios)} points, {min(ratios.values()):.2f}x at worst")
        else:
            worst = min(ratios, key=ratios.get) if ratios else None
            lines.append(f"{label}: dropped, " + (f"{ratios[worst]:.2f}x at {worst[4]} {worst[5]}" if worst
                                                   else "the bench never ran it"))
    return kept, lines


def row_label(row: dict) -> str:
    return row["for_device"] + (f", launches up to {row['max_megabytes']} MB" if "max_megabytes" in row else "")


def write_narrow_rows(results_paths: list[Path], arch: str, command: str,
                      confirm: tuple[Path, Path] | None = None) -> list[str]:
    """Replace `arch`'s keyed rows of the results' device(s) at their shapes by narrow_rows' (those
    confirm_rows keeps, with `confirm`: the workload benches before and after); the lines that say
    what was decided."""
    results = [r for path in results_paths for r in load_results(path) if r.get("arch") == arch]
    devices = sorted({r["device"] for r in results if "device" in r})
    table = writable_table(arch)
    small_rows = table.get("small", [])
    lines = []
    for device in devices:
        rows, decided = narrow_rows(results, device, [r for r in small_rows if not is_keyed_row(r)])
        if confirm:
            rows, confirmed = confirm_rows(rows, *confirm)
            decided += confirmed
        shapes = {(r["precision"], r["m"], r["n"], r["k"]) for r in results if r.get("device") == device}
        small_rows = [r for r in small_rows if not (r.get("for_device") == device
                                                    and (r["precision"], r["m"], r["n"], r["k"]) in shapes)]
        small_rows += rows
        lines += [f"{device}: {line}" for line in decided]
    table["small"] = sorted(small_rows, key=row_order)
    table.setdefault("commands", {})["small_narrow"] = \
        f"{command} (results: {', '.join(str(p) for p in results_paths)})"
    save_table(arch, table)
    return lines
