"""Fetch FineWeb-Edu shards: parallel, resumable, retried, each file verified before it counts.

Upstream's downloader (nanochat/dataset.py) streams each shard to `<name>.tmp`, renames it when done and
retries 5 times with 2^attempt s backoff (here `retrying`, which the other downloads share). This one also
resumes a partial `.tmp` with an HTTP Range request, verifies every finished file as parquet with a `text` column
(a truncated or corrupt file is deleted and fetched again), runs in threads (the work is network I/O) and names
each shard it could not get. The base URL comes from the argument, else NANOCHAT_DATA_URL (a mirror), else Hugging Face.

Waits are bounded. One request before the pool starts finds a host that does not resolve, refuses
connections or never answers, and stops the command in seconds with one line; each request has a connect
and a read timeout, and a body that arrives slower than MIN_RATE_B_S over a read timeout's span fails its
attempt as stalled (a server trickling a byte at a time never lets the read timeout fire); and once
`max(retries, 2 x workers)` attempts in a row (across all workers) got no answer at all (or stalled), for as
long as one shard's retries wait in all (30 s by default), the mirror is taken as gone and the command stops,
instead of retrying every shard in turn. Any answer resets that, so a transient outage is still ridden out by
the retries.

Every downloaded file is recorded in sources.json (data_origin.py); a shard `data generate` made is never
counted as FineWeb-Edu: the command refuses to run over one unless `overwrite`. One download writes into a
directory at a time (its DOWNLOAD_LOCK); a second one waits for it, then keeps the shards it left.
"""

import errno
import http.client
import math
import os
import socket
import ssl
import sys
import threading
import time
from concurrent.futures import CancelledError, ThreadPoolExecutor, as_completed
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import requests
import urllib3
from tqdm import tqdm

from bench import locks, paths
from bench.errors import ConfigError, DataError, disk_full, first_line, os_reason, os_reason_and_remedy
from bench.nanochat import data_origin
from bench.nanochat.common import ELSEWHERE
from bench.nanochat.dataset import data_dir, file_names, shard_name, text_column_problem

ENV_DATA_URL = "NANOCHAT_DATA_URL"
DEFAULT_BASE_URL = "https://huggingface.co/datasets/karpathy/fineweb-edu-100b-shuffle/resolve/main"
WORKERS = 4  # parallel downloads: `data download`'s default too
CHUNK_BYTES = 1 << 20  # a cut connection loses at most the chunk in flight; the rest resumes
CONNECT_TIMEOUT_S = 10.0  # a TCP handshake takes milliseconds; 10 s covers a slow resolver and a far mirror
READ_TIMEOUT_S = 30.0  # the longest silence accepted from a server that took the connection
REACH_TRIES, REACH_PAUSE_S = 3, 0.5  # a host that refuses may be restarting: tried this often, this far apart
# a socket's errnos that OSError does not make a ConnectionError or TimeoutError of
NET_ERRNOS = (errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ENETDOWN, errno.ENETRESET, errno.EHOSTDOWN)
MAX_WAIT_S = 60.0  # the longest wait between two attempts, however many --retries
MIN_RATE_B_S = 1024  # slower than this over a read timeout's span is a stall: a 100 MB shard would take a day
FIX_URL = f"check the network, or point --url (or {ENV_DATA_URL}) at a mirror that serves the shards"


def verify_shard(path: Path) -> None:
    """Raise ValueError unless `path` is a complete parquet file with a string `text` column."""
    try:
        pf = pq.ParquetFile(path)
    except (OSError, pa.ArrowInvalid) as e:
        raise ValueError(f"not a readable parquet file ({e})") from None
    if problem := text_column_problem(pf.schema_arrow):
        raise ValueError(f"the parquet file{problem}")


def refused(e: BaseException) -> int | None:
    """The HTTP status of an answer no retry changes (a 4xx but 408 and 429, which ask to come back); else None.
    requests' and huggingface_hub's HTTP errors both carry the response."""
    status = getattr(getattr(e, "response", None), "status_code", None)
    return status if isinstance(status, int) and 400 <= status < 500 and status not in (408, 429) else None


def _network_errors() -> tuple[type[BaseException], ...]:
    """What a request that went wrong on the way raises: requests', urllib3's and the socket's errors, and those of
    the httpx that huggingface_hub >= 1.0 requests through (httpx2 from 2.x), once the hub has imported it."""
    found = [requests.RequestException, urllib3.exceptions.HTTPError, http.client.HTTPException, ConnectionError,
             TimeoutError, socket.gaierror, socket.herror, ssl.SSLError]
    return (*found, *(mod.HTTPError for name in ("httpx", "httpx2") if (mod := sys.modules.get(name))))


