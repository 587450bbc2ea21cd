"""A flow: nanochat's stages run in turn for each sweep point, as upstream's speedrun.sh runs them.

A flow is data: an ordered list of stages, each a registered workload (bench/workloads) and the flags that
chain it to the stage before (the model tag the training stages save under and the next one loads, `-i mid`
for the chat evaluation after mid-training). Per sweep point, one Slurm job runs the stages in turn inside
one allocation (as the CSCS study ran the speedrun), each stage in its own run directory with its own run
record, below the point's directory:

    <sweep>/<point run id>/job.sbatch           the job: tokenizer (once per sweep), then every stage
    <sweep>/<point run id>/flow.json            the point's record: the flow, its model tag, its stages
    <sweep>/<point run id>/<stage>/run.json     each stage's own run (run_id: the point's; `stage`: its name)

A stage that does not end ok, or that scancel or the time limit stops, ends the point's flow: the stages after it
are recorded as not run (run.json evidence `not_run`, status cancelled), and `status --resubmit-failed` starts the
job again at the failed stage (the stages already ok are kept by the script's `jobrecord kept`). The tokenizer is
trained once per sweep, outside the measured runs, and kept when it exists. Locally, `nanochat-bench speedrun` runs
the same stages with the same flags in the same directories on this machine (`run_local_flow`).
What a stage reads besides the shards (the eval bundle, the chat data: its workload's `staging`) is checked
before anything runs (`check_staged`), locally and, where this host sees the job's base directory, at submit.

Every stage is planned by its own workload (batch arithmetic per rank count, time estimate), so the job's
time limit is the sum of the stages' limits. The stages after pre-training load the model it trains, so each
is planned knowing that model (pre-training's flags: its depth, context and FLOPs per token) and estimates its
time from it (bench/workloads/stage.py model_estimate).
"""

import itertools
import json
import os
import re
import shlex
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from tabulate import tabulate

from bench import contract, paths, workloads
from bench.errors import ConfigError, DataError, FlagValueError, UnknownFlags, run_dir_error
from bench.launch import jobrecord
from bench.launch import plan as planmod
from bench.launch.job import (IMAGE_STEP_MINUTES, Job, LaunchOptions, Run, build_run, check_allow_network,
                              check_partition, default_image_step, make_job, over_partition, run_job_minutes,
                              site_partition, tokenizer_minutes, write_job)
from bench.workloads.sharedfs import unseen

FLOW_JSON = "flow.json"
# A valid model tag while planning (the point's own tag replaces it in each job: `model_tag`)
PLAN_TAG = "flow-model-tag"
TAG_SHOWN = "<sweep>-<point>-<hash>"  # what the point's tag (model_tag) is, in a plan's and an error's words
TOKENIZER_LOG = "tokenizer.log"


@dataclass(frozen=True)
class Stage:
    """One stage of a flow: its name (run directory, `--stages`, report section), the workload that runs
    it, and the flags chaining it to the stage before: `{tag}` is the point's model tag, any other field
    a column of the stage's own plan (e.g. `{num_iterations}`)."""

    name: str
    workload: str
    chain: tuple[tuple[str, str], ...] = ()
    inherit: tuple[str, ...] = ()  # pre-training's flags it takes when given (the checkpoint's sequence length)
    saves: str | None = None  # the checkpoint phase (bench/paths.py PHASE_DIRS) it saves under the tag


# upstream's speedrun.sh after the tokenizer: base_train, base_loss, base_eval, mid_train, chat_eval -i mid,
# chat_sft, chat_eval -i sft. Pre-training saves at its end (save_every = its steps) under the point's tag.
FLOWS: dict[str, tuple[Stage, ...]] = {
    "speedrun": (
        Stage("base_train", "nanochat", (("model_tag", "{tag}"), ("save_every", "{num_iterations}")), saves="base"),
        Stage("base_loss", "base_loss", (("model_tag", "{tag}"),), inherit=("max_seq_len",)),
        Stage("base_eval", "base_eval", (("model_tag", "{tag}"),)),
        Stage("mid_train", "mid_train", (("model_tag", "{tag}"),), saves="mid"),
        Stage("chat_eval_mid", "chat_eval", (("source", "mid"), ("model_tag", "{tag}"))),
        Stage("chat_sft", "chat_sft", (("model_tag", "{tag}"),), saves="sft"),
        Stage("chat_eval_sft", "chat_eval", (("source", "sft"), ("model_tag", "{tag}"))),
    ),
}
# The settings every stage shares (bench.nanochat.config.RunSettings) that a sweep's flag sets for all
SHARED_FLAGS = ("device_type",)
# Pre-training's flags that shape the model the later stages load (model_of): without pre-training in --stages they
# still size the stages' estimates
MODEL_FLAGS = ("depth", "max_seq_len", "aspect_ratio")


def select(flow: str, stages: str | None = None) -> tuple[Stage, ...]:
    """The flow's stages, or the subset `stages` names (comma-separated) in the flow's order. An unknown
    stage, or one whose workload this installation does not have, is a ConfigError listing the valid ones."""
    if flow not in FLOWS:
        raise ConfigError(f"--flow {flow!r}: unknown flow; valid: {', '.join(FLOWS)}")
    every = FLOWS[flow]
    registered = [s.name for s in every if s.workload in workloads.names()]
    if stages is None:  # the whole flow, less what this installation cannot run (left_out says it, everywhere)
        if not registered:
            raise ConfigError(f"--flow {flow}: none of its stages' workloads is registered in this installation")
        return tuple(s for s in every if s.name in registered)
    wanted = [t.strip() for t in stages.split(",")]
    valid = f"valid: {', '.join(registered) or 'none'} (the flow's order: {', '.join(s.name for s in every)})"
    if "" in wanted:  # an unset shell variable, or `a,,b`: not the whole flow, nor fewer stages, unsaid
        raise ConfigError(f"--stages {stages!r}: an empty stage name; give stage names, comma-separated; {valid}")
    for name in wanted:
        stage = next((s for s in every if s.name == name), None)
        if stage is None:
            raise ConfigError(f"--stages: {name!r} is not a stage of the flow {flow}; {valid}")
        if stage.workload not in workloads.names():
            raise ConfigError(f"--stages: {name} needs the workload {stage.workload!r}, which this installation does "
                              f"not register; {valid}")
    if len(set(wanted)) != len(wanted):
        raise ConfigError(f"--stages {stages!r}: name each stage once; {valid}")
    return tuple(s for s in every if s.name in wanted)


