"""metrics.jsonl: one class per event, and the writers that append them.

Every event has `event` (the class's NAME) and `t` (epoch seconds). Writing is strict (`make_event`
refuses a field that is not here); reading (`parse_event`) keeps a field a newer minor added, with a note.
"""

import contextlib
import dataclasses
import errno
import json
import os
import time
from typing import Any, Dict, List, Optional, Tuple

from .outcome import Status
from .record import METRICS_JSONL
from .validate import Reading, SchemaError, fields_of, values


@dataclasses.dataclass
class Event:
    """What every event has; a subclass that adds no field marks a moment of the run (and needs no decorator)."""

    t: float  # epoch seconds


class RuntimeStartEvent(Event):
    NAME = "runtime_start"  # the first process inside the runtime began (torchrun's agent, from /proc)


class StartEvent(Event):
    NAME = "start"  # the trainer process began (inside the runtime): minus launch.t0 = start-up overhead


class ImportsDoneEvent(Event):
    NAME = "imports_done"  # the trainer's Python imports (torch among them) are done


@dataclasses.dataclass
class DistInitEvent(Event):
    NAME = "dist_init"
    world_size: int
    backend: Optional[str]
    ncpu: Optional[int] = None  # StarPU's CPU and CUDA workers (nntile)
    ncuda: Optional[int] = None


@dataclasses.dataclass
class PreflightEvent(Event):
    NAME = "preflight"  # the communication pre-flight ended (bench/nanochat/preflight.py)
    world_size: int
    busbw_gbps: Dict[str, float]
    bytes: int


@dataclasses.dataclass
class ModelReadyEvent(Event):
    NAME = "model_ready"
    num_params: int
    flops_per_token: float


class DataReadyEvent(Event):
    NAME = "data_ready"  # loaders built and the first batch in hand


class FirstStepEvent(Event):
    NAME = "first_step"


@dataclasses.dataclass
class SteadyEvent(Event):
    NAME = "steady"  # the last warm-up step (bench.metrics.WARMUP_STEPS) ended: steady state from here
    step: int


@dataclasses.dataclass
class StepEvent(Event):
    NAME = "step"
    step: int
    loss: float
    lrm: float
    dt_ms: float
    tok_per_sec: float
    mfu: Optional[float]
    total_time_s: float
    grad_norm: Optional[float] = None
    train_loss: Optional[float] = None  # the step's raw loss (nntile; `loss` is the debiased EMA)
    cpu_s: Optional[float] = None  # CPU seconds of the step's process (nntile)
    epoch: Optional[int] = None
    warmup_epoch: Optional[bool] = None  # in a --nepochs-warmup epoch: outside the seed's timed figure
    fwd_bwd_ms: Optional[float] = None  # the step's split (bench/nanochat/steptimer.py; --breakdown)
    data_ms: Optional[float] = None
    comm_ms: Optional[float] = None
    optim_ms: Optional[float] = None
    other_ms: Optional[float] = None


@dataclasses.dataclass
class ValEvent(Event):
    NAME = "val"
    step: int
    val_bpb: float


@dataclasses.dataclass
class ScoreEvent(Event):
    NAME = "score"  # an evaluation's figure: a task's accuracy, a split's bpb, CORE, ChatCORE
    name: str
    value: float
    centered: Optional[float] = None  # (accuracy - random baseline) / (1 - baseline), where the task has one
    problems: Optional[int] = None  # examples scored (base_loss: sequences), over all ranks
    seconds: Optional[float] = None  # wall time of this score's evaluation
    # tokens over all ranks: generated for it (chat_eval's generative tasks) or run forward (base_loss's split);
    # tokens/s = tokens / seconds
    tokens: Optional[int] = None


@dataclasses.dataclass
class EndEvent(Event):
    NAME = "end"
    peak_mem_mib: float
    total_training_time_s: float
    min_val_bpb: Optional[float]
    cpu_time_s: Optional[float] = None


@dataclasses.dataclass
class ErrorEvent(Event):
    NAME = "error"
    kind: Status
    message: str
    rank: Optional[int] = None


