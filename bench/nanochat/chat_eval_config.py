"""chat_eval's settings: upstream scripts/chat_eval.py's flags (short and dashed) and nanochat's `--key=value` forms
of the same fields. Torch-free, so the planner parses a sweep's flags on a login node."""

import math
from dataclasses import dataclass

from bench.contract import field as _f
from bench.errors import ConfigError
from bench.nanochat.config import RunSettings, argparse_spellings, check_model_tag, parse_config

# upstream's task list, in its order, and the accuracy of chance on each (ChatCORE's zero)
BASELINES = {"ARC-Easy": 0.25, "ARC-Challenge": 0.25, "MMLU": 0.25, "GSM8K": 0.0, "HumanEval": 0.0, "SpellingBee": 0.0}
TASK_NAMES = tuple(BASELINES)
SOURCES = ("base", "mid", "sft")  # upstream's load_model also knows rl, which nothing here trains
# The generative tasks (decoded token by token; the others score a batch of problems in one forward) and their
# problems on the real data: GSM8K's test split, HumanEval's problems, the SpellingBee words upstream draws.
GENERATIVE_PROBLEMS = {"GSM8K": 1319, "HumanEval": 164, "SpellingBee": 256}


def task_names(spec: str | None) -> list[str]:
    """`-a`: '|'-separated task names (all six when empty); ConfigError naming the unknown ones and the valid."""
    names = list(TASK_NAMES) if not spec else [n.strip() for n in spec.split("|")]
    unknown = [n for n in names if n not in TASK_NAMES]
    if unknown:
        raise ConfigError(f"-a/--task-name: unknown task(s) {', '.join(map(repr, unknown))}; valid: "
                          f"{'|'.join(TASK_NAMES)} ('|'-separated, default all)")
    return names


@dataclass
class ChatEvalConfig(RunSettings):
    source: str = _f("", "-i: the model to evaluate: base | mid | sft (required)")
    task_name: str = _f("", f"-a: '|'-separated tasks from {'|'.join(TASK_NAMES)} (empty = all)")
    dtype: str = _f("bfloat16", "-d: autocast dtype on CUDA: bfloat16 | float32")
    temperature: float = _f(0.0, "-t: sampling temperature (0 = greedy)")
    max_new_tokens: int = _f(512, "-m: tokens generated per sample at most (forced tool tokens count)")
    num_samples: int = _f(1, "-n: samples per generative problem (it passes when any does)")
    top_k: int = _f(50, "-k: sample among the k most likely tokens")
    batch_size: int = _f(8, "-b: problems per forward in categorical tasks")
    model_tag: str = _f("", "-g: checkpoint folder (empty = the largest d<N>, else the newest)")
    step: int = _f(-1, "-s: checkpoint step (-1 = the last saved)")
    max_problems: int = _f(-1, "-x: the first N problems of each task (-1 = all)")

    def validate(self) -> None:
        super().validate()
        if self.source not in SOURCES:
            raise ConfigError(f"-i/--source={self.source!r}: give the model to evaluate, one of {', '.join(SOURCES)}")
        task_names(self.task_name)
        if self.dtype not in ("bfloat16", "float32"):
            raise ConfigError(f"-d/--dtype={self.dtype!r}: valid values are bfloat16, float32")
        for flag, value in (("-n/--num-samples", self.num_samples), ("-b/--batch-size", self.batch_size),
                            ("-m/--max-new-tokens", self.max_new_tokens), ("-k/--top-k", self.top_k)):
            if value < 1:
                raise ConfigError(f"{flag}={value}: must be at least 1")
        if not (math.isfinite(self.temperature) and self.temperature >= 0):  # nan passed `< 0`, then asserted
            raise ConfigError(f"-t/--temperature={self.temperature}: must be a finite number >= 0 (0 = greedy)")
        check_model_tag(self.model_tag, "-g/--model-tag", f"the {self.source} checkpoint folder")
        if self.step < -1:  # was taken as -1, the last saved, silently
            raise ConfigError(f"-s/--step={self.step}: give a saved step >= 0, or -1 for the last saved")
        if self.max_problems == 0 or self.max_problems < -1:
            raise ConfigError(f"-x/--max-problems={self.max_problems}: give at least 1 (or -1 for every problem)")


SHORT_FLAGS = {"-i": "source", "-a": "task_name", "-d": "dtype", "-t": "temperature", "-m": "max_new_tokens",
               "-n": "num_samples", "-k": "top_k", "-b": "batch_size", "-g": "model_tag", "-s": "step",
               "-x": "max_problems"}


def parse(argv: list[str]) -> ChatEvalConfig:
    """ChatEvalConfig from upstream's flags (`-i sft -a 'ARC-Easy|GSM8K' -x 100`, `--task-name=...`) or nanochat's
    `--key=value`; unknown flags fail with the closest names."""
    argv = argparse_spellings(ChatEvalConfig, argv, SHORT_FLAGS)
    return parse_config(ChatEvalConfig, argv, "bench.nanochat.chat_eval", "nanochat chat evaluation "
                        "(upstream's chat_eval flags: -i, -a, -d, -t, -m, -n, -k, -b, -g, -s, -x)")