def retried(e: BaseException) -> bool:
    """Whether another attempt may fare otherwise: a network error, an HTTP error (refused() tells the final ones),
    a file the server sent that did not verify (ValueError), or an OSError without errno (huggingface_hub's for a
    body cut short, or for metadata it could not get, from the network error). Not an OSError of a system call of
    this machine (its errno: EIO, ENOSPC, EACCES, EROFS, EMFILE, ...), nor a programming error (TypeError, ...).
    RuntimeError is hf_xet's for every failure before 1.x, a network's included."""
    if isinstance(e, _network_errors()):
        return True
    if isinstance(e, OSError):
        return (e.errno is None or e.errno in NET_ERRNOS) and not disk_full(e)
    return isinstance(e, (ValueError, RuntimeError))


def no_answer(e: BaseException) -> str | None:
    """Why a request got no answer at all, in words (`the host name does not resolve`, `connection refused`,
    a timeout); None when the server did answer (an HTTP error, a bad file) or the error is not network."""
    if isinstance(e, requests.ConnectTimeout):
        return "no connection within the connect timeout"
    if isinstance(e, Stalled):
        return str(e)
    if isinstance(e, requests.ReadTimeout):
        return "the server took the connection but sent nothing within the read timeout"
    # huggingface_hub >= 1.0 requests through httpx (httpx2 from 2.x), and wraps a metadata request's timeout in
    # LocalEntryNotFoundError ("... cannot find the requested files in the local cache"), which says nothing of it
    for mod in filter(None, map(sys.modules.get, ("httpx", "httpx2"))):
        if any(isinstance(c, mod.ConnectTimeout) for c in _causes(e)):
            return "no connection within the connect timeout"
        if any(isinstance(c, mod.TimeoutException) for c in _causes(e)):
            return "the server took the connection but sent nothing within the read timeout"
    if not isinstance(e, requests.ConnectionError):
        return None
    if isinstance(e, requests.exceptions.ProxyError):
        return "the HTTP(S)_PROXY of this environment cannot be reached or refused the request"
    for cause in _causes(e):
        if isinstance(cause, socket.gaierror):
            return "the host name does not resolve (no network or DNS here, or a wrong host)"
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused (nothing listens at that host and port)"
        if isinstance(cause, urllib3.exceptions.ReadTimeoutError):
            return "the server stopped sending within the read timeout"
    return f"connection failed ({type(e).__name__})"


def _causes(e: BaseException):
    """e, its causes and contexts, and urllib3's `reason`s: where the socket error of a requests error hides."""
    seen, todo = set(), [e]
    while todo:
        cur = todo.pop()
        if id(cur) in seen:
            continue
        seen.add(id(cur))
        yield cur
        linked = (cur.__cause__, cur.__context__, getattr(cur, "reason", None), *getattr(cur, "args", ()))
        todo += [x for x in linked if isinstance(x, BaseException)]


def timeouts(timeout_s: float) -> tuple[float, float]:
    """requests' (connect, read) timeouts for a `timeout_s` budget: a dead host is told in CONNECT_TIMEOUT_S, unless
    the budget is shorter still."""
    return min(CONNECT_TIMEOUT_S, timeout_s), timeout_s


def check_reachable(url: str, timeout: tuple[float, float], fix: str, retry_any: bool = False) -> None:
    """One HEAD request at `url` before a download and its retries: DataError in one line (`fix` after the
    reason) when the host does not resolve or never answers (at once, unless `retry_any`) or refuses (after
    REACH_TRIES quick tries: it may be restarting). The tries together wait for answers about one read timeout
    (--timeout), the pauses between them aside: a server that takes the connection and never answers is not waited
    out once a try. Any HTTP answer, even an error, means a server is there: the downloads then say what is wrong."""
    connect_s, left = timeout
    for attempt in range(1, REACH_TRIES + 1):
        started = time.monotonic()
        try:
            requests.head(url, timeout=timeout, allow_redirects=True)
            return
        except (requests.exceptions.MissingSchema, requests.exceptions.InvalidSchema,
                requests.exceptions.InvalidURL) as e:  # no request can be made of it: every retry would fail alike
            raise ConfigError(f"cannot reach {url}: not an http(s) URL ({first_line(e)}); {fix}") from None
        except requests.RequestException as e:
            why = no_answer(e)
            if why is None:
                return
            refused = any(isinstance(c, ConnectionRefusedError) for c in _causes(e))
            left -= time.monotonic() - started
            if attempt == REACH_TRIES or not (retry_any or refused) or left <= 0:
                raise DataError(f"cannot reach {url}: {why}; {fix}") from None
        threading.Event().wait(REACH_PAUSE_S)
        timeout = (min(connect_s, left), left)


