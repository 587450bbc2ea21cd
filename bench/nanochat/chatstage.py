"""`nanochat-bench data download --chat`: stage every dataset the later stages read, for compute nodes without
internet. Hub datasets come through huggingface_hub (a mirror with --url or HF_ENDPOINT; a transfer cut off
mid-file is taken up again by the next try from the last whole chunk the client wrote, as tests/unit/nanochat/
test_chat_hub.py shows against a local stand-in of the hub); the identity conversations and the word list
through the shard downloader's resuming fetch. Each file is checked after it lands; a staged file that passes
is not fetched again. A refusal from the server (an HTTP 4xx: no such dataset or file there) is not retried."""

import contextlib
import functools
import inspect
import logging
import os
from pathlib import Path

from bench.errors import DataError, os_reason_and_remedy
from bench.nanochat import chatdata, data_origin, download
from bench.nanochat.common import ELSEWHERE, get_base_dir
from bench.contract import write_json_atomic

DEFAULT_ENDPOINT = "https://huggingface.co"
ENV_IDENTITY_URL = "NANOCHAT_IDENTITY_URL"
ENV_WORDS_URL = "NANOCHAT_WORDS_URL"
SOURCES = data_origin.SOURCES_JSON
HUB_HINT = "point --url (or HF_ENDPOINT) at a Hugging Face mirror that holds the dataset"
BACKOFF_S = 2.0  # the wait after a failed try, doubled after each: 5 tries wait 30 s in all


