"""One run per run directory: a lock held by the writer, a finished run never written over, no stale files.

- `claim(run_dir)` is called by whoever starts writing a run directory first (the local launcher before
  its run.json, the trainer's rank 0 before its first event). It takes `.lock` (flock, held until the
  process ends, so a run killed with -9 leaves no stale lock) and writes the holder's pid and host into
  it. A second run finds the lock taken and is refused at once, naming the holder; the trainer started
  by a launcher that holds the lock finds its own ancestor there and goes on.
- With `refuse_finished` (the local launcher, `nanochat-bench train --run-dir`), a directory that
  already holds a run (events in metrics.jsonl) is refused unless the new run resumes it
  (--resume_from_step), since appending would make two runs read as one. The trainer itself does not
  refuse one: a capacity sweep re-runs an interrupted probe in its own directory.
- With `overwrite` (`nanochat-bench train --overwrite`), the files of the run a directory holds (RUN_ENTRIES,
  RUN_FILES: what a run writes there) are deleted once the lock is taken, all but the lock itself, so the new
  run starts as in a fresh directory and no file of the old one is read as the new one's. Anything else there
  (a user's notes or analysis, another run's directory) is kept, and so is a directory holding no run (no
  run.json, no metrics.jsonl): the flag never deletes files that are not a run's.
- The per-run files of an earlier run (heartbeats) are removed when a run claims the directory, so no
  verdict of this run names a rank of the earlier one.
Read-modify-writes of run.json between the processes of one run are serialised by the contract itself
(bench/contract/files.py), so no update is lost.
"""

import errno
import fcntl
import fnmatch
import functools
import json
import os
import shutil
import socket
from pathlib import Path

from bench.errors import RunDirError, run_dir_error
from bench.runside import heartbeat
from bench.processes import ancestors_of
from bench.contract import METRICS_JSONL, RUN_JSON, TRAIN_LOG
from bench.contract.files import RESERVE

LOCK = ".lock"  # held by the run writing the directory
NO_LOCKS = (errno.ENOSYS, errno.ENOLCK, errno.EINVAL, errno.EOPNOTSUPP)  # flock not offered by the filesystem
_held: dict[str, int] = {}  # run directory -> the open lock file of this process
# What a run writes into its directory, all that --overwrite deletes there (the lock is kept): the contract's
# files, the heartbeats, the reserve (contract/files.py), NCCL's lines (nanochat/stagerun.py, launch/submit.py
# NCCL_DIR), base_eval's CSV (nanochat/base_eval.py), smoke's report, and a Slurm run's job script, container
# environment (runtimes/ce.py) and earlier attempts (launch/submit.py). Named here, not imported: those modules
# load torch or the launchers.
RUN_ENTRIES = (RUN_JSON, METRICS_JSONL, TRAIN_LOG, heartbeat.DIR, RESERVE, "nccl", "base_eval.csv", "report",
               "job.sbatch", "interactive.sh", "environment.toml", "attempts")
# ... and by pattern: a profiled step's files (nanochat/profile.py), a Slurm job's output (launch/job.py SLURM_LOG),
# and what an atomic write of one of the above left where it was cut short (contract/files.py atomic_target)
RUN_FILES = ("profile_step*.txt", "profile_step*.json", "slurm-*.log",
             *(f".{name}.*.tmp" for name in (RUN_JSON, "base_eval.csv", "job.sbatch", "interactive.sh",
                                             "environment.toml")))


class RunDirBusy(RunDirError):
    """Another run holds the directory, or it holds a finished run: nothing of it is touched."""


def claim(run_dir: "str | os.PathLike", refuse_finished: bool = False, resume: bool = False,
          overwrite: bool = False, resumable: bool = True) -> None:
    """Take the run directory for this run, or raise RunDirBusy naming why not (see the module doc);
    a directory that cannot be written is a RunDirError naming it. `resumable`: the caller's user can continue
    a run (`train`; smoke cannot), so a finished one's refusal says how."""
    try:
        _claim(os.path.abspath(os.fspath(run_dir)), refuse_finished, resume, overwrite, resumable)
    except OSError as e:
        raise run_dir_error(run_dir, e) from None


def _claim(path: str, refuse_finished: bool, resume: bool, overwrite: bool, resumable: bool) -> None:
    os.makedirs(path, exist_ok=True)
    fd = _held.get(path)
    if fd is None:
        fd = os.open(os.path.join(path, LOCK), os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            if holder.get("pid") in _ancestors() and holder.get("host") == socket.gethostname():
                return  # the launcher that started this process holds it for this very run
            raise RunDirBusy(f"{path} is in use by another run ({_who(holder)}); give each run its own "
                             f"--run-dir, or wait until that one ends") from None
        except OSError as e:
            if e.errno not in NO_LOCKS:
                raise
            # a filesystem without flock (Lustre mounted noflock, some NFS): the directory is taken unlocked
        _held[path] = fd
    if overwrite and not resume:
        _empty_run_dir(path)
    elif refuse_finished and not resume and holds_a_run(path):
        release(path)
        raise _finished(path, resumable)
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "run": _run_id()}).encode(), 0)
    heartbeat.clear_earlier(path)  # an earlier run's ranks


