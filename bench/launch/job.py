"""From a sweep point to what a batch script runs: the torchrun command, the runtime's launch spec,
the exported environment, the #SBATCH directives and the first run.json.

Decisions live here; bench/launch/render.py only turns them into text through the slurm/ templates.
"""

import math
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench import schema, workloads
from bench.errors import ConfigError
from bench.launch import jobrecord
from bench.launch.plan import Point, Sweep
from bench.provenance import ENV_IMAGE, ENV_RUNTIME
from bench.runtimes import LaunchSpec, Mount, Runtime, Token, Var, get
from bench.runtimes.edf import WORKDIR

PORT_BASE = 20000  # rendezvous ports 20000-29999 (job id % 1000 x 10 + run index): below Linux's ephemeral range
SLURM_LOG = "slurm-%j.log"
SCRIPT_NAME = "job.sbatch"
LIB_DIR = ".lib"  # <sweep>/.lib: the batch scripts' bookkeeping (bench/schema.py, bench/launch/jobrecord.py)
# Slurm directive values we pass through; anything else (spaces, quotes, newlines) is refused.
_DIRECTIVE_VALUE = re.compile(r"[A-Za-z0-9_.,:@%+=&|!/-]+")


@dataclass
class LaunchOptions:
    """How every job of a sweep is launched (the part of `submit` that is not the plan)."""

    base_dir: str  # NANOCHAT_BASE_DIR on the nodes (shared filesystem)
    python: str = sys.executable  # the host interpreter for the bare runtime
    images: dict[str, str] = field(default_factory=dict)  # runtime -> image; defaults per runtime module
    mounts: tuple[Mount, ...] = ()  # extra bind mounts for container runtimes
    partition: str | None = None
    account: str | None = None
    constraint: str | None = None
    time: str | None = None  # Slurm time limit; None: from the estimate (x1.5, at least 30 min)
    exclusive: bool = True  # a benchmark owns its nodes
    check_images: bool = True  # False only to render scripts for images that live elsewhere (golden tests)

    def __post_init__(self):
        for name in ("partition", "account", "constraint", "time"):
            value = getattr(self, name)
            if value is not None and not _DIRECTIVE_VALUE.fullmatch(value):
                raise ConfigError(f"--{name} {value!r} holds characters Slurm directives cannot take")


@dataclass
class Run:
    """One run inside a job: its directory, runtime, launch spec and first manifest."""

    run_id: str
    run_dir: Path
    runtime: Runtime
    nodes: int
    nproc_per_node: int
    spec: LaunchSpec
    exports: dict[str, str]
    manifest: dict

    def srun_lines(self) -> list[list[Token]]:
        """srun with its options and the runtime's; the runtime's wrapper; the command (one line each)."""
        srun = ["srun", f"--nodes={self.nodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
                Var("cpus_per_node", "--cpus-per-task="), *self.runtime.srun_options(self.spec)]
        wrapped = self.runtime.wrap(self.spec)
        n = len(self.spec.command)
        assert wrapped[len(wrapped) - n:] == list(self.spec.command), "a runtime must end with the command"
        return [line for line in (srun, wrapped[:len(wrapped) - n], list(self.spec.command)) if line]


@dataclass
class Job:
    """One batch script: one run (a sweep point) or several in turn (a runtime comparison)."""

    name: str
    job_dir: Path
    nodes: int
    gpus_per_node: int
    runs: list[Run]
    directives: list[str]
    title: str
    python: str = "python3"  # the host interpreter the batch script's bookkeeping runs with
    script_name: str = SCRIPT_NAME

    @property
    def script(self) -> Path:
        return self.job_dir / self.script_name

    @property
    def lib_dir(self) -> Path:
        """Where the batch script finds its bookkeeping: the sweep directory's .lib (one copy per sweep)."""
        return self.runs[0].run_dir.parent / LIB_DIR


