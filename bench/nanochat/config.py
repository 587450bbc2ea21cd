"""The trainer's settings: one dataclass, turned into argparse flags with nanochat's names.

Field names, defaults and meanings are upstream base_train's (Nov 2025), plus `data_bin_dir` and
`force_flash_sdpa`. Flags take `--key=value` (nanochat's form) or `--key value`; a leading `--`
(as in `torchrun ... -m bench.nanochat.train -- --depth=20`) is ignored; an unknown flag fails with
the closest known names. `asdict(config)` is what run.json and the checkpoint metadata record.

Two upstream traps are fixed here: `-1` disables every periodic task (upstream's `step % -1 == 0`
made eval and sampling run at every step), and the CORE metric, which needs a 162 MB download and is
out of scope for a throughput benchmark, is refused with a clear message unless disabled.
"""

import argparse
import functools
import math
import os
import re
from dataclasses import MISSING, dataclass, fields

from bench.contract import ENV_FORCE_FLASH_SDPA
from bench.contract import field as _f  # a default and its one-line meaning: the contract's own fields too
from bench.errors import ConfigError, FlagValueError, UnknownFlags, close_hint
from bench.runside.heartbeat import INTERVAL_S, SILENT_AFTER_S
from bench.runside.join import JOIN_TIMEOUT_MULTINODE_S, JOIN_TIMEOUT_S
from bench.nanochat.watchdog import AUTO, AUTO_MARGIN_S, PERIODIC_S, START_S

# --fused_kernels: the hand-written Triton kernels (bench/nanochat/fused.py) by name, each with its meaning. The one
# list of the names; its order is the one a run records them in (run.json's config, e.g. "rotary_norm,softcap_loss"),
# so that one set of kernels is one value. A name is never reused for another kernel: a run directory says what ran.
FUSED_KERNELS = {
    "rotary_norm": "rotary + QK norm, forward and backward",
    "softcap_loss": "soft-capped logits + cross-entropy, forward and backward",
}
TRUE_WORDS, FALSE_WORDS = ("1", "true", "yes", "on"), ("0", "false", "no", "off")  # a boolean flag's values
# --sdpa_backends' names: the keys of attention.SDPA_BACKENDS, here so that validating a config (the planner does,
# on a login node) needs no torch
SDPA_BACKEND_NAMES = ("flash", "efficient", "cudnn", "math")
FUSED_ALL = ("all", *TRUE_WORDS)  # every kernel (true: the flag was a bool before softcap_loss)
FUSED_NONE = ("none", "", *FALSE_WORDS)
# The deepest GPT anything here plans, sizes or trains (~5e16 parameters; d20 has 5.6e8): the memory model walks
# every layer's matrices, which at a million layers takes seconds an estimate, and the planner makes dozens a point
MAX_DEPTH = 10_000
# sequences per rank per optimizer step (2^32 times the d20 recipe's): the device batches dividing them are then
# found in a fraction of a second (_divisors)
MAX_STEP_SEQUENCES = 2**40


def fused_kernel_names(value: str) -> tuple[str, ...]:
    """The kernels a --fused_kernels value names, in FUSED_KERNELS order, each once: a comma-separated list of
    names, `all` (or true, 1, yes, on) for every kernel, or none (false, 0, no, off, none, empty); ConfigError
    for an unknown name. validate() records ",".join() of them, the canonical value."""
    text = value.strip()
    if text.lower() in FUSED_ALL:
        return tuple(FUSED_KERNELS)
    if text.lower() in FUSED_NONE:
        return ()
    asked = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in dict.fromkeys(asked) if n not in FUSED_KERNELS]
    if unknown:
        raise ConfigError(f"--fused_kernels={value!r}: unknown kernel(s) {', '.join(unknown)}; valid: "
                          f"{', '.join(FUSED_KERNELS)} (comma-separated), all, or none")
    return tuple(n for n in FUSED_KERNELS if n in asked)


