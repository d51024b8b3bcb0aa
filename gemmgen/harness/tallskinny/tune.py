"""`gemmgen tune tallskinny`: sweep t1, t2, t3 of TSM2 and t1, t3, opt and tcf of ISM2 on the GPU
present, measure the TSM2/ISM2 cut-off in k, write the "tallskinny" section of the
architecture's table and a note comparing the performance model's choice (Algorithm 5, t1 = 128,
and the paper's procedure: the model's t2, t3 with the best measured t1) with the measured best.

Kernel Tuner's habits as in tune_small: candidates are data (generator.tallskinny.*_sweep), results go
to an append-only JSON-lines file as they come, a skipped variant keeps its reason."""
from __future__ import annotations

import functools
import json
from collections import defaultdict
from pathlib import Path

import click
import numpy as np

from gemmgen.generator import tallskinny
from gemmgen.generator.tuning import save_table, writable_table

from gemmgen.harness.tallskinny.check import TsCase, run_ts_case
from gemmgen.harness.core import busy
from gemmgen.harness.core.build import load_library
from gemmgen.harness.core.timing import copy_bandwidth_once
from gemmgen.harness.core.results import Stopped, append_result, in_turn, load_results
from gemmgen.harness.tallskinny.workload import TsWorkload, bytes_moved

TSM2_SHAPES = (10240, 15360, 20480, 30720)   # m = k, the papers' workloads (25600 left out: between 20480 and 30720)
ISM2_MS = (10**4, 10**5, 10**6, 10**7)
CUTOFF_KS = (8, 16, 32, 64, 128, 256)
CUTOFF_M = 10**6
CUTOFF_TOLERANCE = 0.03       # differences below 3 % are run-to-run noise at these sizes


def _with_tsmma(arch: str | None) -> bool:
    """Whether the sweep has TSMMA (fp64 mma.sync: sm_80 and up; every architecture where none is named)."""
    from gemmgen.generator.arch import ARCHS

    return arch is None or ARCHS[arch].cc >= tallskinny.TSMMA_MIN_CC


def sweep(precisions, tsm2_ns, ism2_ns, arch: str | None = None) -> list:
    """The variants a run compiles and times: TSM2's sweep at each TSM2 n, ISM2's at each ISM2 n, and
    TSMMA's at each TSM2 n where the precision and the architecture (`arch`, None: any) have it."""
    specs = ([s for p in precisions for n in tsm2_ns for s in tallskinny.tsm2_sweep(p, n)]
             + [s for p in precisions for n in ism2_ns for s in tallskinny.ism2_sweep(p, n)]
             + ([s for p in precisions for n in tsm2_ns for s in tallskinny.tsmma_sweep(p, n)]
                if _with_tsmma(arch) else []))
    return list(dict.fromkeys(specs))   # a TSMMA kernel serves the n of its 8-column tiles: once each


def _correct(lib, spec, rng) -> tuple[bool, str]:
    if spec.family in ("tsm2", "tsmma"):   # TSMMA at the largest n it serves
        n = spec.max_n if spec.family == "tsmma" else spec.n
        case = TsCase(spec.precision, 777, n, 301, "N", "N", "random", 0.9, 0.7, spec.name, 0)
    else:
        case = TsCase(spec.precision, 5001, spec.n, spec.n + 3, "N", "N", "random", 0.9, 0.7, spec.name, 3)
    r = run_ts_case(lib, case, rng)
    return r.passed, f"rc {r.rc} err {r.max_error:.3g} bound {r.bound:.3g} untouched {r.untouched_ok}"


