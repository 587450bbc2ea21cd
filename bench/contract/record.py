"""run.json: its sections and the manifest, as dataclasses, plus the contract's names (files, workloads,
environment variables, Slurm variables).

    <results_root>/<sweep_id>/<run_id>/run.json       RunManifest, rewritten atomically (files.py)
    <results_root>/<sweep_id>/<run_id>/metrics.jsonl  one event a line (events.py), flushed as written
    <results_root>/<sweep_id>/<run_id>/train.log      the human output, nanochat's step line (bench/logline.py)

`RunManifest.from_dict` reads every run.json of a known major (versions.py): an unknown field is kept
and noted (`notes`), not a reason to drop the run. `merged` is the writers' path and stays strict: a
writer cannot write a field that is not here.
"""

import dataclasses
from typing import Any, Dict, List, Optional, Tuple

from .outcome import Evidence, Status
from .validate import Literal, Reading, SchemaError, build, check, field
from .versions import RETIRED, SCHEMA_VERSION, migrate, newer

RUN_JSON = "run.json"
METRICS_JSONL = "metrics.jsonl"
TRAIN_LOG = "train.log"

# The workloads this project trains (bench/workloads/); part of the key under which runs are compared.
WORKLOAD = "nanochat-base"
NNTILE_WORKLOAD = "nntile-gpt2"

# Environment variables of the contract (README, "Contracts").
ENV_BASE_DIR = "NANOCHAT_BASE_DIR"
ENV_VAL_FILES_K = "NANOCHAT_VAL_FILES_K"
ENV_FORCE_FLASH_SDPA = "NANOCHAT_FORCE_FLASH_SDPA"
ENV_RUN_DIR = "NANOCHAT_BENCH_RUN_DIR"
ENV_T0 = "NANOCHAT_BENCH_T0"


@dataclasses.dataclass
class Image:
    reference: Optional[str] = field(None, "image as given to the runtime (registry reference or file)")
    digest: Optional[str] = field(None, "content digest, sha256:<hex>, when known")
    id: Optional[str] = field(None, "the engine's image id (podman, podman-hpc)")
    file: Optional[str] = field(None, "the image file the runtime ran (a .sqsh or .sif, made once per sweep or given)")
    build: Optional[Dict[str, str]] = field(None, "facts baked in at build time (reference, base image, git revision)")


@dataclasses.dataclass
class Slurm:
    job_id: Optional[str] = field(None, "SLURM_JOB_ID")
    job_name: Optional[str] = field(None, "SLURM_JOB_NAME")
    nodelist: Optional[str] = field(None, "SLURM_JOB_NODELIST")
    num_nodes: Optional[str] = field(None, "SLURM_JOB_NUM_NODES")
    partition: Optional[str] = field(None, "SLURM_JOB_PARTITION")
    account: Optional[str] = field(None, "SLURM_JOB_ACCOUNT")
    cluster: Optional[str] = field(None, "SLURM_CLUSTER_NAME")


# run.json's `slurm` section from the job's environment: each field's doc is its SLURM_* variable.
SLURM_VARS = {f.name: f.metadata["doc"] for f in dataclasses.fields(Slurm)}


@dataclasses.dataclass
class Software:
    python: Optional[str] = field(None, "Python version of the trainer")
    hostname: Optional[str] = field(None, "host of rank 0")
    torch: Optional[str] = field(None, "torch version")
    cuda: Optional[str] = field(None, "CUDA version torch was built with")
    nccl: Optional[str] = field(None, "NCCL version torch uses")
    driver: Optional[str] = field(None, "NVIDIA driver version")
    gpu_name: Optional[str] = field(None, "GPU name as torch reports it")
    gpu_count: Optional[int] = field(None, "GPUs visible to rank 0")
    cudnn: Optional[str] = field(None, "cuDNN version torch uses (GPU runs)")
    nntile: Optional[str] = field(None, "torch-nntile version (nntile workload)")
    starpu: Optional[str] = field(None, "StarPU version (nntile workload)")
    transformers: Optional[str] = field(None, "transformers version (nntile workload)")
    nntile_built_with_cuda: Optional[bool] = field(None, "whether the torch-nntile wheel was built with CUDA")


