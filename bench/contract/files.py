"""The run directory's files: atomic writes, run.json read and merged, evidence appended and settled,
the launcher's last word, the space held back for it.

run.json is rewritten whole (temp file + rename), so a reader sees the old file or the new one. Its
writers are several processes (the ranks, torchrun's wrapper, the batch script): each read-merge-write
holds an advisory lock on the run directory. A writer waits for it as long as any rewrite could take
(a slow holder keeps its update, and so does the waiter), counted from the last rewrite that landed, so a
long queue of writers keeps every update, up to LOCK_WAIT_MAX_S in all; except behind a holder on this node
that is stopped (SIGSTOP), which would hold every other writer: then, as after the bound, it goes ahead unlocked.
Where the file system has no locks the lock is skipped.
"""

import dataclasses
import errno
import fcntl
import json
import os
import tempfile
import threading
import time
from contextlib import contextmanager
from typing import Any, Dict, Iterator, Optional, get_args, get_origin

from .outcome import FINAL_STATUSES, Evidence, legacy, settle
from .record import RUN_JSON, SLURM_VARS, TRAIN_LOG, RunManifest
from .validate import SchemaError
from .versions import MAJOR, SCHEMA_VERSION, newer, parse_version

LOCK_WAIT_S = 10.0  # far longer than any rewrite of run.json takes, on a loaded shared file system too
# A waiter that gives up behind a holder stuck on another node rewrites run.json unlocked, which the others take
# for the holder's progress: without a cap every rank of a large job would wait LOCK_WAIT_S more for each before it.
# Under Slurm's default KillWait (30 s), so a rank recording its SIGTERM writes before the SIGKILL comes.
LOCK_WAIT_MAX_S = 25.0
_holding = threading.local()  # the run directory this thread holds: a signal handler's write inside a write goes on


@contextmanager
def atomic_target(path: "str | os.PathLike") -> Iterator[str]:
    """A fresh temp file beside `path` to write into; renamed onto `path` when the block ends cleanly,
    removed when it raises. A reader sees the old file or the new one, never half of one, and writers
    that race on one path (two runs sharing a checkpoint tag) each get their own temp file."""
    path = os.fspath(path)
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; the result is as readable as any file written
        os.close(fd)
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _umask() -> int:
    """The process's umask, read without changing it: os.umask(0) and back would leave it 0 for an instant, in
    which a file another thread creates (a rank's heartbeat beside its checkpoint) would be world-writable."""
    try:
        with open("/proc/self/status") as f:
            return int(next(line.split()[1] for line in f if line.startswith("Umask:")), 8)
    except (OSError, StopIteration, ValueError, IndexError):  # not Linux, or a kernel before 4.7
        return 0o022


def write_text_atomic(path: "str | os.PathLike", text: str) -> None:
    """Write text so that a reader sees the old file or the new one, never half of one."""
    with atomic_target(path) as tmp:
        write_synced(tmp, text)


def write_synced(path: "str | os.PathLike", text: str) -> None:
    """Write text and flush it to the disk: an error (a full disk) comes here, not at a later rename."""
    with open(path, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def write_json_atomic(path: "str | os.PathLike", data: Dict[str, Any]) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


@contextmanager
def _locked(run_dir: "str | os.PathLike") -> Iterator[None]:
    """An exclusive advisory lock on the run directory for one read-merge-write of run.json."""
    key = os.path.abspath(os.fspath(run_dir))
    if getattr(_holding, "run_dir", None) == key:  # re-entered (a signal handler): the lock is this thread's own
        yield
        return
    try:
        fd = os.open(os.fspath(run_dir), os.O_RDONLY)
    except OSError:
        fd = -1  # no directory yet: the first write creates it, nobody else is writing
    began = time.time()
    deadline = began + LOCK_WAIT_S
    next_look = time.time() + 0.2
    last_write = _written(run_dir)
    try:
        while fd >= 0:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES) or time.time() > deadline:
                    break  # no locks on this file system, or a holder past any rewrite's time: go ahead
                if time.time() > next_look:
                    if _holder_stopped(fd):
                        break
                    next_look = time.time() + 0.2
                    # the bound is one holder's: many writers at once (every rank of a large job) queue longer,
                    # and each rewrite that lands shows the turns go on
                    written = _written(run_dir)
                    if written != last_write:
                        last_write, deadline = written, min(time.time() + LOCK_WAIT_S, began + LOCK_WAIT_MAX_S)
                time.sleep(0.01)
        _holding.run_dir = key
        yield
    finally:
        _holding.run_dir = None
        if fd >= 0:
            os.close(fd)  # closing releases the lock


