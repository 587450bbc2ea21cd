"""The interface every workload implements (the launchers and the planner call only these). Standard library only.

Planning is the workload's: bench/launch/plan.py expands nodes x runtimes x repeats and keeps the Slurm
times and the table, and asks the workload for the rest of each point (`plan`): its trainer flags, the
contract variables it needs (NANOCHAT_VAL_FILES_K), its batch arithmetic per rank count, its horizon and
time estimate, and why a point cannot run.
"""

import sys
from dataclasses import dataclass, field
from typing import Any

# What a workload's runs do, and so which figures they have (bench/analysis/columns.py `perf`): a training run
# takes optimizer steps (step events: tok/s, step time, MFU); an evaluation scores a checkpoint and takes none.
TRAINING, EVALUATION = "training", "evaluation"


# A forward pass is about a third of a training step's FLOPs per token (the backward pass costs twice the
# forward): what an evaluation that runs the model forward only (base_loss, base_eval) does per token.
FORWARD_SHARE = 1 / 3


@dataclass(frozen=True)
class ModelShape:
    """The model a stage works on, as far as the plan knows it before any checkpoint exists: pre-training's
    flags in a flow (bench/launch/flow.py), sized as its trainer sizes it (bench/workloads/nanochat.py)."""

    depth: int
    sequence_len: int
    flops_per_token: float  # training FLOPs per token (bench.nanochat.gpt.GPTConfig.flops_per_token)


@dataclass(frozen=True)
class Estimate:
    """What a time estimate assumes (the sweep's --gpu, --assume-mfu, --assume-decode-tok-s and start-up
    allowance), and the formulas turning a run's work into wall hours (bench/launch/plan.py explains the
    MFU model): FLOPs at the assumed MFU, or tokens decoded one at a time at the assumed rate."""

    peak_flops: float | None  # of the assumed GPU, bench.metrics; None: unknown
    assume_mfu: float
    startup_s: float
    mfu_half_batch: int
    decode_tok_per_s: float | None = None  # tokens a rank decodes a second (plan.py DECODE_TOK_PER_S); None: unknown

    def hours(self, flops: float, ranks: int, device_batch_size: float) -> float | None:
        if not self.peak_flops:
            return None
        mfu = self.assume_mfu * device_batch_size / (device_batch_size + self.mfu_half_batch)
        return (flops / (ranks * self.peak_flops * mfu) + self.startup_s) / 3600

    def decode_hours(self, tokens_per_rank: float) -> float | None:
        """Wall hours of a rank decoding this many tokens one at a time (each a forward of one position
        through the KV cache: latency, not FLOPs, sets the pace), plus the start-up allowance."""
        if not self.decode_tok_per_s:
            return None
        return (tokens_per_rank / self.decode_tok_per_s + self.startup_s) / 3600