@dataclasses.dataclass
class Launch:
    """What the launcher did; `t0` is NANOCHAT_BENCH_T0, the time the start-up overhead is measured from."""

    kind: Optional[Literal["local", "slurm"]] = field(None, "local (nanochat-bench train/smoke) or slurm (a batch job)")
    t0: Optional[float] = field(None, "launch time, epoch seconds, taken before the image step and srun/torchrun")
    image_ready_at: Optional[float] = field(None, "when the image step ended: the image is where the run runs")
    image_step: Optional[str] = field(None, "what the image step did (a podman load on the nodes, an import once "
                                            "per sweep, a check)")
    command: Optional[List[str]] = field(None, "the command the launcher started (local runs)")
    script: Optional[str] = field(None, "the batch script (Slurm runs)")
    rendered_at: Optional[float] = field(None, "when the batch script was rendered")
    started_at: Optional[float] = field(None, "when the batch script began this run")
    finished_at: Optional[float] = field(None, "when the launcher saw the run end")
    exit_code: Optional[int] = field(None, "exit status of srun or torchrun")
    resume_from_step: Optional[int] = field(None, "a resubmitted run's checkpoint step it continues from (timeout)")
    runtime_version: Optional[str] = field(None, "first line of the runtime's version (CE, pyxis: enroot's)")
    wall_time_s: Optional[float] = field(None, "wall time from launch to the end of the command (local runs)")
    cpu_time_s: Optional[float] = field(None, "user + system seconds of every process the command started (local runs)")


@dataclasses.dataclass
class Result:
    peak_mem_mib: Optional[float] = field(None, "peak device memory allocated, MiB (0 on CPU: not measured)")
    total_training_time_s: Optional[float] = field(None, "training time after the warm-up steps, s")
    min_val_bpb: Optional[float] = field(None, "lowest validation bits per byte")
    final_val_bpb: Optional[float] = field(None, "validation bits per byte at the end")
    final_mfu: Optional[float] = field(None, "MFU of the last step, %")
    final_loss: Optional[float] = field(None, "debiased train loss of the last step")
    cpu_time_s: Optional[float] = field(None, "CPU seconds of the training process")


@dataclasses.dataclass
class Vocabulary:
    vocab_size: Optional[int] = field(None, "tokens the model's embedding covers")
    source: Optional[str] = field(None, "the tokenizer, or the .bin files whose tokenizer it is")
    bpb: Optional[bool] = field(None, "whether bytes per token are known, so validation bpb can be computed")


@dataclasses.dataclass
class NNTileRun:
    """What the nntile workload saw (bench/workloads/nntile/runner.py); empty for other workloads."""

    starpu: Optional[Dict[str, Any]] = field(None, "StarPU workers: ncpu, ncuda, restrict, home")
    dataset: Optional[Dict[str, Any]] = field(None, "the train.bin: path, tokens, batches_per_epoch, tokenizer")
    tiling: Optional[Dict[str, int]] = field(None, "axis groups tiled of all in the first graph compiled")
    passes: Optional[Dict[str, Dict[str, Any]]] = field(None, "the seed's timed forward / forward+backward passes")
    training: Optional[Dict[str, Any]] = field(None, "the seed's timed-epoch figures: tokens, time_s, cpu_s, tok/s")


@dataclasses.dataclass
class Network:
    """The path the run's collectives took, from rank 0's NCCL INFO lines (bench/nccl_log.py), or gloo."""

    backend: Optional[str] = field(None, "nccl or gloo")
    nccl_version: Optional[str] = field(None, "NCCL version NCCL printed")
    net: Optional[str] = field(None, "the network NCCL chose between nodes: Socket, IB, AWS Libfabric, ...")
    net_provider: Optional[str] = field(None, "libfabric provider of the OFI plugin (cxi on Slingshot)")
    net_plugin: Optional[str] = field(None, "what NCCL said of its network plugin")
    ofi_plugin_version: Optional[str] = field(None, "aws-ofi-nccl's version, as it printed it (NET/OFI lines)")
    libfabric_version: Optional[str] = field(None, "libfabric's version, as aws-ofi-nccl printed it")
    channels: Optional[int] = field(None, "collective channels of the communicator")
    transports: Optional[Dict[str, int]] = field(None, "connections by transport: P2P, SHM, NET/Socket, NET/IB, ...")
    evidence: Optional[List[str]] = field(None, "the NCCL lines these facts come from")
    unverified: Optional[str] = field(None, "why a run across nodes expecting a network was not checked against it")


@dataclasses.dataclass
class Preflight:
    """Bus bandwidth of the training collectives before the first step (bench/nanochat/preflight.py)."""

    backend: Optional[str] = field(None, "nccl or gloo")
    world_size: Optional[int] = field(None, "ranks")
    bytes: Optional[int] = field(None, "largest buffer measured")
    busbw_gbps: Optional[Dict[str, float]] = field(None, "busbw at the largest buffer, per collective, GB/s")
    records: Optional[List[Dict[str, Any]]] = field(None, "collective, bytes, time_us, algbw_gbps, busbw_gbps")


@dataclasses.dataclass
class Breakdown:
    """Where the run's time went (bench/breakdown.py, bench/nanochat/steptimer.py)."""

    ranks: Optional[List[Dict[str, Any]]] = field(None, "per rank: rank, host, steady step_ms, comm_ms, data_ms")
    slowest_rank: Optional[int] = field(None, "the rank with the longest median step")
    slowest_host: Optional[str] = field(None, "its host")


