"""Processes by their parent ids, from Linux /proc (none elsewhere): who started whom, for the launchers that
must find the workers torchrun starts in sessions of their own, and the ranks that must find their launcher.
And the kernel's out-of-memory kills counted in this process's cgroup: a process it kills gets SIGKILL, as from
kill -9, and cannot say why itself. And how a rank or a wrapper ends without Python's teardown."""

import atexit
import contextlib
import ctypes
import os
import sys
from pathlib import Path, PurePosixPath
from typing import NoReturn


def parent_of(pid: int) -> int | None:
    """The parent's pid, or None when the process has ended (or there is no /proc)."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def parents() -> dict[int, int]:
    """pid -> parent pid of every process running now."""
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return {}
    return {pid: parent for pid in pids if (parent := parent_of(pid)) is not None}


def children_of(pid: int) -> list[int]:
    return [child for child, parent in parents().items() if parent == pid]


def tree_of(root: int) -> set[int]:
    """A process and its descendants (torchrun starts its workers in sessions of their own, so neither a session
    nor a process group holds them all)."""
    by_parent, tree = parents(), {root}
    while more := {pid for pid, parent in by_parent.items() if parent in tree} - tree:
        tree |= more
    return tree


def ancestors_of(pid: int) -> set[int]:
    """Its parent, the parent's parent, … down to pid 1 included (in a container the launcher is often pid 1)."""
    found, pid = set(), parent_of(pid)
    while pid is not None and pid >= 1 and pid not in found:
        found.add(pid)
        pid = parent_of(pid)
    return found


def oom_kills(root: str | os.PathLike = "/") -> int | None:
    """The kernel's out-of-memory kills counted in this process's cgroup (cgroup v2 memory.events, `oom_kill`: the
    kills of its processes and its descendants' wherever the limit was hit), else in its nearest readable ancestor.
    Not a sum over the ancestors: theirs count kills in sibling cgroups too, another user's included. None where no
    memory.events is readable (cgroup v1, a container without it): a kill cannot be told from another SIGKILL there.
    `root`: the file system's root, under which proc/self/cgroup and sys/fs/cgroup are read."""
    root = Path(root)
    try:
        lines = (root / "proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    own = next((line[3:] for line in lines if line.startswith("0::")), None)  # v2's line: `0::<path>`
    if own is None:
        return None
    group = PurePosixPath("/", own.split(" (deleted)")[0]).relative_to("/")
    for cgroup in (group, *group.parents):
        if ".." in cgroup.parts:  # above a cgroup namespace's root: not under this mount
            continue
        try:
            events = (root / "sys/fs/cgroup" / cgroup / "memory.events").read_text().splitlines()
        except OSError:
            continue
        counts = [int(v) for k, v in (line.split() for line in events if len(line.split()) == 2)
                  if k == "oom_kill" and v.isdigit()]
        if counts:
            return counts[0]
    return None


def oom_killed_since(before: int | None, root: str | os.PathLike = "/") -> bool | None:
    """Whether the kernel's out-of-memory killer ended a process here since `oom_kills` said `before`; None where
    it cannot tell (no count then or now)."""
    now = oom_kills(root)
    return None if before is None or now is None else now > before


def exit_now(code: int | None) -> NoReturn:
    """End this process as sys.exit(code) would, less Python's teardown of every module it imported: once torch
    is imported that takes 0.5 s of the process's end, 0.8 s with the trainer's modules, paid by every rank and
    every wrapper of every run. atexit's handlers still run and Python's buffered output is written; then C's
    exit() ends the process as a normal exit does after Python's part: C's atexit handlers (a profiler's, CUDA's),
    C++'s destructors and a flush of C's streams (NCCL's debug file, which the network gate reads). Called through
    PyDLL, which keeps the GIL: Python's other threads stay stopped, as in Python's own finalisation."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    ctypes.PyDLL(None).exit(code or 0)
    os._exit(code or 0)  # not reached: exit() does not return