def _finished(path: str, resumable: bool) -> RunDirBusy:
    resume_it = ", or continue that run with `train -- --resume_from_step=<a saved step>`" if resumable else ""
    return RunDirBusy(f"{path} already holds a run (its {METRICS_JSONL} has events); give a new "
                      f"--run-dir or start it afresh with --overwrite (the old run's files are deleted){resume_it}")


def refuse_early(run_dir: "str | os.PathLike", overwrite: bool = False, resumable: bool = True) -> None:
    """What claim(refuse_finished=True) would refuse for lack of a directory (a file in the way) or for a finished
    run in it, told before a command's long preparation (smoke's data) and without making or taking anything:
    a preparation that fails then leaves no run directory."""
    path = os.path.abspath(os.fspath(run_dir))
    nearest = next(p for p in (path, *map(os.fspath, Path(path).parents)) if os.path.lexists(p))
    if not os.path.isdir(nearest):
        raise run_dir_error(run_dir, FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), os.fspath(run_dir)))
    if not overwrite and holds_a_run(path):
        raise _finished(path, resumable)


def ours(run_dir: "str | os.PathLike") -> bool:
    """Whether the directory's lock names this run: its holder is this process or an ancestor (the
    launcher), or it was taken under this torchrun run id (rank 0 of this run); True without a lock."""
    try:
        fd = os.open(os.path.join(os.fspath(run_dir), LOCK), os.O_RDONLY)
    except OSError:
        return True
    try:
        holder = _holder(fd)
    finally:
        os.close(fd)
    if not holder.get("pid"):
        return True
    if holder.get("host") == socket.gethostname() and holder["pid"] in {os.getpid(), *_ancestors()}:
        return True
    return holder.get("run") is not None and holder.get("run") == _run_id()


def _run_id() -> str | None:
    return os.environ.get("TORCHELASTIC_RUN_ID") or None


def resuming(train_args: list[str]) -> bool:
    """Whether trainer flags continue a saved run (--resume_from_step=N with N >= 0, either flag form)."""
    for i, arg in enumerate(train_args):
        if arg.startswith("--resume_from_step"):
            value = arg.split("=", 1)[1] if "=" in arg else (train_args[i + 1] if i + 1 < len(train_args) else "")
            return value.strip().lstrip("+").isdigit()
    return False


def release(run_dir: "str | os.PathLike") -> None:
    """Give the directory back before this process ends (a launcher that runs several runs in turn)."""
    fd = _held.pop(os.path.abspath(os.fspath(run_dir)), None)
    if fd is not None:
        os.close(fd)


def _empty_run_dir(path: str) -> None:
    """Delete the run's entries of a run directory (RUN_ENTRIES, RUN_FILES) but the lock this process holds;
    nothing where it holds no run, nor anything else there."""
    if not any(os.path.lexists(os.path.join(path, name)) for name in (RUN_JSON, METRICS_JSONL)):
        return
    for entry in os.scandir(path):
        if entry.name not in RUN_ENTRIES and not any(fnmatch.fnmatchcase(entry.name, p) for p in RUN_FILES):
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)


def holds_a_run(path: "str | os.PathLike") -> bool:
    """Whether the directory holds a run: its metrics.jsonl has events."""
    try:
        return os.path.getsize(os.path.join(path, METRICS_JSONL)) > 0
    except OSError:
        return False


def _holder(fd: int) -> dict:
    try:
        holder = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        return {}
    return holder if isinstance(holder, dict) else {}


def _who(holder: dict) -> str:
    if not holder.get("pid"):
        return "a process starting up"
    return f"pid {holder['pid']} on {holder.get('host', 'an unknown host')}"


def remember_launcher() -> None:
    """Note this process's ancestors now, while the torchrun agent and the launcher are still among them."""
    _ancestors()


def _ancestors() -> set[int]:
    """The pids of this process's parent, its parent, … (Linux /proc), as first seen: a rank orphaned by
    its torchrun agent still belongs to the run its launcher started."""
    return set(_ancestors_of(os.getpid()))


@functools.lru_cache(maxsize=4)
def _ancestors_of(pid: int) -> frozenset[int]:
    parent = os.getppid()  # known without /proc; its own ancestors from there (pid 1 included: a container's)
    return frozenset({parent, *ancestors_of(parent)}) if parent >= 1 else frozenset()
