"""A full or read-only disk while writing shards or the tokenizer: one line naming the directory, nothing half-written,
nothing already there lost.  python -m pytest tests/unit/nanochat/test_full_disk.py -q

The full disk is real: a 1 MiB tmpfs mounted for the test (root only; skipped elsewhere) and unmounted after.
"""

import functools
import subprocess
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pyarrow.parquet as pq
import pytest

from bench.cli import main
from bench.nanochat import corpus, dataset, tokenizer
from tests.support.tmpfs import tmpfs


@pytest.fixture
def small_disk(tmp_path):
    with tmpfs(tmp_path / "small") as mnt:
        yield mnt


def fill(directory):
    """Write a filler file until the filesystem has no byte left."""
    with open(directory / "filler", "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass


def test_data_generate_on_a_full_disk_is_one_line(small_disk, monkeypatch, capsys):
    """Issue 23: disk full in `data generate` was a traceback."""
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(small_disk))
    assert main(["data", "generate", "--shards", "8", "--docs-per-shard", "512"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: data generate: cannot write into {small_disk}/base_data")
    assert "No space left on device (disk full)" in err[0] and "NANOCHAT_BASE_DIR" in err[0]
    left = sorted((small_disk / "base_data").iterdir())
    assert all(p.suffix == ".parquet" for p in left)  # no temp file stays behind
    for p in left:
        assert pq.ParquetFile(p).metadata.num_rows == 512  # the shards written before are whole


def test_tokenizer_train_on_a_full_disk_keeps_the_old_pair(small_disk, monkeypatch, capsys):
    """Issue 23: disk full during `tokenizer train` left a new tokenizer.pkl beside the old token_bytes.pt."""
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(small_disk))
    texts = corpus.documents(100, seed=1)
    directory = tokenizer.train_tokenizer(vocab_size=300, texts=texts, trainer="hf")
    before = {p.name: p.read_bytes() for p in directory.iterdir()}
    fill(small_disk)
    with pytest.raises(tokenizer.DataError) as e:
        tokenizer.train_tokenizer(vocab_size=400, texts=texts, trainer="hf")
    assert f"cannot write the tokenizer into {directory}: No space left on device (disk full)" in str(e.value)
    assert "is unchanged" in str(e.value)
    assert {p.name: p.read_bytes() for p in directory.iterdir()} == before  # no staging directory left either
    assert tokenizer.get_tokenizer().get_vocab_size() == 300 and len(tokenizer.get_token_bytes()) == 300
    (small_disk / "filler").unlink()
    tokenizer.train_tokenizer(vocab_size=400, texts=texts, trainer="hf")
    assert len(tokenizer.get_token_bytes()) == tokenizer.get_tokenizer().get_vocab_size() == 400


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        # a client that stopped on its full disk leaves a shard unread: the server's broken pipe is expected
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def test_data_download_on_a_full_disk_is_one_line(small_disk, tmp_path, monkeypatch, capsys):
    """A tiny HTTP server on 127.0.0.1 serves real shards; the disk they go to fills up."""
    mirror = tmp_path / "mirror"
    for i in range(4):
        dataset.write_shard(mirror / dataset.shard_name(i), corpus.documents(256, seed=500 + i), row_group_size=64)
    server = QuietServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(mirror)))
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        monkeypatch.setenv("NANOCHAT_BASE_DIR", str(small_disk))
        (small_disk / "base_data").mkdir()
        fill(small_disk)
        url = f"http://127.0.0.1:{server.server_address[1]}"
        assert main(["data", "download", "-n", "4", "-w", "2", "--url", url]) == 1
    finally:
        server.shutdown()
        server.server_close()
    err = capsys.readouterr().err
    lines = [ln for ln in err.replace("\r", "\n").splitlines() if ln.strip() and not ln.startswith("download:")]
    assert len(lines) == 1 and lines[0].startswith(f"error: data download: cannot write {small_disk}/base_data/shard_")
    assert "No space left on device (disk full)" in lines[0] and "run again to resume" in lines[0]
    assert not list((small_disk / "base_data").glob("*.parquet"))


def test_data_download_into_a_read_only_filesystem_is_one_line(tmp_path, monkeypatch, capsys):
    """base_data/ could not be made on a read-only filesystem: the OSError of mkdir was a traceback."""
    server = QuietServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(tmp_path)))
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        with tmpfs(tmp_path / "ro", "ro,size=1m") as mnt:
            monkeypatch.setenv("NANOCHAT_BASE_DIR", str(mnt))
            url = f"http://127.0.0.1:{server.server_address[1]}"
            assert main(["data", "download", "-n", "2", "--url", url]) == 1
    finally:
        server.shutdown()
        server.server_close()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: data download: cannot write into {mnt}/base_data: ")
    assert "Read-only file system" in err[0] and "NANOCHAT_BASE_DIR" in err[0]


