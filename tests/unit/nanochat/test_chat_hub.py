"""`nanochat-bench data download --chat` through its real path (huggingface_hub's listing and downloads, the plain
fetch of the two files), run as a user runs it, against a local stand-in of the Hugging Face Hub serving the files
of `data generate --chat` (tests/support/hub.py): no site network here.
python -m pytest tests/unit/nanochat/test_chat_hub.py -q"""

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from fnmatch import fnmatch

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.nanochat import chatdata, chatstage
from bench.nanochat.tasks import mixtures, smoltalk
from tests.support import hub
from tests.support.tmpfs import tmpfs


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """The base directory `data generate --chat` wrote, and what the hub serves of it."""
    work = tmp_path_factory.mktemp("generated")
    repos, plain = hub.chat_files(work)
    return work, repos, plain


@pytest.fixture
def local_hub(generated):
    with hub.serve(*generated[1:]) as h:
        yield h


@pytest.fixture(scope="module")
def downloaded(generated, tmp_path_factory):
    """One download of everything into a fresh base directory: (hub, base, the command's output)."""
    base = tmp_path_factory.mktemp("downloaded") / "base"
    with hub.serve(*generated[1:]) as h:
        yield h, base, download(h, base)


def download(h: hub.Hub, base, *args) -> subprocess.CompletedProcess:
    env = dict(os.environ, NANOCHAT_BASE_DIR=str(base), PYTHONPATH=os.getcwd(), **h.env(base.parent / "hf-home"))
    env.pop("HF_ENDPOINT")  # --url names the hub, as a user would type it
    return subprocess.run([sys.executable, "-m", "bench.cli", "data", "download", "--chat", "--url", h.url, *args],
                          capture_output=True, text=True, env=env, timeout=300)


def served_split(h: hub.Hub, s: chatdata.HubSplit) -> dict[str, bytes]:
    return {name: body for name, body in h.repos[s.repo].items() if fnmatch(name, s.pattern)}


def one_line_error(p: subprocess.CompletedProcess) -> str:
    assert p.returncode == 1 and p.stderr.startswith("error: ") and p.stderr.count("\n") == 1, p.stderr
    return p.stderr


def test_every_file_lands_in_the_documented_layout_checked_listed_and_recorded(downloaded):
    h, base, out = downloaded
    assert out.returncode == 0, out.stderr
    sources = json.loads((base / chatdata.CHAT_DIR / chatstage.SOURCES).read_text())
    for s in chatdata.HUB_SPLITS:
        files = served_split(h, s)
        folder = base / chatdata.CHAT_DIR / s.repo  # chat_data/<owner>/<name>/<path in the repo>
        assert {str(f.relative_to(folder)): f.read_bytes() for f in chatdata.split_files(s, base / "chat_data")} \
            == files
        rows = sum(hub.rows(body) for body in files.values())
        assert f"staged {folder / s.pattern}: {rows:,} rows\n" in out.stdout
        assert sources[f"{s.repo}/{s.pattern}"] == {"endpoint": h.url, "files": sorted(files), "rows": rows}
        assert not (folder / hub.CARD).exists()  # the dataset card is no file of a split
    identity, words = (h.plain[name].decode() for name in (chatdata.IDENTITY_FILE, chatdata.WORDS_FILE))
    assert (base / chatdata.IDENTITY_FILE).read_text() == identity
    assert (base / chatdata.WORDS_FILE).read_text() == words
    assert f"staged {base / chatdata.IDENTITY_FILE}: {len(identity.splitlines())} rows" in out.stdout
    assert f"staged {base / chatdata.WORDS_FILE}: {len(words.split()):,} rows" in out.stdout


def test_a_second_run_asks_the_hub_nothing(downloaded):
    h, base, first = downloaded
    h.requests.clear()
    again = download(h, base)
    assert again.returncode == 0, again.stderr
    assert h.requests == [] and again.stdout == first.stdout


def test_the_stages_read_the_downloaded_data_as_the_generated_data_it_came_from(downloaded, generated, monkeypatch):
    """The tasks of mid-training, SFT and chat evaluation over the download and over the generated base it was
    served from (there in one file, SmolTalk's train split here in two): the same examples in the same order."""
    from bench.nanochat.chat_eval import TASKS

    builders = {"mid_train": mixtures.mid_train, "mid_val": mixtures.mid_val, "sft": mixtures.chat_sft_train,
                "sft_val": mixtures.chat_sft_val, **TASKS}
    seen = {}
    for base in (downloaded[1], generated[0]):
        monkeypatch.setenv("NANOCHAT_BASE_DIR", str(base))
        for name, build in builders.items():
            task = build()
            every = max(1, len(task) // 5)  # five examples spread over the task
            seen.setdefault(name, []).append((len(task), [task[i] for i in range(0, len(task), every)]))
    for name, (got, want) in seen.items():
        assert got == want, name
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(downloaded[1]))
    parts = served_split(downloaded[0], chatdata.hub_split(smoltalk.REPO, "default", "train"))
    assert len(parts) == 2 and len(smoltalk.SmolTalk(split="train")) == sum(map(hub.rows, parts.values()))


