"""`nanochat-bench plan | submit | status | render | speedrun`: sweeps under Slurm, and a flow's stages on this
machine (speedrun), thin wrappers over bench.launch."""

import argparse
import math
import os
import re
import shlex
import sys
import time
from pathlib import Path

from bench import paths, runtimes, sites, workloads
from bench.commands import nonempty
from bench.errors import ConfigError
from bench.launch import flow as flowmod
from bench.launch import plan as planmod
from bench.launch import render, slurm, status, submit
from bench.launch.job import (MAX_NODE_CPUS, NUMA_BINDING, OFI_HOOK, LaunchOptions, Naming, assemble,
                              check_directive, cpu_share, interactive_minutes, numa_binding, over_partition,
                              refuse_over_node, shared_node_cpus, site_partition, write_job)
from bench.pairs import parse_pairs
from bench.runtimes import Mount, parse_names
from bench.workloads.nanochat import SWEEP_NUM_ITERATIONS

ENV_SITE = "NANOCHAT_BENCH_SITE"  # the site profile when --site is not given
NO_NUMA_NOTE = ("workers are not bound to their GPUs' NUMA nodes, which the job's share of CPUs need not lie on "
                "(--numa-binding node to bind them anyway)")

TRAIN_FLAGS = [("depth", int), ("device_batch_size", int), ("total_batch_size", int), ("max_seq_len", int),
               ("num_iterations", int), ("eval_every", int), ("eval_tokens", int), ("device_type", str)]


def _image_defaults() -> str:
    return "; ".join(f"{n}: {runtimes.get(n).default_image}" for n in runtimes.names() if runtimes.get(n).default_image)


def add_sweep_options(p: argparse.ArgumentParser, single_nodes: bool = False) -> None:
    g = p.add_argument_group("sweep")
    g.add_argument("--nodes", default="1", help="node count" + ("" if single_nodes else "s, comma-separated")
                   + " (default: 1)" + ("" if single_nodes else "; e.g. 1,2,4,8"))
    g.add_argument("--gpus-per-node", type=int, default=4, help="GPUs (ranks) per node (default: 4)")
    g.add_argument("--runtimes", default="bare", help=f"comma-separated, of: {', '.join(runtimes.names())} "
                   "(default: bare)")
    g.add_argument("--repeats", type=int, default=1, help="runs per point (default: 1)")
    g.add_argument("--scaling", choices=planmod.SCALING_MODES, default="weak",
                   help="weak: each rank keeps device batch x sequence, total batch grows with the ranks; "
                        "strong: --total_batch_size fixed, gradient accumulation makes up the rest (default: weak)")
    g.add_argument("--data-dir", default=None, type=nonempty("--data-dir", "a directory"),
                   help="the shards, to choose the validation files K of each point "
                   "(default: base_data/ under --base-dir or $NANOCHAT_BASE_DIR, when it holds shards)")
    g.add_argument("--row-groups", type=int, default=None, metavar="N",
                   help="row groups per shard, when the data is not on this host (with --shards)")
    g.add_argument("--shards", type=int, default=None, metavar="M", help="shard files there (with --row-groups)")
    g.add_argument("--base-dir", default=None, type=nonempty("--base-dir", "a directory"),
                   help="NANOCHAT_BASE_DIR on the nodes (default: $NANOCHAT_BASE_DIR "
                   "or ~/.cache/nanochat); must be on a shared filesystem (a stage after pre-training refuses a "
                   "multi-node point otherwise)")
    g.add_argument("--time", default=None, help="time limit of each run, Slurm's HH:MM:SS (default: from the "
                   "estimate with a quarter and 10 min to spare; 30 min where nothing can be estimated)")
    g.add_argument("--site", default=None, metavar="NAME|FILE", type=nonempty("--site", "a site profile"),
                   help=f"site profile: its fast network's set-up for every runtime, the network NCCL must choose "
                        f"(a run on another stops as wrong_network), partitions, the nodes' GPU and its memory; "
                        f"shipped: {', '.join(sites.names())} (default: ${ENV_SITE}, else none)")
    g.add_argument("--gpu", default=None, type=nonempty("--gpu", "a GPU name"),
                   help="GPU assumed by the node-hour estimate, a name of bench/metrics.py "
                        f"(default: the site profile's gpu, else {planmod.DEFAULT_GPU})")
    g.add_argument("--assume-mfu", type=float, default=0.40, help="MFU assumed by the estimate (default: 0.40)")
    g.add_argument("--assume-decode-tok-s", type=float, default=planmod.DECODE_TOK_PER_S, metavar="TOK_S",
                   help="tokens a rank generates a second, assumed by chat_eval's estimate (default: "
                        f"{planmod.DECODE_TOK_PER_S:g}, below the rate measured at d20 on an H200)")
    g.add_argument("--workload", default=workloads.DEFAULT, choices=workloads.names(),
                   help="what each run trains (default: nanochat); nntile takes its flags as --train-arg KEY=VALUE "
                        "(e.g. --train-arg batch=8) and runs on one node")
    add_train_flags(p.add_argument_group("trainer flags (nanochat's names; default: the trainer's, "
                                         f"except --num_iterations={SWEEP_NUM_ITERATIONS})"),
                    "any other trainer flag, repeatable (e.g. --train-arg warmdown_ratio=0.1)")
    add_flow_options(p)


def add_train_flags(group, other_help: str) -> None:
    for name, typ in TRAIN_FLAGS:
        group.add_argument(f"--{name}", type=typ, default=None, metavar=typ.__name__.upper())
    group.add_argument("--train-arg", action="append", default=[], metavar="KEY=VALUE", help=other_help)


