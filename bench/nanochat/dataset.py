"""Shard files on disk: where they live, how they split into train/val, how to make or fetch them.

Mirrors upstream nanochat/dataset.py. Shards are parquet files `shard_XXXXX.parquet` with one
string column `text` (one document a row) under `$NANOCHAT_BASE_DIR/base_data/`. Partial downloads end
in `.tmp` and are never listed.

The bench's change to the split: validation is the last K files (K = NANOCHAT_VAL_FILES_K, default 1,
as upstream) and training the rest, so enough validation row groups exist for many ranks.
Shards come from bench/nanochat/download.py (FineWeb-Edu) or `generate_shards` (offline corpus); each is
marked with where it came from (bench/nanochat/data_origin.py), and neither writer replaces a shard of the
other kind unless told to (`--overwrite`).
"""

import itertools
import os
import sys
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from bench import paths
from bench.errors import ConfigError, DataError, os_reason_and_remedy
from bench.nanochat.common import ELSEWHERE, get_base_dir
from bench.contract import ENV_VAL_FILES_K, atomic_target

TEXT_COLUMN = "text"
SPLITS = ("train", "val")
FIX_DATA = "run `nanochat-bench data generate` (offline) or `nanochat-bench data download -n N`"
MAX_SHARDS = 100_000  # shard_name's 5 digits: beyond, names no longer sort in index order (the split's rule)


def shard_name(index: int) -> str:
    return f"shard_{index:05d}.parquet"


def data_dir(directory: str | os.PathLike | None = None) -> Path:
    """`directory` if given, else $NANOCHAT_BASE_DIR/base_data: where shards are downloaded or generated (each
    writer makes it; a reader finding none makes nothing)."""
    return Path(directory) if directory is not None else get_base_dir(create=False) / paths.DATA_DIR


def list_parquet_files(directory: str | os.PathLike | None = None) -> list[Path]:
    """Finished shard files, sorted by name (the order every rank walks them in)."""
    directory = data_dir(directory)
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.glob("*.parquet") if p.is_file())


def resolve_val_files_k(val_files_k: int | None = None) -> int:
    """K, the number of last files used for validation: the argument, else NANOCHAT_VAL_FILES_K, else 1.
    A bad NANOCHAT_VAL_FILES_K is a DataError: in a rank it ends the run no_data, as a K the shards cannot give."""
    if val_files_k is None:
        raw = os.environ.get(ENV_VAL_FILES_K, "1")
        try:
            val_files_k = int(raw)
        except ValueError:
            val_files_k = 0
        if val_files_k < 1:
            raise DataError(f"{ENV_VAL_FILES_K}={raw!r} is not a number of validation files; use a whole number "
                            f">= 1 and below the number of shard files (unset: 1)")
    if val_files_k < 1:
        raise ConfigError(f"{ENV_VAL_FILES_K}={val_files_k}: the validation split needs at least 1 file")
    return val_files_k


def split_files(split: str, val_files_k: int | None = None) -> list[Path]:
    """Files of a split: val = the last K files, train = all the others (both non-empty or DataError)."""
    k = resolve_val_files_k(val_files_k)
    files = list_parquet_files()
    n = len(files)
    if n < k + 1:
        valid = "1" if n == 2 else f"1 to {n - 1}"  # K leaves 1 training file at least: with fewer than 2, none does
        lower = f", or set {ENV_VAL_FILES_K} to {valid} for these {n}" if n > 1 else ""
        raise DataError(
            f"{n} shard file(s) in {data_dir()}, but {ENV_VAL_FILES_K}={k} validation file(s) "
            f"plus at least 1 training file are needed; {FIX_DATA} with N >= {k + 1}{lower}"
        )
    return split_of(files, split, k)


def split_of(files: list, split: str, k: int) -> list:
    """The pure rule: val = files[-k:], train = files[:-k] (files sorted by name)."""
    if split not in SPLITS:
        raise ConfigError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}")
    return files[-k:] if split == "val" else files[:-k]


def open_shard(path: Path) -> pq.ParquetFile:
    """A shard with its footer read and its `text` column checked (DataError naming the file); its row
    groups are then read with read_texts."""
    try:
        pf = pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as e:
        raise DataError(f"{path} is not a readable parquet file ({e}); delete it and {FIX_DATA}") from None
    if problem := text_column_problem(pf.schema_arrow):
        raise DataError(f"{path}{problem}, so none of its {pf.num_row_groups} row group(s) can be read; shards hold "
                        f"one document a row in a string column '{TEXT_COLUMN}': delete it and {FIX_DATA}")
    return pf


def text_column_problem(schema: pa.Schema) -> str | None:
    """What keeps a shard's documents from being read, as a phrase to follow its name; None when nothing does."""
    if TEXT_COLUMN not in schema.names:
        return f" has no '{TEXT_COLUMN}' column (columns: {', '.join(schema.names) or 'none'})"
    kind = schema.field(TEXT_COLUMN).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        return f": column '{TEXT_COLUMN}' holds {kind}, not strings"
    return None


def read_texts(pf: pq.ParquetFile, path: Path, row_group: int) -> list[str]:
    """The documents of one row group; DataError naming file and row group when its pages are damaged."""
    try:
        return pf.read_row_group(row_group, columns=[TEXT_COLUMN]).column(TEXT_COLUMN).to_pylist()
    except (OSError, pa.ArrowException) as e:
        raise DataError(f"{path}: row group {row_group} of {pf.num_row_groups} cannot be read ({e}); the file is "
                        f"damaged: delete it and {FIX_DATA}") from None
    except UnicodeDecodeError as e:  # a string column holding bytes that are not UTF-8: pyarrow does not check
        raise DataError(f"{path}: row group {row_group} of {pf.num_row_groups} holds text that is not valid UTF-8 "
                        f"(byte {e.object[e.start]:#04x} at offset {e.start} of a document); shards hold UTF-8 "
                        f"text: delete the file and {FIX_DATA}") from None


