"""The small family's spec: its rules refuse bad tuples by name, names round-trip, and every
variant the heuristic or the sweep proposes is valid."""
import pytest

from generator.precision import PRECISION_ORDER
from generator.small import SmallSpec, heuristic, sweep_candidates
from generator.spec import SpecError


@pytest.mark.parametrize("precision", PRECISION_ORDER)
@pytest.mark.parametrize("n", range(1, 33))
def test_heuristic_is_valid_and_round_trips(precision, n):
    spec = heuristic(precision, n, n, n)
    spec.validate("sm_75")
    assert SmallSpec.parse(spec.name) == spec
    # the paper's segments: one thread per element below 20, the 2x2 blocking from 20 up
    ratio = 1 if n < 20 else 2
    assert spec.tile_m == spec.tile_n == min(ratio, n)
    assert (spec.tba > 1) == (n <= 10)


@pytest.mark.parametrize("precision", ["d", "hc"])
@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 5, 7), (32, 32, 32), (17, 2, 31)])
def test_sweep_candidates_are_valid_distinct_and_named(precision, shape):
    cands = sweep_candidates(precision, *shape)
    assert cands, "the sweep must try at least one variant"
    assert len({c.name for c in cands}) == len(cands)
    for c in cands:
        assert SmallSpec.parse(c.name) == c
        assert c.threads <= 1024 and c.smem_bytes <= 48 * 1024


@pytest.mark.parametrize("args, rule", [
    (("q", 4, 4, 4, 4, 4, 1), "precision"),
    (("d", 33, 4, 4, 4, 4, 1), "size"),
    (("d", 4, 0, 4, 4, 1, 1), "size"),
    (("d", 4, 4, 4, 5, 4, 1), "blocking"),
    (("d", 32, 32, 32, 4, 4, 1), "recursive blocking"),
    (("d", 32, 32, 32, 15, 16, 1), "no idle threads"),
    (("d", 4, 4, 4, 4, 4, 0), "tba"),
    (("d", 32, 32, 32, 32, 32, 2), "threads per block"),
    (("z", 32, 32, 32, 16, 16, 4), "shared memory"),
])
def test_rules_refuse_by_name(args, rule):
    with pytest.raises(SpecError) as info:
        SmallSpec(*args).validate()
    assert info.value.rule == rule
    assert str(info.value).startswith(rule + ":")


@pytest.mark.parametrize("name", [
    "small_d_m4n4k4_dim4x4", "small_q_m4n4k4_dim4x4_tba1", "wmma_h_nn", "small_d_m4n4k4_dim4x4_tba1 ",
])
def test_parse_refuses_malformed_names(name):
    with pytest.raises(SpecError):
        SmallSpec.parse(name)


def test_parse_refuses_names_of_invalid_tuples():
    with pytest.raises(SpecError) as info:
        SmallSpec.parse("small_d_m32n32k32_dim4x4_tba1")
    assert info.value.rule == "recursive blocking"
