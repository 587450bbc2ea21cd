"""Supervised fine-tuning of a nanochat model into a chat model (mirrors upstream 5c93a56 scripts/chat_sft.py).

Run as:
  torchrun --standalone --nproc_per_node=8 -m bench.nanochat.chat_sft -- --eval_metrics_every=-1
  python -m bench.nanochat.chat_sft --device_type=cpu --device_batch_size=2 --target_examples_per_step=4 \\
      --num_iterations=21 --eval_every=10 --eval_steps=2 --eval_metrics_every=-1     # tiny, on a CPU

It loads the mid (or base) checkpoint, trains on upstream's SFT mixture (bench/nanochat/tasks/mixtures.py) one
padded conversation per row, the loss on the assistant's tokens (bench/nanochat/sftloader.py), with fresh
optimizers at init_lr_frac of the learning rates, decayed linearly to 0 (Muon's momentum a constant 0.95, no
gradient clipping, not compiled: the rows vary in length), and saves the `sft` checkpoint (model and meta, no
optimizer) in chatsft_checkpoints/<model_tag or d<n_layer>>. As upstream, the loop counts num_iterations but
its last pass only evaluates: num_iterations - 1 updates, the checkpoint of step num_iterations - 1.

Lines are upstream's own (`Step 00042/00701 | Training loss: ...`, `Step 00100 | Validation loss: ...`); the
step events carry tok_per_sec = supervised tokens per second over all ranks (upstream's num_tokens / dt) and
MFU from every position the model ran (padding included: the model computes it). With --eval_metrics_every=N
MMLU and ARC-Easy accuracy (bench/nanochat/chat_eval.py) are scored at every N-th step and the last, as upstream
(`Step 00200 | mmlu_acc: ..., arc_easy_acc: ...`). The last validation loss, training loss and accuracies go
into run.json `scores` (val_loss, train_loss, mmlu_acc, arc_easy_acc) and the checkpoint's meta.
"""

import math
import time
from contextlib import nullcontext
from dataclasses import asdict

import torch
import torch.distributed as dist

from bench.errors import ConfigError
from bench.metrics import WARMUP_STEPS, mfu_percent
from bench.nanochat import stagerun, steptimer
from bench.nanochat.chat_format import MAX_TOKENS
from bench.nanochat.checkpoint import check_writable, later_steps_note, load_model, phase_dir, save_checkpoint
from bench.nanochat.common import get_base_dir, print0
from bench.runside.guard import DivergenceGuard, check_finite
from bench.runside.runrecord import RunRecord
from bench.nanochat.sftconfig import SFTConfig, parse_sft_args, sft_grad_accum
from bench.nanochat.sftloader import sft_batches
from bench.processes import exit_now
from bench.workloads.chat_sft import RUN_WORKLOAD

STEP_LINE = "Step {:05d}/{:05d} | Training loss: {:.6f}| lrm: {:.6f}| num_tokens: {:,}"  # upstream's, verbatim
VAL_LINE = "Step {:05d} | Validation loss: {:.6f}"
METRIC_TASKS = {"mmlu_acc": "MMLU", "arc_easy_acc": "ARC-Easy"}  # upstream's metric names, chat_eval's tasks


