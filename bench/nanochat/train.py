"""Base pretraining of nanochat's GPT (mirrors karpathy/nanochat scripts/base_train.py, Nov 2025).

Run as:
  python -m bench.nanochat.train                                                   # one process
  torchrun --standalone --nproc_per_node=8 -m bench.nanochat.train -- --depth=20 --run=dummy
  python -m bench.nanochat.train --depth=4 --max_seq_len=512 --device_batch_size=1 \
      --eval_tokens=512 --total_batch_size=512 --num_iterations=20                 # tiny, on a CPU

Flags are nanochat's (see bench/nanochat/config.py). Output: nanochat's human lines on rank 0, and
with NANOCHAT_BENCH_RUN_DIR set, run.json and metrics.jsonl events (bench/runside/runrecord.py).
"""

import os

os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")  # before CUDA initialises

import json
import math
import pickle
import socket
import statistics
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

from bench import nccl_log
from bench.errors import BenchError, ConfigError, first_line
from bench.metrics import WARMUP_STEPS, mfu_percent
from bench.nanochat.attention import check_forced_attention, force_flash_attention, restrict_sdpa_backends
from bench.nanochat.checkpoint import (check_writable, load_model_state, load_optimizer_states, phase_dir,
                                      save_checkpoint)
from bench.nanochat.common import print0
from bench.nanochat.compute import topology
from bench.nanochat.config import (TrainConfig, check_horizon, force_flash_from_env, grad_accum_steps, parse_args,
                                   training_horizon)
from bench.nanochat.gpt import GPTConfig, build_model
from bench.runside.guard import DivergenceGuard
from bench.nanochat.network_gate import network_facts
from bench.nanochat.parallel import Strategy, clip_grad_norm_, parallelize
from bench.nanochat.profile import maybe_profile
from bench.runside.runrecord import RunRecord
from bench.nanochat import stagerun, steptimer
from bench.paths import folder_tag
from bench.processes import exit_now

SAMPLE_PROMPTS = [
    "The capital of France is",
    "The chemical symbol of gold is",
    "If yesterday was Friday, then tomorrow will be",
    "The opposite of hot is",
    "The planets of the solar system are:",
    "My favorite color is",
    "If 5*x + 3 = 13, then x is",
]