def add_flow_options(p: argparse.ArgumentParser, local: bool = False) -> None:
    """The flow flags of plan, submit and render (a job per point), or with `local` of speedrun (this machine)."""
    f = p.add_argument_group("flow (README, \"The speedrun as one job\")")
    f.add_argument("--flow", default="speedrun" if local else None, choices=list(flowmod.FLOWS),
                   help=("the flow whose stages run in turn on this machine" if local else
                         "run a flow's stages in turn per point, one job each")
                        + f" (upstream's speedrun.sh: {', '.join(s.name for s in flowmod.FLOWS['speedrun'])})"
                        + (" (default: speedrun)" if local else ""))
    f.add_argument("--stages", default=None, metavar="A,B,...",
                   help="only these stages of the flow, in its order (default: all of them)")
    f.add_argument("--stage-arg", action="append", default=[], metavar="STAGE:KEY=VALUE",
                   help="a flag of one stage, repeatable (e.g. mid_train:num_iterations=20, "
                        "base_eval:max_per_task=100); the trainer flags (--depth ... --train-arg) are "
                        f"pre-training's (base_train), and {', '.join(flowmod.SHARED_FLAGS)} goes to every stage")
    f.add_argument("--tokenizer-arg", action="append", default=[], metavar="KEY=VALUE",
                   help="a flag of `tokenizer train`, trained " + ("before the first stage" if local else
                                                                    "once per sweep")
                        + " when $NANOCHAT_BASE_DIR has none (e.g. vocab_size=4096)")


def add_out_options(p: argparse.ArgumentParser) -> None:
    """Where submit and render write (out_dir): the directory's name is the sweep's, and its jobs' names begin
    with it."""
    p.add_argument("--name", default=None, type=nonempty("--name", "a sweep name"),
                   help="sweep name, its directory runs/<name> (default: sweep-<date>-<time>; not with --out)")
    p.add_argument("--out", default=None, type=nonempty("--out", "a directory"),
                   help="sweep directory, whose name is the sweep's and begins its jobs' names (default: runs/<name>)")


def add_launch_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("launch")
    g.add_argument("--image", action="append", default=[], metavar="RUNTIME=REF",
                   help=f"image per runtime, repeatable; defaults: {_image_defaults()}")
    g.add_argument("--python", default=None, type=nonempty("--python", "an interpreter"),
                   help="host interpreter for the bare runtime and the jobs' bookkeeping (default: this one; the bare "
                        "runtime's for --workload nntile: $NANOCHAT_BENCH_NNTILE_PYTHON, else the environment "
                        "bench/workloads/nntile/env.sh builds)")
    g.add_argument("--mount", action="append", default=[], metavar="SRC[:DST[:ro]]",
                   help="extra bind mount for container runtimes, repeatable")
    g.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="a variable every run gets, passed literally by each runtime (e.g. NCCL_PROTO=^LL128), "
                        "repeatable")
    g.add_argument("--ofi-hook", choices=OFI_HOOK, default="default",
                   help="CE's aws_ofi_nccl hook: as the site configures it, forced on (variant cuda-dl), or off to "
                        "run the image's own network plugin (default: default)")
    g.add_argument("--allow-network", default=None, metavar="NAME",
                   help="let runs on this NCCL network through the gate on purpose (e.g. Socket, to measure it); "
                        "the name in NCCL's \"Using network\" line, in any case; where the site forces NCCL_NET "
                        "to another (alps), with --env NCCL_NET=NAME")
    for name in ("partition", "account", "constraint"):
        g.add_argument(f"--{name}", default=None, help=f"Slurm {name}")
    g.add_argument("--no-exclusive", dest="exclusive", action="store_false", help="share nodes with other jobs")
    g.add_argument("--cpus-per-gpu", type=int, default=None, metavar="N",
                   help="with --no-exclusive: CPUs each GPU's rank gets, asked as --cpus-per-task = N x GPUs per "
                        "node (default: the site profile's cpus_per_gpu); at most a node's CPUs (the site's, "
                        f"sinfo's, else {MAX_NODE_CPUS})")
    g.add_argument("--no-data-check", dest="data_check", action="store_false",
                   help="leave out the check that the stages' (or --workload's) staged data (eval bundle, chat "
                        "data, NNTile's train.bin) is under --base-dir, for a login node that does not see the nodes' "
                        "filesystem (default: checked when --base-dir is visible here)")
    g.add_argument("--numa-binding", choices=(*NUMA_BINDING, "none"), default=None,
                   help="GPU runs (refused for CPU ranks): bind each worker to CPUs near its GPU (torchrun "
                        "--numa-binding, torch >= 2.8; none to leave it to the OS) (default: node; none with "
                        "--no-exclusive, whose share of a node's CPUs need not lie near its GPUs)")


def train_from_args(args) -> dict:
    """The trainer flags: TRAIN_FLAGS' (None where not given), then each --train-arg."""
    extra = planmod.parse_train_args(args.train_arg)
    for name, typ in TRAIN_FLAGS:  # the --train-arg would win with no word said: refused unless it says the same
        value, text = getattr(args, name), extra.get(name)
        if value is not None and text is not None and not _same(typ, value, text):
            raise ConfigError(f"--{name} {value} and --train-arg {name}={text} disagree; give {name} once")
    return {**{name: getattr(args, name) for name, _ in TRAIN_FLAGS}, **extra}


def _same(typ, value, text: str) -> bool:
    try:
        return typ(text) == value
    except ValueError:
        return False


def sweep_axes(args, nodes: str | None = None, gpus_per_node: int | None = None, runtimes: str | None = None) -> dict:
    """The axes and assumptions of a sweep, as bench.launch.plan.Sweep takes them (all but the trainer flags)."""
    return dict(nodes=planmod.parse_nodes(nodes or args.nodes), gpus_per_node=gpus_per_node or args.gpus_per_node,
                runtimes=parse_names(runtimes or args.runtimes), repeats=args.repeats, gpu=args.gpu,
                assume_mfu=args.assume_mfu, assume_decode_tok_s=args.assume_decode_tok_s, workload=args.workload,
                scaling=args.scaling, data=data_shape(args), time=args.time, site=site_of(args),
                base_dir=base_dir_of(args))


