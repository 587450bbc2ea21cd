"""Shard files: generation, listing, the train/val split.  python -m pytest tests/unit/nanochat/test_dataset.py -q"""

import sys

import pyarrow.parquet as pq
import pytest

from bench.errors import ConfigError, DataError
from bench.nanochat import corpus, dataset


def test_generate_writes_upstream_layout(tmp_path):
    paths = dataset.generate_shards(2, docs_per_shard=40, row_group_size=16, out_dir=tmp_path)
    assert [p.name for p in paths] == ["shard_00000.parquet", "shard_00001.parquet"]
    assert not list(tmp_path.glob("*.tmp"))
    pf = pq.ParquetFile(paths[0])
    assert pf.schema_arrow.names == ["text"]
    assert [pf.metadata.row_group(i).num_rows for i in range(pf.num_row_groups)] == [16, 16, 8]
    docs = pf.read().column("text").to_pylist()
    assert len(set(docs)) == 40 and all(len(d) > 100 for d in docs)


def test_generate_is_reproducible_and_shards_differ(tmp_path):
    a = dataset.generate_shards(2, 8, out_dir=tmp_path / "a")
    b = dataset.generate_shards(2, 8, out_dir=tmp_path / "b")
    read = lambda p: pq.read_table(p).column("text").to_pylist()  # noqa: E731
    assert read(a[0]) == read(b[0]) and read(a[1]) == read(b[1])
    assert read(a[0]) != read(a[1])


def test_generate_counts_its_shards_on_a_bar_at_a_terminal(tmp_path, monkeypatch, capsys):
    """Hundreds of shards took minutes without a word; `data download` counts its shards on a bar."""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # at a terminal (a job's log gets no bar)
    dataset.generate_shards(3, 8, out_dir=tmp_path)
    bars = capsys.readouterr().err.replace("\r", "\n").splitlines()
    assert any(line.startswith("generate:") and "/3 [" in line and "shard" in line for line in bars)


def test_generate_prints_no_bar_into_a_log(tmp_path, capsys):
    dataset.generate_shards(3, 8, out_dir=tmp_path)
    assert capsys.readouterr().err == ""


def test_generate_rejects_bad_sizes(tmp_path):
    with pytest.raises(ConfigError, match="--docs-per-shard=0"):
        dataset.generate_shards(1, 0, out_dir=tmp_path)


def test_generate_refuses_more_shards_than_names_sort(tmp_path):
    """shard_100000 would sort before shard_10001 (names have 5 digits), and 10**8 shards sat for minutes
    building their list before writing anything."""
    with pytest.raises(ConfigError, match=r"--shards=100000000: at most 100000"):
        dataset.generate_shards(10**8, 1, out_dir=tmp_path)
    assert not list(tmp_path.iterdir())


def test_generate_takes_a_row_group_larger_than_any_shard(tmp_path):
    """A row group beyond the shard's documents is the whole shard, however large the number (pyarrow takes
    it as a C long: 10**21 was an OverflowError traceback)."""
    paths = dataset.generate_shards(1, 5, row_group_size=10**21, out_dir=tmp_path)
    assert pq.ParquetFile(paths[0]).metadata.num_row_groups == 1


def test_a_shard_is_written_one_row_group_at_a_time(tmp_path):
    """Documents are drawn as each row group is written: the first group is in the file before the documents
    of the third are asked for (a shard of any --docs-per-shard no longer sits whole in memory)."""
    flushed = []

    def docs():
        for i, doc in enumerate(corpus.iter_documents(seed=0)):
            if i == 8:  # the third group's first document: the writer must have flushed the first group
                flushed.append(next(tmp_path.glob(".s.parquet.*.tmp")).stat().st_size)
            if i == 10:
                return
            yield doc
    dataset.write_shard(tmp_path / "s.parquet", docs(), row_group_size=4)
    assert flushed and flushed[0] > 4  # more than the magic bytes: a row group's pages are on disk
    pf = pq.ParquetFile(tmp_path / "s.parquet")
    assert [pf.metadata.row_group(i).num_rows for i in range(pf.num_row_groups)] == [4, 4, 2]
    assert pf.read().column("text").to_pylist() == corpus.documents(10, seed=0)


def test_corpus_documents_are_offline_text():
    docs = corpus.documents(50, seed=3)
    assert docs == corpus.documents(50, seed=3)
    assert any("def " in d for d in docs) and any(" the " in d for d in docs)  # code and prose
    assert 1000 < sum(map(len, docs)) / len(docs) < 10000  # FineWeb-like document length


def test_listing_is_sorted_and_ignores_partial_files(tmp_path):
    for name in ["shard_00002.parquet", "shard_00000.parquet", "shard_00001.parquet.tmp", "shard_00001.parquet"]:
        (tmp_path / name).write_bytes(b"")
    assert [p.name for p in dataset.list_parquet_files(tmp_path)] == [
        "shard_00000.parquet", "shard_00001.parquet", "shard_00002.parquet"]
    assert dataset.list_parquet_files(tmp_path / "missing") == []


@pytest.fixture
def five_files(tmp_path, monkeypatch):
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    monkeypatch.delenv("NANOCHAT_VAL_FILES_K", raising=False)
    (tmp_path / "base_data").mkdir()
    for i in range(5):
        (tmp_path / "base_data" / dataset.shard_name(i)).write_bytes(b"")
    return tmp_path


def test_split_val_is_last_k_files(five_files, monkeypatch):
    names = lambda split, k=None: [p.name[6:11] for p in dataset.split_files(split, k)]  # noqa: E731
    assert names("val") == ["00004"] and names("train") == ["00000", "00001", "00002", "00003"]
    assert names("val", 3) == ["00002", "00003", "00004"] and names("train", 3) == ["00000", "00001"]
    monkeypatch.setenv("NANOCHAT_VAL_FILES_K", "2")
    assert names("val") == ["00003", "00004"]


