"""Batches in memory, by rank: the streaming tokenizing loader of upstream nanochat/dataloader.py.

Each rank reads its row groups, tokenizes documents in chunks with tiktoken (threads), puts a BOS token in
front of every document, concatenates everything into one stream and cuts it into batches of B·T+1
tokens: x = tokens[:-1], y = tokens[1:], viewed (B, T); consecutive batches do not overlap.

The bench's fix to upstream's sharding: row groups are numbered GLOBALLY across the files of a split
and rank r takes r, r+W, r+2W, … (`assign_row_groups`), so ranks stride across file boundaries and
a split works for any W up to its total number of row groups. Upstream strides inside each file, so
with W above a file's row-group count some ranks get nothing and spin forever while the others hang in
the next collective. Here the split is checked before the first batch (`check_shares`): when some rank
would get no row group with rows (too few row groups, or only empty ones) every rank raises the same
DataError at once, from the footers alone. A shard without a `text` column or with a damaged page is a
DataError naming the file (and row group), not a KeyError or a decompression error. The train stream
wraps around (epochs); a fresh loader on the same split gives the same batches (the trainer builds one
per evaluation).

`data_bin_dir` selects the NanoGPT/NNTile format instead: `train.bin`/`val.bin`, a flat uint16 token
stream read through np.memmap; windows of B·T+1 tokens are dealt to ranks round-robin.

Resuming (`state`): the loader keeps a dict up to date with the global number of the row group (or
window) its last batch came from; the trainer saves rank 0's in the checkpoint, as upstream. A loader
given such a dict starts from it, on every rank, in rounds of W: a .bin loader re-reads the round of
that window (exact: the trainer had fetched that batch but not trained on it); a parquet loader starts at
the next round of row groups, skipping the rest of the current one (upstream's approximate resume).
"""

from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from bench.errors import DataError
from bench.nanochat import dataset
from bench.contract import ENV_VAL_FILES_K
from bench.nanochat.sharding import assign_row_groups, starved_ranks, workable_val_files_k_rows


def _file_span(files: list[Path]) -> str:
    names = [p.name for p in files]
    return ", ".join(names) if len(names) <= 3 else f"{names[0]} … {names[-1]}"


def _hint(total: int, all_rows: list[list[int]], world_size: int, k: int) -> str:
    fix = workable_val_files_k_rows(all_rows, world_size)
    return (f"set {ENV_VAL_FILES_K}={fix} (now {k})" if fix is not None and fix != k else
            f"add shards ({dataset.FIX_DATA}) or run on at most {total} ranks")


def check_shares(split: str, files: list[Path], rows: list[list[int]], world_size: int,
                 all_rows: list[list[int]], k: int) -> None:
    """DataError unless every rank's row groups hold rows; the message names the ranks, the empty row
    groups and the K (or the shards or ranks) that would work. Every rank calls it with the same footers,
    so all reach the same verdict without a collective."""
    starved = starved_ranks(rows, world_size)
    if not starved:
        return
    total = sum(len(r) for r in rows)
    where = f"{total} row group(s) in {len(files)} file(s) ({_file_span(files)})"
    if total < world_size:
        raise DataError(f"{split} split has {where} but {world_size} ranks need at least one each; "
                        f"{_hint(total, all_rows, world_size, k)}")
    counts = [len(r) for r in rows]
    empty = [f"{files[f].name} row group {rg}"
             for r in starved[:3] for f, rg in assign_row_groups(counts, r, world_size)]
    who = f"rank {starved[0]}" if len(starved) == 1 else \
        "ranks " + ", ".join(map(str, starved[:8])) + (" …" if len(starved) > 8 else "")
    raise DataError(f"{split} split has {where}, but {who} of {world_size} would get only row groups "
                    f"without rows ({'; '.join(empty[:6])}{' …' if len(empty) > 6 else ''}) and wait for ever; "
                    f"{_hint(total, all_rows, world_size, k)}")


# ----------------------------------------------------------------------------------------------
# The parquet loader


def _to_device(tokens, B: int, T: int, device):
    """(x, y) on device; pinned memory and non_blocking copies when it is a GPU (upstream)."""
    cuda = torch.device(device).type == "cuda"
    if isinstance(tokens, torch.Tensor):
        buf = tokens.pin_memory() if cuda else tokens
    else:
        buf = torch.tensor(tokens, dtype=torch.long, pin_memory=cuda)
    x, y = buf[:-1].view(B, T), buf[1:].view(B, T)
    return x.to(device, non_blocking=cuda), y.to(device, non_blocking=cuda)


