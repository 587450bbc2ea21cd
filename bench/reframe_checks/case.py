"""One ReFrame test case -> the nanochat-bench job it runs: planned, rendered and written by the launch layer.

A test case (workload, runtime, nodes, scaling, depth, trainer flags) and its partition's settings become a
one-point Sweep of that workload (pre-training, or a later speedrun stage: bench/workloads); the workload
plans the point (ranks, batch arithmetic, K, time limit) through bench/launch/plan.py,
bench/launch/job.py builds the run and bench/launch/render.py writes the same job.sbatch that
`nanochat-bench submit` would. ReFrame's own job then runs that script with `bash` inside its
allocation, so the srun/torchrun line exists once, in slurm/*.j2.

A partition's settings live in its `extras` under one key, so a site's configuration shared with other
checks stays readable:

    'extras': {'nanochat_bench': {'gpus_per_node': 4, 'base_dir': '$SCRATCH/nanochat',
                                  'images': {'ce': '$SCRATCH/ce-images/nanochat-bench+latest.sqsh'}}}
"""

import sys
from dataclasses import dataclass, field, fields
from pathlib import Path

from bench import paths, runtimes, sites, workloads
from bench.errors import ConfigError, RuntimeConfigError
from bench.launch.job import (NUMA_BINDING, OFI_HOOK, Job, LaunchOptions, Naming, assemble, cpu_share, job_minutes,
                              numa_binding, write_job)
from bench.launch.plan import DataShape, Point, Sweep, parse_minutes, parse_train_args
from bench.launch.render import render_sbatch
from bench.nanochat.config import check_depth_limit
from bench.runtimes import Mount
from bench.runtimes.base import expand_variables, unset_variables

EXTRAS_KEY = "nanochat_bench"
# #SBATCH lines of the rendered job that ReFrame's job must ask for too (a shared node's CPUs: its GPUs' share; no
# requeue, which would rerun the script into the same run directory); the others (name, output, time, tasks per
# node, exclusive, partition, account) are ReFrame's own settings.
PASSED_DIRECTIVES = ("--nodes=", "--gpus-per-node=", "--cpus-per-task=", "--no-requeue")
RENDERED_BY = "reframe"  # the comment in job.sbatch: "Rendered by `nanochat-bench reframe`"
CHOICES = {"ofi_hook": OFI_HOOK, "numa_binding": (*NUMA_BINDING, "none")}  # submit's --ofi-hook, --numa-binding
# keys whose "" is no value, as submit refuses an empty --time, --base-dir or --site (an unset variable's), not the
# default it would silently stand for -> (what to give, what leaving the key out means)
NONEMPTY = {"time": ("a Slurm time (MM, HH:MM:SS or D-HH:MM:SS)", "the planner's estimate"),
            "base_dir": ("a directory", "$NANOCHAT_BASE_DIR, else ~/.cache/nanochat"),
            "site": (f"a site profile ({', '.join(sites.names())}, or FILE.toml)", "none")}
# submit's flags, as the shared planner's errors name them -> how a check's case is given the same
AS_THE_CHECK_SETS = (("--train-arg ", "-S train_args="), ("--scaling ", "-n %scaling="),
                     ("--env ", f"extras['{EXTRAS_KEY}'].env "),
                     ("--allow-network ", f"extras['{EXTRAS_KEY}'].allow_network "),
                     ("--base-dir ", f"extras['{EXTRAS_KEY}'].base_dir "))


