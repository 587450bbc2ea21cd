"""A local stand-in of the Hugging Face Hub for `nanochat-bench data download --chat` (bench/nanochat/chatstage.py):
a real HTTP server on 127.0.0.1 answering the requests huggingface_hub makes for HfApi.dataset_info and
hf_hub_download, serving the files `data generate --chat` writes, as the hub would serve the real ones.

What it answers (huggingface_hub/hf_api.py `dataset_info`, file_download.py `get_hf_file_metadata` and `http_get`):
- GET, HEAD /api/datasets/<repo>[/revision/<rev>]  the dataset's info, its files among it (chatstage's listing;
  HEAD: its reachability probe);
- HEAD /datasets/<repo>/resolve/<rev>/<path>       a parquet file is an LFS file there, as on the hub:
  a 302 to its blob on the "CDN", with X-Repo-Commit, X-Linked-Etag (its sha256) and X-Linked-Size; the CDN is
  this same server under the name `localhost`, another origin to the client, as the hub's CDN is; a small file
  (the dataset card) is answered in place with its ETag;
- GET  /cdn/<sha256>, /files/<name>                the bodies, `Range: bytes=N-` answered with a 206.
Not served: Xet storage (the client takes it only when the hub names a Xet hash), tokens, pagination.

`Hub.cut_once` makes one transfer of a file stop after N bytes (the connection closes mid-body), `Hub.stall_once`
makes one request for it wait before its answer (a CDN or hub that took the request and went quiet), and
`Hub.requests` records what was asked, so a test can tell a resumed transfer and a download that never happened.
"""

import contextlib
import hashlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pyarrow as pa
import pyarrow.parquet as pq

from bench.nanochat import chatdata, chatstage

CARD = "README.md"  # each repo also holds its dataset card, which the split patterns must leave out


def unmarked(path: Path) -> bytes:
    """A generated parquet file as the hub would hold it: its `data generate --chat` mark taken off."""
    sink = pa.BufferOutputStream()
    pq.write_table(pq.read_table(path).replace_schema_metadata(None), sink)
    return sink.getvalue().to_pybytes()


def parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


def chat_files(work: Path) -> tuple[dict[str, dict[str, bytes]], dict[str, bytes]]:
    """What the hub and the two plain addresses serve: the files of `nanochat-bench data generate --chat` (run as a
    user runs it, into `work`), unmarked, SmolTalk's train split cut in two files as the hub cuts a large split;
    ({repo: {path in repo: bytes}}, {plain file name: bytes})."""
    env = dict(os.environ, NANOCHAT_BASE_DIR=str(work))
    subprocess.run([sys.executable, "-m", "bench.cli", "data", "generate", "--chat"], env=env, check=True,
                   capture_output=True, timeout=300)
    root = work / chatdata.CHAT_DIR
    repos: dict[str, dict[str, bytes]] = {}
    for s in chatdata.HUB_SPLITS:
        files = repos.setdefault(s.repo, {CARD: f"# {s.repo}\n".encode()})
        for path in chatdata.split_files(s, root):
            files[str(path.relative_to(root / s.repo))] = unmarked(path)
    smoltalk = repos["HuggingFaceTB/smol-smoltalk"]
    whole = pq.read_table(pa.BufferReader(smoltalk.pop("data/train-00000-of-00001.parquet")))
    half = whole.num_rows // 2
    for i, part in enumerate((whole.slice(0, half), whole.slice(half))):
        smoltalk[f"data/train-0000{i}-of-00002.parquet"] = parquet_bytes(part)
    plain = {name: (work / name).read_bytes() for name in (chatdata.IDENTITY_FILE, chatdata.WORDS_FILE)}
    return repos, plain


def rows(body: bytes) -> int:
    return pq.read_metadata(pa.BufferReader(body)).num_rows


class Hub(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, repos: dict[str, dict[str, bytes]], plain: dict[str, bytes]):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.repos, self.plain = repos, plain
        self.cuts: dict[str, int] = {}  # served path -> bytes sent before the connection closes, once
        self.stalls: dict[tuple[str, str], list[float]] = {}  # (method, served path) -> seconds before each answer
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, Range)
        self.lock = threading.Lock()

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client that gave up on a stalled answer
            super().handle_error(request, client_address)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def env(self, hf_home: Path) -> dict[str, str]:
        """The variables that point `data download --chat` here, --url or not: the hub, the two plain files, and
        huggingface_hub's home (its cache and token) apart from the user's, its offline switch off."""
        return {"HF_ENDPOINT": self.url, chatstage.ENV_IDENTITY_URL: self.plain_url(chatdata.IDENTITY_FILE),
                chatstage.ENV_WORDS_URL: self.plain_url(chatdata.WORDS_FILE), "HF_HOME": str(hf_home),
                "HF_HUB_OFFLINE": "0"}

    def plain_url(self, name: str) -> str:
        return f"{self.url}/files/{name}"

    def commit(self, repo: str) -> str:
        """The repo's commit id: a digest of its files, so it changes when a test changes one."""
        return hashlib.sha1(json.dumps(sorted((p, sha256(b)) for p, b in self.repos[repo].items())).encode()
                            ).hexdigest()

    def cut_once(self, name: str, after: int, repo: str | None = None) -> None:
        """The next transfer of this file (a repo's path, or a plain file's name) stops after `after` bytes."""
        self.cuts[f"/cdn/{sha256(self.repos[repo][name])}" if repo else f"/files/{name}"] = after

    def stall_once(self, name: str, seconds: float, repo: str, head: bool = False, times: int = 1) -> None:
        """The next GET of this file's bytes (with `head`: the HEAD asking its metadata) is answered after `seconds`
        of silence; so are as many as `times` of them."""
        path = f"/datasets/{repo}/resolve/main/{name}" if head else f"/cdn/{sha256(self.repos[repo][name])}"
        self.stalls["HEAD" if head else "GET", path] = [seconds] * times

    def bodies(self) -> list[tuple[str, str | None]]:
        """(path, Range) of each GET that asked for a file's bytes."""
        return [(p, r) for m, p, r in self.requests if m == "GET" and p.startswith(("/cdn/", "/files/"))]


