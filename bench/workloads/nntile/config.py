"""The NNTile workload's settings: the flags of NNTile's GPT-2 example, checked before StarPU starts.

Flag names and meanings are those of NNTile's `wrappers/python/examples/gpt2_custom_training.py`
(`--batch`, `--minibatch`, the tile sizes, `--restrict`, the timed forward/backward passes, the
optimizer, the warm-up of the learning rate, epochs, `--dataset=train.bin --dataset-path=FILE`), with
a GPT-2 shape from a JSON file like the example's `gpt2_default_config.json`. Defaults differ where the
example's would train nothing (`--lr=0`, `--nepochs=0`). Suite additions: `--num-batches` (batches per
epoch, to bound a run on a large file) and `--seed`.

Standard library only: the main process checks flags with it before it starts the NNTile interpreter,
and that interpreter (another Python, with torch-nntile) imports it too.
"""

import argparse
import difflib
import json
import math
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from bench import paths
from bench.errors import ConfigError, DataError, UnknownFlags, close_hint, json_reason

DEFAULT_CONFIG = Path(__file__).with_name("gpt2_default_config.json")
OPTIMIZERS = ("fusedadamw", "fusedadam", "sgd")
OPTIMIZER_ALIASES = {"adamw": "fusedadamw", "adam": "fusedadam"}  # NNTile's newer examples' names
RESTRICT = ("", "cpu", "cuda")
TOKEN_BYTES = 2  # train.bin holds uint16 tokens (NanoGPT's format)
# nanochat's model-shape flags, which NNTile takes from the GPT-2 JSON of --config-path: the field each is there
SHAPE_FLAGS = {"depth": "n_layer", "max_seq_len": "n_positions", "aspect_ratio": "n_embd (depth x aspect_ratio)",
               "head_dim": "n_embd / n_head"}
# (flag, GPT-2 field its tile cuts): each tile size must divide its extent.
TILES = (("minibatch_tile", "minibatch"), ("seq_tile", "n_positions"), ("embd_tile", "n_embd"),
         ("inner_tile", "n_inner"), ("head_tile", "n_head"))


@dataclass
class NNTileConfig:
    config_path: str = ""  # GPT-2 shape (HF GPT2Config JSON); empty = GPT-2 small, with the data's vocabulary
    batch: int = 1  # sequences per optimizer step
    minibatch: int = -1  # sequences per forward/backward (-1 = batch); gradients accumulate over batch/minibatch
    minibatch_tile: int = -1  # tile of the batch axis (-1 = untiled)
    seq_tile: int = -1  # tile of the sequence axis (-1 = n_positions)
    embd_tile: int = -1  # tile of the embedding axis (-1 = n_embd)
    inner_tile: int = -1  # tile of the MLP's inner axis (-1 = n_inner)
    head_tile: int = -1  # heads per tile (-1 = n_head)
    restrict: str = ""  # cpu | cuda: run every task on that kind of StarPU worker (empty = StarPU decides)
    flashattention: bool = False
    nforward: int = 0  # timed forward passes on random tokens (after --nforward-warmup untimed ones)
    nforward_warmup: int = 0
    nbackward: int = 0  # timed forward+backward passes on random tokens (after --nbackward-warmup)
    nbackward_warmup: int = 0
    dataset: str = "train.bin"
    dataset_path: str = ""  # train.bin file, or a directory holding one (empty = nanochat-bench data bin's)
    num_batches: int = -1  # batches per epoch (-1 = as many as the file holds)
    optimizer: str = "fusedadamw"
    optimizer_eps: float = 1e-8
    weight_decay: float = 0.0
    loss_reduction: str = "mean"
    lr: float = 1e-3
    start_lr: float = 0.0  # learning rate of the first step, rising linearly to --lr at step --full-lr-iter
    full_lr_iter: int = 1
    nepochs: int = 1  # timed epochs over the dataset (at least 1)
    nepochs_warmup: int = 0  # epochs before them (trained, but out of the timed figures)
    seed: int = 0

    @property
    def num_minibatch(self) -> int:
        return self.batch // self.minibatch