class _Breaker:
    """Attempts in a row (across all workers) that got no answer: `limit` of them with no answer for `quiet_s`
    open it (the mirror is gone: every worker stops before its next attempt); any answer resets both."""

    def __init__(self, limit: int, quiet_s: float):
        self.limit, self.quiet_s, self.in_a_row, self.last = limit, quiet_s, 0, ""
        self.last_answer = time.monotonic()
        self.quiet_when_opened = 0.0
        self.open = threading.Event()
        self._lock = threading.Lock()

    def no_answer(self, why: str) -> None:
        with self._lock:
            if self.open.is_set():
                return  # attempts that were in flight when it opened: the verdict stands as it was
            self.in_a_row += 1
            self.last = why
            quiet = time.monotonic() - self.last_answer
            if self.in_a_row >= self.limit and quiet >= self.quiet_s:
                self.quiet_when_opened = quiet
                self.open.set()

    def answered(self) -> None:
        with self._lock:
            if not self.open.is_set():
                self.in_a_row, self.last_answer = 0, time.monotonic()


def retry_waits_s(retries: int, backoff_s: float) -> float:
    """Seconds one shard's retries wait in all (`retrying`'s waits)."""
    return sum(min(MAX_WAIT_S, backoff_s * 2 ** k) for k in range(retries - 1))


class NotFineWeb(ValueError):
    """A file that is a valid shard but says it was generated: no retry changes that."""


class _Stopped(Exception):
    """A shard not tried (further) because the mirror was taken as gone."""


class Stalled(requests.exceptions.ReadTimeout):
    """A body that kept coming, but slower than MIN_RATE_B_S over a read timeout's span."""


class GaveUp(DataError):
    """A download's attempts all failed, or one got an answer no retry changes (`refused`: its HTTP status)."""

    def __init__(self, message: str, refused: int | None = None):
        super().__init__(message)
        self.refused = refused


def retrying(what: str, fetch, retries: int, backoff_s: float, then: str = "", wait=time.sleep,
             then_refused: str | None = None):
    """fetch() until it returns, at most `retries` attempts, waiting backoff_s, then twice that, ... (at most
    MAX_WAIT_S) between them, as upstream's download_single_file (5 attempts, 2^attempt s). GaveUp in one line
    naming `what`, the attempts and the last error, then `then`: after the last attempt, or at once on an answer no
    retry changes (refused) or a shard `data generate` made; `then_refused`, when given, replaces `then` after a
    refusal, where running again changes nothing. An error of this machine (an OSError of our disk: the caller
    names the file) or of the code is raised as it is, at once: no retry changes it (retried())."""
    for attempt in range(1, retries + 1):
        try:
            return fetch()
        except (DataError, _Stopped):
            raise
        except Exception as e:
            if not retried(e):
                raise
            final = refused(e)
            if attempt == retries or final or isinstance(e, NotFineWeb):
                status = getattr(getattr(e, "response", None), "status_code", None)
                why = (f"the server answered HTTP {status} ({type(e).__name__})" if isinstance(status, int) else
                       no_answer(e) or (first_line(e) if isinstance(e, ValueError) else
                                        f"{type(e).__name__}: {first_line(e, '')}"))
                then = then_refused if final and then_refused is not None else then
                raise GaveUp(f"{what}: {attempt} attempt(s) failed, the last: {why}" + (then and f"; {then}"),
                             final) from None
        wait(min(MAX_WAIT_S, backoff_s * 2 ** (attempt - 1)))


def _pieces(r: requests.Response, size: int):
    """The body as it arrives, up to `size` bytes a piece: iter_content waits for whole chunks, so a server that
    trickles a byte at a time would hold one open for good. urllib3's errors become requests', as there."""
    # read1 is urllib3 2.2's (pyproject's floor); an older one an image ships reads whole pieces, as iter_content
    # does, so the download still works and only a trickle is left to the read timeout
    read = getattr(r.raw, "read1", None) or r.raw.read
    try:
        while piece := read(size, decode_content=True):
            yield piece
    except urllib3.exceptions.ProtocolError as e:
        raise requests.exceptions.ChunkedEncodingError(e) from e
    except urllib3.exceptions.DecodeError as e:
        raise requests.exceptions.ContentDecodingError(e) from e
    except urllib3.exceptions.ReadTimeoutError as e:
        raise requests.ConnectionError(e) from e
    except urllib3.exceptions.SSLError as e:
        raise requests.exceptions.SSLError(e) from e