def flow_from_args(args, **axes) -> flowmod.FlowSweep:
    """The --flow sweep: the same axes and trainer flags as a sweep, one planned sweep per stage."""
    train = train_from_args(args)
    fs = flowmod.FlowSweep.build(args.flow, args.stages, train, args.stage_arg, **sweep_axes(args, **axes))
    pre, unused = flowmod.untaken(fs.flow, fs.stages, train)
    if unused:  # on stderr: plan's and submit's stdout is the plan
        flags = ", ".join(f"--{k}={train[k]}" if k in dict(TRAIN_FLAGS) else f"--train-arg {k}={train[k]}"
                          for k in unused)
        print(f"note: {flags} unused: {pre or 'pre-training'} is not in --stages, and no stage chosen takes "
              f"{'it' if len(unused) == 1 else 'them'}", file=sys.stderr)
    return fs


def tokenizer_args(args) -> tuple[str, ...]:
    from bench.commands.tokenizer import check_train_args

    pairs = parse_pairs(args.tokenizer_arg, "--tokenizer-arg", "vocab_size=4096", form="KEY=VALUE")
    argv = tuple(f"--{k.lstrip('-')}={v}" for k, v in pairs.items())
    check_train_args(list(argv))
    return argv


def refuse_flow_flags(args) -> None:
    """--stages, --stage-arg and --tokenizer-arg only mean something with --flow."""
    for name in ("stages", "stage_arg", "tokenizer_arg"):
        if getattr(args, name, None) not in (None, []):  # `--stages ''` too
            raise ConfigError(f"--{name.replace('_', '-')} goes with --flow (e.g. --flow speedrun)")


def check_staged_data(args, stages: tuple[flowmod.Stage, ...], settings: tuple = ()) -> None:
    """The jobs' stages (a sweep's: its workload) read their staged data under --base-dir on the nodes: where this
    host sees that directory (a shared filesystem), refuse now what would stop each job with no_data, a flow's only
    after hours of its first stages. --no-data-check: a login node that does not see the nodes' data."""
    if not args.data_check or not any(workloads.get(s.workload).staging for s in stages):
        return
    base = base_dir_of(args)
    if not Path(base).is_dir():
        print(f"note: --base-dir {base} is not visible here, so the staged data (eval bundle, chat data, NNTile's "
              f"train.bin) was not checked; --no-data-check leaves this note out")
        return
    flowmod.check_staged(stages, base, settings)


def sweep_and_stages(args) -> tuple:
    """The --flow sweep or the sweep of one workload; the sweep its nodes and GPUs are read from (a flow's first
    stage's: every stage has the same axes; a workload's own); and the stages its jobs run (a workload's: itself as
    the one stage, for what is asked of a flow's stages)."""
    if args.flow:
        fs = flow_from_args(args)
        return fs, fs.first, fs.stages
    refuse_flow_flags(args)
    sweep = planmod.Sweep(train=train_from_args(args), **sweep_axes(args))
    return sweep, sweep, (flowmod.Stage(args.workload, args.workload),)


def stage_settings(sweep) -> tuple:
    """Each stage's flags (bench.workloads.base.Settings) in the stages' order: a flow's, else the sweep's own (where
    its data lies is in them: nntile's --dataset-path)."""
    return tuple(s.settings for s in sweep.sweeps) if isinstance(sweep, flowmod.FlowSweep) else (sweep.settings,)


def note_staged_data(args, stages: tuple[flowmod.Stage, ...], settings: tuple = ()) -> None:
    """plan: what submit would refuse for want of staged data, as a note (a plan writes nothing)."""
    base = base_dir_of(args)
    if Path(base).is_dir() and (missing := flowmod.missing_staged(stages, base, settings)):
        print(f"note: not staged under {base} (submit refuses the jobs until it is): {'; and '.join(missing)}")


def note_short_time(notes) -> None:
    """render prints no plan table, whose note column says where --time is under an estimate: one line each."""
    for note in dict.fromkeys(filter(None, notes)):  # every runtime and repeat of the node count says the same
        print(f"note: {note}")


def note_unseen_base_dir(args, sweep: planmod.Sweep, stages: tuple[flowmod.Stage, ...]) -> None:
    """A --base-dir this host does not see is not judged shared (sharedfs.check_shared lets its multi-node points
    pass): say so where such a point has a stage reading a checkpoint, as the data check says what it skipped."""
    from bench.workloads.sharedfs import declared_shared, unseen

    base = base_dir_of(args)
    if max(sweep.nodes) > 1 and any(workloads.get(s.workload).reads_checkpoint for s in stages) \
            and unseen(base) and not declared_shared(base, site_of(args)):
        print(f"note: --base-dir {base} is not visible here, so whether the nodes of a multi-node point share it "
              f"(each reads the checkpoint the stage before wrote) was not checked")


SBATCH_EXPORTS_K = "the job's script exports it over the one sbatch carries from this shell"
GUIDE_EXPORTS_K = "the guide exports it over the one its salloc shell takes from this shell"


def note_planned_k(sweep, opts: LaunchOptions, how: str = SBATCH_EXPORTS_K) -> None:
    """submit, render: the job's script (the guide) exports each run's planned NANOCHAT_VAL_FILES_K over the one
    sbatch (salloc) carries from this shell, so a different one exported here is not used (--env's is the user's
    own)."""
    from bench import contract

    if contract.ENV_VAL_FILES_K in opts.env:
        return
    sweeps = sweep.sweeps if isinstance(sweep, flowmod.FlowSweep) else (sweep,)
    who = "the stages run" if sweep is not sweeps[0] else "the runs start"
    if note := planmod.val_files_k_note(os.environ.get(contract.ENV_VAL_FILES_K),
                                        [(sw, p) for sw in sweeps for p in sw.points()], who, how):
        print(note)