def _padded(body: bytes, total: int) -> bytes:
    """The same rows with a column of random bytes, so the file is at least `total` bytes (parquet keeps random
    bytes as they are)."""
    table = pq.read_table(pa.BufferReader(body))
    rng = np.random.default_rng(0)
    per_row = total // table.num_rows + 1
    return hub.parquet_bytes(table.append_column("padding", pa.array([rng.bytes(per_row)
                                                                      for _ in range(table.num_rows)])))


def test_a_cut_transfer_is_taken_up_again_and_ends_complete(local_hub, tmp_path):
    """huggingface_hub writes in chunks of DOWNLOAD_CHUNK_SIZE: a file cut after a whole chunk resumes with a Range
    request from there; one cut inside its first chunk is fetched again whole; the plain fetch likewise."""
    from huggingface_hub import constants

    chunk = constants.DOWNLOAD_CHUNK_SIZE
    smoltalk, big = "HuggingFaceTB/smol-smoltalk", "data/train-00001-of-00002.parquet"
    local_hub.repos[smoltalk][big] = _padded(local_hub.repos[smoltalk][big], chunk + (1 << 20))
    local_hub.cut_once(big, chunk + 1000, repo=smoltalk)
    local_hub.cut_once("main/train-00000-of-00001.parquet", 1000, repo="openai/gsm8k")
    local_hub.cut_once(chatdata.IDENTITY_FILE, 100)
    out = download(local_hub, tmp_path / "base")
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    for repo, name in ((smoltalk, big), ("openai/gsm8k", "main/train-00000-of-00001.parquet")):
        assert (tmp_path / "base" / chatdata.CHAT_DIR / repo / name).read_bytes() == local_hub.repos[repo][name]
    assert (tmp_path / "base" / chatdata.IDENTITY_FILE).read_bytes() == local_hub.plain[chatdata.IDENTITY_FILE]
    asked = local_hub.bodies()

    def ranges(repo, name):
        return [r for p, r in asked if p == f"/cdn/{hub.sha256(local_hub.repos[repo][name])}"]

    assert ranges(smoltalk, big) == [None, f"bytes={chunk}-"]
    assert ranges("openai/gsm8k", "main/train-00000-of-00001.parquet") == [None, None]
    assert [r for p, r in asked if p == f"/files/{chatdata.IDENTITY_FILE}"][0] is None
    assert len([p for p, _ in asked if p == f"/files/{chatdata.IDENTITY_FILE}"]) == 2


@pytest.mark.parametrize("repo, name, spoil, says", [
    ("openai/gsm8k", "main/test-00000-of-00001.parquet", lambda body: b"<html>not parquet</html>",
     "not a readable parquet file"),
    ("allenai/ai2_arc", "ARC-Easy/train-00000-of-00001.parquet",
     lambda body: hub.parquet_bytes(pq.read_table(pa.BufferReader(body)).drop(["answerKey"])),
     "lacks column(s) answerKey"),
])
def test_a_served_file_the_tasks_cannot_read_is_refused_in_one_line(local_hub, tmp_path, repo, name, spoil, says):
    local_hub.repos[repo][name] = spoil(local_hub.repos[repo][name])
    out = download(local_hub, tmp_path / "base")
    error = one_line_error(out)
    assert f"error: {tmp_path / 'base' / chatdata.CHAT_DIR / repo / name}: {says}" in error
    assert f"{local_hub.url}/datasets/{repo}" in error and "nothing more was staged" in error
    sources = json.loads((tmp_path / "base" / chatdata.CHAT_DIR / chatstage.SOURCES).read_text())
    split = next(s for s in chatdata.HUB_SPLITS if s.repo == repo and fnmatch(name, s.pattern))
    assert f"{repo}/{split.pattern}" not in sources
    assert "openai/gsm8k/main/train-*.parquet" in sources  # the splits before it were staged


