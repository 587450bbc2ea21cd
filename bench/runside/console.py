"""A process's stdout written by a thread of its own once detached, so a reader that stops reading never stops
the run (nanochat's print0 goes through it); drained, bounded, before the process ends."""

import queue
import sys
import threading
import time


class Console:
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


detached: "Console | None" = None


def detach_output() -> None:
    """From now on print0 never blocks on a stdout nobody reads (the trainer's main calls it)."""
    global detached
    if detached is None:
        detached = Console()


def write(text: str) -> None:
    """`text` on stdout: queued for the output thread once detached, else written and flushed now."""
    if detached is None:
        print(text, end="", flush=True)
    else:
        detached.put(text)


def drain_output(timeout_s: float = 2.0) -> None:
    """Wait (at most timeout_s) until the lines print0 queued are written: before the process ends."""
    if detached is not None:
        detached.drain(timeout_s)
