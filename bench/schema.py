"""The run-directory contract, defined once: run.json and metrics.jsonl as typed dataclasses.

    <results_root>/<sweep_id>/<run_id>/run.json       RunManifest, rewritten atomically (temp file + rename)
    <results_root>/<sweep_id>/<run_id>/metrics.jsonl  one event a line (the *Event classes), flushed as written
    <results_root>/<sweep_id>/<run_id>/train.log      the human output, nanochat's step line (bench/logline.py)

Every writer (submit, the batch script, the local launcher, the trainer) goes through `update_run_json`
and `EventWriter`, which build these classes and so refuse a field that is not in the contract; the
reader (bench/analysis/rundir.py) validates with `RunManifest.from_dict` / `parse_event` and reports a
violation as the run's skip reason. `python -m bench.schema` prints the JSON Schema generated from the
classes; the checked-in copies (bench/schemas/*.schema.json) serve other tools (ReFrame, jq).

Standard library only, and Python 3.8 syntax and typing (typing.Optional, no `X | Y`): the batch
script imports this file with the cluster's own python3, outside any container, from a copy written
beside the jobs at submit time (bench/launch/jobrecord.py).
"""

import dataclasses
import errno
import functools
import json
import os
import sys
import tempfile
import time
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

try:
    from typing import Literal, get_args, get_origin
except ImportError:  # pragma: no cover - Python < 3.8 cannot run the contract
    raise SystemExit("nanochat-bench's run records need Python >= 3.8 (this is %s)" % sys.version.split()[0])

SCHEMA_VERSION = 2
RUN_JSON = "run.json"
METRICS_JSONL = "metrics.jsonl"
TRAIN_LOG = "train.log"

# The workloads this project trains (bench/workloads/); part of the key under which runs are compared.
WORKLOAD = "nanochat-base"
NNTILE_WORKLOAD = "nntile-gpt2"

# Final statuses of a run; "pending" from submission until the trainer starts, "running" while it goes on.
FINAL_STATUSES = ("ok", "failed", "timeout", "oom", "nccl_timeout", "hung", "diverged", "no_data", "cancelled")
STATUSES = FINAL_STATUSES + ("pending", "running")
Status = Literal[STATUSES]  # a tuple subscript is the list of values

# Environment variables of the contract (README, "Contracts").
ENV_BASE_DIR = "NANOCHAT_BASE_DIR"
ENV_VAL_FILES_K = "NANOCHAT_VAL_FILES_K"
ENV_FORCE_FLASH_SDPA = "NANOCHAT_FORCE_FLASH_SDPA"
ENV_RUN_DIR = "NANOCHAT_BENCH_RUN_DIR"
ENV_T0 = "NANOCHAT_BENCH_T0"

# run.json's `slurm` section from the job's environment: the one map of Slurm facts to SLURM_* names.
SLURM_VARS = {
    "job_id": "SLURM_JOB_ID",
    "job_name": "SLURM_JOB_NAME",
    "nodelist": "SLURM_JOB_NODELIST",
    "num_nodes": "SLURM_JOB_NUM_NODES",
    "partition": "SLURM_JOB_PARTITION",
    "account": "SLURM_JOB_ACCOUNT",
    "cluster": "SLURM_CLUSTER_NAME",
}


class SchemaError(ValueError):
    """A value that the contract does not allow; the message starts with where it is (`run.json: slurm.job_id`)."""


def _f(default: Any = None, doc: str = ""):
    """A field with a default and its one-line meaning (the JSON Schema's description)."""
    if isinstance(default, (dict, list)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata={"doc": doc})
    return dataclasses.field(default=default, metadata={"doc": doc})


# ---------------------------------------------------------------------------------------------------
# run.json: the sections, then the manifest


@dataclasses.dataclass
class Image:
    reference: Optional[str] = _f(None, "image as given to the runtime (registry reference or file)")
    digest: Optional[str] = _f(None, "content digest, sha256:<hex>, when known")
    id: Optional[str] = _f(None, "the engine's image id (podman)")
    build: Optional[Dict[str, str]] = _f(None, "facts baked in at build time (reference, base image, git revision)")


