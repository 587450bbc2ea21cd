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