def sft(config: SFTConfig, record: RunRecord) -> tuple[dict, str, str | None]:
    from bench.nanochat.tasks.mixtures import chat_sft_train, chat_sft_val
    from bench.nanochat.tokenizer import get_tokenizer

    # ----------------------------------------------------------------------------------------------
    # Compute init: the process group, every wait bounded, the pre-flight and the network gate
    session = stagerun.begin(config, record, "nanochat-bench: SFT (nanochat-faithful chat_sft)")
    record.update(workload=RUN_WORKLOAD)  # also when started without the launcher, which records it first
    ddp, rank, world_size, device = session.ddp, session.rank, session.world_size, session.device
    autocast_ctx = session.autocast() if config.dtype == "bfloat16" else nullcontext()

    # ----------------------------------------------------------------------------------------------
    # Model and tokenizer: the input stage's checkpoint, not compiled (rows vary in length)
    model, meta = load_model(config.source, device, config.model_tag or None,
                             None if config.step < 0 else config.step)
    tokenizer = get_tokenizer()
    vocab_size = model.config.vocab_size
    if tokenizer.get_vocab_size() != vocab_size:
        raise ConfigError(f"the {config.source} checkpoint in {meta['checkpoint_dir']} has a vocabulary of "
                          f"{vocab_size:,} tokens, the tokenizer of {get_base_dir()} {tokenizer.get_vocab_size():,}; "
                          "give SFT the tokenizer the model was trained with")
    if model.rotary_seq_len < MAX_TOKENS - 1:  # else a long conversation would stop the run mid-way
        raise ConfigError(f"the {config.source} model in {meta['checkpoint_dir']} was trained with max_seq_len "
                          f"{model.config.sequence_len}: its rotary embeddings cover {model.rotary_seq_len} "
                          f"positions, SFT's rows up to {MAX_TOKENS - 1}; train it with --max_seq_len >= "
                          f"{-(-(MAX_TOKENS - 1) // (model.rotary_seq_len // model.config.sequence_len))}")
    print0(f"Loaded the {config.source} checkpoint of step {meta['step']} from {meta['checkpoint_dir']}")
    checkpoint_dir = phase_dir("sft") / (config.model_tag or f"d{model.config.n_layer}")
    check_writable(checkpoint_dir)  # it saves after the last step, always: found out now, not after every step
    num_params, flops_per_token = model.num_params(), model.estimate_flops()
    print0(f"Number of parameters: {num_params:,}")
    record.emit("model_ready", num_params=num_params, flops_per_token=flops_per_token)
    record.update(num_params=num_params, flops_per_token=flops_per_token,
                  vocabulary={"vocab_size": vocab_size, "source": "tokenizer", "bpb": False})

    # ----------------------------------------------------------------------------------------------
    # Data and batch arithmetic: one conversation per row, target_examples_per_step over all ranks
    train_ds = chat_sft_train()
    val_ds = chat_sft_val() if config.eval_every > 0 else None
    print0(f"Training rows: {len(train_ds):,}")
    B, target = config.device_batch_size, config.target_examples_per_step
    print0(f"Target examples per step: {target}")
    print0(f"Device batch size: {B}")
    print0(f"Examples per step is device_batch_size * ddp_world_size: {B * world_size}")
    grad_accum = sft_grad_accum(target, B, world_size)
    print0(f"=> Setting grad accum steps: {grad_accum}")
    num_iterations = config.num_iterations if config.num_iterations > 0 else \
        len(train_ds) // target * config.num_epochs
    if num_iterations < 2:  # the last pass only evaluates: fewer than 2 make no update
        raise ConfigError(f"{len(train_ds)} training rows // --target_examples_per_step={target} x --num_epochs="
                          f"{config.num_epochs} = {num_iterations} iteration(s), no update; stage the full data "
                          "(`nanochat-bench data download --chat`), lower the target, or give --num_iterations")
    print0(f"Number of iterations: {num_iterations:,} ({num_iterations - 1:,} updates)")
    record.update(num_iterations=num_iterations, grad_accum=grad_accum)
    train_iter = sft_batches(train_ds, tokenizer, B, rank, world_size, device)

    # ----------------------------------------------------------------------------------------------
    # Optimizers: fresh, at init_lr_frac of the learning rates (Muon's momentum stays 0.95)
    optimizers = model.setup_optimizers(unembedding_lr=config.unembedding_lr, embedding_lr=config.embedding_lr,
                                        matrix_lr=config.matrix_lr, weight_decay=config.weight_decay, log=print0)
    stagerun.scale_lrs(optimizers, config.init_lr_frac)
    record.emit("data_ready")

    # ----------------------------------------------------------------------------------------------
    # Training loop: the last pass only evaluates, then the checkpoint is saved
    if session.device_type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    timer = steptimer.StepTimer(session.device_type)
    steptimer.use(timer)
    guard = DivergenceGuard(floor=math.log(vocab_size))
    val_loss = train_loss_item = mfu = None
    metrics: dict[str, float] = {}
    total_training_time, dt, step, stopped_early = 0.0, 0.0, 0, False
    for step in range(num_iterations):
        last_step = step == num_iterations - 1
        stopped_early = not last_step and stagerun.out_of_time(session, config.deadline, dt)
        if config.eval_every > 0 and not stopped_early and (last_step or step % config.eval_every == 0):
            with session.watchdog.relaxed():
                val_loss = validation_loss(model, val_ds, tokenizer, config, session, autocast_ctx)
            check_finite(step, val_loss, "validation loss")
            print0(VAL_LINE.format(step, val_loss))
        if config.eval_metrics_every > 0 and not stopped_early and \
                (last_step or (step > 0 and step % config.eval_metrics_every == 0)):
            with session.watchdog.relaxed():  # the ranks' shares of the problems differ by one batch
                metrics = eval_metrics(model, tokenizer, config, session, autocast_ctx, record)
            print0(f"Step {step:05d} | " + ", ".join(f"{k}: {v:.6f}" for k, v in metrics.items()))
        if last_step or stopped_early:
            break

        # ------------------------------------------------------------------------------------------
        # one training step, timed between device synchronisations
        session.synchronize()
        timer.begin()
        t0 = time.time()
        counts = torch.zeros(2, dtype=torch.long, device=device)  # supervised tokens, positions run
        with timer.section("fwd_bwd"):
            for _ in range(grad_accum):
                with timer.section("data"):
                    inputs, targets = next(train_iter)
                with autocast_ctx:
                    loss = model(inputs, targets)
                train_loss = loss.detach()  # for logging: the last micro-batch's mean
                (loss / grad_accum).backward()  # each backward adds: the mean over micro-batches
                counts[0] += (targets >= 0).sum()
                counts[1] += inputs.numel()
        if ddp:
            dist.all_reduce(counts, op=dist.ReduceOp.SUM)
        lrm = 1.0 - step / num_iterations  # linear to 0
        stagerun.optimizer_step(model, optimizers, lrm, timer)  # Muon's momentum stays at 0.95: no ramp in SFT
        session.synchronize()
        dt = time.time() - t0
        split = timer.split(dt * 1000)
        # ------------------------------------------------------------------------------------------

        train_loss_item = train_loss.item()
        guard.check(step, train_loss_item)
        num_tokens, positions = counts.tolist()
        mfu = mfu_percent(flops_per_token, positions / dt, world_size, session.peak_flops)
        if step > WARMUP_STEPS:
            total_training_time += dt
        stagerun.log_step(session, record, step, num_iterations, train_loss_item, lrm, dt, num_tokens / dt, mfu,
                          total_training_time, line=STEP_LINE.format(step, num_iterations, train_loss_item, lrm,
                                                                     num_tokens), **split)

    # ----------------------------------------------------------------------------------------------
    # The sft checkpoint: model and meta, no optimizer; the directory made before any rank writes
    with session.watchdog.relaxed():
        save_checkpoint(checkpoint_dir, step, model.state_dict(), None,
                        {"step": step, "val_loss": val_loss, **metrics, "model_config": asdict(model.config),
                         "user_config": asdict(config), "source": config.source, "source_step": meta["step"]},
                        rank=rank)
    print0(f"✅ Saved model checkpoint to {checkpoint_dir}")
    if note := later_steps_note(checkpoint_dir, step):
        print0(note)
    record.update(checkpoint={"step": step, "dir": str(checkpoint_dir)})
    losses = {name: value for name, value in (("val_loss", val_loss), ("train_loss", train_loss_item))
              if value is not None}
    for name, value in losses.items():
        record.emit("score", name=name, value=value)
    record.update(scores={**losses, **metrics})
    peak_mem_mib = stagerun.end(session, record, total_training_time)
    summary = {"peak_mem_mib": peak_mem_mib, "total_training_time_s": total_training_time,
               "final_loss": train_loss_item, "final_mfu": mfu}
    if stopped_early:
        message = (f"stopped at step {step} of {num_iterations} to end before the time limit (--deadline); the sft "
                   f"checkpoint of step {step} is in {checkpoint_dir}")
        return stagerun.stopped(session, summary, message)
    return summary, "ok", None