@dataclass
class RunSettings:
    """The settings every nanochat stage shares: its name, device, and how its waits are bounded."""

    # logging
    run: str = _f("dummy", "run name (upstream's wandb name; 'dummy' = no tracker)")
    # runtime
    device_type: str = _f("", "cuda | cpu | mps; empty = autodetect")
    preflight: bool = _f(True, "time all_reduce, reduce_scatter and all_gather before the stage (busbw into run.json)")
    deadline: float = _f(0.0, "stop before this time (epoch seconds): when the next step would end later, save a "
                              "checkpoint and end as `timeout` (0 = none; batch jobs set it from their time limit)")
    watchdog_s: float = _f(AUTO, "a collective that waits longer than this plus twice the slowest step ends the run as "
                                 "`hung`, naming the rank it waited for, or `nccl_timeout` where the heartbeats "
                                 f"cannot tell (-1 = {AUTO_MARGIN_S:g} s; 0 = the backend's "
                                 f"own timeout: 10 min NCCL, 30 min gloo); {START_S:g} s before the first step, "
                                 f"{PERIODIC_S:g} s during validation, samples and checkpoints "
                                 "(bench/nanochat/watchdog.py)")
    heartbeat_timeout_s: float = _f(SILENT_AFTER_S, "a rank whose heartbeat is silent this long ends the run as "
                                                    "`hung`, naming it, at any stage (0 = off)")
    join_timeout_s: float = _f(-1.0, "a rank that has not joined the process group this long after this one did "
                                     f"ends the run as `hung`, naming it (-1 = {JOIN_TIMEOUT_S:g} s on one node, "
                                     f"{JOIN_TIMEOUT_MULTINODE_S:g} s across nodes; 0 = the backend's own timeout: "
                                     "10 min NCCL, 30 min gloo)")

    def validate(self) -> None:
        """Refuse settings that cannot work, naming the flag and what is valid."""
        for name, sentinels in (("watchdog_s", "0 (off), -1 (the default)"), ("heartbeat_timeout_s", "0 (off)"),
                                ("join_timeout_s", "0 (off), -1 (the default)")):
            value = getattr(self, name)
            if not (WATCHDOG_MIN_S <= value <= WATCHDOG_MAX_S or value == 0
                    or value == -1 and name != "heartbeat_timeout_s"):
                raise ConfigError(f"--{name}={value:g}: give {sentinels} or {WATCHDOG_MIN_S:g} to {WATCHDOG_MAX_S:g} s "
                                  f"(a stopped rank is told apart from a waiting one by heartbeats {INTERVAL_S:g} s "
                                  "apart; a week is longer than any job, and inf is no timeout torch can set)")
        if self.device_type not in ("", "cuda", "cpu", "mps"):
            raise ConfigError(f"--device_type={self.device_type!r}: valid values are cuda, cpu, mps or empty")

    def check_positive(self, *names: str) -> None:
        """Each named count must be > 0."""
        for name in names:
            if getattr(self, name) <= 0:
                raise ConfigError(f"--{name}={getattr(self, name)}: must be a positive integer")

    def check_rates(self, *names: str, what: str = "") -> None:
        """Each named learning rate (or fraction of one) must be finite and > 0."""
        for name in names:
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ConfigError(f"--{name}={value!r}: {what}must be a finite number > 0 "
                                  f"(default {type(self).__dataclass_fields__[name].default})")


def check_model_tag(tag: str, flag: str, phases: str) -> None:
    """A tag is a path of folder names below a phase's checkpoint folder (a sweep's runs save under
    <sweep>-<hash>/<run>), never leaving it: `../x` or `/x` would read (or write) another phase's or another place's
    checkpoints."""
    parts = tag.split("/") if tag else []
    if any(p in (".", "..") or not re.fullmatch(r"[A-Za-z0-9_.-]+", p) for p in parts):
        raise ConfigError(f"{flag}={tag!r}: a folder below {phases}: names of letters, digits, '.', '_' and '-' "
                          "joined by '/', none '.' or '..'")


def check_weight_decay(value: float) -> None:
    """AdamW's weight decay: a finite number >= 0 (it took -1 or nan as given: weights that grow, or a divergence)."""
    if not (math.isfinite(value) and value >= 0):
        raise ConfigError(f"--weight_decay={value!r}: must be a finite number >= 0 (default 0.0)")