def _documents(files: list[Path], assignment: list[tuple[int, int]], start: int = 0) -> Iterator[tuple[int, list[str]]]:
    """(round, texts) of the assigned row groups in order from round `start`, then forever from the first
    (each pass is an epoch); round i is the rank's i-th row group."""
    while True:
        open_idx, pf = -1, None
        for i in range(start, len(assignment)):
            f, rg = assignment[i]
            if f != open_idx:  # assignment is sorted by file: one open file at a time
                open_idx, pf = f, dataset.open_shard(files[f])
            yield i, dataset.read_texts(pf, files[f], rg)  # DataError naming file and row group if damaged
        start = 0


def tokenizing_distributed_data_loader(B: int, T: int, files: list[Path], assignment: list[tuple[int, int]],
                                       tokenizer_threads: int, tokenizer_batch_size: int, device, rank: int,
                                       world_size: int, state: dict | None):
    """Yield (x, y) int64 (B, T) batches from this rank's row groups (already checked non-empty)."""
    from bench.nanochat.tokenizer import get_tokenizer

    tokenizer = get_tokenizer()
    bos = tokenizer.get_bos_token_id()
    needed = B * T + 1  # the +1 is only ever a target: batches do not overlap
    state = {} if state is None else state
    start = state["row_group"] // world_size + 1 if "row_group" in state else 0  # the next round (approximate)
    buffer: list[int] = []
    for i, docs in _documents(files, assignment, start % max(1, len(assignment))):
        for j in range(0, len(docs), tokenizer_batch_size):
            for ids in tokenizer.encode(docs[j:j + tokenizer_batch_size], prepend=bos, num_threads=tokenizer_threads):
                buffer.extend(ids)
            state["row_group"] = rank + i * world_size  # global number of the row group being read
            while len(buffer) >= needed:
                tokens = buffer[:needed]
                del buffer[:needed]  # one memmove in C, unlike popping a deque token by token
                yield _to_device(tokens, B, T, device)


# ----------------------------------------------------------------------------------------------
# The NanoGPT/NNTile .bin loader


def bin_data_loader(path: Path, B: int, T: int, rank: int, world_size: int, device="cpu",
                    state: dict | None = None):
    """(x, y) from a flat uint16 token file: window w = tokens [w·(B·T+1), (w+1)·(B·T+1)), rank r takes r, r+W, …"""
    tokens = np.memmap(path, dtype=np.uint16, mode="r")
    needed = B * T + 1
    windows = len(tokens) // needed
    state = {} if state is None else state
    first = (state["window"] // world_size) * world_size + rank if "window" in state else rank  # the same round
    if first >= windows:
        first = rank
    while True:
        for w in range(first, windows, world_size):
            state["window"] = w
            window = torch.from_numpy(tokens[w * needed:(w + 1) * needed].astype(np.int64))
            yield _to_device(window, B, T, device)
        first = rank


def _bin_split(data_bin_dir: str, split: str, B: int, T: int, world_size: int) -> Path:
    path = Path(data_bin_dir) / f"{split}.bin"
    if not path.is_file():
        raise DataError(f"no {split} token file at {path}; --data_bin_dir needs train.bin and val.bin "
                        f"(flat uint16 token streams, NanoGPT format)")
    windows = path.stat().st_size // 2 // (B * T + 1)
    if windows < world_size:
        raise DataError(f"{path} holds {windows} window(s) of B*T+1 = {B * T + 1} tokens but {world_size} ranks "
                        f"need at least one each; use a larger file, smaller B or T, or at most {windows} ranks")
    return path


# ----------------------------------------------------------------------------------------------
# Entry point


def build_loader(B: int, T: int, split: str, device="cpu", rank: int = 0, world_size: int = 1,
                 data_bin_dir: str = "", tokenizer_threads: int = 4, tokenizer_batch_size: int = 128,
                 state: dict | None = None):
    """Check the split now (same DataError on every rank), then return the iterator of (x, y) batches.

    `state`: a dict the loader keeps its position in; given one saved from another loader of the same
    split, it resumes from there (see the module docstring)."""
    if split not in dataset.SPLITS:
        raise DataError(f"unknown split {split!r}; valid: {', '.join(dataset.SPLITS)}")
    if data_bin_dir:
        path = _bin_split(data_bin_dir, split, B, T, world_size)
        return bin_data_loader(path, B, T, rank, world_size, device, state)
    from bench.nanochat.tokenizer import get_tokenizer

    get_tokenizer()  # a missing tokenizer fails here, not at the first batch
    k = dataset.resolve_val_files_k()
    files = dataset.split_files(split, k)
    rows = dataset.row_group_rows(files)  # parquet footers only; val files are few, re-read per evaluation
    if starved_ranks(rows, world_size):  # read every footer only to suggest a K that works
        check_shares(split, files, rows, world_size, dataset.row_group_rows(dataset.list_parquet_files()), k)
    assignment = assign_row_groups([len(r) for r in rows], rank, world_size)
    return tokenizing_distributed_data_loader(B, T, files, assignment, tokenizer_threads,
                                              tokenizer_batch_size, device, rank, world_size, state)
