"""The shard downloader against a real HTTP server on 127.0.0.1.  python -m pytest tests/unit/nanochat/test_download.py -q

The server serves generated shards and misbehaves on purpose, per shard: a 500 error (once or always), a
connection cut in the middle of the body, a corrupt file, a response slower than the client's timeout, a body
trickled a byte at a time.
It honours Range requests, as Hugging Face does, so a cut download resumes where it stopped.
Mirrors that cannot be reached are real sockets on 127.0.0.1 too: a closed port, and a listening socket
that never answers; only a host name that does not resolve is staged by replacing the resolver (the site's
DNS), since a real lookup would leave this machine.
"""

import errno
import http.client
import importlib.util
import os
import socket
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from bench.cli import main
from bench.errors import DataError
from bench.nanochat import corpus, dataset, download

FAST = dict(backoff_s=0.01, timeout_s=5.0, progress=False, chunk_bytes=4096)


class ShardServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, files: dict[str, bytes]):
        super().__init__(("127.0.0.1", 0), Handler)
        self.files = dict(files)  # a test may change what this server serves, not what the next one does
        self.behaviour: dict[str, str] = {}  # shard name -> an HTTP status ("500"), "500-once", "cut-once", "slow-once", "corrupt",
        # "trickle"
        self.requests: list[tuple[str, str | None]] = []  # (name, Range header)
        self.release = threading.Event()  # ends the waits of "hang" and "trickle"
        self.drops = 0  # the next this many GETs are dropped without an answer

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client that timed out and left: expected
            super().handle_error(request, client_address)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_HEAD(self):
        name = self.path.rsplit("/", 1)[-1]
        self.send_response(200 if name in self.server.files else 404)
        self.send_header("Content-Length", str(len(self.server.files.get(name, b""))))
        self.end_headers()

    def do_GET(self):
        srv = self.server
        name = self.path.rsplit("/", 1)[-1]
        if srv.drops > 0:  # the connection closed without a byte of answer: a mirror restarting
            srv.drops -= 1
            srv.requests.append((name, None))
            self.close_connection = True
            return
        if srv.behaviour.get("*") == "hang":  # answers HEAD, then never a GET: a mirror that went quiet
            srv.requests.append((name, None))
            srv.release.wait(10)
            return
        rng = self.headers.get("Range")
        seen = sum(1 for n, _ in srv.requests if n == name)
        srv.requests.append((name, rng))
        how = srv.behaviour.get(name, "")
        if name not in srv.files:
            return self.send_error(404)
        if how.isdigit() or (how == "500-once" and seen == 0):
            return self.send_error(int(how[:3]), "upstream trouble")
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
        if how == "trickle":  # a byte every 0.1 s, well within any read timeout, for at most 10 s
            for byte in body[start:start + 100]:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                if srv.release.wait(0.1):
                    break
            self.close_connection = True
            return
        self.wfile.write(body[start:])


@pytest.fixture(scope="module")
def shard_bytes(tmp_path_factory):
    """Shards as the mirror has them: offline-corpus text without the `generated` footer mark, like
    FineWeb-Edu's files (which carry no mark of ours), and not the documents `data generate` gives shard i."""
    src = tmp_path_factory.mktemp("src")
    files = {}
    for i in range(4):
        path = src / dataset.shard_name(i)
        dataset.write_shard(path, corpus.documents(64, seed=1000 + i), row_group_size=16)  # not shard i's seed
        files[path.name] = path.read_bytes()
    return files


@pytest.fixture
def server(shard_bytes):
    srv = ShardServer(shard_bytes)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield srv
    srv.release.set()
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


def test_a_second_download_into_the_directory_waits_for_the_first_and_keeps_its_shards(server, tmp_path, capsys):
    """Two users staging one shared base directory at once resumed each other's half-written <shard>.tmp, mixing
    their bytes into one file. The second waits (saying for whom) and then fetches nothing the first left."""
    import fcntl

    download.download_shards(2, url=server.url, out_dir=tmp_path, **FAST)  # the first user's shards, and the lock
    held = os.open(tmp_path / download.DOWNLOAD_LOCK, os.O_RDWR)
    fcntl.flock(held, fcntl.LOCK_EX)  # that user's next download is still running
    n, second = len(server.requests), threading.Thread(
        target=download.download_shards, args=(2,), kwargs={"url": server.url, "out_dir": tmp_path, **FAST})
    second.start()
    deadline = time.time() + 30
    while "waiting for another data download" not in capsys.readouterr().out and time.time() < deadline:
        time.sleep(0.05)
    assert second.is_alive() and len(server.requests) == n
    os.close(held)
    second.join(timeout=30)
    assert not second.is_alive() and len(server.requests) == n  # the first one's shards kept


