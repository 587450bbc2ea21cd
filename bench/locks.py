"""One writer at a time into a shared directory: a lock file there, held with flock (gone with its process)."""

import contextlib
import fcntl
import os
import socket
from pathlib import Path

from bench.runside.runclaim import NO_LOCKS


@contextlib.contextmanager
def in_turn(lock: Path, waiting: str):
    """Hold `lock` while the block writes beside it. A second writer waits, saying once `waiting for <waiting> to end
    (<who holds it>)`, then finds what the first one wrote. Where the lock cannot be made (a read-only directory) or
    the filesystem offers no flock (Lustre mounted noflock), the block runs unlocked: its own writes say why they
    fail, if they must write at all."""
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "its holder unknown"
            print(f"waiting for {waiting} to end ({holder})", flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as e:
            if e.errno not in NO_LOCKS:
                raise
        with contextlib.suppress(OSError):  # who holds it, for the next one's wait: never a failure (a full disk)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}".encode(), 0)
        yield
    finally:
        os.close(fd)
