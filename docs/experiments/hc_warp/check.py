"""Every transpose pair (conjugations included), both interfaces, padded and packed operands, ring-
style long batches, bit-exact and beta = 0 over NaN cases, for a sample of hc warp kernels through
their own launchers (harness.check_small.default_cases with the kernel named), on an hc set built by
`gemmgen check`/`bench` (2026-11-24: the full hc check no longer fit one device call).

Usage (on a GPU): python docs/experiments/hc_warp_check.py GENERATED_DIR OUT.jsonl NAME..."""
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from generator import wmma
from harness import check_small
from harness.api import GemmgenLibrary
from harness.run_check import build_set, device_arch


def main(gen_dir: Path, out: Path, names: list[str]) -> None:
    arch, _ = device_arch()
    lib = GemmgenLibrary(build_set(gen_dir, Path("build"), (arch,), 0).library)
    rng = np.random.default_rng(20261124)
    failed = passed = 0
    with out.open("w") as f:
        for name in names:
            spec = wmma.parse_name(name)
            shape = ("hc", *spec.shape)
            cases = [replace(c, kernel=name) for c in check_small.default_cases(
                {"hc": [spec.shape]}, rng, ring_shapes=frozenset({shape}))]
            for case in cases:
                r = check_small.run_case(lib, case, rng)
                passed += r.passed
                failed += not r.passed
                f.write(json.dumps({"kernel": name, **{k: v for k, v in vars(r).items()
                                                        if isinstance(v, (int, float, str, bool, type(None)))}}) + "\n")
                f.flush()
            print(name, len(cases), "cases;", passed, "passed,", failed, "failed so far", flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:])
