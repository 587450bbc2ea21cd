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

import time
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial

import torch
import torch.distributed as dist

from bench.errors import ConfigError, DataError
from bench.nanochat import sandbox, stagerun
from bench.nanochat.chat_eval_config import (BASELINES, GENERATIVE_PROBLEMS, TASK_NAMES, ChatEvalConfig, parse,
                                             task_names)
from bench.nanochat.chat_format import render_for_completion
from bench.nanochat.checkpoint import load_model
from bench.nanochat.common import print0
from bench.nanochat.engine import Engine
from bench.nanochat.gpt import ROPE_LENGTH_FACTOR
from bench.nanochat.tasks.arc import ARC
from bench.nanochat.tasks.gsm8k import GSM8K
from bench.nanochat.tasks.humaneval import HumanEval
from bench.nanochat.tasks.mmlu import MMLU
from bench.nanochat.tasks.spellingbee import SpellingBee
from bench.nanochat.tokenizer import get_tokenizer
from bench.processes import exit_now

# the tasks by name, built as upstream's run_chat_eval builds them
TASKS = {
    "ARC-Easy": partial(ARC, subset="ARC-Easy", split="test"),
    "ARC-Challenge": partial(ARC, subset="ARC-Challenge", split="test"),
    "MMLU": partial(MMLU, subset="all", split="test"),
    "GSM8K": partial(GSM8K, subset="main", split="test"),
    "HumanEval": HumanEval,
    "SpellingBee": partial(SpellingBee, size=GENERATIVE_PROBLEMS["SpellingBee"], split="test"),
}
assert tuple(TASKS) == TASK_NAMES
assert {n for n, t in TASKS.items() if getattr(t, "func", t).eval_type == "generative"} == set(GENERATIVE_PROBLEMS)


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
        check_fits(engine.model, len(prompt), max_new_tokens, f"{type(task).__name__} problem {i}")
        results, _ = engine.generate_batch(prompt, num_samples=num_samples, max_tokens=max_new_tokens,
                                           temperature=temperature, top_k=top_k)
        completions = [tokenizer.decode(r[len(prompt):]) for r in results]
        counts.generated_tokens += sum(len(r) - len(prompt) for r in results)
        outcomes = [task.evaluate(conversation, c) for c in completions]  # all of them, as upstream (timing)
        counts.passed += int(any(outcomes))
        counts.total += 1
        print(f"\r\033[KRank {rank} | {counts.passed}/{counts.total} ({100 * counts.passed / counts.total:.2f}%)",
              end="", flush=True)
    print(flush=True)  # every rank ends its progress line, as upstream
    return counts


def check_fits(model, prompt_tokens: int, max_new_tokens: int, where: str) -> None:
    """The prompt and -m new tokens must fit the model's rotary embeddings (ROPE_LENGTH_FACTOR x the sequence length
    it was trained with), else the forward asserts mid-evaluation; a ConfigError naming the -m that would fit."""
    positions = model.rotary_seq_len
    if prompt_tokens + max_new_tokens > positions:
        raise ConfigError(f"-m/--max-new-tokens={max_new_tokens}: {where}'s prompt is {prompt_tokens} tokens and "
                          f"the model's rotary embeddings cover {positions} positions ({ROPE_LENGTH_FACTOR} x its "
                          f"sequence length {model.config.sequence_len}); give -m <= "
                          f"{max(positions - prompt_tokens, 0)}")


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
        """The task's `score` event: its accuracy, centred on chance, and what throughput is made of (problems/s =
        problems / seconds; generated tokens/s = tokens / seconds, generative tasks only)."""
        chance = BASELINES[self.name]
        return {"name": self.name, "value": self.accuracy, "centered": (self.accuracy - chance) / (1.0 - chance),
                "problems": self.counts.total, "seconds": self.seconds,
                "tokens": self.counts.generated_tokens if self.eval_type == "generative" else None}

    def throughput_line(self) -> str:
        s = max(self.seconds, 1e-9)
        rate = f"{self.counts.total} problems in {self.seconds:.2f}s, {self.counts.total / s:,.2f} problems/s"
        if self.eval_type == "generative":
            rate += f", {self.counts.generated_tokens / s:,.1f} generated tokens/s"
        return f"{self.name}: {rate}"