@dataclass(frozen=True)
class PointContext:
    """What the planner knows of one point when it asks the workload to plan it."""

    nodes: int
    gpus_per_node: int
    scaling: str  # weak | strong (bench/launch/plan.py SCALING_MODES)
    data: Any  # bench.launch.plan.DataShape, or None when the shards' shape is not known
    estimate: Estimate
    gpu_memory_bytes: int | None = None  # the site's (or the named GPU's) memory per GPU; None: unknown
    max_device_batch: int | None = None  # the site's observed limit at this rank count (bench/sites)
    base_dir: str | None = None  # NANOCHAT_BASE_DIR on the nodes, where stages' checkpoints live; None: unknown
    site: Any = None  # bench.sites.Site, or None
    model: ModelShape | None = None  # the model a later stage loads, where a flow's pre-training says; None: unknown

    @property
    def ranks(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass(frozen=True)
class PointPlan:
    """A workload's decisions for one point. `columns` are its own figures for the plan's table (its
    `PLAN_COLUMNS`), `manifest` its own run.json fields; `reason` set means the point cannot run."""

    train_argv: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # contract variables every runtime passes into the run
    columns: tuple[tuple[str, Any], ...] = ()
    manifest: tuple[tuple[str, Any], ...] = ()
    val_files_k: int | None = None  # None: not planned
    tokens: int | None = None  # tokens the run reads of the training split (for the shards to download); None: unknown
    est_hours: float | None = None  # wall hours of the run; None: no estimate can be made
    note: str = ""
    reason: str = ""

    @property
    def possible(self) -> bool:
        return not self.reason

    def column(self, name: str, default: Any = 0) -> Any:
        return dict(self.columns).get(name, default)


@dataclass(frozen=True)
class Settings:
    """A sweep's flags for one workload, parsed once: `config` is the workload's own object, `argv` the flags."""

    config: Any
    argv: tuple[str, ...] = ()
    train: dict = field(default_factory=dict)


class Workload:
    name = ""  # the command line's name (`--workload NAME`)
    summary = ""  # what it runs, in a few words: its line in `--workload`'s help
    run_workload = ""  # run.json's `workload`: part of the key under which the analysis compares runs
    former_run_workloads: tuple[str, ...] = ()  # what older releases recorded as run.json's `workload` for it
    # The program its runs come from: "nanochat" (bench/nanochat's trainer and stages) or "nntile". The report
    # sets the two side by side and reads nanochat's older records with the values they had (bench/analysis/).
    family = ""
    # its columns in the plan's table, after ranks: (header, key in PointPlan.columns, format)
    PLAN_COLUMNS: tuple[tuple[str, str, str], ...] = ()
    deadline_flag: str | None = None  # a flag taking the batch script's deadline (epoch s), if it has one
    resume_flag: str | None = None  # a flag taking the checkpoint step a resubmitted run continues from
    # what its runs need staged besides the shards: (the `nanochat-bench` arguments that stage it, what it stages)
    staging: tuple[tuple[str, ...], str] | None = None
    local_launcher = "the launcher"  # what starts its processes on this machine, as a run's last word names it
    rank_per_gpu = False  # `train` without --nproc starts one rank per GPU of this machine (else one process)
    takes_depth = False  # its flags set the model's depth (`--depth`); a later stage loads its checkpoint's
    # it loads a checkpoint a stage before wrote, on every node: the planner refuses a multi-node point whose nodes
    # do not share the base directory (bench/launch/plan.py Sweep._plan)
    reads_checkpoint = False
    kind = TRAINING  # TRAINING or EVALUATION
    # The report's headers of the table columns whose meaning is this workload's own (bench/analysis/columns.py
    # names -> header; "{per}" becomes GPU or rank), e.g. what an evaluation's problems/s counts.
    headers: dict[str, str] = {}
    # What its step events' tok_per_sec counts: "positions" (every token run through the model, the work MFU is
    # about) or another count (SFT's supervised tokens); then the step events' own mfu is the run's MFU.
    step_tokens = "positions"
    # What its runs compute in when run.json's config names no dtype (the table's `precision`, a key)
    precision = "bf16"
    dtype_sets_precision = True  # its config's `dtype` is what its runs compute in (else a flag it only accepts)
    until_data_ends = False  # given no --num_iterations (<= 0) it trains an epoch of its data, a count known at its end
    # What status's `at step N of M` reads: its step events number the optimizer steps from this (0 as its step line
    # and upstream's; mid_train counts those done, from 1), and this many passes of run.json's num_iterations make
    # no step (chat_sft's last only evaluates, as upstream's), so N and M count the steps done and to take
    first_step_event = 0
    passes_without_step = 0
    # The recipe of the image its runs need under a container runtime, where the runtimes' default images
    # (nanochat-bench's) cannot run it: submit and render then want an --image for each such runtime
    image_recipe: str | None = None

    def check(self, argv: list[str], nproc: int) -> None:
        """Refuse flags that cannot work, with one clear line, before any process starts."""
        raise NotImplementedError

    def missing_staged(self, base_dir: str, settings: Settings | None = None) -> str:
        """What of its `staging` is not in place under `base_dir` (NANOCHAT_BASE_DIR of the runs) for a sweep of
        `settings` (None: its defaults), found without reading it in full: one line naming it and the command that
        stages it, or "" when all is there. A flow asks every stage before any starts (bench/launch/flow.py
        check_staged), submit and render a sweep's workload before anything is written."""
        return ""

    def staging_command(self, settings: Settings | None = None) -> tuple[str, ...]:
        """The `nanochat-bench` arguments that stage what a sweep of `settings` reads (its `staging`), as the
        interactive guide runs them and missing_staged names them."""
        return self.staging[0] if self.staging else ()

    def local_command(self, argv: list[str], nproc: int, python: str | None = None) -> list[str]:
        """The command that trains on this machine (bench/launch/local.py runs it)."""
        raise NotImplementedError

    def local_env(self) -> dict[str, str]:
        """Variables the local command needs besides the run contract's (set when not already set)."""
        return {}

    def host_python(self, python: str | None) -> str:
        """The interpreter the bare runtime starts its command with: `python` (submit's and render's --python),
        else the one that plans the sweep."""
        return python or sys.executable

    def launch_command(self, python: str, nodes: int, nproc_per_node: int, argv: list,
                       containerised: bool, numa_binding: str | None = None,
                       join_timeout_s: int | None = None) -> tuple:
        """The command each node of a Slurm job runs (bench/launch/job.py), as tokens (str or
        bench.runtimes.Var); `numa_binding` when its GPU workers are to be bound to their NUMA node;
        `join_timeout_s`: how long its nodes wait for each other at the start (None: the launcher's default)."""
        raise NotImplementedError

    def launch_env(self, base_dir: str, gpus_per_node: int) -> dict[str, str]:
        """Variables a Slurm job exports for this workload (passed into containers like the contract's);
        `gpus_per_node` the GPUs its job reserves on a node, 0 for a CPU run."""
        return {}

    def read_paths(self, settings: Settings) -> tuple[str, ...]:
        """Absolute host paths its runs read that its flags named (beside the run and base directories): a job under
        a container runtime binds each, read-only, where it is on the host."""
        return ()

    # -- planning (bench/launch/plan.py) ------------------------------------------------------------
    def settings(self, train: dict, scaling: str) -> Settings:
        """The sweep's trainer flags (`--train-arg KEY=VALUE` and the named ones), checked once."""
        raise NotImplementedError

    def checkpoint_read(self, settings: Settings) -> str | None:
        """The checkpoint phase (bench/paths.py PHASE_DIRS) its runs load, None if none: a stage's
        --source where it takes one (chat_sft, chat_eval), else the base model's."""
        return getattr(settings.config, "source", "base") if self.reads_checkpoint else None

    def reads_val_files(self, settings: Settings) -> bool:
        """Whether its runs with these flags split the shards by NANOCHAT_VAL_FILES_K (a flow checks it before any)."""
        return False

    def uses_gpus(self, settings: Settings) -> bool:
        """Whether the runs use the nodes' GPUs (a CPU run asks Slurm for none)."""
        return True

    def ranks_per_node(self, settings: Settings, gpus_per_node: int) -> int:
        """The ranks (run.json's world_size over nodes) a node of its runs counts: one per GPU, and as many CPU ranks
        on a CPU run (nanochat's --device_type=cpu starts --gpus-per-node of them)."""
        return gpus_per_node

    def plan(self, settings: Settings, point: PointContext) -> PointPlan:
        """Everything this workload decides for one point (or `reason` saying why it cannot run)."""
        return PointPlan(train_argv=settings.argv)

    def memory_warning(self, settings: Settings, plan: PointPlan, point: PointContext, gpu: str) -> str | None:
        """A warning when the point will not fit in the GPU's memory, else None."""
        return None

    def describe(self, sweep) -> list[str]:
        """The plan table's lines about the workload, after the rows (`sweep`: bench.launch.plan.Sweep)."""
        return [f"workload: {self.name} {' '.join(sweep.settings.argv)}"]

    def manifest_config(self, argv: list[str]) -> dict:
        """run.json's `config` for these flags, as the launcher writes it before the run starts."""
        raise NotImplementedError

    # -- reading its runs (bench/analysis/rundir.py) --------------------------------------------------
    def read_events(self, events: list[dict], config: dict) -> list[dict]:
        """Its runs' events as this release reads them (`config`: run.json's): what an older release of it
        recorded in another form, read as what it meant then."""
        return events
