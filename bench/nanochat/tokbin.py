"""Pre-tokenized splits: the parquet shards as NanoGPT/NNTile `train.bin` / `val.bin` (flat uint16 tokens).

`write_bins` tokenizes each split with a chosen tokenizer and writes, into one directory:
  train.bin, val.bin    the token streams, uint16, documents back to back
  token_bytes.npy       UTF-8 bytes of every token id (0 for special tokens): the denominator of bits
                        per byte, so a trainer reading the .bin files reports bpb in the units of the
                        tokenizer that made them, not of whatever tokenizer it has at hand
  meta.json             which tokenizer (name, vocabulary size, separator id), how many tokens a split, and
                        the shards' data identity (origin, tokenizer_sha256: bench/nanochat/data_origin.py)
Tokenizers: `nanochat` (ours, $NANOCHAT_BASE_DIR/tokenizer; <|bos|> before each document, as the
nanochat loader does) or `gpt2` (GPT-2's BPE through tiktoken, only where its files are already cached:
tiktoken downloads them otherwise; <|endoftext|> after each document, as NanoGPT's prepare.py).
Each file is written to a temp file; all are renamed into place once every one is written, meta.json last,
so a reader never sees half a split, nor the splits of two runs (a run that fails part-way replaces nothing).
"""

import json
import os
from contextlib import ExitStack
from pathlib import Path

import numpy as np
from tqdm import tqdm

from bench import paths
from bench.errors import ConfigError, DataError, os_reason_and_remedy
from bench.contract import atomic_target
from bench.nanochat.common import get_base_dir

TOKENIZERS = ("nanochat", "gpt2")
META_JSON = "meta.json"
TOKEN_BYTES_NPY = "token_bytes.npy"
MAX_UINT16_VOCAB = 1 << 16


def _gpt2_encoding():
    """tiktoken's GPT-2 encoding, or a DataError when its files are not on this machine."""
    import tiktoken

    try:
        return tiktoken.get_encoding("gpt2")
    except Exception as e:  # noqa: BLE001 - tiktoken raises requests' errors, ValueError, OSError ...
        cache = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR") or "tiktoken's cache"
        raise DataError(f"--tokenizer gpt2: GPT-2's BPE files are not available offline ({type(e).__name__}); "
                        f"put them in {cache} (TIKTOKEN_CACHE_DIR) or use --tokenizer nanochat") from None


def load_tokenizer(name: str):
    """(encode_batch(texts) -> list of id lists, token byte lengths, meta) of a tokenizer by name."""
    from bench.nanochat import tokenizer as tok

    if name == "nanochat":
        ours = tok.get_tokenizer()
        bos = ours.get_bos_token_id()
        meta = {"tokenizer": "nanochat", "tokenizer_path": str(tok.tokenizer_dir()),
                "vocab_size": ours.get_vocab_size(), "separator": "bos_before", "separator_id": bos}
        return (lambda texts: ours.encode(texts, prepend=bos)), tok.token_byte_lengths(ours.enc), meta
    if name == "gpt2":
        enc = _gpt2_encoding()
        eot = enc.eot_token

        def encode(texts):
            return [ids + [eot] for ids in enc.encode_ordinary_batch(texts)]

        meta = {"tokenizer": "gpt2", "vocab_size": enc.n_vocab, "separator": "eot_after", "separator_id": eot}
        return encode, tok.token_byte_lengths(enc), meta
    raise ConfigError(f"--tokenizer {name!r}: valid: {', '.join(TOKENIZERS)}")


def _write_split(path: str, batches, encode, max_tokens: int | None, bar=None) -> int:
    """Tokenize row groups into `path` until they or max_tokens run out; the number of tokens written. `bar`
    counts the row groups done."""
    written = 0
    with open(path, "wb") as f:
        for texts in batches:
            if bar is not None:
                bar.update(1)
            ids = np.fromiter((t for doc in encode(texts) for t in doc), dtype=np.uint16)
            if max_tokens is not None:
                ids = ids[:max_tokens - written]
            f.write(ids.tobytes())
            written += len(ids)
            if max_tokens is not None and written >= max_tokens:
                break
    return written