def tune(precisions, tsm2_ns, ism2_ns, results_path: Path, build_dir: Path, write_table: bool, jobs: int,
         note_dir: Path, stop=None, resume: bool = False, arch: str | None = None, device: str | None = None,
         spread=in_turn) -> dict:
    """`gemmgen tune tallskinny`: build the tall-skinny set of the swept n with every candidate (nvcc,
    here), then run_tune; the note goes to note_dir/tune_tallskinny_<arch>.md.  arch, device: the GPU's
    where it is not this machine's (the workers' of `gemmgen tune --gpus`); spread: what runs the
    sweep's pieces (results.in_turn here, or those workers)."""
    from gemmgen.harness.check import device_arch
    from gemmgen.harness.tallskinny.build import build_tallskinny

    if arch is None:
        arch, device = device_arch()
    build, _ = build_tallskinny(build_dir / "set", build_dir / "obj", precisions,
                                tuple(sorted(set(tsm2_ns) | set(ism2_ns))), arch,
                                sweep(precisions, tsm2_ns, ism2_ns, arch), jobs or None)
    # A variant that ptxas gave local memory (spills) is refused, not timed: the default set's build
    # takes no kernel with local memory.
    spilled = sorted({Path(r.source).stem for r in build.local_memory_kernels})
    for name in spilled:
        append_result(results_path, {"arch": arch, "device": device, "name": name, "status": "local-memory",
                                     "reason": "ptxas put part of it in local memory (spills or a stack frame)"})
    return run_tune(build.library, device, arch, results_path, precisions, tsm2_ns, ism2_ns, None, write_table,
                    note_dir / f"tune_tallskinny_{arch}.md", stop, resume, spread, jobs, frozenset(spilled))


def _point(row: dict) -> tuple:
    """What one timing measured: the variant, the stage, the n it ran at (a TSMMA kernel serves several)
    and the problem (and ISM2's split)."""
    return row["name"], row.get("stage"), row.get("n"), row.get("m"), row.get("k"), row.get("split")


def sweep_pieces(precisions, tsm2_ns, ism2_ns, arch: str | None = None) -> list[tuple[str, str, int]]:
    """The sweep cut into pieces that need nothing of one another, (family, precision, n), the
    costliest first (the bytes all its timings move), so that several GPUs finish close together."""
    def cost(piece):
        family, prec, n = piece
        if family in ("tsm2", "tsmma"):
            cands = tallskinny.tsm2_sweep(prec, n) if family == "tsm2" else tallskinny.tsmma_sweep(prec, n)
            return len(cands) * sum(bytes_moved(prec, s, n, s) for s in TSM2_SHAPES)
        return (len(tallskinny.ism2_sweep(prec, n)) * len(tallskinny.ISM2_SWEEP_TCF)
                * sum(bytes_moved(prec, m, n, n) for m in ISM2_MS))

    pieces = ([("tsm2", p, n) for p in precisions for n in tsm2_ns]
              + [("ism2", p, n) for p in precisions for n in ism2_ns]
              + ([("tsmma", p, n) for p in precisions for n in tsm2_ns if tallskinny.tsmma_sweep(p, n)]
                 if _with_tsmma(arch) else []))
    return sorted(pieces, key=lambda piece: (-cost(piece), piece))


