"""Where the shards came from, and which tokenizer: recorded when the files are written, checked when they are used.

Two origins, each recorded where it cannot drift from the file it describes:
- generated (`data generate`, the offline corpus): the shard's own parquet footer holds key-value metadata
  `nanochat_bench.origin = generated` and the recipe (seed, documents, row-group size), so the mark travels
  with the file wherever it is copied;
- downloaded (`data download`): FineWeb-Edu's files are kept byte for byte, so the record is beside them, in
  `sources.json` of the shard directory: name -> URL and size. A listed file whose size changed since is no
  longer taken as downloaded.
A shard with neither mark has no known origin (written before origins were recorded, or copied in by hand);
`data download` and `data info` still recognise one that an older `data generate` wrote (`unmarked_generated`).

`data_identity` is what a run records of its data: the origin of the shards (generated, downloaded, mixed, or
None when any is unknown) and a sha256 over the tokenizer's files.
"""

import contextlib
import fcntl
import hashlib
import json
import os
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from bench.contract import write_json_atomic
from bench.nanochat import dataset, tokenizer

GENERATED, DOWNLOADED, MIXED = "generated", "downloaded", "mixed"
ORIGIN_KEY = b"nanochat_bench.origin"
RECIPE_KEY = b"nanochat_bench.recipe"
SOURCES_JSON = "sources.json"
TOKENIZER_FILES = (tokenizer.TOKENIZER_PKL, tokenizer.TOKEN_BYTES_PT)  # hashed in this order


# ----------------------------------------------------------------------------------------------
# Generated: a mark in the footer


def generated_recipe(seed: int, docs: int, row_group_size: int) -> dict:
    """What makes a generated shard again: the offline corpus, the seed, documents and row-group size."""
    return {"corpus": "offline", "seed": seed, "docs": docs, "row_group_size": row_group_size}


def generated_metadata(recipe: dict) -> dict[bytes, bytes]:
    """Footer key-value metadata of a generated shard: its origin and its recipe."""
    return {ORIGIN_KEY: GENERATED.encode(), RECIPE_KEY: json.dumps(recipe, sort_keys=True).encode()}


def recipe(path: Path) -> dict | None:
    """The recipe of a generated shard (from its footer's nanochat_bench.* entries), None for any other file."""
    try:
        kv = pq.ParquetFile(path).metadata.metadata or {}
    except (OSError, pa.ArrowException):
        return None
    if kv.get(ORIGIN_KEY) != GENERATED.encode():
        return None
    try:
        return json.loads(kv.get(RECIPE_KEY, b"{}").decode(errors="replace"))
    except ValueError:
        return {}


# ----------------------------------------------------------------------------------------------
# Downloaded: sources.json beside the shards


def read_sources(directory: Path) -> dict[str, dict]:
    """sources.json of a shard directory as {name: {"url", "bytes"}}; {} when absent or unreadable."""
    try:
        data = json.loads((Path(directory) / SOURCES_JSON).read_text())
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, dict)} if isinstance(data, dict) else {}


