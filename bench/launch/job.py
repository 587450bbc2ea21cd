"""From a sweep point to what a batch script runs: the torchrun command, the runtime's launch spec,
the exported environment, the #SBATCH directives and the first run.json.

Decisions live here; bench/launch/render.py only turns them into text through the slurm/ templates.
"""

import functools
import itertools
import os
import re
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from bench import contract, netgate, sites, workloads
from bench.errors import ConfigError, RunDirError, os_reason
from bench.launch import jobrecord, rdzvport
from bench.launch.plan import TOKENS_PER_SHARD, Point, Sweep, allowance_minutes, slurm_time
from bench.provenance import ENV_IMAGE, ENV_RUNTIME
from bench.runtimes import LaunchSpec, Mount, Runtime, Token, Var, get
from bench.runtimes.base import (ENV_NAME, IMAGES_DIR, ImageStep, OptVar, expand_variables, exportable, quote_token,
                                 unset_variables)
from bench.runtimes import edf
from bench.runtimes.edf import WORKDIR
from bench.runtimes.podman import archive_holds
from bench.sites import Site
from bench.workloads.torchrun import JOIN_TIMEOUT_S

# Rendezvous ports 20000-29999, below Linux's ephemeral range: 100 per job (job id % 100), one per run in
# the job, so no two runs of one allocation (and no two recent jobs on shared nodes) share a port.
PORT_BASE = 20000
MAX_RUNS_PER_JOB = 100
SLURM_LOG = "slurm-%j.log"
SCRIPT_NAME = "job.sbatch"
LIB_DIR = ".lib"  # <sweep>/.lib: the batch scripts' bookkeeping (bench/contract/, launch/jobrecord.py, rdzvport.py)
# Slurm directive values we pass through, --constraint's operators included (a&b, a|b, [a|b], a*2, (a|b)&c, !a);
# anything else (spaces, quotes, newlines) is refused.
DIRECTIVE_CHARS = "_.,:@%+=&|!/-[]()*"
_DIRECTIVE_VALUE = re.compile(r"[A-Za-z0-9" + re.escape(DIRECTIVE_CHARS) + "]+")
OFI_HOOK = ("default", "on", "off")  # CE's aws_ofi_nccl hook: the site's default, forced on, or off
NUMA_BINDING = ("node", "socket", "exclusive")  # torchrun's --numa-binding modes (the flags add "none": no binding)
UNSET_HOST_PYTHON = ("env", "-u", "PYTHONPATH", "-u", "PYTHONHOME", "-u", "VIRTUAL_ENV")
# every srun task of a run, its per-node image step, a flow's step or a guide's shell gets the node's CPUs, as
# many as the job's smallest node has (slurm/_cpus.sh.j2): Slurm 22.05 to 23.02 does not pass the job's
# --cpus-per-task on to a step, whose task then gets one CPU
NODE_CPUS = Var("cpus_per_node", "--cpus-per-task=")
# The most CPUs a node is taken to have where nothing gives its count (no site profile; submit asks sinfo too):
# above today's largest GPU nodes (two 192-core sockets, 768 hardware threads), so a mistyped share is refused
MAX_NODE_CPUS = 1024


# What the launch exports to each run of its own; --env may not set these
SET_BY_LAUNCH = {
    contract.ENV_RUN_DIR: "each run's own directory, which its job sets (all runs would write into one); leave it out",
    contract.ENV_BASE_DIR: "the runs' NANOCHAT_BASE_DIR is the one whose staged data is checked; give --base-dir ",
    ENV_RUNTIME: "the runtime each run records, set from --runtimes; leave it out",
    ENV_IMAGE: "the image each run records, set from --image; leave it out",
    contract.ENV_T0: "the launch time each run measures its start-up from, which the launch records; leave it out",
}


def run_env_problem(name: str, value: str) -> str | None:
    """Why the runs cannot read `value` of a variable of theirs, else None (empty: `--env NAME=` unsets it)."""
    from bench.nanochat.config import FALSE_WORDS, TRUE_WORDS, bool_word

    if name == contract.ENV_VAL_FILES_K and value and not (value.isdigit() and int(value) >= 1):
        return "the last shard files kept for validation, a whole number >= 1 (leave it out: the plan chooses it)"
    if name == contract.ENV_FORCE_FLASH_SDPA and value.strip() and bool_word(value) is None:
        return f"give {'/'.join(TRUE_WORDS)} to force flash SDPA, {'/'.join(FALSE_WORDS)} not to"
    return None


def check_directive(name: str, value: str | None) -> None:
    """A value for `#SBATCH --NAME=`: sbatch would refuse every job of the sweep after it was written."""
    if value == "":  # an unset shell variable, as in --partition "$PART": no character of it is at fault
        raise ConfigError(f"--{name} '' is empty: give a value, or leave the flag out")
    if value is not None and not _DIRECTIVE_VALUE.fullmatch(value):
        raise ConfigError(f"--{name} {value!r} holds characters Slurm directives cannot take: use letters, "
                          f"digits and {DIRECTIVE_CHARS} only")


