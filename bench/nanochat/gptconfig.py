"""The GPT's shape (upstream keeps it in nanochat/gpt.py, which bench/nanochat/gpt.py re-exports): its sizing rule,
parameter count and FLOPs per token, in plain arithmetic.

Apart from the model so that the planning side (plan, render, submit on a login node) sizes a model without
importing torch, which costs seconds there and may not even be installed.
"""

from dataclasses import dataclass


@dataclass
class GPTConfig:
    sequence_len: int = 1024
    vocab_size: int = 50304
    n_layer: int = 12
    n_head: int = 6  # query heads
    n_kv_head: int = 6  # key/value heads (GQA)
    n_embd: int = 768

    @classmethod
    def from_depth(cls, depth: int, vocab_size: int, sequence_len: int = 2048, aspect_ratio: int = 64,
                   **kw) -> "GPTConfig":
        """base_train's sizing: width aspect_ratio (64) x depth, heads of 128 (ceil), plain multi-head attention."""
        model_dim = depth * aspect_ratio
        num_heads = max(1, (model_dim + 127) // 128)
        return cls(sequence_len=sequence_len, vocab_size=vocab_size, n_layer=depth, n_head=num_heads,
                   n_kv_head=num_heads, n_embd=model_dim, **kw)

    def num_params(self) -> int:
        """Parameters of the GPT of this shape (GPT.num_params counts the built module; a test holds
        them equal): embedding and lm_head, and per block q, k, v, proj and the 4x MLP."""
        d, kv = self.n_embd, self.n_kv_head * (self.n_embd // self.n_head)
        per_block = d * d + 2 * d * kv + d * d + 8 * d * d
        return 2 * self.vocab_size * d + self.n_layer * per_block

    def flops_per_token(self) -> int:
        """Training FLOPs per token, PaLM-style as upstream's estimate_flops: 6 x (parameters but the
        embedding lookup) + 12 x layers x heads x head dim x sequence for the attention scores. The
        planner's estimates use this too, before any model exists."""
        head_dim = self.n_embd // self.n_head
        attention = 12 * self.n_layer * self.n_head * head_dim * self.sequence_len
        return 6 * (self.num_params() - self.vocab_size * self.n_embd) + attention
