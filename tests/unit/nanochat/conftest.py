"""Fixtures of the workload tests."""

import pytest

from bench.nanochat.attention import allow_kernels, allowed_kernels


@pytest.fixture
def restore_sdpa_switches():
    """restrict_sdpa_backends changes process-wide switches: put them back after the test."""
    import torch._inductor.config as inductor_config

    saved = allowed_kernels()
    caches = inductor_config.force_disable_caches
    yield
    allow_kernels(saved)
    inductor_config.force_disable_caches = caches