@pytest.mark.parametrize("what", [["--shards", "2", "--docs-per-shard", "8"], ["--chat"], ["--eval-bundle"]])
def test_data_generate_on_a_read_only_filesystem_says_to_write_elsewhere_not_to_free_space(tmp_path, monkeypatch,
                                                                                           capsys, what):
    """The one line said "free space there" for a read-only filesystem too, where no freed space helps."""
    with tmpfs(tmp_path / "ro", "ro,size=1m") as mnt:
        monkeypatch.setenv("NANOCHAT_BASE_DIR", str(mnt))
        assert main(["data", "generate", *what]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Read-only file system" in err[0], err
    assert "NANOCHAT_BASE_DIR to another directory" in err[0] and "free space" not in err[0]


def test_eval_bundle_unpacked_onto_a_full_disk_is_one_line_and_keeps_the_zip(small_disk, tmp_path, monkeypatch,
                                                                               capsys):
    """The zip fits but what it unpacks to does not: an OSError traceback from extractall."""
    import zipfile

    from bench.nanochat import evalgen

    bundle = evalgen.generate(tmp_path / "src" / "eval_bundle", rows=12)
    (bundle / "eval_data" / "padding.bin").write_bytes(b"\0" * (2 << 20))  # deflates to a few KiB
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    with zipfile.ZipFile(mirror / "eval_bundle.zip", "w", zipfile.ZIP_DEFLATED) as z:
        for path in sorted(bundle.rglob("*")):
            z.write(path, path.relative_to(bundle.parent))
    server = QuietServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(mirror)))
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        monkeypatch.setenv("NANOCHAT_BASE_DIR", str(small_disk))
        url = f"http://127.0.0.1:{server.server_address[1]}/eval_bundle.zip"
        assert main(["data", "download", "--eval-bundle", "--url", url]) == 1
    finally:
        server.shutdown()
        server.server_close()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: cannot unpack {small_disk}/eval_bundle.zip into {small_disk}")
    assert "No space left on device (disk full)" in err[0] and "the zip is kept" in err[0]
    assert (small_disk / "eval_bundle.zip").read_bytes() == (mirror / "eval_bundle.zip").read_bytes()
    left = sorted(p.name for p in small_disk.iterdir() if p.name != ".download.lock")  # the lock stays, as for shards
    assert left == ["eval_bundle.zip"]  # no half-unpacked folder