def _fetch_once(url: str, tmp: Path, timeout: tuple[float, float], chunk_bytes: int = CHUNK_BYTES,
                bar: tqdm | None = None) -> None:
    """One attempt: continue `tmp` from its current size if the server honours Range, else start over; `bar`
    counts the file's bytes (what an earlier try left included). Stalled when fewer than MIN_RATE_B_S bytes a
    second arrived over the read timeout's span, so a trickle ends within about twice the read timeout."""
    have = tmp.stat().st_size if tmp.exists() else 0
    headers = {"Range": f"bytes={have}-"} if have else {}
    with requests.get(url, stream=True, timeout=timeout, headers=headers) as r:
        if r.status_code == 416:  # our partial file is already the whole thing
            return
        r.raise_for_status()
        mode = "ab" if have and r.status_code == 206 else "wb"
        start = have if mode == "ab" else 0
        if bar is not None:
            bar.reset(total=start + int(r.headers.get("Content-Length", 0)) or None)
            bar.update(start)
        since, got = time.monotonic(), 0
        with open(tmp, mode) as f:
            for chunk in _pieces(r, chunk_bytes):
                f.write(chunk)
                if bar is not None:
                    bar.update(len(chunk))
                got, span = got + len(chunk), time.monotonic() - since
                if span >= timeout[1]:
                    if got < MIN_RATE_B_S * span:
                        raise Stalled(f"the server sent {got:,} bytes in {span:.1f} s, under {MIN_RATE_B_S:,} "
                                      f"bytes/s (a stalled transfer)")
                    since, got = time.monotonic(), 0


def download_one(index: int, out_dir: Path, url: str, retries: int, backoff_s: float, timeout_s: float,
                 chunk_bytes: int, replace: bool, breaker: _Breaker) -> Path:
    """Fetch shard `index` into out_dir unless a valid copy is there (or `replace`: a generated shard in the
    way); GaveUp naming it if all tries fail, DataError in one line when out_dir cannot be written."""
    path = out_dir / shard_name(index)
    if path.exists():
        try:
            verify_shard(path)
            if not replace:
                return path
        except ValueError:
            pass  # a bad file from elsewhere: fetch it again
        path.unlink()
    tmp = path.with_name(path.name + ".tmp")  # a fixed name, unlike atomic_target's: a later try resumes it
    shard_url = f"{url}/{shard_name(index)}"
    timeout = timeouts(timeout_s)

    def attempt() -> Path:
        if breaker.open.is_set():
            raise _Stopped()
        try:
            _fetch_once(shard_url, tmp, timeout, chunk_bytes)
            verify_shard(tmp)
            if data_origin.recipe(tmp) is not None:
                raise NotFineWeb("the mirror serves a shard made by `data generate` (its footer says so), "
                                 "not FineWeb-Edu")
        except ValueError:
            breaker.answered()
            tmp.unlink(missing_ok=True)  # complete but bad: start over (a cut download keeps its .tmp)
            raise
        except requests.RequestException as e:
            why = no_answer(e)
            breaker.no_answer(why) if why else breaker.answered()
            raise
        breaker.answered()
        os.replace(tmp, path)
        data_origin.record_downloaded(path, shard_url)
        return path

    try:  # a backoff ends at once when the mirror is given up (breaker.open), and the next attempt is not made
        return retrying(f"{shard_name(index)} from {shard_url}", attempt, retries, backoff_s, wait=breaker.open.wait)
    except GaveUp:
        if breaker.open.is_set():
            raise _Stopped() from None
        raise
    except OSError as e:  # our side: a full disk, a read-only directory, sources.json or its lock
        raise DataError(f"data download: cannot write {e.filename or tmp}: "
                        f"{os_reason_and_remedy(e, ELSEWHERE)}, then run again "
                        "to resume") from None


def check_tries(retries: int, timeout_s: float) -> None:
    """--retries and --timeout, as every `data download` takes them; ConfigError naming the flag."""
    if retries < 1:
        raise ConfigError(f"--retries {retries}: must be >= 1")
    if not 0 < timeout_s < math.inf:  # nan and inf too: sockets take neither
        raise ConfigError(f"--timeout {timeout_s}: must be a positive number of seconds")


def generated_in_the_way(out: Path, num_shards: int) -> list[Path]:
    """Shards 0..num_shards-1 already in `out` that `data generate` made: never to be taken as FineWeb-Edu."""
    paths = [out / shard_name(i) for i in range(num_shards)]
    return [p for p, origin in data_origin.origins([p for p in paths if p.exists()]).items()
            if origin == data_origin.GENERATED or (origin is None and data_origin.unmarked_generated(p))]