@dataclass
class Site:
    """A partition's `extras['nanochat_bench']`: how nanochat-bench runs there (README, "ReFrame")."""

    gpus_per_node: int  # ranks per node (GPUs; on a CPU partition the processes per node)
    base_dir: str = ""  # NANOCHAT_BASE_DIR on the nodes; default $NANOCHAT_BASE_DIR, else ~/.cache/nanochat
    python: str = ""  # host interpreter of the bare runtime and the bookkeeping; default ReFrame's own
    images: dict = field(default_factory=dict)  # runtime -> image (defaults per runtime module)
    mounts: list = field(default_factory=list)  # SRC[:DST[:ro]] for container runtimes
    env: dict = field(default_factory=dict)  # NAME -> VALUE passed literally into every run
    train: list = field(default_factory=list)  # KEY=VALUE trainer flags of the partition (device_type=cpu)
    time: str = ""  # a fixed time limit per run instead of the planner's estimate
    exclusive: bool = True
    cpus_per_gpu: int = 0  # exclusive False, on GPUs: each GPU's CPU share, as submit's --cpus-per-gpu (0: not given)
    ofi_hook: str = "default"
    numa_binding: str = ""  # "none" leaves CPU binding to the OS; not given: node, none with exclusive False
    nccl_net: str = ""  # the network NCCL must choose between nodes (run.json network.net), checked by sanity
    references: str = ""  # a references file for this partition's checks (the check's own variable wins)
    site: str = ""  # a site profile (bench/sites: alps, FILE.toml): the fast network's set-up, as submit's --site
    allow_network: str = ""  # a network the site's gate lets through on purpose (NCCL_NET=Socket), as --allow-network

    @classmethod
    def from_extras(cls, extras: dict, partition: str) -> "Site":
        where = f"partition {partition}: extras['{EXTRAS_KEY}']"
        data = extras.get(EXTRAS_KEY)
        if not isinstance(data, dict):
            raise ConfigError(f"{where} is missing; it needs at least gpus_per_node (README, \"ReFrame\")")
        valid = {f.name: f for f in fields(cls)}
        unknown = sorted(set(data) - set(valid))
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; valid: {', '.join(valid)}")
        if "gpus_per_node" not in data:
            raise ConfigError(f"{where}: gpus_per_node is required (ranks per node)")
        for name, value in data.items():
            want = valid[name].type  # a plain class: int, str, dict, list or bool
            if not isinstance(value, want) or (want is int and isinstance(value, bool)) or not all_text(value):
                what = f"{want.__name__} of text" if want in (list, dict) else want.__name__
                raise ConfigError(f"{where}: {name} must be a {what}, got {value!r}")
        known = runtimes.names()
        unknown = sorted(set(data.get("images", {})) - set(known))
        if unknown:  # as submit's --image: an image for no runtime is a typo, not something to leave unused
            raise ConfigError(f"{where}: images names no runtime {', '.join(unknown)}; valid: {', '.join(known)}")
        for name, (what, default) in NONEMPTY.items():
            if name in data and not data[name].strip():
                raise ConfigError(f"{where}: {name} {data[name]!r} is empty (an unset variable?); give {what}, or "
                                  f"leave it out for {default}")
        try:  # here, or Sweep would name submit's --time
            parse_minutes(data.get("time", "1"))
        except ConfigError:
            raise ConfigError(f"{where}: time {data['time']!r} is not a Slurm time (MM, HH:MM:SS or D-HH:MM:SS)") \
                from None
        for name, valid in CHOICES.items():  # here, naming the extras' key: LaunchOptions would name submit's flag
            if name in data and data[name] not in valid:
                raise ConfigError(f"{where}: {name} {data[name]!r} is not one of: {', '.join(valid)}")
        try:  # here, naming the key: the planner would blame submit's --train-arg (or the check's train_args)
            parse_train_args(data.get("train", []))
        except ConfigError as e:
            raise ConfigError(f"{where}: {renamed(e, (('--train-arg ', 'train item '),))}") from None
        if data["gpus_per_node"] < 1:  # 0 would reach the batch arithmetic as a division by zero
            raise ConfigError(f"{where}: gpus_per_node must be at least 1, got {data['gpus_per_node']}")
        if data.get("cpus_per_gpu", 1) < 1:  # 0 is the field's "not given", so the site's share would replace it
            raise ConfigError(f"{where}: cpus_per_gpu must be at least 1 (CPUs each GPU's rank gets), got "
                              f"{data['cpus_per_gpu']}; leave it out for the site profile's")
        return cls(**data)

    def references_file(self, variable: str) -> str:
        """The check's `references` (-S references=FILE, $NANOCHAT_BENCH_REFERENCES), else the partition's (its
        $VARIABLES expanded, as the partition's other paths)."""
        return variable or (expanded(self.references, "references") if self.references else "")


@dataclass
class Case:
    """A test case as the check's parameters and variables give it."""

    runtime: str
    nodes: int
    scaling: str
    depth: int
    train_args: list[str]  # KEY=VALUE, after the partition's own
    site: Site
    sweep_id: str  # the test's unique name: the folder above the run directory
    workload: str = workloads.DEFAULT  # bench/workloads: pre-training (nanochat) or a stage (mid_train, ...)


@dataclass
class Built:
    job: Job
    point: Point
    text: str

    @property
    def run_dir(self) -> Path:
        return self.job.runs[0].run_dir

    @property
    def sweep_dir(self) -> Path:
        return self.run_dir.parent

    @property
    def minutes(self) -> int:
        """The allocation's limit: the job's own #SBATCH --time (its run, the bookkeeping and any image step)."""
        return job_minutes(self.job.runs)

    @property
    def directives(self) -> list[str]:
        return [d for d in self.job.directives if d.startswith(PASSED_DIRECTIVES)]


def all_text(value) -> bool:
    """Whether a list's items, or a dict's keys and values, are all strings (True for anything else)."""
    items = [*value.keys(), *value.values()] if isinstance(value, dict) else value if isinstance(value, list) else []
    return all(isinstance(v, str) for v in items)


def renamed(error: ConfigError, names=AS_THE_CHECK_SETS) -> ConfigError:
    """The shared planner's error with submit's flags named as the check's user sets them (-S train_args=...)."""
    text = str(error)
    for flag, name in names:
        text = text.replace(flag, name)
    error.args = (text,)  # the same error (its class and fields), worded for the check
    return error


