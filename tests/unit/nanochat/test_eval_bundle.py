"""The eval bundle: reading checks, `data generate --eval-bundle` and `data download --eval-bundle` (from a local
HTTP server standing in for the mirror: no site network here), resume, checksum, fail fast, no mixing.
python -m pytest tests/unit/nanochat/test_eval_bundle.py -q"""

import fcntl
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bench.errors import DataError
from bench.nanochat import download, evalgen, evalstage
from bench.nanochat.evalbundle import load_bundle


def cli(*args, base):
    env = dict(os.environ, NANOCHAT_BASE_DIR=str(base), PYTHONPATH=os.getcwd())
    return subprocess.run([sys.executable, "-m", "bench.cli", *args], capture_output=True, text=True, env=env,
                          timeout=120)


@pytest.fixture(scope="module")
def bundle_zip(tmp_path_factory) -> bytes:
    """A zip laid out as upstream's eval_bundle.zip (one top-level eval_bundle/ folder), of a generated bundle
    without its origin.json (the real zip has none)."""
    root = tmp_path_factory.mktemp("zip")
    bundle = evalgen.generate(root / "eval_bundle", rows=12)
    (bundle / "origin.json").unlink()
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for path in sorted(bundle.rglob("*")):
            z.write(path, path.relative_to(root))
    return out.getvalue()