def site_of(args):
    """The site profile of --site, else $NANOCHAT_BENCH_SITE (a shipped name or a TOML file), read once per
    command; an error names where the name came from."""
    flag = getattr(args, "site", None)
    name = flag or os.environ.get(ENV_SITE)
    if not name:
        return None
    if getattr(args, "_site", None) is None:
        args._site = sites.load(name, "" if flag else f"{ENV_SITE}={name!r}")
    return args._site


def base_dir_of(args) -> str:
    """NANOCHAT_BASE_DIR on the nodes: --base-dir, else the environment's, else nanochat's default."""
    given = getattr(args, "base_dir", None)
    base = Path(paths.base_dir(given)).absolute()
    if base.exists() and not base.is_dir():  # where it exists here: a login node may not see the nodes' one
        where = "--base-dir" if given else paths.ENV_BASE_DIR if os.environ.get(paths.ENV_BASE_DIR) else "the default"
        raise ConfigError(f"{where} {base}: a file, not a directory; give the directory of the shards, tokenizer and "
                          "checkpoints (the nodes' NANOCHAT_BASE_DIR)")
    return str(base)


def data_shape(args) -> planmod.DataShape | None:
    """What the plan knows of the shards: --row-groups/--shards, else the data directory's own files."""
    if (args.row_groups is None) != (args.shards is None):
        raise ConfigError("--row-groups and --shards go together (row groups per shard, and shard files)")
    if args.row_groups is not None:
        return planmod.DataShape.from_counts(args.row_groups, args.shards)
    directory = Path(args.data_dir) if args.data_dir else Path(base_dir_of(args)) / paths.DATA_DIR
    if args.data_dir and not directory.is_dir():
        raise ConfigError(f"--data-dir {directory}: " + ("a file, not a directory" if directory.exists() else
                                                         "no such directory") + " (give the directory of the shards)")
    return planmod.DataShape.from_dir(directory)


def parse_images(pairs: list[str], chosen: str) -> dict[str, str]:
    """--image RUNTIME=REF for the runtimes of --runtimes `chosen`: one for another runtime would be dropped
    unseen, and the run it was meant for would start from the default image."""
    images = parse_pairs(pairs, "--image", "ce=/scratch/me/nanochat-bench.sqsh", form="RUNTIME=REF",
                         value_required=True)
    for name, ref in images.items():
        runtimes.get(name, f"--image {name + '=' + ref!r}")  # the flag, the runtime and the valid ones
        if name not in parse_names(chosen):
            raise ConfigError(f"--image {name + '=' + ref!r}: runtime {name} is not in --runtimes {chosen!r}; "
                              f"add it there or name the image of one that is")
    return images


def check_workload_images(workload: str, images: dict[str, str], chosen: str) -> None:
    """A workload the default images cannot run (nntile: no torch-nntile in nanochat-bench's) needs --image for
    every container runtime of --runtimes: the default would be submitted, and each run would fail on its node."""
    recipe = workloads.get(workload).image_recipe
    missing = [n for n in parse_names(chosen) if runtimes.get(n).python is not None and n not in images]
    if recipe and missing:
        defaults = ", ".join(f"{n}: {runtimes.get(n).default_image}" for n in missing)
        raise ConfigError(f"--workload {workload} under --runtimes {chosen!r}: nanochat-bench's default images cannot "
                          f"run it ({defaults}); build its image from {recipe} (containers/README.md) and pass "
                          f"{' '.join(f'--image {n}=REF' for n in missing)}")


def check_ofi_hook(hook: str, chosen: str) -> None:
    """--ofi-hook on|off is CE's and Sarus Suite's hook: for other runtimes alone it would change nothing unseen."""
    hooked = [name for name in runtimes.names() if runtimes.get(name).ofi_hook]
    if hook != "default" and not set(parse_names(chosen)) & set(hooked):
        raise ConfigError(f"--ofi-hook {hook}: only {', '.join(hooked)} have the aws_ofi_nccl hook, and --runtimes "
                          f"{chosen!r} runs neither; add one of them or leave --ofi-hook out")


def options_from_args(args, gpus: bool) -> LaunchOptions:
    """The launch flags; `gpus`: whether the sweep's runs use the nodes' GPUs (their CPU share, cpus_per_gpu)."""
    site_partition(site_of(args), args.partition)  # an unknown partition is refused before the plan is printed
    share = cpu_share(args.cpus_per_gpu, args.exclusive, gpus, site_of(args), args.gpus_per_node)
    if not args.exclusive and share is None:  # the batch script gives every run $SLURM_CPUS_ON_NODE: maybe one CPU
        print("note: --no-exclusive: CPU ranks ask for no CPUs of their own, so each node's ranks share what Slurm "
              "allocates by default (one CPU a task): timings reflect that")
    if gpus and not args.exclusive and args.numa_binding is None:
        print(f"note: --no-exclusive: {NO_NUMA_NOTE}")
    check_ofi_hook(args.ofi_hook, args.runtimes)
    images = parse_images(args.image, args.runtimes)
    check_workload_images(args.workload, images, args.runtimes)
    mounts = tuple(Mount.parse(m) for m in args.mount)
    for m in mounts:  # a login node may not see the nodes' filesystems: said, not refused, as for --base-dir
        if not Path(m.src).exists():
            print(f"note: --mount {m.src} is not visible here; a container whose node lacks it fails at its start")
    return LaunchOptions(base_dir=base_dir_of(args), python=args.python, images=images, mounts=mounts,
                         env=parse_pairs(args.env, "--env", "NCCL_PROTO=^LL128"), ofi_hook=args.ofi_hook,
                         numa_binding=numa_binding(args.numa_binding, args.exclusive, gpus),
                         partition=args.partition, account=args.account, constraint=args.constraint,
                         exclusive=args.exclusive, cpus_per_gpu=share, site=site_of(args),
                         allow_network=args.allow_network)


