"""CORE: DCLM's in-context tasks scored on a base model, as nanochat 5c93a56 scores them (nanochat/core_eval.py).

Three kinds of task, each example one forward of a few prompts that share a part:
- multiple choice: one prompt per choice, the same context; the choice with the lowest mean loss over the
  tokens after the prompts' common prefix wins;
- schema: one prompt per context option, the same continuation; the option with the lowest mean loss over the
  prompts' common suffix wins;
- language modelling: the continuation must come out of the greedy argmax, token for token.
Few-shot examples (Random(1234 + idx) over the other rows) come before each prompt, each followed by a blank line.
Ranks take examples idx = rank, rank + W, ...; a SUM all-reduce gives every rank the task's accuracy.
Centred accuracy = (acc - b) / (1 - b) with b the task's random baseline; CORE is the mean over the tasks.
The bundle's files are read by bench/nanochat/evalbundle.py.
"""

import random
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from jinja2 import Template

from bench.errors import DataError
from bench.nanochat.common import print0
from bench.nanochat.evalbundle import LANGUAGE_MODELING, MULTIPLE_CHOICE, SCHEMA, Task

FEWSHOT_SEED = 1234  # + the example's index


# Every prompt: the shots, each "prefix delimiter answer" and a blank line, then the example's own prefix and answer.
_PROMPT = Template("{% for shot in shots %}{{ shot[0] }}{{ delimiter }}{{ shot[1] }}\n\n{% endfor %}"
                   "{{ prefix }}{{ delimiter }}{{ answer }}")


def _shot(row: dict, task_type: str) -> tuple:
    """(prefix, answer) of a row used as a few-shot example: the gold answer, or the gold context."""
    if task_type == MULTIPLE_CHOICE:
        return row["query"], row["choices"][row["gold"]]
    if task_type == SCHEMA:
        return row["context_options"][row["gold"]], row["continuation"]
    return str(row["context"]).strip(), row["continuation"]


def render_prompts(row: dict, task: Task, shots: list[dict]) -> list[str]:
    """The prompts of one example: one per choice (MC), one per context option (schema), or the LM pair
    (without the continuation, stripped; with it)."""
    fewshot = [_shot(s, task.task_type) for s in shots]
    render = lambda prefix, answer: _PROMPT.render(shots=fewshot, delimiter=task.delimiter, prefix=prefix,
                                                   answer=answer)
    if task.task_type == MULTIPLE_CHOICE:
        return [render(row["query"], choice) for choice in row["choices"]]
    if task.task_type == SCHEMA:
        return [render(option, row["continuation"]) for option in row["context_options"]]
    context = str(row["context"]).strip()
    return [render(context, "").strip(), render(context, row["continuation"])]


def fewshot_indices(idx: int, n: int, k: int) -> list[int]:
    """k other rows of the (shuffled, cropped) task, drawn by Random(1234 + idx)."""
    if k <= 0:
        return []
    return random.Random(FEWSHOT_SEED + idx).sample([i for i in range(n) if i != idx], k)


def common_length(seqs: list[list[int]], from_end: bool = False) -> int:
    """Tokens all sequences share at the start (or, from_end, at the end)."""
    shortest = min(len(s) for s in seqs)
    for i in range(shortest):
        pos = -1 - i if from_end else i
        if any(s[pos] != seqs[0][pos] for s in seqs):
            return i
    return shortest


def spans(tokens: list[list[int]], task_type: str) -> tuple[list[list[int]], list[int], list[int]]:
    """(sequences to score, start, end): the scored tokens of sequence i are [start_i, end_i)."""
    if task_type == MULTIPLE_CHOICE:
        start = common_length(tokens)
        return tokens, [start] * len(tokens), [len(t) for t in tokens]
    if task_type == SCHEMA:
        suffix = common_length(tokens, from_end=True)
        return tokens, [len(t) - suffix for t in tokens], [len(t) for t in tokens]
    without, with_ = tokens
    if not (len(without) < len(with_) and with_[:len(without)] == without):
        raise ValueError("the prompt without the continuation does not tokenize to a prefix of the prompt with it")
    return [with_], [len(without)], [len(with_)]