@dataclass
class TrainConfig(RunSettings):
    # model
    depth: int = _f(20, "transformer depth; sets every model dimension (width aspect_ratio x depth)")
    aspect_ratio: int = _f(64, "model width = depth x aspect_ratio (upstream's later name; 64 = the Nov 2025 shapes)")
    max_seq_len: int = _f(2048, "context length T in tokens")
    # training horizon: the first one > 0 wins
    num_iterations: int = _f(-1, "explicit number of optimizer steps (-1 = derive from the next two)")
    target_flops: float = _f(-1.0, "train for this many FLOPs (-1 = off)")
    target_param_data_ratio: int = _f(20, "Chinchilla tokens per parameter (-1 = off)")
    # optimisation
    device_batch_size: int = _f(32, "sequences per micro-batch per rank (B)")
    total_batch_size: int = _f(524288, "tokens per optimizer step over all ranks")
    embedding_lr: float = _f(0.2, "AdamW lr of the embedding, x (dim/768)^-0.5")
    unembedding_lr: float = _f(0.004, "AdamW lr of lm_head, x (dim/768)^-0.5")
    weight_decay: float = _f(0.0, "AdamW weight decay")
    matrix_lr: float = _f(0.02, "Muon lr of the block matrices")
    grad_clip: float = _f(1.0, "clip the (local) gradient norm to this; 0 = off")
    warmup_ratio: float = _f(0.0, "fraction of steps of linear LR warmup")
    warmdown_ratio: float = _f(0.2, "fraction of steps of linear LR warmdown at the end")
    final_lr_frac: float = _f(0.0, "LR multiplier reached at the end of the warmdown")
    resume_from_step: int = _f(-1, "resume from the checkpoint of this step, with the ranks that saved it "
                                   "(-1 = start fresh)")
    # evaluation
    eval_every: int = _f(250, "validation bpb every this many steps (-1 = off)")
    eval_tokens: int = _f(20 * 524288, "tokens per validation, over all ranks")
    core_metric_every: int = _f(-1, "CORE metric interval; not built in: only values <= 0 (off) are accepted")
    core_metric_max_per_task: int = _f(500, "CORE examples per task (accepted for compatibility)")
    sample_every: int = _f(2000, "print greedy samples of a few prompts every this many steps (-1 = off)")
    # output
    save_every: int = _f(-1, "checkpoint every this many steps and at the end (-1 or 0 = never: a benchmark saves "
                             "nothing unless asked)")
    model_tag: str = _f("", "checkpoint subdirectory (default d<depth>; in a run directory <sweep>-<hash>/<run>)")
    # nanochat-bench additions
    data_bin_dir: str = _f("", "read pre-tokenized .bin splits from this directory instead of parquet shards")
    force_flash_sdpa: bool = _f(False, "attention only via flash-style kernels (cuDNN, flash, memory-efficient) "
                                       "(also NANOCHAT_FORCE_FLASH_SDPA=1)")
    sdpa_backends: str = _f("", "allow only these attention kernels, comma-separated from flash, efficient, "
                                "cudnn, math (empty = PyTorch's choice)")
    profile_step: int = _f(-1, "profile this step with torch.profiler into the run directory (-1 = off)")
    breakdown: bool = _f(True, "split each step into fwd+bwd, exposed comm, optimizer and data wait (step events)")
    strategy: str = _f("zero2", "memory strategy (bench/nanochat/parallel.py): zero2 (sharded optimizers, "
                                "replicated parameters) or fsdp (FSDP2), each optionally +ac (activation "
                                "checkpointing per block); fsdp also +offload (parameters, gradients and "
                                "optimizer state in host memory), e.g. fsdp+ac+offload")

    fp8: bool = _f(False, "FP8 matmuls (tensorwise scaling, e4m3 forward, e5m2 gradients) for the blocks' Linears; "
                          "needs a GPU of compute capability 8.9+ (bench/nanochat/fp8.py)")
    fp8_lm_head: bool = _f(False, "FP8 matmuls for lm_head too (alone, or with --fp8)")
    fused_kernels: str = _f("", "hand-written Triton kernels (bench/nanochat/fused.py) instead of compile's, "
                                "comma-separated from " + ", ".join(f"{n} ({m})" for n, m in FUSED_KERNELS.items())
                                + "; all (or True) = every one, empty (or False) = none; needs a CUDA GPU")

    def validate(self) -> None:
        if self.core_metric_every > 0:
            raise ConfigError(
                f"--core_metric_every={self.core_metric_every}: the CORE metric is not part of this benchmark "
                f"(it needs the 162 MB eval bundle); use --core_metric_every=-1 (the default)")
        for name, meaning in MINUS_ONE_MEANS.items():
            value = getattr(self, name)
            if value < -1:  # -1 is the documented off; below it is a typo, not a setting
                raise ConfigError(f"--{name}={value}: give a count >= 0, or -1 to {meaning}")
        if self.target_flops < 0 and self.target_flops != -1:
            raise ConfigError(f"--target_flops={self.target_flops}: give FLOPs > 0, or -1 to turn it off")
        super().validate()
        self.check_rates(*LEARNING_RATES, what="a learning rate ")
        check_weight_decay(self.weight_decay)
        for name in SCHEDULE_FRACTIONS:  # nan ended the run in a traceback at step 0; < 0 or > 1 bent the LR curve
            value = getattr(self, name)
            if not 0 <= value <= 1:
                raise ConfigError(f"--{name}={value!r}: a fraction from 0 to 1 "
                                  f"(default {TrainConfig.__dataclass_fields__[name].default})")
        if not (math.isfinite(self.grad_clip) and self.grad_clip >= 0):  # nan turned clipping off unsaid
            raise ConfigError(f"--grad_clip={self.grad_clip!r}: a finite gradient norm > 0, or 0 for no clipping")
        if self.eval_tokens < 0:
            raise ConfigError(f"--eval_tokens={self.eval_tokens}: must be >= 0")
        # <sweep>-<hash>/<run> too: the default tag in a run directory, and the one a deadline stop says to resume with
        check_model_tag(self.model_tag, "--model_tag", "base_checkpoints/")
        unknown = [n for n in self.sdpa_backends.split(",") if n.strip() and n.strip() not in SDPA_BACKEND_NAMES]
        if unknown:
            raise ConfigError(f"--sdpa_backends={self.sdpa_backends!r}: unknown kernel(s) {', '.join(unknown)}; "
                              f"valid: {', '.join(SDPA_BACKEND_NAMES)}")
        self.fused_kernels = ",".join(fused_kernel_names(self.fused_kernels))  # canonical: what run.json records

        from bench.nanochat.strategy import Strategy

        strategy = Strategy.parse(self.strategy)
        if strategy.fsdp and (self.save_every > 0 or self.resume_from_step >= 0):
            raise ConfigError(f"--strategy={self.strategy}: checkpoints of FSDP-sharded models are not written "
                              f"or read yet; leave out --save_every and --resume_from_step, or use zero2")
        self.check_positive("depth", "aspect_ratio", "max_seq_len", "device_batch_size", "total_batch_size")
        check_depth_limit(self.depth)
        if problem := shape_problem(self.depth, self.aspect_ratio):
            raise ConfigError(f"--depth={self.depth} --aspect_ratio={self.aspect_ratio}: {problem}")
        if self.num_iterations <= 0 and self.target_flops <= 0 and self.target_param_data_ratio <= 0:
            raise ConfigError("no training horizon: set one of --num_iterations, --target_flops, "
                              "--target_param_data_ratio to a value > 0")


