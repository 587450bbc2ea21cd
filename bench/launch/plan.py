"""A sweep declared as data: node counts x runtimes x repeats, with the batch arithmetic of each point.

Like a ReFrame parameterised test, a plan expands its parameters as a product; every point keeps
total_batch_size fixed (bench.launch.scaling) and gets an estimated cost in node-hours. Trainer flags
keep nanochat's names; their defaults are the trainer's own (bench.nanochat.config.TrainConfig),
except the horizon: a benchmark point runs a fixed number of steps rather than nanochat's
Chinchilla-derived ~21,400.
"""

import itertools
from dataclasses import dataclass, field, fields

from bench import metrics
from bench.errors import ConfigError
from bench.launch.scaling import BatchFit, fit_batch, flops_per_token
from bench.nanochat.config import TrainConfig, parse_args
from bench.runtimes import parse_names

SWEEP_NUM_ITERATIONS = 200  # long enough for a steady state after warm-up and compile
TRAIN_FLAGS_ALWAYS = {"core_metric_every": -1, "sample_every": -1}  # not part of a throughput benchmark
TRAIN_DEFAULTS = {f.name: f.default for f in fields(TrainConfig)}


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
    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--train-arg {pair!r} is not KEY=VALUE (e.g. --train-arg eval_every=100)")
        out[key.lstrip("-")] = value
    return out


@dataclass(frozen=True)
class Point:
    """One job of a sweep: a node count under a runtime, one repeat."""

    nodes: int
    runtime: str
    repeat: int
    ranks: int
    batch: BatchFit
    est_hours: float | None  # wall hours of the job, None when no estimate can be made (no known peak)

    @property
    def run_id(self) -> str:
        return f"n{self.nodes}-{self.runtime}-r{self.repeat}"

    @property
    def node_hours(self) -> float | None:
        return None if self.est_hours is None else self.est_hours * self.nodes


@dataclass
class Sweep:
    nodes: list[int]
    gpus_per_node: int
    runtimes: list[str]
    repeats: int = 1
    train: dict = field(default_factory=dict)  # trainer flags given by the user (nanochat names)
    gpu: str = "H200"  # GPU the estimate assumes (peak FLOPs from bench.metrics)
    assume_mfu: float = 0.40  # MFU the estimate assumes
    startup_s: float = 300.0  # per-job start-up allowance in the estimate (image, compile, data)

    def __post_init__(self):
        if self.gpus_per_node <= 0:
            raise ConfigError(f"--gpus-per-node {self.gpus_per_node} must be a positive integer")
        if self.repeats <= 0:
            raise ConfigError(f"--repeats {self.repeats} must be a positive integer")
        if not 0 < self.assume_mfu <= 1:
            raise ConfigError(f"--assume-mfu {self.assume_mfu} must be in (0, 1]")
        self.train = {k: v for k, v in self.train.items() if v is not None}
        self.train.setdefault("num_iterations", SWEEP_NUM_ITERATIONS)
        self.train_argv()  # the trainer's own parser refuses bad flags now, before any job exists

    @classmethod
    def from_strings(cls, nodes: str, gpus_per_node: int, runtimes: str, **kw) -> "Sweep":
        return cls(parse_nodes(nodes), gpus_per_node, parse_names(runtimes), **kw)

    def setting(self, name: str):
        return type(TRAIN_DEFAULTS[name])(self.train.get(name, TRAIN_DEFAULTS[name]))

    def train_argv(self, device_batch_size: int | None = None) -> list[str]:
        """The trainer's flags (`--key=value`, sorted), checked by bench.nanochat.config.parse_args."""
        flags = {**TRAIN_FLAGS_ALWAYS, **self.train}
        if device_batch_size is not None:
            flags["device_batch_size"] = device_batch_size
        argv = [f"--{k}={v}" for k, v in sorted(flags.items())]
        parse_args(argv)
        return argv

    def points(self) -> list[Point]:
        seq, total = self.setting("max_seq_len"), self.setting("total_batch_size")
        out = []
        for n, runtime, r in itertools.product(self.nodes, self.runtimes, range(1, self.repeats + 1)):
            ranks = n * self.gpus_per_node
            batch = fit_batch(total, self.setting("device_batch_size"), seq, ranks)
            out.append(Point(n, runtime, r, ranks, batch, self.estimate_hours(ranks) if batch.possible else None))
        return out

    def estimate_hours(self, ranks: int) -> float | None:
        peak = metrics.peak_flops(self.gpu)
        if self.setting("device_type") == "cpu" or not peak:
            return None
        tokens = self.setting("total_batch_size") * self.setting("num_iterations")
        flops = tokens * flops_per_token(self.setting("depth"), self.setting("max_seq_len"))
        return (flops / (ranks * peak * self.assume_mfu) + self.startup_s) / 3600

    def describe(self) -> dict:
        """The sweep as JSON-ready data (recorded in sweep.json)."""
        return {"nodes": self.nodes, "gpus_per_node": self.gpus_per_node, "runtimes": self.runtimes,
                "repeats": self.repeats, "train": self.train, "gpu": self.gpu, "assume_mfu": self.assume_mfu,
                "startup_s": self.startup_s}


def memory_warning(sweep: Sweep, p: Point) -> str | None:
    """The memory model's warning when a GPU point will not fit (bench/nanochat/memory.py), else None."""
    if sweep.setting("device_type") == "cpu":
        return None
    from bench.nanochat.memory import fit_warning

    return fit_warning(sweep.setting("depth"), p.batch.device_batch_size, sweep.setting("max_seq_len"), p.ranks,
                       sweep.gpu, sweep.setting("strategy"), aspect_ratio=sweep.setting("aspect_ratio"),
                       grad_accum=p.batch.grad_accum)


def format_table(sweep: Sweep) -> str:
    """The plan as a text table, one row per node count and runtime (repeats folded), then totals."""
    head = ("nodes", "runtime", "repeats", "ranks", "device_bs", "grad_accum", "est_node_h", "note")
    rows = []
    jobs = 0
    node_hours = 0.0
    unknown = False
    points = sweep.points()
    for (n, rt), group in itertools.groupby(points, key=lambda p: (p.nodes, p.runtime)):
        group = list(group)
        p = group[0]
        if p.batch.possible:
            jobs += len(group)
            nh = sum(q.node_hours or 0 for q in group)
            unknown |= p.node_hours is None
            node_hours += nh
            rows.append((n, rt, len(group), p.ranks, p.batch.device_batch_size, p.batch.grad_accum,
                         "?" if p.node_hours is None else f"{nh:.2f}",
                         "; ".join(filter(None, [p.batch.note, memory_warning(sweep, p)]))))
        else:
            rows.append((n, rt, len(group), p.ranks, "-", "-", "-", "impossible: " + p.batch.reason))
    cells = [tuple(str(c) for c in head)] + [tuple(str(c) for c in row) for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(head) - 1)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r[:-1], widths)) + "  " + r[-1] for r in cells]
    s = sweep
    lines.append("")
    lines.append(
        f"workload: depth={s.setting('depth')} max_seq_len={s.setting('max_seq_len')} "
        f"total_batch_size={s.setting('total_batch_size'):,} num_iterations={s.setting('num_iterations')}")
    total = "?" if unknown and node_hours == 0 else f"{node_hours:.2f}"
    lines.append(f"{jobs} jobs, {total} node-hours estimated "
                 f"({s.gpu} at {s.assume_mfu:.0%} MFU + {s.startup_s:.0f} s start-up per job"
                 + ("; no estimate on CPU" if unknown else "") + ")")
    return "\n".join(lines)