def _written(run_dir: "str | os.PathLike") -> "tuple | None":
    """Which rewrite of run.json is in place (each is a new file renamed over it), or None when there is none."""
    try:
        st = os.stat(os.path.join(os.fspath(run_dir), RUN_JSON))
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def _holder_stopped(fd: int) -> bool:
    """Whether the flock on fd's file is held by a stopped process of this node (/proc/locks; a holder
    on another node of a shared file system is not listed there, and is waited for)."""
    st = os.fstat(fd)
    ident = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks") as f:
            lines = f.read().splitlines()
    except OSError:
        return False
    for line in lines:
        parts = line.split()  # "1: FLOCK  ADVISORY  WRITE 4242 00:2a:1234 0 EOF"; a waiter has "->" after "1:"
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5] == ident and parts[4].isdigit():
            try:
                with open(f"/proc/{parts[4]}/stat") as f:
                    return f.read().rpartition(")")[2].split()[0] in ("T", "t")
            except (OSError, IndexError):
                return False
    return False


class RunJsonError(ValueError):
    """run.json is there but is not a run's record (not JSON, not UTF-8, not an object, a section of another
    shape): the message names the file and what to do, `reason` says what is wrong after "run.json". The CLI prints
    it in one line as it prints a BenchError (this package imports nothing of bench: it is shipped beside the
    jobs); a ValueError, as json's own error was, for the readers that get by without the record."""

    def __init__(self, path: str, reason: str, fix: str = ""):
        super().__init__(f"{path} {reason}; " + (fix or f"move it aside, or delete its directory "
                                                         f"{os.path.dirname(path)}, for the run to start anew"))
        self.path, self.reason = path, reason

    @property
    def problem(self) -> str:
        """The file and what is wrong with it, without the advice: for a reader that goes on without the record."""
        return f"{self.path} {self.reason}"


def read_run_json(run_dir: "str | os.PathLike") -> Dict[str, Any]:
    """The manifest of a run directory as plain data, or {} when there is none yet; RunJsonError when it is
    there but is not a JSON object, or a section of it is not an object (an array: evidence, attempts). A failure to
    read it (a directory named run.json, EACCES, EIO, ESTALE) stays an OSError, as for any file of the run
    directory: it may pass, and the file itself may be sound."""
    path = os.path.join(os.fspath(run_dir), RUN_JSON)
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (FileNotFoundError, NotADirectoryError):  # none yet, or no run directory
        return {}
    except json.JSONDecodeError as e:
        raise RunJsonError(path, f"is not valid JSON ({e.msg}: line {e.lineno})") from None
    except UnicodeDecodeError:
        raise RunJsonError(path, "is not UTF-8 text (a damaged or foreign file)") from None
    except RecursionError:  # json's parser recurses once per nesting level
        raise RunJsonError(path, "is not a run's record (arrays or objects nested too deep to read)") from None
    if not isinstance(data, dict):
        raise RunJsonError(path, f"holds {_json_kind(data)}, not a run's record (a JSON object)")
    for name, value in data.items():
        # the readers of plain data take a section's .get or iterate a list: another shape would be a traceback
        shape, nullable = _SHAPES.get(name, (object, True))
        if not isinstance(value, shape) and not (value is None and nullable):
            if _of_a_newer_major(data):  # not damaged: a newer release's, whose sections may have other shapes
                raise RunJsonError(path, f"is of schema_version {data['schema_version']!r}, a newer release's record "
                                         f"(its {name!r} section is {_json_kind(value)})",
                                   fix="read it with that release of nanochat-bench")
            want = "an object" if shape is dict else "an array"
            raise RunJsonError(path, f"has {_json_kind(value)} for its {name!r} section, not {want}"
                                     + (" or null" if nullable else ""))
    return data


def _of_a_newer_major(data: Dict[str, Any]) -> bool:
    try:
        return parse_version(data.get("schema_version", SCHEMA_VERSION))[0] > MAJOR
    except SchemaError:  # not a version: the record's own validation names it
        return False


def _json_kind(value: Any) -> str:
    return {list: "an array", dict: "an object", str: "a string", bool: "a boolean",
            type(None): "null"}.get(type(value), "a number")


def _shape(annotation: Any) -> "Optional[tuple]":
    """(dict or list, whether null stands for it) of a manifest field that is an object or an array, else None."""
    nullable = type(None) in get_args(annotation)
    if nullable:
        annotation = next(a for a in get_args(annotation) if a is not type(None))
    if dataclasses.is_dataclass(annotation):
        return dict, True  # a null section is an empty one
    origin = get_origin(annotation)
    return (origin, nullable) if origin in (dict, list) else None


_SHAPES = {f.name: shape for f in dataclasses.fields(RunManifest) if (shape := _shape(f.type))}


def load_manifest(run_dir: "str | os.PathLike") -> RunManifest:
    """run.json as a RunManifest (a new one, named after the directories, when there is none)."""
    data = read_run_json(run_dir)
    if not data:
        path = os.path.abspath(os.fspath(run_dir))
        return RunManifest(run_id=os.path.basename(path), sweep_id=os.path.basename(os.path.dirname(path)))
    return RunManifest.from_dict(data, where=os.path.join(os.fspath(run_dir), RUN_JSON))