def out_dir(args) -> Path:
    """--out, else runs/<--name>. Not both: the sweep and its jobs are named after their folder, so a --name beside
    --out would name nothing."""
    if args.name and args.out:
        raise ConfigError(f"--name {args.name!r} with --out {args.out!r}: the sweep is named after its folder "
                          f"({Path(args.out).name!r} here); give --out DIR, or --name NAME for runs/NAME, not both")
    name = args.name or time.strftime("sweep-%Y%m%d-%H%M%S")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or name in (".", ".."):
        # '.' and '..' pass the character check but would put the sweep in runs/ or in the current directory
        raise ConfigError(f"--name {name!r}: use letters, digits, '.', '_' and '-' only, and not '.' or '..' "
                          "(the sweep goes to runs/<name>)")
    return Path(args.out) if args.out else Path("runs") / name


def print_written(job, kind: str) -> None:
    print(f"wrote {job.script}")
    if kind == "interactive":
        print(f"follow the steps in it, inside: salloc --nodes={job.nodes} ...")
    else:
        print(f"submit with: cd {shlex.quote(str(job.job_dir))} && sbatch {job.script.name}")  # pasted as it is


# -- handlers --------------------------------------------------------------------------------------

def cmd_plan(args) -> int:
    check_directive("partition", args.partition)  # what submit refuses: a plan that took it would preview nothing
    sweep, first, stages = sweep_and_stages(args)
    if args.flow:  # what submit refuses: a plan that passed them would be no preview of it
        tokenizer_args(args)
    print((flowmod if args.flow else planmod).format_table(sweep, args.partition))
    note_staged_data(args, stages, stage_settings(sweep))
    note_unseen_base_dir(args, first, stages)
    note_shared_cpus(args, first)
    note_workload_images(args)
    return 0


def note_workload_images(args) -> None:
    """plan: the runtimes whose default image cannot run the workload, which render and submit refuse without
    --image (a flag plan does not take), said as a note by the check they refuse them with."""
    try:
        check_workload_images(args.workload, {}, args.runtimes)
    except ConfigError as e:
        print(f"note: render and submit refuse this sweep without --image: {e}")


def note_shared_cpus(args, sweep: planmod.Sweep) -> None:
    """plan: the CPUs a --no-exclusive job of the sweep asks each node for, as render and submit decide them (plan
    takes no launch flags), or why it would be refused: one line, as most sweeps own their nodes. That such a job
    binds no worker to a NUMA node is said by render and submit, where --no-exclusive is given (NO_NUMA_NOTE).
    CPU ranks: submit's own note says what they share."""
    if not sweep.gpus_used:
        return
    site = site_of(args)
    try:
        share = cpu_share(None, False, True, site, sweep.gpus_per_node)
    except ConfigError:
        why = f"{site.source} has no cpus_per_gpu" if site is not None else "or a --site with cpus_per_gpu"
        print(f"note: --no-exclusive jobs (render, submit) need --cpus-per-gpu N ({why})")
        return
    print(f"note: --no-exclusive jobs (render, submit) ask each node for --cpus-per-task="
          f"{shared_node_cpus(share, sweep.gpus_per_node)}: site {site.name}'s cpus_per_gpu {share} x "
          f"{sweep.gpus_per_node} GPU(s) a node (--cpus-per-gpu N to change it)")


def cmd_submit(args) -> int:
    sweep, first, stages = sweep_and_stages(args)
    if args.flow and args.compare:
        raise ConfigError("--compare and --flow: a flow runs one point per job (its stages in turn); "
                          "leave out --compare")
    opts = options_from_args(args, first.gpus_used)
    sweep_dir = out_dir(args)
    backend = None if args.dry_run else slurm.SlurmCLI()
    known = backend.partitions() if backend and args.partition else None
    unknown = [p for p in (args.partition or "").split(",") if known and p not in known]
    if unknown:  # sbatch would refuse every job after the sweep was written, which --resubmit-failed cannot fix
        raise ConfigError(f"--partition {args.partition!r}: Slurm has no partition {', '.join(unknown)}; "
                          f"it has: {', '.join(known)}")
    if backend and args.constraint:
        check_constraint(backend, args.partition, args.constraint)
    if backend and opts.cpus_per_gpu:
        check_node_cpus(backend, args.partition, args.constraint, opts.cpus_per_gpu, args.gpus_per_node)
    if args.flow:  # its flags first, then its data: refused before the plan is printed
        tokenizer = tokenizer_args(args)
    check_staged_data(args, stages, stage_settings(sweep))
    note_unseen_base_dir(args, first, stages)
    note_planned_k(sweep, opts)
    print((flowmod if args.flow else planmod).format_table(sweep, args.partition), end="\n\n")
    if args.flow:
        flowmod.submit_flow(sweep, opts, sweep_dir, backend, dry_run=args.dry_run, tokenizer_args=tokenizer,
                            command=submit_command(args, sweep_dir))
    else:
        submit.submit_sweep(sweep, opts, sweep_dir, backend, compare=args.compare, dry_run=args.dry_run,
                            command=submit_command(args, sweep_dir))
    if not args.dry_run:
        print(f"follow it with: nanochat-bench status {sweep_dir}")
    return 0


def submit_command(args, sweep_dir: Path) -> str:
    """This submit without --dry-run, into this sweep directory (a --name, or the default's date, would make
    another) and from this directory (relative paths among its flags read alike): what submits a dry run."""
    dropped = {"--dry-run": 0, "--name": 1, "--out": 1}  # each flag and how many values follow it
    at = args.argv.index("submit")
    tokens, rest = args.argv[:at + 1], iter(args.argv[at + 1:])
    for token in rest:
        flag = token.split("=", 1)[0]
        name = next((n for n in dropped if len(flag) >= 4 and n.startswith(flag)), None)  # argparse takes a prefix
        if name is None:
            tokens.append(token)
        elif "=" not in token:
            for _ in range(dropped[name]):
                next(rest, None)
    argv = shlex.join([*tokens, "--out", str(sweep_dir.absolute())])
    return f"cd {shlex.quote(os.getcwd())} && nanochat-bench {argv}"


