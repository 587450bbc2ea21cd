"""Fixtures of the workload tests."""

import pytest
import torch

from bench.nanochat.attention import SDPA_BACKEND_SWITCHES


@pytest.fixture
def restore_sdpa_switches():
    """restrict_sdpa_backends changes process-wide switches: put them back after the test."""
    import torch._inductor.config as inductor_config

    saved = {name: getattr(torch.backends.cuda, f"{switch.replace('enable_', '')}_enabled")()
             for name, switch in SDPA_BACKEND_SWITCHES.items()}
    caches = inductor_config.force_disable_caches
    yield
    for name, switch in SDPA_BACKEND_SWITCHES.items():
        getattr(torch.backends.cuda, switch)(saved[name])
    inductor_config.force_disable_caches = caches