def run_task(name: str, model, tokenizer, engine, config, synchronize=lambda: None) -> TaskResult:
    """One task on every rank, reduced; prints upstream's `Final:` line (and its `=` rule when generative)."""
    task = TASKS[name]()
    limit = config.max_problems if config.max_problems > 0 else None
    synchronize()
    t0 = time.time()
    if task.eval_type == "categorical":
        counts = categorical_counts(task, tokenizer, model, config.batch_size, limit)
    else:
        counts = generative_counts(task, tokenizer, engine, config.num_samples, config.max_new_tokens,
                                   config.temperature, config.top_k, limit)
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


def evaluate(model, tokenizer, config, autocast=nullcontext, synchronize=lambda: None, relaxed=nullcontext,
             on_task=lambda result: None) -> tuple[dict[str, float], float | None]:
    """Every task of `-a` in turn: ({task: accuracy}, ChatCORE or None); `on_task` sees each TaskResult.
    `relaxed` bounds the collectives of a task: ranks get unequal work (one more problem, longer samples), so
    the end-of-task reduce may legitimately wait for the slowest."""
    engine = Engine(model, tokenizer)
    accuracies = {}
    for name in task_names(config.task_name):
        with autocast(), relaxed():
            result = run_task(name, model, tokenizer, engine, config, synchronize)
        accuracies[name] = result.accuracy
        print0(f"{name} accuracy: {100 * result.accuracy:.2f}%")
        print0(result.throughput_line())
        on_task(result)
    score = chatcore(accuracies)
    if score is not None:
        print0(f"ChatCORE metric: {score:.4f}")
    return accuracies, score


# ----------------------------------------------------------------------------------------------
# The stage

def load_for_eval(config, device):
    """The checkpoint's model and the tokenizer it was trained with (the vocabulary sizes must agree)."""
    model, meta = load_model(config.source, device, config.model_tag or None, None if config.step < 0 else config.step)
    tokenizer = get_tokenizer()
    if tokenizer.get_vocab_size() != model.config.vocab_size:
        raise ConfigError(f"the {config.source} checkpoint in {meta['checkpoint_dir']} has a vocabulary of "
                          f"{model.config.vocab_size:,} tokens but the tokenizer of $NANOCHAT_BASE_DIR has "
                          f"{tokenizer.get_vocab_size():,}: evaluate it with the tokenizer it was trained with")
    return model.eval(), tokenizer, meta


def run(config: ChatEvalConfig, record):
    """The evaluation as a stage: a `score` event per task (and ChatCORE), the scores into run.json."""
    session = stagerun.begin(config, record, f"nanochat-bench: chat evaluation of the {config.source} model")
    model, tokenizer, meta = load_for_eval(config, session.device)
    print0(f"Loaded {meta['checkpoint_dir']} step {meta.get('step')}")
    record.emit("model_ready", num_params=model.num_params(), flops_per_token=model.estimate_flops())
    record.update(sandbox=list(sandbox.isolation()))  # a score says how the code it ran was fenced in
    autocast = session.autocast if config.dtype == "bfloat16" else nullcontext
    t0 = time.time()
    accuracies, score = evaluate(model, tokenizer, config, autocast, session.synchronize, session.watchdog.relaxed,
                                 lambda result: record.emit("score", **result.score_fields()))
    seconds = time.time() - t0
    if score is not None:
        record.emit("score", name="ChatCORE", value=score, seconds=seconds)
    record.update(scores={**accuracies, **({"ChatCORE": score} if score is not None else {})})
    peak_mem_mib = stagerun.end(session, record, seconds, training=False)
    return {"peak_mem_mib": peak_mem_mib, "total_training_time_s": seconds}, "ok", None


def main(argv: list[str] | None = None) -> int:
    return stagerun.main(run, parse, argv)


if __name__ == "__main__":
    exit_now(main())  # without Python's teardown of torch (bench/processes.py)
