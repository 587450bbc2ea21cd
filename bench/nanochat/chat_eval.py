"""Chat evaluation of a mid-trained or SFT model (mirrors scripts/chat_eval.py at 5c93a56).

    torchrun --nproc_per_node=8 -m bench.nanochat.chat_eval -- -i sft
    python -m bench.nanochat.chat_eval -i mid -a 'ARC-Easy|GSM8K' -x 64 --device-type=cpu

Two kinds of task, as upstream:
- categorical (ARC-Easy, ARC-Challenge, MMLU): batches of `-b` consecutive problems, batch i on rank i mod W;
  each prompt (render_for_completion, right-padded with BOS) goes through one forward without a cache, and the
  prediction is the argmax over the logits of the problem's letters at its last position (assistant_start);
- generative (GSM8K, HumanEval, SpellingBee): problem i on rank i mod W, `-n` samples through the KV-cache
  engine (bench/nanochat/engine.py); a problem passes when any sample does.
Counts are SUM-reduced over ranks. ChatCORE (the mean of the accuracies centred on each task's chance level)
is computed when all six tasks ran. Model-written code (HumanEval programs, calculator calls) runs only in the
sandbox (bench/nanochat/sandbox.py, bench/nanochat/calculator.py).
"""

import argparse
import time
from dataclasses import dataclass
from functools import partial

import torch
import torch.distributed as dist

from bench.errors import ConfigError, DataError
from bench.nanochat.chat_format import render_for_completion
from bench.nanochat.common import print0
from bench.nanochat.engine import Engine
from bench.nanochat.tasks.arc import ARC
from bench.nanochat.tasks.gsm8k import GSM8K
from bench.nanochat.tasks.humaneval import HumanEval
from bench.nanochat.tasks.mmlu import MMLU
from bench.nanochat.tasks.spellingbee import SpellingBee

# upstream's task list, in its order, and the accuracy of chance on each (ChatCORE's zero)
TASKS = {
    "ARC-Easy": partial(ARC, subset="ARC-Easy", split="test"),
    "ARC-Challenge": partial(ARC, subset="ARC-Challenge", split="test"),
    "MMLU": partial(MMLU, subset="all", split="test"),
    "GSM8K": partial(GSM8K, subset="main", split="test"),
    "HumanEval": HumanEval,
    "SpellingBee": partial(SpellingBee, size=256, split="test"),
}
BASELINES = {"ARC-Easy": 0.25, "ARC-Challenge": 0.25, "MMLU": 0.25, "GSM8K": 0.0, "HumanEval": 0.0,
             "SpellingBee": 0.0}
SOURCES = ("base", "mid", "sft")  # upstream's load_model also knows rl, which nothing here trains


def task_names(spec: str | None) -> list[str]:
    """`-a`: '|'-separated task names (all six when empty); ConfigError naming the unknown ones and the valid."""
    names = list(TASKS) if not spec else [n.strip() for n in spec.split("|")]
    unknown = [n for n in names if n not in TASKS]
    if unknown:
        raise ConfigError(f"-a/--task-name: unknown task(s) {', '.join(map(repr, unknown))}; valid: "
                          f"{'|'.join(TASKS)} ('|'-separated, default all)")
    return names


