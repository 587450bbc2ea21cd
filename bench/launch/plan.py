"""A sweep declared as data, each point resolved into exactly what its job will run.

Like a ReFrame parameterised test, a plan expands node counts x runtimes x repeats as a product. Each
point is then resolved completely, once, here: ranks, scaling mode, device batch size and gradient
accumulation, the total batch, the trainer's horizon, the validation files K that serve its ranks,
the time limit, the trainer's flags and the contract variables every runtime must pass. Rendering
(bench/launch/job.py, render.py) only formats a Point; `plan` prints exactly what `submit` submits.

Scaling (README, "Under Slurm"):
- weak (the default): each rank keeps its work, device batch x sequence, with no accumulation, so
  total_batch_size = device batch x sequence x ranks grows with the ranks;
- strong: total_batch_size stays fixed (524,288 by default) and gradient accumulation makes up the
  difference (bench.nanochat.config.fit_batch lowers the device batch where it must).
Trainer flags keep nanochat's names and defaults (bench.nanochat.config.TrainConfig), except the
horizon: a benchmark point runs SWEEP_NUM_ITERATIONS steps unless told otherwise (-1: the recipe's own
horizon, 20 tokens per parameter, 21,400 steps at d20, which the time limit then covers).
"""

import itertools
import math
from dataclasses import dataclass, field, fields, replace

from tabulate import tabulate

from bench import metrics, schema, workloads
from bench.errors import ConfigError
from bench.pairs import parse_pairs
from bench.nanochat.config import TrainConfig, fit_batch, parse_args, training_horizon
from bench.runtimes import parse_names

SCALING_MODES = ("weak", "strong")
VOCAB_SIZE = 65536  # the recipe's tokenizer, for estimates made before any tokenizer is read
SWEEP_NUM_ITERATIONS = 200  # long enough for a steady state after warm-up and compile
TRAIN_FLAGS_ALWAYS = {"core_metric_every": -1, "sample_every": -1}  # not part of a throughput benchmark
TRAIN_DEFAULTS = {f.name: f.default for f in fields(TrainConfig)}
# The MFU an estimate assumes falls at small device batches, where the GPU idles between small kernels:
# assumed = --assume-mfu x B / (B + MFU_HALF_BATCH), i.e. ~89% of it at B = 32 and ~20% at B = 1.
MFU_HALF_BATCH = 4
# Upstream's sizing (speedrun.sh): ~250M characters per FineWeb-Edu shard at ~4.8 characters per token.
TOKENS_PER_SHARD = 250e6 / 4.8
DEFAULT_RUN_MINUTES = 30  # a run's time limit when nothing can be estimated (CPU, another workload)


def parse_nodes(text: str) -> list[int]:
    """`1,2,4,8` -> [1, 2, 4, 8]; anything but distinct positive integers is refused."""
    items = [t.strip() for t in str(text).split(",")]
    try:
        nodes = [int(t) for t in items]
    except ValueError:
        nodes = []
    if not nodes or any(n <= 0 for n in nodes) or any(not t.isdigit() for t in items):
        raise ConfigError(f"--nodes {text!r} must be a comma-separated list of positive integers, e.g. 1,2,4,8")
    if len(set(nodes)) != len(nodes):
        raise ConfigError(f"--nodes {text!r} names a node count twice")
    return nodes


def parse_train_args(pairs: list[str]) -> dict:
    """Repeated `--train-arg KEY=VALUE` -> {key: value as text}; keys checked later by the trainer's parser."""
    pairs = parse_pairs(pairs, "--train-arg", "eval_every=100", form="KEY=VALUE")
    return {key.lstrip("-"): value for key, value in pairs.items()}


def parse_minutes(text: str) -> int:
    """A Slurm time in whole minutes, rounded up: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS."""
    days, dash, clock = text.partition("-") if "-" in text else ("0", "", text)
    try:
        d, parts = int(days), [int(p) for p in clock.split(":")]
    except ValueError:
        parts = []
    if not parts or len(parts) > 3 or min(parts) < 0 or d < 0:
        raise ConfigError(f"--time {text!r} is not a Slurm time (MM, HH:MM:SS or D-HH:MM:SS)")
    if dash:  # after a day count: hours first
        h, m, sec = (parts + [0, 0])[:3]
    else:  # minutes, minutes:seconds, or hours:minutes:seconds
        h, m, sec = ([0] * (3 - len(parts)) + parts) if len(parts) == 3 else (0, *(parts + [0])[:2])
    minutes = math.ceil((d * 86400 + h * 3600 + m * 60 + sec) / 60)
    if minutes <= 0:
        raise ConfigError(f"--time {text!r} must be at least a minute")
    return minutes