def build_run(sweep: Sweep, point: Point, run_dir: Path, opts: LaunchOptions, sweep_id: str) -> Run:
    """Everything one run needs, checked: an unusable image or mount fails here, before any submission."""
    runtime = get(point.runtime)
    image = runtime.resolve_image(opts.images.get(point.runtime), must_exist=opts.check_images)
    gpus = sweep.setting("device_type") != "cpu"
    train_argv = sweep.train_argv(point.batch.device_batch_size)
    workload = workloads.get(sweep.workload)  # the workload decides the command each node runs
    exports = {schema.ENV_RUN_DIR: str(run_dir), schema.ENV_BASE_DIR: opts.base_dir,
               ENV_RUNTIME: runtime.name, ENV_IMAGE: image or "",
               **workload.launch_env(opts.base_dir, sweep.gpus_per_node)}
    containerised = runtime.python is not None
    mounts = (Mount(str(run_dir.parent)), Mount(opts.base_dir), *opts.mounts) if containerised else ()
    spec = LaunchSpec(
        command=workload.launch_command(runtime.python or opts.python, point.nodes, sweep.gpus_per_node,
                                        train_argv, containerised),
        image=image, mounts=mounts, env={**exports, schema.ENV_T0: ""},  # T0 is exported just before srun
        workdir=WORKDIR if containerised else None, run_dir=str(run_dir), gpus=gpus)
    runtime.check(spec)
    manifest = {
        "run_id": point.run_id, "sweep_id": sweep_id, "workload": workload.run_workload, "runtime": runtime.name,
        "image": {"reference": image}, "nodes": point.nodes, "gpus_per_node": sweep.gpus_per_node,
        "world_size": point.ranks, "repeat": point.repeat, "config": workload.manifest_config(train_argv),
        "grad_accum": point.batch.grad_accum, "status": "pending",
    }
    return Run(point.run_id, run_dir, runtime, point.nodes, sweep.gpus_per_node, spec, exports, manifest)


def time_limit(sweep: Sweep, opts: LaunchOptions, ranks: int, runs: int) -> str:
    """--time, or 1.5x the estimate per run (at least 30 minutes each) when none is given."""
    if opts.time:
        return opts.time
    est = sweep.estimate_hours(ranks)
    minutes = 30 if est is None else max(30, math.ceil(est * 60 * 1.5))
    minutes *= runs
    return f"{minutes // 60:02d}:{minutes % 60:02d}:00"


def safe_job_name(name: str) -> str:
    """A job name Slurm directives can hold: other characters become '_' (the full name stays in run.json)."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:64]
    return cleaned or "nanochat-bench"


def directives(name: str, nodes: int, gpus_per_node: int, gpus: bool, opts: LaunchOptions, limit: str) -> list[str]:
    """#SBATCH options sorted by name, unset ones dropped (submitit's rule). No paths: the job runs in
    the directory it is submitted from, so the script needs no path that would need quoting."""
    d = {"job-name": safe_job_name(name), "nodes": str(nodes), "ntasks-per-node": "1", "time": limit,
         "output": SLURM_LOG, "partition": opts.partition, "account": opts.account,
         "constraint": opts.constraint, "gpus-per-node": str(gpus_per_node) if gpus else None,
         "exclusive": "" if opts.exclusive else None}
    return [f"--{k}={v}" if v else f"--{k}" for k, v in sorted(d.items()) if v is not None]


def make_job(name: str, job_dir: Path, sweep: Sweep, runs: list[Run], opts: LaunchOptions, title: str) -> Job:
    """A job for runs that share one allocation (all on the same node count)."""
    nodes = runs[0].nodes
    gpus = sweep.setting("device_type") != "cpu"
    limit = time_limit(sweep, opts, nodes * sweep.gpus_per_node, len(runs))
    return Job(name, job_dir, nodes, sweep.gpus_per_node, runs,
               directives(name, nodes, sweep.gpus_per_node, gpus, opts, limit), title, python=opts.python)


def ship_bookkeeping(lib_dir: Path) -> None:
    """bench/schema.py and bench/launch/jobrecord.py beside the jobs, for the host's python3 (jobrecord.py)."""
    for module in (schema, jobrecord):
        schema.write_text_atomic(lib_dir / Path(module.__file__).name, Path(module.__file__).read_text())


def write_job(job: Job, script_text: str, manifests: bool = True) -> None:
    """The launcher's run.json first (status pending; skipped for a dry run), the runtime's files (an EDF),
    the sweep's bookkeeping, then the script, each written atomically."""
    for run in job.runs:
        run.run_dir.mkdir(parents=True, exist_ok=True)
        if manifests:
            schema.update_run_json(run.run_dir, **run.manifest, launch={
                "kind": "slurm", "script": str(job.script), "rendered_at": time.time()})
        run.runtime.write_files(run.spec)
    ship_bookkeeping(job.lib_dir)
    schema.write_text_atomic(job.script, script_text)