@contextlib.contextmanager
def _sources_locked(directory: Path):
    """sources.json read and written under an exclusive lock: download threads and processes add entries
    at once, and a read-modify-write without it would lose some."""
    directory = Path(directory)
    with open(directory / f".{SOURCES_JSON}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        sources = read_sources(directory)
        yield sources
        write_json_atomic(directory / SOURCES_JSON, sources)


def record_downloaded(path: Path, url: str) -> None:
    """Note in sources.json that `path` is the file fetched from `url`, with its size now."""
    path = Path(path)
    with _sources_locked(path.parent) as sources:
        sources[path.name] = {"url": url, "bytes": path.stat().st_size}


def forget(directory: Path, names: list[str]) -> None:
    """Drop entries of sources.json (their files were replaced by other ones)."""
    if not set(names) & read_sources(directory).keys():
        return
    with _sources_locked(directory) as sources:
        for name in names:
            sources.pop(name, None)


# ----------------------------------------------------------------------------------------------
# Reading origins


def shard_origin(path: Path, sources: dict[str, dict] | None = None) -> str | None:
    """GENERATED, DOWNLOADED or None (unknown) for one shard file."""
    path = Path(path)
    if recipe(path) is not None:
        return GENERATED
    sources = read_sources(path.parent) if sources is None else sources
    entry = sources.get(path.name)
    if entry and path.is_file() and entry.get("bytes") == path.stat().st_size:
        return DOWNLOADED
    return None


def unmarked_generated(path: Path) -> bool:
    """True for a shard that an older `data generate` wrote before shards were marked: its first document
    is the offline corpus's first one for the seed its name gives (shard i is seeded by i). Costs a read of
    the first page and, once per process, the corpus's walk over the installed sources; asked only of
    shards without any record, and only by the commands that must not mix data (not by data_identity)."""
    from bench.nanochat import corpus

    match = re.fullmatch(r"shard_(\d+)\.parquet", Path(path).name)
    if match is None:
        return False
    try:
        batch = next(pq.ParquetFile(path).iter_batches(batch_size=1, columns=[dataset.TEXT_COLUMN]))
        first = batch.column(0)[0].as_py()
    except (OSError, pa.ArrowException, StopIteration, IndexError, KeyError, UnicodeDecodeError):
        return False
    return first == corpus.documents(1, seed=int(match.group(1)))[0]


def origins(files: list[Path]) -> dict[Path, str | None]:
    """The origin of each file (sources.json read once per directory)."""
    by_dir = {directory: read_sources(directory) for directory in {path.parent for path in files}}
    return {path: shard_origin(path, by_dir[path.parent]) for path in files}


def combined_origin(found: list[str | None]) -> str | None:
    """One word for a set of shards: GENERATED or DOWNLOADED when all agree, MIXED when both occur,
    None when there are none or any is unknown (nothing can be claimed for them)."""
    kinds = set(found)
    if {GENERATED, DOWNLOADED} <= kinds:
        return MIXED
    if not kinds or None in kinds:
        return None
    return kinds.pop()


def describe(files: list[Path]) -> str:
    """`generated`, `downloaded`, or counts with names for a mix: what `data info` prints for a split."""
    found = origins(files)
    word = combined_origin(list(found.values()))
    if word in (GENERATED, DOWNLOADED):
        return word
    groups: dict[str, list[str]] = {}
    for path, origin in found.items():
        if origin is None and unmarked_generated(path):
            origin = "generated by an older data generate (no mark)"
        groups.setdefault(origin or "unknown origin", []).append(path.name)
    parts = (f"{len(names)} {origin} ({', '.join(names[:3])}{' …' if len(names) > 3 else ''})"
             for origin, names in sorted(groups.items()))
    return f"{word or 'unknown'}: " + "; ".join(parts)


# ----------------------------------------------------------------------------------------------
# What a run records


def tokenizer_sha256(tokenizer_dir: str | os.PathLike) -> str | None:
    """sha256 over the tokenizer's files (name and bytes, in a fixed order); None when one is missing."""
    digest = hashlib.sha256()
    for name in TOKENIZER_FILES:
        path = Path(tokenizer_dir) / name
        if not path.is_file():
            return None
        digest.update(name.encode() + b"\0" + path.read_bytes())  # small files: read whole
    return digest.hexdigest()


def data_identity(data_dir: str | os.PathLike | None = None,
                  tokenizer_dir: str | os.PathLike | None = None) -> dict:
    """{"origin": generated|downloaded|mixed|None, "tokenizer_sha256": str|None} of the shards (train and
    val: every shard file) and the tokenizer (defaults: $NANOCHAT_BASE_DIR/base_data and /tokenizer)."""
    files = dataset.list_parquet_files(data_dir)
    return {"origin": combined_origin(list(origins(files).values())),
            "tokenizer_sha256": tokenizer_sha256(tokenizer.tokenizer_dir() if tokenizer_dir is None else tokenizer_dir)}
