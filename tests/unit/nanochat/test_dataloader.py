"""The tokenizing distributed loader and the .bin loader.  python -m pytest tests/unit/nanochat/test_dataloader.py -q"""

import itertools
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from bench.errors import DataError
from bench.nanochat import dataset
from bench.nanochat.dataloader import assign_row_groups, build_loader
from bench.nanochat.tokenizer import get_tokenizer


def take(loader, n):
    return list(itertools.islice(loader, n))


def stream(batches):
    """The token stream batches were cut from: each batch is B*T+1 tokens, x = [:-1], y = [1:]."""
    return [t for x, y in batches for t in x.flatten().tolist() + [y.flatten()[-1].item()]]


def expected_stream(split, rank, world_size):
    """Reference: this rank's row groups in order, each document BOS + tokens, concatenated."""
    tok = get_tokenizer()
    files = dataset.split_files(split)
    out = []
    for f, rg in assign_row_groups(dataset.row_group_counts(files), rank, world_size):
        for doc in pq.ParquetFile(files[f]).read_row_group(rg).column("text").to_pylist():
            out += [tok.get_bos_token_id()] + tok.encode(doc)
    return out


def test_batches_are_shifted_and_do_not_overlap(base_dir_env):
    batches = take(build_loader(2, 32, "train", tokenizer_batch_size=7), 6)
    for x, y in batches:
        assert x.shape == y.shape == (2, 32) and x.dtype == y.dtype == torch.int64
        assert torch.equal(x.flatten()[1:], y.flatten()[:-1])  # rows are slices of one stream
    toks = stream(batches)
    assert toks[0] == get_tokenizer().get_bos_token_id()
    assert toks == expected_stream("train", 0, 1)[:len(toks)]  # consecutive B*T+1 windows, nothing dropped


def test_ranks_read_their_own_row_groups(base_dir_env):
    for rank in range(2):
        toks = stream(take(build_loader(4, 64, "val", rank=rank, world_size=2), 3))
        assert toks == expected_stream("val", rank, 2)[:len(toks)]
    r0, r1 = (stream(take(build_loader(4, 64, "val", rank=r, world_size=2), 1)) for r in range(2))
    assert r0 != r1


def test_validation_batches_are_the_same_every_time(base_dir_env):
    first = take(build_loader(2, 64, "val", rank=1, world_size=2), 4)
    again = take(build_loader(2, 64, "val", rank=1, world_size=2), 4)
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(first, again))


@pytest.fixture
def small_base(tiny_base_dir, tmp_path, monkeypatch):
    """A base dir with the tiny tokenizer and shards of a chosen shape: make(shards, docs, row_group_size)."""
    shutil.copytree(tiny_base_dir / "tokenizer", tmp_path / "tokenizer")
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    monkeypatch.delenv("NANOCHAT_VAL_FILES_K", raising=False)
    return lambda *a: dataset.generate_shards(*a, out_dir=tmp_path / "base_data")


def test_train_split_wraps_around(small_base):
    small_base(2, 4, 2)  # train = 4 documents in 2 row groups
    epoch = expected_stream("train", 0, 1)
    n = 3 * len(epoch) // 65 + 1  # batches for three passes
    toks = stream(take(build_loader(1, 64, "train"), n))
    assert len(toks) == n * 65 and toks[:len(epoch)] == epoch
    assert toks[len(epoch):2 * len(epoch)] == epoch  # second epoch starts over at row group 0


def test_too_few_row_groups_fails_on_every_rank_before_the_first_batch(small_base):
    small_base(4, 4, 2)  # 2 row groups per file: val (K=1) 2, train 6
    messages = set()
    for rank in range(3):
        with pytest.raises(DataError) as e:
            build_loader(2, 16, "val", rank=rank, world_size=3)  # raised by build_loader itself, eagerly
        messages.add(str(e.value))
    assert len(messages) == 1
    msg = messages.pop()
    for part in ["val split", "2 row group(s)", "1 file(s)", "shard_00003.parquet", "3 ranks",
                 "NANOCHAT_VAL_FILES_K=2 (now 1)"]:
        assert part in msg
    with pytest.raises(DataError, match=r"train split has 6 row group\(s\).*7 ranks.*at most 6 ranks"):
        build_loader(2, 16, "train", rank=0, world_size=7)


