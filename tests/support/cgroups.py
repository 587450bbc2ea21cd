"""A cgroup v2 tree as the kernel shows it, written under a test's directory: /proc/self/cgroup naming the
process's cgroup and memory.events with its `oom_kill` count (bench/processes.py reads them)."""

from pathlib import Path

from bench import processes

EVENTS = "low 0\nhigh 0\nmax 3\noom 1\noom_kill {}\noom_group_kill 0\n"


def tree(root: Path, own: str = "/user.slice/user-1000.slice/session-3.scope", counts: dict | None = None,
         proc: str = "0::{}\n") -> Path:
    """/proc/self/cgroup naming `own`, and memory.events with `oom_kill` counts by cgroup."""
    (root / "proc/self").mkdir(parents=True, exist_ok=True)
    (root / "proc/self/cgroup").write_text(proc.format(own))
    for cgroup, count in (counts or {}).items():
        (root / "sys/fs/cgroup" / cgroup).mkdir(parents=True, exist_ok=True)
        (root / "sys/fs/cgroup" / cgroup / "memory.events").write_text(EVENTS.format(count))
    return root


def counted_in(root: Path, monkeypatch, module) -> Path:
    """`module`'s oom_kills and oom_killed_since reading a tree under `root` whose process's cgroup has counted no
    OOM kill yet; the memory.events file, where a test writes EVENTS.format(1) for the kernel's kill."""
    tree(root, own="/user.slice", counts={"user.slice": 0})
    monkeypatch.setattr(module, "oom_kills", lambda: processes.oom_kills(root))
    monkeypatch.setattr(module, "oom_killed_since", lambda before: processes.oom_killed_since(before, root))
    return root / "sys/fs/cgroup/user.slice/memory.events"