HELP = {
    "config_path": "GPT-2 configuration JSON (HF GPT2Config fields; default: GPT-2 small, NNTile's "
                   "gpt2_default_config.json, with the vocabulary of the token file's meta.json)",
    "restrict": "cpu | cuda: StarPU runs every task on that kind of worker",
    "flashattention": "flash attention (not in torch-nntile 0.1.0: refused)",
    "dataset": "train.bin (a flat uint16 token file) or WikiText-103 (needs a download: refused offline)",
    "dataset_path": "the train.bin file or its directory (default: $NANOCHAT_BASE_DIR/base_data_bin)",
    "num_batches": "batches per epoch; -1 = all the file holds (a nanochat-bench addition)",
    "optimizer": "fusedadamw | fusedadam | sgd (adamw, adam accepted)",
}


def gpt2_shape(path: str | os.PathLike) -> dict:
    """The GPT-2 fields the run needs from a config JSON; n_inner is 4 x n_embd, as NNTile's example sets."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text())
    except OSError as e:
        raise ConfigError(f"--config-path {path}: cannot read it ({e.strerror})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"--config-path {path}: not UTF-8 text (a GPT-2 config JSON is)") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"--config-path {path}: not JSON ({json_reason(e)})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"--config-path {path}: a JSON object of GPT-2 fields is needed, not {type(raw).__name__}")
    names = {"n_embd": ("n_embd", "hidden_size"), "n_head": ("n_head", "num_heads", "num_attention_heads"),
             "n_layer": ("n_layer", "num_hidden_layers"), "n_positions": ("n_positions", "n_ctx"),
             "vocab_size": ("vocab_size",)}
    shape = {}
    for key, spellings in names.items():
        if not any(s in raw for s in spellings):  # not null: a misspelt key, which "got None" would hide
            close = difflib.get_close_matches(key, [k for k in raw if isinstance(k, str)], n=3, cutoff=0.7)
            read = f"read as {', '.join(spellings[:-1])} or {spellings[-1]}" if len(spellings) > 1 else ""
            has = f"the file has {', '.join(close)}: misspelt?" if close else ""
            why = f" ({'; '.join(filter(None, (read, has)))})" if read or has else ""
            raise ConfigError(f"--config-path {path}: {key} is missing{why}; give it as a positive integer")
        value = next(raw[s] for s in spellings if s in raw)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ConfigError(f"--config-path {path}: {key} must be a positive integer, got {value!r}")
        shape[key] = value
    if shape["n_embd"] % shape["n_head"]:
        raise ConfigError(f"--config-path {path}: n_embd={shape['n_embd']} is not a multiple of "
                          f"n_head={shape['n_head']}")
    shape["n_inner"] = 4 * shape["n_embd"]
    for key, default in (("layer_norm_epsilon", 1e-5), ("initializer_range", 0.02)):
        value = raw.get(key, default)  # the norm's epsilon and the weights' std: a string or <= 0 cannot train
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value < math.inf:
            raise ConfigError(f"--config-path {path}: {key} must be a positive number (default {default}), "
                              f"got {value!r}")
        shape[key] = float(value)
    return shape


def inner_note(config_path: str, shape: dict) -> str:
    """A note line when --config-path gives an n_inner other than the 4 x n_embd the run trains with ('' otherwise):
    NNTile's example overrides it so, and a figure read as the file's shape would mislead."""
    given = json.loads(Path(config_path).read_text()).get("n_inner") if config_path else None
    if given is None or given == shape["n_inner"]:  # null is GPT2Config's own 4 x n_embd
        return ""
    return (f"note: --config-path {config_path}: n_inner={given!r} is not used; the MLP is 4 x n_embd = "
            f"{shape['n_inner']} wide, as NNTile's gpt2_custom_training.py sets it")


def flops_per_token(shape: dict) -> float:
    """Training FLOPs per token of the matrix products, forward and backward, as NNTile's example counts
    them: per layer MLP 4·E·I, Q/K/V/O 8·E², attention 4·T·E (forward; backward twice that), and the
    lm_head 2·E·V. It equals nanochat's 6·N + 12·L·E·T for the same shape, so MFU compares."""
    E, I, T, V, L = shape["n_embd"], shape["n_inner"], shape["n_positions"], shape["vocab_size"], shape["n_layer"]
    per_layer = 3 * (4 * E * I + 8 * E * E) + (4 + 8) * T * E  # attention: forward + backward
    return float(L * per_layer + 3 * 2 * E * V)