def test_val_files_k_gives_more_ranks(small_base, monkeypatch):
    small_base(4, 4, 2)
    monkeypatch.setenv("NANOCHAT_VAL_FILES_K", "2")
    for rank in range(3):
        x, _ = next(build_loader(1, 16, "val", rank=rank, world_size=3))
        assert x.shape == (1, 16)


def test_missing_data_and_tokenizer_are_clear(tmp_path, monkeypatch):
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    with pytest.raises(DataError, match="tokenizer train"):
        build_loader(1, 8, "train")
    with pytest.raises(DataError, match="unknown split 'test'"):
        build_loader(1, 8, "test")


# ----------------------------------------------------------------------------------------------
# NanoGPT/NNTile .bin format


@pytest.fixture
def bin_dir(tmp_path):
    (np.arange(1000) % 65536).astype(np.uint16).tofile(tmp_path / "train.bin")
    (np.arange(60000, 60100)).astype(np.uint16).tofile(tmp_path / "val.bin")
    return tmp_path


def test_bin_loader_windows_ranks_and_wrap(bin_dir):
    B, T = 2, 8  # windows of 17 tokens; 1000 tokens -> 58 windows
    x, y = next(build_loader(B, T, "train", data_bin_dir=str(bin_dir)))
    assert x.dtype == torch.int64
    assert torch.equal(x.flatten(), torch.arange(16)) and torch.equal(y.flatten(), torch.arange(1, 17))
    rank1 = build_loader(B, T, "train", rank=1, world_size=4, data_bin_dir=str(bin_dir))
    firsts = [x[0, 0].item() for x, _ in take(rank1, 16)]
    assert firsts[:3] == [17, 5 * 17, 9 * 17]  # rank 1 takes windows 1, 5, 9, …
    assert firsts[15] == 17  # 58 windows: rank 1 has 15 (1..57), then the stream wraps
    vx, _ = next(build_loader(1, 8, "val", data_bin_dir=str(bin_dir)))
    assert vx[0, 0].item() == 60000  # uint16 values above 32767 survive as int64


def test_bin_loader_errors(bin_dir, tmp_path):
    with pytest.raises(DataError, match=r"no val token file at .*val\.bin"):
        build_loader(1, 8, "val", data_bin_dir=str(tmp_path / "nowhere"))
    with pytest.raises(DataError, match=r"val.bin holds 5 window\(s\).*6 ranks"):
        build_loader(2, 8, "val", rank=0, world_size=6, data_bin_dir=str(bin_dir))


# ----------------------------------------------------------------------------------------------
# Resuming from a saved position


def test_bin_loader_resumes_at_the_batch_it_had_fetched(bin_dir):
    """The trainer saves the state after prefetching the next step's batch: resuming re-reads it, exactly,
    on every rank of the round."""
    B, T, W = 2, 8, 2
    states = [{} for _ in range(W)]
    loaders = [build_loader(B, T, "train", rank=r, world_size=W, data_bin_dir=str(bin_dir), state=states[r])
               for r in range(W)]
    last = [take(loader, 5)[-1] for loader in loaders]
    assert states[0] == {"window": 8} and states[1] == {"window": 9}  # the fifth window of each rank
    saved = dict(states[0])  # the trainer keeps rank 0's
    for r in range(W):
        resumed = build_loader(B, T, "train", rank=r, world_size=W, data_bin_dir=str(bin_dir), state=dict(saved))
        x, y = next(resumed)
        assert torch.equal(x, last[r][0]) and torch.equal(y, last[r][1])


def test_parquet_loader_resumes_at_the_next_round_of_row_groups(base_dir_env):
    B, T, W = 2, 16, 2
    state = {}
    loader = build_loader(B, T, "train", rank=0, world_size=W, state=state)
    take(loader, 3)
    g = state["row_group"]
    assert g % W == 0  # rank 0 reads global row groups 0, 2, 4, ...
    for r in range(W):
        resumed_state = dict(state)
        x, _ = next(build_loader(B, T, "train", rank=r, world_size=W, state=resumed_state))
        assert resumed_state["row_group"] == (g // W + 1) * W + r  # the next round: rank r's row group in it
        assert x[0, 0].item() == get_tokenizer().get_bos_token_id()  # a row group starts with a document