def test_what_the_server_says_it_lacks_is_not_retried(local_hub, tmp_path):
    """A 404 (no such dataset on the mirror, no such file at the address) ends at once in one line, even with
    retries left: no try changes the answer."""
    gsm8k = local_hub.repos.pop("openai/gsm8k")
    missing = download(local_hub, tmp_path / "base", "--retries", "4")
    assert "the server answered HTTP 404 (RepositoryNotFoundError)" in one_line_error(missing)
    assert "check the network" not in missing.stderr  # it answered: the network is not what a try would change
    assert "--url (or HF_ENDPOINT)" in missing.stderr
    assert [p for m, p, _ in local_hub.requests if m == "GET" and "gsm8k" in p] == ["/api/datasets/openai/gsm8k"]
    local_hub.repos["openai/gsm8k"] = gsm8k
    local_hub.plain.pop(chatdata.WORDS_FILE)
    no_words = download(local_hub, tmp_path / "base", "--retries", "4")
    assert f"{local_hub.plain_url(chatdata.WORDS_FILE)}: 1 attempt(s) failed, the last: the server answered HTTP 404" \
        in one_line_error(no_words)
    assert f"set {chatstage.ENV_WORDS_URL} to another copy" in no_words.stderr
    assert "check the network" not in no_words.stderr
    assert (tmp_path / "base" / chatdata.IDENTITY_FILE).is_file()  # what came before it is staged


@pytest.mark.parametrize("switch", ["HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"])
def test_hub_offline_mode_is_named_at_once_and_staged_splits_still_pass(downloaded, local_hub, tmp_path, switch):
    """HF_HUB_OFFLINE=1 (often set for compute nodes): every hub request was refused, retried with backoff for
    30 s, then reported as network trouble."""
    h, base, out = downloaded
    assert out.returncode == 0, out.stderr
    env = dict(os.environ, NANOCHAT_BASE_DIR=str(tmp_path / "base"), PYTHONPATH=os.getcwd(),
               **local_hub.env(tmp_path / "hf-home"))
    env.update({"HF_HUB_OFFLINE": "", switch: "1"})  # the hub reads TRANSFORMERS_OFFLINE when the first is unset
    fresh = subprocess.run([sys.executable, "-m", "bench.cli", "data", "download", "--chat"], capture_output=True,
                           text=True, env=env, timeout=60)
    error = one_line_error(fresh)
    assert f"smol-smoltalk/data/train-*.parquet: not staged yet, and {switch} is set here" in error
    assert f"with {switch} unset" in error
    assert not [p for m, p, _ in local_hub.requests if m == "GET" and p.startswith("/api/")]  # not asked at all
    env["NANOCHAT_BASE_DIR"] = str(base)  # everything staged: offline mode changes nothing
    again = subprocess.run([sys.executable, "-m", "bench.cli", "data", "download", "--chat"], capture_output=True,
                           text=True, env=env, timeout=60)
    assert again.returncode == 0, again.stderr


def test_a_read_only_base_directory_is_named_at_once_not_retried_as_network_trouble(local_hub, tmp_path):
    """The chat data's folder could not be made: retried with backoff for 30 s, then `check the network`."""
    with tmpfs(tmp_path / "ro", "ro,size=1m") as mnt:
        out = download(local_hub, mnt)
    error = one_line_error(out)
    assert f"cannot write {mnt / chatdata.CHAT_DIR}: Read-only file system" in error and "NANOCHAT_BASE_DIR" in error
    assert "check the network" not in error
    assert len([p for m, p, _ in local_hub.requests if m == "GET" and p.startswith("/api/")]) == 1  # once, not 5


@pytest.mark.parametrize("head", [False, True], ids=["body", "metadata"])
def test_a_stalled_request_is_asked_again_after_timeout_not_after_the_hubs_10_s(local_hub, tmp_path, head):
    """--timeout reached the listing but not huggingface_hub's file downloads, which waited on a silent CDN (or hub)
    for the library's 10 s: HF_HUB_DOWNLOAD_TIMEOUT is read when the library is imported, before the command set it,
    and the metadata HEAD has a timeout of its own."""
    repo, name = "openai/gsm8k", "main/train-00000-of-00001.parquet"
    local_hub.stall_once(name, 6, repo=repo, head=head)
    out = download(local_hub, tmp_path / "base", "--timeout", "1")
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "base" / chatdata.CHAT_DIR / repo / name).read_bytes() == local_hub.repos[repo][name]
    method, path = ("HEAD", f"/datasets/{repo}/resolve/main/{name}") if head else \
        ("GET", f"/cdn/{hub.sha256(local_hub.repos[repo][name])}")
    assert [p for m, p, _ in local_hub.requests if m == method and p == path] == [path, path]  # again after 1 s