def check_depth_limit(depth: int, name: str = "--depth") -> None:
    """A depth past MAX_DEPTH as one error line, worded alike by every command that takes a depth (`name`)."""
    if depth > MAX_DEPTH:
        raise ConfigError(f"{name}={depth}: at most {MAX_DEPTH} (a GPT of ~5e16 parameters already)")


def shape_problem(depth: int, aspect_ratio: int) -> str | None:
    """Why the GPT of this depth and aspect ratio cannot be built, else None: its width is split into heads of
    at most 128 channels (gpt.GPTConfig.from_depth), each of one even size (rotary embeddings turn pairs);
    a width that does not split so fails an assertion or the first forward's shapes, long after start-up."""
    from bench.nanochat.gptconfig import GPTConfig

    def splits(c: GPTConfig) -> bool:
        return c.n_embd % c.n_head == 0 and c.n_embd // c.n_head % 2 == 0

    shape = GPTConfig.from_depth(depth, 1, 1, aspect_ratio)
    if splits(shape):
        return None
    # outward from the one given, the lower first on a tie: every multiple of 256 splits, so one is < 256 away (a
    # pass over every ratio up to twice the given took minutes at --aspect_ratio 10000001)
    near = next(r for d in range(256) for r in (aspect_ratio - d, aspect_ratio + d)
                if r >= 1 and splits(GPTConfig.from_depth(depth, 1, 1, r)))
    return (f"width {shape.n_embd} does not split into {shape.n_head} heads of one even size (heads of at most "
            f"128, rotary embeddings turn pairs of channels); at depth {depth} e.g. aspect ratio {near}")