def nodes_of(partition: str | None) -> str:
    """The nodes sinfo was asked about, as a message names them: --partition's, else the whole cluster's."""
    return f"partition {partition}" if partition else "the cluster"


def check_constraint(backend, partition: str | None, constraint: str) -> None:
    """A --constraint that no node of the partition (sinfo) satisfies is refused before the sweep is written: sbatch
    would refuse every job ("Requested node configuration is not available"), and --resubmit-failed sends the same
    scripts again. Only a form features_match reads is checked; Slurm reads any other by rules of its own."""
    match = slurm.features_match(constraint)
    nodes = backend.nodes(partition) if match else None
    if not nodes or any(match(features) for _, features in nodes):
        return
    have = sorted(set().union(*(features for _, features in nodes)))
    raise ConfigError(f"--constraint {constraint}: no node of {nodes_of(partition)} has the features it asks for, so "
                      f"sbatch would refuse every job; its nodes have: {', '.join(have) or 'no features'} (sinfo)")


def check_node_cpus(backend, partition: str | None, constraint: str | None, share: int, gpus_per_node: int) -> None:
    """A --no-exclusive share over what the partition's nodes have (sinfo) is refused before the sweep is written:
    sbatch would refuse every job, and --resubmit-failed sends the same scripts again. Only the nodes --constraint
    selects count, where its form can be read here; the message says when it was not considered."""
    node = backend.node_cpus(partition, constraint)
    if node is None:
        return
    where = nodes_of(partition)
    sinfo = "sinfo"
    if constraint and slurm.features_match(constraint):
        where += f" with --constraint {constraint}"
    elif constraint:
        sinfo += (f"; --constraint {constraint} was not considered: only one feature, or features joined by & alone "
                  f"or by | alone, are read here")
    refuse_over_node(share, gpus_per_node, node, f"no node of {where} has more than {node} ({sinfo})")


def cmd_status(args) -> int:
    # time.sleep refuses a negative or NaN poll with a traceback, and 0.01 would query Slurm a hundred times a second
    if not (math.isfinite(args.poll) and args.poll >= status.MIN_POLL_S):
        raise ConfigError(f"--poll {args.poll:g}: give the seconds between polls as a number of at least "
                          f"{status.MIN_POLL_S:g} (each poll queries slurmctld)")
    if args.timeout is not None and not (math.isfinite(args.timeout) and args.timeout >= 0):
        raise ConfigError(f"--timeout {args.timeout:g}: give the seconds to wait as a number of 0 or more")
    backend = slurm.SlurmCLI()
    rows = status.wait(args.sweep, backend, poll_s=args.poll, timeout_s=args.timeout) if args.wait \
        else status.sweep_status(args.sweep, backend)
    print(status.format_status(rows))
    failed = {r.run_id for r in rows if r.resubmittable}
    if args.resubmit_failed:
        active = [r for r in rows if r.run_id in failed and r.job_active]
        if active:  # its batch script is still writing the run directory: resetting it now would lose that
            print(f"not yet: the job of {', '.join(f'{r.run_id} ({r.slurm_state})' for r in active)} has not "
                  f"ended; resubmit once it has (nanochat-bench status {args.sweep} --wait)")
        busy = {r.run_id for r in active}
        if failed - busy:
            submit.resubmit(args.sweep, failed - busy, backend)
        elif not busy:
            print("nothing to resubmit")
        return 0
    held = submit.held_back(args.sweep, failed) if failed else {}
    if set(failed) - set(held):
        print(f"resubmit the failed runs with: nanochat-bench status {args.sweep} --resubmit-failed")
    for run_id, others in sorted(held.items()):  # --resubmit-failed refuses these: say so, not that it would work
        print(f"{run_id}: not resubmitted in place, since its job would also run again {others}; submit its point "
              f"as a new sweep")
    unfinished = [r.run_id for r in rows if not r.done and not r.unsubmitted]
    stuck = status.never_start(rows) if args.wait else []
    if stuck:
        why = ", ".join(sorted({r.message.removeprefix(status.QUEUED) for r in stuck}))
        print(f"stopped waiting: Slurm will never start the job(s) of {', '.join(r.run_id for r in stuck)} ({why}); "
              f"scancel them and submit those points again with a time limit, partition, constraint or account "
              f"that Slurm accepts")
    elif args.wait and unfinished:
        print(f"gave up waiting after --timeout {args.timeout:g} s: {len(unfinished)} run(s) not finished")
    # any final status but ok fails the wait: diverged and wrong_network are not resubmitted, yet not results
    not_ok = [r.run_id for r in rows if (r.done and r.status != "ok") or r.unsubmitted]
    return 1 if args.wait and (not_ok or unfinished) else 0


def cmd_render_flow(args) -> int:
    """One point's flow job (sbatch) or its interactive guide, with each stage's run.json and flow.json."""
    from bench.launch.flowrender import render_flow, render_flow_interactive

    if args.kind == "compare":
        raise ConfigError("render compare --flow: a flow runs one point per job; use render sbatch or interactive")
    fs = flow_from_args(args)
    if len(fs.points()) > 1:
        raise ConfigError(f"render {args.kind} --flow makes one point's job: one runtime and --repeats 1, got "
                          f"--runtimes {args.runtimes!r} --repeats {args.repeats}")
    opts = options_from_args(args, fs.first.gpus_used)
    tokenizer = tokenizer_args(args)
    if args.kind != "interactive":  # the guide has its own staging steps, run in the allocation before the stages
        check_staged_data(args, fs.stages, stage_settings(fs))
    note_planned_k(fs, opts, GUIDE_EXPORTS_K if args.kind == "interactive" else SBATCH_EXPORTS_K)
    note_unseen_base_dir(args, fs.first, fs.stages)
    note_short_time(f"{stage.name}: {note}" for stage, sp in zip(fs.stages, fs.points()[0][1])
                    if (note := sp.short_time_note("stage")))
    [fj] = flowmod.assemble(fs, opts, out_dir(args).absolute(), tokenizer)
    if args.kind == "interactive":
        shards = guide_shards(args, opts, fj.job, fs.first.shards_needed(), fs.first.data)
        text = render_flow_interactive(fj, opts.base_dir, *shards)
    else:
        text = render_flow(fj, rendered_by="render sbatch --flow")
    flowmod.write_flow_job(fj, text)
    print_written(fj.job, args.kind)
    return 0