def sha256(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def _is_lfs(path: str) -> bool:
    return path.endswith(".parquet")  # the hub's .gitattributes puts parquet files in LFS


class _Handler(BaseHTTPRequestHandler):
    server: Hub

    def log_message(self, *args):
        pass

    def do_HEAD(self):
        self._answer()

    def do_GET(self):
        self._answer()

    def _answer(self):
        url = urlsplit(self.path)
        path = unquote(url.path)
        with self.server.lock:
            self.server.requests.append((self.command, path, self.headers.get("Range")))
            stalls = self.server.stalls.get((self.command, path))
            stall = stalls.pop() if stalls else None
        if stall is not None:
            time.sleep(stall)
        if path.startswith("/cdn/"):
            blobs = {sha256(b): b for files in self.server.repos.values() for b in files.values()}
            return self._body(path, blobs.get(path[len("/cdn/"):]))
        if path.startswith("/files/"):
            return self._body(path, self.server.plain.get(path[len("/files/"):]))
        for prefix, route in (("/api/datasets/", self._api), ("/datasets/", self._resolve)):
            if path.startswith(prefix):
                repo = next((r for r in self.server.repos if (path[len(prefix):] + "/").startswith(r + "/")), None)
                if repo is None:
                    return self._error(404, "RepoNotFound", "Repository not found")
                return route(repo, path[len(prefix) + len(repo):])
        self._error(404, None, "Not found")

    def _api(self, repo: str, tail: str):
        files = self.server.repos[repo]
        if tail == "" or re.fullmatch(r"/revision/[^/]+", tail):
            return self._json({"id": repo, "sha": self.server.commit(repo),
                               "siblings": [{"rfilename": p} for p in sorted(files)]})
        self._error(404, None, f"Not found: {tail}")

    def _resolve(self, repo: str, tail: str):
        found = re.fullmatch(r"/resolve/([^/]+)/(.+)", tail)
        if found is None:
            return self._error(404, None, f"Not found: {tail}")
        if not self._revision(repo, found.group(1)):
            return
        name = found.group(2)
        body = self.server.repos[repo].get(name)
        commit = {"X-Repo-Commit": self.server.commit(repo)}
        if body is None:
            return self._error(404, "EntryNotFound", f"{name} does not exist on main", commit)
        if not _is_lfs(name):
            return self._body(name, body, {**commit, "ETag": f'"{_git_blob_id(body)}"'})
        host, port = self.server.server_address
        self.send_response(302)
        for key, value in {**commit, "ETag": f'W/"{_git_blob_id(body)}"', "X-Linked-Etag": f'"{sha256(body)}"',
                           "X-Linked-Size": str(len(body)), "Content-Length": "0",
                           "Location": f"http://localhost:{port}/cdn/{sha256(body)}"}.items():
            self.send_header(key, value)
        self.end_headers()

    def _revision(self, repo: str, rev: str) -> bool:
        if rev in ("main", self.server.commit(repo)):
            return True
        self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
        return False

    def _body(self, path: str, body: bytes | None, headers: dict | None = None):
        if body is None:
            return self._error(404, "EntryNotFound", f"{path} not found")
        asked = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "")
        start = int(asked.group(1)) if asked else 0
        if start >= len(body) and body:
            return self._error(416, None, "Range Not Satisfiable")
        self.send_response(206 if asked else 200)
        for key, value in {"Content-Length": str(len(body) - start), "Accept-Ranges": "bytes",
                           "ETag": f'"{sha256(body)}"',  # the caller's (a git blob's id) goes over it
                           **({"Content-Range": f"bytes {start}-{len(body) - 1}/{len(body)}"} if asked else {}),
                           **(headers or {})}.items():
            self.send_header(key, value)
        self.end_headers()
        if self.command == "HEAD":
            return
        with self.server.lock:
            cut = self.server.cuts.pop(path, None)
        if cut is not None:
            self.wfile.write(body[start:start + cut])  # then the connection closes before the promised length
            self.close_connection = True
            return
        self.wfile.write(body[start:])

    def _json(self, value):
        data = json.dumps(value).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _error(self, status: int, code: str | None, message: str, headers: dict | None = None):
        data = json.dumps({"error": message}).encode()
        self.send_response(status)
        for key, value in {**(headers or {}), **({"X-Error-Code": code} if code else {}),
                           "X-Error-Message": message, "Content-Type": "application/json",
                           "Content-Length": str(len(data))}.items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)


def _git_blob_id(body: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(body) + body).hexdigest()


@contextlib.contextmanager
def serve(repos: dict[str, dict[str, bytes]], plain: dict[str, bytes]):
    """A Hub serving copies of these files (a test may change them) on a free port, for the block's length."""
    hub = Hub({r: dict(files) for r, files in repos.items()}, dict(plain))
    threading.Thread(target=hub.serve_forever, daemon=True).start()
    try:
        yield hub
    finally:
        hub.shutdown()
        hub.server_close()
