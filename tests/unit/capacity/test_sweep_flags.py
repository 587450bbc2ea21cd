"""The capacity sweep's refusals name the flags `nanochat-bench capacity` takes, not the trainer's
(bench/capacity/sweep.py).

    python -m pytest tests/unit/capacity/test_sweep_flags.py -q
"""

import pytest

from bench.capacity import sweep
from bench.capacity.sweep import SweepConfig
from bench.errors import ConfigError


def test_an_unknown_strategy_names_the_strategies_flag(tmp_path):
    with pytest.raises(ConfigError, match=r"^--strategies='foo': valid: zero2 \| fsdp"):
        SweepConfig(out=tmp_path, strategies=["zero2", "foo"], search=True)


def test_cuda_without_a_gpu_names_the_device_type_flag(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep, "_gpu", lambda: (None, None))
    cfg = SweepConfig(out=tmp_path, strategies=["zero2"], search=True, device_type="cuda")
    with pytest.raises(ConfigError, match=r"^--device-type cuda but no GPU is visible"):
        sweep.machine(cfg)