def validation_loss(model, val_ds, tokenizer, config: SFTConfig, session, autocast_ctx) -> float:
    """The mean of eval_steps batch means on each rank, averaged over the ranks (upstream's AVG, as a SUM
    divided by the ranks: gloo has no AVG); a fresh loader each time, so every validation sees the same rows."""
    loader = sft_batches(val_ds, tokenizer, config.device_batch_size, session.rank, session.world_size,
                         session.device, what="SFT validation")
    model.eval()
    losses = []
    with torch.no_grad():
        for _ in range(config.eval_steps):
            inputs, targets = next(loader)
            with autocast_ctx:
                losses.append(model(inputs, targets))
    loss = torch.stack(losses).mean()
    if session.ddp:
        dist.all_reduce(loss, op=dist.ReduceOp.SUM)
        loss = loss / session.world_size
    model.train()
    return loss.item()


def eval_metrics(model, tokenizer, config: SFTConfig, session, autocast_ctx, record: RunRecord) -> dict[str, float]:
    """MMLU and ARC-Easy accuracy (upstream's run_chat_eval: categorical, batches of 2 x device_batch_size, the
    first eval_metrics_max_problems problems), through bench/nanochat/chat_eval.py; a score event each."""
    from bench.nanochat.chat_eval import run_task
    from bench.nanochat.chat_eval_config import ChatEvalConfig
    from bench.nanochat.engine import Engine

    settings = ChatEvalConfig(batch_size=2 * config.device_batch_size, max_problems=config.eval_metrics_max_problems)
    engine = Engine(model, tokenizer)  # categorical tasks score logits; the engine is run_task's for generative ones
    model.eval()
    metrics = {}
    with torch.no_grad(), autocast_ctx:
        for name, task in METRIC_TASKS.items():
            result = run_task(task, model, tokenizer, engine, settings, session.synchronize)
            metrics[name] = result.accuracy
            record.emit("score", name=name, value=result.accuracy, problems=result.counts.total,
                        seconds=result.seconds)
    model.train()
    return metrics


def main(argv: list[str] | None = None) -> int:
    return stagerun.main(sft, parse_sft_args, argv)


if __name__ == "__main__":
    exit_now(main())  # without Python's teardown of torch (bench/processes.py)
