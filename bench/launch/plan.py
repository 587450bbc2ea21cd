"""A sweep declared as data, each point resolved once into exactly what its job will run.

Like a ReFrame parameterised test, a plan expands node counts x runtimes x repeats as a product. The
workload plans each point (bench/workloads/base.py `plan`: its trainer flags, batch arithmetic per rank
count, validation files K, horizon, time estimate); this module keeps what every workload shares: the
product of axes, the Slurm time limits and the table. A Sweep is frozen: its flags are parsed once and
its points resolved once, and rendering (bench/launch/job.py, render.py) only formats a Point, so `plan`
prints exactly what `submit` submits.
"""

import functools
import itertools
import math
from dataclasses import dataclass, field
from typing import Any

from tabulate import tabulate

from bench import contract, metrics, workloads
from bench.errors import ConfigError, FlagValueError, UnknownFlags, close_hint
from bench.pairs import parse_pairs
from bench.workloads.base import Estimate, ModelShape, PointContext, PointPlan, Settings

SCALING_MODES = ("weak", "strong")
# The MFU an estimate assumes falls at small device batches, where the GPU idles between small kernels:
# assumed = --assume-mfu x B / (B + MFU_HALF_BATCH), i.e. ~89% of it at B = 32 and ~20% at B = 1.
MFU_HALF_BATCH = 4
# Upstream's sizing (speedrun.sh): ~250M characters per FineWeb-Edu shard at ~4.8 characters per token.
TOKENS_PER_SHARD = 250e6 / 4.8
DEFAULT_RUN_MINUTES = 30  # a run's time limit when nothing can be estimated (CPU, another workload)
DEFAULT_GPU = "H200"  # the GPU an estimate assumes without --gpu or a site profile's gpu
# Tokens one rank decodes a second when generating (chat_eval: one problem at a time through the KV cache, each
# token a forward of one position, so the host's kernel launches, not FLOPs, set the pace): an assumption, as
# --assume-mfu is; d20 on H200 nodes decoded 50-90 tok/s, the host CPU deciding (results/h200-d20/decode/). The
# first use of each attention length costs ~44 ms more (likely cuDNN's plan per shape), at most one per position a
# sequence reaches: about a minute and a half per evaluation, inside the start-up allowance.
DECODE_TOK_PER_S = 75.0


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
    """Repeated `--train-arg KEY=VALUE` -> {key: value as text}; keys checked later by the workload."""
    pairs = parse_pairs(pairs, "--train-arg", "eval_every=100", form="KEY=VALUE")
    return {key.lstrip("-"): value for key, value in pairs.items()}


SLURM_MAX_MINUTES = 0xFFFFFFFD  # Slurm keeps a time limit in 32-bit minutes; the two above mean NO_VAL and INFINITE


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
    if minutes > SLURM_MAX_MINUTES:  # sbatch would refuse every job, after the sweep was written
        raise ConfigError(f"--time {text!r} is more than Slurm can take (at most {SLURM_MAX_MINUTES:,} minutes)")
    return minutes


def allowance_minutes(est_hours: float) -> int:
    """The time a step is given for an estimate: a quarter and ten minutes to spare, in whole five minutes."""
    return 5 * math.ceil((est_hours * 60 * 1.25 + 10) / 5)


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
        from bench.nanochat.sharding import workable_val_files_k

        return workable_val_files_k(list(self.row_groups), ranks)

    def shards_serving(self, k: int, ranks: int) -> int | None:
        """The fewest shards, counted from the first as a download takes them, whose last K give every rank a row
        group and whose others do too, as the loader requires of both splits (None: not even all of them)."""
        counts = self.row_groups
        return next((n for n in range(k + 1, len(counts) + 1)
                     if min(sum(counts[:n - k]), sum(counts[n - k:n])) >= ranks), None)


