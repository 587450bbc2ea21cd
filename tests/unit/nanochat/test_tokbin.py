"""`nanochat-bench data bin`: the shards as flat uint16 token files, with what made them beside them.

    python -m pytest tests/unit/nanochat/test_tokbin.py -q
"""

import errno
import json

import numpy as np
import pytest
import torch

from bench.cli import main
from bench.nanochat import dataset, tokbin
from bench.nanochat.dataloader import build_loader
from bench.nanochat.tokenizer import get_token_bytes, get_tokenizer


@pytest.fixture
def bins(base_dir_env, tmp_path):
    out = tmp_path / "bins"
    assert main(["data", "bin", "--out", str(out)]) == 0
    return out


def test_bins_hold_every_document_after_a_bos(bins):
    tok = get_tokenizer()
    bos = tok.get_bos_token_id()
    for split in dataset.SPLITS:
        tokens = np.fromfile(bins / f"{split}.bin", dtype=np.uint16).tolist()
        docs = [d for batch in dataset.parquets_iter_batched(split) for d in batch]
        expected = [t for doc in docs for t in [bos, *tok.encode(doc)]]
        assert tokens == expected
    meta = json.loads((bins / "meta.json").read_text())
    assert meta["tokenizer"] == "nanochat" and meta["vocab_size"] == tok.get_vocab_size()
    assert meta["splits"]["val"]["tokens"] == len(np.fromfile(bins / "val.bin", dtype=np.uint16))
    assert meta["splits"]["val"]["files"] == [p.name for p in dataset.split_files("val")]
    from bench.nanochat.data_origin import data_identity

    assert meta["origin"] == "generated" and meta["tokenizer_sha256"] == data_identity()["tokenizer_sha256"]


def test_token_bytes_are_the_tokenizers(bins):
    assert np.array_equal(tokbin.token_bytes(bins), get_token_bytes().numpy())


def test_max_tokens_cuts_each_split(base_dir_env, tmp_path):
    out = tokbin.write_bins(tmp_path / "small", max_tokens=1000)
    assert all((out / f"{s}.bin").stat().st_size == 2000 for s in dataset.SPLITS)
    assert tokbin.read_meta(out)["splits"]["train"]["tokens"] == 1000


def test_the_loader_reads_them_and_the_trainer_takes_their_vocabulary(bins):
    x, y = next(build_loader(2, 16, "train", data_bin_dir=str(bins)))
    assert torch.equal(x[0, 1:], y[0, :-1])
    tok, token_bytes, vocab, source = tokbin.vocabulary(str(bins))
    assert tok is not None and vocab == tok.get_vocab_size() and torch.equal(token_bytes, get_token_bytes())
    assert "meta.json" in source


def test_a_bin_of_another_tokenizer_gives_its_vocabulary_and_no_samples(bins):
    meta = tokbin.read_meta(bins)
    (bins / "meta.json").write_text(json.dumps({**meta, "tokenizer": "gpt2", "vocab_size": 50257}))
    tok, token_bytes, vocab, _ = tokbin.vocabulary(str(bins))
    assert tok is None and vocab == 50257 and token_bytes is not None


def test_bins_made_elsewhere_have_no_bpb(bins):
    (bins / "meta.json").unlink()
    (bins / "token_bytes.npy").unlink()
    tok, token_bytes, vocab, source = tokbin.vocabulary(str(bins))
    assert token_bytes is None and vocab == get_tokenizer().get_vocab_size() and "no bpb" in source


