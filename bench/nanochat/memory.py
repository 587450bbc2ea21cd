"""Predicted peak memory per rank of one training point, for each memory strategy (bench/nanochat/parallel.py).

The peak is the larger of two moments of a step, in bytes that torch's allocator hands out (what
`torch.cuda.max_memory_allocated` reports and the trainer records as peak_mem_mib):
- the backward pass: resident state + saved activations + logits + what is gathered or being reduced;
- the optimizer step: resident state + all gradients + the optimizer's temporaries. For zero2 those are
  DistMuon's stacked copies, traced allocation by allocation in `_dist_muon_extra` (one GPU: about 14
  bytes per matrix parameter on top of weights, gradients and momentum, which is what limits zero2);
  ShardedMuon needs one full matrix at a time.
Resident state per strategy: zero2 keeps full fp32 weights (the embedding bf16 on CUDA) and full
gradients, optimizer state sharded; fsdp divides all three by the ranks; fsdp+offload keeps them in host
memory instead (pinned: the host allocator rounds each block up to a power of two).

Shapes and sizes are exact; how many bytes a block saves for backward, the logits' share and the
allocator's overhead are constants in memory_calibration.json (data, each with its source: measured or
estimated), per device type and for compiled or eager models. `need` = peak x (1 + overhead) + context is
what must fit into the device.
"""

import json
import math
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

CALIBRATION_FILE = Path(__file__).with_name("memory_calibration.json")
GIB = 1024 ** 3

# Memory per GPU as torch reports it (total_memory), for planning without the device at hand.
DEVICE_MEMORY_GIB: list[tuple[str, float]] = [
    ("GH200", 94.5),
    ("H200", 139.8),
    ("H100", 79.1),
    ("A100-SXM4-40GB", 39.4),
    ("A100", 79.1),
]


@dataclass(frozen=True)
class MemoryPoint:
    """One training configuration, as the trainer's flags name it."""

    depth: int
    aspect_ratio: int = 64
    vocab_size: int = 65536
    max_seq_len: int = 2048
    device_batch_size: int = 1
    world_size: int = 1
    strategy: str = "zero2"
    device_type: str = "cuda"
    compiled: bool = False
    grad_accum: int = 1
    fp8: bool = False  # --fp8: the blocks save FP8 copies of their matmul inputs for backward
    fused_kernels: str = ""  # --fused_kernels as TrainConfig records it: kernel names, comma-separated


@dataclass
class Estimate:
    point: MemoryPoint
    num_params: int
    peak_bytes: int  # torch-allocated bytes at the peak, per rank
    need_bytes: int  # what the device must hold: peak with allocator overhead, plus the context
    phase: str  # "backward" or "optimizer step": where the peak falls
    components: dict = field(default_factory=dict)  # bytes at that peak, by part
    host_bytes: int = 0  # host memory of one rank (offload: its pinned shards and optimizer state)
    host_components: dict = field(default_factory=dict)
    phases: dict = field(default_factory=dict)  # {moment: {part: bytes}} at the peak of each moment

    def phase_bytes(self, phase: str) -> int:
        return sum(self.phases[phase].values())


@cache
def load_calibration(path: str | None = None) -> dict:
    return json.loads(Path(path or CALIBRATION_FILE).read_text())


def _constants(calibration: dict, device_type: str, compiled: bool) -> dict:
    """Flat {name: value} for one device type and mode (CPU runs are never compiled)."""
    section = calibration["cuda" if device_type == "cuda" else "cpu"]
    mode = section["compiled" if compiled and "compiled" in section else "eager"]
    flat = {k: v["value"] for k, v in section.items() if isinstance(v, dict) and "value" in v}
    flat.update({k: v["value"] for k, v in mode.items()})
    return flat