@dataclass
class LaunchOptions:
    """How every job of a sweep is launched (the part of `submit` that is not the plan)."""

    base_dir: str  # NANOCHAT_BASE_DIR on the nodes (shared filesystem)
    # --python: the host interpreter for the bare runtime and the bookkeeping; None: this one (the bare runtime's
    # of a workload with an interpreter of its own: that one, Workload.host_python)
    python: str | None = None
    images: dict[str, str] = field(default_factory=dict)  # runtime -> image; defaults per runtime module
    mounts: tuple[Mount, ...] = ()  # extra bind mounts for container runtimes
    env: dict[str, str] = field(default_factory=dict)  # --env NAME=VALUE: passed literally to every run
    ofi_hook: str = "default"  # CE / Sarus Suite: the aws_ofi_nccl hook as the site has it, or on, or off
    numa_binding: str | None = "node"  # GPU runs: torchrun binds each worker to the CPUs near its GPU
    partition: str | None = None
    account: str | None = None
    constraint: str | None = None
    exclusive: bool = True  # a benchmark owns its nodes
    cpus_per_gpu: int | None = None  # not exclusive: each GPU's CPU share (--cpus-per-gpu, the site's)
    check_images: bool = True  # False only to render scripts for images that live elsewhere (golden tests)
    site: Site | None = None  # the site's network set-up for every runtime (bench/sites); None: no set-up
    allow_network: str | None = None  # a network the gate lets through on purpose (--allow-network)

    def __post_init__(self):
        for name in ("partition", "account", "constraint"):
            check_directive(name, getattr(self, name))
        if self.ofi_hook not in OFI_HOOK:
            raise ConfigError(f"--ofi-hook {self.ofi_hook!r}: valid values are {', '.join(OFI_HOOK)}")
        if self.numa_binding is not None and self.numa_binding not in NUMA_BINDING:
            raise ConfigError(f"--numa-binding {self.numa_binding!r}: valid values are {', '.join(NUMA_BINDING)}, none")
        allowed = self.allow_network
        if allowed is not None and not (allowed.strip() and exportable(netgate.ENV_ALLOW, allowed)):
            # an empty one (an unset shell variable) would let nothing through, unseen until the runs it was for
            # stop as wrong_network; case and spaces at the ends are fine: the gate compares without them
            raise ConfigError(f"--allow-network {allowed!r}: give one network's name, as NCCL's \"Using network\" "
                              f"line has it (e.g. Socket, IB)")
        for name, value in self.env.items():
            if name in SET_BY_LAUNCH:  # exported after the launch's own value, it would replace it in every run
                why = SET_BY_LAUNCH[name] + (f"{shlex.quote(value)} instead" if name == contract.ENV_BASE_DIR else "")
                raise ConfigError(f"--env {name}={value!r}: {why}")
            if problem := run_env_problem(name, value):  # each run would stop on it at its start, on its node
                raise ConfigError(f"--env {name}={value!r}: {problem}")
            if not exportable(name, value):
                why = "a value of one line" if ENV_NAME.fullmatch(name) else \
                    f"{name!r} is no variable name: give letters, digits and _, not starting with a digit"
                raise ConfigError(f"--env {name}={value!r}: {why}")


def cpu_share(given: int | None, exclusive: bool, gpus: bool, site: Site | None, gpus_per_node: int,
              flag: str = "--cpus-per-gpu", sharing: str = "--no-exclusive") -> int | None:
    """What a GPU job sharing its nodes asks for each GPU's rank: `given` (--cpus-per-gpu), else the site's share;
    None for an exclusive job (every CPU of its nodes) or a CPU run. Without a share it would get Slurm's default,
    one CPU a task where the partition sets no DefCpuPerGPU, which torchrun, every rank's data loader and NCCL's
    threads then share: refused, as a share that would change nothing is. `flag` and `sharing` name the settings
    for the caller (submit's flags, a ReFrame partition's extras)."""
    if given is not None and given <= 0:
        raise ConfigError(f"{flag} {given}: give a number of CPUs > 0")
    if given is not None and (exclusive or not gpus):  # its own reason: a valid count told "> 0" misleads
        why = f"without {sharing} (an exclusive job has every CPU of its nodes)" if exclusive else \
            "on CPU ranks (a CPU run asks for no GPUs)"
        raise ConfigError(f"{flag} {given}: it has no effect {why}; leave it out")
    if exclusive or not gpus:
        return None
    if (share := given or (site.cpus_per_gpu if site is not None else None)) is None:
        raise ConfigError(f"{sharing}: a job sharing its nodes gets Slurm's default CPUs (one a task without the "
                          f"partition's DefCpuPerGPU), which every rank's data loader and NCCL threads would share; "
                          f"give {flag} N (a node's CPUs / its GPUs), or cpus_per_gpu in the site profile")
    if site is not None and site.cpus_per_gpu and site.gpus_per_node:  # a site's share is of a whole node's CPUs
        node = site.cpus_per_gpu * site.gpus_per_node
        refuse_over_node(share, gpus_per_node, node, f"a node of site {site.name} has {node} (cpus_per_gpu "
                         f"{site.cpus_per_gpu} x {site.gpus_per_node} GPUs, {site.source})", flag)
    else:
        refuse_over_node(share, gpus_per_node, MAX_NODE_CPUS, f"no node is taken to have more than {MAX_NODE_CPUS} "
                         f"where no site profile gives cpus_per_gpu", flag)
    return share


