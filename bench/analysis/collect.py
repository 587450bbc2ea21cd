"""Run directories (and upstream nanochat logs) -> one tidy table, one row per run.

`collect(roots, out)` walks the roots, reads each run with bench/analysis/rundir.py, and writes
`<out>/runs.parquet` and `<out>/runs.csv` atomically. A row names its run by `root` (the root as
given, relative to the working directory when it lies below it) and `source` (the run's path below
that root), so a table says the same on every machine it is copied to. It is incremental: every row
keeps a fingerprint of its files (names, sizes, modification times), and a later collect into the
same table re-reads only runs that are new or changed, and drops runs that are gone. It is
idempotent: the same files give the same table, rows sorted by root and source.
Collects into one table take turns: each holds its directory's TABLE_LOCK from reading the table to
writing it, so a second one waits, saying so, then adds its runs to what the first one wrote.

ReFrame's checks (bench/reframe_checks/checks.py) keep each case's run directory, which holds every column,
in ReFrame's output directory, so a ReFrame run is collected as any other. ReFrame's perflog and run report
are not read: they copy a few of its figures, and reading them put one run into the table up to three times.
A run directory found twice (ReFrame's stage directory, kept after a failure, and its output directory) is
one run to the figures, and so is a console log whose step lines are a run directory's steps (a benchmark
script's log saved beside the run directory it wrote): `load_table` and collect's result mark the copy or the
log; the files keep both rows.
"""

import contextlib
import csv
import hashlib
import io
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from bench import locks
from bench.analysis import DEFAULT_WORKERS, MAX_WORKERS
from bench.analysis.columns import TYPES as COLUMNS  # the table's columns and their types, in order
from bench.analysis.figures import finite
from bench.analysis.regular_files import is_regular
from bench.analysis.rundir import LIVE_STATUSES, is_run_dir, never_ran, read_run_dir
from bench.analysis.upstream import read_upstream_log
from bench.errors import AnalysisError, os_reason
from bench.contract import METRICS_JSONL, RUN_JSON, atomic_target