DOWNLOAD_LOCK = ".download.lock"  # in the shards' directory: held by the `data download` writing into it


def one_download_at_a_time(directory: Path):
    """Two users staging one shared base directory at once would each resume the other's half-written `<shard>.tmp`
    and mix their bytes: the second waits, then finds the first one's shards there and keeps them."""
    return locks.in_turn(directory / DOWNLOAD_LOCK, f"another data download into {directory}")


def download_shards(num_shards: int, workers: int = WORKERS, url: str | None = None,
                    out_dir: str | os.PathLike | None = None,
                    retries: int = 5, backoff_s: float = 2.0, timeout_s: float = READ_TIMEOUT_S,
                    progress: bool = True, chunk_bytes: int = CHUNK_BYTES, overwrite: bool = False) -> list[Path]:
    """Shards 0..num_shards-1 (-1 = all 1823) into out_dir (default base_data/); DataError listing failures,
    or in one line when the mirror cannot be reached or stops answering. Generated shards in the way are
    a DataError naming them unless `overwrite` (then they are replaced by the downloads)."""
    total = paths.MAX_SHARD + 1
    if num_shards == -1:
        num_shards = total
    if not 1 <= num_shards <= total:
        raise ConfigError(f"-n {num_shards}: must be between 1 and {total}, or -1 for all {total} shards")
    if workers < 1:
        raise ConfigError(f"-w {workers}: must be >= 1")
    check_tries(retries, timeout_s)
    out = data_dir(out_dir)
    generated = generated_in_the_way(out, num_shards)
    if generated and not overwrite:
        raise DataError(f"{out} holds {file_names(generated)}, made by `data generate`, not FineWeb-Edu: "
                        f"downloading would mix the two; pass --overwrite to replace them by the downloads, or "
                        f"{ELSEWHERE}")
    if generated:
        print(f"replacing {file_names(generated)} (made by `data generate`; --overwrite) by the downloads")
    url = (url or os.environ.get(ENV_DATA_URL) or DEFAULT_BASE_URL).rstrip("/")
    check_reachable(f"{url}/{shard_name(0)}", timeouts(timeout_s),
                    f"nothing was downloaded; {FIX_URL}")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # a read-only or full filesystem: the shards' own writes say so too, this comes first
        raise DataError(f"data download: cannot write into {out}: {os_reason(e)}; set NANOCHAT_BASE_DIR to a "
                        f"writable directory") from None
    breaker = _Breaker(limit=max(retries, 2 * workers), quiet_s=retry_waits_s(retries, backoff_s))
    done, failed, local, all_refused = [], [], None, True
    with one_download_at_a_time(out), ThreadPoolExecutor(max_workers=workers) as pool, \
            tqdm(total=num_shards, unit="shard", desc="download", disable=not progress) as bar:
        futures = [pool.submit(download_one, i, out, url, retries, backoff_s, timeout_s, chunk_bytes,
                               out / shard_name(i) in generated, breaker) for i in range(num_shards)]
        for fut in as_completed(futures):
            try:
                done.append(fut.result())
                bar.update(1)  # the bar counts shards that arrived; failures are counted beside it
            except (_Stopped, CancelledError):
                pass  # not tried: the breaker's message below says why
            except GaveUp as e:
                failed.append(str(e))
                all_refused = all_refused and e.refused is not None
                bar.set_postfix_str(f"{len(failed)} failed", refresh=True)
            except DataError as e:
                local = local or e
                breaker.open.set()  # writing fails here, for every shard alike: stop the others too
            if breaker.open.is_set():
                for f in futures:
                    f.cancel()  # the mirror is gone (or our disk is full): shards not started yet are not tried
    if local is not None:
        raise local
    if breaker.open.is_set():
        raise DataError(f"data download stopped: {breaker.in_a_row} attempt(s) in a row to reach {url} got no "
                        f"answer for {breaker.quiet_when_opened:.1f} s (last: {breaker.last}); {len(done)} of "
                        f"{num_shards} shard(s) are in {out} (run again to resume); {FIX_URL}")
    if failed:  # where the mirror refused every one (a 404 of a wrong --url), running again changes nothing
        then = f"the mirror refused them: {FIX_URL}" if all_refused else "run again to resume"
        raise DataError(f"{len(failed)} of {num_shards} shard(s) could not be downloaded into {out} "
                        f"({then}):\n  " + "\n  ".join(sorted(failed)))
    return sorted(done)