WATCHDOG_MIN_S = 2 * INTERVAL_S
# A week, longer than any batch job: torch takes a collective's timeout as a timedelta, which inf or 1e300
# overflows (the run failed at its first collective, long after the flags were accepted).
WATCHDOG_MAX_S = 7 * 24 * 3600.0
LEARNING_RATES = ("embedding_lr", "unembedding_lr", "matrix_lr")
SCHEDULE_FRACTIONS = ("warmup_ratio", "warmdown_ratio", "final_lr_frac")

# Counts whose -1 has a documented meaning (the help texts); a value below -1 is refused.
MINUS_ONE_MEANS = {
    "num_iterations": "derive the horizon from --target_flops or --target_param_data_ratio",
    "target_param_data_ratio": "turn it off",
    "eval_every": "turn validation off",
    "sample_every": "turn sampling off",
    "save_every": "save no checkpoint (0 too; --deadline still saves one)",
    "profile_step": "turn profiling off",
    "resume_from_step": "start fresh (or give the step of a checkpoint saved with --save_every)",
}


def bool_word(text: str) -> bool | None:
    """True or False for a boolean flag's word in any case (TRUE_WORDS, FALSE_WORDS), None for another word."""
    value = text.strip().lower()
    return True if value in TRUE_WORDS else False if value in FALSE_WORDS else None


def force_flash_from_env(environ=os.environ) -> bool:
    """True when NANOCHAT_FORCE_FLASH_SDPA asks for forced kernels (a boolean flag's true words: 1/true/yes/on).
    Another word is a ConfigError: read as off, a misspelt `=ture` let attention fall back to the math kernel."""
    raw = environ.get(ENV_FORCE_FLASH_SDPA, "")
    forced = bool_word(raw) if raw.strip() else False  # set empty: off, as unset
    if forced is None:
        raise ConfigError(f"{ENV_FORCE_FLASH_SDPA}={raw!r}: give {'/'.join(TRUE_WORDS)} to force flash SDPA, "
                          f"{'/'.join(FALSE_WORDS)} (or leave it unset) not to")
    return forced


def _parse_bool(text: str) -> bool:
    value = bool_word(text)
    if value is not None:
        return value
    raise argparse.ArgumentTypeError(f"expected a boolean (1/0, true/false), got {text!r}")


# What a flag of each type takes, for a value its parser cannot read
VALUE_KINDS = {int: "a whole number", float: "a number", bool: "a boolean (1/0, true/false)", str: "a value"}


class _Parser(argparse.ArgumentParser):
    """argparse, with errors raised as ConfigError (one clear line) instead of exiting."""

    def error(self, message: str):
        raise ConfigError(f"{self.prog}: {message}")


def build_parser(cls=None, prog: str = "bench.nanochat.train", description: str = "") -> argparse.ArgumentParser:
    """argparse flags of a stage's settings dataclass (TrainConfig by default), one per field."""
    cls = cls or TrainConfig
    parser = _Parser(prog=prog, allow_abbrev=False, exit_on_error=False,  # a bad value: parse_config names it
                     description=description or "nanochat base pretraining (flags as upstream base_train: --key=value)")
    for f in fields(cls):
        default = f.default if f.default is not MISSING else None
        help_text = f"{f.metadata.get('doc', '')} (default: {default!r})"
        if f.type is bool:
            parser.add_argument(f"--{f.name}", nargs="?", const=True, default=default, type=_parse_bool,
                                help=help_text, metavar="BOOL")
        else:
            parser.add_argument(f"--{f.name}", type=f.type, default=default, help=help_text,
                                metavar=f.type.__name__.upper())
    return parser


