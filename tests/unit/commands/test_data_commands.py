"""`nanochat-bench data …` and `tokenizer …` through the CLI's main().

python -m pytest tests/unit/commands/test_data_commands.py -q
"""

import re

import pytest

from bench.cli import main
from bench.nanochat import dataset, tokenizer


def test_generate_train_eval_offline(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    assert main(["data", "generate", "--shards", "3", "--docs-per-shard", "64", "--row-group-size", "8"]) == 0
    assert len(dataset.list_parquet_files()) == 3
    assert main(["data", "info"]) == 0
    out = capsys.readouterr().out
    assert "train: 2 file(s), 16 row group(s) -> at most 16 ranks" in out
    assert "val  : 1 file(s), 8 row group(s) -> at most 8 ranks" in out

    assert main(["tokenizer", "train", "--vocab_size", "300", "--max_chars", "100000"]) == 0
    assert tokenizer.get_tokenizer().get_vocab_size() == 300
    out = capsys.readouterr().out
    chars = int(re.search(r"on ([\d,]+) characters", out).group(1).replace(",", ""))
    assert "is replaced" not in out  # none there before
    assert 100_000 < chars < 100_000 + 10_000  # stops after max_chars, each document capped at doc_cap

    assert main(["tokenizer", "train", "--vocab_size", "280", "--max_chars", "100000"]) == 0
    assert capsys.readouterr().out.startswith(  # a tokenizer replaced silently left checkpoints of another
        f"tokenizer: the 300-token tokenizer in {tmp_path / 'tokenizer'} is replaced once this one is trained;")
    assert tokenizer.get_tokenizer().get_vocab_size() == 280

    assert main(["tokenizer", "eval"]) == 0
    rows = {line.split()[0]: float(line.split()[-1]) for line in capsys.readouterr().out.splitlines()[2:]}
    assert {"zen", "reference", "code", "math", "data-train", "data-val"} <= set(rows)
    assert all(1.0 <= r < 8.0 for r in rows.values())


def test_user_mistakes_are_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    assert main(["tokenizer", "eval"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: no tokenizer at") and "Traceback" not in err
    assert main(["tokenizer", "train", "--vocab_size", "300"]) == 1
    assert "0 shard file(s)" in capsys.readouterr().err
    assert main(["data", "generate", "--shards", "0"]) == 1
    assert "--shards=0: must be >= 1" in capsys.readouterr().err


def test_generate_refuses_a_set_the_split_cannot_use(tmp_path, monkeypatch, capsys):
    """One shard was written, and then the tokenizer and training refused it (K=1 validation + 1 training);
    with K=2, two are one too few. Beside other shards, fewer new ones are enough."""
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    small = ["--docs-per-shard", "16", "--row-group-size", "8"]
    assert main(["data", "generate", "--shards", "1", *small]) == 1
    assert "--shards=1: the split needs NANOCHAT_VAL_FILES_K=1 validation file(s) plus at least 1 training file; " \
           "give --shards >= 2" in capsys.readouterr().err
    assert not list((tmp_path / "base_data").glob("*.parquet"))
    monkeypatch.setenv("NANOCHAT_VAL_FILES_K", "2")
    assert main(["data", "generate", "--shards", "2", *small]) == 1
    assert "give --shards >= 3" in capsys.readouterr().err
    monkeypatch.delenv("NANOCHAT_VAL_FILES_K")
    assert main(["data", "generate", "--shards", "2", *small]) == 0
    assert main(["data", "generate", "--shards", "1", *small]) == 0  # shard 0 again, beside shard 1


def test_a_base_dir_that_is_a_file_is_one_line(tmp_path, monkeypatch, capsys):
    """A file where NANOCHAT_BASE_DIR points was a FileExistsError traceback from every data and tokenizer command."""
    in_the_way = tmp_path / "base"
    in_the_way.write_text("kept\n")
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(in_the_way))
    for argv in (["data", "info"], ["data", "generate", "--shards", "2"], ["tokenizer", "eval"]):
        assert main(argv) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"error: the base directory {in_the_way} (NANOCHAT_BASE_DIR) cannot be used: a file of that "
                       f"name is in the way, not a directory; set NANOCHAT_BASE_DIR to a writable directory"]
    assert in_the_way.read_text() == "kept\n"


def test_tokenizer_train_without_shards_leaves_no_base_dir_behind(tmp_path, monkeypatch, capsys):
    """It failed for want of shards but left an empty NANOCHAT_BASE_DIR made on the way; so did data info."""
    base = tmp_path / "base"
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(base))
    for argv in (["tokenizer", "train", "--vocab_size", "512"], ["data", "info"]):
        assert main(argv) == 1
        assert f"0 shard file(s) in {base / 'base_data'}" in capsys.readouterr().err
        assert not base.exists()
    assert main(["data", "generate", "--shards", "2", "--docs-per-shard", "8"]) == 0  # a writer still makes it
    assert len(list((base / "base_data").glob("*.parquet"))) == 2