def run_tune(library: Path, device: str, arch: str, results_path: Path, precisions=("s", "d"),
             tsm2_ns=tallskinny.TUNED_NS, ism2_ns=tallskinny.TUNED_ISM2_NS, bandwidth: float | None = None,
             write_table: bool = True, note_path: Path | None = None, stop=None, resume: bool = False,
             spread=in_turn, jobs: int = 0, refuse: frozenset = frozenset()) -> dict:
    """Time the sweep of the tall-skinny library at `library` (its pieces, sweep_pieces, through
    `spread`), then the TSM2/ISM2 cut-off in k with each family's best (pieces of their own, after the
    sweep), then write the table and the note here.  bandwidth: the copy bandwidth for the floor
    fractions (None: measured on the GPU that times).  resume: leave out the timings the results file
    has of this device, and the variants it refused (gemmgen tune, going on after its budget stopped
    it); refuse: variants not to time (those the build gave local memory); stop(): asked before each
    timing, raises results.Stopped once it says so (the results so far kept, no table written)."""
    done: set[tuple] = set()
    refused: set[str] = set(refuse)
    if resume:
        for r in load_results(results_path):
            if r.get("device") == device and "name" in r:
                if r.get("status") in ("not-built", "wrong-answer", "local-memory"):
                    refused.add(r["name"])
                else:
                    done.add(_point(r))
    never = lambda: False   # noqa: E731
    work = functools.partial(time_piece, library=str(library), base={"arch": arch, "device": device},
                             done=frozenset(done), refused=frozenset(refused), bandwidth=bandwidth)
    spread(sweep_pieces(precisions, tsm2_ns, ism2_ns, arch), work, results_path, jobs, stop or never)
    if stop and stop():
        raise Stopped
    # The TSM2/ISM2 cut-off in k, with each family's best variant of the sweep.
    rows = [r for r in load_results(results_path) if r.get("device") == device and r.get("status") == "ok"]
    cutoffs = []
    for prec in precisions:
        for n in ism2_ns:
            best_t = _best_tsm2(rows, prec, n)
            best_i = _best_ism2(rows, prec, n, CUTOFF_M)
            if best_t and best_i:
                cutoffs.append(("cutoff", prec, n, tallskinny.Tsm2Spec(
                    prec, n, best_t["t1"], best_t["t2"], best_t["t3"], best_t.get("rows", 1), best_t.get("stages", 0)),
                    tallskinny.Ism2Spec(prec, n, best_i["t1"], best_i["t2"], best_i["t3"], best_i["opt"]),
                    best_i["split"]))
    spread(cutoffs, work, results_path, jobs, stop or never)
    if stop and stop():
        raise Stopped
    rows = [r for r in load_results(results_path) if r.get("device") == device and r.get("status") == "ok"]
    table_rows = make_table_rows(rows, precisions, tsm2_ns, ism2_ns, device)
    if write_table:
        table = writable_table(arch)
        table.update({"arch": arch, "device": device})
        table.setdefault("commands", {})["tallskinny"] = f"gemmgen tune tallskinny (results: {results_path})"
        old = {(r["precision"], r["n"]): r for r in table.get("tallskinny", [])}
        old.update({(r["precision"], r["n"]): r for r in table_rows})
        table["tallskinny"] = [old[key] for key in sorted(old, key=lambda t: ("hsd".index(t[0]), t[1]))]
        save_table(arch, table)
    report = model_report(rows, precisions, tsm2_ns)
    if note_path:
        note_path.parent.mkdir(parents=True, exist_ok=True)
        note_path.write_text(report_markdown(report, table_rows, device, arch))
    return {"table": table_rows, "model": report}


def _free_gpu_memory() -> None:
    """Give the workload's memory back to the GPU: the next workload is of another size."""
    import cupy as cp

    cp.get_default_memory_pool().free_all_blocks()


def _library(path: str):
    from gemmgen.harness.core.api import TallSkinnyLibrary

    return TallSkinnyLibrary(path, load_library(path))


def time_piece(piece: tuple, results_path: Path, jobs: int, stop, library: str, base: dict,
               done: frozenset, refused: frozenset, bandwidth: float | None) -> int:
    """One piece on the GPU of this process (as results.in_turn, or a worker of `gemmgen tune --gpus`,
    calls it): a (family, precision, n) of the sweep, each candidate checked once, then timed at the
    family's shapes; or a ("cutoff", precision, n, TSM2 spec, ISM2 spec, split) at each of CUTOFF_KS.
    Appends every timing and refusal to results_path; leaves out what `done` holds (and the variants
    `refused`); stops between timings where stop() says so.  Returns the timings made."""
    with busy.on_gpu():
        return _PieceTimer(_library(library), base, results_path, done, refused,
                           bandwidth or copy_bandwidth_once(), stop).run(piece)


