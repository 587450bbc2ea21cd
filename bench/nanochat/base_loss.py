"""base_loss: the train and val bits per byte of a base checkpoint, and a few greedy samples (nanochat 5c93a56's
scripts/base_loss.py).

    torchrun --standalone --nproc_per_node=2 -m bench.nanochat.base_loss -- --device_batch_size=4 --split_tokens=4096

Per split, a fresh loader of the shards (train from its first row groups, val = the last K files) feeds
`split_tokens / (B x T x W)` batches to evaluate_bpb, SUM-reduced over the ranks; T is the checkpoint's
sequence length, and split_tokens must be a multiple of B x T x W (the planner rounds it per rank count).
Rank 0 then completes upstream's seven prompts greedily (16 tokens, stopping at BOS or assistant_end).
Figures: `score` events train_bpb and val_bpb (each with the sequences and tokens it evaluated and its seconds),
a `val` event at the checkpoint's step, run.json `scores`.
"""

import time
from dataclasses import asdict

import torch

from bench.errors import ConfigError
from bench.nanochat import stagerun
from bench.nanochat.base_loss_config import SPLITS, BaseLossConfig, parse
from bench.nanochat.common import print0
from bench.nanochat.train import SAMPLE_PROMPTS as PROMPTS  # base_train's, which base_loss prints completed
from bench.processes import exit_now
from bench.workloads.base_loss import RUN_WORKLOAD

SAMPLE_TOKENS = 16


def eval_steps(split_tokens: int, device_batch_size: int, seq_len: int, world_size: int) -> int:
    """Batches per rank and split; a ConfigError naming the multiples that would work when it does not divide."""
    per_step = device_batch_size * seq_len * world_size
    if split_tokens % per_step:
        lower, upper = split_tokens // per_step * per_step, (split_tokens // per_step + 1) * per_step
        near = f"{lower:,} or {upper:,}" if lower else f"{upper:,}"
        raise ConfigError(f"--split_tokens={split_tokens}: not a multiple of device_batch_size x sequence_len x "
                          f"ranks = {device_batch_size} x {seq_len} x {world_size} = {per_step:,}; give {near} "
                          f"(the planner rounds it per rank count)")
    return split_tokens // per_step


@torch.inference_mode()
def greedy_sample(model, tokens: list[int], max_tokens: int, stop: set[int]) -> list[int]:
    """The prompt and its greedy continuation (up to max_tokens, a stop token ends it and is left out), as
    upstream's Engine.generate_batch returns at temperature 0."""
    out = list(tokens)
    for _ in range(max_tokens):
        ids = torch.tensor([out], dtype=torch.long, device=model.get_device())
        next_id = int(model(ids)[0, -1].argmax().item())
        if next_id in stop:
            break
        out.append(next_id)
    return out


def print_samples(model, tokenizer, autocast) -> None:
    bos = tokenizer.get_bos_token_id()
    stop = {bos, tokenizer.encode_special("<|assistant_end|>")}
    for prompt in PROMPTS:
        with autocast:
            ids = greedy_sample(model, tokenizer.encode(prompt, prepend=bos), SAMPLE_TOKENS, stop)
        print0(tokenizer.decode(ids))


def run(config: BaseLossConfig, record) -> tuple[dict, str, str | None]:
    from bench.nanochat.checkpoint import load_model
    from bench.nanochat.data_origin import data_identity
    from bench.nanochat.dataloader import build_loader
    from bench.nanochat.loss_eval import evaluate_bpb
    from bench.nanochat.tokenizer import get_token_bytes, get_tokenizer

    session = stagerun.begin(config, record, "nanochat-bench: base model loss (nanochat-faithful)")
    record.update(workload=RUN_WORKLOAD)
    tokenizer = get_tokenizer()
    model, meta = load_model("base", session.device, config.model_tag or None,
                             None if config.model_step < 0 else config.model_step)
    model.eval()
    seq_len, vocab = meta["model_config"]["sequence_len"], meta["model_config"]["vocab_size"]
    if config.max_seq_len > 0 and config.max_seq_len != seq_len:
        raise ConfigError(f"--max_seq_len={config.max_seq_len}: the checkpoint in {meta['checkpoint_dir']} has "
                          f"sequence length {seq_len}; give that, or -1 to read it from the checkpoint")
    if tokenizer.get_vocab_size() != vocab:
        raise ConfigError(f"the checkpoint in {meta['checkpoint_dir']} has a vocabulary of {vocab:,}, the tokenizer "
                          f"{tokenizer.get_vocab_size():,}: evaluate it with the tokenizer it was trained with")
    steps = eval_steps(config.split_tokens, config.device_batch_size, seq_len, session.world_size)
    print0(f"Loaded base model {meta['model_tag']} step {meta['step']}; {steps} batch(es) of "
           f"{config.device_batch_size} x {seq_len} per rank and split")
    num_params, flops = model.num_params(), model.estimate_flops()
    record.emit("model_ready", num_params=num_params, flops_per_token=flops)
    record.update(num_params=num_params, flops_per_token=flops, num_iterations=steps,
                  config={**asdict(config), "model_tag": meta["model_tag"], "model_step": meta["step"]},
                  vocabulary={"vocab_size": vocab, "source": "nanochat tokenizer", "bpb": True},
                  data=data_identity() if session.master else None)
    token_bytes = get_token_bytes(device=session.device)
    scores, t_eval = {}, time.time()
    for split in SPLITS:
        t0 = time.time()
        loader = build_loader(config.device_batch_size, seq_len, split, session.device, session.rank,
                              session.world_size)
        with session.watchdog.relaxed(), session.autocast():
            bpb = evaluate_bpb(model, loader, steps, token_bytes)
        session.synchronize()
        seconds = time.time() - t0
        print0(f"{split} bpb: {bpb:.4f}")
        scores[f"{split}_bpb"] = bpb
        record.emit("score", name=f"{split}_bpb", value=bpb, problems=steps * config.device_batch_size *
                    session.world_size, tokens=config.split_tokens, seconds=seconds)  # problems: sequences
        print0(f"{split}: {config.split_tokens / seconds:,.0f} tok/sec over {config.split_tokens:,} tokens")
    record.emit("val", step=meta["step"], val_bpb=scores["val_bpb"])
    total_s = time.time() - t_eval
    if session.master:
        with session.watchdog.relaxed():
            print_samples(model, tokenizer, session.autocast())
    record.update(scores=scores)
    peak = stagerun.end(session, record, total_s, scores["val_bpb"], training=False)
    return {"peak_mem_mib": peak, "total_training_time_s": total_s, "min_val_bpb": scores["val_bpb"],
            "final_val_bpb": scores["val_bpb"]}, "ok", None


def main(argv: list[str] | None = None) -> int:
    return stagerun.main(run, parse, argv)


if __name__ == "__main__":
    exit_now(main())  # without Python's teardown of torch (bench/processes.py)