def slurm_time(minutes: int) -> str:
    """Whole minutes as Slurm's [D-]HH:MM:SS."""
    d, rest = divmod(minutes, 24 * 60)
    return (f"{d}-" if d else "") + f"{rest // 60:02d}:{rest % 60:02d}:00"


@dataclass(frozen=True)
class DataShape:
    """Row groups *with rows* of each shard file, in the order the loader walks them, and where that
    was learnt: the data directory itself, or counts given because the data is not on this host."""

    row_groups: tuple[int, ...]
    source: str

    @classmethod
    def from_dir(cls, directory) -> "DataShape | None":
        """The shards under `directory` (None when there are none)."""
        from bench.nanochat import dataset

        files = dataset.list_parquet_files(directory)
        if not files:
            return None
        return cls(tuple(dataset.row_group_counts(files)), f"{len(files)} shard(s) in {directory}")

    @classmethod
    def from_counts(cls, per_shard: int, shards: int) -> "DataShape":
        if per_shard < 1 or shards < 2:
            raise ConfigError(f"--row-groups {per_shard} --shards {shards}: need at least 1 row group per shard "
                              f"and 2 shards (train and validation)")
        return cls((per_shard,) * shards, f"{shards} shard(s) of {per_shard} row groups (given)")

    def val_files_k(self, ranks: int) -> int | None:
        """The smallest K whose last K files give every rank a row group, the rest too (None: no K does)."""
        from bench.nanochat.dataloader import workable_val_files_k

        return workable_val_files_k(list(self.row_groups), ranks)


@dataclass(frozen=True)
class Point:
    """One run of a sweep, resolved: everything its job needs, nothing left to derive."""

    nodes: int
    runtime: str
    repeat: int
    ranks: int
    scaling: str
    device_batch_size: int = 0
    grad_accum: int = 0
    total_batch_size: int = 0
    num_iterations: int = 0  # the horizon the trainer will run
    val_files_k: int | None = None  # None: not planned (another workload, or .bin data)
    est_hours: float | None = None  # wall hours of the run, None when no estimate can be made
    time_minutes: int = DEFAULT_RUN_MINUTES
    train_argv: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # contract variables every runtime passes into the run
    note: str = ""
    reason: str = ""  # why the point cannot run (then the batch fields are 0)

    @property
    def possible(self) -> bool:
        return not self.reason

    @property
    def run_id(self) -> str:
        return f"n{self.nodes}-{self.runtime}-r{self.repeat}"

    @property
    def node_hours(self) -> float | None:
        return None if self.est_hours is None else self.est_hours * self.nodes

    @property
    def time_limit(self) -> str:
        return slurm_time(self.time_minutes)