def numa_binding(given: str | None, exclusive: bool, gpus: bool = True, flag: str = "--numa-binding") -> str | None:
    """torchrun's --numa-binding for a GPU job: `given` (a NUMA_BINDING mode, or "none"), else node for a job that
    owns its nodes and none for one sharing them: the CPUs Slurm gives a share need not lie on its GPUs' NUMA
    nodes, where numactl would fail every worker or crowd them onto the few CPUs of the job that do. A mode given
    for CPU ranks is refused, as --cpus-per-gpu is (cpu_share): nothing would bind them, and nothing would say so.
    `flag` names the setting for the caller."""
    if given not in (None, "none") and not gpus:
        raise ConfigError(f"{flag} {given}: it has no effect on CPU ranks (it binds GPU workers to the CPUs near "
                          f"their GPU); leave it out")
    if given is None:
        return "node" if exclusive else None
    return None if given == "none" else given


def refuse_over_node(share: int, gpus_per_node: int, node: int, whose: str, flag: str = "--cpus-per-gpu") -> None:
    """A share of more CPUs than a node has (`node`, as `whose` says) makes a job sbatch refuses after the sweep was
    written: refused here, naming the most each GPU can take."""
    if shared_node_cpus(share, gpus_per_node) > node:
        raise ConfigError(f"{flag} {share} x {gpus_per_node} GPU(s) a node asks {share * gpus_per_node} CPUs, but "
                          f"{whose}; give at most {node // gpus_per_node}")


def shared_node_cpus(share: int | None, gpus_per_node: int) -> int | None:
    """--cpus-per-task of a job sharing its nodes: the node's one task (torchrun) holds every GPU's share."""
    return share * gpus_per_node if share else None


def deadline_margin_s(time_minutes: int) -> int:
    """How long before its limit the trainer stops to checkpoint: a tenth, between 30 s and 10 min."""
    return min(600, max(30, time_minutes * 6))


def join_timeout_s(time_minutes: int) -> int:
    """How long a run's nodes wait for each other: JOIN_TIMEOUT_S, less in a run too short for it, so that a stuck
    node fails the rendezvous, naming it, before the run's limit (and the trainer's margin) makes it a timeout."""
    return min(JOIN_TIMEOUT_S, time_minutes * 60 - deadline_margin_s(time_minutes))


@dataclass
class Run:
    """One run inside a job: its directory, runtime, launch spec and first manifest."""

    run_id: str
    run_dir: Path
    runtime: Runtime
    nodes: int
    nproc_per_node: int
    spec: LaunchSpec
    manifest: dict
    time_minutes: int  # this run's own limit: srun --time, and the trainer's deadline before it

    @property
    def deadline_margin_s(self) -> int:
        return deadline_margin_s(self.time_minutes)

    def srun_lines(self) -> list[list[Token]]:
        """srun with its options and the runtime's; the runtime's wrapper; the command (one line each).
        -l -u: rank-labelled, unbuffered output; --time: this run's limit, so one run that hangs cannot
        eat the allocation of a runtime comparison."""
        srun = ["srun", "-l", "-u", f"--nodes={self.nodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
                f"--time={self.time_minutes}", NODE_CPUS,
                *self.runtime.srun_options(self.spec)]
        if self.runtime.python is not None:  # a host venv's or module's Python paths must not reach the image
            srun = [*UNSET_HOST_PYTHON, *srun]
        wrapped = self.runtime.wrap(self.spec)
        n = len(self.spec.command)
        assert wrapped[len(wrapped) - n:] == list(self.spec.command), "a runtime must end with the command"
        return [line for line in (srun, wrapped[:len(wrapped) - n], list(self.spec.command)) if line]

    @property
    def image_step(self) -> ImageStep | None:
        return self.runtime.image_step(self.spec)

    def image_lines(self) -> list[list[Token]]:
        """The image step as the batch script runs it: one srun task on every node of the run (a per-node step;
        --kill-on-bad-exit: one node that fails stops the others at once; --time: the job's allowance for it, so a
        node whose engine hangs, e.g. on a storage lock, cannot eat the allocation; the node's CPUs, as every step
        asks them, for unpacking and converting the image), else once on the batch host."""
        step = self.image_step
        if step is None:
            return []
        command = ["bash", str(self.run_dir.parent / LIB_DIR / step.script), *step.args]
        if not step.per_node:
            return [command]
        return [["srun", f"--nodes={self.nodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
                 f"--time={IMAGE_STEP_MINUTES}", NODE_CPUS], command]


