"""Processes by their parent ids, from Linux /proc (none elsewhere): who started whom, for the launchers that
must find the workers torchrun starts in sessions of their own, and the ranks that must find their launcher."""

import os
from pathlib import Path


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