@dataclass
class Sweep:
    nodes: list[int]
    gpus_per_node: int
    runtimes: list[str]
    repeats: int = 1
    train: dict = field(default_factory=dict)  # trainer flags given by the user (nanochat names)
    scaling: str = "weak"
    gpu: str = "H200"  # GPU the estimate assumes (peak FLOPs from bench.metrics)
    assume_mfu: float = 0.40  # MFU the estimate assumes at large device batches
    startup_s: float = 300.0  # per-run start-up allowance in the estimate (image, compile, data)
    workload: str = workloads.DEFAULT  # bench/workloads: nanochat, or nntile (its flags via --train-arg)
    data: DataShape | None = None  # the shards, for the choice of K (None: K is not planned)
    time: str | None = None  # a fixed time limit per run instead of the estimate

    def __post_init__(self):
        if self.gpus_per_node <= 0:
            raise ConfigError(f"--gpus-per-node {self.gpus_per_node} must be a positive integer")
        if self.repeats <= 0:
            raise ConfigError(f"--repeats {self.repeats} must be a positive integer")
        if not 0 < self.assume_mfu <= 1:
            raise ConfigError(f"--assume-mfu {self.assume_mfu} must be in (0, 1]")
        if self.scaling not in SCALING_MODES:
            raise ConfigError(f"--scaling {self.scaling!r}: valid modes are {', '.join(SCALING_MODES)}")
        if self.time is not None:
            parse_minutes(self.time)
        self.train = {k: v for k, v in self.train.items() if v is not None}
        workloads.get(self.workload)  # an unknown name fails here
        if self.nanochat:
            if self.scaling == "weak" and "total_batch_size" in self.train:
                raise ConfigError("--total_batch_size is what weak scaling grows with the ranks (device batch x "
                                  "sequence x ranks); fix it with --scaling strong, or leave it out")
            self.train.setdefault("num_iterations", SWEEP_NUM_ITERATIONS)
        self.base_config()  # the trainer's own parser refuses bad flags now, before any job exists

    @classmethod
    def from_strings(cls, nodes: str, gpus_per_node: int, runtimes: str, **kw) -> "Sweep":
        return cls(parse_nodes(nodes), gpus_per_node, parse_names(runtimes), **kw)

    @property
    def nanochat(self) -> bool:
        return self.workload == workloads.DEFAULT

    @property
    def gpus_used(self) -> bool:
        """Whether the runs use the nodes' GPUs (a CPU run asks Slurm for none)."""
        if self.nanochat:
            return self.base_config().device_type != "cpu"
        return self.train.get("restrict") != "cpu"

    def base_config(self) -> TrainConfig | None:
        """The trainer settings the user gave (before a point's batch and K); None for another workload."""
        if not self.nanochat:
            self.base_argv()  # checked by that workload
            return None
        return parse_args(_argv({**TRAIN_FLAGS_ALWAYS, **self.train}))

    def base_argv(self) -> list[str]:
        """Another workload's flags, from the --train-arg pairs (checked by that workload)."""
        return workloads.get(self.workload).sweep_argv(self.train)

    def points(self) -> list[Point]:
        out = []
        for n, runtime, r in itertools.product(self.nodes, self.runtimes, range(1, self.repeats + 1)):
            out.append(self.resolve(Point(n, runtime, r, n * self.gpus_per_node, self.scaling)))
        return out

    def resolve(self, p: Point) -> Point:
        """The point with every field decided (or `reason` saying why it cannot run)."""
        if not self.nanochat:
            minutes = parse_minutes(self.time) if self.time else DEFAULT_RUN_MINUTES
            return replace(p, time_minutes=minutes, train_argv=tuple(self.base_argv()))
        base = self.base_config()
        seq = base.max_seq_len
        if self.scaling == "weak":
            dbs, accum, total, note = base.device_batch_size, 1, base.device_batch_size * seq * p.ranks, ""
        else:
            fit = fit_batch(base.total_batch_size, base.device_batch_size, seq, p.ranks)
            if not fit.possible:
                return replace(p, reason=fit.reason)
            dbs, accum, total, note = fit.device_batch_size, fit.grad_accum, base.total_batch_size, fit.note
        k, why_not = self._val_files_k(base, p.ranks)
        if why_not:
            return replace(p, reason=why_not)
        config = replace(base, device_batch_size=dbs, total_batch_size=total)
        from bench.nanochat.gpt import GPTConfig  # torch: only where a model is sized, so the CLI starts fast

        model = GPTConfig.from_depth(config.depth, VOCAB_SIZE, seq, config.aspect_ratio)
        steps, _ = training_horizon(config, model.num_params(), model.flops_per_token())
        est = self.estimate_hours(model.flops_per_token() * total * steps, p.ranks, dbs, config.device_type)
        env = {schema.ENV_VAL_FILES_K: str(k)} if k is not None else {}
        if config.force_flash_sdpa:
            env[schema.ENV_FORCE_FLASH_SDPA] = "1"
        flags = {**TRAIN_FLAGS_ALWAYS, **self.train, "device_batch_size": dbs, "total_batch_size": total}
        return replace(p, device_batch_size=dbs, grad_accum=accum, total_batch_size=total, num_iterations=steps,
                       val_files_k=k, est_hours=est, time_minutes=self.run_minutes(est),
                       train_argv=tuple(_argv(flags)), env=tuple(sorted(env.items())), note=note)

    def _val_files_k(self, config: TrainConfig, ranks: int) -> tuple[int | None, str]:
        """(K, "") for parquet data whose shape is known; (None, "") when it is not planned; (None, why)."""
        if config.data_bin_dir or self.data is None:
            return None, ""
        k = self.data.val_files_k(ranks)
        if k is None:
            return None, (f"no validation split serves {ranks} ranks: {self.data.source} have "
                          f"{sum(self.data.row_groups)} row group(s) in all, and both splits need one per rank; "
                          f"download more shards")
        return k, ""

    def estimate_hours(self, flops: float, ranks: int, device_batch_size: int, device_type: str) -> float | None:
        """Wall hours of a run: its FLOPs at the assumed MFU for this device batch, plus the start-up."""
        peak = metrics.peak_flops(self.gpu)
        if device_type == "cpu" or not peak:
            return None
        mfu = self.assume_mfu * device_batch_size / (device_batch_size + MFU_HALF_BATCH)
        return (flops / (ranks * peak * mfu) + self.startup_s) / 3600

    def run_minutes(self, est_hours: float | None) -> int:
        """A run's time limit: --time, else the estimate with a quarter and ten minutes to spare, in whole
        five minutes (never below the estimate), else DEFAULT_RUN_MINUTES."""
        if self.time:
            return parse_minutes(self.time)
        if est_hours is None:
            return DEFAULT_RUN_MINUTES
        return max(DEFAULT_RUN_MINUTES, 5 * math.ceil((est_hours * 60 * 1.25 + 10) / 5))

    def shards_needed(self) -> int | None:
        """Shards to download for the largest point: its training tokens (upstream's 52M a shard, with
        10% to spare) plus its K validation files; None when it cannot be said."""
        points = [p for p in self.points() if p.possible and p.num_iterations]
        if not self.nanochat or not points:
            return None
        tokens = max(p.total_batch_size * p.num_iterations for p in points)
        k = max((p.val_files_k or 1) for p in points)
        return math.ceil(tokens / TOKENS_PER_SHARD * 1.1) + k

    def describe(self) -> dict:
        """The sweep as JSON-ready data (recorded in sweep.json)."""
        return {"nodes": self.nodes, "gpus_per_node": self.gpus_per_node, "runtimes": self.runtimes,
                "repeats": self.repeats, "train": self.train, "scaling": self.scaling, "gpu": self.gpu,
                "assume_mfu": self.assume_mfu, "startup_s": self.startup_s, "workload": self.workload,
                "data": self.data.source if self.data else None, "time": self.time}