def val_files_k_note(given: str | None, runs, who: str, how: str, ranks: str | None = None) -> str | None:
    """The note where the environment's NANOCHAT_VAL_FILES_K (`given`) is not the K the plan chose for `runs`
    ((sweep, point) pairs), which they keep; `ranks`: those they run with, if not their points' own; None when there
    is nothing to say."""
    chosen = [(p, sw.data.source) for sw, p in runs if sw.data is not None and contract.ENV_VAL_FILES_K in dict(p.env)]
    planned = {dict(p.env)[contract.ENV_VAL_FILES_K]: source for p, source in chosen}
    if given is None or not planned or set(planned) == {given}:
        return None
    ranks = ranks or "/".join(map(str, sorted({p.ranks for p, _ in chosen})))
    ks = "/".join(sorted(planned, key=int))
    return (f"note: {contract.ENV_VAL_FILES_K}={given} of this environment is not used: {who} with the "
            f"plan's {contract.ENV_VAL_FILES_K}={ks}, chosen for {ranks} rank(s) from {next(iter(planned.values()))}, "
            f"as {how}")


@dataclass(frozen=True)
class Point:
    """One run of a sweep, resolved: everything its job needs, nothing left to derive. What is the
    workload's own (its flags, batch arithmetic, K, estimate) is in `plan`."""

    nodes: int
    runtime: str
    repeat: int
    ranks: int
    scaling: str
    plan: PointPlan = PointPlan()
    time_minutes: int = DEFAULT_RUN_MINUTES
    deadline: bool = False  # its trainer takes the batch script's deadline, its margin before time_minutes

    possible = property(lambda self: self.plan.possible)
    reason = property(lambda self: self.plan.reason)  # why the point cannot run
    note = property(lambda self: self.plan.note)
    train_argv = property(lambda self: self.plan.train_argv)
    env = property(lambda self: self.plan.env)
    val_files_k = property(lambda self: self.plan.val_files_k)
    est_hours = property(lambda self: self.plan.est_hours)

    # nanochat's figures under their old names, for readers written before planning moved into the
    # workload (bench/reframe_checks/checks.py); 0 where the workload plans no such figure
    device_batch_size = property(lambda self: self.plan.column("device_batch_size"))
    grad_accum = property(lambda self: self.plan.column("grad_accum"))
    total_batch_size = property(lambda self: self.plan.column("total_batch_size"))
    num_iterations = property(lambda self: self.plan.column("num_iterations"))

    @property
    def run_id(self) -> str:
        return f"n{self.nodes}-{self.runtime}-r{self.repeat}"

    @property
    def node_hours(self) -> float | None:
        """The run's estimate on each node, plus its image step's time where its runtime has one: the step runs
        before the run's own srun, on the job's nodes, and its job's time limit gives it that time."""
        from bench.launch.job import IMAGE_STEP_MINUTES, default_image_step  # job.py imports this module
        if self.est_hours is None:
            return None
        return (self.est_hours + (IMAGE_STEP_MINUTES / 60 if default_image_step(self.runtime) else 0)) * self.nodes

    @property
    def time_limit(self) -> str:
        return slurm_time(self.time_minutes)

    def short_time_note(self, what: str = "run") -> str | None:
        """Why a --time under the estimate matters (the default limit is the estimate with time to spare, so only
        --time can be under it): the trainer's deadline comes before its last step, and the run ends as timeout.
        A trainer that takes the deadline stops its margin before the limit, so a limit just above is short too."""
        from bench.launch.job import deadline_margin_s  # job.py imports this module

        margin = deadline_margin_s(self.time_minutes) if self.deadline else 0
        if self.est_hours is None or self.est_hours * 3600 <= self.time_minutes * 60 - margin:
            return None
        estimate = f"the {what}'s estimate of {math.ceil(self.est_hours * 60)} min"
        if self.est_hours * 60 <= self.time_minutes:
            return (f"--time {self.time_limit} gives the trainer {(self.time_minutes * 60 - margin) / 60:.1f} min, "
                    f"under {estimate}: it stops {margin} s before the limit to save its checkpoint, and ends as "
                    f"timeout before its last step")
        return f"--time {self.time_limit} is under {estimate}: it ends as timeout before its last step"