@dataclasses.dataclass
class Data:
    """What the run trained on: where the shards came from and which tokenizer (bench/nanochat/data_origin.py)."""

    origin: Optional[Literal["generated", "downloaded", "mixed"]] = field(
        None, "generated (data generate), downloaded (FineWeb-Edu), mixed, or unknown (None)")
    tokenizer_sha256: Optional[str] = field(None, "sha256 over the tokenizer's files")


@dataclasses.dataclass
class SiteSetup:
    """The site profile a job was rendered for and the network set-up its runtime got (bench/sites)."""

    name: Optional[str] = field(None, "the profile (alps, infiniband, or a file)")
    network: Optional[str] = field(None, "slingshot, infiniband or ethernet")
    nccl_net: Optional[str] = field(None, "the network NCCL must choose between nodes (the gate's expectation)")
    setup: Optional[str] = field(None, "one line: how the runtime reaches that network")
    applied: Optional[Dict[str, Any]] = field(None, "what was applied: env, annotations, mounts, devices, flags")


@dataclasses.dataclass
class Checkpoint:
    """The last checkpoint the run saved, so a resubmission can resume from it (--resume_from_step)."""

    step: Optional[int] = field(None, "its step")
    dir: Optional[str] = field(None, "its directory")


@dataclasses.dataclass
class Attempt:
    job_id: Optional[str] = field(None, "Slurm job of the earlier attempt")
    status: Optional[Status] = field(None, "how it ended")
    message: Optional[str] = field(None, "why")