@torch.no_grad()
def score(model, seqs: list[list[int]], starts: list[int], ends: list[int], task_type: str, gold, pad_id: int,
          device) -> bool:
    """One forward of the right-padded batch. LM: every scored token is the argmax of the position before.
    MC/schema: the sequence with the lowest mean loss over its span is the answer (the first, on a tie)."""
    width = max(len(s) for s in seqs)
    ids = torch.tensor([s + [pad_id] * (width - len(s)) for s in seqs], dtype=torch.long, device=device)
    logits = model(ids)
    if task_type == LANGUAGE_MODELING:
        s, e = starts[0], ends[0]
        return bool(torch.equal(logits[0, s - 1:e - 1].argmax(dim=-1), ids[0, s:e]))
    # per-position losses against the inputs shifted by one, as upstream computes them; a span that starts at
    # 0 (options identical to the end) slices [-1:e-1], which is empty: its mean is nan, as upstream's
    losses = F.cross_entropy(logits.flatten(0, 1), ids.roll(-1, dims=1).flatten(), reduction="none").view(ids.shape)
    losses[:, -1] = float("nan")  # the last position has no target
    mean_losses = [losses[i, s - 1:e - 1].mean().item() for i, (s, e) in enumerate(zip(starts, ends))]
    return mean_losses.index(min(mean_losses)) == gold


def evaluate_example(model, tokenizer, data: list[dict], idx: int, task: Task, device,
                     max_len: int | None = None) -> bool:
    shots = [data[i] for i in fewshot_indices(idx, len(data), task.num_fewshot)]
    prompts = render_prompts(data[idx], task, shots)
    bos = tokenizer.get_bos_token_id()
    try:
        seqs, starts, ends = spans(tokenizer.encode(prompts, prepend=bos), task.task_type)
    except ValueError as e:
        raise DataError(f"CORE task {task.label}, example {idx} (after the shuffle): {e}") from None
    longest = max(len(s) for s in seqs)
    if max_len is not None and longest > max_len:
        raise DataError(f"CORE task {task.label}, example {idx}: {longest} tokens with its {task.num_fewshot} "
                        f"shot(s), more than the {max_len} positions this model can take (its rotary cache)")
    return score(model, seqs, starts, ends, task.task_type, data[idx].get("gold"), bos, device)


def evaluate_task(model, tokenizer, data: list[dict], task: Task, device, rank: int = 0,
                  world_size: int = 1) -> float:
    """Accuracy over the task's examples: this rank scores idx = rank mod W, the SUM all-reduce the rest."""
    max_len = getattr(getattr(model, "cos", None), "shape", [None, None])[1]
    correct = torch.zeros(len(data), dtype=torch.float32, device=device)
    for idx in range(rank, len(data), world_size):
        correct[idx] = float(evaluate_example(model, tokenizer, data, idx, task, device, max_len))
    if world_size > 1:
        dist.barrier()
        dist.all_reduce(correct, op=dist.ReduceOp.SUM)
    return correct.mean().item()


def centered(accuracy: float, random_baseline_pct: float) -> float:
    """Accuracy above chance, scaled so that chance is 0 and perfect is 1 (the baseline is in percent)."""
    b = 0.01 * random_baseline_pct
    return (accuracy - b) / (1.0 - b)


@dataclass
class TaskResult:
    label: str
    accuracy: float
    centered: float
    examples: int
    seconds: float


def evaluate_model(model, tokenizer, bundle, device, max_per_task: int = -1, rank: int = 0, world_size: int = 1,
                   on_task=None) -> tuple[list[TaskResult], float]:
    """Every task of the bundle in core.yaml's order, with nanochat's lines; (results, CORE metric).
    `on_task(result)` is called after each task (the run record's events)."""
    results = []
    for task in bundle.tasks:
        t0 = time.time()
        print0(f"Evaluating: {task.label} ({task.num_fewshot}-shot, type: {task.task_type})... ", end="")
        data = bundle.task_data(task, max_per_task)
        accuracy = evaluate_task(model, tokenizer, data, task, device, rank, world_size)
        result = TaskResult(task.label, accuracy, centered(accuracy, bundle.baselines[task.label]), len(data),
                            time.time() - t0)
        print0(f"accuracy: {result.accuracy:.4f} | centered: {result.centered:.4f} | time: {result.seconds:.2f}s")
        results.append(result)
        if on_task is not None:
            on_task(result)
    return results, sum(r.centered for r in results) / len(results)


def results_csv(results: list[TaskResult], core: float) -> str:
    """The CSV upstream writes to base_eval/ (and prints): fixed-width columns, the CORE row last."""
    lines = [f"{'Task':<35}, {'Accuracy':<10}, {'Centered':<10}"]
    lines += [f"{r.label:<35}, {r.accuracy:<10.6f}, {r.centered:<10.6f}" for r in results]
    lines.append(f"{'CORE':<35}, {'':<10}, {core:<10.6f}")
    return "\n".join(lines) + "\n"