def _divisors(n: int, limit: int = 8) -> str:
    found = [d for d in range(1, n + 1) if n % d == 0]
    return ", ".join(map(str, found[:limit])) + (", ..." if len(found) > limit else "")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def resolve(config: NNTileConfig, shape: dict) -> NNTileConfig:
    """The config with -1 sizes made explicit, checked: a size that cannot work fails with one line naming
    the flag, its value and values that would do (before any StarPU worker exists)."""
    if config.batch <= 0:
        raise ConfigError(f"--batch={config.batch}: must be a positive integer")
    if config.minibatch == -1:
        config.minibatch = config.batch
    if config.minibatch <= 0 or config.batch % config.minibatch:
        raise ConfigError(f"--minibatch={config.minibatch} must divide --batch={config.batch}; "
                          f"valid: {_divisors(config.batch)}")
    extents = {**shape, "minibatch": config.minibatch}
    for flag, field in TILES:
        tile, extent = getattr(config, flag), extents[field]
        if tile == -1:
            setattr(config, flag, extent)
        elif tile <= 0 or extent % tile:
            raise ConfigError(f"{_flag(flag)}={tile} does not divide {field}={extent} (tiles must cut the "
                              f"axis evenly); valid: {_divisors(extent)}")
    for name in ("nforward", "nforward_warmup", "nbackward", "nbackward_warmup", "nepochs", "nepochs_warmup"):
        if getattr(config, name) < 0:
            raise ConfigError(f"{_flag(name)}={getattr(config, name)}: must be >= 0")
    if config.nepochs == 0:  # no timed step: the run would end `ok` with no figure, as if it were a result
        raise ConfigError("--nepochs=0: the run would train no timed epoch; give --nepochs >= 1 (--nepochs-warmup "
                          "adds untimed epochs before them; --nforward/--nbackward passes run before both)")
    if config.num_batches == 0 or config.num_batches < -1:
        raise ConfigError(f"--num-batches={config.num_batches}: give a positive number, or -1 for all")
    if not -2**63 <= config.seed < 2**64:  # torch.manual_seed's range; it would fail only after StarPU started
        raise ConfigError(f"--seed={config.seed}: must be from -2**63 to 2**64-1")
    if config.full_lr_iter < 1:
        raise ConfigError(f"--full-lr-iter={config.full_lr_iter}: must be >= 1")
    for name, positive in (("lr", False), ("start_lr", False), ("weight_decay", False), ("optimizer_eps", True)):
        value = getattr(config, name)  # argparse's float() takes nan and inf, which would train to NaN
        if not math.isfinite(value) or value < 0 or (positive and value == 0):
            raise ConfigError(f"{_flag(name)}={value}: must be a finite number {'> 0' if positive else '>= 0'} "
                              f"(default {NNTileConfig.__dataclass_fields__[name].default})")
    config.optimizer = OPTIMIZER_ALIASES.get(config.optimizer, config.optimizer)
    if config.optimizer not in OPTIMIZERS:
        raise ConfigError(f"--optimizer={config.optimizer}: valid: {', '.join(OPTIMIZERS)} (or adamw, adam)")
    if config.restrict not in RESTRICT:
        raise ConfigError(f"--restrict={config.restrict}: valid: cpu, cuda")
    if config.loss_reduction not in ("mean", "sum"):
        raise ConfigError(f"--loss-reduction={config.loss_reduction}: valid: mean, sum")
    if config.flashattention:
        raise ConfigError("--flashattention: torch-nntile 0.1.0 has no flash attention kernel "
                          "(its attention is float32 and unfused); leave the flag out")
    if config.dataset != "train.bin":
        raise ConfigError(f"--dataset={config.dataset}: WikiText-103 and NNTile's GPT-2 tokenizer are downloads; "
                          "use --dataset=train.bin with a file from `nanochat-bench data bin`")
    return config