def refuse_bad_download(args) -> None:
    """--download is the guide's `data download -n N`: a count that command refuses would stop the data step
    inside the allocation (and 0 was taken for the default); a batch script has no data step to take it."""
    if args.download is not None and args.kind != "interactive":  # a batch job reads staged data, downloads none
        raise ConfigError(f"--download is the interactive guide's data step; render {args.kind} writes a batch job "
                          f"that reads staged data: stage it first with `nanochat-bench data download -n N`")
    if args.download is not None and args.download != -1 and not 1 <= args.download <= paths.MAX_SHARD + 1:
        raise ConfigError(f"--download {args.download}: shards to download, 1 to {paths.MAX_SHARD + 1} (or -1 for all)")


def refuse_no_training_shard(download: int, job, data: planmod.DataShape | None) -> None:
    """The last K shards are validation: a download of K or fewer leaves training none, and the runs would stop at
    start-up inside the allocation. K is what the runs export (the plan's, or --env's), else the shell's, else 1.
    K was planned for the plan's shards (`data`): fewer of them can leave a split fewer row groups than ranks, which
    stops the runs alike; the smallest download that serves every run is then named."""
    from bench import contract

    given = [run.spec.env.get(contract.ENV_VAL_FILES_K, "") for run in job.runs]
    given = [int(v) for v in given if v.isdigit()] or \
        [int(v) for v in [os.environ.get(contract.ENV_VAL_FILES_K, "")] if v.isdigit()]
    k = max(given, default=1)
    ranks = max(run.nodes * run.nproc_per_node for run in job.runs)
    fix = (data.shards_serving(k, ranks) if data is not None else None) or k + 1
    if download <= k:
        raise ConfigError(f"--download {download}: the runs keep the last {contract.ENV_VAL_FILES_K}={k} shard(s) "
                          f"for validation, which leaves no training shard; give --download {fix} or more")
    if download < fix:
        train = sum(data.row_groups[:download - k])
        raise ConfigError(f"--download {download}: with the last {contract.ENV_VAL_FILES_K}={k} for validation, "
                          f"training gets {download - k} shard(s) of {train} row group(s) (from {data.source}), "
                          f"fewer than the {ranks} ranks need; give --download {fix} or more")


def guide_shards(args, opts, job, needed: int | None, data: planmod.DataShape | None) -> tuple[int, str]:
    """`job` made the interactive guide, and the shards its data step downloads, and why that many: --download (-1:
    every one, counted so that the salloc's time covers them), else what the plan needs, else 8. The guide's salloc
    holds its download and tokenizer steps as well as the runs, so it can be over a partition the batch job fits:
    salloc would be refused or never start."""
    job.script_name = "interactive.sh"
    if args.download == -1:
        shards = paths.MAX_SHARD + 1, "every one (--download -1)"
    elif args.download:
        refuse_no_training_shard(args.download, job, data)
        shards = args.download, "as --download asks"
        if needed and args.download < needed:  # a choice (a short look at throughput), not a mistake: the train
            # stream wraps around, so the runs read their shards again rather than stop
            print(f"note: --download {args.download} is below the {needed} shard(s) the plan needs (training "
                  f"tokens + K validation): the runs' training repeats its shards; leave --download out for {needed}")
    else:
        shards = (needed, "what the plan needs") if needed else (8, "a default (the plan counts none it needs)")
    over = over_partition(site_partition(opts.site, opts.partition), interactive_minutes(job, shards[0]))
    if over:
        raise ConfigError(f"render interactive: the guide's salloc: {over} (it holds the download of {shards[0]} "
                          f"shard(s) and the tokenizer's training before the runs); pass a smaller --download, a "
                          f"shorter --time or another --partition")
    return shards


def cmd_render(args) -> int:
    """One job's script (sbatch, compare) or the interactive guide, written with its runs' run.json."""
    if len(planmod.parse_nodes(args.nodes)) > 1:  # a bad value is named first (`1,x`: x is no node count)
        raise ConfigError(f"render takes one node count, got --nodes {args.nodes!r}")
    refuse_bad_download(args)
    # its pending jobs run the scripts sbatch took: new ones (and run.json) would describe other runs, which
    # --resubmit-failed would then send
    submit.refuse_existing(out_dir(args).absolute(), "stages" if args.flow else "runs")
    if args.flow:
        return cmd_render_flow(args)
    sweep, _, stages = sweep_and_stages(args)  # no flow: it is rendered by cmd_render_flow
    opts = options_from_args(args, sweep.gpus_used)
    out = out_dir(args).absolute()
    if args.kind != "compare" and len(sweep.points()) > 1:
        raise ConfigError(f"render {args.kind} makes one run: one runtime and --repeats 1, got --runtimes "
                          f"{args.runtimes!r} --repeats {args.repeats} (compare runs several in one allocation)")
    naming = Naming(one_name=f"{{sweep_id}}-{args.kind}", one_title="run {run_id}",
                    compare_name="{sweep_id}-compare", compare_title="runtimes compared in one allocation: {runs}")
    if args.kind != "interactive":
        check_staged_data(args, stages, stage_settings(sweep))
    note_planned_k(sweep, opts, GUIDE_EXPORTS_K if args.kind == "interactive" else SBATCH_EXPORTS_K)
    note_unseen_base_dir(args, sweep, stages)
    note_short_time(p.short_time_note() for p in sweep.points() if p.possible)
    # one job, or a comparison the partition's time limit splits into parts (as submit --compare splits it)
    jobs = assemble(sweep, opts, out, compare=args.kind == "compare", naming=naming)
    texts = []
    for job in jobs:
        if args.kind == "interactive":
            shards = guide_shards(args, opts, job, sweep.shards_needed(), sweep.data)
            texts.append(render.render_interactive(job, opts.base_dir, *shards))
        else:
            texts.append(render.render_sbatch(job, rendered_by=f"render {args.kind}"))
    for job, text in zip(jobs, texts):
        write_job(job, text)
        print_written(job, args.kind)
    return 0