@dataclasses.dataclass
class Slurm:
    job_id: Optional[str] = _f(None, "SLURM_JOB_ID")
    job_name: Optional[str] = _f(None, "SLURM_JOB_NAME")
    nodelist: Optional[str] = _f(None, "SLURM_JOB_NODELIST")
    num_nodes: Optional[str] = _f(None, "SLURM_JOB_NUM_NODES")
    partition: Optional[str] = _f(None, "SLURM_JOB_PARTITION")
    account: Optional[str] = _f(None, "SLURM_JOB_ACCOUNT")
    cluster: Optional[str] = _f(None, "SLURM_CLUSTER_NAME")


@dataclasses.dataclass
class Software:
    python: Optional[str] = _f(None, "Python version of the trainer")
    hostname: Optional[str] = _f(None, "host of rank 0")
    torch: Optional[str] = _f(None, "torch version")
    cuda: Optional[str] = _f(None, "CUDA version torch was built with")
    nccl: Optional[str] = _f(None, "NCCL version torch uses")
    driver: Optional[str] = _f(None, "NVIDIA driver version")
    gpu_name: Optional[str] = _f(None, "GPU name as torch reports it")
    gpu_count: Optional[int] = _f(None, "GPUs visible to rank 0")
    nntile: Optional[str] = _f(None, "torch-nntile version (nntile workload)")
    starpu: Optional[str] = _f(None, "StarPU version (nntile workload)")
    transformers: Optional[str] = _f(None, "transformers version (nntile workload)")
    nntile_built_with_cuda: Optional[bool] = _f(None, "whether the torch-nntile wheel was built with CUDA")


@dataclasses.dataclass
class Launch:
    """What the launcher did; `t0` is NANOCHAT_BENCH_T0, the time the start-up overhead is measured from."""

    kind: Optional[Literal["local", "slurm"]] = _f(None, "local (nanochat-bench train/smoke) or slurm (a batch job)")
    t0: Optional[float] = _f(None, "launch time, epoch seconds, taken just before srun/torchrun")
    command: Optional[List[str]] = _f(None, "the command the launcher started (local runs)")
    script: Optional[str] = _f(None, "the batch script (Slurm runs)")
    rendered_at: Optional[float] = _f(None, "when the batch script was rendered")
    started_at: Optional[float] = _f(None, "when the batch script began this run")
    finished_at: Optional[float] = _f(None, "when the launcher saw the run end")
    exit_code: Optional[int] = _f(None, "exit status of srun or torchrun")
    runtime_version: Optional[str] = _f(None, "first line of the runtime's --version")
    wall_time_s: Optional[float] = _f(None, "wall time from launch to the end of the command (local runs)")
    cpu_time_s: Optional[float] = _f(None, "user + system seconds of every process the command started (local runs)")


@dataclasses.dataclass
class Result:
    peak_mem_mib: Optional[float] = _f(None, "peak device memory allocated, MiB (0 on CPU: not measured)")
    total_training_time_s: Optional[float] = _f(None, "training time after the warm-up steps, s")
    min_val_bpb: Optional[float] = _f(None, "lowest validation bits per byte")
    final_val_bpb: Optional[float] = _f(None, "validation bits per byte at the end")
    final_mfu: Optional[float] = _f(None, "MFU of the last step, %")
    final_loss: Optional[float] = _f(None, "debiased train loss of the last step")
    cpu_time_s: Optional[float] = _f(None, "CPU seconds of the training process")


@dataclasses.dataclass
class Vocabulary:
    vocab_size: Optional[int] = _f(None, "tokens the model's embedding covers")
    source: Optional[str] = _f(None, "the tokenizer, or the .bin files whose tokenizer it is")
    bpb: Optional[bool] = _f(None, "whether bytes per token are known, so validation bpb can be computed")