def test_an_older_urllib3_without_read1_still_downloads(server, tmp_path, monkeypatch):
    """read1 came with urllib3 2.2; an image may ship an older one (its own packages are kept), whose responses have
    none: the shards still download, whole, instead of every attempt failing on the missing method."""
    import urllib3

    for cls in (urllib3.response.HTTPResponse, urllib3.response.BaseHTTPResponse):  # 2.x declares it on both
        monkeypatch.delattr(cls, "read1")
    paths = download.download_shards(2, url=server.url, out_dir=tmp_path, **FAST)
    assert all(p.read_bytes() == server.files[p.name] for p in paths)


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


@pytest.mark.parametrize("status, attempts", [(405, 1), (451, 1), (429, 3), (503, 3)])
def test_a_refusal_no_retry_changes_is_not_retried_and_a_request_to_come_back_is(server, tmp_path, status, attempts):
    """A 4xx other than 400, 401, 403, 404 and 410 (405, 451 Unavailable For Legal Reasons) was retried with backoff,
    where `data download --chat` stopped at once: every 4xx but 408 and 429 (which ask to come back) is final."""
    server.behaviour["shard_00000.parquet"] = str(status)
    with pytest.raises(DataError, match=rf"{attempts} attempt\(s\) failed.*{status}"):
        download.download_shards(1, url=server.url, out_dir=tmp_path, retries=3, **FAST)
    assert [n for n, _ in server.requests] == ["shard_00000.parquet"] * attempts


