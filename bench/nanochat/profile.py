"""One training step under torch.profiler: where the time of a step goes, written beside the run.

`--profile_step=N` profiles step N (pick one after the warm-up, e.g. 12) and writes into the run
directory (or the working directory without one):
  profile_step<N>.txt   operators and kernels sorted by device time (CPU time on a CPU run)
  profile_step<N>.json  a Chrome / Perfetto trace of the step
That step's own dt includes the profiler's overhead; the medians over the steady steps are unaffected.
"""

from contextlib import nullcontext
from pathlib import Path

from torch.profiler import ProfilerActivity, profile


class StepProfiler:
    def __init__(self, out_dir: str | None, step: int, device_type: str):
        self.out_dir = Path(out_dir or ".")
        self.step = step
        self.cuda = device_type == "cuda"
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        self._prof = profile(activities=activities, record_shapes=True)

    def __enter__(self) -> "StepProfiler":
        self._prof.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._prof.__exit__(*exc)
        if exc[0] is not None:
            return
        sort_by = "cuda_time_total" if self.cuda else "cpu_time_total"
        table = self._prof.key_averages().table(sort_by=sort_by, row_limit=40, max_name_column_width=60)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        (self.out_dir / f"profile_step{self.step}.txt").write_text(table + "\n")
        self._prof.export_chrome_trace(str(self.out_dir / f"profile_step{self.step}.json"))


def maybe_profile(enabled: bool, out_dir: str | None, step: int, device_type: str):
    """A StepProfiler when this step is the one asked for, else a context that does nothing."""
    return StepProfiler(out_dir, step, device_type) if enabled else nullcontext()