@dataclasses.dataclass
class NNTileRun:
    """What the nntile workload saw (bench/workloads/nntile/runner.py); empty for other workloads."""

    starpu: Optional[Dict[str, Any]] = _f(None, "StarPU workers: ncpu, ncuda, restrict, home")
    dataset: Optional[Dict[str, Any]] = _f(None, "the train.bin: path, tokens, batches_per_epoch, tokenizer")
    tiling: Optional[Dict[str, int]] = _f(None, "axis groups tiled of all in a step's graph")
    passes: Optional[Dict[str, Dict[str, Any]]] = _f(None, "the seed's timed forward / forward+backward passes")
    training: Optional[Dict[str, Any]] = _f(None, "the seed's timed-epoch figures: tokens, time_s, cpu_s, tok/s")


@dataclasses.dataclass
class Network:
    """The path the run's collectives took, from rank 0's NCCL INFO lines (bench/nccl_log.py), or gloo."""

    backend: Optional[str] = _f(None, "nccl or gloo")
    nccl_version: Optional[str] = _f(None, "NCCL version NCCL printed")
    net: Optional[str] = _f(None, "the network NCCL chose between nodes: Socket, IB, AWS Libfabric, ...")
    net_provider: Optional[str] = _f(None, "libfabric provider of the OFI plugin (cxi on Slingshot)")
    net_plugin: Optional[str] = _f(None, "what NCCL said of its network plugin")
    channels: Optional[int] = _f(None, "collective channels of the communicator")
    transports: Optional[Dict[str, int]] = _f(None, "connections by transport: P2P, SHM, NET/Socket, NET/IB, ...")
    evidence: Optional[List[str]] = _f(None, "the NCCL lines these facts come from")


@dataclasses.dataclass
class Preflight:
    """Bus bandwidth of the training collectives before the first step (bench/nanochat/preflight.py)."""

    backend: Optional[str] = _f(None, "nccl or gloo")
    world_size: Optional[int] = _f(None, "ranks")
    bytes: Optional[int] = _f(None, "largest buffer measured")
    busbw_gbps: Optional[Dict[str, float]] = _f(None, "busbw at the largest buffer, per collective, GB/s")
    records: Optional[List[Dict[str, Any]]] = _f(None, "collective, bytes, time_us, algbw_gbps, busbw_gbps")


@dataclasses.dataclass
class Breakdown:
    """Where the run's time went (bench/breakdown.py, bench/nanochat/steptimer.py)."""

    phases_s: Optional[Dict[str, float]] = _f(None, "seconds from one milestone to the next, launch.t0 to end")
    step_ms: Optional[Dict[str, float]] = _f(None, "steady-state medians: step, fwd_bwd, comm, optim, data, other")
    ranks: Optional[List[Dict[str, Any]]] = _f(None, "per rank: rank, host, steady step_ms, comm_ms, data_ms")
    slowest_rank: Optional[int] = _f(None, "the rank with the longest median step")
    slowest_host: Optional[str] = _f(None, "its host")


@dataclasses.dataclass
class Attempt:
    job_id: Optional[str] = _f(None, "Slurm job of the earlier attempt")
    status: Optional[Status] = _f(None, "how it ended")
    message: Optional[str] = _f(None, "why")