def test_a_shard_count_beside_chat_or_the_eval_bundle_is_refused_before_any_download(tmp_path, monkeypatch, capsys):
    """`data download --chat -n 3` staged the whole chat data and never read -n."""
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing may be asked of it
    for what in ("--chat", "--eval-bundle"):
        assert main(["data", "download", what, "-n", "3", "--url", "http://127.0.0.1:9"]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"error: data download: -n counts FineWeb-Edu shards; {what} stages its files whole")
    assert list(tmp_path.iterdir()) == []
    assert main(["data", "download"]) == 1
    assert "--eval-bundle for CORE's eval bundle" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["data", "generate", "--chat", "--shards", "3"],
                                  ["data", "generate", "--eval-bundle", "--docs-per-shard", "64"],
                                  ["data", "generate", "--chat", "--row-group-size", "8"],
                                  ["data", "download", "--chat", "-w", "8", "--url", "http://127.0.0.1:9"],
                                  ["data", "download", "--eval-bundle", "-w", "8", "--url", "http://127.0.0.1:9"]])
def test_a_shards_flag_beside_chat_or_the_eval_bundle_is_refused_not_left_unread(argv, tmp_path, monkeypatch, capsys):
    """`data generate --chat --shards 3` wrote the chat stand-ins and never read --shards."""
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    assert main(argv) == 1
    err = capsys.readouterr().err
    flag = argv[3]
    assert err.startswith(f"error: data {argv[1]}: {flag} is for the pre-training shards; {argv[2]} ")
    assert f"leave out {flag}" in err and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("what", [[], ["--chat"], ["--eval-bundle"]])
@pytest.mark.parametrize("flag, value, says", [("--retries", "0", "--retries 0: must be >= 1"),
                                               ("--timeout", "0", "--timeout 0.0: must be a positive number"),
                                               ("--timeout", "-5", "--timeout -5.0: must be a positive number"),
                                               ("--timeout", "inf", "--timeout inf: must be a positive number")])
def test_download_refuses_retries_and_timeouts_that_make_no_sense_in_every_mode(what, flag, value, says, tmp_path,
                                                                                monkeypatch, capsys):
    """--chat took --retries 0 (a TypeError traceback after no try) and --timeout 0 (requests' ValueError);
    --timeout inf was an OverflowError from the socket in every mode. Nothing is asked of the network first."""
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    n = [] if what else ["-n", "1"]
    assert main(["data", "download", *what, *n, "--url", "http://127.0.0.1:9", flag, value]) == 1
    assert capsys.readouterr().err == f"error: {says}" + (" of seconds\n" if flag == "--timeout" else "\n")


def test_download_without_w_uses_the_downloaders_own_default(tmp_path, monkeypatch, capsys):
    """The command and download_shards each held a default of 4 workers, free to drift apart."""
    import inspect

    from bench.nanochat import download

    asked = {}
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    monkeypatch.setattr(download, "download_shards", lambda n, **kw: asked.update(kw) or [])
    assert main(["data", "download", "-n", "1", "--url", "http://127.0.0.1:9"]) == 0
    assert asked["workers"] == download.WORKERS
    monkeypatch.undo()
    assert inspect.signature(download.download_shards).parameters["workers"].default == download.WORKERS
