"""The check harness itself, without a GPU: a library that computes the right answer passes, one
that touches padding, writes a wrong element or leaks NaN fails, in every precision (hc's
interleaved storage included)."""
import numpy as np
import pytest

from gemmgen.harness.core import cases as check_cases
from gemmgen.harness.core import reference as ref


def emulate(pr: check_cases.Prepared) -> np.ndarray:
    """What a correct library returns: C's blocks replaced by the reference, padding untouched."""
    case = pr.case
    p, m, n, k, batch = case.precision, case.m, case.n, case.k, case.batch
    ra, ca = (m, k) if case.transa == "N" else (k, m)
    rb, cb = (k, n) if case.transb == "N" else (n, k)
    a = ref.matrices(pr.a_vals, batch, ra, ca, pr.lda, pr.sa)
    b = ref.matrices(pr.b_vals, batch, rb, cb, pr.ldb, pr.sb)
    expected = ref.reference(case.transa, case.transb, case.alpha, a, b, case.beta, pr.c0)
    values = ref.from_storage(p, pr.c.copy())
    item = values.itemsize
    np.lib.stride_tricks.as_strided(values, shape=(batch, m, n),
                                    strides=(pr.sc * item, item, pr.ldc * item))[...] = expected
    return np.ascontiguousarray(ref.to_storage(p, values))


@pytest.mark.parametrize("prec", ["h", "hc", "s", "d", "c", "z"])
@pytest.mark.parametrize("pad", [0, 2])
def test_verdict_accepts_right_and_rejects_wrong(prec, pad):
    rng = np.random.default_rng(3)
    trans = "C" if ref.is_complex(prec) else "T"
    case = check_cases.Case(prec, 3, 4, 5, trans, "N", "strided", 7, "random", 0.75, -0.5, pad=pad)
    pr = check_cases.prepare(case, rng)
    good = emulate(pr)
    assert check_cases.verdict(pr, 0, good).passed

    assert not check_cases.verdict(pr, 2, good).passed          # a launch failure never passes

    wrong = good.copy()
    wrong[0] = wrong[0] + 1      # C(0, 0) of the first matrix (both parts for hc)
    assert not check_cases.verdict(pr, 0, wrong).passed

    nan = good.copy()
    nan[0] = np.nan
    assert not check_cases.verdict(pr, 0, nan).passed

    if pad:
        touched = good.copy()
        touched[pr.ldc - 1] = 0    # the last padding row of column 0
        result = check_cases.verdict(pr, 0, touched)
        assert not result.untouched_ok and not result.passed