@dataclasses.dataclass
class RunManifest:
    """run.json. Sections (image, slurm, software, launch, result) merge field by field on update."""

    schema_version: int = _f(SCHEMA_VERSION, "version of this contract")
    run_id: Optional[str] = _f(None, "name of the run directory")
    sweep_id: Optional[str] = _f(None, "name of the directory above it")
    workload: Optional[str] = _f(None, "what is trained (bench.schema.WORKLOAD)")
    status: Status = _f("pending", "pending, running, or how the run ended")
    message: Optional[str] = _f(None, "why it ended as it did (None when ok)")
    runtime: Optional[str] = _f(None, "bare, ce, pyxis, apptainer, podman, podman-hpc, sarus, sarus-suite")
    repeat: Optional[int] = _f(None, "repeat number of a sweep point")
    nodes: Optional[int] = _f(None, "nodes of the run")
    gpus_per_node: Optional[int] = _f(None, "GPUs (ranks) per node; 0 on a CPU run")
    world_size: Optional[int] = _f(None, "ranks")
    grad_accum: Optional[int] = _f(None, "micro-steps per optimizer step")
    scaling: Optional[Literal["weak", "strong"]] = _f(
        None, "weak: device batch x sequence per rank fixed, total batch grows with ranks; strong: total fixed")
    val_files_k: Optional[int] = _f(None, "NANOCHAT_VAL_FILES_K the planner chose for this point's ranks")
    ofi_hook: Optional[Literal["default", "on", "off"]] = _f(
        None, "CE's aws_ofi_nccl hook as launched: the site's default, forced on, or off (container engines only)")
    config: Dict[str, Any] = _f({}, "the trainer's settings, asdict(TrainConfig)")
    num_params: Optional[int] = _f(None, "model parameters")
    flops_per_token: Optional[float] = _f(None, "training FLOPs per token (nanochat's estimate)")
    num_iterations: Optional[int] = _f(None, "optimizer steps the run was set to take")
    peak_flops_per_gpu: Optional[float] = _f(None, "dense bf16 peak used for MFU (bench.metrics)")
    git_revision: Optional[str] = _f(None, "the project's git describe")
    image: Image = _f(None, "")
    slurm: Slurm = _f(None, "")
    software: Software = _f(None, "")
    launch: Launch = _f(None, "")
    result: Result = _f(None, "")
    vocabulary: Vocabulary = _f(None, "")
    nntile: NNTileRun = _f(None, "")
    network: Network = _f(None, "")
    preflight: Preflight = _f(None, "")
    breakdown: Breakdown = _f(None, "")
    capacity: Optional[Dict[str, Any]] = _f(None, "a capacity probe's record: the probe, its outcome and figures "
                                                  "(bench/capacity/probe.py)")
    network_env: Dict[str, str] = _f({}, "NCCL_*, FI_*, ... in effect for rank 0")
    attempts: List[Attempt] = _f([], "earlier attempts of this run (resubmissions)")
    started_at: Optional[float] = _f(None, "when the trainer started")
    finished_at: Optional[float] = _f(None, "when the final status was recorded")
    updated_at: Optional[float] = _f(None, "last rewrite of this file")

    def __post_init__(self):
        for f in dataclasses.fields(self):  # sections default to empty ones, not None
            if dataclasses.is_dataclass(f.type) and getattr(self, f.name) is None:
                setattr(self, f.name, f.type())

    @classmethod
    def from_dict(cls, data: Any, where: str = RUN_JSON) -> "RunManifest":
        """Validate and build; SchemaError names the first field that is not as the contract says."""
        if isinstance(data, dict) and data.get("schema_version") != SCHEMA_VERSION:
            raise SchemaError(f"{where}: schema_version {data.get('schema_version')!r} is not {SCHEMA_VERSION}, "
                              f"the version this reader knows")
        return _build(cls, data, (where,))

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    def merged(self, fields: Dict[str, Any]) -> "RunManifest":
        """A copy with `fields` applied: top-level values replace, sections merge their non-None values."""
        data = self.to_dict()
        for key, value in fields.items():
            if key not in data:
                raise SchemaError(f"{RUN_JSON}: {key!r} is not a field of the run contract (bench/schema.py)")
            if dataclasses.is_dataclass(value):
                value = dataclasses.asdict(value)
            if _is_section(key) and value is None:
                continue  # "nothing known" never blanks a section
            if _is_section(key) and isinstance(value, dict):
                data[key] = {**data[key], **{k: v for k, v in value.items() if v is not None}}
            else:
                data[key] = value
        return RunManifest.from_dict(data)


