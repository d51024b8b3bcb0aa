"""The NumPy checks of `gemmgen check` for the wmma family only (harness.check_wmma.manifest_cases:
every general and block kernel through its own launcher, every dispatch range through the C API, the
exact-shape kernels the dispatch passes over), on the library `gemmgen check` builds; prints progress
and the per-kernel worst error, writes a report like `gemmgen check --report`.

Usage (on a GPU): python docs/experiments/mma_block/check_block_kernels.py OUT.json [--only-block]"""
import json
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from gemmgen.harness.core import cases as check_cases

from gemmgen.harness import check_wmma  # noqa: E402
from gemmgen.harness.core.api import GemmgenLibrary  # noqa: E402
from gemmgen.harness.check import build_set, device_arch  # noqa: E402


def main(out: Path, only_block: bool) -> int:
    arch, device = device_arch()
    manifest = json.loads((ROOT / "generated/manifest.json").read_text())
    result = build_set(ROOT / "generated", ROOT / "build", (arch,), 16)
    lib = GemmgenLibrary(result.library)
    rng = np.random.default_rng(20261124)
    if only_block:
        manifest = {**manifest, "wmma": {**manifest["wmma"], "kernels": [
            k for k in manifest["wmma"]["kernels"] if k["name"].startswith("wmmablock_")]}}
    cases = check_wmma.manifest_cases(manifest, rng, thorough=True)
    print(f"{len(cases)} cases", flush=True)
    start = time.time()
    results = check_cases.run_cases(lib, cases, progress=lambda d, t: print(f"{d}/{t} {time.time() - start:.0f} s",
                                                                         flush=True) if d % 200 == 0 else None)
    failed = [r for r in results if not r.passed]
    by = Counter((r.precision, r.passed) for r in results)
    for prec in sorted({r.precision for r in results}):
        worst = max((r.max_error / r.bound for r in results if r.precision == prec and r.bound > 0
                     and r.max_error == r.max_error), default=0.0)
        print(f"{prec}: {by[(prec, True)]} passed, {by[(prec, False)]} failed; largest error/bound {worst:.3g}")
    for r in failed[:30]:
        print("FAIL", r.to_json())
    out.write_text(json.dumps({"device": device, "arch": arch,
                               "command": "python docs/experiments/mma_block/check_block_kernels.py"
                                          + (" --only-block" if only_block else ""),
                               "generated_with": manifest["command"], "passed": len(results) - len(failed),
                               "failed": len(failed), "results": [r.to_json() for r in results]}, indent=1) + "\n")
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed in {time.time() - start:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), "--only-block" in sys.argv))