def parse_stage_args(pairs: list[str], stages: tuple[Stage, ...], flow: str) -> dict[str, dict]:
    """Repeated `--stage-arg STAGE:KEY=VALUE` -> {stage: {key: value}}; the stage must be one of `stages`, those
    of `flow` that are run."""
    out: dict[str, dict] = {s.name: {} for s in stages}
    every = {s.name: s.workload for s in FLOWS[flow]}
    for text in pairs:
        stage, colon, rest = text.partition(":")
        key, eq, value = rest.partition("=")
        if "=" in stage or (colon and not stage):  # `key=a:b` would otherwise name 'key=a' an unknown stage
            raise ConfigError(f"--stage-arg {text!r}: no stage name before the key; give STAGE:KEY=VALUE with STAGE "
                              f"one of {', '.join(out)}, e.g. {next(iter(out), 'base_train')}:{text.lstrip(':')}")
        if stage and colon and stage not in out:  # --stages takes only a stage of the flow this installation runs
            if stage not in every:
                raise ConfigError(f"--stage-arg {text!r}: unknown stage {stage!r}, not one of the flow {flow}; "
                                  f"valid: {', '.join(out)}")
            if every[stage] not in workloads.names():
                raise ConfigError(f"--stage-arg {text!r}: {stage} needs the workload {every[stage]!r}, which this "
                                  f"installation does not register; valid: {', '.join(out)}")
            raise ConfigError(f"--stage-arg {text!r}: {stage} is not among the stages run ({', '.join(out)}); "
                              f"add it to --stages or leave this --stage-arg out")
        if not colon or stage not in out or not eq or not key.lstrip("-"):
            raise ConfigError(f"--stage-arg {text!r}: give STAGE:KEY=VALUE with STAGE one of {', '.join(out)}, "
                              f"e.g. mid_train:num_iterations=20")
        out[stage][key.lstrip("-")] = value
    return out


def as_given(e: FlagValueError | UnknownFlags, stage: str, stage_flags: dict, train: dict,
             chained: tuple[str, ...] = ()) -> ConfigError:
    """A stage's flag error named as the user wrote the flags. A value its parser cannot read: named with its flag
    as given (its parser named only its own flag). Keys it does not take, with the keys it does less `chained` (the
    flow sets them, refuse_chained refuses them given): `--stage-arg STAGE:KEY=VALUE` where the first came from the
    stage's own flags, else `--train-arg KEY=VALUE`."""
    if isinstance(e, UnknownFlags):
        own = {key.replace("-", "_") for key in stage_flags}
        how = f"--stage-arg {stage}:" if e.names and e.names[0] in own else "--train-arg "
        e = UnknownFlags(str(e), e.names, [key for key in e.known if key not in chained])
        return planmod.unknown_train_keys(stage, e, {**train, **stage_flags}, how)
    if e.name in stage_flags:
        return planmod.train_arg_value(stage, e, stage_flags, f"--stage-arg {stage}:")
    if e.name in train:
        return planmod.train_arg_value(stage, e, train)
    return e


def _agrees(value, text: str) -> bool:
    """A trainer flag's value (an int from --depth, text from --train-arg) and a --stage-arg's text say the same."""
    try:
        return type(value)(text) == value
    except ValueError:
        return False


def refuse_chained(stage: Stage, flags: dict, given: str) -> None:
    """A flag the flow chains (the model tag, pre-training's save_every, chat_eval's source) would be replaced
    without a word by the chained value, so the stage would load or save elsewhere than asked: refused."""
    for key, value in stage.chain:
        if key in flags:
            value = value.replace("{tag}", TAG_SHOWN).replace("{", "<").replace("}", ">")
            raise ConfigError(f"{given}{key}={flags[key]}: the flow sets {stage.name}'s --{key} itself ({value}), "
                              f"chaining it to the other stages; leave it out")


def untaken(flow: str, chosen: tuple[Stage, ...], train: dict) -> tuple[str | None, list[str]]:
    """(pre-training's stage, the trainer flags given that no chosen stage takes) where pre-training is not chosen:
    accepted, as a flow resumed by hand is the same command with --stages for the later stages, but said."""
    if any(s.workload == workloads.DEFAULT for s in chosen):
        return None, []
    pre = next((s.name for s in FLOWS[flow] if s.workload == workloads.DEFAULT), None)
    taken = (*SHARED_FLAGS, *MODEL_FLAGS, *(k for s in chosen for k in s.inherit))
    return pre, [k for k, v in train.items() if v is not None and k not in taken]


def model_tag(point_dir: Path) -> str:
    """The checkpoint folder of one point's training stages, <sweep>-<point>-<hash>: unique to the point's
    directory (an absolute path), so a sweep folder of the same name elsewhere never shares it (paths.folder_tag)."""
    return paths.folder_tag(re.sub(r"[^A-Za-z0-9_.-]", "_", f"{point_dir.parent.name}-{point_dir.name}"), point_dir)


def _of_stage(e: ConfigError, stage: str, check: Callable[[dict], object], given: dict) -> ConfigError:
    """A value a stage's checks refuse, named with the stage where its --stage-arg gave it (`--device_batch_size=0`
    alone read as the sweep's flag); one the flags without the stage's own are refused for reads as every command
    words it (`--depth=1000000: at most 10000`)."""
    try:
        check(given)
    except ConfigError:
        return e
    return ConfigError(f"{stage}: {e}")


