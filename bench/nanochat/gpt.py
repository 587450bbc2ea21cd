"""The GPT of nanochat's base pretraining (mirrors karpathy/nanochat nanochat/gpt.py, Nov 2025).

Architecture choices, as upstream:
- rotary position embeddings (split-half, base 10,000), no positional embedding table
- QK norm (RMSNorm over the head dim) applied AFTER the rotary embedding
- untied token embedding and lm_head; RMSNorm without learnable weights right after the embedding
- relu^2 in the MLP; no biases; logits soft-capped at 15 with tanh
- multi-query support through SDPA's enable_gqa (n_kv_head = n_head for base pretraining)
- projections into the residual stream and lm_head initialised to zero: step-0 loss is ln(vocab)

The model knows nothing of launch or measurement: sizes come from GPTConfig, the optimizers it builds
know only whether the process group is initialised.
"""

import math

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.tensor import DTensor

from bench.nanochat.adamw import DistAdamW
from bench.nanochat.attention import causal_attention
from bench.nanochat.gptconfig import GPTConfig
from bench.nanochat.muon import DistMuon, Muon, ShardedMuon

SOFTCAP = 15.0  # logits = SOFTCAP * tanh(logits / SOFTCAP)
ROPE_BASE = 10000
ROPE_LENGTH_FACTOR = 10  # rotary tables cover 10 x sequence_len positions, as upstream


def softcap_logits(logits: torch.Tensor) -> torch.Tensor:
    """SOFTCAP * tanh(logits / SOFTCAP) in the logits' dtype (bf16 under autocast), then fp32, as upstream."""
    return (SOFTCAP * torch.tanh(logits / SOFTCAP)).float()


def softcap_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """The loss of lm_head's output: soft cap, then cross-entropy ignoring -1 targets, as upstream
    (bench/nanochat/fused.py has both in one kernel)."""
    logits = softcap_logits(logits)
    return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1, reduction=reduction)


def norm(x: torch.Tensor) -> torch.Tensor:
    """RMSNorm with no learnable parameters (torch's default eps)."""
    return F.rms_norm(x, (x.size(-1),))


def apply_rotary_emb(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (B, T, H, D) by split halves: (x1, x2) -> (x1 cos + x2 sin, -x1 sin + x2 cos)."""
    assert x.ndim == 4
    d = x.shape[3] // 2
    x1, x2 = x[..., :d], x[..., d:]
    y1 = x1 * cos + x2 * sin
    y2 = x1 * (-sin) + x2 * cos
    return torch.cat([y1, y2], 3).to(x.dtype)


def rotary_then_norm(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary first, then QK norm, as upstream (bench/nanochat/fused.py has both in one kernel)."""
    return norm(apply_rotary_emb(x, cos, sin))


class CausalSelfAttention(nn.Module):
    rotary_norm = staticmethod(rotary_then_norm)  # --fused_kernels swaps in its kernel per instance

    def __init__(self, config: GPTConfig, layer_idx: int = 0):
        super().__init__()
        self.layer_idx = layer_idx  # this layer's slot in an inference KV cache
        self.n_head = config.n_head
        self.n_kv_head = config.n_kv_head
        self.n_embd = config.n_embd
        self.head_dim = config.n_embd // config.n_head
        assert self.n_embd % self.n_head == 0 and self.n_head % self.n_kv_head == 0
        self.c_q = nn.Linear(self.n_embd, self.n_head * self.head_dim, bias=False)
        self.c_k = nn.Linear(self.n_embd, self.n_kv_head * self.head_dim, bias=False)
        self.c_v = nn.Linear(self.n_embd, self.n_kv_head * self.head_dim, bias=False)
        self.c_proj = nn.Linear(self.n_embd, self.n_embd, bias=False)

    def forward(self, x: torch.Tensor, cos_sin: tuple[torch.Tensor, torch.Tensor], kv_cache=None) -> torch.Tensor:
        B, T, _ = x.size()
        q = self.c_q(x).view(B, T, self.n_head, self.head_dim)
        k = self.c_k(x).view(B, T, self.n_kv_head, self.head_dim)
        v = self.c_v(x).view(B, T, self.n_kv_head, self.head_dim)
        cos, sin = cos_sin
        q, k = self.rotary_norm(q, cos, sin), self.rotary_norm(k, cos, sin)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, H, T, D)
        if kv_cache is None:
            y = causal_attention(q, k, v, enable_gqa=self.n_head != self.n_kv_head)
        else:  # inference (bench/nanochat/engine.py): keys and values of earlier steps come from the cache
            y = kv_cache.attend(self.layer_idx, q, k, v, enable_gqa=self.n_head != self.n_kv_head)
        y = y.transpose(1, 2).contiguous().view(B, T, -1)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=False)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.relu(self.c_fc(x)).square())


class Block(nn.Module):
    def __init__(self, config: GPTConfig, layer_idx: int = 0):
        super().__init__()
        self.attn = CausalSelfAttention(config, layer_idx)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor, cos_sin, kv_cache=None) -> torch.Tensor:
        x = x + self.attn(norm(x), cos_sin, kv_cache)
        return x + self.mlp(norm(x))