def train(config: TrainConfig, record: RunRecord) -> tuple[dict, str, str | None]:
    """The whole pretraining run; returns its summary figures, status and message (stagerun's contract)."""
    from bench.nanochat.dataloader import build_loader  # the data half of the workload
    from bench.nanochat.fp8 import apply_fp8
    from bench.nanochat.fused import apply_fused_kernels
    from bench.nanochat.tokbin import vocabulary

    # ----------------------------------------------------------------------------------------------
    # Compute init: the process group, every wait bounded, the pre-flight and the network gate
    # the effective switch goes into run.json's config, however it was set (flag or environment)
    config = replace(config, force_flash_sdpa=config.force_flash_sdpa or force_flash_from_env())
    session = stagerun.begin(config, record, "nanochat-bench: base pretraining (nanochat-faithful)")
    ddp, ddp_rank, ddp_world_size, device = session.ddp, session.rank, session.world_size, session.device
    device_type, master_process, backend = session.device_type, session.master, session.backend
    watchdog, peak_flops_per_gpu = session.watchdog, session.peak_flops
    autocast_ctx = session.autocast()

    # ----------------------------------------------------------------------------------------------
    # Tokenizer, model shape and batch arithmetic
    tokenizer, token_bytes, vocab_size, vocab_source = vocabulary(config.data_bin_dir, device)
    print0(f"Vocab size: {vocab_size:,} ({vocab_source})")
    facts = {"vocabulary": {"vocab_size": vocab_size, "source": vocab_source, "bpb": token_bytes is not None},
             "data": data_identity_of(config) if master_process else None}  # reads every shard's footer
    if not config.data_bin_dir:  # the K this run validates on, whatever the planner meant to pass
        from bench.nanochat.dataset import resolve_val_files_k

        facts["val_files_k"] = resolve_val_files_k()
    record.update(**facts)  # one rewrite of run.json
    if token_bytes is None and config.eval_every > 0:
        print0("Validation bpb: not computed (the bytes per token of these .bin files are unknown)")
    model_config = GPTConfig.from_depth(config.depth, vocab_size, config.max_seq_len, config.aspect_ratio)
    print0(f"num_layers: {model_config.n_layer}")
    print0(f"model_dim: {model_config.n_embd}")
    print0(f"num_heads: {model_config.n_head}")
    print0(f"num_kv_heads: {model_config.n_kv_head}")
    B, T = config.device_batch_size, config.max_seq_len
    tokens_per_fwdbwd = B * T
    world_tokens_per_fwdbwd = tokens_per_fwdbwd * ddp_world_size
    grad_accum = grad_accum_steps(config.total_batch_size, B, T, ddp_world_size)
    print0(f"Tokens / micro-batch / rank: {B} x {T} = {tokens_per_fwdbwd:,}")
    print0(f"Tokens / micro-batch: {world_tokens_per_fwdbwd:,}")
    print0(f"Total batch size {config.total_batch_size:,} => gradient accumulation steps: {grad_accum}")

    # ----------------------------------------------------------------------------------------------
    # Model: built on the meta device, materialised on ours, then initialised; compiled on CUDA
    if config.force_flash_sdpa:
        force_flash_attention()
        dtype = torch.bfloat16 if device_type == "cuda" else torch.float32
        check_forced_attention(model_config.n_head, model_config.n_kv_head,
                               model_config.n_embd // model_config.n_head, min(T, 256), dtype, device)
        print0("Attention: forced flash-style SDPA kernels: cuDNN, flash, memory-efficient (math kernel disabled)")
    if restrict_sdpa_backends(config.sdpa_backends):
        print0(f"Attention: SDPA kernels restricted to {config.sdpa_backends}")
    orig_model = build_model(model_config, device)
    checkpoint_dir = phase_dir("base") / (config.model_tag or default_model_tag(config, record))
    strategy = Strategy.parse(config.strategy)  # zero2, or FSDP2 sharding, checkpointing, offload
    # every rank writes its optimizer state there: each finds out now, not at the save (a deadline stop saves one)
    saving = [flag for flag, saves in (("--save_every", config.save_every > 0),
                                       ("--deadline", config.deadline > 0 and not strategy.fsdp)) if saves]
    if saving:
        check_writable(checkpoint_dir, f"leave out {' and '.join(saving)}")
    resume_step = config.resume_from_step
    resume_meta: dict = {}
    if resume_step >= 0:
        model_state, resume_meta = read_checkpoint(
            checkpoint_dir / f"model_{resume_step:06d}.pt", meta_path=checkpoint_dir / f"meta_{resume_step:06d}.json",
            load=lambda: load_model_state(checkpoint_dir, resume_step, device, expect_model_config=asdict(model_config),
                                     expect_world_size=ddp_world_size))
        read_checkpoint(checkpoint_dir / f"model_{resume_step:06d}.pt",
                        load=lambda: orig_model.load_state_dict(model_state, strict=True))
        del model_state
        print0(f"Resuming from step {resume_step} of {checkpoint_dir}")
    apply_fp8(orig_model, config.fp8, config.fp8_lm_head, device, log=print0)  # before compile and sharding
    apply_fused_kernels(orig_model, config.fused_kernels, device, log=print0)
    model = parallelize(orig_model, strategy, device, compile=device_type == "cuda")
    print0(f"Memory strategy: {strategy.name}")
    num_params = orig_model.num_params()
    num_flops_per_token = orig_model.estimate_flops()
    print0(f"Number of parameters: {num_params:,}")
    print0(f"Estimated FLOPs per token: {num_flops_per_token:e}")
    record.emit("model_ready", num_params=num_params, flops_per_token=num_flops_per_token)
    record.update(num_params=num_params, flops_per_token=num_flops_per_token)

    # ----------------------------------------------------------------------------------------------
    # Horizon: the first enabled of num_iterations, target_flops, target_param_data_ratio
    num_iterations, how = training_horizon(config, num_params, num_flops_per_token)
    print0(f"Number of iterations ({how}): {num_iterations:,}")
    check_horizon(resume_step, num_iterations, how)
    total_tokens = config.total_batch_size * num_iterations
    print0(f"Total number of training tokens: {total_tokens:,}")
    print0(f"Tokens : Params ratio: {total_tokens / num_params:.2f}")
    print0(f"Total training FLOPs estimate: {num_flops_per_token * total_tokens:e}")
    record.update(num_iterations=num_iterations, grad_accum=grad_accum)

    # ----------------------------------------------------------------------------------------------
    # Optimizers: AdamW for embedding and lm_head, Muon for the matrices (sharded when distributed)
    optimizers = orig_model.setup_optimizers(unembedding_lr=config.unembedding_lr, embedding_lr=config.embedding_lr,
                                             matrix_lr=config.matrix_lr, weight_decay=config.weight_decay, log=print0)
    adamw_optimizer, muon_optimizer = optimizers
    if resume_step >= 0:
        optim_path = checkpoint_dir / f"optim_{resume_step:06d}_rank{ddp_rank}.pt"
        states = read_checkpoint(optim_path, load=lambda: load_optimizer_states(checkpoint_dir, resume_step, ddp_rank,
                                                                                device))
        for opt, state in zip(optimizers, states):
            read_checkpoint(optim_path, load=lambda: opt.load_state_dict(state))

    # ----------------------------------------------------------------------------------------------
    # Data: the train loader is infinite; a fresh val loader per evaluation sees the same tokens
    def build_val_loader():
        return build_loader(B, T, "val", device, ddp_rank, ddp_world_size, config.data_bin_dir)

    train_state = dict(resume_meta.get("dataloader_state_dict") or {})  # rank 0's position, saved in checkpoints
    train_loader = build_loader(B, T, "train", device, ddp_rank, ddp_world_size, config.data_bin_dir, state=train_state)
    if config.eval_every > 0:
        build_val_loader()  # a val split too small for this world size fails now, not at step 0
    x, y = next(train_loader)  # the first batch; later ones are fetched while the GPU works
    record.emit("data_ready")

    # ----------------------------------------------------------------------------------------------
    # Schedules
    def get_lr_multiplier(it: int) -> float:
        warmup_iters = round(config.warmup_ratio * num_iterations)
        warmdown_iters = round(config.warmdown_ratio * num_iterations)
        if it < warmup_iters:
            return (it + 1) / warmup_iters
        if it <= num_iterations - warmdown_iters:
            return 1.0
        progress = (num_iterations - it) / warmdown_iters
        return progress * 1.0 + (1 - progress) * config.final_lr_frac

    # ----------------------------------------------------------------------------------------------
    # Training loop: one extra pass (last_step) runs the final evaluation and save and then stops
    if device_type == "cuda":  # the peak of training, not of start-up (the whole model before FSDP shards it)
        torch.cuda.reset_peak_memory_stats(device)
    loop_state = resume_meta.get("loop_state", {})
    min_val_bpb = loop_state.get("min_val_bpb", float("inf"))
    smooth_train_loss = loop_state.get("smooth_train_loss", 0.0)
    total_training_time = loop_state.get("total_training_time", 0.0)
    val_bpb = resume_meta.get("val_bpb")
    mfu = debiased_smooth_loss = None  # None: no step ran (a run resumed from its last step)
    step = max(0, resume_step)
    dt = 0.0  # the last step's time, for the deadline

    # where each step's time goes (bench/nanochat/steptimer.py): device events on CUDA, wall clock on CPU
    timer = steptimer.StepTimer(device_type) if config.breakdown else steptimer.NullTimer()
    steptimer.use(timer)
    steady_splits: list[dict] = []
    stopped_early = False
    guard = DivergenceGuard(floor=math.log(vocab_size))  # a uniform guess's loss: the start of a fresh run
    while True:
        stopped_early = step < num_iterations and stagerun.out_of_time(session, config.deadline, dt)
        last_step = step == num_iterations or stopped_early

        # one rank may keep the others waiting here (samples, checkpoints): a longer bound, never none
        with watchdog.relaxed():
            # validation bpb (-1 disables it, final evaluation included)
            if config.eval_every > 0 and token_bytes is not None and not stopped_early and \
                    (last_step or step % config.eval_every == 0):
                eval_steps, line = validation_passes(config.eval_tokens, world_tokens_per_fwdbwd)
                print0(line)
                val_bpb = stagerun.validate_bpb(session, record, model, build_val_loader(), eval_steps, token_bytes,
                                                step)
                min_val_bpb = min(min_val_bpb, val_bpb)

            # greedy samples from a few fixed prompts (rank 0, uncompiled model; every rank under fsdp)
            sampler = master_process or strategy.fsdp  # a sharded model computes on every rank
            if sampler and tokenizer is not None and config.sample_every > 0 and not stopped_early and \
                    (last_step or (step > 0 and step % config.sample_every == 0)):
                # upstream's Engine lines: <|bos|> and the prompt, cut before a sampled BOS or assistant_end
                from bench.nanochat.base_loss import print_samples

                orig_model.eval()
                print_samples(orig_model, tokenizer, autocast_ctx)
                orig_model.train()

            # checkpoint: every save_every steps and at the end when asked, and always when stopped by the deadline
            # (never the step resumed from; FSDP-sharded models are not saved yet, see TrainConfig.validate)
            asked = config.save_every > 0 and step > 0 and (last_step or step % config.save_every == 0)
            if (asked or (stopped_early and not strategy.fsdp)) and step != resume_step:
                meta = {"step": step, "val_bpb": val_bpb, "model_config": asdict(model_config),
                        "user_config": asdict(config), "device_batch_size": B, "max_seq_len": T,
                        "world_size": ddp_world_size, "dataloader_state_dict": dict(train_state),
                        "loop_state": {"min_val_bpb": min_val_bpb, "smooth_train_loss": smooth_train_loss,
                                       "total_training_time": total_training_time}}
                save_checkpoint(checkpoint_dir, step, orig_model.state_dict(),
                                [opt.state_dict() for opt in optimizers], meta, rank=ddp_rank)
                print0(f"Saved checkpoint of step {step} to {checkpoint_dir}")
                record.update(checkpoint={"step": step, "dir": str(checkpoint_dir)})  # what a resubmission resumes

        if last_step:
            break

        # ------------------------------------------------------------------------------------------
        # one training step, timed between device synchronisations
        with maybe_profile(master_process and step == config.profile_step, record.run_dir, step, device_type):
            session.synchronize()
            timer.begin()
            t0 = time.time()
            with timer.section("fwd_bwd"):
                for _ in range(grad_accum):
                    with autocast_ctx:
                        loss = model(x, y)
                    train_loss = loss.detach()  # for logging
                    loss = loss / grad_accum  # each .backward() adds: normalise to the mean over micro-steps
                    loss.backward()
                    with timer.section("data"):
                        x, y = next(train_loader)  # prefetch while the device runs the backward pass
            grad_norm = None
            if config.grad_clip > 0.0:  # zero2: each rank's local gradients (upstream); fsdp: the averaged ones
                grad_norm = clip_grad_norm_(orig_model.parameters(), config.grad_clip)
            lrm = get_lr_multiplier(step)
            stagerun.optimizer_step(model, optimizers, lrm, timer, muon_optimizer, stagerun.muon_momentum(step))
            session.synchronize()
            dt = time.time() - t0
        split = timer.split(dt * 1000)
        # ------------------------------------------------------------------------------------------

        # logging: the bias-corrected EMA of the train loss, throughput, MFU
        ema_beta = 0.9
        loss_value = train_loss.item()
        guard.check(step, loss_value)  # a diverged run ends here, before its value reaches a line or an event
        smooth_train_loss = ema_beta * smooth_train_loss + (1 - ema_beta) * loss_value
        debiased_smooth_loss = smooth_train_loss / (1 - ema_beta ** (step + 1))
        tok_per_sec = config.total_batch_size / dt
        mfu = mfu_percent(num_flops_per_token, tok_per_sec, ddp_world_size, peak_flops_per_gpu)
        if step > WARMUP_STEPS:
            total_training_time += dt
            steady_splits.append({"step_ms": dt * 1000, **split})
        stagerun.log_step(session, record, step, num_iterations, debiased_smooth_loss, lrm, dt, tok_per_sec, mfu,
                          total_training_time, grad_norm, **split)
        step += 1

    # ----------------------------------------------------------------------------------------------
    min_val = min_val_bpb if math.isfinite(min_val_bpb) else None
    peak_mem_mib = stagerun.end(session, record, total_training_time, min_val)
    step_ms = {k: statistics.median(s[k] for s in steady_splits) for k in steady_splits[0]} if steady_splits else {}
    ranks = gather_rank_figures(step_ms, ddp_rank, ddp)
    record.write_breakdown(ranks, network_facts(backend, nccl_log.own_facts(), topology()[0]))
    summary = {"peak_mem_mib": peak_mem_mib, "total_training_time_s": total_training_time, "min_val_bpb": min_val,
               "final_val_bpb": val_bpb, "final_mfu": mfu, "final_loss": debiased_smooth_loss}
    if stopped_early:
        message = (f"stopped at step {step} of {num_iterations} to end before the time limit (--deadline); "
                   f"checkpoint of step {step} in {checkpoint_dir}: continue with --resume_from_step={step}"
                   + (f" --model_tag={checkpoint_dir.relative_to(phase_dir('base'))}"
                      if not config.model_tag else ""))
        return stagerun.stopped(session, summary, message)
    return summary, "ok", None


def read_checkpoint(path: Path, load, meta_path: Path | None = None):
    """load(), with a damaged or incomplete checkpoint file (a truncated shard, a torn meta file) as one
    clear error naming it instead of torch's traceback."""
    try:
        return load()
    except BenchError:
        raise
    except (RuntimeError, EOFError, ValueError, KeyError, pickle.UnpicklingError) as e:
        where = meta_path if meta_path is not None and isinstance(e, json.JSONDecodeError) else path
        raise ConfigError(f"{where} cannot be read as a checkpoint ({first_sentence(e)}): the file is damaged or "
                          f"incomplete; resume from another saved step or start fresh (leave out "
                          f"--resume_from_step)") from None


def first_sentence(e: BaseException, limit: int = 160) -> str:
    """The start of an exception's message, cut at a sentence's end (never mid-sentence)."""
    text = first_line(e)
    if len(text) <= limit:
        return text
    end = text.rfind(". ", 0, limit)
    return text[:end + 1] if end > 0 else text[:limit].rsplit(" ", 1)[0] + " …"


def gather_rank_figures(step_ms: dict, rank: int, ddp: bool) -> list[dict]:
    """Every rank's steady step time and its parts, with its host, for finding stragglers (one collective,
    at the end)."""
    mine = {"rank": rank, "host": socket.gethostname(),
            **{k: round(v, 3) for k, v in step_ms.items() if k in ("step_ms", "comm_ms", "data_ms")}}
    if not ddp:
        return [mine]
    everyone: list = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(everyone, mine)
    return everyone


def data_identity_of(config: TrainConfig) -> dict:
    """run.json's data section: the shards' origin and the tokenizer's hash (for .bin files, their meta.json)."""
    if config.data_bin_dir:
        from bench.nanochat.tokbin import read_meta

        meta = read_meta(config.data_bin_dir) or {}
        return {"origin": meta.get("origin"), "tokenizer_sha256": meta.get("tokenizer_sha256")}
    from bench.nanochat.data_origin import data_identity

    return data_identity()


def validation_passes(eval_tokens: int, world_tokens: int) -> tuple[int, str]:
    """The validation's passes over all ranks (at least one: upstream's 0 passes gave an infinite bpb) and
    its log line, with the tokens the passes read, which are not --eval_tokens where it does not divide."""
    passes = max(1, eval_tokens // world_tokens)
    read = f"{passes * world_tokens:,} tokens"
    if passes * world_tokens != eval_tokens:
        read += f" (--eval_tokens={eval_tokens:,} in whole passes of {world_tokens:,})"
    return passes, f"Validation: {passes} pass(es) over {read}"


def default_model_tag(config: TrainConfig, record: RunRecord) -> str:
    """Where checkpoints go without --model_tag: nanochat's d<depth>, or the run's own <sweep>-<hash>/<run> when it
    has a run directory, so runs never overwrite each other's checkpoints, also those of a sweep folder of the same
    name elsewhere. The hash is of the path every rank is given (not resolved: nodes may see other links)."""
    if record.run_dir:
        run_dir = Path(os.path.abspath(record.run_dir))
        return f"{folder_tag(run_dir.parent.name, run_dir.parent)}/{run_dir.name}"
    return f"d{config.depth}"


def main(argv: list[str] | None = None) -> int:
    return stagerun.main(train, parse_args, argv)

if __name__ == "__main__":
    exit_now(main())  # without Python's teardown of torch (bench/processes.py)
