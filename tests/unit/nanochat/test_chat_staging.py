"""Staged chat data: what a missing, corrupt or mixed file does, the generate/download commands' refusals.
The download is tried against a closed local port here; tests/unit/nanochat/test_chat_hub.py runs it against a
local stand-in of the hub.
python -m pytest tests/unit/nanochat/test_chat_staging.py -q"""

import os
import subprocess
import sys

import pytest

from bench.errors import DataError
from bench.nanochat import chatdata, chatgen, chatstage
from bench.nanochat.tasks.customjson import CustomJSON
from bench.nanochat.tasks.smoltalk import SmolTalk
from bench.nanochat.tasks.spellingbee import SpellingBee
from tests.support import hub


def cli(*args, base):
    env = dict(os.environ, NANOCHAT_BASE_DIR=str(base), PYTHONPATH=os.getcwd())
    return subprocess.run([sys.executable, "-m", "bench.cli", *args], capture_output=True, text=True, env=env,
                          timeout=120)


def test_a_missing_staged_split_names_the_download_command(tmp_path, monkeypatch):
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    for build in (lambda: SmolTalk(split="train"), CustomJSON, lambda: SpellingBee(size=3)):
        with pytest.raises(DataError, match="nanochat-bench data download --chat") as e:
            build()
        assert "\n" not in str(e.value) and str(tmp_path) in str(e.value)


def test_a_jsonl_line_cut_mid_string_is_read_plainly(tmp_path):
    """A line cut mid-string read "(Unterminated string starting at at column 5)": json's message ends in "at"."""
    path = tmp_path / "conv.jsonl"
    path.write_text('[{"ro\n')
    with pytest.raises(DataError) as e:
        CustomJSON(path)
    assert "not valid JSON (Unterminated string starting at: column 3)" in str(e.value) and "at at" not in str(e.value)


def test_a_corrupt_jsonl_line_names_file_and_line(tmp_path):
    path = tmp_path / "conv.jsonl"
    path.write_text('[{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]\n\n{"role": oops\n')
    with pytest.raises(DataError, match=rf"{path}:3: not valid JSON"):
        CustomJSON(path)
    path.write_text('[{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]\n')
    with pytest.raises(DataError, match=rf"{path}:1: message 1 must be .*assistant"):
        CustomJSON(path)


def test_a_damaged_parquet_file_names_it(tmp_path, monkeypatch):
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    chatgen.generate()
    victim = chatdata.split_files(chatdata.hub_split("openai/gsm8k", "main", "train"))[0]
    victim.write_bytes(victim.read_bytes()[:100])
    with pytest.raises(DataError, match=rf"{victim}: not a readable parquet file"):
        chatstage.check_split(chatdata.hub_split("openai/gsm8k", "main", "train"))


