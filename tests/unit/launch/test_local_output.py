"""The local launcher's copies of the workload's output: a terminal that cannot take them costs that copy only.

    python -m pytest tests/unit/launch/test_local_output.py -q
"""

import os

from bench.launch.local import Output


def test_a_missing_stdout_still_drains_the_pipe_into_train_log(tmp_path):
    """Started with its stdout closed (`>&-`, a daemon), the launcher's sys.stdout is None: the copier must go on
    reading the workload's pipe into train.log, else it stopped at the first line and the workload blocked on a full
    pipe for ever."""
    read_fd, write_fd = os.pipe()
    lines = [f"step {i:05d}\n".encode() for i in range(100)]
    os.write(write_fd, b"".join(lines))
    os.close(write_fd)
    output = Output(tmp_path / "train.log")
    with os.fdopen(read_fd, "rb") as pipe:
        output.copy(pipe, None).join(timeout=30)
        left = pipe.read()  # what the copier did not read: a workload writing it would have blocked
    output.close()
    assert left == b"" and (tmp_path / "train.log").read_bytes() == b"".join(lines)