EVENT_TYPES = {cls.NAME: cls for cls in Event.__subclasses__()}  # in this file's order: a run's
# The fields an event of each type must carry besides `event` and `t`.
EVENTS: Dict[str, Tuple[str, ...]] = {
    name: tuple(f.name for f in dataclasses.fields(cls) if f.name != "t" and f.default is dataclasses.MISSING)
    for name, cls in EVENT_TYPES.items()}


def make_event(event: str, t: Optional[float] = None, **fields: Any) -> Dict[str, Any]:
    """One event as the dict written to metrics.jsonl, validated; SchemaError for a field not in the contract."""
    cls = EVENT_TYPES.get(event)
    if cls is None:
        raise SchemaError(f"unknown event {event!r}; known: {', '.join(EVENT_TYPES)}")
    record = {"t": time.time() if t is None else t, **fields}
    return {"event": event, **_event_values(cls, record)}


def _event_values(cls, record: Dict[str, Any], reading: "Reading | None" = None) -> Dict[str, Any]:
    """The checked fields of an event; optional ones left unset (None) stay out of the line."""
    checked = values(cls, record, (METRICS_JSONL, f"{cls.NAME} event"), reading)
    required = {name for name, _, req, _ in fields_of(cls) if req}
    return {k: v for k, v in checked.items() if v is not None or k in required}


def parse_event(value: Any, notes: Optional[List[str]] = None) -> Dict[str, Any]:
    """A decoded metrics.jsonl line checked against its event class (SchemaError when it is not one).
    A field the class does not have (a newer minor's) stays in the event, and is said in `notes`."""
    if not isinstance(value, dict) or value.get("event") not in EVENT_TYPES:
        raise SchemaError(f"{METRICS_JSONL}: not an event of the contract: {str(value)[:80]}")
    event = value["event"]
    fields = {k: v for k, v in value.items() if k != "event"}
    reading = Reading()
    out = {"event": event, **_event_values(EVENT_TYPES[event], fields, reading)}
    if reading.unknown:
        out.update({path[-1]: v for path, v in reading.unknown.items()})
        if notes is not None and reading.notes[0] not in notes:
            notes.append(reading.notes[0])
    return out


class EventWriter:
    """Appends events to metrics.jsonl, one line each, written at once so a crash loses nothing. A write
    that fails (a full disk) is cut back to the last whole line where no other process appended after it;
    a half line left where one did starts no joined line: the next event begins on a line of its own."""

    def __init__(self, run_dir: "str | os.PathLike"):
        os.makedirs(os.fspath(run_dir), exist_ok=True)
        self.path = os.path.join(os.fspath(run_dir), METRICS_JSONL)
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)

    def emit(self, event: str, **fields: Any) -> None:
        line = (json.dumps(make_event(event, **fields)) + "\n").encode()
        size = os.fstat(self._fd).st_size
        if size and os.pread(self._fd, 1, size - 1) != b"\n":
            # another writer's half line (its disk filled, and this rank's line came before it could cut it
            # back): joined to it, this event would be lost to every reader; a lock is no answer where the
            # parallel file system ignores it
            line = b"\n" + line
        written = os.write(self._fd, line)  # a write that raises wrote nothing
        if written != len(line):
            # Other ranks append to this file too (their error events): only a half line that is still the file's
            # last is cut, from where this write put it (O_APPEND: at the end as it was then, not as read before).
            with contextlib.suppress(OSError):
                end = os.lseek(self._fd, 0, os.SEEK_CUR)
                if os.fstat(self._fd).st_size == end:
                    os.ftruncate(self._fd, end - written)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self.path)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class NullEventWriter:
    """Stands in for EventWriter when NANOCHAT_BENCH_RUN_DIR is unset (nanochat's DummyWandb idea)."""

    def emit(self, event: str, **fields: Any) -> None:
        make_event(event, **fields)  # the same contract check, so a bad field fails without a run dir too

    def close(self) -> None:
        pass


def event_writer(run_dir: Optional[str], enabled: bool = True):
    """The writer for this process: a real one on rank 0 with a run directory, else a null one."""
    return EventWriter(run_dir) if run_dir and enabled else NullEventWriter()
