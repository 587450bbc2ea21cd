"""Our chat evaluation and KV-cache engine against upstream nanochat's own, on one checkpoint and the same data.

    NANOCHAT_UPSTREAM_DIR=/tmp/upstream-nanochat /tmp/upstream-venv/bin/python benchmarks/compare_chat_eval.py \\
        [--base-dir /tmp/chat-eval-base] [-x 24] [-m 48]

Needs a checkout of upstream karpathy/nanochat at 5c93a56 (never vendored here) and a Python with upstream's
dependencies (`datasets`, `filelock`, `rustbpe`, `tiktoken`). In `--base-dir` (made once, then reused) it writes
generated shards, a 1,024-token tokenizer, the `data generate --chat` stand-ins and a depth-2 model trained by
our trainer (`bench.nanochat.train`, CPU) into base_checkpoints/; upstream's `checkpoint_manager.load_model`
loads that checkpoint as it would its own, and our loader loads it too. Upstream's tasks read the same staged
files (its `load_dataset` is pointed at them, as benchmarks/compare_chat_data.py does).

Compared, on the first `-x` problems of each task:
- categorical (ARC-Easy, ARC-Challenge, MMLU): the accuracy from upstream's `run_categorical_eval` and ours, and
  each problem's predicted letter;
- generative (GSM8K, HumanEval, SpellingBee): the prompt ids and the generated token ids of upstream's
  `Engine.generate_batch` and ours, greedy (one sample) and sampled (T=1, top-k 50, two samples), and the
  accuracy of upstream's `run_generative_eval` and ours;
- the time both engines take for those generations, alternating call by call: generated tokens a second, ours
  and upstream's (a tiny model on one thread: what is timed is mostly each step's Python and launch overhead,
  which is also what bounds decoding a small batch on a GPU).
The exit status is 1 on any difference.
"""

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEPTH, SEQ, VOCAB, STEPS = 2, 256, 1024, 30
CATEGORICAL = ("ARC-Easy", "ARC-Challenge", "MMLU")
GENERATIVE = ("GSM8K", "HumanEval", "SpellingBee")
SAMPLING = ({"num_samples": 1, "temperature": 0.0, "top_k": 50}, {"num_samples": 2, "temperature": 1.0, "top_k": 50})


def prepare(base: Path) -> None:
    """Shards, tokenizer, chat stand-ins and a trained checkpoint in `base` (skipped when the checkpoint is there)."""
    if any((base / "base_checkpoints" / f"d{DEPTH}").glob("model_*.pt")):
        return
    from bench.nanochat import chatgen, dataset, tokenizer

    dataset.generate_shards(3, 256, 16)
    tokenizer.train_tokenizer(vocab_size=VOCAB)
    chatgen.generate()
    cmd = [sys.executable, "-m", "bench.nanochat.train", "--device_type=cpu", f"--depth={DEPTH}",
           f"--max_seq_len={SEQ}", "--device_batch_size=4", f"--total_batch_size={4 * SEQ}",
           f"--num_iterations={STEPS}", "--eval_every=-1", "--sample_every=-1", f"--save_every={STEPS}",
           f"--model_tag=d{DEPTH}", "--preflight=0"]
    subprocess.run(cmd, check=True, env=dict(os.environ, OMP_NUM_THREADS="1"))


def upstream_side(upstream: Path):
    """Upstream's model (its own loader), tokenizer, engine and evaluation loops."""
    sys.path.insert(0, str(upstream))
    sys.path.insert(0, str(HERE))
    import importlib

    for module in ("tasks.arc", "tasks.mmlu", "tasks.gsm8k", "tasks.humaneval", "tasks.smoltalk"):
        importlib.import_module(module)
    from compare_chat_data import redirect_load_dataset

    redirect_load_dataset()
    import torch
    from nanochat.checkpoint_manager import load_model
    from nanochat.engine import Engine
    from scripts import chat_eval as up_eval

    model, tokenizer, _ = load_model("base", torch.device("cpu"), phase="eval")
    return model, tokenizer, Engine(model, tokenizer), up_eval


def our_side():
    import torch

    from bench.nanochat.checkpoint import load_model
    from bench.nanochat.engine import Engine
    from bench.nanochat.tokenizer import get_tokenizer

    model, _ = load_model("base", torch.device("cpu"))
    tokenizer = get_tokenizer()
    return model, tokenizer, Engine(model, tokenizer)