def test_data_generate_eval_bundle_on_a_full_disk_is_one_line_and_leaves_nothing(small_disk, monkeypatch, capsys):
    """`data generate --eval-bundle` on a full disk was a traceback."""
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(small_disk))
    fill(small_disk)
    assert main(["data", "generate", "--eval-bundle"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: data generate --eval-bundle: cannot write into {small_disk}")
    assert "No space left on device (disk full)" in err[0] and "NANOCHAT_BASE_DIR" in err[0]
    assert sorted(p.name for p in small_disk.iterdir() if p.name != ".download.lock") == ["filler"]


def test_data_generate_chat_on_a_full_disk_is_one_line_and_leaves_no_file(small_disk, monkeypatch, capsys):
    """`data generate --chat` on a full disk was an OSError traceback from pyarrow."""
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(small_disk))
    fill(small_disk)
    assert main(["data", "generate", "--chat"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: data generate --chat: cannot write into {small_disk}: ")
    assert "No space left on device (disk full)" in err[0] and "NANOCHAT_BASE_DIR" in err[0]
    assert [p.name for p in small_disk.rglob("*") if p.is_file()] == ["filler"]  # no temp file stays behind


def read_only_says_elsewhere(line, elsewhere="NANOCHAT_BASE_DIR to another directory"):
    return "Read-only file system" in line and elsewhere in line and "free space" not in line


def test_tokenizer_train_on_a_read_only_filesystem_says_to_write_elsewhere_not_to_free_space(tmp_path, monkeypatch):
    """`tokenizer train` into a read-only base directory said "free space there", where no freed space helps."""
    with tmpfs(tmp_path / "ro", "ro,size=1m") as mnt:
        monkeypatch.setenv("NANOCHAT_BASE_DIR", str(mnt))
        with pytest.raises(tokenizer.DataError) as e:
            tokenizer.train_tokenizer(vocab_size=300, texts=corpus.documents(100, seed=1), trainer="hf")
    assert str(e.value).startswith(f"cannot write the tokenizer into {mnt}/tokenizer: "), e.value
    assert "is unchanged" in str(e.value) and read_only_says_elsewhere(str(e.value)), e.value


def test_data_download_onto_a_read_only_base_data_says_to_write_elsewhere_not_to_free_space(tmp_path, monkeypatch,
                                                                                              capsys):
    """base_data/ is there but its filesystem went read-only: each shard's write said "free space there"."""
    mirror = tmp_path / "mirror"
    dataset.write_shard(mirror / dataset.shard_name(0), corpus.documents(16, seed=7), row_group_size=8)
    server = QuietServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(mirror)))
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        with tmpfs(tmp_path / "ro") as mnt:
            (mnt / "base_data").mkdir()
            subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
            monkeypatch.setenv("NANOCHAT_BASE_DIR", str(mnt))
            url = f"http://127.0.0.1:{server.server_address[1]}"
            assert main(["data", "download", "-n", "1", "--url", url]) == 1
    finally:
        server.shutdown()
        server.server_close()
    err = capsys.readouterr().err
    err = [ln for ln in err.replace("\r", "\n").splitlines() if ln.strip() and not ln.startswith("download:")]
    assert len(err) == 1 and err[0].startswith(f"error: data download: cannot write {mnt}/base_data/shard_"), err
    assert read_only_says_elsewhere(err[0]) and "run again to resume" in err[0], err


def test_eval_bundle_download_into_a_read_only_filesystem_says_to_write_elsewhere_not_to_free_space(tmp_path,
                                                                                                      monkeypatch,
                                                                                                      capsys):
    """`data download --eval-bundle` into a read-only base directory said "free space there"."""
    server = QuietServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(tmp_path)))
    (tmp_path / "eval_bundle.zip").write_bytes(b"PK\5\6" + b"\0" * 18)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        with tmpfs(tmp_path / "ro", "ro,size=1m") as mnt:
            monkeypatch.setenv("NANOCHAT_BASE_DIR", str(mnt))
            url = f"http://127.0.0.1:{server.server_address[1]}/eval_bundle.zip"
            assert main(["data", "download", "--eval-bundle", "--url", url]) == 1
    finally:
        server.shutdown()
        server.server_close()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: cannot write {mnt}/eval_bundle.zip.tmp: "), err
    assert read_only_says_elsewhere(err[0]) and "run again to resume" in err[0], err


def test_eval_bundle_unpacked_onto_a_read_only_filesystem_says_to_write_elsewhere_and_keeps_the_zip(tmp_path):
    """The zip was fetched, then its filesystem went read-only: unpacking it said "free space there"."""
    import zipfile

    from bench.nanochat import evalgen, evalstage

    bundle = evalgen.generate(tmp_path / "src" / "eval_bundle", rows=12)
    with tmpfs(tmp_path / "ro") as mnt:
        with zipfile.ZipFile(mnt / "eval_bundle.zip", "w", zipfile.ZIP_DEFLATED) as z:
            for path in sorted(bundle.rglob("*")):
                z.write(path, path.relative_to(bundle.parent))
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        with pytest.raises(evalstage.DataError) as e:
            evalstage.place(mnt / "eval_bundle.zip", mnt / "eval_bundle", {"origin": "downloaded", "url": "u"})
        assert sorted(p.name for p in mnt.iterdir()) == ["eval_bundle.zip"]
    assert str(e.value).startswith(f"cannot unpack {mnt}/eval_bundle.zip into {mnt}: "), e.value
    assert read_only_says_elsewhere(str(e.value)) and "the zip is kept" in str(e.value), e.value


def test_chat_download_into_a_read_only_filesystem_says_to_write_elsewhere_not_to_free_space(tmp_path):
    """A hub file that cannot be written on a read-only filesystem said "free space there"."""
    from bench.nanochat import chatstage

    with tmpfs(tmp_path / "ro", "ro,size=1m") as mnt:
        with pytest.raises(chatstage.DataError) as e:
            chatstage._with_retries("hub x", lambda: open(mnt / "part.parquet", "wb"), retries=3, hint="h")
    assert str(e.value).startswith(f"hub x: cannot write {mnt}/part.parquet: "), e.value
    assert read_only_says_elsewhere(str(e.value)) and "run again to resume" in str(e.value), e.value