def rechain(argv: tuple[str, ...], values: dict[str, str]) -> tuple[str, ...]:
    """The stage's planned flags with the chained ones set to this point's values (added when missing)."""
    out, seen = [], set()
    for token in argv:
        key = token[2:].partition("=")[0] if token.startswith("--") else None
        if key in values:
            seen.add(key)
            token = f"--{key}={values[key]}"
        out.append(token)
    return (*out, *(f"--{k}={v}" for k, v in values.items() if k not in seen))


@dataclass(frozen=True)
class FlowSweep:
    """A sweep whose every point runs a flow's stages: one planned Sweep per stage (same axes), so each
    stage's workload plans its own batch arithmetic and time at each rank count."""

    flow: str
    stages: tuple[Stage, ...]
    sweeps: tuple[planmod.Sweep, ...]
    shape: tuple[tuple[str, str], ...] = ()  # the MODEL_FLAGS given: a kept pre-training's are compared (_run_stages)

    @classmethod
    def build(cls, flow: str, stages: str | None, train: dict, stage_args: list[str], **sweep_kw) -> "FlowSweep":
        """`train`: the sweep's trainer flags (pre-training's; the shared ones go to every stage);
        `stage_args`: `--stage-arg STAGE:KEY=VALUE`; `sweep_kw`: the axes, as bench.launch.plan.Sweep takes."""
        chosen = select(flow, stages)
        if sweep_kw.pop("workload", workloads.DEFAULT) != workloads.DEFAULT:
            raise ConfigError("--flow runs each stage's own workload; leave out --workload")
        per_stage = parse_stage_args(stage_args, chosen, flow)
        train = {k: v for k, v in train.items() if v is not None}
        for stage in chosen:
            refuse_chained(stage, per_stage[stage.name], f"--stage-arg {stage.name}:")
            if stage.workload == workloads.DEFAULT:
                refuse_chained(stage, train, "--train-arg ")
        shared = {k: train[k] for k in SHARED_FLAGS if k in train}
        pre_stage = next((s for s in chosen if s.workload == workloads.DEFAULT), None)
        pre = pre_stage.name if pre_stage else workloads.DEFAULT
        pre_chained = tuple(key for key, _ in pre_stage.chain) if pre_stage else ()
        pretraining = per_stage.get(pre, {})
        for key, text in pretraining.items():  # its --stage-arg would win over the trainer flag with no word said
            if key in train and not _agrees(train[key], text):
                raise ConfigError(f"--stage-arg {pre}:{key}={text} and the trainer flags' {key}={train[key]} (--{key} "
                                  f"or --train-arg {key}=) disagree; give {key} once")
        try:
            model = workloads.get(workloads.DEFAULT).model_of({**train, **pretraining})  # what later stages load
        except (FlagValueError, UnknownFlags) as e:
            raise as_given(e, pre, pretraining, train, pre_chained) from None
        except ConfigError as e:
            raise _of_stage(e, pre, workloads.get(workloads.DEFAULT).model_of, train) from None
        sweeps = []
        for stage in chosen:
            own = dict(train) if stage.workload == workloads.DEFAULT else \
                {**shared, **{k: train[k] for k in stage.inherit if k in train}}
            chained = {k: PLAN_TAG if "{tag}" in v else ("1" if "{" in v else v) for k, v in stage.chain}
            flags = {**own, **per_stage[stage.name], **chained}
            try:  # the stage's flags alone first: the sweep's own checks (--gpus-per-node) are no stage's
                workloads.get(stage.workload).settings(flags, sweep_kw.get("scaling", "weak"))
            except (FlagValueError, UnknownFlags) as e:
                raise as_given(e, stage.name, per_stage[stage.name], train, tuple(k for k, _ in stage.chain)) from None
            except ConfigError as e:
                raise _of_stage(e, stage.name, lambda f, w=stage.workload: workloads.get(w).settings(
                    f, sweep_kw.get("scaling", "weak")), {**own, **chained}) from None
            sweeps.append(planmod.Sweep(**sweep_kw, workload=stage.workload, model=model, train=flags))
        given = {**train, **pretraining}
        return cls(flow, chosen, tuple(sweeps), tuple((k, str(given[k])) for k in MODEL_FLAGS if k in given))

    @property
    def left_out(self) -> list[str]:
        """The flow's stages this sweep does not run (not chosen, or not registered in this installation)."""
        return [s.name for s in FLOWS[self.flow] if s not in self.stages]

    @property
    def first(self) -> planmod.Sweep:
        return self.sweeps[0]

    def points(self) -> list[tuple[planmod.Point, list[planmod.Point]]]:
        """(the point, each stage's plan of it): the stages' sweeps have the same axes, in the same order."""
        return [(stage_points[0], list(stage_points)) for stage_points in zip(*(s.points() for s in self.sweeps))]

    def stage_argv(self, stage: Stage, point: planmod.Point, tag: str) -> tuple[str, ...]:
        fields = {"tag": tag, **{k: str(v) for k, v in point.plan.columns}}
        return rechain(point.train_argv, {k: v.format(**fields) for k, v in stage.chain})

    @property
    def tokenizer_minutes(self) -> int:
        """Each job's time for the tokenizer: one trains it when the sweep has none, the others wait for it."""
        return tokenizer_minutes(self.first.shards_needed())

    def setup_minutes(self, image_step: bool) -> int:
        """Each job's time before its first stage: the tokenizer's, and its image step's where the runtime has one
        (the tokenizer's task runs in the run's image)."""
        return self.tokenizer_minutes + (IMAGE_STEP_MINUTES if image_step else 0)

    def job_minutes(self, stage_points: list[planmod.Point]) -> int:
        """The job's time limit as submit gives it: the tokenizer, then each stage with its image step, if any."""
        image_step = default_image_step(stage_points[0].runtime)
        return self.setup_minutes(image_step) + sum(run_job_minutes(p.time_minutes, image_step) for p in stage_points)

    def describe(self) -> dict:
        return {**self.first.describe(), "workload": None, "flow": self.flow, "left_out": self.left_out,
                "stages": [{"name": s.name, "workload": s.workload, "train": sw.train}
                           for s, sw in zip(self.stages, self.sweeps)]}