def row_group_rows(files: list[Path]) -> list[list[int]]:
    """Rows of every row group, file by file, from the parquet footers only (cheap: no column data is
    read); every file's `text` column is checked on the way."""
    out = []
    for path in files:
        md = open_shard(path).metadata
        out.append([md.row_group(i).num_rows for i in range(md.num_row_groups)])
    return out


def row_group_counts(files: list[Path]) -> list[int]:
    """Row groups per file, from the parquet footers only."""
    return [len(rows) for rows in row_group_rows(files)]


def parquets_iter_batched(split: str, start: int = 0, step: int = 1):
    """Yield the `text` list of row groups start, start+step, … of every file of the split, file by file.

    As upstream: used by tokenizer training and evaluation, where per-file striding is what is wanted.
    """
    for path in split_files(split):
        pf = open_shard(path)
        for rg in range(start, pf.num_row_groups, step):
            yield read_texts(pf, path, rg)


def write_shard(path: Path, docs: Iterable[str], row_group_size: int = 1024, metadata: dict | None = None) -> None:
    """Write one shard in the upstream layout (zstd 3, no dictionary, no statistics), atomically, one row
    group at a time (memory holds one, whatever the shard's size); `metadata` goes into the footer's key-value
    metadata (data_origin.py marks generated shards so)."""
    schema = pa.schema([(TEXT_COLUMN, pa.string())], metadata=metadata or None)
    docs = iter(docs)
    with atomic_target(path) as tmp, pq.ParquetWriter(tmp, schema, compression="zstd", compression_level=3,
                                                       use_dictionary=False, write_statistics=False) as writer:
        # a --row-group-size past the shard's documents (even past islice's sys.maxsize) is one row group
        while group := list(itertools.islice(docs, min(row_group_size, sys.maxsize))):
            writer.write_table(pa.table({TEXT_COLUMN: group}, schema=schema), row_group_size=len(group))


def file_names(paths: list[Path]) -> str:
    """`a, b, c` or, for many, `a, b, c … z (N files)`: files named in one line of a message."""
    names = [p.name for p in paths]
    return ", ".join(names) if len(names) <= 4 else f"{', '.join(names[:3])} … {names[-1]} ({len(names)} files)"


def generate_shards(
    num_shards: int, docs_per_shard: int, row_group_size: int = 1024, out_dir: str | os.PathLike | None = None,
    overwrite: bool = False, elsewhere: str = ELSEWHERE,
    overwrite_flag: str | None = "--overwrite",
) -> list[Path]:
    """Write shards 0..num_shards-1 from the offline corpus (corpus.py); shard i is seeded by i and marked
    as generated in its footer. A file there that is not this same generated shard (a download, or another
    recipe) is a DataError naming it, before anything is written, unless `overwrite`. `elsewhere` and
    `overwrite_flag` (None: the caller has none) are what the errors tell the caller's user to do instead."""
    from tqdm import tqdm

    from bench.nanochat import corpus, data_origin

    for flag, value in (("--shards", num_shards), ("--docs-per-shard", docs_per_shard),
                        ("--row-group-size", row_group_size)):
        if value < 1:
            raise ConfigError(f"{flag}={value}: must be >= 1")
    if num_shards > MAX_SHARDS:
        raise ConfigError(f"--shards={num_shards}: at most {MAX_SHARDS} (shard files are named with 5 digits, "
                          f"and the split takes them in name order)")
    out = data_dir(out_dir)
    paths = [out / shard_name(i) for i in range(num_shards)]
    recipes = [data_origin.generated_recipe(i, docs_per_shard, row_group_size) for i in range(num_shards)]
    # files generating would replace by other data: any but the shard of its very recipe (written again the same)
    in_the_way = [p for p, r in zip(paths, recipes) if p.exists() and data_origin.recipe(p) != r]
    if in_the_way and not overwrite:
        words = {data_origin.GENERATED: "generated with other settings", data_origin.DOWNLOADED: "downloaded",
                 None: "of unknown origin"}
        kinds = sorted({words[o] for o in data_origin.origins(in_the_way).values()})
        replace_them = f"pass {overwrite_flag} to replace them, or " if overwrite_flag else ""
        raise DataError(f"{out} already holds {file_names(in_the_way)} ({', '.join(kinds)}): generating would replace "
                        f"them; {replace_them}{elsewhere}")
    if in_the_way:
        print(f"replacing {file_names(in_the_way)} (--overwrite)")
    kept = [p for p in paths if p.exists() and p not in in_the_way]  # the same recipe's shards: identical data
    if kept:
        print(f"kept {file_names(kept)}: already generated with these settings")
    try:
        out.mkdir(parents=True, exist_ok=True)
        # the shards on a bar at a terminal, as `data download` counts them: each default one takes seconds, so
        # hundreds take minutes (a job's log gets no bar)
        with tqdm(total=num_shards - len(kept), unit="shard", desc="generate", leave=False, disable=None) as bar:
            for i, (path, recipe) in enumerate(zip(paths, recipes)):
                if path in kept:
                    continue
                write_shard(path, itertools.islice(corpus.iter_documents(seed=i), docs_per_shard), row_group_size,
                            data_origin.generated_metadata(recipe))
                bar.update(1)
        data_origin.forget(out, [p.name for p in in_the_way])
    except OSError as e:
        raise DataError(f"data generate: cannot write into {out}: {os_reason_and_remedy(e, elsewhere)} "
                        f"(finished shards are whole; none is half-written)") from None
    return paths


