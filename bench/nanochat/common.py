"""Small things every part of the workload uses: the base directory, rank-0 printing, dist info."""

import os
import queue
import sys
import threading
import time
from pathlib import Path

from bench import paths
from bench.errors import ConfigError, os_reason


# What an error that cannot write under the base directory tells the user to do instead (free space first, where
# the disk is full: errors.os_remedy)
ELSEWHERE = f"set {paths.ENV_BASE_DIR} to another directory"


def get_base_dir(create: bool = True) -> Path:
    """NANOCHAT_BASE_DIR (default ~/.cache/nanochat): shards, tokenizer and checkpoints live here. Made where absent
    unless not `create` (a reader's: a command that then finds nothing leaves no empty one behind)."""
    path = Path(paths.base_dir())
    try:
        if create or path.exists():  # a file in its place is refused either way
            path.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # every command lives under it: one line, not a traceback
        raise ConfigError(f"the base directory {path} ({paths.ENV_BASE_DIR}) cannot be used: {os_reason(e)}; set "
                          f"{paths.ENV_BASE_DIR} to a writable directory") from None
    return path


def get_dist_info() -> tuple[bool, int, int, int]:
    """(is_distributed, rank, local_rank, world_size) from torchrun's environment."""
    if all(k in os.environ for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE")):
        return True, int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
    return False, 0, 0, 1


def print0(*args, **kwargs) -> None:
    """print on rank 0 only (nanochat's print0); through the output thread once detach_output() ran."""
    if int(os.environ.get("RANK", 0)) == 0:
        if _console is None:
            print(*args, **kwargs, flush=True)
        else:
            _console.put(kwargs.get("sep", " ").join(map(str, args)) + kwargs.get("end", "\n"))


class _Console:
    """stdout written by a thread of its own, so a reader that stops reading (a paused terminal, `| less`)
    never stops training: while the pipe is full, lines queue up to LIMIT, then are counted and dropped,
    and the count is printed once the pipe drains (metrics.jsonl keeps every figure)."""

    LIMIT = 10000

    def __init__(self):
        self.lines: queue.Queue = queue.Queue(self.LIMIT)
        self.dropped = 0
        threading.Thread(target=self._run, name="stdout", daemon=True).start()

    def put(self, text: str) -> None:
        try:
            self.lines.put_nowait(text)
        except queue.Full:
            self.dropped += 1

    def _run(self) -> None:
        while True:
            text = self.lines.get()
            try:
                if self.dropped:
                    dropped, self.dropped = self.dropped, 0
                    sys.stdout.write(f"[{dropped} line(s) of output dropped while stdout was not read]\n")
                sys.stdout.write(text)
                sys.stdout.flush()
            except (OSError, ValueError, AttributeError):  # AttributeError: started with stdout closed (None)
                pass  # a closed terminal: the run record has what matters
            finally:
                self.lines.task_done()

    def drain(self, timeout_s: float) -> None:
        deadline = time.time() + timeout_s
        while self.lines.unfinished_tasks and time.time() < deadline:
            time.sleep(0.01)


_console: "_Console | None" = None


def detach_output() -> None:
    """From now on print0 never blocks on a stdout nobody reads (the trainer's main calls it)."""
    global _console
    if _console is None:
        _console = _Console()


def drain_output(timeout_s: float = 2.0) -> None:
    """Wait (at most timeout_s) until the lines print0 queued are written: before the process ends."""
    if _console is not None:
        _console.drain(timeout_s)