LOG_SUFFIXES = (".log", ".txt", ".out")  # plain logs of upstream nanochat runs (read if they hold step lines)
TABLE_PARQUET = "runs.parquet"
TABLE_CSV = "runs.csv"
TABLE_LOCK = ".collect.lock"  # in the table's directory: held by the collect updating its table
# Bump when a row is computed differently: tables of an older version are then re-read in full.
# 8: the model's identity (vocab_size, precision, data_origin, tokenizer_sha256, tiling) and num_params from
#    run.json; ReFrame's perflog and report rows (source_kind reframe_*, reframe_partition) no longer made.
# 9: phase_image_ready_s (launch.image_ready_at: the image step before srun); runtime start-up begins after it.
# 10: a flow's stage, its scores, its time (stage_time_s) and the problems its score events scored.
# 11: an evaluation that ended ok is usable (no skip_reason: it has no steps by design); eval_tok_per_sec; an SFT
#     run's MFU is its step events' own (every position run), not one recomputed from its supervised tok/s.
# 12: precision tells `--fp8_lm_head` apart (" + fp8 lm_head"): such runs were pooled with --fp8 or bf16 runs.
# 13: a resumed run's first steps after its restart are warm-up, not steady (they were averaged in).
# 14: fused_kernels (`--fused_kernels`), a key: runs with hand-written kernels are another program.
# 15: fused_kernels holds the kernels' names ("" for none); the previous release's bool is read as what it meant.
# 16: an NNTile run's precision is float32 (its GPT-2 trains in torch's default dtype), not nanochat's bf16.
# 17: a resumed run's start-up phases and times are its last attempt's (the launch time run.json holds), not the
#     first attempt's milestones measured from the later launch (negative start-up, a teardown holding a run).
# 18: a start-up phase that came out negative, measured across the batch host's and rank 0's clocks, makes the
#     phases across them and start-up s unknown, named in clock_skew; it was a negative duration.
# 19: net_unverified (run.json network.unverified): a multi-node run whose network the gate could not judge.
# 20: this trainer's console log gives its GPU, precision, fused kernels and strategy (it was bf16 on no device).
# 21: this trainer's console log has no runtime (it names none); it was upstream's.
# 22: steps_digest, so that a run's console log saved beside its run directory is one run (it was a second).
# 23: steps a trainer flags as warm-up (NNTile's --nepochs-warmup epochs) are not steady (they were averaged in).
# 24: a run whose loss went NaN or infinite (an older release's, upstream's log) is left out: it was a repeat.
# 25: net_tuning, rank 0's NCCL/libfabric settings, so runtimes that ran different tuning are named in findings.
# 26: a run.json cut short is skipped as "not valid JSON (<json's message>: line n)"; it read "... at at line n".
# 27: net_tuning is left empty for a run that recorded no network_env (it read as every variable unset).
# 28: a run whose run.json cannot be read and whose events say no end has no status; it was `running` (not finished).
# 29: nor has one whose events say end: it was `ok`, counted so by collect while the report skipped it as unreadable.
# 30: settings, the flags a run ran with (run.json config), so that a flow's stages run otherwise are no repeats.
# 31: num_iterations of a run given -1 is the horizon its trainer derived and recorded (every such run read -1);
#     and a recorded dtype bfloat16 (upstream's --dtype) is precision bf16, as without one (it was a key apart).
#     and mid_train's --dtype, which it accepts and autocasts to bfloat16 whatever it says, is no precision.
# 32: an NNTile run's tiling names the axes it cut, "untiled" for none: it listed every tile resolved, an untiled
#     axis's as its extent, so untiled runs at another --minibatch differed in tiling.
# 33: a flow's stage that never started (run.json alone, its evidence all not_run) has no row; each was a cancelled
#     run, and a rerun by an earlier release kept its mark aside as <stage>.attempt-<time>, counted again.
ROW_VERSION = 33
# A folder with a ReFrame test's job script is its stage or output folder: rfm_job.out repeats the run's output.
REFRAME_JOB_SCRIPT = "rfm_job.sh"
# The way out of a damaged table: collect keeps a table it cannot read (other roots' rows may be in it).
DAMAGED_FIX = "move it aside and run `nanochat-bench collect` again to write it anew (collect replaces no table " \
              "it cannot read)"


@dataclass
class CollectResult:
    """The table and what the collect did, for the command's summary line."""
    rows: pd.DataFrame  # every source's row, as the table's files hold them (other roots' too)
    read: int = 0  # runs read (new or changed)
    reused: int = 0  # runs unchanged since the last collect
    removed: int = 0  # runs in the old table whose files are gone
    paths: list[Path] = field(default_factory=list)  # the table's files, written or left as they were
    written: bool = False  # the files were written anew; else nothing new was found and they were left as they were

    @property
    def table(self) -> pd.DataFrame:
        """The rows with a run found twice counted once (one_row_per_run), as load_table reads the files."""
        return one_row_per_run(self.rows)


def find_sources(root: Path) -> dict[str, tuple[str, str, tuple[str, ...]]]:
    """source path -> (kind, fingerprint, file names) for every run directory and candidate log under root."""
    found: dict[str, tuple[str, str, tuple[str, ...]]] = {}
    stack = [root]
    while stack:
        d = stack.pop()
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        names = {e.name for e in entries}
        if is_run_dir(names):
            # every name goes along, so that a run.json or metrics.jsonl that is a link or a FIFO is
            # reported in the row; the reader opens regular files only (rundir.py)
            files = [e for e in entries if e.name in (RUN_JSON, METRICS_JSONL) or e.name.endswith(".log")]
            found[str(d)] = ("run_dir", _fingerprint(files), tuple(sorted(names)))
            continue  # a run directory holds its own logs; nothing else lives below it
        # A folder with a batch script is one of our jobs (or a ReFrame test's): its Slurm log repeats the
        # output of the runs whose own directories are collected, so it is no upstream log.
        job_dir = any(n.endswith(".sbatch") or n == REFRAME_JOB_SCRIPT for n in names)
        for e in entries:
            if e.is_dir(follow_symlinks=False):  # a link to a folder, out of the root or round in it, is not walked
                stack.append(Path(e.path))
            elif not job_dir and e.name.endswith(LOG_SUFFIXES) and is_regular(e):
                found[e.path] = ("log", _fingerprint([e]), ())  # perhaps upstream nanochat's
    return found