class _PieceTimer:
    """time_piece's timings of one piece, each appended as it comes."""

    def __init__(self, lib, base, results_path, done, refused, bandwidth, stop):
        self.lib, self.base, self.results_path = lib, base, results_path
        self.done, self.refused, self.bandwidth, self.stop = done, refused, bandwidth, stop
        self.rng = np.random.default_rng(99)
        self.timed = 0

    def run(self, piece: tuple) -> int:
        family, prec, n = piece[:3]
        try:
            if family == "cutoff":
                ts_spec, is_spec, split = piece[3:]
                for k in CUTOFF_KS:
                    if (self.pending(ts_spec, n, CUTOFF_M, k, 0, "cutoff")
                            or self.pending(is_spec, n, CUTOFF_M, k, split, "cutoff")):
                        self.at(TsWorkload(prec, CUTOFF_M, n, k), [(ts_spec, 0), (is_spec, split)], "cutoff")
                return self.timed
            if family in ("tsm2", "tsmma"):   # TSMMA competes with TSM2 at TSM2's shapes
                sweep = tallskinny.tsm2_sweep if family == "tsm2" else tallskinny.tsmma_sweep
                cands = [s for s in sweep(prec, n) if self.usable(s)]
                for size in TSM2_SHAPES:
                    if any(self.pending(spec, n, size, size, 0, family) for spec in cands):
                        # (a workload of these sizes takes seconds to fill: only where a timing is left)
                        self.at(TsWorkload(prec, size, n, size), [(spec, 0) for spec in cands], family)
            else:
                cands = [s for s in tallskinny.ism2_sweep(prec, n) if self.usable(s)]
                for m in ISM2_MS:
                    timings = [(spec, tcf) for spec in cands for tcf in tallskinny.ISM2_SWEEP_TCF]
                    if any(self.pending(spec, n, m, n, tcf, "ism2") for spec, tcf in timings):
                        self.at(TsWorkload(prec, m, n, n), timings, "ism2")
            tail = f" x {len(tallskinny.ISM2_SWEEP_TCF)} tcf" if family == "ism2" else ""
            click.echo(f"tuned {family} {prec} n={n}: {len(cands)} candidates{tail}")
        except Stopped:
            pass
        return self.timed

    def usable(self, spec) -> bool:
        if spec.name in self.refused:
            return False
        try:
            self.lib.variant(spec.name)
        except AttributeError:
            self.refuse(spec, "not-built", "variant missing from the library (did not compile)")
            return False
        passed, why = _correct(self.lib, spec, self.rng)
        if not passed:
            self.refuse(spec, "wrong-answer", why)
        return passed

    def refuse(self, spec, status: str, reason: str) -> None:
        append_result(self.results_path, {**self.base, "name": spec.name, "status": status, "reason": reason})

    def pending(self, spec, n, m, k, split, stage) -> bool:
        return (spec.name, stage, n, m, k, split) not in self.done

    def at(self, work: TsWorkload, timings, stage: str) -> None:
        """`timings` (spec, split) at one workload, each one not done yet."""
        try:
            for spec, split in timings:
                if self.pending(spec, work.n, work.m, work.k, split, stage):
                    self.measure(work, spec, split, stage)
        finally:
            work.release()
            _free_gpu_memory()

    def measure(self, work: TsWorkload, spec, split: int, stage: str) -> None:
        if self.stop and self.stop():
            raise Stopped
        row = {**self.base, "stage": stage, "name": spec.name, "family": spec.family, "precision": spec.precision,
               "n": work.n, "t1": spec.t1, "t2": spec.t2, "t3": spec.t3, "split": split,
               "m": work.m, "k": work.k}
        if spec.family == "ism2":
            row["opt"] = spec.opt
        elif spec.family == "tsmma":
            row.update(warps=spec.warps, tiles=spec.tiles, bk=spec.bk, stages=spec.stages, kgroups=spec.kgroups)
        else:
            row["rows"] = spec.rows
            row["stages"] = spec.stages
        try:
            ms = work.time_ms(work.variant(self.lib.variant(spec.name), split))
        except Exception as err:
            row.update(status="launch-failed", reason=str(err)[:300])
        else:
            floor = bytes_moved(spec.precision, work.m, work.n, work.k) / self.bandwidth * 1e3
            row.update(status="ok", time_us=ms * 1e3, floor_fraction=floor / ms)
        append_result(self.results_path, row)
        self.timed += 1


def _tsm2_score(rows, prec, n, stage="tsm2"):
    """Per TSM2 (or TSMMA) variant: mean fraction of the floor over the tuning shapes (all present)."""
    by = defaultdict(dict)
    for r in rows:
        if r.get("stage") == stage and r["precision"] == prec and r["n"] == n:
            by[r["name"]][r["m"]] = r
    out = {}
    for name, shapes in by.items():
        if len(shapes) == len(TSM2_SHAPES):
            out[name] = (float(np.mean([s["floor_fraction"] for s in shapes.values()])), next(iter(shapes.values())))
    return out


def _best_tsm2(rows, prec, n, stage="tsm2"):
    scores = _tsm2_score(rows, prec, n, stage)
    if not scores:
        return None
    name = max(scores, key=lambda k: scores[k][0])
    return scores[name][1]


