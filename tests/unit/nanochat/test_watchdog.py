"""Collectives bounded from the first to the last (bench/nanochat/watchdog.py), on a real gloo group.

    python -m pytest tests/unit/nanochat/test_watchdog.py -q
"""

import pytest
import torch.distributed as dist

from bench.nanochat import watchdog
from bench.nanochat.watchdog import AUTO, PERIODIC_S, START_S, Watchdog


@pytest.fixture
def group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_bounds_by_default_from_start_to_end(group, monkeypatch):
    seen = []
    original = watchdog._set
    monkeypatch.setattr(watchdog, "_set", lambda s: (seen.append(s), original(s)))
    w = Watchdog(AUTO, distributed=True)
    w.start()
    w.arm(40.0)  # the first step, compilation included
    w.arm(0.5)  # a steady one: the slowest stays the floor
    with w.relaxed():
        pass
    assert seen == [START_S, 60.0 + 80.0, PERIODIC_S, 60.0 + 80.0]


def test_an_explicit_margin_and_off(group, monkeypatch):
    seen = []
    monkeypatch.setattr(watchdog, "_set", seen.append)
    w = Watchdog(700.0, distributed=True)
    w.start()
    w.arm(1.0)
    with w.relaxed():  # already above the periodic floor: unchanged
        pass
    assert seen == [700.0, 702.0]
    seen.clear()
    off = Watchdog(0.0, distributed=True)
    off.start()
    off.arm(1.0)
    assert seen == [] and off.armed is None


@pytest.mark.parametrize("flag", ["watchdog_s", "heartbeat_timeout_s", "join_timeout_s"])
@pytest.mark.parametrize("value", ["inf", "1e300"])
def test_a_bound_no_collective_can_take_is_refused_with_the_flags(flag, value):
    """--watchdog_s=inf was accepted, then the run failed at its first collective with torch's OverflowError."""
    from bench.errors import ConfigError
    from bench.nanochat.config import WATCHDOG_MAX_S, parse_args

    with pytest.raises(ConfigError, match=rf"--{flag}=\S+: give .* or 10 to 604800 s"):
        parse_args([f"--{flag}={value}"])
    assert parse_args([f"--{flag}={WATCHDOG_MAX_S:g}"]).watchdog_s is not None