def test_generate_refuses_to_replace_then_overwrites(tmp_path):
    first = cli("data", "generate", "--chat", base=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "generated " in first.stdout and "identity_conversations.jsonl: 24 rows" in first.stdout
    again = cli("data", "generate", "--chat", base=tmp_path)
    assert again.returncode == 1 and again.stderr.count("\n") == 1 and "--overwrite" in again.stderr
    assert cli("data", "generate", "--chat", "--overwrite", base=tmp_path).returncode == 0


def test_download_refuses_to_mix_with_stand_ins_and_fails_offline_in_one_line(tmp_path):
    assert cli("data", "generate", "--chat", base=tmp_path).returncode == 0
    mixed = cli("data", "download", "--chat", "--url", "http://127.0.0.1:9", base=tmp_path)
    assert mixed.returncode == 1 and "stand-in is staged there" in mixed.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    offline = cli("data", "download", "--chat", "--url", "http://127.0.0.1:9", "--retries", "1", base=empty)
    assert offline.returncode == 1 and offline.stderr.count("\n") == 1, offline.stderr
    assert "cannot reach http://127.0.0.1:9/api/datasets/" in offline.stderr and "connection refused" in offline.stderr
    assert "--url" in offline.stderr
    assert "-n/--num-shards" in cli("data", "download", base=empty).stderr


def test_generated_plain_files_are_known_as_stand_ins(tmp_path, monkeypatch):
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    chatgen.generate()
    identity = tmp_path / chatdata.IDENTITY_FILE
    assert chatdata.is_generated_file(identity) and chatdata.is_generated_file(tmp_path / chatdata.WORDS_FILE)
    for split in chatdata.HUB_SPLITS:  # as if the hub splits had been downloaded over the stand-ins
        for f in chatdata.split_files(split):
            f.unlink()
    with pytest.raises(DataError, match=rf"{identity}: a `data generate --chat` stand-in"):
        chatstage._stage_file(chatdata.IDENTITY_FILE, "http://127.0.0.1:9/x", chatstage.ENV_IDENTITY_URL, 1, 1.0,
                              overwrite=False)
    identity.write_text(identity.read_text() + '[{"role": "user", "content": "a"}, '
                                               '{"role": "assistant", "content": "b"}]\n')
    assert not chatdata.is_generated_file(identity)  # changed since: not the stand-in any more


def test_an_interrupted_generate_leaves_no_stand_in_that_reads_as_real_and_a_cut_record_marks_nothing(tmp_path,
                                                                                                  monkeypatch):
    """The plain files were written in place before the record naming them as stand-ins: stopped in between, a
    complete-looking generated identity file read as downloaded data. A record cut short was a JSONDecodeError."""
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    real = chatdata.mark_generated
    monkeypatch.setattr(chatdata, "mark_generated", lambda written: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        chatgen.generate()
    assert not (tmp_path / chatdata.IDENTITY_FILE).exists() and not (tmp_path / chatdata.WORDS_FILE).exists()
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]  # no temp file, no split left either
    monkeypatch.setattr(chatdata, "mark_generated", real)
    chatgen.generate()
    (chatdata.chat_dir() / chatdata.GENERATED_FILES).write_text('{"identity')
    assert not chatdata.is_generated_file(tmp_path / chatdata.IDENTITY_FILE)


def _as_if_downloaded(base):
    """Generated files with their stand-in marks taken off, and a finished download recorded for each split."""
    import json

    chatgen.generate()
    sources = {}
    for s in chatdata.HUB_SPLITS:
        files = chatdata.split_files(s)
        for f in files:
            f.write_bytes(hub.unmarked(f))
        sources[f"{s.repo}/{s.pattern}"] = {"endpoint": "https://mirror.example", "rows": 0,
                                            "files": [str(f.relative_to(chatdata.chat_dir() / s.repo)) for f in files]}
    (chatdata.chat_dir() / chatdata.GENERATED_FILES).unlink()
    (chatdata.chat_dir() / chatstage.SOURCES).write_text(json.dumps(sources))
    return sources


def test_a_finished_staging_is_not_fetched_again_and_an_unfinished_one_is(tmp_path, monkeypatch):
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    sources = _as_if_downloaded(tmp_path)
    staged = chatstage.stage(url="http://127.0.0.1:9", retries=1)  # nothing to fetch: the port is never asked
    assert [rows for _, rows in staged][:2] == [chatgen.SIZES[("HuggingFaceTB/smol-smoltalk", "train")],
                                                chatgen.SIZES[("HuggingFaceTB/smol-smoltalk", "test")]]
    assert staged[-2][0] == tmp_path / chatdata.IDENTITY_FILE
    sources.pop("openai/gsm8k/main/test-*.parquet")  # as if that download had been cut off
    (chatdata.chat_dir() / chatstage.SOURCES).write_text(__import__("json").dumps(sources))
    with pytest.raises(DataError, match=r"cannot reach http://127.0.0.1:9/api/datasets/openai/gsm8k"):
        chatstage.stage(url="http://127.0.0.1:9", retries=1)


def test_a_record_cut_short_is_taken_as_empty_and_written_whole_again(tmp_path, monkeypatch):
    """A truncated chat_data/sources.json (a full disk, a copy cut off) ended `data download --chat` in a
    JSONDecodeError traceback. Each split is now checked against the hub again and the record is written whole."""
    import json

    from bench.nanochat import download

    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    sources = _as_if_downloaded(tmp_path)
    record = chatdata.chat_dir() / chatstage.SOURCES
    record.write_text(record.read_text()[:40])
    monkeypatch.setattr(download, "check_reachable", lambda *a, **k: None)
    monkeypatch.setattr(chatstage, "_hub_files", lambda s, url, timeout_s: sources[f"{s.repo}/{s.pattern}"]["files"])
    monkeypatch.setattr(chatstage, "_hub_file", lambda *a: None)  # the files are there already
    chatstage.stage(url="http://127.0.0.1:9", retries=1)
    assert json.loads(record.read_text()).keys() == sources.keys()


def test_a_second_staging_into_the_base_directory_waits_for_the_first_and_keeps_its_entries(tmp_path, monkeypatch,
                                                                                            capsys):
    """Two `data download --chat` at once each rewrote sources.json from what it had read, losing the other's
    entries (and resumed each other's <file>.tmp). The second waits, saying for whom, as the shards' download does."""
    import fcntl
    import json
    import threading
    import time

    from bench.nanochat import download

    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    sources = _as_if_downloaded(tmp_path)
    cut = "openai/gsm8k/main/test-*.parquet"
    unfinished = sources.pop(cut)  # the second staging fetches this split again and records it
    (chatdata.chat_dir() / chatstage.SOURCES).write_text(json.dumps(sources))
    monkeypatch.setattr(download, "check_reachable", lambda *a, **k: None)
    monkeypatch.setattr(chatstage, "_hub_files", lambda s, url, timeout_s: unfinished["files"])
    monkeypatch.setattr(chatstage, "_hub_file", lambda *a: None)  # the file is there already
    held = os.open(tmp_path / download.DOWNLOAD_LOCK, os.O_RDWR | os.O_CREAT)
    fcntl.flock(held, fcntl.LOCK_EX)  # the first staging is still running
    second = threading.Thread(target=chatstage.stage, kwargs={"url": "http://127.0.0.1:9", "retries": 1})
    second.start()
    deadline = time.time() + 10
    while "waiting for another data download" not in capsys.readouterr().out and time.time() < deadline:
        time.sleep(0.05)
    assert second.is_alive()
    sources["late/entry"] = {"endpoint": "https://mirror.example", "rows": 0, "files": []}  # the first one's last
    (chatdata.chat_dir() / chatstage.SOURCES).write_text(json.dumps(sources))
    os.close(held)
    second.join(timeout=30)
    assert not second.is_alive()
    recorded = json.loads((chatdata.chat_dir() / chatstage.SOURCES).read_text())
    assert recorded.keys() == {*sources, cut}  # the first one's last entry kept, the second one's added


def test_the_identity_file_and_word_list_are_fetched_checked_and_listed(tmp_path, monkeypatch):
    import functools
    import http.server
    import threading

    served = tmp_path / "served"
    served.mkdir()
    (served / "id.jsonl").write_text('[{"role": "user", "content": "who?"}, {"role": "assistant", "content": "me"}]\n')
    (served / "words.txt").write_text("apple\nbanana\n")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = tmp_path / "base"
        monkeypatch.setenv("NANOCHAT_BASE_DIR", str(base))
        _as_if_downloaded(base)
        (base / chatdata.IDENTITY_FILE).unlink()
        (base / chatdata.WORDS_FILE).unlink()
        url = f"http://127.0.0.1:{server.server_address[1]}"
        monkeypatch.setenv(chatstage.ENV_IDENTITY_URL, f"{url}/id.jsonl")
        monkeypatch.setenv(chatstage.ENV_WORDS_URL, f"{url}/words.txt")
        staged = dict(chatstage.stage(url="http://127.0.0.1:9", retries=1))
        assert staged[base / chatdata.IDENTITY_FILE] == 1 and staged[base / chatdata.WORDS_FILE] == 2
        assert len(CustomJSON()) == 1 and SpellingBee(size=2)[0]["messages"][0]["role"] == "user"
        (served / "id.jsonl").write_text("not json\n")
        (base / chatdata.IDENTITY_FILE).unlink()
        with pytest.raises(DataError, match=rf"{base / chatdata.IDENTITY_FILE}:1: not valid JSON"):
            chatstage.stage(url="http://127.0.0.1:9", retries=1)
    finally:
        server.shutdown()
        server.server_close()


def test_missing_staged_looks_up_every_staged_item_by_name(tmp_path, monkeypatch):
    """The check a flow makes before it starts: "" with the stand-ins there, else the first missing and a count."""
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    chatgen.generate()
    assert chatdata.missing_staged(tmp_path) == ""
    words = tmp_path / chatdata.WORDS_FILE
    words.unlink()
    gsm = chatdata.split_files(chatdata.hub_split("openai/gsm8k", "main", "test"))
    gsm[0].unlink()
    assert chatdata.missing_staged(tmp_path) == (
        f"{tmp_path / chatdata.CHAT_DIR / 'openai/gsm8k/main/test-*.parquet'}: missing staged chat data (and 1 more); "
        f"{chatdata.FIX_MISSING}")


def test_a_hub_that_answers_the_probe_but_never_the_listing_fails_within_the_timeout(tmp_path, monkeypatch):
    """huggingface_hub lists a repo's files with no timeout, and retries that 5 times itself: `--retries 1 --timeout
    1` against a mirror that took the request and never answered waited as long as the mirror stalled."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    release = threading.Event()

    class Quiet(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_HEAD(self):  # the reachability probe gets its answer
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self):
            release.wait(60)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    url, errors = f"http://127.0.0.1:{server.server_address[1]}", []
    staging = threading.Thread(target=lambda: errors.append(_error_of(chatstage.stage, url=url, retries=1,
                                                                      timeout_s=1)), daemon=True)
    try:
        staging.start()
        staging.join(timeout=15)
        assert not staging.is_alive(), "still waiting for the listing"
    finally:
        release.set()
        server.shutdown()
        server.server_close()
    assert isinstance(errors[0], DataError) and "\n" not in str(errors[0]), errors
    assert str(errors[0]).startswith(f"{url}/datasets/") and "1 attempt(s) failed" in str(errors[0])


def _error_of(call, **kwargs):
    try:
        call(**kwargs)
    except Exception as e:
        return e