class Mirror(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, body: bytes):
        super().__init__(("127.0.0.1", 0), Handler)
        self.body, self.cut_first, self.ranges, self.status = body, False, [], None  # status: every GET's error
        self.trickle = threading.Event()  # set: a byte every 0.1 s, for at most 10 s (cleared: stop at once)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}/eval_bundle.zip"


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_HEAD(self):
        self.send_response(200)
        self.end_headers()

    def do_GET(self):
        srv, rng = self.server, self.headers.get("Range")
        srv.ranges.append(rng)
        if srv.status:
            return self.send_error(srv.status)
        start = int(rng.split("=")[1].rstrip("-")) if rng else 0
        self.send_response(206 if rng else 200)
        self.send_header("Content-Length", str(len(srv.body) - start))
        self.end_headers()
        if srv.cut_first:
            srv.cut_first = False
            self.wfile.write(srv.body[: len(srv.body) // 2])  # then the connection drops
            self.close_connection = True
            return
        if srv.trickle.is_set():
            for byte in srv.body[start:start + 100]:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(0.1)
                if not srv.trickle.is_set():
                    break
            self.close_connection = True
            return
        self.wfile.write(srv.body[start:])


@pytest.fixture
def mirror(bundle_zip):
    srv = Mirror(bundle_zip)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.trickle.clear()
    srv.shutdown()
    srv.server_close()


def test_download_resumes_a_cut_transfer_checks_it_and_records_its_digest(mirror, bundle_zip, tmp_path,
                                                                          monkeypatch):
    import hashlib

    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    mirror.cut_first = True
    path, examples, fetched = evalstage.stage(url=mirror.url, timeout_s=5, backoff_s=0.01, chunk_bytes=1024)
    assert fetched and examples == 22 * 12 and path == tmp_path / "eval_bundle"
    assert mirror.ranges[0] is None and mirror.ranges[1].startswith("bytes=")  # the second try resumed
    origin = json.loads((tmp_path / "eval_bundle" / "origin.json").read_text())
    assert origin == {"origin": "downloaded", "url": mirror.url, "sha256": hashlib.sha256(bundle_zip).hexdigest(),
                      "bytes": len(bundle_zip)}
    assert not (tmp_path / "eval_bundle.zip").exists() and len(load_bundle(tmp_path / "eval_bundle").tasks) == 22
    again = cli("data", "download", "--eval-bundle", "--url", mirror.url, base=tmp_path)
    assert again.returncode == 0 and "already staged" in again.stdout and len(mirror.ranges) == 2


def test_a_second_download_waits_for_the_first_and_keeps_its_bundle(mirror, bundle_zip, tmp_path, monkeypatch,
                                                                     capsys):
    """Two `data download --eval-bundle` at once both wrote the one eval_bundle.zip.tmp, each resuming the other's
    half download. The second waits, saying for whom, as the other downloads do, then finds the bundle staged."""
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    held = os.open(tmp_path / download.DOWNLOAD_LOCK, os.O_RDWR | os.O_CREAT)
    fcntl.flock(held, fcntl.LOCK_EX)  # the first download is still running
    result = []
    second = threading.Thread(target=lambda: result.append(evalstage.stage(url=mirror.url, timeout_s=5)))
    second.start()
    deadline = time.time() + 10
    while "waiting for another data download" not in capsys.readouterr().out and time.time() < deadline:
        time.sleep(0.05)
    assert second.is_alive() and not mirror.ranges  # nothing fetched while the first one runs
    (tmp_path / "eval_bundle.zip").write_bytes(bundle_zip)  # the first one's last steps
    evalstage.place(tmp_path / "eval_bundle.zip", tmp_path / "eval_bundle", {"origin": "downloaded", "url": "first"})
    os.close(held)
    second.join(timeout=30)
    assert not second.is_alive() and result[0][2] is False and not mirror.ranges  # kept, not fetched again
    assert load_bundle(tmp_path / "eval_bundle").origin()["url"] == "first"


def test_a_wrong_checksum_stages_nothing(mirror, tmp_path):
    bad = cli("data", "download", "--eval-bundle", "--url", mirror.url, "--sha256", "0" * 64, base=tmp_path)
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "SHA-256" in bad.stderr
    assert not (tmp_path / "eval_bundle").exists() and not (tmp_path / "eval_bundle.zip").exists()


def test_an_unreachable_mirror_fails_fast_in_one_line(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    out = cli("data", "download", "--eval-bundle", "--url", f"http://127.0.0.1:{port}/eval_bundle.zip",
              base=tmp_path)
    assert out.returncode == 1 and out.stderr.count("\n") == 1 and "connection refused" in out.stderr
    assert "NANOCHAT_EVAL_BUNDLE_URL" in out.stderr


def test_a_trickling_mirror_is_stopped_as_stalled(mirror, tmp_path, monkeypatch):
    """A byte every 0.1 s never let the read timeout fire: each try lasted as long as the mirror trickled."""
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    mirror.trickle.set()
    t0 = time.monotonic()
    with pytest.raises(DataError) as e:
        evalstage.stage(url=mirror.url, retries=2, timeout_s=0.5, backoff_s=0.01)
    assert time.monotonic() - t0 < 4  # two tries of at most 2 x 0.5 s
    assert str(e.value).startswith(f"{mirror.url}: 2 attempt(s) failed, the last: the server sent ")
    assert "(a stalled transfer); run again to resume" in str(e.value) and "NANOCHAT_EVAL_BUNDLE_URL" in str(e.value)


RESUME = "run again to resume "
REFUSED = "running again changes nothing; check the URL, or point --url (or NANOCHAT_EVAL_BUNDLE_URL) at a mirror of "


@pytest.mark.parametrize("status, attempts, then", [(404, 1, REFUSED), (405, 1, REFUSED), (451, 1, REFUSED),
                                                    (429, 3, RESUME), (503, 3, RESUME)],
                         ids=["404", "405", "451", "429", "503"])
def test_a_refusal_no_retry_changes_is_not_retried_and_a_request_to_come_back_is(mirror, tmp_path, monkeypatch,
                                                                                  status, attempts, then):
    """A 4xx other than 400, 401, 403, 404 and 410 was retried with backoff, as `data download --chat` never did;
    a refusal said 'run again to resume' too, though a run again gets the same answer from the same --url."""
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    mirror.status = status
    with pytest.raises(DataError) as e:
        evalstage.stage(url=mirror.url, retries=3, timeout_s=5, backoff_s=0.01)
    assert len(mirror.ranges) == attempts
    # the downloads' one shape: the address, the attempts, the last answer, what to do next
    assert str(e.value).startswith(f"{mirror.url}: {attempts} attempt(s) failed, the last: the server answered HTTP "
                                   f"{status} (HTTPError); {then}"), e.value
    assert "\n" not in str(e.value)


def test_generate_refuses_to_replace_and_download_refuses_to_mix(mirror, tmp_path, monkeypatch):
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    evalgen.generate()
    again = cli("data", "generate", "--eval-bundle", base=tmp_path)
    assert again.returncode == 1 and again.stderr.count("\n") == 1 and "--overwrite" in again.stderr
    with pytest.raises(DataError, match="stand-in is staged there; pass --overwrite"):
        evalstage.stage(url=mirror.url)
    assert not mirror.ranges
    evalstage.stage(url=mirror.url, overwrite=True)
    assert load_bundle(tmp_path / "eval_bundle").origin()["origin"] == "downloaded"


def test_an_interrupted_generate_leaves_no_half_bundle_and_a_rerun_writes_it(tmp_path, monkeypatch):
    """Cut after the task files but before core.yaml: a half bundle was left and the rerun called it already there."""
    def cut():
        raise KeyboardInterrupt

    monkeypatch.setattr(evalgen, "config_text", cut)
    with pytest.raises(KeyboardInterrupt):
        evalgen.generate(tmp_path / "eval_bundle", rows=12)
    left = lambda: sorted(p.name for p in tmp_path.iterdir() if p.name != download.DOWNLOAD_LOCK)  # noqa: E731
    assert left() == []  # the lock stays, as for downloads
    monkeypatch.undo()
    assert load_bundle(evalgen.generate(tmp_path / "eval_bundle", rows=12)).origin()["origin"] == "generated"
    assert left() == ["eval_bundle"]


def test_a_generated_bundle_is_not_placed_while_a_download_stages_one(tmp_path):
    """`data generate --eval-bundle --overwrite` took no lock: it could remove the bundle a `data download
    --eval-bundle` was placing. It now waits for the download's lock, as a second download does."""
    held = os.open(tmp_path / download.DOWNLOAD_LOCK, os.O_RDWR | os.O_CREAT)
    fcntl.flock(held, fcntl.LOCK_EX)
    done = threading.Event()
    threading.Thread(target=lambda: (evalgen.generate(tmp_path / "eval_bundle", rows=12), done.set()),
                     daemon=True).start()
    assert not done.wait(1.0) and not (tmp_path / "eval_bundle").exists()
    os.close(held)
    assert done.wait(30) and load_bundle(tmp_path / "eval_bundle").origin()["origin"] == "generated"


def test_reading_names_the_file_and_what_is_wrong(tmp_path):
    with pytest.raises(DataError, match=r"no eval bundle at .*nanochat-bench data download --eval-bundle"):
        load_bundle(tmp_path / "nothing")
    bundle = load_bundle(evalgen.generate(tmp_path / "eval_bundle", rows=12))
    task = bundle.tasks[5]  # copa: multiple choice
    path = bundle.path / "eval_data" / task.dataset_uri
    rows = path.read_text().splitlines()
    rows[2] = json.dumps({"query": "q", "choices": ["a", "b"], "gold": 2})
    path.write_text("\n".join(rows) + "\n")
    with pytest.raises(DataError, match=rf"{path}:3: gold 2 is not an index of its 2 option\(s\)"):
        bundle.task_data(task)
    (bundle.path / "core.yaml").write_text("icl_tasks:\n- label: x\n  dataset_uri: a.jsonl\n  num_fewshot: [0]\n"
                                           "  icl_task_type: ranking\n")
    with pytest.raises(DataError, match=r"icl_task_type 'ranking'; valid: multiple_choice, schema"):
        load_bundle(bundle.path)
    shutil.rmtree(bundle.path / "eval_data")
    (bundle.path / "core.yaml").write_text(evalgen.config_text())
    with pytest.raises(DataError, match=r"hellaswag.jsonl: missing \(CORE task hellaswag_zeroshot\)"):
        load_bundle(bundle.path)


def test_a_row_is_a_line_as_upstream_reads_the_file(tmp_path):
    """Upstream reads a task's JSONL a file line at a time: only a newline ends a row. A row whose text holds a
    line separator that str.splitlines() also splits at (U+2028, U+0085: written raw by JSON encoders that keep
    non-ASCII; a form feed is always escaped) was cut in two here, and the bundle refused as damaged."""
    bundle = load_bundle(evalgen.generate(tmp_path / "eval_bundle", rows=12))
    task = bundle.tasks[5]  # copa: multiple choice
    path = bundle.path / "eval_data" / task.dataset_uri
    rows = path.read_text(encoding="utf-8").split("\n")
    odd = {"query": "first\u2028second\x85third\x0cfourth", "choices": ["a", "b"], "gold": 1}
    rows[2] = json.dumps(odd, ensure_ascii=False)
    path.write_text("\n".join(rows), encoding="utf-8")
    data = bundle.task_data(task)
    assert len(data) == 12 and odd in data


def test_missing_staged_is_load_bundles_check_without_the_rows(tmp_path):
    """The check a flow makes before it starts: "" for a generated bundle (its rows are not read: a damaged row
    is the stage's to find), else load_bundle's line naming what is missing and the staging command."""
    from bench.nanochat.evalbundle import missing_staged

    assert missing_staged(tmp_path).startswith(f"no eval bundle at {tmp_path / 'eval_bundle'}; stage it with "
                                               "`nanochat-bench data download --eval-bundle`")
    bundle = evalgen.generate(tmp_path / "eval_bundle", rows=12)
    task = next(bundle.rglob("*.jsonl"))
    task.write_text("not json\n")
    assert missing_staged(tmp_path) == ""
    task.unlink()
    assert missing_staged(tmp_path).startswith(f"{task}: missing (CORE task ")


def test_a_crop_below_a_tasks_shots_is_refused_before_any_task_runs(tmp_path):
    """--max_per_task=4 ran hellaswag_zeroshot, then stopped at jeopardy (10-shot): the check is the bundle's, made
    first, naming the least crop that works."""
    from bench.errors import ConfigError

    bundle = load_bundle(evalgen.generate(tmp_path / "eval_bundle", rows=12))
    with pytest.raises(ConfigError, match=r"^--max_per_task=4: too few examples for the few-shot prompts of CORE "
                                          r"tasks jeopardy \(10-shot\), .* and \d+ more in .*core.yaml; give at least "
                                          r"11, or -1 for all$"):
        bundle.check_max_per_task(4)
    for fine in (11, -1):
        bundle.check_max_per_task(fine)


def test_a_zip_without_the_bundle_is_deleted_so_the_next_run_fetches_again(bundle_zip, tmp_path, monkeypatch):
    """A mirror serving some other zip: the zip stayed in the base directory, and every later run unpacked it
    again instead of fetching, even with --url pointed at a good mirror."""
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    other = io.BytesIO()
    with zipfile.ZipFile(other, "w") as z:
        z.writestr("README.txt", "not the eval bundle")
    wrong = Mirror(other.getvalue())
    threading.Thread(target=wrong.serve_forever, daemon=True).start()
    try:
        with pytest.raises(DataError, match=f"no top-level eval_bundle/ folder.*deleted eval_bundle.zip "
                                            f"\\(from {wrong.url}\\), run again"):
            evalstage.stage(url=wrong.url, timeout_s=5, backoff_s=0.01)
    finally:
        wrong.shutdown()
        wrong.server_close()
    assert not (tmp_path / "eval_bundle.zip").exists() and not (tmp_path / "eval_bundle").exists()
    good = Mirror(bundle_zip)
    threading.Thread(target=good.serve_forever, daemon=True).start()
    try:
        path, examples, fetched = evalstage.stage(url=good.url, timeout_s=5, backoff_s=0.01)
    finally:
        good.shutdown()
        good.server_close()
    assert fetched and examples == 22 * 12 and good.ranges == [None]


def test_the_download_shows_its_bytes_as_they_come(mirror, bundle_zip, tmp_path, monkeypatch, capsys):
    """The zip (162 MB upstream) came without a word until it was whole: minutes of silence on a slow link."""
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # at a terminal (a job's log gets no bar)
    mirror.cut_first = True
    evalstage.stage(url=mirror.url, timeout_s=5, backoff_s=0.01, chunk_bytes=1024)
    err = capsys.readouterr().err.replace("\r", "\n")
    bars = [line for line in err.splitlines() if line.startswith("eval_bundle.zip:")]
    assert any(f"/{len(bundle_zip) / 1024:.1f}k [" in line and "B/s]" in line for line in bars)  # bytes of the zip