def missing_staged(stages: tuple[Stage, ...], base_dir: str, settings: tuple = ()) -> list[str]:
    """What the stages read besides the shards and is not staged under `base_dir`: one line per staging (the chat
    stages share one), after the stages that need it, naming what is missing and the command that stages it.
    `settings`: each stage's sweep's (bench.workloads.base.Settings), in the stages' order, where known."""
    needed: dict[str, list[str]] = {}
    for i, stage in enumerate(stages):
        if line := workloads.get(stage.workload).missing_staged(base_dir, settings[i] if settings else None):
            needed.setdefault(line, []).append(stage.name)
    return [f"{', '.join(names)}: {line}" for line, names in needed.items()]


def check_staged(stages: tuple[Stage, ...], base_dir: str, settings: tuple = ()) -> None:
    """Refuse stages whose staged data is missing, in one line, before anything runs: a flow would stop at the
    first such stage only after the stages before it (base_train's hours) had run."""
    if missing := missing_staged(stages, base_dir, settings):
        raise DataError(f"data the stages need is not staged under {base_dir}: {'; and '.join(missing)}")


def ok_stages(stages: tuple[Stage, ...], point_dir: Path) -> set[str]:
    """The stages whose run.json under point_dir says ok: a rerun of the point keeps them."""
    ok = set()
    for s in stages:
        try:
            if contract.read_run_json(point_dir / s.name).get("status") == "ok":
                ok.add(s.name)
        except OSError as e:  # a directory, EACCES, EIO: the stage could not be run there either
            raise run_dir_error(point_dir / s.name, e) from None
    return ok


def missing_checkpoints(fs: "FlowSweep", base_dir: str, ok: set[str], tag: str) -> list[str]:
    """The point's stages (those not in `ok`, ok before: ok_stages) that load a checkpoint no stage before them in
    this sweep saves and <base_dir> does not hold under the point's tag (`--stages chat_sft` alone), one line each:
    such a stage fails only after the tokenizer and the stages before it have run."""
    made, missing = set(), []
    for stage, sweep in zip(fs.stages, fs.sweeps):
        phase = workloads.get(stage.workload).checkpoint_read(sweep.settings)
        folder = Path(base_dir, paths.PHASE_DIRS.get(phase, ""), tag)
        if phase and phase not in made and stage.name not in ok and not paths.saved_steps(folder):
            saver = next((s for s in FLOWS[fs.flow] if s.saves == phase), None)
            advice = "" if saver is None else f" ({saver.name} saves it: add it to --stages)"
            if saver is not None and saver.workload not in workloads.names():  # --stages would refuse it (select)
                advice = (f" ({saver.name} saves it, but needs the workload {saver.workload!r}, which this "
                          f"installation does not register)")
            missing.append(f"{stage.name} loads the {phase} checkpoint, which {folder} does not hold{advice}")
        made.add(stage.saves)
    return missing


# What shortens a flow's job that its partition would refuse.
FLOW_TOO_LONG = ("run part of its stages per sweep (--stages), shorten the longest stage (--stage-arg STAGE:KEY=VALUE, "
                 "e.g. chat_eval_mid:max_problems=100), give the decode rate measured on your GPUs "
                 "(--assume-decode-tok-s), or choose another --partition")


def format_table(fs: FlowSweep, partition: str | None = None) -> str:
    """The plan: per node count and runtime, a row per stage (its batch arithmetic, time limit and estimate)
    and the job's time limit covering them all, checked against the partition (--partition, else the site's
    default one)."""
    head = ("nodes", "runtime", "repeats", "ranks", "stage", "batch", "time", "est_h", "note")
    rows, jobs, too_long = [], 0, False
    limit = site_partition(fs.first.site, partition)
    for (n, rt), group in itertools.groupby(fs.points(), key=lambda pp: (pp[0].nodes, pp[0].runtime)):
        group = list(group)
        point, stage_points = group[0]
        for i, (stage, sw, sp) in enumerate(zip(fs.stages, fs.sweeps, stage_points)):
            short = sp.short_time_note("stage")
            if short and i < len(fs.stages) - 1:  # a stage that does not end ok ends its point's flow
                short += ", and the stages after it do not run"
            if not sp.possible:
                rows.append((n, rt, len(group), point.ranks, stage.name, "-", "-", "-", "impossible: " + sp.reason))
                continue
            batch = " ".join(f"{h}={fmt.format(sp.plan.column(key, '-'))}"
                             for h, key, fmt in sw.workload_impl.PLAN_COLUMNS)
            est = "?" if sp.est_hours is None else f"{sp.est_hours:.2f}"
            rows.append((n, rt, len(group), point.ranks, stage.name, batch or "-", sp.time_limit, est,
                         "; ".join(filter(None, [sp.note, planmod.memory_warning(sw, sp), short]))))
        possible = all(sp.possible for sp in stage_points)
        over = over_partition(limit, fs.job_minutes(stage_points)) if possible else ""
        too_long = too_long or bool(over)
        jobs += len(group) if possible and not over else 0
        rows.append((n, rt, len(group), point.ranks, "= job", "stages in turn, one allocation",
                     planmod.slurm_time(fs.job_minutes(stage_points)) if possible else "-",
                     "", "not submitted: a stage cannot run" if not possible else
                     f"not submitted: {over} (below)" if over else ""))
    lines = tabulate(rows, headers=head, tablefmt="plain", disable_numparse=True).splitlines()
    batch = planmod.column_legend(h for sw in fs.sweeps for h, _, _ in sw.workload_impl.PLAN_COLUMNS)
    lines.append("; ".join(["time: each stage's limit, the whole job's on its job row",
                            "est_h: a stage's estimated wall-clock hours in one job (not node-hours)", *batch]))
    stepped = [rt for rt in fs.first.runtimes if default_image_step(rt)]  # the job's time as job_minutes gives it
    lines += ["", f"flow: {fs.flow}, stages {' -> '.join(s.name for s in fs.stages)}; each stage's run directory "
                  f"<sweep>/<point>/<stage>; the tokenizer trained once per sweep, before the first stage (each job's "
                  f"time has {fs.tokenizer_minutes} min for it: one job trains it, the others wait for it)"
                  + (f"; under {', '.join(stepped)}, + {IMAGE_STEP_MINUTES} min image step before the tokenizer and "
                     f"before each stage" if stepped else "")]
    if fs.left_out:
        unregistered = [s.name for s in FLOWS[fs.flow] if s.workload not in workloads.names()]
        lines.append(f"left out: {', '.join(fs.left_out)}" + (f" ({', '.join(unregistered)} not registered in this "
                                                              f"installation)" if unregistered else ""))
    for stage, sw in zip(fs.stages, fs.sweeps):
        lines += [f"{stage.name}: {line.replace(PLAN_TAG, TAG_SHOWN)}"
                  for line in sw.workload_impl.describe(sw)]
    if too_long:
        lines.append(f"a job over partition {limit.name}'s time limit: {FLOW_TOO_LONG}")
    s = fs.first
    lines.append(f"{jobs} job(s), one per point (estimates per stage: {s.gpu} at {s.assume_mfu:.0%} MFU x "
                 f"B/(B+{planmod.MFU_HALF_BATCH}), generation at {s.assume_decode_tok_s:g} tok/s per rank, "
                 f"+ {s.startup_s:.0f} s start-up; a stage without one gets {planmod.DEFAULT_RUN_MINUTES} min)")
    return "\n".join(lines)


