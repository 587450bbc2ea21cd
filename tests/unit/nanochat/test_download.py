"""The shard downloader against a real HTTP server on 127.0.0.1.  python -m pytest tests/unit/nanochat/test_download.py -q

The server serves generated shards and misbehaves on purpose, per shard: a 500 error (once or always), a
connection cut in the middle of the body, a corrupt file, a response slower than the client's timeout.
It honours Range requests, as Hugging Face does, so a cut download resumes where it stopped.
"""

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bench.cli import main
from bench.errors import DataError
from bench.nanochat import dataset, download

FAST = dict(backoff_s=0.01, timeout_s=5.0, progress=False, chunk_bytes=4096)


class ShardServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, files: dict[str, bytes]):
        super().__init__(("127.0.0.1", 0), Handler)
        self.files = files
        self.behaviour: dict[str, str] = {}  # shard name -> "500", "500-once", "cut-once", "slow-once", "corrupt"
        self.requests: list[tuple[str, str | None]] = []  # (name, Range header)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        srv = self.server
        name = self.path.rsplit("/", 1)[-1]
        rng = self.headers.get("Range")
        seen = sum(1 for n, _ in srv.requests if n == name)
        srv.requests.append((name, rng))
        how = srv.behaviour.get(name, "")
        if name not in srv.files:
            return self.send_error(404)
        if how == "500" or (how == "500-once" and seen == 0):
            return self.send_error(500, "upstream trouble")
        if how == "slow-once" and seen == 0:
            time.sleep(1.0)
        body = b"PAR1 this is not parquet PAR1" if how == "corrupt" else srv.files[name]
        start = int(rng.split("=")[1].rstrip("-")) if rng else 0
        self.send_response(206 if rng else 200)
        self.send_header("Content-Length", str(len(body) - start))
        self.end_headers()
        if how == "cut-once" and seen == 0:
            self.wfile.write(body[: len(body) // 2])  # then the connection drops
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(body[start:])


@pytest.fixture(scope="module")
def shard_bytes(tmp_path_factory):
    src = tmp_path_factory.mktemp("src")
    paths = dataset.generate_shards(4, docs_per_shard=64, row_group_size=16, out_dir=src)
    return {p.name: p.read_bytes() for p in paths}


@pytest.fixture
def server(shard_bytes):
    srv = ShardServer(shard_bytes)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def test_downloads_and_verifies_all_shards(server, tmp_path):
    paths = download.download_shards(4, workers=3, url=server.url, out_dir=tmp_path, **FAST)
    assert [p.name for p in paths] == sorted(server.files)
    assert all(p.read_bytes() == server.files[p.name] for p in paths)
    assert not list(tmp_path.glob("*.tmp"))
    n = len(server.requests)
    download.download_shards(4, url=server.url, out_dir=tmp_path, **FAST)
    assert len(server.requests) == n  # valid files on disk are kept, not fetched again


def test_server_error_is_retried(server, tmp_path):
    server.behaviour["shard_00001.parquet"] = "500-once"
    download.download_shards(2, url=server.url, out_dir=tmp_path, **FAST)
    assert [n for n, _ in server.requests].count("shard_00001.parquet") == 2


def test_cut_download_resumes_with_range(server, tmp_path):
    server.behaviour["shard_00000.parquet"] = "cut-once"
    (path,) = download.download_shards(1, url=server.url, out_dir=tmp_path, **FAST)
    assert path.read_bytes() == server.files["shard_00000.parquet"]
    ranges = [r for n, r in server.requests if n == "shard_00000.parquet"]
    half = len(server.files["shard_00000.parquet"]) // 2
    assert len(ranges) == 2 and ranges[0] is None
    resumed_at = int(ranges[1].removeprefix("bytes=").rstrip("-"))  # the second request continued the .tmp
    assert half - 4096 < resumed_at <= half


def test_slow_response_times_out_and_is_retried(server, tmp_path):
    server.behaviour["shard_00000.parquet"] = "slow-once"
    download.download_shards(1, url=server.url, out_dir=tmp_path, backoff_s=0.01, timeout_s=0.3, progress=False)
    assert [n for n, _ in server.requests].count("shard_00000.parquet") == 2


def test_persistent_failures_name_each_shard(server, tmp_path):
    server.behaviour["shard_00001.parquet"] = "500"
    server.behaviour["shard_00002.parquet"] = "corrupt"
    with pytest.raises(DataError) as e:
        download.download_shards(3, url=server.url, out_dir=tmp_path, retries=2, **FAST)
    msg = str(e.value)
    assert "2 of 3 shard(s) could not be downloaded" in msg
    assert "shard_00001.parquet" in msg and "500" in msg
    assert "shard_00002.parquet" in msg and "not a readable parquet file" in msg
    assert (tmp_path / "shard_00000.parquet").exists() and not list(tmp_path.glob("*.tmp"))


def test_missing_shard_fails_fast(server, tmp_path):
    with pytest.raises(DataError, match=r"shard_00004.parquet from http://127.0.0.1:\d+/shard_00004.parquet: 1 attempt"):
        download.download_shards(5, url=server.url, out_dir=tmp_path, retries=5, backoff_s=10, progress=False)


def test_url_from_environment_and_cli(server, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    monkeypatch.setenv("NANOCHAT_DATA_URL", server.url + "/")
    assert main(["data", "download", "-n", "2", "-w", "2"]) == 0
    assert sorted(p.name for p in dataset.list_parquet_files()) == ["shard_00000.parquet", "shard_00001.parquet"]
    assert main(["data", "download", "-n", "0"]) == 1
    assert "-n 0: must be between 1 and 1823" in capsys.readouterr().err
