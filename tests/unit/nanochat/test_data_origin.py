"""Where shards came from and which tokenizer: what a run records of its data.

    python -m pytest tests/unit/nanochat/test_provenance.py -q
"""

import shutil

from bench.nanochat import corpus, dataset, data_origin, tokenizer


def downloaded(directory, indices):
    for i in indices:
        path = directory / dataset.shard_name(i)
        dataset.write_shard(path, corpus.documents(8, seed=50 + i), row_group_size=4)
        data_origin.record_downloaded(path, f"https://mirror.example/{path.name}")


def test_identity_of_generated_downloaded_and_mixed_shards(tmp_path):
    gen, dl, mixed = tmp_path / "gen", tmp_path / "dl", tmp_path / "mixed"
    dataset.generate_shards(3, 8, 4, out_dir=gen)
    downloaded(dl, range(3))
    downloaded(mixed, [2])
    dataset.generate_shards(2, 8, 4, out_dir=mixed)
    no_tok = tmp_path / "none"
    assert data_origin.data_identity(gen, no_tok) == {"origin": "generated", "tokenizer_sha256": None}
    assert data_origin.data_identity(dl, no_tok)["origin"] == "downloaded"
    assert data_origin.data_identity(mixed, no_tok)["origin"] == "mixed"
    assert data_origin.data_identity(tmp_path / "empty", no_tok)["origin"] is None
    assert data_origin.describe(dataset.list_parquet_files(mixed)) == (
        "mixed: 1 downloaded (shard_00002.parquet); 2 generated (shard_00000.parquet, shard_00001.parquet)")


def test_unknown_or_changed_shards_claim_no_origin(tmp_path):
    downloaded(tmp_path, range(2))
    assert data_origin.data_identity(tmp_path, tmp_path)["origin"] == "downloaded"
    dataset.write_shard(tmp_path / dataset.shard_name(0), corpus.documents(9, seed=1))  # replaced behind our back
    assert data_origin.shard_origin(tmp_path / dataset.shard_name(0)) is None
    assert data_origin.data_identity(tmp_path, tmp_path)["origin"] is None
    assert data_origin.describe(dataset.list_parquet_files(tmp_path)).startswith("unknown: 1 downloaded")


def test_generated_mark_travels_with_the_file(tmp_path):
    (path,) = dataset.generate_shards(1, 8, 4, out_dir=tmp_path / "a")
    copy = tmp_path / "b" / path.name
    copy.parent.mkdir()
    shutil.copy(path, copy)
    assert data_origin.shard_origin(copy) == "generated"
    assert data_origin.recipe(copy) == {"corpus": "offline", "seed": 0, "docs": 8, "row_group_size": 4}


def test_tokenizer_hash_covers_both_files(tmp_path, monkeypatch, tiny_base_dir):
    tok = tmp_path / "tokenizer"
    shutil.copytree(tiny_base_dir / "tokenizer", tok)
    ident = data_origin.data_identity(tiny_base_dir / "base_data", tok)
    assert ident["origin"] == "generated" and len(ident["tokenizer_sha256"]) == 64
    assert ident == data_origin.data_identity(tiny_base_dir / "base_data", tiny_base_dir / "tokenizer")
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    tokenizer.train_tokenizer(vocab_size=300, texts=corpus.documents(50, seed=3), trainer="hf")
    assert data_origin.tokenizer_sha256(tok) not in (None, ident["tokenizer_sha256"])
    (tok / "token_bytes.pt").unlink()
    assert data_origin.tokenizer_sha256(tok) is None
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tiny_base_dir))
    assert data_origin.data_identity() == ident  # defaults: $NANOCHAT_BASE_DIR/base_data and /tokenizer