@dataclasses.dataclass
class RunManifest:
    """run.json. Sections (image, slurm, software, launch, result) merge field by field on update."""

    schema_version: str = field(SCHEMA_VERSION, "version of this contract, MAJOR.MINOR (bench/contract/versions.py)")
    run_id: Optional[str] = field(None, "name of the run directory (a flow's stage: its point's, the directory above)")
    sweep_id: Optional[str] = field(None, "name of the directory above it (a flow's stage: the one above its point)")
    stage: Optional[str] = field(None, "the flow's stage this run is (bench/launch/flow.py), e.g. chat_eval_mid; "
                                       "None outside a flow")
    workload: Optional[str] = field(None, "what is trained (bench.contract.WORKLOAD)")
    status: Status = field("pending", "pending, running, or how the run ended: settled from `evidence`")
    message: Optional[str] = field(None, "why it ended as it did (None when ok): the deciding evidence's")
    runtime: Optional[str] = field(None, "bare, ce, pyxis, apptainer, podman, podman-hpc, sarus, sarus-suite")
    repeat: Optional[int] = field(None, "repeat number of a sweep point")
    nodes: Optional[int] = field(None, "nodes of the run")
    gpus_per_node: Optional[int] = field(None, "GPUs (ranks) per node; 0 on a CPU run")
    world_size: Optional[int] = field(None, "ranks")
    grad_accum: Optional[int] = field(None, "micro-steps per optimizer step")
    scaling: Optional[Literal["weak", "strong"]] = field(
        None, "weak: device batch x sequence per rank fixed, total batch grows with ranks; strong: total fixed")
    val_files_k: Optional[int] = field(None, "NANOCHAT_VAL_FILES_K: the planner's choice for the point's ranks, "
                                             "then the one the trainer used")
    ofi_hook: Optional[Literal["default", "on", "off"]] = field(
        None, "CE's aws_ofi_nccl hook as launched: the site's default, forced on, or off (container engines only)")
    config: Dict[str, Any] = field({}, "the trainer's settings, asdict(TrainConfig)")
    num_params: Optional[int] = field(None, "model parameters")
    flops_per_token: Optional[float] = field(None, "training FLOPs per token (nanochat's estimate)")
    num_iterations: Optional[int] = field(None, "optimizer steps the run was set to take")
    peak_flops_per_gpu: Optional[float] = field(None, "dense bf16 peak used for MFU (bench.metrics)")
    git_revision: Optional[str] = field(None, "the project's git describe")
    image: Image = field(None, "")
    slurm: Slurm = field(None, "")
    software: Software = field(None, "")
    launch: Launch = field(None, "")
    result: Result = field(None, "")
    vocabulary: Vocabulary = field(None, "")
    nntile: NNTileRun = field(None, "")
    network: Network = field(None, "")
    preflight: Preflight = field(None, "")
    breakdown: Breakdown = field(None, "")
    data: Data = field(None, "")
    site: SiteSetup = field(None, "")
    checkpoint: Checkpoint = field(None, "")
    scores: Dict[str, float] = field({}, "a stage's scores by name (val_bpb, train_bpb, CORE, ChatCORE, each task's "
                                         "accuracy), as its `score` events give them")
    sandbox: Optional[List[str]] = field(None, "the sandbox's layers in force for model-written code (chat "
                                                "evaluation; bench/nanochat/sandbox.py), e.g. userns+netns+pidns, "
                                                "landlock-7, seccomp; [] for none")
    capacity: Optional[Dict[str, Any]] = field(None, "a capacity probe's record: the probe, its outcome and figures "
                                                  "(bench/capacity/probe.py)")
    network_env: Dict[str, str] = field({}, "NCCL_*, FI_*, ... in effect for rank 0")
    attempts: List[Attempt] = field([], "earlier attempts of this run (resubmissions)")
    evidence: List[Evidence] = field([], "what each writer saw of the run's end, in order (bench/contract/outcome.py)")
    started_at: Optional[float] = field(None, "when the trainer started")
    finished_at: Optional[float] = field(None, "when the final status was recorded")
    updated_at: Optional[float] = field(None, "last rewrite of this file")

    def __post_init__(self):
        for f in dataclasses.fields(self):  # sections default to empty ones, not None
            if dataclasses.is_dataclass(f.type) and getattr(self, f.name) is None:
                setattr(self, f.name, f.type())
        self.notes: List[str] = []  # what a reader found beside the contract (from_dict)
        self.unknown: Dict[Tuple[str, ...], Any] = {}  # and kept, to be written back unchanged

    @classmethod
    def from_dict(cls, data: Any, where: str = RUN_JSON) -> "RunManifest":
        """Read run.json of any known major (migrated) and minor; SchemaError names the first field that
        is not as the contract says. Unknown fields are kept (`unknown`) and said (`notes`)."""
        if not isinstance(data, dict):
            raise SchemaError(f"{where}: expected an object, got {type(data).__name__}")
        reading = Reading(RETIRED)
        manifest = build(cls, migrate(data, reading.notes, where), (where,), reading)
        manifest.notes, manifest.unknown = reading.notes, reading.unknown
        return manifest

    def to_dict(self) -> Dict[str, Any]:
        """Plain data, with the fields a newer release wrote put back where they were."""
        data = dataclasses.asdict(self)
        for path, value in self.unknown.items():
            _put(data, path, value)
        return data

    def merged(self, fields: Dict[str, Any]) -> "RunManifest":
        """A copy with `fields` applied: top-level values replace, sections merge their non-None values.
        The fields are checked strictly: a writer cannot write outside the contract."""
        data = self.to_dict()
        known = dataclasses.asdict(self)  # without a newer minor's fields, as a writer's own entries are
        for key, value in fields.items():
            if key not in _FIELD_TYPES:
                raise SchemaError(f"{RUN_JSON}: {key!r} is not a field of the run contract (bench/contract/record.py)")
            if dataclasses.is_dataclass(value):
                value = dataclasses.asdict(value)
            elif isinstance(value, list):  # attempts, evidence: their entries as plain data
                value = [dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v for v in value]
            if _is_section(key) and value is None:
                continue  # "nothing known" never blanks a section
            kept = known.get(key) if isinstance(value, list) else None
            # the entries the file holds were read already, a newer minor's (an evidence kind) kept: only
            # the ones appended to them are this writer's, checked strictly
            appended = isinstance(kept, list) and value[:len(kept)] == kept
            new = value[len(kept):] if appended else value
            check(new, _FIELD_TYPES[key], (RUN_JSON,), key)
            if _is_section(key) and isinstance(value, dict):
                data[key] = {**data[key], **{k: v for k, v in value.items() if v is not None}}
            elif appended:
                data[key] = data[key] + new  # the file's entries as written, a newer minor's fields in them too
            else:
                data[key] = value
        if fields.get("status") == "pending" and "evidence" not in fields:
            data["evidence"] = []  # a new launch into this directory: the last one's evidence is not its
        data["schema_version"] = newer(data["schema_version"], SCHEMA_VERSION)
        return RunManifest.from_dict(data)


def _put(data: Dict[str, Any], path: Tuple[str, ...], value: Any) -> None:
    """Set data[a][b]... = value where the sections on the way are objects; `evidence[2]` is a list's item."""
    for name in path[:-1]:
        name, bracket, index = name.rstrip("]").partition("[")
        data = data.get(name) if isinstance(data, dict) else None
        if bracket:
            data = data[int(index)] if isinstance(data, list) and int(index) < len(data) else None
    if isinstance(data, dict):
        data.setdefault(path[-1], value)


def _is_section(name: str) -> bool:
    return dataclasses.is_dataclass(_FIELD_TYPES[name])


_FIELD_TYPES = {f.name: f.type for f in dataclasses.fields(RunManifest)}