def _best_ism2(rows, prec, n, m, opt=None):
    cands = [r for r in rows if r.get("stage") == "ism2" and r["precision"] == prec and r["n"] == n
             and r["m"] == m and (opt is None or r["opt"] == opt)]
    return min(cands, key=lambda r: r["time_us"]) if cands else None


def _tsmma_choice(rows, prec, n, best_tsm2) -> dict | None:
    """The best TSMMA variant at n where it beats TSM2's best by more than the noise at the largest tuning
    shapes: it serves TSM2's region (op(A) = A) from the smallest tuning m from which it wins at every
    larger one (0 where it wins at all of them)."""
    bm = _best_tsm2(rows, prec, n, "tsmma")
    if not bm:
        return None

    def times(name, stage):
        return {r["m"]: r["time_us"] for r in rows if r.get("stage") == stage and r["name"] == name}
    mma, tsm2 = times(bm["name"], "tsmma"), times(best_tsm2["name"], "tsm2")
    wins = [m for m in TSM2_SHAPES if m in mma and m in tsm2 and mma[m] * (1 + CUTOFF_TOLERANCE) < tsm2[m]]
    if TSM2_SHAPES[-1] not in wins:
        return None
    min_m = TSM2_SHAPES[-1]
    for m in reversed(TSM2_SHAPES[:-1]):
        if m not in wins:
            break
        min_m = m
    score = _tsm2_score(rows, prec, n, "tsmma")[bm["name"]][0]
    groups = {"kgroups": bm["kgroups"]} if bm.get("kgroups", 1) != 1 or prec == "h" else {}
    return {"warps": bm["warps"], "tiles": bm["tiles"], "bk": bm["bk"], "stages": bm["stages"], **groups,
            "min_m": 0 if min_m == TSM2_SHAPES[0] else min_m, "mean_floor_fraction": round(score, 4)}


def make_table_rows(rows, precisions, tsm2_ns, ism2_ns, device) -> list[dict]:
    out = []
    for prec in precisions:
        for n in sorted(set(tsm2_ns) | set(ism2_ns)):
            row = {"precision": prec, "n": n, "device": device}
            bt = _best_tsm2(rows, prec, n)
            if bt:
                score = _tsm2_score(rows, prec, n)[bt["name"]][0]
                row["tsm2"] = {"t1": bt["t1"], "t2": bt["t2"], "t3": bt["t3"], "rows": bt.get("rows", 1),
                               "stages": bt.get("stages", 0), "mean_floor_fraction": round(score, 4)}
                mma = _tsmma_choice(rows, prec, n, bt)
                if mma:
                    row["tsmma"] = mma
            if n in ism2_ns:
                per_opt = {}
                for opt in (1, 2):
                    # the variant with the best summed time over the m's, each at its best tcf
                    names = {r["name"] for r in rows if r.get("stage") == "ism2" and r["precision"] == prec
                             and r["n"] == n and r["opt"] == opt}
                    best_name, best_total = None, None
                    for name in names:
                        total = 0.0
                        for m in ISM2_MS:
                            rs = [r["time_us"] for r in rows if r.get("stage") == "ism2" and r["name"] == name
                                  and r["m"] == m]
                            total += min(rs) / m if rs else float("inf")
                        if best_total is None or total < best_total:
                            best_name, best_total = name, total
                    if best_name:
                        spec = tallskinny.Ism2Spec.parse(best_name)
                        per_opt[opt] = spec
                        row[f"ism2_opt{opt}"] = {"t1": spec.t1, "t2": spec.t2, "t3": spec.t3}
                # tcf per m (of the opt-1 winner) and where opt 2 starts to win
                if 1 in per_opt:
                    cuts = []
                    for m in ISM2_MS:
                        rs = [r for r in rows if r.get("stage") == "ism2" and r["name"] == per_opt[1].name
                              and r["m"] == m]
                        if rs:
                            cuts.append([m, min(rs, key=lambda r: r["time_us"])["split"]])
                    row["tcf"] = cuts[:tallskinny.MAX_TCF_CUTS]
                if 1 in per_opt and 2 in per_opt:
                    wins = []
                    for m in ISM2_MS:
                        t = {}
                        for opt in (1, 2):
                            rs = [r["time_us"] for r in rows if r.get("stage") == "ism2"
                                  and r["name"] == per_opt[opt].name and r["m"] == m]
                            t[opt] = min(rs) if rs else float("inf")
                        wins.append((m, t[2] < t[1]))
                    start = None
                    for m, w in reversed(wins):
                        if not w:
                            break
                        start = m
                    row["opt2_min_m"] = start
                cut = [r for r in rows if r.get("stage") == "cutoff" and r["precision"] == prec and r["n"] == n]
                if cut:
                    # ISM2 up to the largest k before it is clearly slower (by more than the
                    # timing noise) than TSM2; ties within CUTOFF_TOLERANCE go to ISM2.
                    max_k = 0
                    for k in CUTOFF_KS:
                        t = {f: [r["time_us"] for r in cut if r["k"] == k and r["family"] == f] for f in ("tsm2", "ism2")}
                        if t["tsm2"] and t["ism2"] and min(t["ism2"]) <= min(t["tsm2"]) * (1 + CUTOFF_TOLERANCE):
                            max_k = k
                        else:
                            break
                    row["ism2_max_k"] = max_k
            out.append(row)
    return out