def _argv(flags: dict) -> list[str]:
    return [f"--{k}={v}" for k, v in sorted(flags.items())]


def memory_warning(sweep: Sweep, p: Point) -> str | None:
    """The memory model's warning when a GPU point will not fit (bench/nanochat/memory.py), else None."""
    config = sweep.base_config()
    if config is None or config.device_type == "cpu" or not p.possible:
        return None
    from bench.nanochat.memory import fit_warning

    return fit_warning(config.depth, p.device_batch_size, config.max_seq_len, p.ranks, sweep.gpu, config.strategy,
                       aspect_ratio=config.aspect_ratio, grad_accum=p.grad_accum)


def format_table(sweep: Sweep) -> str:
    """The plan as a text table, one row per node count and runtime (repeats folded), then totals."""
    head = ("nodes", "runtime", "repeats", "ranks", "device_bs", "grad_accum", "total_batch", "steps", "val_K",
            "time", "est_node_h", "note")
    rows, jobs, node_hours, unknown = [], 0, 0.0, False
    points = sweep.points()
    for (n, rt), group in itertools.groupby(points, key=lambda p: (p.nodes, p.runtime)):
        group = list(group)
        p = group[0]
        if not p.possible:
            rows.append((n, rt, len(group), p.ranks, "-", "-", "-", "-", "-", "-", "-", "impossible: " + p.reason))
            continue
        jobs += len(group)
        nh = sum(q.node_hours or 0 for q in group)
        unknown |= p.node_hours is None
        node_hours += nh
        batch = (p.device_batch_size, p.grad_accum, f"{p.total_batch_size:,}", p.num_iterations) if sweep.nanochat \
            else ("-", "-", "-", "-")
        rows.append((n, rt, len(group), p.ranks, *batch, p.val_files_k or "-", p.time_limit,
                     "?" if p.node_hours is None else f"{nh:.2f}",
                     "; ".join(filter(None, [p.note, memory_warning(sweep, p)]))))
    lines = tabulate(rows, headers=head, tablefmt="plain", disable_numparse=True).splitlines()
    s, lines = sweep, lines + [""]
    if s.nanochat:
        config = s.base_config()
        lines.append(f"workload: depth={config.depth} max_seq_len={config.max_seq_len} scaling={s.scaling} "
                     f"({'total batch grows with the ranks' if s.scaling == 'weak' else 'total batch fixed'})")
        lines.append(f"validation files: {data_line(s)}")
    else:
        lines.append(f"workload: {s.workload} {' '.join(s.base_argv())}")
        unknown = True
    total = "?" if unknown and node_hours == 0 else f"{node_hours:.2f}"
    cpu = s.nanochat and s.base_config().device_type == "cpu"
    lines.append(f"{jobs} runs, {total} node-hours estimated "
                 f"({s.gpu} at {s.assume_mfu:.0%} MFU x B/(B+{MFU_HALF_BATCH}) + {s.startup_s:.0f} s start-up per run"
                 + ("" if not unknown else "; no estimate on CPU" if cpu or s.nanochat
                    else f"; no estimate for {s.workload}") + ")")
    return "\n".join(lines)


def data_line(sweep: Sweep) -> str:
    """What the plan knows of the data: where K came from, and how many shards to download."""
    shards = sweep.shards_needed()
    need = f"; download {shards} shard(s) (training tokens at ~52M a shard, +10%, + K validation)" \
        if shards else ""
    if sweep.data is None:
        return ("K not planned: no shards found and no --row-groups given (the trainer uses "
                f"{schema.ENV_VAL_FILES_K} or 1; give --data-dir or --row-groups N --shards M){need}")
    return f"K chosen per point from {sweep.data.source}{need}"