def _shapes(p: MemoryPoint) -> tuple[int, int, list[tuple[int, int]]]:
    """(layers, width, [(rows, cols) of every block matrix]) from the model's own sizing rule."""
    from bench.nanochat.gptconfig import GPTConfig

    c = GPTConfig.from_depth(p.depth, p.vocab_size, p.max_seq_len, p.aspect_ratio)
    d, kv = c.n_embd, c.n_kv_head * (c.n_embd // c.n_head)
    block = [(d, d), (kv, d), (kv, d), (d, d), (4 * d, d), (d, 4 * d)]  # c_q, c_k, c_v, c_proj, c_fc, c_proj
    return c.n_layer, d, block * c.n_layer


def _groups(matrices: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """(count, elements) per matrix shape, in Muon's sorted group order."""
    return [(matrices.count(s), s[0] * s[1]) for s in sorted(set(matrices))]


def _dist_muon_extra(groups: list[tuple[int, int]], world: int, ns_bytes: float) -> int:
    """Peak bytes DistMuon.step allocates beyond weights, gradients and momentum, following its code: phase
    1 stacks every group's gradients (padded to W blocks) and allocates the rank's block; phase 2 waits
    group by group (a waited stack is freed, the last stays referenced), runs Newton-Schulz, then keeps
    the update, the weights it sends and the gathered result alive until the final copies."""
    live = peak = 0
    sizes = []
    for k, m in groups:
        block = -(-k // world)
        # padded to W blocks as DistMuon's reduce_scatter takes them: past k ranks each rank stacks W matrices
        stack, own = 4 * block * world * m, 4 * block * m
        live += stack + own + (4 * m if block * world > k else 0)
        sizes.append((stack, own, block * m))
    peak = live
    prev_update = 0
    for i, (stack, own, elems) in enumerate(sizes):
        if i < len(sizes) - 1:
            live -= stack
        peak = max(peak, live + ns_bytes * elems)
        live += 4 * elems - prev_update  # the update (fp32); the previous group's is dropped
        prev_update = 4 * elems
        live += 4 * elems + stack  # the weights sent, the gathered result
        peak = max(peak, live)
    return int(peak)


def estimate(point: MemoryPoint, calibration: dict | None = None) -> Estimate:
    from bench.nanochat.config import fused_kernel_names
    from bench.nanochat.strategy import Strategy

    p, s = point, Strategy.parse(point.strategy)
    k = _constants(calibration or load_calibration(), p.device_type, p.compiled)
    cuda = p.device_type == "cuda"
    L, d, matrices = _shapes(p)
    V, W, tokens = p.vocab_size, p.world_size, p.device_batch_size * p.max_seq_len
    n_mat, n_head = sum(r * c for r, c in matrices), V * d
    wte_b = 2 if cuda else 4  # the embedding is bf16 on CUDA
    shard = (lambda n: n / W) if s.fsdp else (lambda n: n)

    weights = 4 * n_mat + 4 * n_head + wte_b * n_head
    adam = 2 * (4 * n_head + wte_b * n_head) / W
    muon = 4 * n_mat / W if s.fsdp else 4 * sum(-(-c // W) * m for c, m in _groups(matrices))
    resident = {"weights": shard(weights), "adam_state": adam, "muon_momentum": muon}
    offloaded = s.offload and cuda  # on a CPU run host memory is the device's
    if offloaded:
        resident = {name: 0 for name in resident}
    grads_all = 0 if offloaded else shard(weights)

    # backward pass
    blk = sum(r * c for r, c in matrices[:6])  # one block's parameters
    fused = fused_kernel_names(p.fused_kernels)
    # rotary_norm saves only its output for backward (measured with it alone: results/h200-d20/fused)
    act = (k["act_bytes_per_token_layer_dim"] - (k.get("fp8_act_bytes_saved_per_token_layer_dim", 0) if p.fp8 else 0)
           - (k.get("fused_act_bytes_saved_per_token_layer_dim", 0) if "rotary_norm" in fused else 0))
    acts = tokens * d * (L * k["ac_saved_bytes_per_token_layer_dim"] + act) if s.ac else tokens * L * d * act
    # softcap_loss's backward writes the logits' gradient beside the saved logits, where compile's reuses them
    logits = k["logits_bytes_per_token_vocab"] + (k.get("fused_loss_logits_bytes_per_token_vocab", 0)
                                                  if "softcap_loss" in fused else 0)
    bwd = dict(resident, activations=acts, logits=tokens * V * logits)
    if s.fsdp:
        u = 2 if cuda else 4  # gathered dtype: bf16 on CUDA (MixedPrecisionPolicy), fp32 on CPU
        bwd["fsdp_buffers"] = (2 * u * blk + u * n_head + u * blk + (4 * blk if u != 4 else 0) + 4 * blk / W
                               + (4 * blk / W if offloaded else 0))
    else:
        bwd["weight_copies"] = k["weight_copy_bytes_per_param"] * (n_mat + n_head)
    bwd["gradients"] = grads_all if p.grad_accum > 1 else (0 if offloaded else shard(4 * n_head))

    # optimizer step
    step = dict(resident, gradients=grads_all)
    if s.fsdp:
        m = max(r * c for r, c in matrices)
        muon_tmp = 4 * m + k["ns_bytes_per_element"] * m + 4 * m / W * (2 if offloaded else 1)
    else:
        muon_tmp = _dist_muon_extra(_groups(matrices), W, k["ns_bytes_per_element"])
    step["optimizer_temporaries"] = max(adam, muon_tmp)  # AdamW's temporaries: the size of its state

    phases = {"backward": {n: int(v) for n, v in bwd.items()}, "optimizer step": {n: int(v) for n, v in step.items()}}
    phase, parts = max((("backward", bwd), ("optimizer step", step)), key=lambda t: sum(t[1].values()))
    peak = int(sum(parts.values()))
    need = int(peak * (1 + k["allocator_overhead"]) + k["context_bytes"])
    host = _host(p, s, matrices, d, wte_b, k) if cuda else {"process": k["host_base_bytes"], "tensors": peak}
    return Estimate(point, n_mat + 2 * n_head, peak, need, phase, phases[phase],
                    int(sum(host.values())), {n: int(v) for n, v in host.items()}, phases)


def _pinned(nbytes: float) -> int:
    """Pinned host blocks are rounded up to a power of two by torch's caching host allocator."""
    n = max(1, math.ceil(nbytes))
    return 1 << (n - 1).bit_length()


def _host(p: MemoryPoint, s, matrices, d: int, wte_b: int, k: dict) -> dict:
    """Host memory of one rank: the process itself, plus under offload its shards and optimizer state."""
    host = {"process": k["host_base_bytes"]}
    if not s.offload:
        return host
    W = p.world_size
    rows = lambda r: -(-r // W)  # noqa: E731 - FSDP pads every shard to ceil(rows / W) rows
    shards = [(rows(r) * c, 4) for r, c in matrices] + [(rows(p.vocab_size) * d, 4), (rows(p.vocab_size) * d, wte_b)]
    host["weights_pinned"] = host["gradients_pinned"] = sum(_pinned(n * b) for n, b in shards)
    host["muon_momentum"] = sum(4 * rows(r) * c for r, c in matrices)
    host["adam_state"] = 2 * (4 + wte_b) * p.vocab_size * d / W
    return host


def device_memory_bytes(gpu_name: str | None) -> int | None:
    """Memory of a GPU by name (first matching pattern of DEVICE_MEMORY_GIB), or None when unknown."""
    for pattern, gib in DEVICE_MEMORY_GIB:
        if gpu_name and pattern.lower() in gpu_name.lower():
            return int(gib * GIB)
    return None


def fits(est: Estimate, device_bytes: int | None, host_bytes: int | None = None) -> tuple[bool, str]:
    """(fits, reason) against a device's (and under offload the host's) memory; unknown limits pass."""
    if device_bytes and est.need_bytes > device_bytes:
        return False, (f"needs ~{est.need_bytes / GIB:.1f} GiB per GPU ({est.phase}), the GPU has "
                       f"{device_bytes / GIB:.1f} GiB")
    if host_bytes and est.host_bytes * est.point.world_size > host_bytes:
        return False, (f"needs ~{est.host_bytes * est.point.world_size / GIB:.1f} GiB of host memory for "
                       f"{est.point.world_size} rank(s), the host has {host_bytes / GIB:.1f} GiB")
    return True, f"~{est.need_bytes / GIB:.1f} GiB per GPU"


def fit_warning(depth: int, device_batch_size: int, max_seq_len: int, world_size: int, gpu: str,
                strategy: str = "zero2", aspect_ratio: int = 64, grad_accum: int = 1) -> str | None:
    """For the planner: a one-line warning when the point will not fit into `gpu`'s memory, else None."""
    # the recipe's vocabulary (MemoryPoint's default); compiled, as the trainer compiles on CUDA (train.py)
    est = estimate(MemoryPoint(depth, aspect_ratio, max_seq_len=max_seq_len, device_batch_size=device_batch_size,
                               world_size=world_size, strategy=strategy, device_type="cuda", compiled=True,
                               grad_accum=grad_accum))
    ok, reason = fits(est, device_memory_bytes(gpu))
    return None if ok else f"depth {depth} at device batch {device_batch_size} will not fit on {gpu}: {reason}"