# -- jobs -----------------------------------------------------------------------------------------------

@dataclass
class FlowJob:
    """One point's job and what its flow.json says."""

    job: Job
    stages: tuple[Stage, ...]
    tag: str
    flow: str
    point_id: str
    tokenizer_args: tuple[str, ...] = ()

    @property
    def point_dir(self) -> Path:
        return self.job.job_dir


def flow_record(flow: str, point_id: str, tag: str, stages: tuple[Stage, ...]) -> dict:
    """flow.json: which flow the point runs, the model tag its stages chain through, and its stages in order
    (each one's run directory, relative to the point's; each run.json says how that stage ended)."""
    return {"flow": flow, "point": point_id, "model_tag": tag,
            "stages": [{"name": s.name, "workload": s.workload, "run_dir": s.name} for s in stages]}


def assemble(fs: FlowSweep, opts: LaunchOptions, sweep_dir: Path, tokenizer_args: tuple[str, ...] = (),
             note: Callable[[str], None] = print) -> list[FlowJob]:
    """One job per possible point, its stages in turn; a point with a stage that cannot run is left out
    with a note; a job over the partition's time limit is refused (one point's stages share one allocation)."""
    sweep_dir = Path(sweep_dir).absolute()
    sweep_id = sweep_dir.name
    limit = site_partition(opts.site, opts.partition)
    jobs, reasons = [], []
    for point, stage_points in fs.points():
        tag = model_tag(sweep_dir / point.run_id)
        bad = next((sp for sp in stage_points if not sp.possible), None)
        # a login node that does not see the nodes' base directory cannot judge their checkpoints
        missing = [] if bad or unseen(opts.base_dir) else \
            missing_checkpoints(fs, opts.base_dir, ok_stages(fs.stages, sweep_dir / point.run_id), tag)
        if bad or missing:
            reasons.append(f"a stage cannot run: {bad.reason}" if bad else "; ".join(missing))
            note(f"skipping {point.run_id}: {reasons[-1]}")
            continue
        runs: list[Run] = []
        for stage, sw, sp in zip(fs.stages, fs.sweeps, stage_points):
            planned = replace(sp, plan=replace(sp.plan, train_argv=fs.stage_argv(stage, sp, tag)))
            run = build_run(sw, planned, sweep_dir / point.run_id / stage.name, opts, sweep_id)
            run.manifest["stage"] = stage.name
            runs.append(replace(run, run_id=f"{point.run_id}/{stage.name}"))
        setup = fs.setup_minutes(runs[0].image_step is not None)
        check_partition(limit, runs, f"{point.run_id} (its {len(runs)} stages in one job)", FLOW_TOO_LONG, setup)
        job = make_job(f"{sweep_id}-{point.run_id}", sweep_dir / point.run_id, fs.first, runs, opts,
                       f"sweep {sweep_id}, point {point.run_id}: flow {fs.flow}", setup)
        jobs.append(FlowJob(job, fs.stages, tag, fs.flow, point.run_id, tuple(tokenizer_args)))
    if not jobs:
        raise ConfigError(f"no point of this flow is possible: {'; '.join(sorted(set(reasons)))} "
                          f"(nanochat-bench plan --flow shows them)")
    check_allow_network(opts, [run for fj in jobs for run in fj.job.runs])
    return jobs


def write_flow_job(fj: FlowJob, text: str, manifests: bool = True) -> None:
    """The job as bench.launch.job.write_job writes one, then the point's flow.json."""
    write_job(fj.job, text, manifests)
    contract.write_json_atomic(fj.point_dir / FLOW_JSON, flow_record(fj.flow, fj.point_id, fj.tag, fj.stages))


