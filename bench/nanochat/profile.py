"""One training step under torch.profiler: where the time of a step goes, written beside the run.

`--profile_step=N` profiles step N (pick one after the warm-up, e.g. 12) and writes into the run
directory (or the working directory without one):
  profile_step<N>.txt   operators and kernels sorted by device time (CPU time on a CPU run)
  profile_step<N>.json  a Chrome / Perfetto trace of the step
That step's own dt includes the profiler's overhead; the medians over the steady steps are unaffected.
"""

from contextlib import contextmanager
from pathlib import Path

from torch.profiler import ProfilerActivity, profile


@contextmanager
def maybe_profile(enabled: bool, out_dir: str | None, step: int, device_type: str):
    """The step under torch.profiler when it is the one asked for (its files written once it ends without
    an exception), else a context that does nothing."""
    if not enabled:
        yield
        return
    cuda = device_type == "cuda"
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else []),
                 record_shapes=True) as prof:
        yield
    sort_by = "cuda_time_total" if cuda else "cpu_time_total"
    table = prof.key_averages().table(sort_by=sort_by, row_limit=40, max_name_column_width=60)
    out = Path(out_dir or ".")
    out.mkdir(parents=True, exist_ok=True)
    (out / f"profile_step{step}.txt").write_text(table + "\n")
    prof.export_chrome_trace(str(out / f"profile_step{step}.json"))