def endpoint(url: str | None) -> str:
    return (url or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def check_split(s: chatdata.HubSplit, fix: str = chatdata.FIX_MISSING) -> int:
    """Rows of a staged split; DataError naming the file when one is missing, unreadable or lacks a column."""
    files = chatdata.split_files(s)
    if not files:
        raise DataError(f"{chatdata.chat_dir() / s.repo / s.pattern}: nothing staged for {s.repo} "
                        f"{s.config}/{s.split}; {fix}")
    return sum(chatdata.read_staged_table(f, s.columns, fix).num_rows for f in files)


def check_file(name: str) -> int:
    """Lines of a staged plain file (JSONL conversations are parsed, each line checked)."""
    path = chatdata.staged_file(name)
    if name == chatdata.IDENTITY_FILE:
        return len(chatdata.read_jsonl_conversations(path))
    return sum(1 for w in chatdata.staged_words() if w)


def _with_retries(what: str, fetch, retries: int, hint: str):
    try:  # network and hub errors alike: the next try resumes what has landed
        return download.retrying(what, fetch, retries, BACKOFF_S, f"check the network, or {hint}", then_refused=hint)
    except OSError as e:  # our disk, not the network
        raise DataError(f"{what}: cannot write {e.filename or get_base_dir()}: {os_reason_and_remedy(e, ELSEWHERE)}, "
                        "then run again to resume") from None


def _stage_split(s: chatdata.HubSplit, url: str, retries: int, timeout_s: float, overwrite: bool) -> int:
    generated = [f for f in chatdata.split_files(s) if chatdata.is_generated(f)]
    if generated and not overwrite:
        raise DataError(f"{generated[0]}: a `data generate --chat` stand-in is staged there; pass --overwrite to "
                        "replace the stand-ins by the real data (default: refuse to mix them)")
    for f in generated:
        f.unlink()
    key = f"{s.repo}/{s.pattern}"
    done = _sources().get(key, {}).get("files")
    if isinstance(done, list) and all((chatdata.chat_dir() / s.repo / name).is_file() for name in done):
        try:
            return check_split(s)  # every file of a finished download is there and reads: not fetched again
        except DataError:
            pass  # damaged since: fetch again
    if switch := _offline_switch():
        raise DataError(f"{chatdata.chat_dir() / s.repo / s.pattern}: not staged yet, and {switch} is set here, so "
                        f"huggingface_hub refuses every request; run this command with {switch} unset (the stages "
                        "read the staged data offline)")
    download.check_reachable(f"{url}/api/datasets/{s.repo}", download.timeouts(timeout_s),
                             "nothing more was staged; check the network, or point --url (or HF_ENDPOINT) at a "
                             "Hugging Face mirror", retry_any=True)
    wanted = _with_retries(f"{url}/datasets/{s.repo} {s.pattern}", lambda: _hub_files(s, url, timeout_s), retries,
                           HUB_HINT)
    folder = chatdata.chat_dir() / s.repo
    for stale in set(chatdata.split_files(s)) - {folder / name for name in wanted}:
        stale.unlink()  # from another revision of the dataset: it would be read with the others
    for name in wanted:
        _with_retries(f"{url}/datasets/{s.repo} {name}", lambda: _hub_file(s, name, url, timeout_s), retries, HUB_HINT)
    rows = check_split(s, fix=f"refused as {url}/datasets/{s.repo} serves it (is that a mirror of the dataset?); "
                              "nothing more was staged")
    files = [str(f.relative_to(chatdata.chat_dir() / s.repo)) for f in chatdata.split_files(s)]
    _record_source(key, {"endpoint": url, "files": files, "rows": rows})
    return rows


def _offline_switch() -> str | None:
    """The variable that puts huggingface_hub in offline mode (no retry gets past it), or None when it is online."""
    from huggingface_hub import constants

    if not constants.HF_HUB_OFFLINE:
        return None
    return "HF_HUB_OFFLINE" if os.environ.get("HF_HUB_OFFLINE") else "TRANSFORMERS_OFFLINE"


def _hub_files(s: chatdata.HubSplit, url: str, timeout_s: float) -> list[str]:
    """The split's files as the hub lists them now (asked first, so a partial download is never taken as whole).
    From the dataset's info, as list_repo_files has no timeout (and retries on its own): a mirror that took the
    request and never answered held the command for good."""
    from fnmatch import fnmatch

    from huggingface_hub import HfApi

    info = HfApi(endpoint=url).dataset_info(s.repo, timeout=timeout_s)
    names = [f.rfilename for f in info.siblings or () if fnmatch(f.rfilename, s.pattern)]
    if not names:
        raise DataError(f"{url}/datasets/{s.repo}: no file matches {s.pattern}; is it a mirror of that dataset?")
    return sorted(names)


def _hub_file(s: chatdata.HubSplit, name: str, url: str, timeout_s: float) -> None:
    """One file, into the split's folder (its path in the repo kept); a file already there with the hub's ETag is
    not fetched again (huggingface_hub keeps its metadata under the folder's .cache/huggingface/)."""
    from huggingface_hub import constants, file_download, hf_hub_download

    # The library reads HF_HUB_DOWNLOAD_TIMEOUT once, when imported, so setting the variable now would change nothing;
    # one the user exported is kept, as HF_HUB_ETAG_TIMEOUT is by hf_hub_download over etag_timeout.
    if not os.environ.get("HF_HUB_DOWNLOAD_TIMEOUT"):
        constants.HF_HUB_DOWNLOAD_TIMEOUT = timeout_s
        if hasattr(file_download, "HF_HUB_DOWNLOAD_TIMEOUT"):  # before 0.25 its downloads read a copy of their own
            file_download.HF_HUB_DOWNLOAD_TIMEOUT = timeout_s
    # a metadata request that got no answer is asked again by the library itself, with this timeout (60 s), not
    # etag_timeout: each of our tries waited a minute on a silent hub
    if hasattr(file_download, "_ETAG_RETRY_TIMEOUT"):
        file_download._ETAG_RETRY_TIMEOUT = timeout_s
    with _one_request_a_try(file_download):
        hf_hub_download(s.repo, name, repo_type="dataset", local_dir=chatdata.chat_dir() / s.repo, endpoint=url,
                        etag_timeout=timeout_s)


@contextlib.contextmanager
def _one_request_a_try(file_download):
    """huggingface_hub's own retries of a request that got no answer taken off for one hf_hub_download: it asked a
    file's metadata again up to 5 more times (with waits of 23 s) and its body 5 more times, each for --timeout,
    so with the defaults one of our tries of a silent hub took 4 minutes and --retries 5 of them 20. Our retries
    remain (--retries, BACKOFF_S), and each resumes what has landed as the library's own did."""
    patched = {}
    get_metadata = getattr(file_download, "_get_metadata_or_catch_error", None)
    if get_metadata is not None and "retry_on_errors" in inspect.signature(get_metadata).parameters:
        patched["_get_metadata_or_catch_error"] = functools.partial(_without_retries, get_metadata)
    http_get = getattr(file_download, "http_get", None)
    if http_get is not None and "_nb_retries" in inspect.signature(http_get).parameters:
        patched["http_get"] = functools.partial(http_get, _nb_retries=0)
    originals = {attr: getattr(file_download, attr) for attr in patched}
    for attr, value in patched.items():
        setattr(file_download, attr, value)
    hub_log = logging.getLogger("huggingface_hub")
    level = hub_log.level
    hub_log.setLevel(logging.ERROR)  # its lines on a timed-out request: our one-line error says it
    try:
        yield
    finally:
        hub_log.setLevel(level)
        for attr, value in originals.items():
            setattr(file_download, attr, value)


def _without_retries(get_metadata, *args, **kwargs):
    return get_metadata(*args, **{**kwargs, "retry_on_errors": False})


def _sources() -> dict:
    """chat_data/sources.json: each finished hub download, its endpoint, files and rows (partial ones are absent,
    so an interrupted download is resumed rather than taken as complete); {} when absent or unreadable (a record
    cut short: each split is then checked against the hub again, and the record written whole)."""
    return data_origin.read_sources(chatdata.chat_dir())


def _record_source(key: str, entry: dict) -> None:
    write_json_atomic(chatdata.chat_dir() / SOURCES, {**_sources(), key: entry})


def _stage_file(name: str, url: str, env: str, retries: int, timeout_s: float, overwrite: bool) -> int:
    path = get_base_dir() / name
    if chatdata.is_generated_file(path):
        if not overwrite:
            raise DataError(f"{path}: a `data generate --chat` stand-in is staged there; pass --overwrite to "
                            "replace the stand-ins by the real data (default: refuse to mix them)")
        path.unlink()
    try:
        return check_file(name)
    except DataError:
        pass
    tmp = path.with_name(path.name + ".tmp")  # a fixed name: a later try resumes it
    timeout = download.timeouts(timeout_s)
    _with_retries(url, lambda: download._fetch_once(url, tmp, timeout), retries, f"set {env} to another copy")
    os.replace(tmp, path)
    return check_file(name)


def stage(url: str | None = None, retries: int = 5, timeout_s: float = download.READ_TIMEOUT_S,
          overwrite: bool = False) -> list[tuple[Path, int]]:
    """Stage everything; (path, rows) for each split and file, in HUB_SPLITS order then the two files."""
    download.check_tries(retries, timeout_s)
    hub = endpoint(url)
    out = []
    # one staging into a base directory at a time, as the shards' downloads: two at once each rewrote sources.json
    # from what they had read, losing the other's entries, and resumed each other's half-written <file>.tmp
    with download.one_download_at_a_time(get_base_dir()):
        for s in chatdata.HUB_SPLITS:
            rows = _stage_split(s, hub, retries, timeout_s, overwrite)
            out.append((chatdata.chat_dir() / s.repo / s.pattern, rows))
        for name, default, env in ((chatdata.IDENTITY_FILE, chatdata.IDENTITY_URL, ENV_IDENTITY_URL),
                                   (chatdata.WORDS_FILE, chatdata.WORDS_URL, ENV_WORDS_URL)):
            rows = _stage_file(name, os.environ.get(env) or default, env, retries, timeout_s, overwrite)
            out.append((get_base_dir() / name, rows))
    return out


def print_staged(staged: list[tuple[Path, int]], verb: str) -> None:
    for path, rows in staged:
        print(f"{verb} {path}: {rows:,} rows")


def cli_download(args) -> int:
    """`data download --chat` (bench/commands/data.py hands over here)."""
    staged = stage(url=args.url, retries=args.retries, timeout_s=args.timeout, overwrite=args.overwrite)
    print_staged(staged, "staged")
    print(f"{len(staged)} chat data item(s) staged under {get_base_dir()}; nodes read them offline")
    return 0


def cli_generate(args) -> int:
    """`data generate --chat`: offline stand-ins in the staged layout."""
    from bench.nanochat import chatgen

    written = chatgen.generate(overwrite=args.overwrite)
    print_staged(written, "generated")
    print(f"{len(written)} generated chat data file(s) under {get_base_dir()} (offline stand-ins, not the real data)")
    return 0