@dataclass
class Counts:
    """One rank's tally of a task (SUM-reduced into the task's)."""
    passed: int = 0
    total: int = 0
    generated_tokens: int = 0  # tokens the engine appended to the samples (tool outputs included)

    def all_reduce(self, device) -> "Counts":
        if not (dist.is_available() and dist.is_initialized()):
            return self
        t = torch.tensor([self.passed, self.total, self.generated_tokens], dtype=torch.long, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return Counts(*map(int, t.tolist()))


def _rank_world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _num_problems(task, max_problems: int | None) -> int:
    return len(task) if max_problems is None else min(len(task), max_problems)


def _letter_ids(tokenizer, letters, cache: dict) -> list[int]:
    for letter in letters:
        if letter not in cache:
            ids = tokenizer.encode(letter)
            if len(ids) != 1:
                raise DataError(f"answer letter {letter!r} is {len(ids)} tokens in this tokenizer; categorical "
                                "scoring needs each letter to be one token")
            cache[letter] = ids[0]
    return [cache[letter] for letter in letters]


def categorical_counts(task, tokenizer, model, batch_size: int, max_problems: int | None = None) -> Counts:
    """This rank's batches of a multiple-choice task, scored from the letters' logits at assistant_start."""
    rank, world = _rank_world()
    device, bos = model.get_device(), tokenizer.get_bos_token_id()
    n = _num_problems(task, max_problems)
    counts, letter_cache = Counts(), {}
    for b in range(rank, -(-n // batch_size), world):
        conversations = [task[i] for i in range(b * batch_size, min((b + 1) * batch_size, n))]
        prompts = [render_for_completion(tokenizer, c) for c in conversations]
        width = max(map(len, prompts))
        ids = torch.tensor([p + [bos] * (width - len(p)) for p in prompts], dtype=torch.long, device=device)
        with torch.no_grad():
            logits = model(ids)  # (B, T, V); the padding comes after each answer position, so it is never seen
        for row, (conversation, prompt) in enumerate(zip(conversations, prompts)):
            letters = conversation["letters"]
            choice = logits[row, len(prompt) - 1, _letter_ids(tokenizer, letters, letter_cache)].argmax().item()
            counts.passed += int(task.evaluate(conversation, letters[choice]))
            counts.total += 1
    return counts


def generative_counts(task, tokenizer, engine, num_samples: int, max_new_tokens: int, temperature: float,
                      top_k: int, max_problems: int | None = None) -> Counts:
    """This rank's problems (i mod W) of an open-ended task, sampled through the engine; prints the rank's tally."""
    rank, world = _rank_world()
    counts = Counts()
    for i in range(rank, _num_problems(task, max_problems), world):
        conversation = task[i]
        prompt = render_for_completion(tokenizer, conversation)
        results, _ = engine.generate_batch(prompt, num_samples=num_samples, max_tokens=max_new_tokens,
                                           temperature=temperature, top_k=top_k)
        completions = [tokenizer.decode(r[len(prompt):]) for r in results]
        counts.generated_tokens += sum(len(r) - len(prompt) for r in results)
        counts.passed += int(any([task.evaluate(conversation, c) for c in completions]))
        counts.total += 1
        print(f"\r\033[KRank {rank} | {counts.passed}/{counts.total} ({100 * counts.passed / counts.total:.2f}%)",
              end="", flush=True)
    print(flush=True)  # every rank ends its progress line, as upstream
    return counts


@dataclass
class TaskResult:
    name: str
    eval_type: str
    counts: Counts
    seconds: float

    @property
    def accuracy(self) -> float:
        return self.counts.passed / self.counts.total if self.counts.total else 0.0

    def score_fields(self) -> dict:
        """The task's `score` event: accuracy and throughput (problems/s; generated tokens/s when generative)."""
        s = max(self.seconds, 1e-9)
        return {"task": self.name, "eval_type": self.eval_type, "accuracy": self.accuracy,
                "passed": self.counts.passed, "problems": self.counts.total, "seconds": self.seconds,
                "problems_per_sec": self.counts.total / s,
                "tokens_per_sec": self.counts.generated_tokens / s if self.eval_type == "generative" else None}


def run_task(name: str, model, tokenizer, engine, config, synchronize=lambda: None) -> TaskResult:
    """One task on every rank, reduced; prints upstream's `Final:` line (and its `=` rule when generative)."""
    task = TASKS[name]()
    synchronize()
    t0 = time.time()
    if task.eval_type == "categorical":
        counts = categorical_counts(task, tokenizer, model, config.batch_size, config.max_problems)
    else:
        counts = generative_counts(task, tokenizer, engine, config.num_samples, config.max_new_tokens,
                                   config.temperature, config.top_k, config.max_problems)
    counts = counts.all_reduce(model.get_device())
    synchronize()
    result = TaskResult(name, task.eval_type, counts, time.time() - t0)
    if counts.total == 0:
        raise DataError(f"{name}: no problems to evaluate (the staged split is empty or -x/--max-problems is 0)")
    if task.eval_type == "generative":
        print0("=" * 50)
    print0(f"Final: {counts.passed}/{counts.total} ({100 * result.accuracy:.2f}%)")
    return result


def chatcore(accuracies: dict[str, float]) -> float | None:
    """Mean of (accuracy - chance) / (1 - chance) over the six tasks; None unless all six ran."""
    if not all(name in accuracies for name in TASKS):
        return None
    return sum((accuracies[n] - BASELINES[n]) / (1.0 - BASELINES[n]) for n in TASKS) / len(TASKS)


def evaluate(model, tokenizer, config, autocast, synchronize=lambda: None, on_task=lambda result: None
             ) -> tuple[dict[str, float], float | None]:
    """Every task of `-a` in turn: ({task: accuracy}, ChatCORE or None); `on_task` sees each TaskResult."""
    engine = Engine(model, tokenizer)
    accuracies = {}
    for name in task_names(config.task_name):
        with autocast():
            result = run_task(name, model, tokenizer, engine, config, synchronize)
        accuracies[name] = result.accuracy
        print0(f"{name} accuracy: {100 * result.accuracy:.2f}%")
        on_task(result)
    score = chatcore(accuracies)
    if score is not None:
        print0(f"ChatCORE metric: {score:.4f}")
    return accuracies, score


# ----------------------------------------------------------------------------------------------
# Settings: upstream's flags, short and long


@dataclass
class ChatEvalSettings:
    source: str = "sft"
    task_name: str | None = None
    dtype: str = "bfloat16"
    temperature: float = 0.0
    max_new_tokens: int = 512
    num_samples: int = 1
    top_k: int = 50
    batch_size: int = 8
    model_tag: str | None = None
    step: int | None = None
    max_problems: int | None = None
    device_type: str = ""

    def validate(self) -> None:
        if self.source not in SOURCES:
            raise ConfigError(f"-i/--source {self.source!r}: expected one of {', '.join(SOURCES)}")
        task_names(self.task_name)
        for flag, value, low in (("-n/--num-samples", self.num_samples, 1), ("-b/--batch-size", self.batch_size, 1),
                                 ("-m/--max-new-tokens", self.max_new_tokens, 1), ("-k/--top-k", self.top_k, 1)):
            if value < low:
                raise ConfigError(f"{flag} {value}: must be >= {low}")
        if self.temperature < 0:
            raise ConfigError(f"-t/--temperature {self.temperature}: must be >= 0 (0 = greedy)")
        if self.max_problems is not None and self.max_problems < 1:
            raise ConfigError(f"-x/--max-problems {self.max_problems}: must be >= 1 (omit it for every problem)")


def add_flags(parser: argparse.ArgumentParser) -> None:
    """Upstream chat_eval's flags, with its short forms and defaults."""
    parser.add_argument("-i", "--source", required=True, help=f"model to evaluate: {'|'.join(SOURCES)}")
    parser.add_argument("-a", "--task-name", default=None, help=f"'|'-separated, from {'|'.join(TASKS)} (default all)")
    parser.add_argument("-d", "--dtype", default="bfloat16", choices=["float32", "bfloat16"],
                        help="autocast dtype on CUDA (default bfloat16)")
    parser.add_argument("-t", "--temperature", type=float, default=0.0, help="0 = greedy (default 0.0)")
    parser.add_argument("-m", "--max-new-tokens", type=int, default=512, help="default 512")
    parser.add_argument("-n", "--num-samples", type=int, default=1, help="samples per generative problem (default 1)")
    parser.add_argument("-k", "--top-k", type=int, default=50, help="default 50")
    parser.add_argument("-b", "--batch-size", type=int, default=8, help="categorical batch size (default 8)")
    parser.add_argument("-g", "--model-tag", default=None, help="checkpoint folder (default: the largest d<N>)")
    parser.add_argument("-s", "--step", type=int, default=None, help="checkpoint step (default: the last)")
    parser.add_argument("-x", "--max-problems", type=int, default=None, help="first N problems of each task")
    parser.add_argument("--device-type", default="", choices=["cuda", "cpu", "mps", ""],
                        help="cuda|cpu|mps (default: autodetect)")