def model_report(rows, precisions, tsm2_ns) -> list[dict]:
    """For every tuned (precision, n, shape): the model's choice (t1 = 128), the paper's procedure
    (model t2, t3, best measured t1) and the measured best, as times and ratios."""
    out = []
    for prec in precisions:
        for n in tsm2_ns:
            model = tallskinny.model_tsm2(prec, n)
            choice = tallskinny.algorithm5(tallskinny.H100_SXM, prec, tallskinny.MODEL_SHAPE[0], n, tallskinny.MODEL_SHAPE[1])
            for size in TSM2_SHAPES:
                rs = [r for r in rows if r.get("stage") == "tsm2" and r["precision"] == prec and r["n"] == n
                      and r["m"] == size]
                if not rs:
                    continue
                best = min(rs, key=lambda r: r["time_us"])
                exact = [r for r in rs if r["name"] == model.name]
                same_t23 = [r for r in rs if r["t2"] == model.t2 and r["t3"] == model.t3
                            and r.get("rows", 1) == 1 and not r.get("stages", 0)]
                proc = min(same_t23, key=lambda r: r["time_us"]) if same_t23 else None
                out.append({
                    "precision": prec, "n": n, "m": size, "k": size, "bound": choice.bound,
                    "t2_threshold": round(choice.t2_threshold, 1),
                    "model": model.name, "model_us": exact[0]["time_us"] if exact else None,
                    "procedure": proc["name"] if proc else None,
                    "procedure_us": proc["time_us"] if proc else None,
                    "best": best["name"], "best_us": best["time_us"],
                    "best_floor": best["floor_fraction"],
                    "model_ratio": (best["time_us"] / exact[0]["time_us"]) if exact else None,
                    "procedure_ratio": (best["time_us"] / proc["time_us"]) if proc else None,
                })
    return out


def report_markdown(report, table_rows, device, arch) -> str:
    lines = [f"# TSM2 / ISM2 tuning on {device} ({arch})", "",
             "The performance model (§3.6.2, Algorithm 5; gemmgen/generator/tallskinny.py) against the sweep. "
             "'model' is Algorithm 5's t2, t3 with the paper's t1 = 128; 'procedure' is the paper's "
             "full procedure (the model's t2, t3, then the best measured t1); ratio = best time / "
             "that choice's time (1.00 = the model found the best).", "",
             "| prec | n | m = k | bound | t2 thr. | model | ratio | procedure | ratio | best | best floor |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    f = lambda v: "n/a" if v is None else f"{v:.2f}"  # noqa: E731
    for r in report:
        lines.append(f"| {r['precision']} | {r['n']} | {r['m']} | {r['bound']} | {r['t2_threshold']} "
                     f"| {r['model']} | {f(r['model_ratio'])} | {r['procedure']} | {f(r['procedure_ratio'])} "
                     f"| {r['best']} | {r['best_floor']:.3f} |")
    lines += ["", "## Table rows written (gemmgen/generator/tuning/" + arch + ".json, section tallskinny)", "",
              "```json", json.dumps(table_rows, indent=1), "```", ""]
    return "\n".join(lines)