def write_bins(out_dir: str | os.PathLike | None = None, tokenizer: str = "nanochat",
               max_tokens: int | None = None) -> Path:
    """train.bin, val.bin, token_bytes.npy and meta.json in out_dir (default $NANOCHAT_BASE_DIR/base_data_bin)."""
    from bench.nanochat import dataset
    from bench.nanochat.data_origin import data_identity

    if max_tokens is not None and max_tokens <= 0:
        raise ConfigError(f"--max-tokens={max_tokens}: must be a positive number of tokens")
    encode, token_bytes, meta = load_tokenizer(tokenizer)
    if meta["vocab_size"] > MAX_UINT16_VOCAB:
        raise ConfigError(f"--tokenizer {tokenizer}: {meta['vocab_size']:,} tokens do not fit uint16 "
                          f"(at most {MAX_UINT16_VOCAB:,})")
    out = Path(out_dir) if out_dir else get_base_dir() / paths.BIN_DIR
    k = dataset.resolve_val_files_k()
    splits = {}
    try:
        with ExitStack() as renames:  # each temp file renamed into place when the block ends cleanly, not before
            meta_tmp = renames.enter_context(atomic_target(out / META_JSON))  # entered first: renamed last
            for split in dataset.SPLITS:
                files = dataset.split_files(split, k)
                tmp = renames.enter_context(atomic_target(out / f"{split}.bin"))
                # the row groups on a bar at a terminal: 240 shards take tens of minutes (a job's log gets no bar)
                with tqdm(total=sum(dataset.row_group_counts(files)), unit="row group", desc=f"{split}.bin",
                          leave=False, disable=None) as bar:
                    n = _write_split(tmp, dataset.parquets_iter_batched(split), encode, max_tokens, bar)
                splits[split] = {"tokens": n, "files": [p.name for p in files]}
            with open(renames.enter_context(atomic_target(out / TOKEN_BYTES_NPY)), "wb") as f:
                np.save(f, np.asarray(token_bytes, dtype=np.int32))
            # the shards' identity, so a run on the .bin files can record it too; the tokenizer's hash only for ours
            # (GPT-2's is named by `tokenizer`)
            identity = data_identity()
            if tokenizer != "nanochat":
                identity["tokenizer_sha256"] = None
            record = {**meta, **identity, "splits": splits, "val_files_k": k, "dtype": "uint16"}
            with open(meta_tmp, "w") as f:
                f.write(json.dumps(record, indent=2, sort_keys=True, default=str) + "\n")
    except OSError as e:  # a file in the way of --out, a read-only or full file system
        why = os_reason_and_remedy(e, "give --out another directory")
        raise DataError(f"data bin: cannot write into {out}: {why}") from None
    return out


def read_meta(bin_dir: str | os.PathLike) -> dict:
    """meta.json of a .bin directory, {} when there is none (a file made elsewhere: tokenizer unknown)."""
    try:
        data = json.loads((Path(bin_dir) / META_JSON).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def token_bytes(bin_dir: str | os.PathLike):
    """int32 numpy array of the token byte lengths the .bin files were made with, or None without one."""
    path = Path(bin_dir) / TOKEN_BYTES_NPY
    return np.load(path) if path.is_file() else None


def vocabulary(data_bin_dir: str, device="cpu"):
    """(tokenizer or None, token bytes tensor or None, vocab size, description) for the trainer.

    Without --data_bin_dir: our tokenizer and its token bytes. With it: the vocabulary the .bin files
    were made with (meta.json) and their token_bytes.npy, so bpb is in that tokenizer's bytes; our
    tokenizer only when it made them (it is needed to print samples). Files without meta.json were made
    elsewhere: our tokenizer's vocabulary size, and no bpb (their bytes per token are unknown)."""
    from bench.nanochat.tokenizer import get_token_bytes, get_tokenizer

    if not data_bin_dir:
        ours = get_tokenizer()
        return ours, get_token_bytes(device=device), ours.get_vocab_size(), "nanochat tokenizer"
    import torch

    meta = read_meta(data_bin_dir)
    lengths = token_bytes(data_bin_dir)
    if not meta.get("vocab_size"):
        ours = get_tokenizer()
        return ours, None, ours.get_vocab_size(), f"{data_bin_dir} has no {META_JSON}: tokenizer unknown, no bpb"
    ours, note = None, ""
    if meta.get("tokenizer") == "nanochat":
        from bench.nanochat.data_origin import tokenizer_sha256
        from bench.nanochat.tokenizer import tokenizer_dir

        # ours only if it is the one that made them: another one (retrained since) encodes the sample prompts
        # into ids the model's vocabulary may not have, and decodes its samples into other text
        if meta.get("tokenizer_sha256") in (None, tokenizer_sha256(tokenizer_dir())):
            ours = get_tokenizer()
        else:
            note = f"; made by another nanochat tokenizer than {tokenizer_dir()}'s: no samples"
    if ours is not None and lengths is not None:
        from bench.nanochat.tokenizer import refuse_raw_byte_counts

        # written before `data bin` counted as upstream: their bpb would not be the parquet shards' (check_pair)
        refuse_raw_byte_counts(ours.enc, lengths.tolist(), Path(data_bin_dir) / TOKEN_BYTES_NPY, "data bin")
    tb = torch.from_numpy(lengths).to(device) if lengths is not None else None
    return ours, tb, int(meta["vocab_size"]), \
        f"{meta.get('tokenizer')} tokenizer (from {data_bin_dir}/{META_JSON}){note}"
