"""One call on a GPU machine for the tall-skinny families: build (every default variant in h, s, d
for n = 1..32 plus the sweep's NN variants), run every NumPy check, tune (sweep + model
comparison + cut-offs), rebuild the dispatch from the tuned table, check it again and benchmark
against cuBLAS.  Stages are skipped (and say so) when the time budget is spent, so what ran still
comes back.

    python -m gemmgen.harness.tallskinny.device_run OUT_DIR [--budget SECONDS] [--jobs N]
"""
from __future__ import annotations

import json
import shutil
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

from gemmgen.generator import tallskinny
from gemmgen.generator.tuning import load_table, table_path

from gemmgen.harness.tallskinny import check as ck
from gemmgen.harness.core.api import TallSkinnyLibrary
from gemmgen.harness.check import device_arch
from gemmgen.harness.tallskinny.build import build_tallskinny
from gemmgen.harness.core.timing import copy_bandwidth

T0 = time.time()


def log(msg: str) -> None:
    print(f"[{time.time() - T0:6.1f}s] {msg}", flush=True)


def sweep_specs(precisions=("h", "s", "d"), tsm2_ns=tallskinny.TUNED_NS, ism2_ns=tallskinny.TUNED_ISM2_NS):
    from gemmgen.harness.tallskinny.tune import sweep

    return sweep(precisions, tsm2_ns, ism2_ns)


def summarize(results) -> dict:
    failed = [r for r in results if not r.passed]
    by = Counter((r.precision, r.passed) for r in results)
    worst = {}
    for r in results:
        if r.bound > 0 and r.max_error == r.max_error:
            worst[r.precision] = max(worst.get(r.precision, 0.0), r.max_error / r.bound)
    for p in sorted({r.precision for r in results}):
        log(f"  {p}: {by[(p, True)]} passed, {by[(p, False)]} failed, largest err/bound {worst.get(p, 0):.3g}")
    for r in failed[:40]:
        log(f"  FAIL {r.precision} m={r.m} n={r.n} k={r.k} {r.transa}{r.transb} {r.interface} {r.kind}: "
            f"rc {r.rc} err {r.max_error:.3g} bound {r.bound:.3g} untouched {r.untouched_ok} "
            f"exact {r.exact_ok} {r.note}")
    return {"passed": len(results) - len(failed), "failed": len(failed)}