def test_gpt2_offline_is_one_clear_error(base_dir_env, tmp_path, monkeypatch, capsys):
    """tiktoken downloads GPT-2's files unless cached: with an empty cache and no way out, a DataError."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty-cache"))
    for var in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")  # the discard port: refused at once, never a hang
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    assert main(["data", "bin", "--tokenizer", "gpt2", "--out", str(tmp_path / "g")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: --tokenizer gpt2: GPT-2's BPE files are not available offline")
    assert not (tmp_path / "g" / "train.bin").exists()


def test_an_out_that_cannot_be_written_is_one_line(base_dir_env, tmp_path, capsys):
    """--out naming a file (or a place that cannot be made) was a FileExistsError traceback."""
    in_the_way = tmp_path / "a-file"
    in_the_way.write_text("kept\n")
    assert main(["data", "bin", "--out", str(in_the_way)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: data bin: cannot write into {in_the_way}") and "--out" in err[0]
    assert in_the_way.read_text() == "kept\n"


@pytest.mark.parametrize("code, reason", [(errno.ENOSPC, "No space left on device"),
                                          (errno.EROFS, "Read-only file system"), (errno.EACCES, "Permission denied")])
def test_an_out_that_cannot_be_written_is_told_to_free_space_only_when_full(base_dir_env, tmp_path, monkeypatch,
                                                                            capsys, code, reason):
    """Every error writing the .bin files advised "a writable directory with free space", free space also on a
    read-only filesystem or without permission, where no freed space helps."""
    def write_fails(*args, **kwargs):
        raise OSError(code, reason)
    monkeypatch.setattr(tokbin, "_write_split", write_fails)
    assert main(["data", "bin", "--out", str(tmp_path / "bins")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and reason in err[0] and "give --out another directory" in err[0], err
    assert ("free space" in err[0]) == (code == errno.ENOSPC), err


def test_a_run_that_fails_part_way_replaces_nothing(base_dir_env, tmp_path, monkeypatch):
    """A damaged val shard found after train.bin was written: the directory keeps the last run's files, all of
    them, never a new train.bin beside the old val.bin and meta.json."""
    out = tokbin.write_bins(tmp_path / "bins", max_tokens=1000)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    reads = dataset.parquets_iter_batched

    def damaged_val(split, *args, **kwargs):
        if split == "val":
            raise tokbin.DataError("shard_00002.parquet: row group 0 cannot be read")
        return reads(split, *args, **kwargs)
    monkeypatch.setattr(dataset, "parquets_iter_batched", damaged_val)
    with pytest.raises(tokbin.DataError, match="row group 0 cannot be read"):
        tokbin.write_bins(out)  # no --max-tokens: every file would differ from the first run's
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_bins_of_a_tokenizer_retrained_since_give_no_samples(tiny_base_dir, tmp_path, monkeypatch):
    """The tokenizer trained again (another vocabulary) after `data bin`: its ids would not fit the model the
    .bin files size, so the trainer gets no tokenizer for samples, only the files' own vocabulary and bytes."""
    import shutil

    from bench.nanochat import tokenizer

    base = tmp_path / "base"
    shutil.copytree(tiny_base_dir, base)
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(base))
    monkeypatch.delenv("NANOCHAT_VAL_FILES_K", raising=False)
    out = tokbin.write_bins(tmp_path / "bins")
    tokenizer.train_tokenizer(vocab_size=640)
    tok, token_bytes, vocab, source = tokbin.vocabulary(str(out))
    assert tok is None and vocab == tokbin.read_meta(out)["vocab_size"] != 640 and token_bytes is not None
    assert "another nanochat tokenizer" in source


def test_a_run_stopped_before_meta_json_is_written_replaces_nothing(base_dir_env, tmp_path, monkeypatch):
    """Ctrl-C (or a failure) after the splits are tokenized but before meta.json is written: the directory keeps
    the last run's files, never new .bin files beside the old meta.json (another vocabulary, other tokens)."""
    from bench.nanochat import data_origin

    out = tokbin.write_bins(tmp_path / "bins", max_tokens=1000)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(data_origin, "data_identity", interrupted)
    with pytest.raises(KeyboardInterrupt):
        tokbin.write_bins(out)  # no --max-tokens: every .bin would differ from the first run's
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_each_split_shows_its_row_groups_as_they_are_tokenized(base_dir_env, tmp_path, monkeypatch, capsys):
    """240 shards take tens of minutes to tokenize: the command said nothing until it was done."""
    import sys

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # at a terminal (a job's log gets no bar)
    assert main(["data", "bin", "--out", str(tmp_path / "bins")]) == 0
    err = capsys.readouterr().err.replace("\r", "\n")
    for split in dataset.SPLITS:
        groups = sum(dataset.row_group_counts(dataset.split_files(split)))
        assert any(line.startswith(f"{split}.bin:") and f"/{groups} [" in line for line in err.splitlines()), err


def test_bins_whose_token_bytes_count_raw_bytes_are_refused(bins):
    """.bin files made before token_bytes counted as upstream does (each token decoded alone) were read as they were,
    so their bpb counted raw token bytes where the parquet shards' counted upstream's; refused in one line."""
    from bench.errors import DataError
    from bench.nanochat.tokenizer import raw_byte_lengths

    np.save(bins / tokbin.TOKEN_BYTES_NPY, np.asarray(raw_byte_lengths(get_tokenizer().enc), dtype=np.int32))
    with pytest.raises(DataError, match=r"^\S+/token_bytes\.npy counts each token's raw bytes.*"
                                        r"`nanochat-bench data bin` again$"):
        tokbin.vocabulary(str(bins))
