"""A real small filesystem for a test: a tmpfs mounted at a fresh folder (root only; the test is skipped
elsewhere) and unmounted after, full or read-only as the test needs."""

import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def tmpfs(path: Path, options: str = "size=1m"):
    """`path` (made here) as a tmpfs mounted with `options` (e.g. "ro,size=1m") for the with-block."""
    path.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"a tmpfs ({options}) cannot be mounted here (root needed): {r.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)
