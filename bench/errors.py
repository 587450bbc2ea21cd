"""Expected failures: a user's mistake or a missing resource, reported as one clear line.

The CLI prints a BenchError as `error: <message>` and exits 1; anything else is a bug and keeps its
traceback. Messages name the file, flag or value at fault and what would be valid.
"""

import difflib
import errno
import json
from pathlib import Path


class BenchError(Exception):
    """Base of every expected failure."""


class ConfigError(BenchError):
    """A flag, option or config value is invalid."""


class UnknownFlags(ConfigError):
    """Flags a trainer's parser does not take: `names` as the flags spelled them (no dashes), `known` its own, `notes`
    what to say of a name in place of close names (where the trainer takes that setting otherwise)."""

    def __init__(self, message: str, names: list[str], known: list[str], notes: dict[str, str] | None = None):
        super().__init__(message)
        self.names, self.known, self.notes = names, known, notes or {}


class FlagValueError(ConfigError):
    """A trainer flag's value its parser cannot read: `name` the flag (no dashes), `expected` what it takes."""

    def __init__(self, message: str, name: str, expected: str):
        super().__init__(message)
        self.name, self.expected = name, expected


def close_hint(name: str, known: list[str], prefix: str = "") -> str:
    """" (did you mean a, b?)": up to three of the known names close to `name`; "" when none is."""
    # at 0.5 names that merely share a few letters passed (depth: dataset_path, nepochs); 0.7 still takes a typo
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.7)
    return f" (did you mean {', '.join(prefix + c for c in close)}?)" if close else ""


class DataError(BenchError):
    """Data shards, tokenizer or a data split are missing or unusable."""


class SubmitError(BenchError):
    """Slurm refused or misunderstood a submission, or answered something we cannot parse."""


class RuntimeConfigError(BenchError):
    """A container runtime cannot be used as asked (unknown name, missing image, bad mount)."""


class AnalysisError(BenchError):
    """Run directories or result tables cannot be read as asked."""


class CheckpointError(BenchError):
    """A checkpoint cannot be written (a full disk, a quota, a read-only filesystem)."""


class SandboxError(BenchError):
    """Model-written code cannot be run fenced off on this host: the sandbox itself failed to start."""


class RunDirError(BenchError):
    """A run directory cannot be created or written (read-only, full, not a directory)."""


def os_reason(e: OSError) -> str:
    """An OSError's reason in words: `No space left on device (disk full)`, or that a file is in the way of a
    directory (naming it where it is one of the path's parents). pyarrow's errors carry no errno, so a full disk is
    also read from the words."""
    if e.errno in (errno.EEXIST, errno.ENOTDIR):
        parent = parent_in_the_way(e)
        return f"{parent} is a file in the way, not a directory" if parent else \
            "a file of that name is in the way, not a directory"
    reason = e.strerror or str(e)
    return f"{reason} (disk full)" if disk_full(e) else reason


def disk_full(e: OSError) -> bool:
    return e.errno == errno.ENOSPC or "No space left on device" in (e.strerror or str(e))


def os_remedy(e: OSError, elsewhere: str) -> str:
    """What to do: `free space there or ELSEWHERE` on a full disk, `ELSEWHERE` alone where freed space would not
    help (a read-only filesystem, no permission, a file in the way)."""
    return f"free space there or {elsewhere}" if disk_full(e) else elsewhere


def os_reason_and_remedy(e: OSError, elsewhere: str) -> str:
    """os_reason(e), then what to do (os_remedy)."""
    return f"{os_reason(e)}; {os_remedy(e, elsewhere)}"


def json_reason(e: json.JSONDecodeError, one_line: bool = False) -> str:
    """Where json stopped, in its own "msg: line n" form (its msg can end in "at": "Unterminated string starting
    at", so "msg at line n" read "at at"); of a text that is one line of a file, the column instead."""
    return f"{e.msg}: " + (f"column {e.colno}" if one_line else f"line {e.lineno}")


def parent_in_the_way(e: OSError) -> Path | None:
    """Where a directory could not be made for a file among its parents: the first such parent, from the root down
    (None where the error is another, or the file in the way is the path itself)."""
    if e.errno not in (errno.EEXIST, errno.ENOTDIR) or not e.filename:
        return None
    parents = reversed(Path(e.filename).parents)
    return next((p for p in parents if p.exists() and not p.is_dir()), None)


def run_dir_error(run_dir, e: OSError) -> RunDirError:
    """`the run directory /x/run cannot be written: No space left on device (disk full)`."""
    reason = os_reason(e)
    # the file in the way of a parent is named in the reason already
    where = f" ({e.filename})" if e.filename and str(e.filename) != str(run_dir) and not parent_in_the_way(e) else ""
    return RunDirError(f"the run directory {run_dir} cannot be written: {reason}{where}")


def first_line(e: BaseException, default: str | None = None) -> str:
    """The first line of an exception's message (a library's may run to pages), else `default` or its type."""
    return (str(e).strip().splitlines() or [type(e).__name__ if default is None else default])[0]
