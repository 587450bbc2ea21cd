"""The run-directory contract, defined once: run.json fields and statuses, metrics.jsonl events.

Written by the launcher and the trainer, read by the analysis. See DESIGN.md ("The run directory").

  <results_root>/<sweep_id>/<run_id>/run.json       manifest, rewritten atomically (temp file + rename)
  <results_root>/<sweep_id>/<run_id>/metrics.jsonl  one JSON event a line from rank 0, flushed as written
"""

import json
import os
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

SCHEMA_VERSION = 1
RUN_JSON = "run.json"
METRICS_JSONL = "metrics.jsonl"

# The workload every run of this project trains; part of the key under which runs are compared.
WORKLOAD = "nanochat-base"

# Final statuses of a run; "pending" from submission until the trainer starts, "running" while it goes on.
FINAL_STATUSES = ("ok", "failed", "timeout", "oom", "nccl_timeout", "no_data", "cancelled")
STATUSES = FINAL_STATUSES + ("pending", "running")

# Every event carries "event" and "t" (seconds since the epoch); these are the other fields.
EVENTS: dict[str, tuple[str, ...]] = {
    "start": (),  # the trainer process began (inside the runtime)
    "dist_init": ("world_size", "backend"),
    "model_ready": ("num_params", "flops_per_token"),
    "first_step": (),
    "step": ("step", "loss", "lrm", "dt_ms", "tok_per_sec", "mfu", "total_time_s"),
    "val": ("step", "val_bpb"),
    "end": ("peak_mem_mib", "total_training_time_s", "min_val_bpb"),
    "error": ("kind", "message"),
}

# Environment variables of the contract (DESIGN.md, "Environment variables").
ENV_BASE_DIR = "NANOCHAT_BASE_DIR"
ENV_VAL_FILES_K = "NANOCHAT_VAL_FILES_K"
ENV_FORCE_FLASH_SDPA = "NANOCHAT_FORCE_FLASH_SDPA"
ENV_RUN_DIR = "NANOCHAT_BENCH_RUN_DIR"
ENV_T0 = "NANOCHAT_BENCH_T0"


@contextmanager
def atomic_target(path: str | os.PathLike) -> Iterator[str]:
    """A fresh temp file beside `path` to write into; renamed onto `path` when the block ends cleanly,
    removed when it raises. A reader sees the old file or the new one, never half of one, and writers
    that race on one path (two runs sharing a checkpoint tag) each get their own temp file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; the result is as readable as any file written
        os.close(fd)
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: str | os.PathLike, data: dict[str, Any]) -> None:
    """Write JSON so that a reader sees the old file or the new one, never half of one."""
    with atomic_target(path) as tmp, open(tmp, "w") as f:
        json.dump(data, f, indent=2, sort_keys=True, default=str)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())


def read_run_json(run_dir: str | os.PathLike) -> dict[str, Any]:
    """The manifest of a run directory, or {} when there is none yet."""
    path = Path(run_dir) / RUN_JSON
    if not path.exists():
        return {}
    with open(path) as f:
        return json.load(f)


def update_run_json(run_dir: str | os.PathLike, **fields: Any) -> dict[str, Any]:
    """Merge fields into run.json (nested dicts merged one level deep) and rewrite it atomically."""
    data = read_run_json(run_dir)
    data.setdefault("schema_version", SCHEMA_VERSION)
    for key, value in fields.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    data["updated_at"] = time.time()
    write_json_atomic(Path(run_dir) / RUN_JSON, data)
    return data


class EventWriter:
    """Appends events to metrics.jsonl, one line each, flushed at once so a crash loses nothing."""

    def __init__(self, run_dir: str | os.PathLike):
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        self.path = Path(run_dir) / METRICS_JSONL
        self._f = open(self.path, "a", buffering=1)

    def emit(self, event: str, **fields: Any) -> None:
        if event not in EVENTS:
            raise ValueError(f"unknown event {event!r}; known: {', '.join(EVENTS)}")
        missing = [k for k in EVENTS[event] if k not in fields]
        if missing:
            raise ValueError(f"event {event!r} lacks {missing}")
        record = {"event": event, "t": time.time(), **fields}
        self._f.write(json.dumps(record, default=float) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()


class NullEventWriter:
    """Stands in for EventWriter when NANOCHAT_BENCH_RUN_DIR is unset (nanochat's DummyWandb idea)."""

    def emit(self, event: str, **fields: Any) -> None:
        pass

    def close(self) -> None:
        pass


def event_writer(run_dir: str | None, enabled: bool = True):
    """The writer for this process: a real one on rank 0 with a run directory, else a null one."""
    if run_dir and enabled:
        return EventWriter(run_dir)
    return NullEventWriter()
