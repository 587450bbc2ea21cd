"""Where a training step's time goes: forward+backward, exposed communication, optimizer, data wait.

The step is timed on the timeline that matters: the device's own on CUDA (events recorded on the compute
stream), the wall clock on CPU. A section's events bracket a stretch of that timeline, so:
- `data`, around the loader's `next()`: on CUDA the device stalls there only when the host has not
  queued the next kernels in time, so the events measure the *exposed* wait, not the host's loader time;
- `comm`, around the sharded optimizers' `work.wait()`: the compute stream waits for NCCL there, so the
  events measure the communication the step could not hide (its exposed part);
- `fwd_bwd` (the micro-steps, data waits taken out) and `optim` (the optimizer steps, comm taken out).
What is left of the step (gradient clipping, zeroing, schedules, the syncs) is `other`, so the parts add
up to the step by construction and `other` says how much the split does not explain.

The optimizers call `wait(work)` (bench/nanochat/muon.py, adamw.py): a module-level timer, set by the
trainer for the run and a do-nothing one otherwise, so the optimizers know nothing of measurement.
"""

import time
from contextlib import contextmanager

import torch


class StepTimer:
    """Sections of one step, summed by name; `begin()` before the step, `split(step_ms)` after its sync."""

    def __init__(self, device_type: str):
        self.cuda = device_type == "cuda"
        self._marks: list[tuple[str, object, object]] = []

    def begin(self) -> None:
        self._marks = []

    @contextmanager
    def section(self, name: str):
        start = self._mark()
        try:
            yield
        finally:
            self._marks.append((name, start, self._mark()))

    def _mark(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def split(self, step_ms: float) -> dict[str, float]:
        """{fwd_bwd_ms, data_ms, comm_ms, optim_ms, other_ms} of the step just synchronised."""
        total: dict[str, float] = {}
        try:
            for name, start, end in self._marks:
                ms = start.elapsed_time(end) if self.cuda else (end - start) * 1000.0
                total[name] = total.get(name, 0.0) + ms
        except (RuntimeError, ValueError):  # an event a compiled region swallowed: no split, never a failed run
            return {}
        data, comm = total.get("data", 0.0), total.get("comm", 0.0)
        parts = {"fwd_bwd_ms": total.get("fwd_bwd", 0.0) - data, "data_ms": data, "comm_ms": comm,
                 "optim_ms": total.get("optim", 0.0) - comm}
        parts["other_ms"] = step_ms - sum(parts.values())
        return parts


class NullTimer:
    """Stands in when the breakdown is off (--breakdown=0): no events, no cost."""

    def begin(self) -> None:
        pass

    @contextmanager
    def section(self, name: str):
        yield

    def split(self, step_ms: float) -> dict[str, float]:
        return {}


_current: "StepTimer | NullTimer" = NullTimer()


def use(timer: "StepTimer | NullTimer") -> None:
    """The timer the optimizers' waits report to, for this process."""
    global _current
    _current = timer


def wait(work) -> None:
    """`work.wait()` of an async collective, timed as exposed communication."""
    if isinstance(_current, NullTimer):
        work.wait()
    else:
        _timed_wait(work)


@torch.compiler.disable  # DistAdamW's step is compiled on CUDA: the events must be recorded for real, not traced
def _timed_wait(work) -> None:
    with _current.section("comm"):
        work.wait()
