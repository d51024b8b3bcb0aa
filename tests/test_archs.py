"""Every architecture CUDA 13 targets is known, with the limits of NVIDIA's table of technical
specifications per compute capability."""
from __future__ import annotations

import pytest

from generator.arch import ARCHS, DEFAULT_ARCHS, parse_archs

ALL_ARCHS = ("sm_75", "sm_80", "sm_86", "sm_87", "sm_88", "sm_89", "sm_90", "sm_100", "sm_103", "sm_110",
             "sm_120", "sm_121")


def test_every_cuda13_architecture_is_known_in_order():
    assert parse_archs(",".join(reversed(ALL_ARCHS))) == ALL_ARCHS
    assert tuple(ARCHS) == ALL_ARCHS
    assert DEFAULT_ARCHS == ("sm_75", "sm_80", "sm_90")   # the committed generated/ is made for these


@pytest.mark.parametrize("arch, smem_per_sm_kb", [
    ("sm_75", 64), ("sm_80", 164), ("sm_86", 100), ("sm_87", 164), ("sm_88", 100), ("sm_89", 100),
    ("sm_90", 228), ("sm_100", 228), ("sm_103", 228), ("sm_110", 228), ("sm_120", 100), ("sm_121", 100),
])
def test_limits(arch, smem_per_sm_kb):
    a = ARCHS[arch]
    assert a.smem_per_sm == smem_per_sm_kb * 1024
    assert (a.static_smem_per_block, a.max_threads_per_block, a.regs_per_thread) == (48 * 1024, 1024, 255)