def test_the_hubs_own_retry_of_the_metadata_request_waits_no_longer_than_timeout(local_hub, tmp_path):
    """huggingface_hub asks a file's metadata again on its own when the first HEAD got no answer, with a timeout of
    its own (60 s in 1.x and 2.x, whatever etag_timeout said): with --timeout 1 a silent hub held each try a minute."""
    repo, name = "openai/gsm8k", "main/train-00000-of-00001.parquet"
    local_hub.stall_once(name, 5, repo=repo, head=True, times=2)
    out = download(local_hub, tmp_path / "base", "--timeout", "1", "--retries", "2")
    assert out.returncode == 0, out.stderr
    path = f"/datasets/{repo}/resolve/main/{name}"
    assert [p for m, p, _ in local_hub.requests if m == "HEAD" and p == path] == [path] * 3  # not waited out


def test_a_hub_that_takes_the_connection_and_never_answers_fails_after_one_timeout(tmp_path):
    """The probe before a split's listing asked a silent hub 3 times, each for --timeout: with the default 30 s the
    command stopped after about 96 s, where README says a hub that never answers fails after --timeout."""
    with socket.socket() as silent:  # takes connections (the kernel's backlog), never reads or answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        env = dict(os.environ, NANOCHAT_BASE_DIR=str(tmp_path / "base"), PYTHONPATH=os.getcwd(),
                   HF_HOME=str(tmp_path / "hf-home"), HF_HUB_OFFLINE="0")
        env.pop("HF_ENDPOINT", None)
        out = subprocess.run([sys.executable, "-m", "bench.cli", "data", "download", "--chat", "--url", url,
                              "--timeout", "2"], capture_output=True, text=True, env=env, timeout=300)
        silent.setblocking(False)
        asked = 0
        with contextlib.suppress(BlockingIOError):
            while True:
                silent.accept()[0].close()
                asked += 1
    error = one_line_error(out)
    assert error.startswith(f"error: cannot reach {url}/api/datasets/") and "sent nothing within the read" in error
    # one probe of --timeout 2 s, not 3 of them: counted in connections, as seconds vary with the machine's load
    assert asked == 1


@pytest.mark.parametrize("head", [False, True], ids=["body", "metadata"])
def test_a_hub_gone_silent_for_good_fails_in_one_line_after_retries_tries_of_timeout(local_hub, tmp_path, head):
    """huggingface_hub retried a request that got no answer on its own, within each of our tries: a file's metadata
    5 more times (waiting 23 s besides), its body 5 more times, each for --timeout, and printed lines of its own;
    with the defaults (5 tries of 30 s) a hub that went quiet after the listing held the command 20 minutes."""
    repo, name = "openai/gsm8k", "main/train-00000-of-00001.parquet"
    local_hub.stall_once(name, 30, repo=repo, head=head, times=100)
    t0 = time.monotonic()
    out = download(local_hub, tmp_path / "base", "--timeout", "1", "--retries", "2")
    took = time.monotonic() - t0
    error = one_line_error(out)
    assert error.startswith(f"error: {local_hub.url}/datasets/{repo} {name}: 2 attempt(s) failed, the last: the "
                            "server took the connection but sent nothing within the read timeout; check the network")
    method, path = ("HEAD", f"/datasets/{repo}/resolve/main/{name}") if head else \
        ("GET", f"/cdn/{hub.sha256(local_hub.repos[repo][name])}")
    asked = [p for m, p, _ in local_hub.requests if m == method and p == path]
    assert asked == [path] * (4 if head else 2)  # metadata: once, and once more by the library, a try
    assert took < 30


def test_timeout_reaches_the_file_download_of_a_huggingface_hub_before_0_25(monkeypatch, tmp_path):
    """huggingface_hub 0.24 (pyproject's floor) bound HF_HUB_DOWNLOAD_TIMEOUT into file_download when imported, and
    its downloads read that copy: setting constants' alone left them the library's 10 s whatever --timeout said."""
    from huggingface_hub import constants, file_download

    monkeypatch.delenv("HF_HUB_DOWNLOAD_TIMEOUT", raising=False)
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    monkeypatch.setattr(constants, "HF_HUB_DOWNLOAD_TIMEOUT", constants.HF_HUB_DOWNLOAD_TIMEOUT)
    monkeypatch.setattr(file_download, "HF_HUB_DOWNLOAD_TIMEOUT", 10, raising=False)  # as 0.24 had it
    seen = []
    monkeypatch.setattr("huggingface_hub.hf_hub_download",
                        lambda *a, **kw: seen.append((file_download.HF_HUB_DOWNLOAD_TIMEOUT, kw["etag_timeout"])))
    split = chatdata.HubSplit("openai/gsm8k", "main", "train", "main/train-*.parquet", ("question",))
    chatstage._hub_file(split, "main/train-00000-of-00001.parquet", "http://127.0.0.1:9", 1.5)
    assert seen == [(1.5, 1.5)]
