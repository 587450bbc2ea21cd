"""bench/analysis/regular_files.py: only regular files are read; links, FIFOs, devices and folders are named.

    python -m pytest tests/unit/analysis/test_regular_files.py -q
"""

import errno
import os

import pytest

from bench.analysis.regular_files import NotRegularFile, read_regular


def test_read_regular_refuses_what_is_not_a_regular_file(tmp_path):
    (tmp_path / "f").write_bytes(b"data")
    (tmp_path / "link").symlink_to(tmp_path / "f")
    assert read_regular(tmp_path / "f") == b"data"
    with pytest.raises(NotRegularFile, match="symbolic link"):
        read_regular(tmp_path / "link")
    with pytest.raises(NotRegularFile, match="a directory"):
        read_regular(tmp_path)
    with pytest.raises(NotRegularFile, match="character device"):
        read_regular("/dev/null")
    os.mkfifo(tmp_path / "fifo")  # no writer: opening it for reading would block for ever
    with pytest.raises(NotRegularFile, match="a FIFO"):
        read_regular(tmp_path / "fifo")
    with pytest.raises(FileNotFoundError) as e:
        read_regular(tmp_path / "gone")
    assert e.value.errno == errno.ENOENT