def unknown_train_keys(workload: str, e: UnknownFlags, train: dict, how: str = "--train-arg ") -> UnknownFlags:
    """Trainer flags a workload does not take, named as the sweep holds them (KEY=VALUE, from --train-arg or a named
    flag such as --depth) with the keys it takes, given as `how` says (a flow's stage: `--stage-arg STAGE:`): its
    parser named only the flags they became (`'--bogus=1'`) and sent the user to train's --help."""
    given = {key.replace("-", "_"): f"{key}={value}" for key, value in train.items()}
    hints = [given.get(name, name) + (f" ({e.notes[name]})" if name in e.notes else close_hint(name, e.known))
             for name in e.names]
    return UnknownFlags(f"{workload}: unknown argument(s): {'; '.join(hints)}; valid keys ({how}KEY=VALUE): "
                        f"{', '.join(e.known)}", e.names, e.known)


def train_arg_value(who: str, e: FlagValueError, train: dict, how: str = "--train-arg ") -> FlagValueError:
    """A --train-arg value `who`'s parser cannot read, named as the user wrote it (the parser named its own flag),
    given as `how` says (a flow's stage: `--stage-arg STAGE:`)."""
    return FlagValueError(f"{how}{e.name}={train[e.name]}: {who}'s --{e.name} takes {e.expected}", e.name,
                          e.expected)