def _is_section(name: str) -> bool:
    return dataclasses.is_dataclass(_FIELD_TYPES[name])


# ---------------------------------------------------------------------------------------------------
# metrics.jsonl: one class per event; every event has `event` (the class's NAME) and `t` (epoch seconds)


@dataclasses.dataclass
class RuntimeStartEvent:
    NAME = "runtime_start"  # the first process inside the runtime began (torchrun's agent, from /proc)
    t: float


@dataclasses.dataclass
class StartEvent:
    NAME = "start"  # the trainer process began (inside the runtime): minus launch.t0 = start-up overhead
    t: float


@dataclasses.dataclass
class ImportsDoneEvent:
    NAME = "imports_done"  # the trainer's Python imports (torch among them) are done
    t: float


@dataclasses.dataclass
class DistInitEvent:
    NAME = "dist_init"
    t: float
    world_size: int
    backend: Optional[str]
    ncpu: Optional[int] = None  # StarPU's CPU and CUDA workers (nntile)
    ncuda: Optional[int] = None


@dataclasses.dataclass
class ModelReadyEvent:
    NAME = "model_ready"
    t: float
    num_params: int
    flops_per_token: float


@dataclasses.dataclass
class PreflightEvent:
    NAME = "preflight"  # the communication pre-flight ended (bench/nanochat/preflight.py)
    t: float
    world_size: int
    busbw_gbps: Dict[str, float]
    bytes: int


@dataclasses.dataclass
class DataReadyEvent:
    NAME = "data_ready"  # loaders built and the first batch in hand
    t: float


@dataclasses.dataclass
class SteadyEvent:
    NAME = "steady"  # the last warm-up step (bench.metrics.WARMUP_STEPS) ended: steady state from here
    t: float
    step: int


@dataclasses.dataclass
class FirstStepEvent:
    NAME = "first_step"
    t: float


@dataclasses.dataclass
class StepEvent:
    NAME = "step"
    t: float
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
class ValEvent:
    NAME = "val"
    t: float
    step: int
    val_bpb: float


@dataclasses.dataclass
class EndEvent:
    NAME = "end"
    t: float
    peak_mem_mib: float
    total_training_time_s: float
    min_val_bpb: Optional[float]
    cpu_time_s: Optional[float] = None


@dataclasses.dataclass
class ErrorEvent:
    NAME = "error"
    t: float
    kind: Status
    message: str
    rank: Optional[int] = None


EVENT_TYPES = {cls.NAME: cls for cls in (RuntimeStartEvent, StartEvent, ImportsDoneEvent, DistInitEvent,
                                         PreflightEvent, ModelReadyEvent, DataReadyEvent, FirstStepEvent,
                                         SteadyEvent, StepEvent, ValEvent, EndEvent, ErrorEvent)}
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


def _event_values(cls, record: Dict[str, Any]) -> Dict[str, Any]:
    """The checked fields of an event; optional ones left unset (None) stay out of the line."""
    values = _values(cls, record, (METRICS_JSONL, f"{cls.NAME} event"))
    required = {name for name, _, req, _ in _fields(cls) if req}
    return {k: v for k, v in values.items() if v is not None or k in required}


def parse_event(value: Any) -> Dict[str, Any]:
    """A decoded metrics.jsonl line checked against its event class (SchemaError when it is not one)."""
    if not isinstance(value, dict) or value.get("event") not in EVENT_TYPES:
        raise SchemaError(f"{METRICS_JSONL}: not an event of the contract: {str(value)[:80]}")
    event = value["event"]
    fields = dict(value)
    del fields["event"]
    return {"event": event, **_event_values(EVENT_TYPES[event], fields)}


# ---------------------------------------------------------------------------------------------------
# Validation: a value against its annotation (str, int, float, bool, Optional, Literal, List, Dict, a
# dataclass). A reader checks every event of thousands of runs, so the per-class field lists are made
# once and a field's place in the file is spelled out only when it is wrong.

