"""Reading a run directory's files without trusting what they are.

A results tree is anyone's to fill: a `metrics.jsonl` may be a FIFO (opening it for reading blocks until
a writer comes, for ever), a symbolic link may lead out of the tree (to /etc/shadow) or round in it, a
name may be a device. `open_regular` looks at the name itself first (lstat: no link followed, nothing
opened), opens only a regular file, without following a link and without blocking, and checks that it
opened the file it looked at; anything else is a `NotRegularFile` error saying what the name turned out
to be.
"""

import errno
import os
import stat
from typing import BinaryIO

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


class NotRegularFile(OSError):
    """The name is not a regular file (a link, FIFO, device, ...); `strerror` says which."""


def open_regular(path: str | os.PathLike) -> BinaryIO:
    """A regular file opened for reading (binary); NotRegularFile for a symbolic link or anything that
    is not a regular file, FileNotFoundError when it is gone. What the name is comes from lstat, so a FIFO
    is never opened (opening one would wake a writer waiting on it); the open itself follows no link and
    cannot block, and must find the very file lstat saw."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise NotRegularFile(errno.ELOOP, "a symbolic link (not followed)", str(path))
    if not stat.S_ISREG(st.st_mode):
        kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
        raise NotRegularFile(errno.EINVAL, f"{kind}, not a regular file (not read)", str(path))
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP:  # replaced by a link since the lstat
            raise NotRegularFile(errno.ELOOP, "a symbolic link (not followed)", str(path)) from None
        raise
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) or not stat.S_ISREG(now.st_mode):
            raise NotRegularFile(errno.EINVAL, "replaced while being opened (not read)", str(path))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return open(fd, "rb", closefd=True)


def read_regular(path: str | os.PathLike) -> bytes:
    """The bytes of a regular file (see open_regular)."""
    with open_regular(path) as f:
        return f.read()


def is_regular(entry: os.DirEntry) -> bool:
    """A directory entry that is a regular file itself (a link to one does not count)."""
    try:
        return entry.is_file(follow_symlinks=False)
    except OSError:
        return False