@dataclass
class Job:
    """One batch script: one run (a sweep point) or several in turn (a runtime comparison)."""

    name: str
    job_dir: Path
    nodes: int
    runs: list[Run]
    directives: list[str]
    title: str
    python: str = "python3"  # the host interpreter the batch script's bookkeeping runs with
    script_name: str = SCRIPT_NAME
    # what its workload reads besides the shards and tokenizer: (what, the `nanochat-bench` arguments that stage it),
    # which the interactive guide stages before its runs (a batch job reads it staged: submit checks it)
    staging: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # its workload runs from an image of its own (nntile's), which holds nanochat-bench without its dependencies: the
    # interactive guide's `nanochat-bench` steps (data, tokenizer, staging) run with the host's Python, not in it
    bench_on_host: bool = False

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
    gpus = sweep.gpus_used
    workload = workloads.get(sweep.workload)  # the workload decides the command each node runs
    # Literal values, passed by each runtime's own mechanism: a variable the image also sets must not win.
    env = {contract.ENV_RUN_DIR: str(run_dir), contract.ENV_BASE_DIR: opts.base_dir, ENV_RUNTIME: runtime.name,
           ENV_IMAGE: image or "", **(edf.TORCH_ENV if gpus else {}), **dict(point.env),
           **workload.launch_env(opts.base_dir, sweep.gpus_per_node if gpus else 0), **opts.env}
    containerised = runtime.python is not None
    made = runtime.sweep_image(image, run_dir.parent / IMAGES_DIR)  # a registry image made into a file once per sweep
    mounts = (Mount(str(run_dir.parent)), Mount(opts.base_dir), *opts.mounts) if containerised else ()
    if containerised:  # what the workload's flags name besides, where no mount holds it yet
        mounts += tuple(Mount(path, readonly=True) for path in workload.read_paths(sweep.settings)
                        if not any(Path(path).is_relative_to(m.src) for m in mounts))
    deadline = [Var("run_deadline", workload.deadline_flag)] if workload.deadline_flag else []
    resume = [OptVar("resume_step", workload.resume_flag)] if workload.resume_flag else []  # a resubmitted timeout
    argv = [*point.train_argv, *deadline, *resume]
    python = runtime.python or workload.host_python(opts.python)
    spec = LaunchSpec(
        command=workload.launch_command(python, point.nodes, sweep.gpus_per_node, argv, containerised,
                                        opts.numa_binding if gpus else None, join_timeout_s(point.time_minutes)),
        image=made or image, mounts=mounts, env=env, workdir=WORKDIR if containerised else None,
        run_dir=str(run_dir), gpus=gpus, ofi_hook=opts.ofi_hook, image_source=image if made else None,
        image_archive=image_archive(opts, runtime.name, made or image))
    site = None
    if opts.site is not None:
        spec = sites.apply(opts.site, runtime.name, spec)
        site = sites.record(opts.site, runtime.name, spec)
    if opts.allow_network and gpus:
        spec = replace(spec, env={**spec.env, netgate.ENV_ALLOW: opts.allow_network})
    spec = unset_empty(spec, {*opts.env, *dict(point.env)})
    runtime.check(spec)
    manifest = {
        "run_id": point.run_id, "sweep_id": sweep_id, "workload": workload.run_workload, "runtime": runtime.name,
        "image": {"reference": image}, "nodes": point.nodes, "gpus_per_node": sweep.gpus_per_node,
        "world_size": point.ranks, "repeat": point.repeat, "scaling": point.scaling,
        "config": workload.manifest_config(list(point.train_argv)), **dict(point.plan.manifest),
        "val_files_k": point.val_files_k, "ofi_hook": opts.ofi_hook if runtime.ofi_hook else None,
        "site": site, "status": "pending",
    }
    return Run(point.run_id, run_dir, runtime, point.nodes, sweep.gpus_per_node, spec, manifest,
               point.time_minutes)


