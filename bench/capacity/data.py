"""The probes' data: a byte-level tokenizer of any vocabulary size and random token streams, in seconds.

A capacity probe measures memory and speed, not learning: the tokens only need the right vocabulary.
The tokenizer is a valid BPE (the 256 bytes, then two-byte merges in byte order) saved in the trainer's
format, so the trainer sees the vocabulary size it is asked for without a tokenizer training run;
train.bin/val.bin are uniform random uint16 tokens for `--data_bin_dir`.
"""

import os
from pathlib import Path

import numpy as np

from bench.errors import ConfigError
from bench.contract import ENV_BASE_DIR

BIN_DIR = "bin"


def synthetic_ranks(num_tokens: int) -> dict[bytes, int]:
    """{token bytes: rank}: the 256 single bytes, then two-byte tokens (a, b) in order, each merged from
    two single bytes of lower rank."""
    if not 256 < num_tokens <= 256 + 256 * 256:
        raise ConfigError(f"a synthetic tokenizer holds 257..65,792 mergeable tokens, not {num_tokens}")
    ranks = {bytes([b]): b for b in range(256)}
    for i in range(num_tokens - 256):
        ranks[bytes([i // 256, i % 256])] = 256 + i
    return ranks


def prepare(base_dir: str | Path, vocab_size: int, tokens: int = 1 << 20) -> Path:
    """NANOCHAT_BASE_DIR with tokenizer/ and bin/{train,val}.bin (made once); returns the bin directory."""
    from bench.nanochat import tokenizer

    base_dir = Path(base_dir)
    bin_dir = base_dir / BIN_DIR
    previous = os.environ.get(ENV_BASE_DIR)
    os.environ[ENV_BASE_DIR] = str(base_dir)  # tokenizer_dir() reads it
    try:
        pkl = tokenizer.tokenizer_dir() / tokenizer.TOKENIZER_PKL
        if not pkl.is_file() or tokenizer.get_tokenizer().get_vocab_size() != vocab_size:
            num = vocab_size - len(tokenizer.SPECIAL_TOKENS)
            tokenizer.save_tokenizer(tokenizer.build_encoding(synthetic_ranks(num)))
    finally:
        if previous is None:
            os.environ.pop(ENV_BASE_DIR, None)
        else:
            os.environ[ENV_BASE_DIR] = previous
    bin_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        path = bin_dir / f"{split}.bin"
        want = rng.integers(0, vocab_size - len(tokenizer.SPECIAL_TOKENS), tokens, dtype=np.uint16)
        # compared, not only sized: a sweep resumed with a smaller --vocab-size must not keep tokens past it
        same = path.is_file() and path.stat().st_size == 2 * tokens and np.array_equal(np.fromfile(path, np.uint16),
                                                                                         want)
        if not same:
            tmp = path.with_suffix(".tmp")
            want.tofile(tmp)
            tmp.replace(path)
    return bin_dir
