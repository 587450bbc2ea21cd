"""Sampling from a chat model with a KV cache and the calculator tool (mirrors nanochat/engine.py at 5c93a56).

The engine knows token ids only; the tokenizer is there for the special tokens and the tool. Semantics kept
from upstream, because chat evaluation's numbers depend on them:
- the generator is seeded (42) afresh on every call, so a problem's samples do not depend on the ones before;
- the prompt is prefilled once with batch 1; that cache is copied into a decode cache of `num_samples` rows,
  and the first token (sampled from the prefill) is the same for every row;
- T = 0 is greedy; otherwise the top-k logits / T are softmaxed and one token drawn (multinomial);
- a row ends on <|assistant_end|> or <|bos|>; the run ends when all rows did or after `max_tokens` steps,
  forced tokens included;
- tokens between <|python_start|> and <|python_end|> are given to the calculator; a result other than None
  forces <|output_start|>, str(result), <|output_end|> into that row.
The calculator is `bench.nanochat.calculator.use_calculator`: model-written expressions are evaluated there only.
"""

from collections import deque
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from bench.nanochat.attention import causal_attention

KV_CHUNK = 1024  # a full decode cache grows by what it needs plus this, rounded up to a multiple of it
DEFAULT_SEED = 42


class KVCache:
    """Keys and values of every layer, (layers, 2, batch, kv heads, time, head dim), allocated at the first
    insert in the keys' dtype and device (bf16 under autocast). `pos` moves on once the last layer inserted."""

    def __init__(self, batch_size: int, num_heads: int, seq_len: int, head_dim: int, num_layers: int):
        self.shape = [num_layers, 2, batch_size, num_heads, seq_len, head_dim]
        self.cache: torch.Tensor | None = None
        self.pos = 0

    def get_pos(self) -> int:
        return self.pos

    def prefill(self, other: "KVCache") -> None:
        """Start from another (batch-1 or same-batch) cache's contents: its rows are broadcast over ours."""
        assert self.cache is None and other.cache is not None, "prefill copies a filled cache into an empty one"
        layers, kv, batch, heads, time, dim = self.shape
        o_layers, o_kv, o_batch, o_heads, _, o_dim = other.shape
        assert (layers, kv, heads, dim) == (o_layers, o_kv, o_heads, o_dim), f"{self.shape} vs {other.shape}"
        assert o_batch in (1, batch) and time >= other.pos, f"cannot prefill {self.shape} from {other.shape}"
        self.cache = torch.empty(self.shape, dtype=other.cache.dtype, device=other.cache.device)
        self.cache[:, :, :, :, :other.pos] = other.cache[:, :, :, :, :other.pos]
        self.pos = other.pos

    def _grow(self, needed: int, like: torch.Tensor) -> None:
        target = -(-(needed + KV_CHUNK) // KV_CHUNK) * KV_CHUNK
        extra = list(self.cache.shape)
        extra[4] = target - self.cache.size(4)
        self.cache = torch.cat([self.cache, like.new_empty(extra)], dim=4).contiguous()
        self.shape = list(self.cache.shape)

    def insert_kv(self, layer_idx: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store this step's (B, H, T, D) keys and values at `pos`; return views of all of them so far."""
        if self.cache is None:
            self.cache = k.new_empty(self.shape)
        t0, t1 = self.pos, self.pos + k.size(2)
        if t1 > self.cache.size(4):
            self._grow(t1, k)
        self.cache[layer_idx, 0, :, :, t0:t1] = k
        self.cache[layer_idx, 1, :, :, t0:t1] = v
        if layer_idx == self.cache.size(0) - 1:
            self.pos = t1
        return self.cache[layer_idx, 0, :, :, :t1], self.cache[layer_idx, 1, :, :, :t1]

    def attend(self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               enable_gqa: bool) -> torch.Tensor:
        """Attention of this step's queries over the cached keys and values (the model's cache path)."""
        k, v = self.insert_kv(layer_idx, k, v)
        tq, tk = q.size(2), k.size(2)
        if tq == tk:  # a prefill from an empty cache: plain causal attention, as in training
            return causal_attention(q, k, v, enable_gqa=enable_gqa)
        if tq == 1:  # one new token sees everything before it
            return F.scaled_dot_product_attention(q, k, v, is_causal=False, enable_gqa=enable_gqa)
        # a chunk after a prefix: all of the prefix, causal within the chunk (True = attend)
        mask = torch.ones((tq, tk), dtype=torch.bool, device=q.device)
        mask[:, tk - tq:] = torch.tril(mask[:, tk - tq:])
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=enable_gqa)


def sample_next_token(logits: torch.Tensor, rng: torch.Generator, temperature: float = 1.0,
                      top_k: int | None = None) -> torch.Tensor:
    """(B, vocab) logits -> (B, 1) ids: argmax at temperature 0, else top-k (when given) / temperature, softmax,
    one multinomial draw from `rng`."""
    assert temperature >= 0.0, "temperature must be non-negative"
    if temperature == 0.0:
        return torch.argmax(logits, dim=-1, keepdim=True)
    if top_k is not None:
        values, ids = torch.topk(logits, min(top_k, logits.size(-1)), dim=-1)
        choice = torch.multinomial(F.softmax(values / temperature, dim=-1), num_samples=1, generator=rng)
        return ids.gather(1, choice)
    return torch.multinomial(F.softmax(logits / temperature, dim=-1), num_samples=1, generator=rng)


@dataclass
class _Row:
    """One sample being generated: its tokens so far, tokens waiting to be forced, the tool call it is in."""
    tokens: list[int]
    forced: deque = field(default_factory=deque)
    in_python: bool = False
    expr: list[int] = field(default_factory=list)
    done: bool = False


class Engine:
    def __init__(self, model, tokenizer, calculator=None):
        if calculator is None:
            from bench.nanochat.calculator import use_calculator as calculator  # the sandboxed evaluator
        self.model, self.tokenizer, self.calculator = model, tokenizer, calculator
        special = tokenizer.encode_special
        self.python_start, self.python_end = special("<|python_start|>"), special("<|python_end|>")
        self.output_start, self.output_end = special("<|output_start|>"), special("<|output_end|>")
        self.stops = (special("<|assistant_end|>"), tokenizer.get_bos_token_id())

    def _cache(self, batch_size: int, seq_len: int) -> KVCache:
        c = self.model.config
        return KVCache(batch_size, c.n_kv_head, seq_len, c.n_embd // c.n_head, c.n_layer)

    def _advance(self, row: _Row, sampled: int) -> tuple[int, int]:
        """The row's next token (a forced one first) and its mask (1 sampled, 0 forced); the tool's state moves on."""
        forced = bool(row.forced)
        token = row.forced.popleft() if forced else sampled
        row.tokens.append(token)
        if token in self.stops:
            row.done = True
        if token == self.python_start:
            row.in_python, row.expr = True, []
        elif token == self.python_end and row.in_python:
            row.in_python = False
            if row.expr:
                result = self.calculator(self.tokenizer.decode(row.expr))
                if result is not None:
                    row.forced.extend([self.output_start, *self.tokenizer.encode(str(result)), self.output_end])
            row.expr = []
        elif row.in_python:
            row.expr.append(token)
        return token, 0 if forced else 1

    @torch.inference_mode()
    def generate(self, tokens: list[int], num_samples: int = 1, max_tokens: int | None = None,
                 temperature: float = 1.0, top_k: int | None = None, seed: int = DEFAULT_SEED):
        """Yield (token column, mask column) per step: one token for each of the `num_samples` rows."""
        assert isinstance(tokens, list) and tokens and isinstance(tokens[0], int), "expecting a list of ints"
        device = self.model.get_device()
        rng = torch.Generator(device=device)
        rng.manual_seed(seed)
        prefill = self._cache(1, len(tokens))
        logits = self.model(torch.tensor([tokens], dtype=torch.long, device=device), kv_cache=prefill)
        first = sample_next_token(logits[:, -1, :], rng, temperature, top_k)[0, 0].item()
        decode = self._cache(num_samples, len(tokens) + max_tokens if max_tokens is not None
                             else self.model.config.sequence_len)
        decode.prefill(prefill)
        del prefill
        rows = [_Row(list(tokens)) for _ in range(num_samples)]
        sampled, generated = [first] * num_samples, 0  # the prefill's token is every row's first
        column: list[int] = []
        while (max_tokens is None or generated < max_tokens) and not all(r.done for r in rows):
            if generated:
                ids = torch.tensor(column, dtype=torch.long, device=device).unsqueeze(1)
                logits = self.model(ids, kv_cache=decode)
                sampled = sample_next_token(logits[:, -1, :], rng, temperature, top_k)[:, 0].tolist()
            column, masks = map(list, zip(*(self._advance(r, s) for r, s in zip(rows, sampled))))
            yield column, masks
            generated += 1

    def generate_batch(self, tokens: list[int], num_samples: int = 1, **kwargs):
        """(sequences, masks): each row's prompt plus its tokens, without the one that ended it."""
        results = [list(tokens) for _ in range(num_samples)]
        masks = [[0] * len(tokens) for _ in range(num_samples)]
        done = [False] * num_samples
        for column, mask_column in self.generate(tokens, num_samples, **kwargs):
            for i, (token, mask) in enumerate(zip(column, mask_column)):
                if done[i]:
                    continue
                if token in self.stops:
                    done[i] = True
                else:
                    results[i].append(token)
                    masks[i].append(mask)
            if all(done):
                break
        return results, masks
