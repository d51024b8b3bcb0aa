"""`gemmgen bench cpu`: the all-threads kernel's share of the bandwidth measured in turns with it
(pure Python, nothing is run or timed)."""
from __future__ import annotations

import pytest

from gemmgen.harness.cpu.bench import large_row


def _row(library: str, isa: str, each: list[float]) -> dict:
    median = sorted(each)[len(each) // 2]
    return {"library": library, "precision": "d", "n": 8, "threads": 2, "isa": isa,
            "gbytes_per_s": median, "gbytes_per_s_each": each}


def test_large_row_divides_by_the_faster_adjacent_loop():
    kernel = _row("gemmgen", "avx512", [40.0, 45.0, 44.0])
    plain = _row("bandwidth", "c+=a*b", [50.0, 30.0, 52.0])
    prefetch = _row("bandwidth", "c+=a*b prefetch", [55.0, 60.0, 58.0])
    row = large_row([kernel, plain, prefetch])
    assert row["bandwidth_loop"] == "c+=a*b prefetch"
    assert row["bandwidth_gbytes_per_s"] == 58.0
    assert row["bandwidth_range_gbytes_per_s"] == [55.0, 60.0]
    assert row["fraction_of_bandwidth"] == pytest.approx(44.0 / 58.0)
    assert row["bandwidth"] == [plain, prefetch]   # every repetition of both loops is kept
    assert row["gbytes_per_s_each"] == kernel["gbytes_per_s_each"]