@dataclass(frozen=True)
class Sweep:
    nodes: list[int]
    gpus_per_node: int
    runtimes: list[str]
    repeats: int = 1
    train: dict = field(default_factory=dict)  # trainer flags given by the user (the workload's names)
    scaling: str = "weak"
    gpu: str | None = None  # GPU the estimate assumes (peak FLOPs from bench.metrics); None: the site's, else default
    assume_mfu: float = 0.40  # MFU the estimate assumes at large device batches
    assume_decode_tok_s: float = DECODE_TOK_PER_S  # tokens a rank generates a second (chat_eval's estimate)
    startup_s: float = 300.0  # per-run start-up allowance in the estimate (image, compile, data)
    workload: str = workloads.DEFAULT  # bench/workloads: nanochat, or nntile (its flags via --train-arg)
    data: DataShape | None = None  # the shards, for the choice of K (None: K is not planned)
    time: str | None = None  # a fixed time limit per run instead of the estimate
    site: Any = None  # bench.sites.Site: GPU memory and device batch limits of the site (None: the GPU's own)
    base_dir: str | None = None  # NANOCHAT_BASE_DIR on the nodes (a stage checks the nodes share it); None: unknown
    model: ModelShape | None = None  # the model a stage loads, where a flow's pre-training says (flow.py), else None
    settings: Settings = field(init=False, repr=False, compare=False)  # the flags, parsed once

    def __post_init__(self):
        object.__setattr__(self, "gpu", self.gpu or getattr(self.site, "gpu", None) or DEFAULT_GPU)
        if metrics.peak_flops(self.gpu) is None:  # a site profile's gpu is checked alike (bench/sites/profile.py)
            known = ", ".join(pattern for pattern, _ in metrics.PEAK_BF16_FLOPS)
            raise ConfigError(f"--gpu {self.gpu!r}: no peak FLOPs known for it in bench/metrics.py, so nothing could "
                              f"be estimated; name one of {known}")
        if self.gpus_per_node <= 0:
            raise ConfigError(f"--gpus-per-node {self.gpus_per_node} must be a positive integer")
        if self.repeats <= 0:
            raise ConfigError(f"--repeats {self.repeats} must be a positive integer")
        if not 0 < self.assume_mfu <= 1:
            raise ConfigError(f"--assume-mfu {self.assume_mfu} must be in (0, 1]")
        if not 0 < self.assume_decode_tok_s < math.inf:
            raise ConfigError(f"--assume-decode-tok-s {self.assume_decode_tok_s} must be a positive number of tokens "
                              f"a second (default: {DECODE_TOK_PER_S:g})")
        if self.scaling not in SCALING_MODES:
            raise ConfigError(f"--scaling {self.scaling!r}: valid modes are {', '.join(SCALING_MODES)}")
        if self.time is not None:
            parse_minutes(self.time)
        train = {k: v for k, v in self.train.items() if v is not None}
        try:
            settings = workloads.get(self.workload).settings(train, self.scaling)  # an unknown name fails first
        except UnknownFlags as e:
            raise unknown_train_keys(self.workload, e, train) from None
        except FlagValueError as e:  # its parser named its own flag: name the --train-arg the user wrote
            if e.name not in train:
                raise
            raise train_arg_value(self.workload, e, train) from None
        object.__setattr__(self, "settings", settings)
        object.__setattr__(self, "train", settings.train)
        site_gpus = getattr(self.site, "gpus_per_node", None)
        if site_gpus and self.gpus_used and self.gpus_per_node > site_gpus:  # Slurm would refuse the job
            raise ConfigError(f"--gpus-per-node {self.gpus_per_node}: a node of site {self.site.name} has "
                              f"{site_gpus} GPUs ({self.site.source}); use at most {site_gpus}")

    @property
    def workload_impl(self):
        """The workload object (bench/workloads) that plans and launches this sweep's runs."""
        return workloads.get(self.workload)

    @property
    def gpus_used(self) -> bool:
        """Whether the runs use the nodes' GPUs (a CPU run asks Slurm for none)."""
        return self.workload_impl.uses_gpus(self.settings)

    @property
    def estimate(self) -> Estimate:
        return Estimate(metrics.peak_flops(self.gpu), self.assume_mfu, self.startup_s, MFU_HALF_BATCH,
                        self.assume_decode_tok_s)

    def context(self, nodes: int) -> PointContext:
        from bench.nanochat.memory import GIB, device_memory_bytes

        site = self.site
        memory = int(site.gpu_memory_gib * GIB) if site is not None and site.gpu_memory_gib else \
            device_memory_bytes(self.gpu)
        max_batch = site.max_device_batch(nodes * self.gpus_per_node) if site is not None else None
        return PointContext(nodes, self.gpus_per_node, self.scaling, self.data, self.estimate, memory, max_batch,
                            self.base_dir, site, self.model)

    @functools.cached_property
    def _points(self) -> tuple[Point, ...]:
        """Every point, resolved once: the workload plans each node count once, repeats and runtimes share it."""
        plans = {n: self._plan(self.context(n)) for n in self.nodes}
        per_node = self.workload_impl.ranks_per_node(self.settings, self.gpus_per_node)
        return tuple(Point(n, runtime, r, n * per_node, self.scaling, plans[n],
                           self.run_minutes(plans[n].est_hours), bool(self.workload_impl.deadline_flag))
                     for n, runtime, r in itertools.product(self.nodes, self.runtimes, range(1, self.repeats + 1)))

    def _plan(self, point: PointContext) -> PointPlan:
        """The workload's plan of one point; one whose nodes could not all read the checkpoint its stage loads
        (reads_checkpoint: every rank of every node does) cannot run, whatever else the workload would decide."""
        from bench.paths import base_dir
        from bench.workloads.sharedfs import check_shared

        if self.workload_impl.reads_checkpoint and \
                (why := check_shared(base_dir(point.base_dir), point.nodes, point.site)):
            return PointPlan(reason=why)
        return self.workload_impl.plan(self.settings, point)

    def points(self) -> list[Point]:
        return list(self._points)

    def run_minutes(self, est_hours: float | None) -> int:
        """A run's time limit: --time, else the estimate with a quarter and ten minutes to spare, in whole
        five minutes (a short run fits a 30-minute debug partition), else DEFAULT_RUN_MINUTES."""
        if self.time:
            return parse_minutes(self.time)
        if est_hours is None:
            return DEFAULT_RUN_MINUTES
        return allowance_minutes(est_hours)

    def shards_needed(self) -> int | None:
        """Shards to download for the largest point: its training tokens (upstream's 52M a shard, with
        10% to spare) plus its K validation files, and no fewer than give each point's ranks a row group of
        either split (a few tokens can fit one shard of fewer row groups than ranks, and the runs would stop at
        start-up); None when it cannot be said."""
        points = [p for p in self._points if p.possible and p.plan.tokens]
        if not points:
            return None
        tokens = max(p.plan.tokens for p in points)
        k = max((p.val_files_k or 1) for p in points)
        serving = [self.data.shards_serving(p.val_files_k, p.ranks) or 0
                   for p in points if self.data is not None and p.val_files_k]
        return max([math.ceil(tokens / TOKENS_PER_SHARD * 1.1) + k, *serving])

    def describe(self) -> dict:
        """The sweep as JSON-ready data (recorded in sweep.json)."""
        return {"nodes": self.nodes, "gpus_per_node": self.gpus_per_node, "runtimes": self.runtimes,
                "repeats": self.repeats, "train": self.train, "scaling": self.scaling, "gpu": self.gpu,
                "assume_mfu": self.assume_mfu, "assume_decode_tok_s": self.assume_decode_tok_s,
                "startup_s": self.startup_s, "workload": self.workload,
                "data": self.data.source if self.data else None, "time": self.time}


