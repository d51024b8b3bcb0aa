"""The NumPy side of the checks must be able to fail: a wrong element, a NaN or a touched padding
element is caught, and the bound is the one docs/api.md states."""
import numpy as np
import pytest

from gemmgen.harness.core import reference as ref


@pytest.mark.parametrize("prec", ["h", "hc", "s", "d", "c", "z"])
def test_reference_and_error_measure(prec):
    rng = np.random.default_rng(1)
    batch, m, n, k = 5, 3, 4, 6
    a = ref.random_values(rng, prec, batch * m * k).reshape(batch, m, k)
    b = ref.random_values(rng, prec, batch * k * n).reshape(batch, k, n)
    c0 = ref.random_values(rng, prec, batch * m * n).reshape(batch, m, n)
    alpha, beta = 0.75, -1.25
    expected = ref.reference("N", "N", alpha, a, b, beta, c0)
    exact = np.einsum("bik,bkj->bij", a, b) * alpha + beta * c0
    assert np.allclose(expected, exact, rtol=1e-14, atol=1e-14)
    assert np.all(ref.relative_errors(expected, expected, alpha, a, b, beta, c0) == 0)

    stored = ref.round_to(prec, expected)
    assert np.max(ref.relative_errors(stored, expected, alpha, a, b, beta, c0)) <= ref.error_bound(prec, k)

    wrong = expected.copy()
    wrong[2, 1, 3] += 0.5
    errors = ref.relative_errors(wrong, expected, alpha, a, b, beta, c0)
    assert errors[2] > ref.error_bound(prec, k) and np.all(np.delete(errors, 2) == 0)

    nan = expected.copy()
    nan[0, 0, 0] = np.nan
    verdict = ref.Verdict(float(np.max(ref.relative_errors(nan, expected, alpha, a, b, beta, c0))),
                          ref.error_bound(prec, k), True)
    assert not verdict.passed


def test_transposes_and_conjugation():
    x = np.arange(6).reshape(1, 2, 3) * (1 + 2j)
    assert ref.op(x, "N") is x
    assert np.array_equal(ref.op(x, "t"), np.swapaxes(x, 1, 2))
    assert np.array_equal(ref.op(x, "C"), np.swapaxes(x, 1, 2).conj())


def test_storage_round_trip_and_layout():
    rng = np.random.default_rng(2)
    values = ref.random_values(rng, "hc", 10)
    stored = ref.to_storage("hc", values)
    assert stored.dtype == np.float16 and stored.shape == (10, 2)
    assert np.array_equal(ref.from_storage("hc", stored), values)
    assert np.all(values != 0) and np.any(values.real < 0) and np.any(values.real > 0)
    buf = np.arange(20.0)
    mats = ref.matrices(buf, batch=2, rows=2, cols=3, ld=3, stride=10)
    assert mats[1, 1, 2] == 10 + 1 + 2 * 3


def test_verdict_requires_untouched_padding_and_exactness():
    assert ref.Verdict(0.0, 1e-6, True).passed
    assert not ref.Verdict(0.0, 1e-6, False).passed
    assert not ref.Verdict(0.0, 1e-6, True, exact_ok=False).passed
    assert not ref.Verdict(2e-6, 1e-6, True).passed
    assert ref.error_bound("d", 8) == 2 * 8 * 2.0**-53
    assert ref.error_bound("hc", 8) == 4 * 8 * 2.0**-11
    assert ref.error_bound("s", 1) == 2 * 2 * 2.0**-24   # k = 1: the alpha and beta roundings need 3u


def test_scalars_are_rounded_as_the_api_receives_them():
    third = 1.0 / 3.0
    assert ref.round_scalar("s", third) == float(np.float32(third)) != third
    assert ref.round_scalar("d", third) == third
    assert ref.round_scalar("c", complex(third, -third)) == complex(np.complex64(complex(third, -third)))
    assert ref.round_scalar("z", complex(third, 1)) == complex(third, 1)
    assert isinstance(ref.round_scalar("h", 0.5), float)