def main(argv=None) -> int:
    argv = argv or sys.argv[1:]
    out = Path(argv[0])
    budget = float(argv[argv.index("--budget") + 1]) if "--budget" in argv else 400.0
    jobs = int(argv[argv.index("--jobs") + 1]) if "--jobs" in argv else 16
    out.mkdir(parents=True, exist_ok=True)
    arch, device = device_arch()
    log(f"{device} {arch}")
    root = Path("build/ts")
    extra = sweep_specs()
    # --tune-first: build only the tuned n (the sweep and their defaults), tune, rebuild from the
    # tuned table, check that set and bench it (the full set was checked in a run before).
    tune_first = "--tune-first" in argv
    precs = "hsd"
    ns = tallskinny.TUNED_NS if tune_first else tallskinny.DEFAULT_NS

    def progress(done, total):
        if done % 50 == 0 or done == total:
            log(f"  nvcc {done}/{total}")

    build, entries = build_tallskinny(root / "set", root / "obj", precs, ns, arch, extra,
                                      jobs, progress)
    local = build.local_memory_kernels
    log(f"built {build.built_sources} sources, {len(build.failures)} failed, {len(local)} kernels with "
        f"local memory; max registers {max(r.registers for r in build.resources)}")
    for rel, msg in list(build.failures.items())[:5]:
        log(f"  compile failure {rel}: {msg[-600:]}")
    for r in local[:10]:
        log(f"  local memory {r.source} {r.function[:60]} stack {r.stack_bytes} spills {r.spill_stores}")
    lib = TallSkinnyLibrary(build.library)
    report = {"device": device, "arch": arch, "build": {
        "sources": build.built_sources, "failures": list(build.failures),
        "local_memory": [f"{r.source}:{r.function}" for r in local],
        "max_registers": max(r.registers for r in build.resources)}}

    # ---- checks ----------------------------------------------------------------------------------
    if tune_first:
        return tuned_run(lib, entries, report, out, arch, device, root, ns, jobs, progress)
    rng = np.random.default_rng(20261122)
    cases = list(ck.default_cases(entries, rng)) + list(ck.edge_cases(entries))
    log(f"checks: {len(cases)} cases")
    results = ck.run_cases(lib, cases)
    results += ck.check_not_generated(lib, tallskinny.DEFAULT_NS)
    log("tall checks (op(A) past 2^31 elements)")
    for args in (("h", 2**31 // 16 + 4099, 8, 16, "N"),        # ISM2 route, NN
                 ("h", 2**31 // 16 + 4099, 5, 16, "T"),        # ISM2 route, A transposed
                 ("h", 2**21 + 3, 4, 1031, "N"),               # TSM2 route
                 ("s", 2**21 + 3, 3, 1031, "T")):
        try:
            results.append(ck.check_tall(lib, *args))
        except Exception as err:
            log(f"  tall check {args} raised {err}")
    report["checks"] = summarize(results)
    report["results"] = [r.to_json() for r in results]
    (out / "check_tallskinny.json").write_text(json.dumps(report, indent=1) + "\n")

    bandwidth = copy_bandwidth()
    log(f"copy bandwidth {bandwidth / 1e9:.0f} GB/s")
    from gemmgen.harness.tallskinny.bench import run_bench
    from gemmgen.harness.tallskinny.tune import run_tune

    # ---- tune --------------------------------------------------------------------------------------
    tuned = False
    if time.time() - T0 < budget * 0.45:
        log("tune")
        run_tune(lib.path, device, arch, out / "tune_tallskinny_results.jsonl", bandwidth=bandwidth,
                 note_path=out / f"tune_tallskinny_{arch}.md")
        shutil.copy(table_path(arch), out / f"{arch}.json")
        tuned = bool(load_table(arch).get("tallskinny"))
        log(f"tuned table written: {tuned}")
    else:
        log("tune skipped: time budget")

    # ---- rebuild from the tuned table, check its dispatch again, bench ---------------------------
    bench_lib = lib
    if tuned and time.time() - T0 < budget * 0.6:
        build2, entries2 = build_tallskinny(root / "set", root / "obj", "hsd", tallskinny.DEFAULT_NS, arch,
                                            (), jobs, progress, "libgemmgen_tallskinny_tuned.so")
        log(f"rebuilt with the tuned table: {build2.built_sources} sources, {len(build2.failures)} failed")
        lib2 = TallSkinnyLibrary(build2.library)
        tuned_ns = {(r["precision"], r["n"]) for r in load_table(arch)["tallskinny"]}
        cases2 = list(ck.default_cases([e for e in entries2 if (e.precision, e.n) in tuned_ns],
                                       np.random.default_rng(5)))
        results2 = ck.run_cases(lib2, cases2)
        report["checks_tuned"] = summarize(results2)
        report["results_tuned"] = [r.to_json() for r in results2]
        (out / "check_tallskinny.json").write_text(json.dumps(report, indent=1) + "\n")
        if report["checks_tuned"]["failed"] == 0:
            bench_lib = lib2
    log(f"bench with the {'tuned' if bench_lib is not lib else 'model'} dispatch")
    run_bench(bench_lib, device, arch, out, bandwidth=bandwidth,
              command="python -m gemmgen.harness.tallskinny.device_run (= gemmgen bench tallskinny)")
    log("done")
    return 0


def tuned_run(lib, entries, report, out, arch, device, root, ns, jobs, progress) -> int:
    from gemmgen.harness.tallskinny.bench import run_bench
    from gemmgen.harness.tallskinny.tune import run_tune

    bandwidth = copy_bandwidth()
    log(f"copy bandwidth {bandwidth / 1e9:.0f} GB/s; tune")
    run_tune(lib.path, device, arch, out / "tune_tallskinny_results.jsonl", precisions=("h", "s", "d"),
             bandwidth=bandwidth, note_path=out / f"tune_tallskinny_{arch}.md")
    shutil.copy(table_path(arch), out / f"{arch}.json")
    log("tuned; rebuild from the table")
    build2, entries2 = build_tallskinny(root / "set", root / "obj", "hsd", ns, arch, (), jobs, progress,
                                        "libgemmgen_tallskinny_tuned.so")
    log(f"rebuilt: {build2.built_sources} sources, {len(build2.failures)} failed, "
        f"{len(build2.local_memory_kernels)} with local memory")
    report["build_tuned"] = {"failures": list(build2.failures),
                             "local_memory": [f"{r.source}:{r.function}" for r in build2.local_memory_kernels]}
    lib2 = TallSkinnyLibrary(build2.library)
    cases = list(ck.default_cases(entries2, np.random.default_rng(5)))
    results = ck.run_cases(lib2, cases)
    for args in (("s", 2**21 + 3, 4, 1031, "N"), ("d", 2**31 // 16 + 4099, 16, 16, "T")):
        results.append(ck.check_tall(lib2, *args))
    report["checks_tuned"] = summarize(results)
    report["results_tuned"] = [r.to_json() for r in results]
    (out / "check_tallskinny_tuned.json").write_text(json.dumps(report, indent=1) + "\n")
    log("bench with the tuned dispatch")
    run_bench(lib2, device, arch, out, precisions=("h", "s", "d"), bandwidth=bandwidth,
              command="python -m gemmgen.harness.tallskinny.device_run --tune-first (= gemmgen tune tallskinny; gemmgen bench tallskinny)")
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