def cmd_speedrun(args) -> int:
    """The flow's stages in turn on this machine (bench.launch.flow.run_local_flow)."""
    from bench.commands.workload import _nproc
    from bench.launch.local import default_run_dir

    nproc = _nproc(args.nproc, 1)
    fs = flow_from_args(args, nodes="1", gpus_per_node=nproc, runtimes="bare")
    point_dir = Path(args.run_dir) if args.run_dir else default_run_dir(fs.flow)
    result = flowmod.run_local_flow(fs, nproc, point_dir, tokenizer_args(args), python=args.python)
    print(f"flow {fs.flow} in {point_dir}: " + ", ".join(f"{k} {v}" for k, v in result.statuses.items()))
    if result.failed:
        print(f"stopped at {result.failed}; run the same command again to start there (stages ok are kept)")
    return result.rc


def register_speedrun(subparsers) -> None:
    # no abbreviations: pre-training's --run (a run's name) would be taken for --run-dir, naming the directory
    p = subparsers.add_parser("speedrun", help="a flow's stages in turn on this machine, no Slurm (upstream's "
                              "speedrun.sh)",
                              description="Each stage in <run-dir>/<stage>/ with the flags a one-node job of --nproc "
                              "ranks gives it; the tokenizer first when there is none. Example: "
                              "nanochat-bench speedrun --nproc 2 --device_type cpu --depth 2 --max_seq_len 256 "
                              "--device_batch_size 2 --num_iterations 6 --eval_every -1 --stages base_train (seconds; "
                              "the pre-training defaults would take hours on a CPU)")
    add_flow_options(p, local=True)
    add_train_flags(p.add_argument_group("pre-training's flags (base_train; nanochat's names)"),
                    "any other pre-training flag, repeatable")
    p.add_argument("--nproc", type=int, default=None, help="ranks of every stage (default: number of GPUs, else 1)")
    p.add_argument("--run-dir", default=None, type=nonempty("--run-dir", "a directory"),
                   help="the point's directory; each stage below it (default: "
                   "./runs/speedrun/<timestamp>; an existing one continues, keeping the stages ok)")
    p.add_argument("--python", default=None, type=nonempty("--python", "an interpreter"),
                   help="the stages' interpreter (default: this one)")
    p.add_argument("--scaling", choices=planmod.SCALING_MODES, default="weak", help="as for plan (default: weak)")
    p.add_argument("--data-dir", default=None, type=nonempty("--data-dir", "a directory"),
                   help="the shards, for the validation files K (default: base_data/ "
                   "under $NANOCHAT_BASE_DIR)")
    p.set_defaults(func=cmd_speedrun, repeats=1, gpu=None, assume_mfu=0.40,
                   assume_decode_tok_s=planmod.DECODE_TOK_PER_S, workload=workloads.DEFAULT,
                   row_groups=None, shards=None, time=None, site=None, nodes="1", runtimes="bare")


def register(subparsers) -> None:
    register_speedrun(subparsers)

    p = subparsers.add_parser("plan", help="print a sweep as a table: ranks, batch arithmetic, node-hours",
                              description="Points (nodes x runtimes x repeats): weak scaling keeps each rank's "
                                          "device batch x sequence, strong keeps total_batch_size.")
    add_sweep_options(p)
    # the table marks the runs this partition would refuse, and its advice for them names --partition
    p.add_argument("--partition", default=None, help="Slurm partition whose limits the runs are checked against, as "
                   "for submit (default: the site's default_partition)")
    p.set_defaults(func=cmd_plan)

    p = subparsers.add_parser("submit", help="render every job of a sweep and submit it with sbatch",
                              description="Render each job's script into the sweep directory and submit it.")
    add_sweep_options(p)
    add_launch_options(p)
    add_out_options(p)
    p.add_argument("--compare", action="store_true",
                   help="one job per node count running every runtime in turn (same nodes for all)")
    p.add_argument("--dry-run", action="store_true", help="render the scripts, print what would be submitted")
    p.set_defaults(func=cmd_submit)

    p = subparsers.add_parser("status", help="job states and run statuses of a sweep; resubmit failed runs")
    sweep_dir = nonempty("SWEEP", "a sweep directory", required=True)  # Path("") is the current directory
    p.add_argument("sweep", metavar="SWEEP", type=lambda v: Path(sweep_dir(v)),
                   help="sweep directory (holds sweep.json)")
    p.add_argument("--wait", action="store_true", help="poll until every run has a final status")
    p.add_argument("--poll", type=float, default=10.0,
                   help="seconds between polls with --wait (default: 10; at least 1)")
    p.add_argument("--timeout", type=float, default=None,
                   help="stop waiting after this many seconds (default: no limit)")
    p.add_argument("--resubmit-failed", action="store_true", help="submit the jobs of failed runs again")
    p.set_defaults(func=cmd_status)

    p = subparsers.add_parser("render", help="write one batch script, a runtime comparison or the interactive guide",
                              description="sbatch: one run; compare: every --runtimes in turn in one allocation; "
                                          "interactive: salloc plus the srun lines of data, tokenizer and train.")
    p.add_argument("kind", choices=("sbatch", "interactive", "compare"))
    add_sweep_options(p, single_nodes=True)
    add_launch_options(p)
    add_out_options(p)
    p.add_argument("--download", type=int, default=None, metavar="N",
                   help="interactive: shards the data step downloads, -1 for all (default: what the plan needs, "
                        "else 8)")
    p.set_defaults(func=cmd_render)