def check_allow_network(opts: LaunchOptions, runs: list[Run]) -> None:
    """--allow-network where the network gate judges none of `runs` is refused, as --cpus-per-gpu on CPU ranks is: it
    would let nothing through, and nothing would say so. The gate judges a GPU run across nodes whose job expects a
    network (bench/netgate.py check), so the runs as built, the site's set-up and --env applied, decide."""
    judged = [r for r in runs if r.spec.gpus and r.nodes > 1 and r.spec.env.get(netgate.ENV_EXPECT)]
    if not opts.allow_network:
        check_network_forced_away(opts, judged)
        return
    if judged:
        check_forced_network(opts, judged)
        return
    if not any(r.spec.gpus for r in runs):
        why = "CPU ranks talk over gloo, and the gate judges only the network NCCL chooses between GPU nodes"
    elif all(r.nodes == 1 for r in runs):
        why = "every run is on one node, where NCCL uses no network between nodes and the gate judges nothing"
    elif opts.site is None:
        why = "without --site no network is expected between nodes, so no run is stopped for its network"
    elif not opts.site.nccl_net:
        why = f"site {opts.site.name} gives no nccl_net ({opts.site.source}), so no run is stopped for its network"
    else:
        why = f"--env {netgate.ENV_EXPECT}= unsets the network site {opts.site.name} expects, so the gate is off"
    raise ConfigError(f"--allow-network {opts.allow_network}: it has no effect here: {why}; leave it out")


def check_network_forced_away(opts: LaunchOptions, judged: list[Run]) -> None:
    """NCCL_NET naming another network than the one the gate expects, without --allow-network: NCCL takes that
    network or fails, and the gate stops each of the `judged` runs as wrong_network once its nodes are allocated."""
    for run in judged:
        net, expected = run.spec.env.get("NCCL_NET"), run.spec.env[netgate.ENV_EXPECT]
        if net and not netgate.same_network(net, expected):
            source = f"--env NCCL_NET={net}" if "NCCL_NET" in opts.env or opts.site is None else \
                f"NCCL_NET={net!r} (the set-up of site {opts.site.name})"
            raise ConfigError(f"{source}: NCCL takes {net} between nodes, where {expected} is expected, so "
                              f"{run.run_id} would stop as wrong_network; to measure {net}, add --allow-network "
                              f"{shlex.quote(net.strip())}, or leave NCCL_NET out")


def check_forced_network(opts: LaunchOptions, judged: list[Run]) -> None:
    """--allow-network X where every judged run's NCCL_NET names another network (alps forces "AWS Libfabric"):
    NCCL takes that network or fails, never X, so the runs would measure the site's network as if X was asked."""
    allowed = opts.allow_network
    forced = [r.spec.env.get("NCCL_NET") for r in judged]
    if not all(net and not netgate.same_network(net, allowed) for net in forced):
        return
    source = f"the set-up of site {opts.site.name}" if opts.site and "NCCL_NET" not in opts.env else "--env"
    raise ConfigError(f"--allow-network {allowed}: it has no effect here: NCCL_NET={forced[0]!r} ({source}) makes "
                      f"NCCL take that network or fail, never {allowed}; to measure {allowed}, pass "
                      f"{shlex.quote(f'--env=NCCL_NET={allowed.strip()}')}, or --env NCCL_NET= to let NCCL choose")


def unset_empty(spec: LaunchSpec, given: set[str]) -> LaunchSpec:
    """`--env NAME=` (a `given` name) unsets NAME, under every runtime alike: CE reads an empty EDF value as unset
    and cannot set one empty, so no runtime sets it empty; each starts the command under `env -u NAME`."""
    unset = tuple(sorted(name for name in given if spec.env.get(name) == ""))
    if not unset:
        return spec
    return replace(spec, env={k: v for k, v in spec.env.items() if k not in unset}, unset=unset)


def image_archive(opts: LaunchOptions, runtime: str, image: str | None = None) -> str | None:
    """The site's image archive this runtime's nodes load (podman), checked to exist unless images live elsewhere;
    None, with a note, where it does not hold `image` (another --image): each node would load it for nothing."""
    archive = opts.site.image_archives.get(runtime) if opts.site is not None else None
    if archive is None:
        return None
    expanded = os.path.expanduser(expand_variables(archive))
    if not opts.check_images:  # the images live elsewhere: this machine cannot tell what the archive holds
        return expanded
    given = f"{archive!r}, " if expanded != archive else ""  # the path looked for, then the profile's template
    what = (f"site {opts.site.name}: the {runtime} image archive {expanded!r} ({given}[images.{runtime}] archive in "
            f"{opts.site.source})")
    # as an image is checked (Runtime.resolve_image): a missing file names the variables it left unset
    if not os.path.isfile(expanded) and (unset := unset_variables(expanded)):
        raise ConfigError(f"{what} names the unset variable(s) {', '.join(unset)}; set them or change the profile")
    if not os.path.isfile(expanded):
        raise ConfigError(f"{what} does not exist; make it with `podman save -o FILE IMAGE` (containers/README.md) "
                          f"or change the profile")
    if os.path.getsize(expanded) == 0:  # as an empty .sqsh or .sif is refused
        raise ConfigError(f"{what} is empty (0 bytes), as an interrupted `podman save` leaves it; make it again with "
                          f"`podman save -o FILE IMAGE` (containers/README.md)")
    if image and archive_holds(expanded, image) is False:
        _note_once(f"note: {what} does not hold {image}: the nodes load nothing from it, and a node without "
                   f"{image} in its {runtime} storage stops the run at once, naming it")
        return None
    return expanded  # as images are: the job's shell quotes it, so a `${SCRATCH}` left there would stay literal