def memory_warning(sweep: Sweep, p: Point) -> str | None:
    """The workload's warning when a point will not fit in the assumed GPU's memory, else None."""
    return sweep.workload_impl.memory_warning(sweep.settings, p.plan, sweep.context(p.nodes), sweep.gpu)


# Units a workload's plan column leaves unsaid (its header is short, and tests and scripts read the headers).
COLUMN_UNITS = {"total_batch": "tokens per optimizer step, over all ranks"}


def column_legend(headers) -> list[str]:
    """What the workloads' columns among `headers` count, where their names do not say it."""
    return [f"{h}: {COLUMN_UNITS[h]}" for h in dict.fromkeys(headers) if h in COLUMN_UNITS]


def format_table(sweep: Sweep, partition: str | None = None) -> str:
    """The plan as a text table, one row per node count and runtime (repeats folded), then totals. A run whose job
    the partition (--partition, else the site's default) would refuse is shown as submit refuses it, its image
    step's time included."""
    # job.py imports this module
    from bench.launch.job import IMAGE_STEP_MINUTES, default_image_step, partition_refusal, run_job_minutes, \
        site_partition

    limit = site_partition(sweep.site, partition)
    columns = sweep.workload_impl.PLAN_COLUMNS
    head = ("nodes", "runtime", "repeats", "ranks", *(c[0] for c in columns), "val_K", "time", "est_node_h", "note")
    rows, jobs, node_hours, unknown = [], 0, 0.0, False
    for (n, rt), group in itertools.groupby(sweep.points(), key=lambda p: (p.nodes, p.runtime)):
        group = list(group)
        p = group[0]
        if not p.possible:
            rows.append((n, rt, len(group), p.ranks, *["-"] * (len(columns) + 3), "impossible: " + p.reason))
            continue
        refusal = partition_refusal(limit, n, run_job_minutes(p.time_minutes, default_image_step(rt)))
        nh = sum(q.node_hours or 0 for q in group)
        if not refusal:  # a run submit refuses is neither run nor counted
            jobs += len(group)
            unknown |= p.node_hours is None
            node_hours += nh
        figures = (fmt.format(p.plan.column(key, "-")) for _, key, fmt in columns)
        rows.append((n, rt, len(group), p.ranks, *figures, p.val_files_k or "-", p.time_limit,
                     "?" if p.node_hours is None else f"{nh:.2f}",
                     f"not submitted: {refusal}" if refusal else
                     "; ".join(filter(None, [p.note, memory_warning(sweep, p), p.short_time_note()]))))
    lines = tabulate(rows, headers=head, tablefmt="plain", disable_numparse=True).splitlines()
    legend = ["time: each run's limit", "est_node_h: estimated node-hours of all its repeats", *column_legend(head)]
    s, lines = sweep, lines + ["; ".join(legend), "", *sweep.workload_impl.describe(sweep)]
    total = "?" if unknown and node_hours == 0 else f"{node_hours:.2f}"
    why = "" if not unknown else "; no estimate on CPU" if not s.gpus_used else f"; no estimate for {s.workload}"
    lines.append(f"{jobs} runs, {total} node-hours estimated "
                 f"({s.gpu} at {s.assume_mfu:.0%} MFU x B/(B+{MFU_HALF_BATCH}) + {s.startup_s:.0f} s start-up per run"
                 + (f" + {IMAGE_STEP_MINUTES} min image step" if any(map(default_image_step, s.runtimes)) else "")
                 + why + ")")
    return "\n".join(lines)