def predicted_letters(model, render, tasks, n):
    import torch

    out = []
    for i in range(n):
        conversation = tasks[i]
        ids = render(conversation)
        with torch.no_grad():
            logits = model(torch.tensor([ids]))[0, -1]
        out.append(max(conversation["letters"], key=lambda letter: logits[render.letter_id(letter)].item()))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-dir", default="/tmp/chat-eval-base", help="where the data and checkpoint are (made once)")
    p.add_argument("-x", "--max-problems", type=int, default=24, help="first problems of each task (default 24)")
    p.add_argument("-m", "--max-new-tokens", type=int, default=48, help="tokens per generated sample (default 48)")
    args = p.parse_args(argv)
    upstream = Path(os.environ.get("NANOCHAT_UPSTREAM_DIR", "/tmp/upstream-nanochat"))
    if not (upstream / "nanochat" / "engine.py").is_file():
        print(f"error: no upstream nanochat checkout at {upstream} (set NANOCHAT_UPSTREAM_DIR)")
        return 2
    os.environ["NANOCHAT_BASE_DIR"] = str(Path(args.base_dir).resolve())
    import torch

    torch.set_num_threads(1)  # a tiny model: one thread, the same on both sides
    Path(args.base_dir).mkdir(parents=True, exist_ok=True)
    prepare(Path(args.base_dir))

    from bench.nanochat import chat_eval
    from bench.nanochat.chat_format import render_for_completion

    up_model, up_tok, up_engine, up_eval = upstream_side(upstream)
    model, tok, engine = our_side()
    failures = []
    for name in CATEGORICAL + GENERATIVE:
        ours, theirs = chat_eval.TASKS[name](), up_task(up_eval, name)
        n = min(args.max_problems, len(ours))
        if name in CATEGORICAL:
            acc_up = up_eval.run_categorical_eval(theirs, up_tok, up_model, 8, max_problems=n)
            counts = chat_eval.categorical_counts(ours, tok, model, 8, max_problems=n)
            letters_up = predicted_letters(up_model, Renderer(up_tok, up_tok.render_for_completion), theirs, n)
            letters = predicted_letters(model, Renderer(tok, lambda c: render_for_completion(tok, c)), ours, n)
            same = letters == letters_up and counts.passed / counts.total == acc_up
            detail = f"accuracy {100 * acc_up:.2f}% upstream, {100 * counts.passed / counts.total:.2f}% here; " \
                     f"{sum(a == b for a, b in zip(letters, letters_up))}/{n} predicted letters equal"
        else:
            ids_same, generated, seconds, seconds_up = 0, 0, 0.0, 0.0
            for i in range(n):
                prompt, prompt_up = render_for_completion(tok, ours[i]), up_tok.render_for_completion(theirs[i])
                for s in SAMPLING:
                    t0 = time.perf_counter()
                    rows, _ = engine.generate_batch(prompt, max_tokens=args.max_new_tokens, **s)
                    t1 = time.perf_counter()
                    rows_up, _ = up_engine.generate_batch(prompt_up, max_tokens=args.max_new_tokens, **s)
                    seconds, seconds_up = seconds + t1 - t0, seconds_up + time.perf_counter() - t1
                    ids_same += int(prompt == prompt_up and rows == rows_up)
                    generated += sum(len(r) - len(prompt) for r in rows)
            acc_up = up_eval.run_generative_eval(theirs, up_tok, up_model, up_engine, 1, args.max_new_tokens, 0.0, 50,
                                                 max_problems=n)
            counts = chat_eval.generative_counts(ours, tok, engine, 1, args.max_new_tokens, 0.0, 50, max_problems=n)
            same = ids_same == n * len(SAMPLING) and counts.passed / counts.total == acc_up
            detail = f"{ids_same}/{n * len(SAMPLING)} generations with equal ids ({generated} tokens), accuracy " \
                     f"{100 * acc_up:.2f}% upstream, {100 * counts.passed / counts.total:.2f}% here; generated " \
                     f"{generated / seconds:,.0f} tok/s here, {generated / seconds_up:,.0f} upstream"
        print(f"{'same' if same else 'DIFF'}  {name}: {n} problems; {detail}", flush=True)
        failures += [] if same else [name]
    print("all same" if not failures else f"{len(failures)} difference(s): {', '.join(failures)}")
    return 1 if failures else 0


class Renderer:
    """A side's render_for_completion plus its single-token letter lookup."""

    def __init__(self, tokenizer, render):
        self.tokenizer, self.render = tokenizer, render

    def __call__(self, conversation):
        return self.render(conversation)

    def letter_id(self, letter):
        return self.tokenizer.encode(letter)[0]


def up_task(up_eval, name):
    """Upstream's task object, built as its run_chat_eval builds it."""
    from functools import partial

    return {
        "HumanEval": up_eval.HumanEval,
        "MMLU": partial(up_eval.MMLU, subset="all", split="test"),
        "ARC-Easy": partial(up_eval.ARC, subset="ARC-Easy", split="test"),
        "ARC-Challenge": partial(up_eval.ARC, subset="ARC-Challenge", split="test"),
        "GSM8K": partial(up_eval.GSM8K, subset="main", split="test"),
        "SpellingBee": partial(up_eval.SpellingBee, size=256, split="test"),
    }[name]()


if __name__ == "__main__":
    sys.exit(main())