@functools.cache
def _note_once(line: str) -> None:
    """A note on every run of a sweep said once."""
    print(line)


def safe_job_name(name: str) -> str:
    """A job name Slurm directives can hold: other characters become '_' (the full name stays in run.json)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:64] or "nanochat-bench"


def directives(name: str, nodes: int, gpus_per_node: int, gpus: bool, opts: LaunchOptions, minutes: int) -> list[str]:
    """#SBATCH options sorted by name, unset ones dropped (submitit's rule). No paths: the job runs in
    the directory it is submitted from, so the script needs no path that would need quoting."""
    d = {"job-name": safe_job_name(name), "nodes": str(nodes), "ntasks-per-node": "1",
         "time": slurm_time(minutes), "output": SLURM_LOG, "partition": opts.partition, "account": opts.account,
         "constraint": opts.constraint, "gpus-per-node": str(gpus_per_node) if gpus else None,
         "exclusive": "" if opts.exclusive else None,
         # a shared node's CPUs for its one task: its GPUs' share (not --cpus-per-gpu, which srun's -c would clash with)
         "cpus-per-task": str(shared_node_cpus(opts.cpus_per_gpu, gpus_per_node)) if gpus and opts.cpus_per_gpu
         else None,
         # a requeued job would run again into the same run directories, on top of the first attempt
         "no-requeue": ""}
    return [f"--{k}={v}" if v else f"--{k}" for k, v in sorted(d.items()) if v is not None]


def interleaved(runs: list[Run], runtimes: list[str]) -> list[Run]:
    """Runs of one allocation in comparison order: repeat 1 of every runtime, then repeat 2, ... (A B C A B C),
    so slow drift of the nodes or the filesystem hits every runtime alike."""
    return sorted(runs, key=lambda r: (r.manifest["repeat"], runtimes.index(r.runtime.name)))


def make_job(name: str, job_dir: Path, sweep: Sweep, runs: list[Run], opts: LaunchOptions, title: str,
             setup_minutes: int = 0) -> Job:
    """A job for runs that share one allocation (all on the same node count), in the order given. Its
    time limit is the sum of its runs' limits, plus a minute each for the bookkeeping around them, plus
    `setup_minutes` for a step of its own before them (a flow's tokenizer)."""
    if len(runs) > MAX_RUNS_PER_JOB:
        raise ConfigError(f"{len(runs)} runs in one allocation; at most {MAX_RUNS_PER_JOB} (fewer --repeats or "
                          f"--runtimes per job)")
    nodes = runs[0].nodes
    minutes = setup_minutes + job_minutes(runs)
    return Job(name, job_dir, nodes, runs, directives(name, nodes, sweep.gpus_per_node, sweep.gpus_used, opts, minutes),
               title, python=opts.python or sys.executable, staging=staging_steps(sweep),
               bench_on_host=workloads.get(sweep.workload).image_recipe is not None)


def staging_steps(sweep: Sweep) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(what, the `nanochat-bench` arguments that stage it) for what the sweep's workload reads besides the shards
    and the tokenizer (its `staging`: nntile's `data bin`, base_eval's eval bundle), none when it reads nothing else."""
    workload = workloads.get(sweep.workload)
    return ((workload.staging[1], workload.staging_command(sweep.settings)),) if workload.staging else ()


@dataclass(frozen=True)
class Naming:
    """How one caller names and titles its jobs (str.format fields: sweep_id, run_id, runs, nodes)."""

    one_name: str = "{sweep_id}-{run_id}"
    one_title: str = "sweep {sweep_id}, run {run_id}"
    compare_name: str = "{sweep_id}-compare-n{nodes}"
    compare_title: str = "sweep {sweep_id}, runtimes compared on {nodes} node(s): {runs}"


def assemble(sweep: Sweep, opts: LaunchOptions, sweep_dir: Path, *, compare: bool = False,
             naming: Naming = Naming(), note: Callable[[str], None] = print) -> list[Job]:
    """The jobs of a sweep, every run built and checked: the one assembly of submit, render, the ReFrame
    case and the golden test. One job per point, or with `compare` one per node count running every
    runtime in turn (in <sweep_dir>/jobs/compare-n<N>/). An impossible point is left out with a note
    saying why; when no point is possible, a ConfigError names each reason."""
    sweep_dir = Path(sweep_dir).absolute()
    sweep_id = sweep_dir.name
    if opts.site is None and sweep.gpus_used and any(p.nodes > 1 for p in sweep.points()):
        note("warning: no --site: jobs across nodes get no network set-up, and a run on the wrong network "
             "(TCP sockets) is not stopped; pass --site alps, --site infiniband or --site FILE.toml")
    runs: list[Run] = []
    for point in sweep.points():
        if not point.possible:
            note(f"skipping {point.run_id}: {point.reason}")
            continue
        runs.append(build_run(sweep, point, sweep_dir / point.run_id, opts, sweep_id))
    if not runs:
        reasons = sorted({p.reason for p in sweep.points()})
        raise ConfigError(f"no point of this sweep is possible: {'; '.join(reasons)} (nanochat-bench plan shows them)")
    check_allow_network(opts, runs)

    def job(group: list[Run], job_dir: Path, name: str, title: str) -> Job:
        fields = {"sweep_id": sweep_id, "run_id": group[0].run_id, "runs": ", ".join(r.run_id for r in group),
                  "nodes": group[0].nodes}
        return make_job(name.format(**fields), job_dir, sweep, group, opts, title.format(**fields))

    limit = site_partition(opts.site, opts.partition)
    if not compare:
        for r in runs:
            check_partition(limit, [r])
        return [job([r], r.run_dir, naming.one_name, naming.one_title) for r in runs]
    jobs = []
    for nodes in sorted({r.nodes for r in runs}):
        parts = split_for_partition(limit, interleaved([r for r in runs if r.nodes == nodes], sweep.runtimes))
        if len(parts) > 1:
            note(f"the comparison on {nodes} node(s) is split into {len(parts)} jobs to fit the partition's "
                 f"{limit.name} limit of {slurm_time(limit.max_time_s // 60)}")
        for i, part in enumerate(parts, 1):
            suffix = f"-part{i}" if len(parts) > 1 else ""
            jobs.append(job(part, sweep_dir / "jobs" / f"compare-n{nodes}{suffix}", naming.compare_name + suffix,
                            naming.compare_title))
    return jobs


def site_partition(site, partition: str | None = None):
    """A site's partition by name, else its default one (None: no site, or neither names one). A list (`debug,normal`,
    as sbatch takes it: the job starts in one that takes it) is checked against the most its partitions allow."""
    name = partition or (site.default_partition if site is not None else None)
    if site is None or not name:
        return None
    listed = [site.partition(n) for n in name.split(",")]  # an unknown partition is an error naming the known ones
    if len(listed) == 1:
        return listed[0]
    nodes = [p.max_nodes for p in listed]
    return replace(listed[0], name=name, max_time_s=max(p.max_time_s for p in listed),
                   max_nodes=None if None in nodes else max(nodes))


def over_partition(limit, minutes: int) -> str:
    """'' when a job of `minutes` fits the partition's time limit, else what is over what."""
    if limit is None or minutes * 60 <= limit.max_time_s:
        return ""
    return f"its time limit {slurm_time(minutes)} is over partition {limit.name}'s {slurm_time(limit.max_time_s // 60)}"