def parse_config(cls, argv: list[str], prog: str, description: str = ""):
    """A stage's settings from nanochat-style flags (`--key=value`; a leading `--` ignored), checked by its
    validate(); unknown flags fail with the closest known names."""
    argv = list(argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    try:
        args, unknown = build_parser(cls, prog, description).parse_known_args(argv)
    except argparse.ArgumentError as e:  # a value its type cannot read, or a flag without its value
        name = (e.argument_name or "").lstrip("-")
        kind = {f.name: f.type for f in fields(cls)}.get(name)
        raise FlagValueError(f"{prog}: {e}", name, VALUE_KINDS.get(kind, "a value")) from None
    if unknown:
        known = [f.name for f in fields(cls)]
        names = [token.split("=", 1)[0].lstrip("-") for token in unknown]
        problems = [f"{token!r}{close_hint(name, known, '--')}" for token, name in zip(unknown, names)]
        raise UnknownFlags(f"unknown argument(s): {'; '.join(problems)}; see --help for the valid flags", names, known)
    config = cls(**vars(args))
    config.validate()
    return config


def argparse_spellings(cls, argv: list[str], short: dict[str, str] | None = None) -> list[str]:
    """argv with the spellings of an upstream argparse script (`-x 100`, `--max-problems 100`, `--max-problems=100`,
    `-x100`) for the fields of cls, in `short` for the one-letter ones, rewritten as `--key=value`; other tokens as
    given, for parse_config to read or to refuse."""
    short = short or {}
    names = {f.name for f in fields(cls)}

    def field_flag(token: str) -> str | None:
        if token in short:
            return short[token]
        if token.startswith("--") and "-" in token[2:] and token[2:].replace("-", "_") in names:
            return token[2:].replace("-", "_")
        return None

    argv, out, i = list(argv), [], 0
    while i < len(argv):
        token = argv[i]
        flag, eq, value = token.partition("=")
        name = field_flag(flag)
        if name is None and flag[:2] in short and len(flag) > 2 and not eq:  # -x100
            name, eq, value = short[flag[:2]], "=", flag[2:]
        if name is None:
            out.append(token)
        elif eq:
            out.append(f"--{name}={value}")
        elif i + 1 < len(argv):
            out.append(f"--{name}={argv[i + 1]}")
            i += 1
        else:
            raise ConfigError(f"{token}: expects a value (see --help)")
        i += 1
    return out


def parse_args(argv: list[str]) -> TrainConfig:
    """TrainConfig from command-line flags (base pretraining's)."""
    return parse_config(TrainConfig, argv, "bench.nanochat.train")


def grad_accum_steps(total_batch_size: int, device_batch_size: int, max_seq_len: int, world_size: int) -> int:
    """Micro-steps per optimizer step at exactly this device batch size (the trainer never changes it;
    the planner's fit_batch may); a total that does not divide gets the sizes that would work."""
    fit = fit_batch(total_batch_size, device_batch_size, max_seq_len, world_size)
    if fit.possible and fit.device_batch_size == device_batch_size:
        return fit.grad_accum
    if too_many := _sequences_problem(total_batch_size, max_seq_len, world_size):
        raise ConfigError(f"--{too_many}")
    world_tokens = device_batch_size * max_seq_len * world_size
    per_b = max_seq_len * world_size
    batch_sizes = (_divisors(total_batch_size // per_b, min(device_batch_size, total_batch_size // per_b))
                   if total_batch_size % per_b == 0 else ())
    lower = (total_batch_size // world_tokens) * world_tokens
    totals = [t for t in (lower, lower + world_tokens, lower + 2 * world_tokens) if t > 0]
    options = []
    if batch_sizes:
        options.append(f"--device_batch_size={' | '.join(str(b) for b in batch_sizes[:6])} "
                       f"with --total_batch_size={total_batch_size}")
    options.append(f"--device_batch_size={device_batch_size} with --total_batch_size="
                   f"{' | '.join(str(t) for t in totals)}")
    raise ConfigError(
        f"--total_batch_size={total_batch_size:,} is not a multiple of device_batch_size x max_seq_len x "
        f"world_size = {device_batch_size} x {max_seq_len} x {world_size} = {world_tokens:,}; "
        f"for {world_size} rank(s) use " + "; or ".join(options))


@dataclass(frozen=True)
class BatchFit:
    """How `ranks` reach a total batch size: device batch x sequence x ranks x grad_accum, or why not."""

    device_batch_size: int
    grad_accum: int
    note: str = ""
    reason: str = ""  # set when no device batch size works; the rest is then 0

    @property
    def possible(self) -> bool:
        return not self.reason


def fit_batch(total_batch_size: int, device_batch_size: int, max_seq_len: int, ranks: int) -> BatchFit:
    """The largest device batch size <= the asked one that reaches total_batch_size exactly (with
    gradient accumulation); when none does, the reason names the totals that would work."""
    per_rank_seq = max_seq_len * ranks  # tokens of one sequence on every rank
    if total_batch_size % per_rank_seq:
        lo = total_batch_size // per_rank_seq * per_rank_seq
        options = [t for t in (lo, lo + per_rank_seq) if t > 0]
        return BatchFit(0, 0, reason=(
            f"total_batch_size {total_batch_size:,} is not a multiple of max_seq_len x ranks = "
            f"{max_seq_len} x {ranks} = {per_rank_seq:,}; totals that work: "
            + " or ".join(f"{t:,}" for t in options)))
    if too_many := _sequences_problem(total_batch_size, max_seq_len, ranks):
        return BatchFit(0, 0, reason=too_many)
    sequences = total_batch_size // per_rank_seq  # sequences per rank per optimizer step
    dbs = _divisors(sequences, min(device_batch_size, sequences))[0]
    note = "" if dbs == device_batch_size else f"device batch lowered from {device_batch_size} to {dbs}"
    return BatchFit(dbs, sequences // dbs, note)


def _sequences_problem(total_batch_size: int, max_seq_len: int, ranks: int) -> str | None:
    sequences = total_batch_size // (max_seq_len * ranks)
    if sequences > MAX_STEP_SEQUENCES:
        return (f"total_batch_size={total_batch_size:,} is {sequences:,} sequences per rank (max_seq_len x ranks = "
                f"{max_seq_len} x {ranks} tokens each); at most {MAX_STEP_SEQUENCES:,} (2^40) per optimizer step")
    return None


@functools.lru_cache(maxsize=8)  # grad_accum_steps asks again for what fit_batch just found
def _divisors(n: int, limit: int) -> tuple[int, ...]:
    """The divisors of n no larger than limit, largest first. Each divisor above sqrt(n) is n // e for one below
    it, so the trials stop at sqrt(n) (a million for n = 2^40): walking every batch up to a device batch of 1e9
    took minutes."""
    root = math.isqrt(n)
    small = [d for d in range(1, min(limit, root) + 1) if n % d == 0]
    large = [n // e for e in range(-(-n // limit), root + 1) if n % e == 0 and n // e > root]
    return tuple(sorted(small + large, reverse=True))


def scaled_batch(scaling: str, total_batch_size: int, device_batch_size: int, max_seq_len: int,
                 ranks: int) -> tuple[BatchFit, int]:
    """(fit, total batch) at `ranks`: weak scaling keeps each rank's work (device batch, no accumulation), so the
    total grows with the ranks; strong keeps the total and fit_batch finds the device batch and accumulation."""
    if scaling == "weak":
        return BatchFit(device_batch_size, 1), device_batch_size * max_seq_len * ranks
    return fit_batch(total_batch_size, device_batch_size, max_seq_len, ranks), total_batch_size


def training_horizon(config: TrainConfig, num_params: int, flops_per_token: float) -> tuple[int, str]:
    """(optimizer steps, how they were chosen): the first enabled of --num_iterations, --target_flops and
    --target_param_data_ratio, as upstream base_train derives it. The trainer and the planner's time
    limits both use it, so a job is sized for the run it will really do."""
    if config.num_iterations > 0:
        return config.num_iterations, "user-provided number of iterations"
    if config.target_flops > 0:
        return round(config.target_flops / (flops_per_token * config.total_batch_size)), "target FLOPs"
    return config.target_param_data_ratio * num_params // config.total_batch_size, "target data:param ratio"


def check_horizon(resume_step: int, num_iterations: int, how: str) -> None:
    """A run must have steps to train (a derived horizon of 0 steps ended as `ok` with nothing trained) and
    resume at or before its horizon: the loop ends when the step reaches it, so a later step ran on forever
    (or divided by a warmdown of 0 steps)."""
    if num_iterations <= 0:
        raise ConfigError(f"the horizon ({how}) comes to {num_iterations} iterations: nothing would be trained; "
                          f"raise --target_flops or --target_param_data_ratio, or give --num_iterations")
    if resume_step > num_iterations:
        raise ConfigError(f"--resume_from_step={resume_step} is past this run's horizon of {num_iterations} "
                          f"iterations ({how}); give --num_iterations >= {resume_step}, or resume an earlier step")