def submit_flow(fs: FlowSweep, opts: LaunchOptions, sweep_dir: Path, backend, *, dry_run: bool = False,
                tokenizer_args: tuple[str, ...] = (), command: str | None = None,
                out: Callable[[str], None] = print) -> dict:
    """Render, write and submit one job per point; sweep.json lists each job's stage runs as <point>/<stage>,
    so `status` and `status --resubmit-failed` treat every stage as a run of its point's job. `command`: as
    bench.launch.submit.submit_sweep's."""
    from bench.launch import submit
    from bench.launch.flowrender import render_flow

    sweep_dir = Path(sweep_dir).absolute()
    submit.refuse_existing(sweep_dir, "stages")
    jobs = assemble(fs, opts, sweep_dir, tokenizer_args, note=out)
    texts = [render_flow(fj) for fj in jobs]
    for fj, text in zip(jobs, texts):
        write_flow_job(fj, text, manifests=not dry_run)
    return submit.submit_written(sweep_dir, [fj.job for fj in jobs], backend, dry_run, out, "stages", command,
                                 plan=fs.describe(), compare=False, flow=fs.flow)


# -- on this machine --------------------------------------------------------------------------------------

@dataclass
class LocalFlowResult:
    rc: int
    statuses: dict[str, str] = field(default_factory=dict)  # stage -> its run.json status
    failed: str | None = None  # the stage the flow stopped at


