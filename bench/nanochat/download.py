"""Fetch FineWeb-Edu shards: parallel, resumable, retried, each file verified before it counts.

Upstream's downloader (nanochat/dataset.py) streams each shard to `<name>.tmp`, renames it when done and
retries 5 times with 2^attempt s backoff (here through tenacity). This one also resumes a partial `.tmp` with an HTTP Range
request, verifies every finished file as parquet with a `text` column (a truncated or corrupt file is
deleted and fetched again), runs in threads (the work is network I/O) and names each shard it could
not get. The base URL comes from the argument, else NANOCHAT_DATA_URL (a mirror), else Hugging Face.
"""

import os
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import requests
import tenacity
from tqdm import tqdm

from bench.errors import ConfigError, DataError
from bench.nanochat.dataset import TEXT_COLUMN, data_dir, shard_name

ENV_DATA_URL = "NANOCHAT_DATA_URL"
DEFAULT_BASE_URL = "https://huggingface.co/datasets/karpathy/fineweb-edu-100b-shuffle/resolve/main"
MAX_SHARD = 1822  # shards 0..1822 exist upstream
PERMANENT_HTTP = (400, 401, 403, 404, 410)  # answers no retry can change
CHUNK_BYTES = 1 << 20  # a cut connection loses at most the chunk in flight; the rest resumes


def base_url(url: str | None = None) -> str:
    return (url or os.environ.get(ENV_DATA_URL) or DEFAULT_BASE_URL).rstrip("/")


def verify_shard(path: Path) -> None:
    """Raise ValueError unless `path` is a complete parquet file with a string `text` column."""
    try:
        pf = pq.ParquetFile(path)
    except (OSError, pa.ArrowInvalid) as e:
        raise ValueError(f"not a readable parquet file ({e})") from None
    field = pf.schema_arrow.field(TEXT_COLUMN) if TEXT_COLUMN in pf.schema_arrow.names else None
    if field is None or not (pa.types.is_string(field.type) or pa.types.is_large_string(field.type)):
        raise ValueError(f"parquet file without a string '{TEXT_COLUMN}' column (columns: {pf.schema_arrow.names})")


def _fetch_once(url: str, tmp: Path, timeout_s: float, chunk_bytes: int = CHUNK_BYTES) -> None:
    """One attempt: continue `tmp` from its current size if the server honours Range, else start over."""
    have = tmp.stat().st_size if tmp.exists() else 0
    headers = {"Range": f"bytes={have}-"} if have else {}
    with requests.get(url, stream=True, timeout=timeout_s, headers=headers) as r:
        if r.status_code == 416:  # our partial file is already the whole thing
            return
        r.raise_for_status()
        mode = "ab" if have and r.status_code == 206 else "wb"
        with open(tmp, mode) as f:
            for chunk in r.iter_content(chunk_size=chunk_bytes):
                f.write(chunk)


def download_one(index: int, out_dir: Path, url: str, retries: int = 5, backoff_s: float = 2.0,
                 timeout_s: float = 30.0, chunk_bytes: int = CHUNK_BYTES) -> Path:
    """Fetch shard `index` into out_dir unless a valid copy is there; ValueError naming it if all tries fail."""
    path = out_dir / shard_name(index)
    if path.exists():
        try:
            verify_shard(path)
            return path
        except ValueError:
            path.unlink()  # a bad file from elsewhere: fetch it again
    tmp = path.with_name(path.name + ".tmp")  # a fixed name, unlike atomic_target's: a later try resumes it
    shard_url = f"{url}/{shard_name(index)}"

    def attempt() -> Path:
        try:
            _fetch_once(shard_url, tmp, timeout_s, chunk_bytes)
            verify_shard(tmp)
        except ValueError:
            tmp.unlink(missing_ok=True)  # complete but bad: start over (a cut download keeps its .tmp)
            raise
        os.replace(tmp, path)
        return path

    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(retries), reraise=False,
        wait=tenacity.wait_exponential(multiplier=backoff_s, max=60),
        retry=tenacity.retry_if_exception(_worth_retrying))
    try:
        return retrying(attempt)
    except tenacity.RetryError as e:
        tries, last = e.last_attempt.attempt_number, e.last_attempt.exception()
    except (requests.RequestException, ValueError) as e:  # not worth retrying: the mirror does not have it
        tries, last = retrying.statistics.get("attempt_number", 1), e
    why = f"{type(last).__name__}: {last}" if isinstance(last, requests.RequestException) else str(last)
    raise ValueError(f"{shard_name(index)} from {shard_url}: {tries} attempt(s) failed, last: {why}")


def _worth_retrying(e: BaseException) -> bool:
    """Network trouble and bad files are retried; an answer like 404 that no retry can change is not."""
    if isinstance(e, requests.HTTPError) and e.response is not None:
        return e.response.status_code not in PERMANENT_HTTP
    return isinstance(e, (requests.RequestException, ValueError))


def download_shards(num_shards: int, workers: int = 4, url: str | None = None, out_dir: str | os.PathLike | None = None,
                    retries: int = 5, backoff_s: float = 2.0, timeout_s: float = 30.0,
                    progress: bool = True, chunk_bytes: int = CHUNK_BYTES) -> list[Path]:
    """Shards 0..num_shards-1 (-1 = all 1823) into out_dir (default base_data/); DataError listing failures."""
    total = MAX_SHARD + 1
    if num_shards == -1:
        num_shards = total
    if not 1 <= num_shards <= total:
        raise ConfigError(f"-n {num_shards}: must be between 1 and {total}, or -1 for all {total} shards")
    if workers < 1:
        raise ConfigError(f"-w {workers}: must be >= 1")
    out = Path(out_dir) if out_dir is not None else data_dir()
    out.mkdir(parents=True, exist_ok=True)
    url = base_url(url)
    done, failed = [], []
    with ThreadPoolExecutor(max_workers=workers) as pool, \
            tqdm(total=num_shards, unit="shard", desc="download", disable=not progress) as bar:
        futures = [pool.submit(download_one, i, out, url, retries, backoff_s, timeout_s, chunk_bytes)
                   for i in range(num_shards)]
        for fut in as_completed(futures):
            try:
                done.append(fut.result())
            except ValueError as e:
                failed.append(str(e))
            bar.update(1)
    if failed:
        raise DataError(f"{len(failed)} of {num_shards} shard(s) could not be downloaded into {out} "
                        f"(run again to resume):\n  " + "\n  ".join(sorted(failed)))
    return sorted(done)
