"""The KV-cache engine (bench/nanochat/engine.py) against the model's plain forward, its sampling rules and the
calculator tool's forced tokens.

    python -m pytest tests/unit/nanochat/test_engine.py -q
"""

import pytest
import torch

from bench.nanochat.engine import Engine, KVCache
from bench.nanochat.gpt import GPTConfig, build_model

from chat_fixtures import (ASSISTANT_END, ASSISTANT_START, BOS, OUTPUT_END, OUTPUT_START, PYTHON_END, PYTHON_START,
                           USER_END, USER_START, byte_tokenizer)


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models: one thread is faster than two that contend with whatever else the machine runs."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def random_model(n_head=2, n_kv_head=2, seq=64, seed=0):
    """A tiny GPT with every weight random (the init zeroes the output projections: its samples would be flat)."""
    torch.manual_seed(seed)
    model = build_model(GPTConfig(sequence_len=seq, vocab_size=265, n_layer=2, n_head=n_head, n_kv_head=n_kv_head,
                                  n_embd=64), "cpu")
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn_like(p))
    return model.eval()


def prompt(text="hello world"):
    return byte_tokenizer().encode(text, prepend=BOS)


@torch.inference_mode()
def generate_greedy(model, tokens: list[int], max_tokens: int) -> list[int]:
    """Greedy continuation without a KV cache: the full forward over the whole sequence at every step."""
    ids = torch.tensor([tokens], dtype=torch.long)
    out = []
    for _ in range(max_tokens):
        next_id = model(ids[:, -model.config.sequence_len:])[:, -1, :].argmax(dim=-1, keepdim=True)
        ids = torch.cat([ids, next_id], dim=1)
        out.append(int(next_id.item()))
    return out


@pytest.mark.parametrize("kv_heads", [2, 1])  # plain multi-head and grouped-query attention
def test_greedy_generation_with_the_cache_equals_the_plain_forward(kv_heads):
    model = random_model(n_kv_head=kv_heads)
    tokens = prompt()
    reference = generate_greedy(model, tokens, 30)
    engine = Engine(model, byte_tokenizer(), calculator=lambda expr: None)
    column_tokens = [column[0] for column, _ in engine.generate(tokens, max_tokens=30, temperature=0.0)]
    stop = next((i for i, t in enumerate(reference) if t in (ASSISTANT_END, BOS)), len(reference) - 1) + 1
    assert column_tokens == reference[:stop]


def test_cache_logits_equal_the_full_forward_at_every_position():
    model = random_model(n_kv_head=1)
    ids = torch.tensor([prompt("a longer prompt for the cache")])
    with torch.no_grad():
        full = model(ids)
        cache = KVCache(1, 1, 4, 32, 2)  # shorter than the sequence: it grows on the way
        steps = [model(ids[:, :5], kv_cache=cache)[:, -1]]
        steps += [model(ids[:, t:t + 1], kv_cache=cache)[:, -1] for t in range(5, ids.size(1))]
    assert cache.get_pos() == ids.size(1) and cache.cache.size(4) == 1024 * 2  # needed + 1024, in 1024s
    torch.testing.assert_close(torch.cat(steps), full[0, 4:], rtol=1e-4, atol=1e-4)


def test_a_chunk_after_a_prefix_sees_the_prefix_and_is_causal_within():
    model = random_model()
    ids = torch.tensor([prompt("prefix then chunk")])
    with torch.no_grad():
        full = model(ids)
        cache = KVCache(1, 2, ids.size(1), 32, 2)
        model(ids[:, :6], kv_cache=cache)
        chunk = model(ids[:, 6:], kv_cache=cache)
    torch.testing.assert_close(chunk[0], full[0, 6:], rtol=1e-4, atol=1e-4)


def test_sampling_is_seeded_per_call_and_the_first_token_is_shared():
    engine = Engine(random_model(), byte_tokenizer(), calculator=lambda expr: None)
    kwargs = dict(num_samples=4, max_tokens=12, temperature=1.0, top_k=50)
    first, _ = engine.generate_batch(prompt(), **kwargs)
    again, _ = engine.generate_batch(prompt(), **kwargs)
    assert first == again  # seed 42 on every call
    n = len(prompt())
    assert len({row[n] for row in first}) == 1  # the prefill's token starts every row
    assert len({tuple(row[n:]) for row in first}) > 1  # then the rows go their own ways
    other, _ = engine.generate_batch(prompt(), seed=7, **kwargs)
    assert other != first


def test_top_k_one_is_greedy():
    engine = Engine(random_model(), byte_tokenizer(), calculator=lambda expr: None)
    greedy, _ = engine.generate_batch(prompt(), max_tokens=10, temperature=0.0)
    top1, _ = engine.generate_batch(prompt(), max_tokens=10, temperature=0.7, top_k=1)
    assert greedy == top1


def taught_model(sequence: list[int], steps=150):
    """A tiny GPT trained (AdamW, CPU, a few seconds) until it recites `sequence` greedily."""
    torch.manual_seed(0)
    model = build_model(GPTConfig(sequence_len=64, vocab_size=265, n_layer=2, n_head=2, n_kv_head=2, n_embd=64),
                        "cpu")
    ids = torch.tensor([sequence])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(steps):
        loss = model(ids[:, :-1], ids[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.05, loss.item()
    return model.eval()


def test_a_calculator_call_forces_its_result_and_forced_tokens_count():
    tok = byte_tokenizer()
    head = [BOS, USER_START, *tok.encode("add"), USER_END, ASSISTANT_START]
    call = [PYTHON_START, *tok.encode("2+3"), PYTHON_END]
    # the model learnt a wrong output (9): what follows python_end must be the calculator's 5, forced
    sequence = head + call + [OUTPUT_START, *tok.encode("9"), OUTPUT_END, *tok.encode("ok"), ASSISTANT_END]
    engine = Engine(taught_model(sequence), tok)  # the project's calculator (bench/nanochat/calculator.py)
    rows, masks = engine.generate_batch(head, num_samples=2, max_tokens=40, temperature=0.0)
    forced = [OUTPUT_START, *tok.encode("5"), OUTPUT_END]
    for row, mask in zip(rows, masks):
        out, out_mask = row[len(head):], mask[len(head):]
        assert out[:len(call) + len(forced)] == call + forced
        assert out_mask[:len(call) + len(forced)] == [1] * len(call) + [0] * len(forced)
        assert ASSISTANT_END not in out  # dropped by generate_batch
    steps = list(engine.generate(head, max_tokens=len(call) + 2, temperature=0.0))
    assert [column[0] for column, _ in steps] == call + forced[:2]  # max_tokens counts the forced tokens too


def test_an_expression_the_calculator_refuses_forces_nothing():
    tok = byte_tokenizer()
    head = [BOS, USER_START, *tok.encode("hi"), USER_END, ASSISTANT_START]
    call = [PYTHON_START, *tok.encode("2**99"), PYTHON_END]  # the power operator is refused (None)
    sequence = head + call + [*tok.encode("no"), ASSISTANT_END]
    engine = Engine(taught_model(sequence), tok)
    rows, masks = engine.generate_batch(head, max_tokens=40, temperature=0.0)
    assert rows[0][len(head):] == call + tok.encode("no") and set(masks[0][len(head):]) == {1}