def test_url_from_environment_and_cli(server, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    monkeypatch.setenv("NANOCHAT_DATA_URL", server.url + "/")
    assert main(["data", "download", "-n", "2", "-w", "2"]) == 0
    assert sorted(p.name for p in dataset.list_parquet_files()) == ["shard_00000.parquet", "shard_00001.parquet"]
    assert main(["data", "download", "-n", "0"]) == 1
    assert "-n 0: must be between 1 and 1823" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------
# Mirrors that cannot be reached: one line, in seconds, with the defaults of `data download`


@pytest.fixture
def closed_port_url():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now: every connection is refused
    return f"http://127.0.0.1:{port}/mirror"


@pytest.fixture
def silent_url():
    """A socket that takes connections (the kernel's backlog) and never reads or answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/mirror"
    sock.close()


def run_cli(args, capsys):
    t0 = time.monotonic()
    rc = main(args)
    out = capsys.readouterr()
    return rc, out.err.strip().splitlines(), time.monotonic() - t0


def test_refusing_mirror_stops_in_seconds_with_one_line(closed_port_url, tmp_path, monkeypatch, capsys):
    """Issue 23: `-n 240 -w 8` against a refusing mirror took 901 s of silent retries before its error."""
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    rc, err, took = run_cli(["data", "download", "-n", "240", "-w", "8", "--url", closed_port_url], capsys)
    assert rc == 1 and took < 10
    assert len(err) == 1 and err[0].startswith("error: cannot reach " + closed_port_url + "/shard_00000.parquet")
    assert "connection refused" in err[0] and "--url" in err[0] and "NANOCHAT_DATA_URL" in err[0]
    assert not (tmp_path / "base_data").exists()  # stopped before anything was made


def test_unresolvable_host_stops_at_once(tmp_path, monkeypatch, capsys):
    """A host that does not resolve: one try, one line (the resolver is the site's network: replaced here)."""
    lookups = []
    real = socket.getaddrinfo

    def resolver(host, *args, **kwargs):
        if host == "mirror.invalid":
            lookups.append(host)
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    monkeypatch.setenv("NANOCHAT_DATA_URL", "http://mirror.invalid/fineweb")
    rc, err, took = run_cli(["data", "download", "-n", "240", "-w", "8"], capsys)
    assert rc == 1 and took < 5 and len(lookups) == 1
    assert len(err) == 1 and "http://mirror.invalid/fineweb/shard_00000.parquet" in err[0]
    assert "does not resolve" in err[0] and "NANOCHAT_DATA_URL" in err[0]


@pytest.mark.parametrize("url", ["mirror.example/fineweb", "ftp://mirror.example/fineweb"])
def test_a_url_that_is_not_http_stops_at_once(url, tmp_path, monkeypatch, capsys):
    """A --url without http(s):// was retried as network trouble: 30 s for every shard, then a line each."""
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    rc, err, took = run_cli(["data", "download", "-n", "240", "-w", "8", "--url", url], capsys)
    assert rc == 1 and took < 5
    assert len(err) == 1 and err[0].startswith(f"error: cannot reach {url}/shard_00000.parquet: not an http")
    assert "--url" in err[0] and not (tmp_path / "base_data").exists()


def test_silent_mirror_is_bounded_by_the_read_timeout(silent_url, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    rc, err, took = run_cli(["data", "download", "-n", "240", "-w", "8", "--url", silent_url, "--timeout", "1"],
                            capsys)
    assert rc == 1 and took < 6
    assert len(err) == 1 and "sent nothing within the read timeout" in err[0] and "--url" in err[0]


def test_a_trickling_download_is_stopped_as_stalled(server, tmp_path, monkeypatch, capsys):
    """A byte every 0.1 s never let the read timeout fire, so the download went on for as long as the server
    kept trickling; now a body slower than download.MIN_RATE_B_S over --timeout seconds fails its attempt."""
    server.behaviour["shard_00000.parquet"] = "trickle"
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    args = ["data", "download", "-n", "1", "--url", server.url, "--timeout", "0.5", "--retries", "2"]
    rc, err, took = run_cli(args, capsys)
    assert rc == 1 and took < 6  # two attempts of at most 2 x 0.5 s, and the backoff of 2 s between them
    failed = err[-1]  # after the progress bar
    assert f"shard_00000.parquet from {server.url}/shard_00000.parquet: 2 attempt(s) failed" in failed
    assert "bytes in" in failed and f"under {download.MIN_RATE_B_S:,} bytes/s (a stalled transfer)" in failed
    assert (tmp_path / "base_data" / "shard_00000.parquet.tmp").exists()  # what arrived is kept, to resume


def test_mirror_that_goes_quiet_mid_run_stops_the_command(server, tmp_path):
    """HEAD answers, then no GET does: after max(retries, 2 x workers) attempts in a row without an answer
    the command stops, instead of trying all 40 shards x 5 attempts."""
    server.behaviour["*"] = "hang"
    t0 = time.monotonic()
    with pytest.raises(DataError) as e:
        download.download_shards(40, workers=4, url=server.url, out_dir=tmp_path, retries=5, backoff_s=0.01,
                                 timeout_s=0.3, progress=False)
    assert time.monotonic() - t0 < 8
    msg = str(e.value)
    assert "\n" not in msg and "data download stopped: 8 attempt(s) in a row" in msg and "got no answer for" in msg
    assert "0 of 40 shard(s)" in msg and "--url" in msg
    assert len(server.requests) <= 8 + 4  # the count plus attempts already in flight


def test_a_short_outage_is_ridden_out(server, tmp_path):
    """More attempts in a row than the count without an answer, but for less time than one shard's retries
    wait in all (0.05 + 0.1 + 0.2 + 0.4 s): the retries carry on and every shard arrives."""
    server.drops = 6
    paths = download.download_shards(4, workers=2, url=server.url, out_dir=tmp_path, retries=5, backoff_s=0.05,
                                     timeout_s=5.0, progress=False)
    assert len(paths) == 4 and len(server.requests) == 6 + 4


def test_progress_counts_failures_apart(server, tmp_path, capsys):
    server.behaviour["shard_00001.parquet"] = "500"
    with pytest.raises(DataError):
        download.download_shards(3, workers=1, url=server.url, out_dir=tmp_path, retries=2, backoff_s=0.01,
                                 timeout_s=5.0, progress=True)
    bar = capsys.readouterr().err.replace("\r", "\n").strip().splitlines()[-1]
    assert "2/3" in bar and "1 failed" in bar and "3/3" not in bar


# ----------------------------------------------------------------------------------------------
# Where shards came from


def test_downloads_are_recorded_with_their_url(server, tmp_path):
    from bench.nanochat import data_origin

    paths = download.download_shards(2, url=server.url, out_dir=tmp_path, **FAST)
    sources = data_origin.read_sources(tmp_path)
    assert sources["shard_00001.parquet"] == {"url": f"{server.url}/shard_00001.parquet",
                                              "bytes": paths[1].stat().st_size}
    assert data_origin.data_identity(tmp_path, tmp_path / "no-tokenizer")["origin"] == "downloaded"


def test_generated_shards_are_never_counted_as_fineweb(server, tmp_path, monkeypatch, capsys):
    """Issue 23: a `data download` after `data generate` took the generated shards as FineWeb-Edu."""
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    assert main(["data", "generate", "--shards", "2", "--docs-per-shard", "16", "--row-group-size", "8"]) == 0
    before = (tmp_path / "base_data" / "shard_00000.parquet").read_bytes()
    rc, err, _ = run_cli(["data", "download", "-n", "3", "--url", server.url], capsys)
    assert rc == 1 and len(err) == 1
    assert "shard_00000.parquet, shard_00001.parquet, made by `data generate`, not FineWeb-Edu" in err[0]
    assert "--overwrite" in err[0] and server.requests == []  # refused before any download
    assert (tmp_path / "base_data" / "shard_00000.parquet").read_bytes() == before
    assert main(["data", "download", "-n", "3", "--url", server.url, "--overwrite"]) == 0
    assert (tmp_path / "base_data" / "shard_00000.parquet").read_bytes() == server.files["shard_00000.parquet"]
    assert main(["data", "info"]) == 0
    info = capsys.readouterr().out
    assert info.count("origin: downloaded") == 2 and "origin: generated" not in info


def test_a_mirror_serving_generated_shards_is_not_fineweb(server, tmp_path):
    marked = tmp_path / "marked"
    (path,) = dataset.generate_shards(1, 16, 8, out_dir=marked)
    server.files["shard_00000.parquet"] = path.read_bytes()
    with pytest.raises(DataError, match="serves a shard made by `data generate`.*not FineWeb-Edu"):
        download.download_shards(1, url=server.url, out_dir=tmp_path / "out", **FAST)
    assert [n for n, _ in server.requests].count("shard_00000.parquet") == 1  # no retry changes that


def test_shards_of_an_older_generate_without_a_mark_are_recognised(server, tmp_path):
    """Shards written by `data generate` before shards were marked: the first document gives them away."""
    from bench.nanochat import data_origin

    for i in range(2):
        dataset.write_shard(tmp_path / dataset.shard_name(i), corpus.documents(16, seed=i), row_group_size=8)
    assert data_origin.shard_origin(tmp_path / dataset.shard_name(0)) is None  # no mark, no record
    with pytest.raises(DataError, match=r"shard_00000.parquet, shard_00001.parquet, made by `data generate`"):
        download.download_shards(3, url=server.url, out_dir=tmp_path, **FAST)
    assert "generated by an older data generate" in data_origin.describe(dataset.list_parquet_files(tmp_path))
    download.download_shards(3, url=server.url, out_dir=tmp_path, overwrite=True, **FAST)
    assert (tmp_path / "shard_00000.parquet").read_bytes() == server.files["shard_00000.parquet"]
    assert data_origin.data_identity(tmp_path, tmp_path)["origin"] == "downloaded"
    # the mirror's own files (other text under the same names) are not mistaken for them
    fetched = download.download_shards(2, url=server.url, out_dir=tmp_path / "fresh", **FAST)
    assert not any(data_origin.unmarked_generated(p) for p in fetched)


def test_shards_the_mirror_refused_are_not_said_to_resume_on_a_second_run(server, tmp_path):
    """Regression: shards a mirror refused (a 404 of a wrong --url path) ended with '(run again to resume)', which
    changes nothing; such a summary names the refusal and what to point --url at, and a 5xx still says resume."""
    server.behaviour["shard_00001.parquet"] = "404"
    with pytest.raises(DataError) as e:
        download.download_shards(2, url=server.url, out_dir=tmp_path, retries=3, **FAST)
    assert "1 of 2 shard(s) could not be downloaded" in str(e.value) and "run again" not in str(e.value)
    assert "the mirror refused them: check the network, or point --url" in str(e.value)
    server.behaviour["shard_00001.parquet"] = "503"
    with pytest.raises(DataError, match=r"\(run again to resume\)"):
        download.download_shards(2, url=server.url, out_dir=tmp_path, retries=2, **FAST)


def _response(status: int) -> requests.Response:
    r = requests.Response()
    r.status_code = status
    return r


@pytest.mark.parametrize("error", [
    OSError(errno.EIO, "Input/output error"), OSError(errno.EMFILE, "Too many open files"),
    OSError(errno.ENOSPC, "No space left on device"), PermissionError(errno.EACCES, "Permission denied"),
    OSError(errno.EROFS, "Read-only file system"), TypeError("a bug"), AttributeError("a bug"), KeyboardInterrupt(),
], ids=lambda e: type(e).__name__ + (f"-{errno.errorcode[e.errno]}" if getattr(e, "errno", None) else ""))
def test_an_error_of_this_machine_is_raised_at_once_not_retried(error):
    """retrying retried every exception but a few errnos of a full or read-only disk: a failing disk (EIO), too many
    open files or a programming error waited through every backoff before the real error showed, as a GaveUp that
    said to check the network."""
    calls, waits = [], []

    def fetch():
        calls.append(1)
        raise error

    with pytest.raises(type(error)):
        download.retrying("shard", fetch, 5, 2.0, wait=waits.append)
    assert (len(calls), waits) == (1, [])


@pytest.mark.parametrize("error", [
    requests.ConnectionError("reset"), requests.ConnectTimeout("slow"), requests.exceptions.ChunkedEncodingError("cut"),
    requests.HTTPError("503", response=_response(503)), requests.HTTPError("429", response=_response(429)),
    ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"), OSError(errno.ENETUNREACH, "unreachable"),
    TimeoutError("timed out"), socket.gaierror(socket.EAI_NONAME, "Name or service not known"),
    ssl.SSLError(1, "bad record mac"), http.client.IncompleteRead(b"x", 10),
    OSError("Consistency check failed: file should be of size 10 but has size 5"),  # huggingface_hub's cut body
    ValueError("not a readable parquet file"), RuntimeError("reqwest error"),  # hf_xet before 1.x: its errors all
], ids=lambda e: type(e).__name__)
def test_a_network_error_is_retried(error):
    calls, waits = [], []

    def fetch():
        calls.append(1)
        raise error

    with pytest.raises(download.GaveUp, match="3 attempt"):
        download.retrying("shard", fetch, 3, 2.0, wait=waits.append)
    assert (len(calls), waits) == (3, [2.0, 4.0])


def test_a_network_error_of_huggingface_hubs_http_client_is_retried():
    """huggingface_hub >= 1.0 requests through httpx (httpx2 from 2.x): its network errors are no requests errors,
    and a metadata request that got no answer comes as LocalEntryNotFoundError (a FileNotFoundError) from one."""
    hub_http = pytest.importorskip("httpx2" if importlib.util.find_spec("httpx2") else "httpx")
    from huggingface_hub.errors import LocalEntryNotFoundError

    for cause in (hub_http.ConnectError("refused"), hub_http.ReadTimeout("silent"),
                  hub_http.RemoteProtocolError("cut")):
        def fetch(cause=cause):
            try:
                raise cause
            except hub_http.HTTPError as e:
                raise LocalEntryNotFoundError("An error happened while trying to locate the file on the Hub") from e

        for f in (fetch, lambda cause=cause: (_ for _ in ()).throw(cause)):
            waits = []
            with pytest.raises(download.GaveUp, match="2 attempt"):
                download.retrying("hub file", f, 2, 1.0, wait=waits.append)
            assert waits == [1.0]


def test_a_failing_disk_under_a_download_is_one_line_naming_the_file_at_once(server, tmp_path, monkeypatch, capsys):
    """EIO while writing a shard was retried --retries times with backoff and then reported as a download that
    failed, 'run again to resume', as if the network were at fault."""
    tried = []

    def failing_disk(url, tmp, *a, **k):
        tried.append(url)
        raise OSError(errno.EIO, os.strerror(errno.EIO), str(tmp))

    monkeypatch.setattr(download, "_fetch_once", failing_disk)
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    assert main(["data", "download", "-n", "1", "--url", server.url, "--retries", "5"]) == 1
    err = capsys.readouterr().err.replace("\r", "\n").splitlines()
    lines = [ln for ln in err if ln.strip() and not ln.startswith("download:")]
    assert len(lines) == 1 and len(tried) == 1, (lines, tried)
    assert lines[0].startswith(f"error: data download: cannot write {tmp_path}/base_data/shard_00000.parquet.tmp: "
                               "Input/output error"), lines[0]


def test_a_record_that_cannot_be_written_is_named_not_the_shard(server, tmp_path, monkeypatch):
    """sources.json's lock, left by another user of a shared base directory, could not be opened: the error named the
    shard's .tmp, which had been written and renamed already."""
    lock = tmp_path / ".sources.json.lock"

    def refused_lock(path, url):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(lock))

    monkeypatch.setattr(download.data_origin, "record_downloaded", refused_lock)
    with pytest.raises(DataError) as e:
        download.download_shards(1, url=server.url, out_dir=tmp_path, **FAST)
    assert str(e.value).startswith(f"data download: cannot write {lock}: Permission denied"), e.value
