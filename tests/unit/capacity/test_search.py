"""The capacity search: doubling then bisection over shapes sorted by parameters finds the border from
any start, in few probes, and stops (bench/capacity/search.py).

    python -m pytest tests/unit/capacity/test_search.py -q
"""

import math

import pytest

from bench.capacity.search import CapacitySearch, family, num_params, shapes
from bench.errors import ConfigError

FAMILY = family(128)


def run(candidates, capacity_index, start):
    """Search against a machine where shapes up to capacity_index fit; returns (search, probed indices)."""
    s, probed = CapacitySearch(candidates, start), []
    while (shape := s.next()) is not None:
        i = candidates.index(shape)
        assert i not in probed, "a shape was probed twice"
        probed.append(i)
        s.record(shape, i <= capacity_index)
    return s, probed


def test_the_issues_parameter_counts():
    assert num_params(44) == 4_556_062_720 and num_params(56) == 9_101_639_680 and num_params(20) == 560_988_160
    assert [s.depth for s in FAMILY[:3]] == [2, 4, 6] and FAMILY[-1].depth == 128


@pytest.mark.parametrize("capacity", [-1, 0, 5, 21, 22, 40, len(FAMILY) - 1])
@pytest.mark.parametrize("start", [None, 0, 3, 22, 30, len(FAMILY) - 1])
def test_finds_the_border_from_any_start(capacity, start):
    s, probed = run(FAMILY, capacity, start)
    assert s.capacity == (FAMILY[capacity] if capacity >= 0 else None)
    assert s.first_failure == (FAMILY[capacity + 1] if capacity + 1 < len(FAMILY) else None)
    assert len(probed) <= 2 + 2 * math.ceil(math.log2(len(FAMILY)))


def test_a_right_prediction_costs_two_probes_and_an_off_by_one_three():
    assert run(FAMILY, 22, 22)[1] == [22, 23]
    assert run(FAMILY, 22, 23)[1] == [23, 22]
    assert run(FAMILY, 23, 22)[1] == [22, 23, 24] and run(FAMILY, 20, 22)[1] == [22, 21, 20]
    assert run(FAMILY, 30, 22)[1][:5] == [22, 23, 24, 26, 30]  # strides double away from the prediction


def test_without_a_prediction_doubling_goes_by_parameters():
    s = CapacitySearch(FAMILY)
    s.record(FAMILY[0], True)
    s.record(FAMILY[1], True)
    nxt = s.next()
    double = 2 * FAMILY[1].num_params
    assert nxt.num_params >= double and FAMILY[FAMILY.index(nxt) - 1].num_params < double


def test_memory_that_is_not_monotonic_is_an_error():
    s = CapacitySearch(FAMILY, 10)
    s.record(FAMILY[10], False)
    with pytest.raises(ConfigError, match="not monotonic"):
        s.record(FAMILY[12], True)


def test_user_depths_and_aspect_ratios():
    grid = shapes([8, 4, 16], aspect_ratio=128)
    assert [s.depth for s in grid] == [4, 8, 16] and grid[0].name == "d4-a128"
    with pytest.raises(ConfigError):
        shapes([0, 4])


def test_shapes_the_gpt_cannot_build_are_not_searched_and_not_taken_as_points(tmp_path):
    from bench.capacity.sweep import SweepConfig

    # at aspect ratio 32, depth 10 is 320 channels in 3 heads: a probe that fails, stopping the search there
    assert [s.depth for s in family(20, 32)] == [2, 4, 6, 8, 12, 14, 16, 20]
    with pytest.raises(ConfigError, match=r"^--depths 10 at --aspect-ratios 32: width 320 does not split"):
        SweepConfig(out=tmp_path, strategies=["fsdp"], depths=[8, 10], aspect_ratios=[64, 32])


def test_an_aspect_ratio_without_a_shape_to_search_is_refused_naming_the_flags(tmp_path):
    """Regression: --aspect-ratios 65 --max-depth 2 made the probes' data, then stopped on 'no model shapes to
    search', naming neither flag (after the --depths points of the strategies before, had there been any)."""
    from bench.capacity.sweep import SweepConfig

    with pytest.raises(ConfigError, match=r"^--aspect-ratios 65 with --max-depth 3: no shape to search; at depth 2, "
                                          r"width 130 does not split .* e.g. aspect ratio 64$"):
        SweepConfig(out=tmp_path, strategies=["fsdp"], aspect_ratios=[64, 65], max_depth=3)
    SweepConfig(out=tmp_path, strategies=["fsdp"], aspect_ratios=[65], max_depth=8)  # d8: 520 in 5 heads of 104
    SweepConfig(out=tmp_path, strategies=["fsdp"], aspect_ratios=[65], max_depth=2, search=False, depths=[8])