def workers(restrict: str, env: dict | None = None, gpus: int | None = None) -> tuple[int, int]:
    """(ncpu, ncuda) for init_context. An explicit ncpu overrides STARPU_NCPU in torch-nntile, so the
    variables are read here: STARPU_NCPU, else every core this process may use; STARPU_NCUDA, else all
    (-1); --restrict=cpu asks for no CUDA worker. ConfigError for a count that is no integer or negative, for no
    worker at all, for no CPU worker without --restrict=cuda (StarPU would only fail to start, with a
    traceback), or for --restrict=cuda with no CUDA worker: none asked for, or `gpus` (the GPUs this process
    sees; None where not known, as on a login node) 0."""
    env = os.environ if env is None else env
    counts = {}
    for name, unset in (("STARPU_NCPU", len(os.sched_getaffinity(0))), ("STARPU_NCUDA", -1)):
        text = env.get(name) or str(unset)
        try:
            counts[name] = int(text)
        except ValueError:
            counts[name] = -1  # refused below: only a set variable can be no integer
        if counts[name] < 0 and env.get(name):  # StarPU reads the variable itself and aborts on a negative count
            raise ConfigError(f"{name}={text}: give a number of workers >= 0 (leave it unset for every one)")
    ncpu, ncuda = counts["STARPU_NCPU"], 0 if restrict == "cpu" else counts["STARPU_NCUDA"]
    if ncpu == 0 and ncuda == 0:
        raise ConfigError(f"STARPU_NCPU=0 with {'--restrict=cpu' if restrict == 'cpu' else 'STARPU_NCUDA=0'}: "
                          "no StarPU worker would run a task; give STARPU_NCPU at least 1")
    if ncpu == 0 and restrict != "cuda":  # without a GPU StarPU fails to start, and a task may want a CPU worker
        raise ConfigError("STARPU_NCPU=0 without --restrict=cuda: StarPU may have no worker for a task (none at all "
                          "without a GPU); give STARPU_NCPU at least 1, or run on GPUs only with --restrict=cuda")
    if restrict == "cuda" and (ncuda == 0 or gpus == 0):  # StarPU starts, then its first task fails with ENODEV
        why = "STARPU_NCUDA=0" if ncuda == 0 else "no GPU visible here"
        raise ConfigError(f"--restrict=cuda with {why}: StarPU would have no worker for any task; leave --restrict "
                          "out (or give --restrict=cpu) to train on the CPU workers, or run where a GPU is")
    return ncpu, ncuda


def train_bin(config: NNTileConfig, base_dir: str | None = None) -> Path:
    """The train.bin the run reads: --dataset-path as a file, or train.bin inside it as a directory; without it,
    `data bin`'s directory under `base_dir` (default: the run's NANOCHAT_BASE_DIR)."""
    path = Path(config.dataset_path or Path(paths.base_dir(base_dir)) / paths.BIN_DIR)
    # a path not there (a node's, at render time) is a directory unless it is named like a file; a file is a file
    return path / "train.bin" if path.is_dir() or (not path.suffix and not path.is_file()) else path


def check_dataset(config: NNTileConfig, shape: dict) -> dict:
    """Size of the token file in batches; DataError if it is missing, too small, or made with a larger
    vocabulary than the model's (its sidecar, written by `data bin`, says which tokenizer made it)."""
    path = train_bin(config)
    if not path.is_file():
        raise DataError(f"no token file at {path}; make one with `nanochat-bench data bin` or pass "
                        f"--dataset-path=<train.bin file or its directory>")
    tokens = path.stat().st_size // TOKEN_BYTES
    per_batch = config.batch * (shape["n_positions"] + 1)
    batches = tokens // per_batch
    if batches < 1:
        raise DataError(f"{path} holds {tokens:,} tokens, fewer than one batch of --batch={config.batch} "
                        f"sequences of n_positions+1={shape['n_positions'] + 1}; use a smaller --batch or a "
                        f"larger file")
    meta = read_sidecar(path)
    vocab = meta.get("vocab_size")
    if isinstance(vocab, int) and vocab > shape["vocab_size"]:
        raise DataError(f"{path} was made by a tokenizer of {vocab:,} tokens ({meta.get('tokenizer')}), more than "
                        f"the model's vocab_size={shape['vocab_size']:,}; raise vocab_size in --config-path")
    if config.num_batches > 0:
        batches = min(batches, config.num_batches)
    return {"path": str(path), "tokens": tokens, "batches_per_epoch": batches, "tokenizer": meta.get("tokenizer")}