def test_split_needs_a_training_file(five_files):
    with pytest.raises(DataError, match=r"5 shard file\(s\) in .*base_data.*NANOCHAT_VAL_FILES_K=5.*data generate"):
        dataset.split_files("train", 5)


def test_a_k_too_large_names_the_values_that_would_do(five_files):
    """'or lower NANOCHAT_VAL_FILES_K' said nothing of the values the shards there allow (1 to their count - 1)."""
    for k, shards, valid in ((5, 5, "set NANOCHAT_VAL_FILES_K to 1 to 4 for these 5"),
                             (3, 2, "set NANOCHAT_VAL_FILES_K to 1 for these 2"), (1, 1, None)):
        for extra in sorted((five_files / "base_data").iterdir())[shards:]:
            extra.unlink()
        with pytest.raises(DataError) as e:
            dataset.split_files("train", k)
        assert str(e.value).endswith(f"with N >= {k + 1}" + (f", or {valid}" if valid else ""))


def test_split_rejects_bad_k_and_split(five_files, monkeypatch):
    monkeypatch.setenv("NANOCHAT_VAL_FILES_K", "two")
    with pytest.raises(DataError, match="NANOCHAT_VAL_FILES_K='two'"):
        dataset.split_files("val")
    with pytest.raises(ConfigError, match="at least 1"):
        dataset.split_files("val", 0)
    with pytest.raises(ConfigError, match="valid: train, val"):
        dataset.split_files("test", 1)


@pytest.mark.parametrize("value", ["0", "-2", "abc"])
def test_a_bad_val_files_k_in_a_rank_ends_the_run_no_data_as_a_k_too_large(five_files, monkeypatch, value):
    """NANOCHAT_VAL_FILES_K=0, -2 or abc in a rank was a ConfigError, so the run ended `failed` where a K too large
    for the shards ends `no_data`; the one line names the variable, the value and what is valid."""
    from bench.runside.runrecord import classify_failure

    monkeypatch.setenv("NANOCHAT_VAL_FILES_K", value)
    with pytest.raises(DataError) as e:
        dataset.resolve_val_files_k()
    assert str(e.value) == (f"NANOCHAT_VAL_FILES_K={value!r} is not a number of validation files; use a whole "
                            f"number >= 1 and below the number of shard files (unset: 1)")
    assert classify_failure(e.value).kind == "no_data"


def test_parquets_iter_batched_strides_row_groups(base_dir_env):
    val = list(dataset.parquets_iter_batched("val"))
    assert len(val) == 16 and all(len(rg) == 16 for rg in val)
    assert list(dataset.parquets_iter_batched("val", start=1, step=4)) == val[1::4]
    assert len(list(dataset.parquets_iter_batched("train"))) == 32


def test_unreadable_shard_is_named(tmp_path):
    bad = tmp_path / "shard_00000.parquet"
    bad.write_bytes(b"not parquet")
    with pytest.raises(DataError, match="shard_00000.parquet is not a readable parquet file"):
        dataset.row_group_counts([bad])


# ----------------------------------------------------------------------------------------------
# A shard is never replaced without saying so (issue 23: `data generate` over downloaded shards, rc 0)


def downloaded_like(directory, n=2):
    """Shards as `data download` leaves them: no footer mark of ours, listed in sources.json."""
    from bench.nanochat import data_origin

    paths = []
    for i in range(n):
        path = directory / dataset.shard_name(i)
        dataset.write_shard(path, corpus.documents(8, seed=100 + i), row_group_size=4)
        data_origin.record_downloaded(path, f"https://mirror.example/{path.name}")
        paths.append(path)
    return paths


def test_generate_refuses_to_replace_downloaded_shards(tmp_path, monkeypatch, capsys):
    from bench.cli import main
    from bench.nanochat import data_origin

    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    paths = downloaded_like(tmp_path / "base_data")
    before = [p.read_bytes() for p in paths]
    assert main(["data", "generate", "--shards", "3", "--docs-per-shard", "8"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "already holds shard_00000.parquet, shard_00001.parquet (downloaded)" in err[0] and "--overwrite" in err[0]
    assert [p.read_bytes() for p in paths] == before
    assert not (tmp_path / "base_data" / "shard_00002.parquet").exists()  # refused before writing anything
    assert main(["data", "generate", "--shards", "3", "--docs-per-shard", "8", "--overwrite"]) == 0
    assert all(data_origin.shard_origin(p) == "generated" for p in dataset.list_parquet_files())
    assert data_origin.read_sources(tmp_path / "base_data") == {}  # the replaced downloads are not listed any more


def test_generate_keeps_its_own_shards_and_refuses_other_settings(tmp_path):
    first = dataset.generate_shards(2, 8, 4, out_dir=tmp_path)
    stamps = [p.stat().st_mtime_ns for p in first]
    dataset.generate_shards(3, 8, 4, out_dir=tmp_path)  # the same recipe: kept as they are, one added
    assert [p.stat().st_mtime_ns for p in first] == stamps and len(dataset.list_parquet_files(tmp_path)) == 3
    with pytest.raises(DataError, match=r"shard_00000.parquet, shard_00001.parquet, shard_00002.parquet "
                                        r"\(generated with other settings\)"):
        dataset.generate_shards(3, 16, 4, out_dir=tmp_path)
    unknown = tmp_path / "unknown"
    dataset.write_shard(unknown / dataset.shard_name(0), ["copied in by hand " * 20])
    with pytest.raises(DataError, match=r"shard_00000.parquet \(of unknown origin\)"):
        dataset.generate_shards(1, 8, out_dir=unknown)
