"""Shards that are there but wrong: no `text` column, a corrupt page, a row group without rows.

    python -m pytest tests/unit/data/test_damaged_shards.py -q

Each ends the run as `no_data` (a DataError) naming the file and row group, never a KeyError, a ZSTD
OSError or a hang; the empty-row-group verdict is reached by every rank alike from the footers alone,
so no rank waits in a collective for one that spins on nothing.
"""

import itertools
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.errors import DataError
from bench.nanochat import corpus, dataset
from bench.nanochat.dataloader import build_loader


@pytest.fixture
def base(tiny_base_dir, tmp_path, monkeypatch):
    """A base dir with the tiny tokenizer and copies of the tiny shards, to be damaged by the test."""
    root = tmp_path / "base"
    shutil.copytree(tiny_base_dir / "tokenizer", root / "tokenizer")
    shutil.copytree(tiny_base_dir / "base_data", root / "base_data")
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(root))
    monkeypatch.delenv("NANOCHAT_VAL_FILES_K", raising=False)
    return root / "base_data"


def take(loader, n):
    return list(itertools.islice(loader, n))


def corrupt(path, row_group):
    chunk = pq.ParquetFile(path).metadata.row_group(row_group).column(0)
    with open(path, "r+b") as f:
        f.seek(chunk.data_page_offset + chunk.total_compressed_size // 2)
        f.write(b"\xff" * 64)


def test_a_shard_without_a_text_column_names_the_file(base):
    pq.write_table(pa.table({"content": corpus.documents(32, seed=1)}), base / "shard_00000.parquet", row_group_size=16)
    for rank in (0, 1):
        with pytest.raises(DataError, match=r"shard_00000\.parquet has no 'text' column \(columns: content\)"):
            build_loader(2, 32, "train", rank=rank, world_size=2)
    with pytest.raises(DataError, match=r"shard_00000\.parquet has no 'text' column"):
        next(dataset.parquets_iter_batched("train"))


def test_a_text_column_that_is_not_text_names_its_type(base):
    pq.write_table(pa.table({"text": pa.array(range(32), type=pa.int64())}), base / "shard_00001.parquet")
    with pytest.raises(DataError, match=r"shard_00001\.parquet: column 'text' holds int64, not strings"):
        build_loader(2, 32, "train")


def test_a_corrupt_page_names_file_and_row_group(base):
    corrupt(base / "shard_00000.parquet", 3)  # global row group 3: rank 1's second, rank 0 never reads it
    assert len(take(build_loader(2, 32, "train", rank=0, world_size=2), 200)) == 200
    with pytest.raises(DataError, match=r"shard_00000\.parquet: row group 3 of 16 cannot be read \(.*ZSTD"):
        take(build_loader(2, 32, "train", rank=1, world_size=2), 10_000)
    with pytest.raises(DataError, match=r"row group 3 of 16"):
        list(dataset.parquets_iter_batched("train"))


def string_array_of_bytes(docs: list[bytes]) -> pa.Array:
    """A string column holding these raw bytes, valid UTF-8 or not (pyarrow does not check)."""
    offsets = pa.array([0] + list(itertools.accumulate(map(len, docs))), type=pa.int32())
    return pa.Array.from_buffers(pa.string(), len(docs), [None, offsets.buffers()[1], pa.py_buffer(b"".join(docs))])


def test_invalid_utf8_names_file_and_row_group(base, capsys):
    """Issue 23: invalid UTF-8 in a shard was a UnicodeDecodeError traceback naming neither file nor row group."""
    from bench.cli import main

    docs = [d.encode() for d in corpus.documents(32, seed=5)]
    docs[20] = docs[20][:50] + b"\xff\xfe" + docs[20][50:]  # row 20: row group 1 of rows 16-31
    path = base / "shard_00000.parquet"
    pq.write_table(pa.table({"text": string_array_of_bytes(docs)}), path, row_group_size=16)
    with pytest.raises(DataError, match=r"shard_00000\.parquet: row group 1 of 2 holds text that is not valid "
                                        r"UTF-8 \(byte 0xff at offset 50 of a document\)"):
        list(dataset.parquets_iter_batched("train"))
    assert main(["tokenizer", "train", "--vocab_size", "300"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "shard_00000.parquet: row group 1 of 2 holds text that is not valid UTF-8" in err[0]


def write_val_with_empty_row_group(path):
    """4 row groups; the third has no rows: at 4 ranks rank 2 would read nothing, for ever."""
    docs = corpus.documents(24, seed=7)
    with pq.ParquetWriter(path, pa.schema([("text", pa.string())])) as w:
        for chunk in (docs[:8], docs[8:16], [], docs[16:]):
            w.write_table(pa.table({"text": pa.array(chunk, type=pa.string())}))


def test_every_rank_refuses_a_split_where_one_rank_gets_only_empty_row_groups(base):
    write_val_with_empty_row_group(base / "shard_00002.parquet")
    messages = set()
    for rank in range(4):
        with pytest.raises(DataError) as e:
            build_loader(2, 32, "val", rank=rank, world_size=4)
        messages.add(str(e.value))
    assert len(messages) == 1  # the same verdict on every rank, from the footers alone
    message = messages.pop()
    assert "rank 2" in message and "shard_00002.parquet row group 2" in message
    assert "NANOCHAT_VAL_FILES_K=2 (now 1)" in message


def test_empty_row_groups_are_fine_while_every_rank_has_rows(base):
    write_val_with_empty_row_group(base / "shard_00002.parquet")
    for rank in (0, 1):  # 2 ranks: rank 0 reads row groups 0 and 2 (empty), rank 1 reads 1 and 3
        assert len(take(build_loader(2, 32, "val", rank=rank, world_size=2), 50)) == 50
