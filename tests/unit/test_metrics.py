"""The peak-FLOPs table behind every MFU: each GPU name torch reports gets its own datasheet's dense bf16 peak.

    python -m pytest tests/unit/test_metrics.py -q
"""

import pytest

from bench.metrics import mfu_percent, peak_flops


@pytest.mark.parametrize("name, sparse_tflops", [
    ("NVIDIA H100 80GB HBM3", 1979), ("NVIDIA H100 NVL", 1671), ("NVIDIA H100 PCIe", 1513),
    ("NVIDIA H200", 1979), ("NVIDIA GH200 480GB", 1979),
    # the H200 NVL (PCIe card, 600 W) has the H100 NVL's peak, not the SXM H200's: its MFU read 16% low
    ("NVIDIA H200 NVL", 1671),
])
def test_hopper_peaks_are_half_the_datasheets_sparse_bf16(name, sparse_tflops):
    # datasheets give bf16 tensor FLOP/s with 2:4 sparsity; MFU is against the dense half, rounded to the TFLOP/s
    assert peak_flops(name) == pytest.approx(sparse_tflops / 2 * 1e12, abs=1e12)


def test_mfu_of_one_h200_nvl_step():
    # d20: 3.491758e9 FLOPs per token; 120,000 tok/s on one H200 NVL of 835.5 TFLOP/s dense bf16
    assert mfu_percent(3.491758e9, 120_000, 1, peak_flops("NVIDIA H200 NVL")) == pytest.approx(50.15, abs=0.05)


def test_a_gb200_is_no_hgx_b200():
    # GB200 NVL72: 180 PFLOP/s dense bf16 over 72 GPUs; HGX B200: 18 PFLOP/s over 8. 'GB200' holds 'B200'
    assert peak_flops("NVIDIA GB200") == pytest.approx(180e15 / 72)
    assert peak_flops("NVIDIA B200") == pytest.approx(18e15 / 8)