# The image step runs outside a run's own srun limit, so the job gives it time of its own: on the test cluster,
# two nodes loading the 2.1 GB test image at once took 86 s (tests/integration/slurm/test_slurm_podman_images.py);
# NGC-based images are ~10x that, on nodes that read and write faster than this 2-core test machine.
IMAGE_STEP_MINUTES = 10


def job_minutes(runs: list[Run]) -> int:
    """A minute each for the bookkeeping around a run, and time for its image step where it has one."""
    return sum(run_job_minutes(r.time_minutes, r.image_step is not None) for r in runs)


def run_job_minutes(time_minutes: int, image_step: bool = False) -> int:
    """What one run adds to its job's time limit: its own limit, a minute of bookkeeping, its image step's time."""
    return time_minutes + 1 + (IMAGE_STEP_MINUTES if image_step else 0)


def default_image_step(runtime: str) -> bool:
    """Whether a run under `runtime` has an image step with the image it takes without --image (plan takes no launch
    flags), made into a file once per sweep where the runtime does that, as build_run makes it."""
    rt = get(runtime)
    image = rt.default_image
    made = rt.sweep_image(image, Path(IMAGES_DIR))
    return rt.image_step(LaunchSpec((), image=made or image, image_source=image if made else None)) is not None


# The interactive guide's own steps before training, estimated as the plan estimates a run (allowance_minutes).
# Assumptions, not measurements, like the plan's --assume-mfu: upstream's FineWeb-Edu shards are ~100 MB each
# and hold ~250M characters (TOKENS_PER_SHARD x 4.8); a download is taken at 20 MB/s, and tokenizer training
# (`tokenizer train`, at most 2e9 characters) at 2M characters/s.
SHARD_MB = 100
DOWNLOAD_MB_PER_S = 20
CHARS_PER_SHARD = TOKENS_PER_SHARD * 4.8
TOKENIZER_MAX_CHARS = 2e9
TOKENIZER_CHARS_PER_S = 2e6


def tokenizer_minutes(shards: int | None) -> int:
    """The time `tokenizer train` is given on `shards` shards (None: not known, so the most it reads), as the plan
    gives a run."""
    chars = TOKENIZER_MAX_CHARS if shards is None else min(shards * CHARS_PER_SHARD, TOKENIZER_MAX_CHARS)
    return allowance_minutes(chars / TOKENIZER_CHARS_PER_S / 3600)