class Stop:
    """SIGINT, SIGQUIT, SIGTERM or SIGHUP to a local flow outside its stages (a stage's local run passes its own on
    to its workload): noted once, passed on to the tokenizer's training while it runs; the flow starts no stage
    after it."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.child: subprocess.Popen | None = None

    def __call__(self, signum, _frame) -> None:
        if self.signum is None:
            self.signum = signum
            if self.child is not None and self.child.poll() is None:
                self.child.send_signal(signum)

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum else ""


def ensure_tokenizer(tokenizer_args: tuple[str, ...], python: str, out: Callable[[str], None],
                     stop: Stop | None = None) -> None:
    """Train the tokenizer (and print its evaluation) unless $NANOCHAT_BASE_DIR has one: outside any run. With
    `stop`, its process has a session of its own and gets the signals `stop` receives (and nothing runs after one)."""
    from bench.launch.local import _own_session_dying_with_parent, dying_with_parent
    from bench.nanochat.tokenizer import TOKENIZER_PKL, tokenizer_dir

    if (tokenizer_dir() / TOKENIZER_PKL).is_file():
        out(f"tokenizer: {tokenizer_dir()} exists, kept{_kept_vocabulary(tokenizer_args)}")
        return
    for command in (["tokenizer", "train", *tokenizer_args], ["tokenizer", "eval"]):
        cmd = [python, "-m", "bench.cli", *command]
        if stop is not None and stop.signum:
            return
        out(f"tokenizer: {shlex.join(cmd)}")
        # dying with this process: a speedrun killed (SIGTERM, the terminal closed) leaves no tokenizer training on
        proc = subprocess.Popen(cmd, preexec_fn=dying_with_parent if stop is None else _own_session_dying_with_parent)
        if stop is not None:
            stop.child = proc
            if stop.signum:  # it came while the process was being started
                proc.send_signal(stop.signum)
        if proc.wait() != 0 and not (stop is not None and stop.signum):
            raise ConfigError(f"the tokenizer could not be trained ({shlex.join(cmd)} failed); no stage was run")


def _kept_vocabulary(tokenizer_args: tuple[str, ...]) -> str:
    """The kept tokenizer's vocabulary, and the one the flow's `tokenizer train` would make where the two differ: a
    tokenizer left by another use of the base directory (the README's CPU tour trains 8,192 tokens) is said, not
    silently trained with."""
    from bench.nanochat.tokenizer import DEFAULT_VOCAB_SIZE, saved_vocab_size

    if (have := saved_vocab_size()) is None:
        return ""  # damaged: the first stage's own check names it
    asked = dict(arg.lstrip("-").split("=", 1) for arg in tokenizer_args)  # --key=value, as --tokenizer-arg gives
    want = int(asked.get("vocab_size", DEFAULT_VOCAB_SIZE))
    if have == want:
        return f" ({have:,} tokens)"
    return (f" ({have:,} tokens, where this flow's `tokenizer train` would make {want:,}: move it away, or point "
            f"NANOCHAT_BASE_DIR elsewhere, to train that one)")


def run_local_flow(fs: FlowSweep, nproc: int, point_dir: Path, tokenizer_args: tuple[str, ...] = (),
                   python: str | None = None, out: Callable[[str], None] = print) -> LocalFlowResult:
    """The flow's stages in turn on this machine, each a local run (bench/launch/local.py) in
    <point_dir>/<stage>/, with the flags a one-node job of `nproc` ranks would give them. A stage that does
    not end ok stops the flow; the stages after it are recorded as not run. Stages already ok are kept, also after
    it. SIGINT, SIGQUIT, SIGTERM or SIGHUP outside a stage (the tokenizer's training, between stages) stops it there,
    the stages after it recorded as not run naming the signal (exit status 128+N); in a stage, that stage's run gets
    it, and the stages after it are recorded as not run naming the signal its run.json gives."""
    from bench.launch.local import FORWARDED
    from bench.runside.runclaim import claim

    from bench.workloads.stage import interpreter

    python = interpreter(python)  # the tokenizer's and every stage's: checked before either runs
    point_dir = Path(point_dir).absolute()
    if (point_dir / contract.RUN_JSON).exists():  # a run's (a stage's): its stages would nest in it, its record mixed
        raise ConfigError(f"--run-dir {point_dir} holds a run ({contract.RUN_JSON}), not a flow's stages; give a new "
                          f"directory, or the point directory of a flow (the one above its stages, with {FLOW_JSON})")
    [(_, stage_points)] = fs.points()
    bad = next((sp for sp in stage_points if not sp.possible), None)
    if bad is not None:
        raise ConfigError(f"this flow cannot run with {nproc} rank(s): {bad.reason}")
    # the stages a rerun keeps (ok before) read nothing more; checked before a directory, the tokenizer or a stage
    ok = ok_stages(fs.stages, point_dir)
    check_staged(tuple(s for s in fs.stages if s.name not in ok), str(Path(paths.base_dir()).absolute()))
    # a stage whose point has a planned K runs with that one (_run_stages), not with this environment's
    if any(workloads.get(s.workload).reads_val_files(sw.settings) and contract.ENV_VAL_FILES_K not in dict(sp.env)
           for s, sw, sp in zip(fs.stages, fs.sweeps, stage_points) if s.name not in ok):
        from bench.nanochat.dataset import resolve_val_files_k

        resolve_val_files_k()  # a bad NANOCHAT_VAL_FILES_K: refused here, not by the ranks of the first stage
    tag = point_tag(fs.flow, point_dir, out)
    if missing := missing_checkpoints(fs, paths.base_dir(), ok, tag):
        raise ConfigError(f"this flow cannot run: {'; '.join(missing)}")
    note_planned_k(fs, stage_points, ok, nproc, out)
    # one flow per point at a time: a second would set the first's running stage aside and train beside it
    claim(point_dir)
    try:  # before the tokenizer: a run directory that cannot be made must not cost its training first
        contract.write_json_atomic(point_dir / FLOW_JSON, flow_record(fs.flow, point_dir.name, tag, fs.stages))
    except OSError as e:
        raise run_dir_error(point_dir, e) from None
    stop = Stop()
    previous = {sig: signal.signal(sig, stop) for sig in FORWARDED}
    try:
        return _run_stages(fs, nproc, point_dir, stage_points, tag, tokenizer_args, python, out, stop)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def note_planned_k(fs: FlowSweep, stage_points: list, ok: set, nproc: int, out: Callable[[str], None]) -> None:
    """One line where this environment's NANOCHAT_VAL_FILES_K differs from the K the plan chose: the stages run
    with the plan's, as a Slurm job of the flow exports it over the one sbatch carries from the user's shell."""
    runs = [(sw, sp) for s, sw, sp in zip(fs.stages, fs.sweeps, stage_points) if s.name not in ok]
    if note := planmod.val_files_k_note(os.environ.get(contract.ENV_VAL_FILES_K), runs, "the stages run",
                                        "a Slurm job of this flow exports it", str(nproc)):
        out(note)


def _run_stages(fs: FlowSweep, nproc: int, point_dir: Path, stage_points: list, tag: str,
                tokenizer_args: tuple[str, ...], python: str, out: Callable[[str], None],
                stop: Stop) -> LocalFlowResult:
    """run_local_flow's tokenizer and stages, `stop` noting a signal that comes between them."""
    from bench.launch.local import run_local

    ensure_tokenizer(tokenizer_args, python, out, stop)
    pre = next((s for s in FLOWS[fs.flow] if s.workload == workloads.DEFAULT), None)
    if pre is not None and pre not in fs.stages and (note := _other_shape(point_dir / pre.name, fs.shape)):
        out(f"== {fs.flow}: {pre.name} ok in an earlier run of this flow, kept{note}")
    result = LocalFlowResult(0)
    ids = {"run_id": point_dir.name, "sweep_id": point_dir.parent.name}
    at, stopped_by = "the tokenizer's training", ""  # where a signal to the flow outside a stage finds it
    cancelled_by = None  # the signal that cancelled the stage the flow stopped at, as its run.json names it
    for stage, sp in zip(fs.stages, stage_points):
        if stop.signum and result.failed is None:
            result.rc, result.failed, stopped_by = 128 + stop.signum, at, stop.name
            out(f"== {fs.flow}: stopped by {stop.name} at {at}; the stages after it are not run")
        run_dir = point_dir / stage.name
        # before the not-run mark: an earlier run of this stage that ended ok is kept whatever failed now
        if contract.read_run_json(run_dir).get("status") == "ok":
            out(f"== {fs.flow}: {stage.name} ok in an earlier run of this flow, kept"
                + _other_flags(run_dir, fs.stage_argv(stage, sp, tag)))
            result.statuses[stage.name] = "ok"
            continue
        if result.failed is not None:
            if (run_dir / contract.TRAIN_LOG).exists():  # an earlier attempt's logs: kept whole, not marked
                _set_aside(run_dir)
            run_dir.mkdir(parents=True, exist_ok=True)
            contract.update_run_json(run_dir, **ids, stage=stage.name, runtime="bare",
                                     workload=workloads.get(stage.workload).run_workload)
            jobrecord.not_run(run_dir, result.failed, stopped_by, source="launcher", cancelled_by=cancelled_by)
            result.statuses[stage.name] = "cancelled"
            continue
        argv = list(fs.stage_argv(stage, sp, tag))
        out(f"== {fs.flow}: stage {stage.name} ({stage.workload}) in {run_dir}")
        if _never_ran(run_dir):  # the not-run mark alone: no attempt of this stage, nothing to keep aside
            (run_dir / contract.RUN_JSON).unlink()
            run_dir.rmdir()
        elif run_dir.exists():  # a stage that failed or was stopped: its last attempt makes way for this one
            _set_aside(run_dir)
        if stage.saves:
            _set_aside_checkpoints(stage.saves, tag, out)
        # the planned variables (K for these ranks) over this environment, as the job's script exports them
        rc = run_local(argv, nproc, run_dir, env={**os.environ, **dict(sp.env)}, workload=stage.workload,
                       python=python)
        try:
            manifest = contract.update_run_json(run_dir, **ids, stage=stage.name)
            status, message = manifest.status, manifest.message or ""
        except (contract.RunJsonError, contract.SchemaError) as e:
            # left damaged, or rewritten by a newer release: not this one's to settle, and no later stage can trust it
            status, message = "unreadable", str(e)
        result.statuses[stage.name] = status
        if rc != 0 or status != "ok":
            result.rc, result.failed = rc or 1, stage.name
            if status == "cancelled":
                cancelled_by = _cancelled_by(manifest.evidence)
            out(f"== {fs.flow}: stopped at {stage.name}: {status}: {message}".rstrip(": "))
        at = f"the end of stage {stage.name}"
    return result


def _cancelled_by(evidence) -> str:
    """The signal a cancelled run's evidence names: a launcher's stop before a rank's (PRECEDENCE's order)."""
    entries = [e if isinstance(e, dict) else vars(e) for e in evidence]  # as settle reads them
    for kind in ("stopped", "cancelled"):
        if name := next((e.get("signal") for e in entries if e.get("kind") == kind and e.get("signal")), None):
            return name
    return ""


def point_tag(flow: str, point_dir: Path, out: Callable[[str], None]) -> str:
    """The model tag of a local flow's point: the one its flow.json recorded when a run of it began (its training
    stages' checkpoints are there, also when an older release named it without the hash), else model_tag's. A
    flow.json that cannot be read as a record is refused (ConfigError), as a stage's damaged run.json is."""
    new = model_tag(point_dir.resolve())  # resolved: a rerun through another link to the point keeps its tag
    path = point_dir / FLOW_JSON
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        why = "" if isinstance(record, dict) else "does not hold a JSON object"
    except OSError:  # none yet, or unreadable: it is written anew below (or the run directory refused there)
        return new
    except json.JSONDecodeError as e:
        why = f"is not valid JSON ({e.msg}: line {e.lineno})"
    except UnicodeDecodeError:
        why = "is not UTF-8 text"
    except RecursionError:  # json's parser recurses once per nesting level
        why = "is not a record (arrays or objects nested too deep to read)"
    if why:  # cut off or empty: rewriting it would lose the tag the stages kept ok trained under
        raise ConfigError(f"{path} {why}; it records the model tag of the point's checkpoints: mend it (its stages' "
                          f"run.json give it after --model_tag=), or delete it for this flow to use {new}")
    recorded = record.get("model_tag")
    if not isinstance(recorded, str) or not recorded or recorded == new:
        return new
    out(f"== {flow}: model tag {recorded}, as its flow.json recorded (a new --run-dir would use {new})")
    return recorded


def _other_flags(run_dir: Path, argv: tuple[str, ...], only: dict | None = None,
                 then_what: str = "a new --run-dir runs it with this command's") -> str:
    """What a kept stage ran with that this command would not give it (its run.json's command, after `--`): a
    rerun with, say, another --depth keeps the model trained before, and says so. `only`: these flags alone,
    {flag: its value where not given}."""
    command = (contract.read_run_json(run_dir).get("launch") or {}).get("command") or []
    # a damaged run.json's command (a string, a number among the words): what that run was given is not known
    if not isinstance(command, list) or not all(isinstance(word, str) for word in command) or "--" not in command:
        return ""
    then, now = _flag_values(command[command.index("--") + 1:]), _flag_values(argv)
    if only is not None:
        then, now = ({key: values.get(key, default) for key, default in only.items()} for values in (then, now))
    shown = {None: "given", "": "''"}  # a bare switch; an empty value
    changed = [f"--{key} {shown.get(then[key], then[key]) if key in then else 'not given'} -> "
               f"{shown.get(now[key], now[key]) if key in now else 'not given'}"
               for key in sorted(then.keys() | now.keys()) if then.get(key, ...) != now.get(key, ...)]
    if not changed:
        return ""
    return f" (it ran with other flags, that run's -> this command's: {', '.join(changed)}; {then_what})"


def _other_shape(run_dir: Path, shape: tuple[tuple[str, str], ...]) -> str:
    """The model flags (MODEL_FLAGS) a kept pre-training ran with where `shape`, those given, differs, one left out
    read as the trainer's default: the later stages load the model it trained, yet are planned by the shape given."""
    from dataclasses import fields

    from bench.nanochat.config import TrainConfig

    try:
        if contract.read_run_json(run_dir).get("status") != "ok":
            return ""
    except (OSError, contract.RunJsonError):  # what that run was given is not known
        return ""
    defaults = {f.name: str(f.default) for f in fields(TrainConfig) if f.name in MODEL_FLAGS}
    return _other_flags(run_dir, tuple(f"--{key}={value}" for key, value in shape), defaults,
                        "the stages load its model, their estimates take this command's")


def _flag_values(argv) -> dict[str, str | None]:
    """{flag: value} of `--flag=value` and `--flag value` tokens; None for a bare switch (`--fp8`)."""
    values, open_key = {}, None
    for token in argv:
        if token.startswith("--"):
            key, eq, value = token[2:].partition("=")
            values[key], open_key = (value, None) if eq else (None, key)
        elif open_key is not None:
            values[open_key], open_key = token, None
    return values


def _never_ran(run_dir: Path) -> bool:
    """A stage directory that holds only the mark of a stage the flow did not start (run.json, its evidence all
    not_run): no attempt of its own, nothing to keep."""
    try:
        if [p.name for p in run_dir.iterdir()] != [contract.RUN_JSON]:
            return False
        return contract.never_started(contract.read_run_json(run_dir).get("evidence"))
    except (OSError, contract.RunJsonError):  # not known to be a mark alone: set aside whole, as an attempt is
        return False


def _set_aside(run_dir: Path) -> Path:
    """A stage directory that did not end ok moves to <stage>.attempt-<time> beside it, kept whole."""
    return run_dir.replace(run_dir.with_name(f"{run_dir.name}{paths.SET_ASIDE}{time.strftime('%Y%m%d-%H%M%S')}"))


def _set_aside_checkpoints(phase: str, tag: str, out: Callable[[str], None]) -> None:
    """The checkpoints an earlier attempt saved under the point's tag move aside, kept whole, before a training
    stage runs again: the next stage loads the largest step there, which could be theirs, not this attempt's."""
    from bench.nanochat.checkpoint import phase_dir

    folder = phase_dir(phase) / tag
    if folder.exists():
        out(f"== checkpoints of an earlier attempt in {folder} moved to {_set_aside(folder)}")