def read_sidecar(bin_path: Path) -> dict:
    """The `<dir>/meta.json` that `data bin` writes beside the .bin files ({} without one)."""
    try:
        data = json.loads((Path(bin_path).parent / "meta.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise ConfigError(f"nntile: {message}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="nanochat-bench train --workload nntile --", allow_abbrev=False,
                     description="NNTile GPT-2 training on StarPU (flags of NNTile's gpt2_custom_training.py)")
    for f in fields(NNTileConfig):
        flag = _flag(f.name)
        help_text = f"{HELP.get(f.name, '')} (default: {f.default!r})".strip()
        if f.type is bool:
            parser.add_argument(flag, action="store_true", help=help_text)
        else:
            parser.add_argument(flag, type=f.type, default=f.default, help=help_text, metavar=f.type.__name__.upper())
    return parser


def parse_args(argv: list[str]) -> tuple[NNTileConfig, dict]:
    """(config with sizes resolved, GPT-2 shape) from the flags; unknown flags fail with close names."""
    argv = list(argv)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    args, unknown = build_parser().parse_known_args(argv)
    if unknown:
        names, flags = [f.name for f in fields(NNTileConfig)], [token.split("=", 1)[0] for token in unknown]
        # compared without the '--' every flag shares, which made any name look close to any other
        known = [_flag(n)[2:] for n in names]
        given = [flag.lstrip("-").replace("-", "_") for flag in flags]
        hints = [f"{token!r}" + (f" ({shape_note(name, '--config-path')})" if name in SHAPE_FLAGS else
                                 close_hint(flag.lstrip('-'), known, '--'))
                 for token, flag, name in zip(unknown, flags, given)]
        raise UnknownFlags(f"nntile: unknown argument(s): {'; '.join(hints)}; see --help for the valid flags",
                           given, names, {n: shape_note(n, "--train-arg config_path=FILE") for n in given
                                          if n in SHAPE_FLAGS})
    config = NNTileConfig(**vars(args))
    shape = gpt2_shape(config.config_path or DEFAULT_CONFIG)
    if not config.config_path:
        shape["vocab_size"] = data_vocabulary(config) or shape["vocab_size"]
    return resolve(config, shape), shape


def shape_note(name: str, config_flag: str) -> str:
    """Where NNTile takes what nanochat's model-shape flag `name` sets, `config_flag` naming how a JSON is given."""
    return f"NNTile takes the model's shape from the GPT-2 JSON of {config_flag}: {name} is its {SHAPE_FLAGS[name]}"


def data_vocabulary(config: NNTileConfig) -> int | None:
    """The vocabulary the token file was made with (its meta.json), which the default GPT-2 small takes in
    place of GPT-2's 50,257: `data bin` writes our 65,536-token tokenizer's ids, which that would refuse.
    None when the file or its sidecar is missing (check_dataset then says what is wrong)."""
    vocab = read_sidecar(train_bin(config)).get("vocab_size")
    return vocab if isinstance(vocab, int) and not isinstance(vocab, bool) and vocab > 0 else None


def as_record(config: NNTileConfig, shape: dict) -> dict:
    """What run.json's `config` holds: the flags, the GPT-2 shape, and the names the analysis groups by
    (depth = n_layer, max_seq_len = n_positions, total_batch_size = tokens per step)."""
    return {**asdict(config), "gpt2": shape, "depth": shape["n_layer"], "max_seq_len": shape["n_positions"],
            "total_batch_size": config.batch * shape["n_positions"], "device_batch_size": config.minibatch}