class GPT(nn.Module):
    softcap_loss = staticmethod(softcap_cross_entropy)  # --fused_kernels=softcap_loss swaps in its kernel

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict({
            "wte": nn.Embedding(config.vocab_size, config.n_embd),
            "h": nn.ModuleList([Block(config, i) for i in range(config.n_layer)]),
        })
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.rotary_seq_len = config.sequence_len * ROPE_LENGTH_FACTOR
        cos, sin = self._precompute_rotary_embeddings(self.rotary_seq_len, config.n_embd // config.n_head)
        self.register_buffer("cos", cos, persistent=False)  # not saved: recomputed from the config
        self.register_buffer("sin", sin, persistent=False)

    def init_weights(self) -> None:
        """Upstream's init, run after `to_empty` moves the meta-device model onto its device."""
        self.apply(self._init_weights)
        nn.init.zeros_(self.lm_head.weight)
        for block in self.transformer.h:
            nn.init.zeros_(block.mlp.c_proj.weight)
            nn.init.zeros_(block.attn.c_proj.weight)
        cos, sin = self._precompute_rotary_embeddings(self.rotary_seq_len, self.config.n_embd // self.config.n_head)
        self.cos, self.sin = cos, sin
        if self.transformer.wte.weight.device.type == "cuda":
            self.transformer.wte.to(dtype=torch.bfloat16)  # saves memory; grads and Adam state follow

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            fan_out, fan_in = module.weight.shape
            std = 1.0 / math.sqrt(fan_in) * min(1.0, math.sqrt(fan_out / fan_in))
            nn.init.normal_(module.weight, mean=0.0, std=std)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=1.0)

    def _precompute_rotary_embeddings(self, seq_len: int, head_dim: int, base: int = ROPE_BASE):
        """cos/sin tables of shape (1, seq_len, 1, head_dim/2) in bf16 on the model's device, as upstream keeps them."""
        device = self.get_device()
        channel_range = torch.arange(0, head_dim, 2, dtype=torch.float32, device=device)
        inv_freq = 1.0 / (base ** (channel_range / head_dim))
        t = torch.arange(seq_len, dtype=torch.float32, device=device)
        freqs = torch.outer(t, inv_freq)
        cos, sin = freqs.cos().bfloat16(), freqs.sin().bfloat16()
        return cos[None, :, None, :], sin[None, :, None, :]

    def get_device(self) -> torch.device:
        return self.transformer.wte.weight.device

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def estimate_flops(self) -> int:
        """FLOPs per token (GPTConfig.flops_per_token), nanochat's name for it."""
        return self.config.flops_per_token()

    def setup_optimizers(self, unembedding_lr: float = 0.004, embedding_lr: float = 0.2,
                         matrix_lr: float = 0.02, weight_decay: float = 0.0, log=print):
        """AdamW for wte and lm_head (lr x (dim/768)^-0.5), Muon for every matrix in the blocks.

        The sharded forms (DistAdamW, DistMuon) are used when a process group is initialised: they
        average the gradients themselves, so the model is never wrapped in DDP. Parameters that FSDP has
        sharded (DTensors, whose gradients arrive averaged) get torch's AdamW and ShardedMuon.
        """
        model_dim = self.config.n_embd
        distributed = dist.is_available() and dist.is_initialized()
        fsdp_sharded = any(isinstance(p, DTensor) for p in self.parameters())
        matrix_params = list(self.transformer.h.parameters())
        embedding_params = list(self.transformer.wte.parameters())
        lm_head_params = list(self.lm_head.parameters())
        assert len(list(self.parameters())) == len(matrix_params) + len(embedding_params) + len(lm_head_params)
        dmodel_lr_scale = (model_dim / 768) ** -0.5
        log(f"Scaling the LR for the AdamW parameters ∝1/√({model_dim}/768) = {dmodel_lr_scale:.6f}")
        adam_groups = [
            dict(params=lm_head_params, lr=unembedding_lr * dmodel_lr_scale),
            dict(params=embedding_params, lr=embedding_lr * dmodel_lr_scale),
        ]
        adamw_kwargs = dict(betas=(0.8, 0.95), eps=1e-10, weight_decay=weight_decay)
        if fsdp_sharded:  # foreach: works on DTensors wherever their shards live (GPU or host memory)
            adamw = torch.optim.AdamW(adam_groups, foreach=True, **adamw_kwargs)
        elif distributed:
            adamw = DistAdamW(adam_groups, **adamw_kwargs)
        else:
            adamw = torch.optim.AdamW(adam_groups, fused=self.get_device().type == "cuda", **adamw_kwargs)
        muon_cls = ShardedMuon if fsdp_sharded else DistMuon if distributed else Muon
        muon = muon_cls(matrix_params, lr=matrix_lr, momentum=0.95, log=log)
        optimizers = [adamw, muon]
        for opt in optimizers:
            for group in opt.param_groups:
                group["initial_lr"] = group["lr"]  # the LR schedule multiplies this
        return optimizers

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None, loss_reduction: str = "mean",
                kv_cache=None):
        """The loss when targets are given (ignore_index -1), else the soft-capped logits. With a kv_cache
        (bench/nanochat/engine.py) idx continues the cached positions: rotary angles start at its position."""
        B, T = idx.size()
        T0 = 0 if kv_cache is None else kv_cache.get_pos()
        assert T0 + T <= self.cos.size(1), f"sequence length {T0 + T} exceeds the rotary cache {self.cos.size(1)}"
        cos_sin = self.cos[:, T0:T0 + T], self.sin[:, T0:T0 + T]
        x = norm(self.transformer.wte(idx))
        for block in self.transformer.h:
            x = block(x, cos_sin, kv_cache)
        logits = self.lm_head(norm(x))
        if targets is None:
            return softcap_logits(logits)
        return self.softcap_loss(logits, targets, loss_reduction)


def build_model(config: GPTConfig, device: torch.device | str) -> GPT:
    """Build on the meta device (no memory, no init cost), materialise on `device`, then init."""
    with torch.device("meta"):
        model = GPT(config)
    model.to_empty(device=device)
    model.init_weights()
    return model