_NONE = type(None)


def _where(path: Tuple[str, ...]) -> str:
    """("run.json", "slurm", "job_id") -> "run.json: slurm.job_id"."""
    return path[0] + (": " + ".".join(path[1:]) if len(path) > 1 else "")


def _fail(path: Tuple[str, ...], message: str) -> "SchemaError":
    return SchemaError(f"{_where(path)}: {message}")


@functools.lru_cache(maxsize=None)
def _fields(cls) -> Tuple[Tuple[str, Any, bool, Any], ...]:
    """(name, type, required, default) of each field of a dataclass."""
    out = []
    for f in dataclasses.fields(cls):
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        out.append((f.name, f.type, required, None if f.default is dataclasses.MISSING else f.default))
    return tuple(out)


@functools.lru_cache(maxsize=None)
def _shape(tp: Any) -> Tuple[Any, Tuple[Any, ...]]:
    return get_origin(tp), get_args(tp)


def _values(cls, data: Any, path: Tuple[str, ...]) -> Dict[str, Any]:
    """The fields of the dataclass `cls` from `data`, each checked against its annotation; an optional
    field left out gets its plain default (a default factory is left to the class)."""
    if not isinstance(data, dict):
        raise _fail(path, f"expected an object, got {type(data).__name__}")
    fields = _fields(cls)
    if len(data) > len(fields) or not data.keys() <= {f[0] for f in fields}:
        unknown = sorted(set(data) - {f[0] for f in fields})
        raise _fail(path, f"unknown field(s) {', '.join(map(repr, unknown))}")
    values = {}
    for name, tp, required, default in fields:
        if name in data:
            values[name] = _check(data[name], tp, path, name)
        elif required:
            raise _fail(path, f"missing field {name!r}")
        else:
            values[name] = default
    return values


def _build(cls, data: Any, path: Tuple[str, ...]):
    """An instance of the dataclass `cls` from `data`, each field checked against its annotation."""
    values = _values(cls, data, path)
    return cls(**{k: v for k, v in values.items() if k in data})


