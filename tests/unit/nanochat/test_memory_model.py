"""The memory model (bench/nanochat/memory.py) against what is known, and its structure.

Measured on one H200 (issue 17 and results/h200-d20): d20 at batch 32 (compiled) peaked at 73,833 MiB;
zero2 d44 at batch 1 trains, d56 runs out of memory. The rest checks how strategies divide memory.

    python -m pytest tests/unit/nanochat/test_memory_model.py -q
"""

import json

import pytest

from bench.nanochat import memory
from bench.nanochat.memory import MemoryPoint, estimate, fit_warning, fits

H200 = memory.device_memory_bytes("NVIDIA H200")


def test_d20_batch32_within_10_percent_of_the_measured_peak():
    e = estimate(MemoryPoint(20, device_batch_size=32, compiled=True, grad_accum=8))
    assert e.peak_bytes == pytest.approx(73833 * 2 ** 20, rel=0.10)


def test_zero2_border_on_one_h200_lies_between_d44_and_d56():
    assert fits(estimate(MemoryPoint(44)), H200)[0]
    ok, reason = fits(estimate(MemoryPoint(56)), H200)
    assert not ok and "optimizer step" in reason  # DistMuon's stacked copies, not activations


def test_fsdp_divides_resident_state_by_the_ranks():
    one, eight = (estimate(MemoryPoint(32, strategy="fsdp", world_size=w)) for w in (1, 8))
    for part in ("weights", "adam_state", "muon_momentum", "gradients"):
        assert eight.phases["optimizer step"][part] == pytest.approx(one.phases["optimizer step"][part] / 8)
    zero2 = estimate(MemoryPoint(32, strategy="zero2", world_size=8))
    assert zero2.phases["optimizer step"]["weights"] == one.phases["optimizer step"]["weights"]  # replicated


def test_checkpointing_cuts_activations_and_offload_moves_state_to_the_host():
    plain, ac = (estimate(MemoryPoint(24, device_batch_size=16, strategy=s)) for s in ("fsdp", "fsdp+ac"))
    assert ac.phases["backward"]["activations"] < plain.phases["backward"]["activations"] / 5
    off = estimate(MemoryPoint(24, device_batch_size=16, strategy="fsdp+ac+offload"))
    assert off.phases["optimizer step"]["weights"] == 0 and off.need_bytes < ac.need_bytes
    # pinned host blocks are rounded up to powers of two: at least fp32 weights + grads + momentum
    assert off.host_components["weights_pinned"] >= 4 * off.num_params * 0.99
    assert memory._pinned(3 * 2 ** 20) == 4 * 2 ** 20 and memory._pinned(2 ** 20) == 2 ** 20


def test_dist_muon_trace_on_one_rank():
    # three groups of 4 * m fp32 bytes each: phase 1 holds stacks + own blocks (6), then each group frees
    # its stack (the last stays), keeps update, weights and gathered result; peak 11 groups' worth
    m = 1000
    assert memory._dist_muon_extra([(4, m), (1, 4 * m), (1, 4 * m)], 1, 0) == 11 * 16 * m


def test_planner_warning():
    assert fit_warning(20, 32, 2048, 1, "H200") is None
    assert "will not fit on H200" in fit_warning(56, 1, 2048, 1, "H200", grad_accum=1)
    assert fit_warning(56, 1, 2048, 1, "unknown GPU") is None  # no memory figure: no warning


def test_every_constant_says_where_it_comes_from():
    data = json.loads(memory.CALIBRATION_FILE.read_text())

    def leaves(d):
        for v in d.values():
            if isinstance(v, dict) and "value" in v:
                yield v
            elif isinstance(v, dict):
                yield from leaves(v)
    constants = list(leaves({k: v for k, v in data.items() if k != "about"}))
    assert len(constants) > 10
    assert all(c["source"].startswith(("measured:", "estimate:")) or c["value"] == 0 for c in constants)


@pytest.mark.parametrize("depth, grad_accum, plain_mib, fused_mib", [(20, 8, 73_833, 67_433), (12, 2, 31_729, 29_425)])
def test_predicts_what_the_fused_kernels_save(depth, grad_accum, plain_mib, fused_mib):
    """results/h200-d20/fused: B=32, T=2048, one H200, compiled, with and without --fused_kernels. The saving
    at both depths; the peak itself at d20, where the model's activation constant was measured."""
    point = dict(device_batch_size=32, compiled=True, grad_accum=grad_accum)
    plain = estimate(MemoryPoint(depth, **point)).peak_bytes / 2 ** 20
    fused = estimate(MemoryPoint(depth, fused_kernels="rotary_norm", **point)).peak_bytes / 2 ** 20
    assert plain - fused == pytest.approx(plain_mib - fused_mib, rel=0.05)
    if depth == 20:
        assert fused == pytest.approx(fused_mib, rel=0.02)


def test_each_kernels_memory_counts_whenever_that_kernel_ran():
    """--fused_kernels names the kernels: rotary_norm's saving and softcap_loss's gradient buffer apply with each
    in any set, spelled any way the flag takes."""
    point = dict(device_batch_size=32, compiled=True, grad_accum=8)

    def peak(kernels: str) -> int:
        return estimate(MemoryPoint(20, fused_kernels=kernels, **point)).peak_bytes

    assert peak("rotary_norm") < peak("") == peak("False") < peak("softcap_loss")
    assert peak("rotary_norm,softcap_loss") == peak("all") == peak("True")
    assert peak("all") - peak("rotary_norm") == peak("softcap_loss") - peak("")