def write_manifest(run_dir: "str | os.PathLike", manifest: RunManifest) -> RunManifest:
    """Replace run.json with `manifest`, atomically (its minor never lowered)."""
    manifest.updated_at = time.time()
    manifest.schema_version = newer(manifest.schema_version, SCHEMA_VERSION)
    write_json_atomic(os.path.join(os.fspath(run_dir), RUN_JSON), manifest.to_dict())
    return manifest


def update_run_json(run_dir: "str | os.PathLike", **fields: Any) -> RunManifest:
    """Merge fields into run.json (RunManifest.merged) and rewrite it atomically; the new manifest.
    How a run ended is not a field to set here: record_evidence settles it, and evidence already there wins over
    a `running` given here."""
    with _locked(run_dir):
        manifest = load_manifest(run_dir).merged(fields)
        settled = settle(manifest.evidence)
        if manifest.status not in FINAL_STATUSES and settled is not None:
            # a writer's `running` (rank 0's start) never hides an end another rank recorded before it
            manifest.status, manifest.message = settled
        return write_manifest(run_dir, manifest)


def record_evidence(run_dir: "str | os.PathLike", evidence: Evidence, **fields: Any) -> RunManifest:
    """Append one piece of evidence to run.json and settle its status and message from all of it
    (bench/contract/outcome.py); `fields` are merged in the same rewrite. A final status written as a
    field, not settled from the evidence (an older release, an older writer), counts as an entry first."""
    if evidence.t is None:
        evidence.t = time.time()
    with _locked(run_dir):
        manifest = load_manifest(run_dir)
        seen = list(manifest.evidence)
        if manifest.status in FINAL_STATUSES and settle(seen) != (manifest.status, manifest.message):
            seen += legacy(manifest.status, manifest.message)  # a status written as a field, not as evidence
        seen.append(evidence)
        status, message = settle(seen)
        if (status, message) != (manifest.status, manifest.message) or manifest.finished_at is None:
            fields["finished_at"] = time.time()
        return write_manifest(run_dir, manifest.merged({**fields, "evidence": seen, "status": status,
                                                        "message": message}))


def slurm_facts(environ: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The Slurm section from SLURM_* variables ({} outside a job)."""
    environ = os.environ if environ is None else environ
    return {key: environ[var] for key, var in SLURM_VARS.items() if var in environ}


def log_tail(path: "str | os.PathLike", size: int = 65536) -> str:
    """The last `size` bytes of a log (or of any file written a line at a time) as text; "" when it cannot be
    read. Its first line is usually cut, its last may be half written."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - size))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def last_log_line(path: "str | os.PathLike", limit: int = 300) -> str:
    """The last non-empty line of a log, shortened: usually the error that ended the run."""
    lines = [ln.strip() for ln in log_tail(path, 8192).splitlines() if ln.strip()]
    return lines[-1][:limit] if lines else ""


RESERVE = ".reserve"  # space a run holds back for its last words on a disk that fills up
RESERVE_BYTES = 64 * 1024


def reserve_space(run_dir: "str | os.PathLike") -> None:
    """Hold back RESERVE_BYTES in the run directory (written, not sparse), for release_space to give
    back when the disk is full, so the final status and error event can still be written."""
    write_synced(os.path.join(os.fspath(run_dir), RESERVE), "\0" * RESERVE_BYTES)


def release_space(run_dir: "str | os.PathLike") -> bool:
    """Give the reserved space back; whether there was any."""
    try:
        os.unlink(os.path.join(os.fspath(run_dir), RESERVE))
        return True
    except OSError:
        return False


def close_unfinished(run_dir: "str | os.PathLike", exit_code: "int | None", launcher: str,
                     source: str = "launcher") -> RunManifest:
    """The launcher's last word on a run (local and Slurm alike): a run whose trainer never started, or
    died before anything recorded how it ended, gets the exit code and its log's last line as evidence
    (settled `failed`), so no run directory stays pending or running for ever."""
    release_space(run_dir)
    manifest = load_manifest(run_dir)
    if manifest.status in FINAL_STATUSES:
        return manifest
    what = "never started" if manifest.status == "pending" else "ended without recording a final status"
    tail = last_log_line(os.path.join(os.fspath(run_dir), TRAIN_LOG))
    code = "unknown" if exit_code is None else exit_code  # a scheduler that cannot tell (ReFrame's squeue)
    message = f"the trainer {what} ({launcher} exit code {code})" + (f": {tail}" if tail else "")
    return record_evidence(run_dir, Evidence(source=source, kind="exit", exit_code=exit_code, message=message))