def _check(value: Any, tp: Any, path: Tuple[str, ...], name: str) -> Any:
    """`value` of the field `name` (at `path`) as its annotation `tp` allows, or SchemaError."""
    if tp is float:
        if type(value) is float:
            return value
        if type(value) is int:
            return float(value)
        raise _fail(path + (name,), f"expected a number, got {value!r}")
    if tp is int:
        if type(value) is int:
            return value
        raise _fail(path + (name,), f"expected an integer, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return str(value)  # a subclass (torch's TorchVersion) is written as the plain string
        raise _fail(path + (name,), f"expected str, got {type(value).__name__} {value!r}")
    if tp is bool:
        if type(value) is bool:
            return value
        raise _fail(path + (name,), f"expected bool, got {type(value).__name__} {value!r}")
    if tp is Any:
        return value
    origin, args = _shape(tp)
    if origin is Union:  # Optional[X]: None, or an X
        return None if value is None else _check(value, args[0], path, name)
    if origin is Literal:
        if value not in args:
            raise _fail(path + (name,), f"{value!r} is not one of {', '.join(map(repr, args))}")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise _fail(path + (name,), f"expected a list, got {type(value).__name__}")
        return [_check(v, args[0], path, f"{name}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise _fail(path + (name,), f"expected an object with string keys, got {type(value).__name__}")
        return {k: _check(v, args[1], path + (name,), k) for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, path + (name,))
    raise TypeError(f"bench.schema cannot check the annotation {tp!r}")  # a bug in this file, not in the data


_FIELD_TYPES = {f.name: f.type for f in dataclasses.fields(RunManifest)}


# ---------------------------------------------------------------------------------------------------
# JSON Schema (draft 2020-12) generated from the classes: one source of truth, checked in for other tools

def _json_type(tp: Any) -> Dict[str, Any]:
    origin, args = get_origin(tp), get_args(tp)
    if tp is Any:
        return {}
    if origin is Union:
        inner = _json_type(next(a for a in args if a is not _NONE))
        if "$ref" in inner or "enum" in inner:
            return {"anyOf": [inner, {"type": "null"}]}
        return {**inner, "type": [inner["type"], "null"]}
    if origin is Literal:
        return {"enum": list(args)}
    if origin is list:
        return {"type": "array", "items": _json_type(args[0])}
    if origin is dict:
        return {"type": "object", "additionalProperties": _json_type(args[1])}
    if dataclasses.is_dataclass(tp):
        return {"$ref": f"#/$defs/{tp.__name__}"}
    return {"type": {str: "string", int: "integer", float: "number", bool: "boolean"}[tp]}


def _object_schema(cls, extra: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    props, required = dict(extra or {}), list(extra or {})
    for f in dataclasses.fields(cls):
        prop = _json_type(f.type)
        if f.metadata.get("doc"):
            prop["description"] = f.metadata["doc"]
        props[f.name] = prop
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.append(f.name)
    out = {"type": "object", "properties": props, "additionalProperties": False}
    if cls.__doc__ and not cls.__doc__.startswith(cls.__name__ + "("):
        out["description"] = " ".join(cls.__doc__.split())
    if required:
        out["required"] = required
    return out


def json_schemas() -> Dict[str, Dict[str, Any]]:
    """{"run.schema.json": ..., "events.schema.json": ...}: the contract for tools outside Python."""
    sections = [tp for tp in _FIELD_TYPES.values() if dataclasses.is_dataclass(tp)]
    sections += [get_args(_FIELD_TYPES["attempts"])[0]]
    run = {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "nanochat-bench run.json",
           **_object_schema(RunManifest), "$defs": {c.__name__: _object_schema(c) for c in sections}}
    run["properties"]["schema_version"]["const"] = SCHEMA_VERSION
    events = {"$schema": "https://json-schema.org/draft/2020-12/schema",
              "title": "nanochat-bench metrics.jsonl (one event a line)",
              "oneOf": [_object_schema(cls, {"event": {"const": name}}) for name, cls in EVENT_TYPES.items()]}
    return {"run.schema.json": run, "events.schema.json": events}


# ---------------------------------------------------------------------------------------------------
# Files: atomic writes, run.json updates, closing a run the trainer did not close, events


@contextmanager
def atomic_target(path: "str | os.PathLike") -> Iterator[str]:
    """A fresh temp file beside `path` to write into; renamed onto `path` when the block ends cleanly,
    removed when it raises. A reader sees the old file or the new one, never half of one, and writers
    that race on one path (two runs sharing a checkpoint tag) each get their own temp file."""
    path = os.fspath(path)
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; the result is as readable as any file written
        os.close(fd)
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_text_atomic(path: "str | os.PathLike", text: str, mode: Optional[int] = None) -> None:
    """Write text so that a reader sees the old file or the new one, never half of one."""
    with atomic_target(path) as tmp:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)


def write_json_atomic(path: "str | os.PathLike", data: Dict[str, Any]) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def read_run_json(run_dir: "str | os.PathLike") -> Dict[str, Any]:
    """The manifest of a run directory as plain data, or {} when there is none yet."""
    path = os.path.join(os.fspath(run_dir), RUN_JSON)
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return json.load(f)


def load_manifest(run_dir: "str | os.PathLike") -> RunManifest:
    """run.json as a RunManifest (a new one, named after the directories, when there is none)."""
    data = read_run_json(run_dir)
    if not data:
        path = os.path.abspath(os.fspath(run_dir))
        return RunManifest(run_id=os.path.basename(path), sweep_id=os.path.basename(os.path.dirname(path)))
    return RunManifest.from_dict(data, where=os.path.join(os.fspath(run_dir), RUN_JSON))


def write_manifest(run_dir: "str | os.PathLike", manifest: RunManifest) -> RunManifest:
    """Replace run.json with `manifest`, atomically."""
    manifest.updated_at = time.time()
    write_json_atomic(os.path.join(os.fspath(run_dir), RUN_JSON), manifest.to_dict())
    return manifest


def update_run_json(run_dir: "str | os.PathLike", **fields: Any) -> RunManifest:
    """Merge fields into run.json (RunManifest.merged) and rewrite it atomically; the new manifest."""
    return write_manifest(run_dir, load_manifest(run_dir).merged(fields))


def slurm_facts(environ: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The Slurm section from SLURM_* variables ({} outside a job)."""
    environ = os.environ if environ is None else environ
    return {key: environ[var] for key, var in SLURM_VARS.items() if var in environ}


def last_log_line(path: "str | os.PathLike", limit: int = 300) -> str:
    """The last non-empty line of a log, shortened: usually the error that ended the run."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 8192))
            lines = [ln.strip() for ln in f.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1][:limit] if lines else ""


RESERVE = ".reserve"  # space a run holds back for its last words on a disk that fills up
RESERVE_BYTES = 64 * 1024


def reserve_space(run_dir: "str | os.PathLike") -> None:
    """Hold back RESERVE_BYTES in the run directory (written, not sparse), for release_space to give
    back when the disk is full, so the final status and error event can still be written."""
    path = os.path.join(os.fspath(run_dir), RESERVE)
    with open(path, "wb") as f:
        f.write(b"\0" * RESERVE_BYTES)
        f.flush()
        os.fsync(f.fileno())


def release_space(run_dir: "str | os.PathLike") -> bool:
    """Give the reserved space back; whether there was any."""
    try:
        os.unlink(os.path.join(os.fspath(run_dir), RESERVE))
        return True
    except OSError:
        return False


def close_unfinished(run_dir: "str | os.PathLike", exit_code: int, launcher: str) -> RunManifest:
    """The launcher's last word on a run (local and Slurm alike): a run whose trainer never started, or
    died before recording a final status, is marked failed with the exit code and its log's last line,
    so no run directory stays pending or running for ever. A final status already recorded is kept."""
    release_space(run_dir)
    manifest = load_manifest(run_dir)
    if manifest.status in FINAL_STATUSES:
        return manifest
    what = "never started" if manifest.status == "pending" else "ended without recording a final status"
    tail = last_log_line(os.path.join(os.fspath(run_dir), TRAIN_LOG))
    message = f"the trainer {what} ({launcher} exit code {exit_code})" + (f": {tail}" if tail else "")
    return update_run_json(run_dir, status="failed", message=message, finished_at=time.time())


class EventWriter:
    """Appends events to metrics.jsonl, one line each, written at once so a crash loses nothing. A write
    that fails (a full disk) is cut back to the last whole line, so the file always parses."""

    def __init__(self, run_dir: "str | os.PathLike"):
        os.makedirs(os.fspath(run_dir), exist_ok=True)
        self.path = os.path.join(os.fspath(run_dir), METRICS_JSONL)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)

    def emit(self, event: str, **fields: Any) -> None:
        line = (json.dumps(make_event(event, **fields)) + "\n").encode()
        end = os.lseek(self._fd, 0, os.SEEK_END)
        try:
            written = os.write(self._fd, line)
            if written != len(line):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self.path)
        except OSError:
            try:
                os.ftruncate(self._fd, end)
            except OSError:
                pass
            raise

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
    if run_dir and enabled:
        return EventWriter(run_dir)
    return NullEventWriter()


def main(argv: Optional[List[str]] = None) -> int:
    """`python -m bench.schema [DIR]`: write the JSON Schemas into DIR, or print them."""
    argv = sys.argv[1:] if argv is None else argv
    schemas = json_schemas()
    if not argv:
        print(json.dumps(schemas, indent=2))
        return 0
    for name, schema in schemas.items():
        write_text_atomic(os.path.join(argv[0], name), json.dumps(schema, indent=2) + "\n")
        print(os.path.join(argv[0], name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