def interactive_minutes(job: Job, shards: int) -> int:
    """The salloc time of the interactive guide: its data download and tokenizer training, each given time as
    the plan gives a run, the image step the guide runs before them where the runs have one, then the job's own
    runs."""
    download_h = shards * SHARD_MB / DOWNLOAD_MB_PER_S / 3600
    image_step = IMAGE_STEP_MINUTES if job.runs[0].image_step else 0
    return allowance_minutes(download_h) + tokenizer_minutes(shards) + image_step + job_minutes(job.runs)


RUN_TOO_LONG = "pass a shorter --time, fewer --num_iterations, or another --partition"


def check_partition(limit, runs: list[Run], subject: str | None = None, hint: str = RUN_TOO_LONG,
                    setup_minutes: int = 0) -> None:
    """A job that the partition would refuse (too long, too many nodes) fails here, naming the limit."""
    refusal = partition_refusal(limit, runs[0].nodes, setup_minutes + job_minutes(runs), hint)
    if refusal:
        raise ConfigError(f"{subject or runs[0].run_id}: {refusal}")


def partition_refusal(limit, nodes: int, minutes: int, hint: str = RUN_TOO_LONG) -> str:
    """'' when a job of `nodes` and `minutes` fits the partition, else why Slurm would refuse it and what to do."""
    if limit is None:
        return ""
    if limit.max_nodes and nodes > limit.max_nodes:
        return f"{nodes} nodes, but partition {limit.name} takes at most {limit.max_nodes} (choose another --partition)"
    over = over_partition(limit, minutes)
    return f"{over}; {hint}" if over else ""


def split_for_partition(limit, runs: list[Run]) -> list[list[Run]]:
    """A comparison's runs (interleaved) in consecutive jobs, each within the partition's time limit (one job without
    one). A job holds whole rounds, every runtime's run of one repeat, where a round fits one: the runtimes it
    compares then ran on the same nodes; a round over the limit alone is split run by run."""
    if limit is None:
        return [runs]
    parts: list[list[Run]] = [[]]
    for _, whole in itertools.groupby(runs, key=lambda r: r.manifest["repeat"]):
        whole = list(whole)
        for piece in [whole] if not over_partition(limit, job_minutes(whole)) else [[r] for r in whole]:
            if parts[-1] and over_partition(limit, job_minutes(parts[-1] + piece)):
                parts.append([])
            parts[-1].extend(piece)
    for part in parts:
        check_partition(limit, part)
    return parts


IMAGE_SCRIPTS = ("image-podman.sh", "image-once.sh")  # slurm/: the runtimes' image steps (bench/runtimes/*)


def ship_bookkeeping(lib_dir: Path) -> None:
    """bench/contract/, launch/jobrecord.py and launch/rdzvport.py beside the jobs, for the host's python3, and
    the image steps' scripts, for its bash."""
    from bench.launch.render import template_dirs  # render imports this module

    contract.ship(lib_dir)
    folder = template_dirs()[0]
    for source in (Path(jobrecord.__file__), Path(rdzvport.__file__), *(folder / name for name in IMAGE_SCRIPTS)):
        contract.write_text_atomic(lib_dir / source.name, source.read_text())


def write_job(job: Job, script_text: str, manifests: bool = True) -> None:
    """The launcher's run.json first (status pending; skipped for a dry run), the runtime's files (an EDF),
    the sweep's bookkeeping, then the script, each written atomically. A directory that cannot be written
    (an --out that is a file, no permission, a full disk) is one RunDirError naming it. A run directory whose
    run has started or ended is refused: a pending record over it would hide that run's outcome."""
    for run in job.runs if manifests else ():
        try:
            ran = contract.read_run_json(run.run_dir).get("status", "pending")
        except (OSError, ValueError):
            continue  # no readable record to keep (none, not a directory, torn): written anew below
        if ran != "pending":
            raise RunDirError(f"{run.run_dir} holds a run that has already started (status {ran}); "
                              "choose another --out (or --name)")
    try:
        for run in job.runs:
            run.run_dir.mkdir(parents=True, exist_ok=True)
            if manifests:
                contract.update_run_json(run.run_dir, **run.manifest, launch={
                    "kind": "slurm", "script": str(job.script), "rendered_at": time.time(),
                    "command": [quote_token(t) for line in run.srun_lines() for t in line]})
            run.runtime.write_files(run.spec)
        ship_bookkeeping(job.lib_dir)
        contract.write_text_atomic(job.script, script_text)
    except OSError as e:
        where = f" ({e.filename})" if e.filename else ""
        raise RunDirError(f"cannot write the job into {job.job_dir}: {os_reason(e)}{where}; "
                          "choose another --out (or --name)") from None
