"""A CPU sweep that could exhaust its host is refused at once, naming settings that fit (bench/capacity/cpuhost.py).

    python -m pytest tests/unit/capacity/test_cpuhost.py -q
"""

from types import SimpleNamespace

import pytest

from bench.capacity.cpuhost import TINY_CPU_FLAGS, check_cpu_host
from bench.errors import ConfigError

GIB = 2 ** 30
HOST_24G = {"device_type": "cpu", "host_available_bytes": 22 * GIB}  # the 24 GB host of the finding
FLOOR = 2 * GIB


def cfg(memory_limit=None, nproc=1):
    return SimpleNamespace(memory_limit=memory_limit, nproc=nproc)


def test_no_cap_on_cpu_is_refused_with_the_tiny_settings_and_this_hosts_largest_cap():
    with pytest.raises(ConfigError) as e:
        check_cpu_host(cfg(), HOST_24G, FLOOR)
    msg = str(e.value)
    assert "give --memory-limit" in msg and TINY_CPU_FLAGS in msg and "capacity_bench.py --tiny" in msg
    assert "up to 10240M with --gpus 1" in msg  # half of the 20 GiB above the guard


def test_caps_together_beyond_half_the_room_are_refused_and_within_it_pass():
    with pytest.raises(ConfigError, match=r"--memory-limit 6144M x 2 rank\(s\): more than half"):
        check_cpu_host(cfg(6 * GIB, nproc=2), HOST_24G, FLOOR)
    check_cpu_host(cfg(5 * GIB, nproc=2), HOST_24G, FLOOR)
    check_cpu_host(cfg(1050 << 20), HOST_24G, FLOOR)


def test_a_gpu_sweep_is_not_checked_against_the_host():
    check_cpu_host(cfg(), {"device_type": "cuda", "host_available_bytes": 1 * GIB}, FLOOR)
