"""Throughput and MFU maths, and the one table of peak FLOPs they use.

MFU = FLOPs per token x tokens per second / (ranks x peak FLOPs per GPU), the PaLM / torchtitan
definition and nanochat's (which hard-codes the H100 peak: we look the peak up by GPU name instead
and record the value used in run.json). Unknown GPUs and CPUs have no peak: MFU is then None.
"""

# Dense bf16 tensor-core peak per GPU, FLOP/s, from the vendors' datasheets (no sparsity).
# Order matters: the first pattern found in the device name wins, so specific names come first.
PEAK_BF16_FLOPS: list[tuple[str, float]] = [
    ("GH200", 989e12),
    ("H200 NVL", 835e12),  # the PCIe card: the H100 NVL's peak, not the SXM H200's
    ("H200", 989e12),
    ("H100 NVL", 835e12),
    ("H100 PCIe", 756e12),
    ("H100", 989e12),  # SXM
    ("H800", 989e12),
    ("GB200", 2.5e15),  # its Blackwell runs faster than an HGX B200's (180 PFLOP/s dense per NVL72)
    ("B200", 2.25e15),
    ("B100", 1.75e15),
    ("A100", 312e12),
    ("A800", 312e12),
    ("L40S", 362e12),
    ("A10G", 70e12),  # AWS variant of the A10
    ("A10", 125e12),
    ("RTX 4090", 165e12),
    ("MI300X", 1307e12),
    ("MI250X", 383e12),
]


# Steps 0..10 are warm-up (compilation, allocator): nanochat keeps them out of its total training time,
# and the analysis keeps them out of the steady state.
WARMUP_STEPS = 10


def peak_flops(device_name: str | None) -> float | None:
    """Peak dense bf16 FLOP/s for a GPU name as torch reports it, or None if unknown (or CPU)."""
    name = (device_name or "").lower()
    return next((flops for pattern, flops in PEAK_BF16_FLOPS if pattern.lower() in name), None)


def mfu_percent(flops_per_token: float, tok_per_sec: float, world_size: int,
                peak_flops_per_gpu: float | None) -> float | None:
    """Model FLOPs utilisation in percent, or None without a known peak."""
    if not peak_flops_per_gpu:
        return None
    return 100.0 * flops_per_token * tok_per_sec / (world_size * peak_flops_per_gpu)