def expanded(value: str, key: str) -> str:
    """A path of the partition's settings with $VARIABLES expanded on the host that renders the job; an empty one
    is refused as an unset one is, or `$SCRATCH/x` would become `/x`."""
    out = expand_variables(value)
    unset = unset_variables(out)
    if unset:
        raise ConfigError(f"extras['{EXTRAS_KEY}'].{key} {value!r} names the unset or empty variable(s) "
                          f"{', '.join(unset)}; set them where reframe runs")
    return out


def sweep_of(case: Case, base_dir: str, profile: sites.Site | None = None) -> Sweep:
    """The case's one-point sweep, planned for the partition's site profile as submit's --site plans it (its GPU,
    memory and device batch limits). `depth` reaches only a workload that takes it (pre-training); a later
    stage loads the checkpoint of the stage before, whose depth its parser would refuse as a flag."""
    if case.nodes < 1:  # as submit's --nodes: 0 would reach the batch arithmetic as a division by zero
        raise ConfigError(f"num_nodes={case.nodes}: must be at least 1 (-S num_nodes=N, or -P num_nodes=1,2,4)")
    train = parse_train_args([*case.site.train, *case.train_args])
    if workloads.get(case.workload).takes_depth:
        if case.depth < 1:  # the trainer would refuse it naming its own --depth
            raise ConfigError(f"depth={case.depth}: must be at least 1 (-S depth=N, or -P depth=N,M for several)")
        check_depth_limit(case.depth, "depth")  # named as the check's variable, not as the trainer's --depth
        if "depth" in train:
            raise ConfigError(f"train_args set depth={train['depth']}: depth is the check's own variable "
                              f"(-S depth=N, or -P depth=N,M for several)")
        train["depth"] = case.depth
    return Sweep([case.nodes], case.site.gpus_per_node, [case.runtime], train=train, scaling=case.scaling,
                 workload=case.workload, data=DataShape.from_dir(Path(base_dir) / paths.DATA_DIR),
                 time=case.site.time or None, base_dir=base_dir, site=profile)


def profile_of(site: Site) -> sites.Site | None:
    """The partition's site profile (extras' `site`, as submit's --site), None where it names none."""
    return sites.load(expanded(site.site, "site"), f"extras['{EXTRAS_KEY}'].site {site.site!r}") \
        if site.site else None


def options_of(site: Site, base_dir: str, dry_run: bool, gpus: bool, profile: sites.Site | None) -> LaunchOptions:
    """The launch options `submit` would build from flags, from the partition's settings (images are
    checked only for a real run: a dry run renders scripts for images that live on the cluster); `gpus`: whether
    the case's run uses the nodes' GPUs (their CPU share on a shared node); `profile`: its site profile."""
    python = expanded(site.python, "python") if site.python else sys.executable
    share = cpu_share(site.cpus_per_gpu or None, site.exclusive, gpus, profile, site.gpus_per_node,
                      f"extras['{EXTRAS_KEY}'].cpus_per_gpu", f"extras['{EXTRAS_KEY}'].exclusive False")
    binding = numa_binding(site.numa_binding or None, site.exclusive, gpus, f"extras['{EXTRAS_KEY}'].numa_binding")
    return LaunchOptions(base_dir=base_dir, python=python, images=dict(site.images),
                         mounts=tuple(Mount.parse(expanded(m, "mounts")) for m in site.mounts), env=dict(site.env),
                         ofi_hook=site.ofi_hook, numa_binding=binding,
                         exclusive=site.exclusive, cpus_per_gpu=share, check_images=not dry_run, site=profile,
                         allow_network=site.allow_network or None)


def build(case: Case, stage_dir: Path, dry_run: bool = False) -> Built:
    """Plan, render and write the case's job under `stage_dir/<sweep_id>/<run_id>/` (run.json pending,
    except in a dry run, which writes the script only). Every mistake is a ConfigError naming it."""
    base_dir = str(Path(expanded(paths.base_dir(case.site.base_dir or None), "base_dir")).absolute())
    profile = profile_of(case.site)
    try:  # the check's train_args and scaling reach the shared planner, whose errors name submit's flags
        sweep = sweep_of(case, base_dir, profile)
    except ConfigError as e:
        raise renamed(e) from None
    try:  # the launch options check the partition's env as they check submit's --env, and name that flag
        opts = options_of(case.site, base_dir, dry_run, sweep.gpus_used, profile)
    except ConfigError as e:
        raise renamed(e) from None
    naming = Naming(one_title="ReFrame check {sweep_id}, run {run_id}")
    try:
        [job] = assemble(sweep, opts, Path(stage_dir) / case.sweep_id, naming=naming, note=lambda _: None)
    except RuntimeConfigError as e:  # its hints name submit's flags; here the partition's settings hold them
        raise RuntimeConfigError(f"{e} (for ReFrame: the partition's extras['{EXTRAS_KEY}'] images/mounts)") from None
    except ConfigError as e:  # an impossible point's reason (chat_sft's target under strong scaling)
        raise renamed(e) from None
    point = sweep.points()[0]
    text = render_sbatch(job, rendered_by=RENDERED_BY)
    write_job(job, text, manifests=not dry_run)
    return Built(job, point, text)