def _fingerprint(entries: list[os.DirEntry]) -> str:
    h = hashlib.blake2b(digest_size=12)
    for e in sorted(entries, key=lambda e: e.name):
        try:
            st = e.stat(follow_symlinks=False)  # lstat: never touches what a link points to
        except OSError:
            continue
        h.update(f"{e.name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _read_one(item: tuple[str, str, str, str, tuple[str, ...]]) -> list[dict]:
    """The rows of one source: a run directory or an upstream log gives one (a log without step lines none)."""
    root, path, kind, fingerprint, names = item
    try:
        if kind == "run_dir" and never_ran(Path(path), set(names)):
            return []  # a stage's not-run mark: read by `status`, no run to the table
        row = read_run_dir(Path(path), set(names)) if kind == "run_dir" else read_upstream_log(Path(path))
    except FileNotFoundError:
        return []  # removed between the walk and the read
    if row is None:
        return []
    row.update(root=display_root(Path(root)), source=os.path.relpath(path, root), fingerprint=fingerprint,
               row_version=ROW_VERSION)
    return [row]


def display_root(root: Path) -> str:
    """A root as a table records it: relative to the working directory when below it, else absolute."""
    root = root.resolve()
    cwd = Path.cwd().resolve()
    return str(root.relative_to(cwd)) if root.is_relative_to(cwd) else str(root)


def read_rows(items: list[tuple], workers: int | None = None) -> list[dict]:
    """Rows for (root, path, kind, fingerprint, names) items; processes share the work when there is much."""
    workers = min(workers or min(os.cpu_count() or 1, DEFAULT_WORKERS), MAX_WORKERS, len(items))
    if workers > 1 and len(items) >= 500:
        with ProcessPoolExecutor(workers) as pool:
            per_source = list(pool.map(_read_one, items, chunksize=max(1, len(items) // (workers * 8))))
    else:
        per_source = [_read_one(it) for it in items]
    return [r for rows in per_source for r in rows]


def normalise(df: pd.DataFrame) -> pd.DataFrame:
    """Exactly COLUMNS, in order, with their types (a missing column is all null), sorted by root and source."""
    df = df.reindex(columns=list(COLUMNS))
    for col, kind in COLUMNS.items():
        values = df[col]
        if kind == "str":
            df[col] = values.astype("string")
        else:
            values = values.map(lambda v: None if type(v) is int and finite(v) is None else v)  # past a float
            values = pd.to_numeric(values, errors="coerce").astype("float64")
            if kind == "int":
                # a non-whole number in an int column is a writer's bug: null, not silently truncated;
                # one past 64 bits (a damaged run.json) is no count either
                values = values.where((values == values.round()) & (values.abs() < 2.0 ** 63)).astype("Int64")
            df[col] = values
    return df.sort_values(["root", "source"], kind="stable").reset_index(drop=True)


def to_frame(rows: list[dict]) -> pd.DataFrame:
    """Rows (dicts) as a table of COLUMNS; keys that are not columns are dropped."""
    return normalise(pd.DataFrame.from_records(rows, columns=list(COLUMNS)) if rows
                     else pd.DataFrame(columns=list(COLUMNS)))


def load_table(path: str | os.PathLike) -> pd.DataFrame:
    """A table written by collect: runs.parquet or runs.csv, or a directory holding one; a run that several
    directory found twice counts once (one_row_per_run)."""
    return one_row_per_run(_read_table(path))


def _read_table(path: str | os.PathLike) -> pd.DataFrame:
    """The table as written: every source's row."""
    path = Path(path)
    if path.is_dir():
        for name in (TABLE_PARQUET, TABLE_CSV):
            if (path / name).exists():
                path = path / name
                break
        else:
            raise AnalysisError(f"{path}: no {TABLE_PARQUET} or {TABLE_CSV} here; run `nanochat-bench collect` first")
    if not path.exists():
        raise AnalysisError(f"{path}: no such table")
    if path.suffix not in (".parquet", ".csv"):  # a references file given for the table was "a torn table"
        raise AnalysisError(f"{path}: not a table written by collect (give its {TABLE_PARQUET} or {TABLE_CSV}, "
                            "or the directory holding them)")
    if path.suffix != ".parquet":
        _refuse_torn_csv(path)
    try:
        df = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path, dtype=str, keep_default_na=False,
                                                                                 na_values=[""])
    except Exception as e:  # noqa: BLE001 - any reader failure means the same thing to the user
        raise AnalysisError(f"{path}: not a table written by collect ({type(e).__name__}: {e}); "
                            f"if collect wrote it, {DAMAGED_FIX}") from e
    missing = [c for c in ("root", "source", "status", "skip_reason", "tok_per_sec") if c not in df.columns]
    if missing:
        raise AnalysisError(f"{path}: not a table written by collect (no column {', '.join(missing)})")
    # A newer release's rows may hold columns this one would drop on rewriting the table, or mean others otherwise.
    newest = pd.to_numeric(df["row_version"], errors="coerce").max() if "row_version" in df.columns else None
    if newest is not None and newest > ROW_VERSION:
        raise AnalysisError(f"{path}: rows of row version {newest:.0f}, newer than this release's {ROW_VERSION}: "
                            "a newer nanochat-bench wrote it; read it with that release, or collect into another --out")
    return normalise(df)


def _refuse_torn_csv(path: Path) -> None:
    """A CSV cut mid-row (a copy or a write that stopped) is refused, never read with its torn row: collect
    writes every row whole, each with as many fields as the header, the last one ended by a newline."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise AnalysisError(f"{path}: unreadable ({e.strerror})") from None
    if data and not data.endswith(b"\n"):
        raise AnalysisError(f"{path}: a torn table: its last row ends without a newline (cut mid-row); {DAMAGED_FIX}")
    try:
        rows = csv.reader(io.StringIO(data.decode("utf-8"), newline=""), strict=True)
        width = len(next(rows, []))
        for i, row in enumerate(rows, 1):
            if len(row) != width:
                raise AnalysisError(f"{path}: a torn table: row {i} (line {rows.line_num}) has {len(row)} fields, "
                                    f"the header {width}; {DAMAGED_FIX}")
    except (UnicodeDecodeError, csv.Error) as e:
        raise AnalysisError(f"{path}: not a table written by collect ({e}); {DAMAGED_FIX}") from None


def write_table(df: pd.DataFrame, out_dir: Path) -> list[Path]:
    """runs.parquet and runs.csv under out_dir, each replaced atomically (pyarrow writes both: fast)."""
    table = pa.Table.from_pandas(df, preserve_index=False)
    paths = [out_dir / TABLE_PARQUET, out_dir / TABLE_CSV]
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        # both written in full before either replaces its file: one failing leaves the pair as it was, never a
        # new runs.parquet beside an old runs.csv
        with atomic_target(paths[0]) as parquet, atomic_target(paths[1]) as csv_tmp:
            pq.write_table(table, parquet)
            pa_csv.write_csv(table, csv_tmp)
    except OSError as e:  # a file in the way, no permission, a full disk: the old table, if any, is left whole
        raise AnalysisError(f"{out_dir}: the table cannot be written there: {os_reason(e)}") from None
    return paths


def _holds_table(out_dir: Path) -> bool:
    return any((out_dir / n).exists() for n in (TABLE_PARQUET, TABLE_CSV))


def one_collect_at_a_time(out_dir: Path | None):
    """From reading the table to writing it anew: a second collect into one --out waits, then reads the table the
    first one wrote and adds its rows to it. The directory is made to hold the lock (where it can be: a read-only
    one is read unlocked, and write_table says why nothing can be written there)."""
    if out_dir is None:
        return contextlib.nullcontext()
    with contextlib.suppress(OSError):
        out_dir.mkdir(parents=True, exist_ok=True)
    return locks.in_turn(out_dir / TABLE_LOCK, f"another collect writing {out_dir}")


def _root(root: str | os.PathLike) -> Path:
    """A root as an absolute directory: a link given as the root is followed once, a loop is an error."""
    try:
        path = Path(root).resolve(strict=True)
    except FileNotFoundError:
        raise AnalysisError(f"{Path(root).absolute()}: no such directory (give a results root or a run directory)") \
            from None
    except (OSError, RuntimeError) as e:  # ELOOP (RuntimeError "Symlink loop" before Python 3.13)
        raise AnalysisError(f"{root}: a symbolic link that leads round in a loop ({e}); give a directory of runs") \
            from None
    if not path.is_dir():
        raise AnalysisError(f"{path}: not a directory (give a results root or a run directory)")
    return path


def collect(roots: list[str | os.PathLike], out: str | os.PathLike | None = None,
            workers: int | None = None) -> CollectResult:
    """Collect run directories under roots into a table; with out, update <out>/runs.{parquet,csv} (a table of no
    rows is not written where none was)."""
    roots = [_root(r) for r in roots]
    # (root as recorded, source below it) -> (root, absolute path, kind, fingerprint, file names)
    found: dict[tuple[str, str], tuple] = {}
    for r in roots:
        for path, (kind, fp, names) in find_sources(r).items():
            found[(display_root(r), os.path.relpath(path, r))] = (str(r), path, kind, fp, names)

    out_dir = Path(out) if out is not None else None
    ready = None  # rows read before taking the lock: every run found, where out_dir held no table to reuse rows of
    if out_dir is not None and not _holds_table(out_dir):
        ready = read_rows(list(found.values()), workers)
        if not ready:  # no rows and no table there (a root one level off): out_dir is left as it was, lock and all
            return CollectResult(to_frame([]))
    # the table is read and written anew under its directory's lock: two collects into one --out at once each read
    # the table as it was, and the files of the later one to write held none of the other's rows
    with one_collect_at_a_time(out_dir):
        # the table to update is runs.parquet, else runs.csv (one kept or copied alone): never replaced unread
        kept_table = out_dir is not None and _holds_table(out_dir)
        old = _read_table(out_dir) if kept_table else to_frame([])
        keys = list(zip(old["root"].astype(object), old["source"].astype(object)))
        now_fp = pd.Series([found[k][3] if k in found else None for k in keys], index=old.index, dtype="string")
        same = ((old["fingerprint"] == now_fp) & (old["row_version"] == ROW_VERSION)).fillna(False).to_numpy(bool)
        reused = old[same]
        gone = ~pd.Series([k in found for k in keys], index=old.index, dtype=bool).to_numpy()
        # Rows of other roots collected into the same table stay; rows under these roots whose files went, go.
        under = old["root"].isin({display_root(r) for r in roots}).to_numpy(bool)
        kept = old[gone & ~under]
        reused_keys = set(zip(reused["root"].astype(object), reused["source"].astype(object)))
        rows = read_rows([item for key, item in found.items() if key not in reused_keys], workers) if ready is None \
            else [row for row in ready if (row["root"], row["source"]) not in reused_keys]  # a table came meanwhile
        table = normalise(pd.concat([reused, kept, *([to_frame(rows)] if rows else [])], ignore_index=True))
        result = CollectResult(table, read=len(rows), reused=len(reused), removed=int((gone & under).sum()))
        if out_dir is not None and (kept_table or not table.empty):
            unchanged = not rows and not result.removed and all((out_dir / n).exists()
                                                                for n in (TABLE_PARQUET, TABLE_CSV))
            # nothing new: leave the files as they are (idempotent, and their times still say when runs last changed)
            result.paths = [out_dir / TABLE_PARQUET, out_dir / TABLE_CSV] if unchanged else write_table(table, out_dir)
            result.written = not unchanged
    return result


def one_row_per_run(table: pd.DataFrame) -> pd.DataFrame:
    """Copies of one run directory (same sweep_id, run_id, flow stage and Slurm job, or outside Slurm the same
    start time: the stages of a flow's point share the rest): the first usable one (else the first finished one)
    keeps its figures, the others are left out of them with a skip_reason naming it; so is a console log of a
    run directory in the table (_console_logs)."""
    copies = _copies(table)
    logs = _console_logs(table, copies)
    if not copies and not logs:
        return table
    table = table.copy()
    for kept, what in ((copies, "a copy of its directory"), (logs, "its console log")):
        for i, best in kept.items():
            table.at[i, "skip_reason"] = f"the same run as {table.at[best, 'root']}/{table.at[best, 'source']} ({what})"
    return table


def is_copy(table: pd.DataFrame) -> pd.Series:
    """Per row, whether it is a copy of another row's run directory or its console log (one_row_per_run): one run,
    counted once."""
    copies = _copies(table)
    return pd.Series(table.index.isin([*copies, *_console_logs(table, copies)]), index=table.index)


def _console_logs(table: pd.DataFrame, copies: dict) -> dict:
    """Each log row whose step lines are a run directory's steps (steps_digest) -> the index of that directory's
    row (the one that keeps the run, not a copy): the console output of a run read twice. A log whose run
    directory is not in the table matches none and stays a run of its own."""
    digest = table["steps_digest"]
    dirs = table[(table["source_kind"] == "run_dir").fillna(False) & digest.notna() & ~table.index.isin(list(copies))]
    by_digest = {d: i for i, d in zip(dirs.index[::-1], dirs["steps_digest"][::-1])}  # the first by root, source
    logs = table[(table["source_kind"] == "upstream_log").fillna(False) & digest.isin(list(by_digest))]
    return {i: by_digest[d] for i, d in zip(logs.index, logs["steps_digest"])}


def _copies(table: pd.DataFrame) -> dict:
    """Each copy's index -> the index of the row that keeps the run (usable first, then finished, then of this
    row version, then by root and source): a copy taken while the run went on says `running` of a run that has
    since failed or ended, and a row of an older version, kept in the table from a root since moved, lacks the
    columns added since that the run's row read again has."""
    instance = table["slurm_job_id"].astype(object).where(table["slurm_job_id"].notna(), table["t_start"])
    keys = table[["sweep_id", "run_id", "stage"]].assign(instance=instance)  # sweep_id, stage: None outside them
    candidates = (table["source_kind"] == "run_dir").fillna(False) & keys[["run_id", "instance"]].notna().all(axis=1)
    dup = keys[candidates].duplicated(keep=False)
    if not dup.any():
        return {}
    copies = table[candidates][dup].assign(_unusable=lambda t: t["skip_reason"].notna(),
                                           _live=lambda t: t["status"].isin(LIVE_STATUSES),
                                           _older=lambda t: (t["row_version"] != ROW_VERSION).fillna(True))
    groups = copies.sort_values(["_unusable", "_live", "_older", "root", "source"], kind="stable").groupby(
        [keys[c] for c in keys], sort=False, dropna=False)
    return {i: group.index[0] for _, group in groups for i in group.index[1:]}
