"""Mid-training: the base model on conversations (mirrors karpathy/nanochat scripts/mid_train.py at 5c93a56).

Run as:
  python -m bench.nanochat.mid_train                                              # one process
  torchrun --standalone --nproc_per_node=8 -m bench.nanochat.mid_train -- --device_batch_size=16
  python -m bench.nanochat.mid_train --device_type=cpu --max_seq_len=128 --device_batch_size=2 \
      --total_batch_size=256 --num_iterations=20 --eval_tokens=512                 # tiny, on a CPU

It loads the base checkpoint (--model_tag, --step), builds fresh optimizers at the base LRs x init_lr_frac, and
trains on the mid mixture (bench/nanochat/tasks/mixtures.py) packed into rows by bench/nanochat/midloader.py
until the first rank's data wraps (or --num_iterations batches): flat LR, then a linear warmdown over the last
20 % of the data's progress; Muon's momentum ramps 0.85 -> 0.95 over 300 steps. Validation bpb at step 0,
every --eval_every steps and the last; the checkpoint goes to mid_checkpoints/d<depth> (or --model_tag).
Output: nanochat's lines on rank 0; with NANOCHAT_BENCH_RUN_DIR, run.json and metrics.jsonl.
The settings (MidConfig) import no torch: the planner parses them on login nodes.
"""

import os

os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")  # before CUDA initialises

import math  # noqa: E402
import time
from dataclasses import asdict, dataclass, replace

from bench.contract import field as _f
from bench.errors import ConfigError
from bench.logline import format_progress_step_line
from bench.metrics import WARMUP_STEPS, mfu_percent
from bench.nanochat.config import (LEARNING_RATES, RunSettings, check_model_tag, check_weight_decay, grad_accum_steps,
                                   parse_config)
from bench.nanochat.common import print0
from bench.processes import exit_now
from bench.runside.guard import DivergenceGuard
from bench.runside.runrecord import RunRecord


@dataclass
class MidConfig(RunSettings):
    # input and output
    model_tag: str = _f("", "base checkpoint to load, and the mid checkpoint's folder (default: the largest "
                            "d<depth> to load, saved as d<depth>)")
    step: int = _f(-1, "base checkpoint step to load (-1 = the last saved)")
    dtype: str = _f("bfloat16", "bfloat16 | float32, accepted for compatibility: upstream's mid_train has the flag "
                                "but autocasts to bfloat16 on CUDA whatever it says, and so does this one")
    # horizon and batch
    num_iterations: int = _f(-1, "stop after this many batches (N-1 optimizer steps, as upstream; -1 = one epoch "
                                 "of the mixture)")
    max_seq_len: int = _f(2048, "context length T in tokens")
    device_batch_size: int = _f(32, "rows per micro-batch per rank (B)")
    total_batch_size: int = _f(524288, "tokens per optimizer step over all ranks (a multiple of B x T x ranks)")
    # optimisation
    unembedding_lr: float = _f(0.004, "AdamW lr of lm_head, x (dim/768)^-0.5")
    embedding_lr: float = _f(0.2, "AdamW lr of the embedding, x (dim/768)^-0.5")
    matrix_lr: float = _f(0.02, "Muon lr of the block matrices")
    init_lr_frac: float = _f(1.0, "the initial LR as this fraction of the base LRs")
    weight_decay: float = _f(0.0, "AdamW weight decay")
    # evaluation and output
    eval_every: int = _f(150, "validation bpb every this many steps, and at the last (0 or -1 = off)")
    eval_tokens: int = _f(20 * 524288, "tokens per validation, over all ranks")
    dry_run: int = _f(0, "1 = write no checkpoint")

    def validate(self) -> None:
        super().validate()
        check_weight_decay(self.weight_decay)
        self.check_rates(*LEARNING_RATES, "init_lr_frac")
        self.check_positive("max_seq_len", "device_batch_size", "total_batch_size")
        if self.step < -1:
            raise ConfigError(f"--step={self.step}: give a saved step >= 0, or -1 for the last saved")
        if self.num_iterations < -1:
            raise ConfigError(f"--num_iterations={self.num_iterations}: give a count >= 2, or -1 for one epoch")
        if self.num_iterations in (0, 1):  # one batch is the prefetch: no step would be trained
            raise ConfigError(f"--num_iterations={self.num_iterations}: counts batches, the first one included, "
                              "so give at least 2 (1 optimizer step), or -1 for one epoch")
        if self.dtype not in ("bfloat16", "float32"):
            raise ConfigError(f"--dtype={self.dtype!r}: valid values are bfloat16, float32 (either trains in bfloat16, "
                              "as upstream's mid_train)")
        if self.eval_every < -1:  # as train and chat_sft: -1 is the documented off, below it a typo
            raise ConfigError(f"--eval_every={self.eval_every}: give a count >= 0, or -1 to turn validation off")
        if self.eval_tokens < 0:
            raise ConfigError(f"--eval_tokens={self.eval_tokens}: must be >= 0")
        if self.dry_run not in (0, 1):
            raise ConfigError(f"--dry_run={self.dry_run}: give 0 (save the checkpoint) or 1 (save nothing)")
        check_model_tag(self.model_tag, "--model_tag", "base_checkpoints/ and mid_checkpoints/")


def parse_args(argv: list[str]) -> MidConfig:
    return parse_config(MidConfig, argv, "bench.nanochat.mid_train",
                        "nanochat mid-training (flags as upstream mid_train: --key=value)")


def mid_train(config: MidConfig, record: RunRecord) -> tuple[dict, str, str | None]:
    import torch

    from bench.nanochat import stagerun, steptimer
    from bench.nanochat.checkpoint import check_writable, later_steps_note, load_model, phase_dir, save_checkpoint
    from bench.nanochat.midloader import MidLoader
    from bench.nanochat.tasks import mixtures
    from bench.nanochat.tokenizer import get_token_bytes, get_tokenizer

    session = stagerun.begin(config, record, "nanochat-bench: mid-training (nanochat-faithful)")
    ddp, rank, world_size, device = session.ddp, session.rank, session.world_size, session.device
    B, T = config.device_batch_size, config.max_seq_len
    grad_accum = grad_accum_steps(config.total_batch_size, B, T, world_size)  # upstream's assert, said clearly

    # ----------------------------------------------------------------------------------------------
    # The base model and its tokenizer
    tokenizer = get_tokenizer()
    token_bytes = get_token_bytes(device)
    model, meta = load_model("base", device, config.model_tag or None, config.step if config.step >= 0 else None)
    if model.config.vocab_size != tokenizer.get_vocab_size():
        raise ConfigError(f"the base checkpoint in {meta['checkpoint_dir']} has a vocabulary of "
                          f"{model.config.vocab_size:,} tokens, the tokenizer of $NANOCHAT_BASE_DIR "
                          f"{tokenizer.get_vocab_size():,}: train both with the same tokenizer")
    if T > model.cos.size(1):
        raise ConfigError(f"--max_seq_len={T} is longer than the base model's rotary cache ({model.cos.size(1)} "
                          f"positions, 10 x its sequence length {model.config.sequence_len}); give at most that")
    print0(f"Loaded the base model of step {meta['step']} from {meta['checkpoint_dir']}")
    checkpoint_dir = phase_dir("mid") / (config.model_tag or f"d{model.config.n_layer}")
    if not config.dry_run:  # its one save comes after every step: found out now
        check_writable(checkpoint_dir, "pass --dry_run=1 to save nothing")
    pretrain_batch_size = meta.get("device_batch_size")
    if pretrain_batch_size is not None and B > pretrain_batch_size:
        print0(f"FOOTGUN WARNING: base model training used device_batch_size {pretrain_batch_size}, did you pass "
               f"in a good --device_batch_size to this script?")
    orig_model = model
    model = torch.compile(model, dynamic=False) if session.device_type == "cuda" else model
    num_params, num_flops_per_token = orig_model.num_params(), orig_model.estimate_flops()
    print0(f"Tokens / micro-batch / rank: {B} x {T} = {B * T:,}")
    print0(f"Tokens / micro-batch: {B * T * world_size:,}")
    print0(f"Total batch size {config.total_batch_size:,} => gradient accumulation steps: {grad_accum}")
    record.emit("model_ready", num_params=num_params, flops_per_token=num_flops_per_token)
    # the steps of --num_iterations batches (the first is the prefetch) before the first, for status's `step N of M`;
    # an epoch of the mixture is known only at its end
    horizon = {"num_iterations": config.num_iterations - 1} if config.num_iterations > 0 else {}
    record.update(num_params=num_params, flops_per_token=num_flops_per_token, grad_accum=grad_accum,
                  vocabulary={"vocab_size": tokenizer.get_vocab_size(), "source": "tokenizer", "bpb": True},
                  data=chat_data_identity() if session.master else None, **horizon)

    # ----------------------------------------------------------------------------------------------
    # Fresh optimizers at the base LRs x init_lr_frac (Muon for the matrices, AdamW for the rest)
    optimizers = orig_model.setup_optimizers(unembedding_lr=config.unembedding_lr, embedding_lr=config.embedding_lr,
                                             matrix_lr=config.matrix_lr, weight_decay=config.weight_decay, log=print0)
    adamw_optimizer, muon_optimizer = optimizers
    stagerun.scale_lrs(optimizers, config.init_lr_frac)

    # ----------------------------------------------------------------------------------------------
    # Data: the mid mixture, packed; a fresh val loader per evaluation sees the same rows
    train_dataset, val_dataset = mixtures.mid_train(), mixtures.mid_val()
    print0(f"Mid mixture: {len(train_dataset):,} train and {len(val_dataset):,} val conversations")
    train_loader = MidLoader(train_dataset, tokenizer, B, T, rank, world_size, device,
                             num_iterations=config.num_iterations)
    x, y = next(train_loader)  # the first batch; later ones are fetched while the device works
    record.emit("data_ready")

    # ----------------------------------------------------------------------------------------------
    # Schedule: of the data's progress (each rank's own); Muon's momentum, of the step, is stagerun.muon_momentum
    def get_lr_multiplier(progress: float) -> float:
        return 1 if progress < 0.8 else 1 - (progress - 0.8) / 0.2  # flat, then linear to 0 over the last 20 %

    # ----------------------------------------------------------------------------------------------
    # Training loop: the pass after the last step evaluates, saves, then stops
    if session.device_type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    min_val_bpb, val_bpb = float("inf"), None
    smooth_train_loss, ema_beta = 0.0, 0.9
    total_training_time, progress, step, dt = 0.0, 0.0, 0, 0.0
    mfu = debiased_smooth_loss = None
    guard = DivergenceGuard(floor=math.log(orig_model.config.vocab_size))
    timer = steptimer.StepTimer(session.device_type)  # the step split: fwd+bwd, exposed comm, optimizer, data
    steptimer.use(timer)
    while True:
        # every rank stops at the first rank's wrap (a MAX over ranks), so none waits in a collective alone
        last_step = train_loader.last_step
        if ddp:
            flag = torch.tensor(int(last_step), dtype=torch.int32, device=device)
            torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
            last_step = bool(flag.item())
        stopped_early = not last_step and stagerun.out_of_time(session, config.deadline, dt)
        last_step = last_step or stopped_early

        with session.watchdog.relaxed():  # validation and the save may keep ranks apart a while
            if config.eval_every > 0 and not stopped_early and (last_step or step % config.eval_every == 0):
                # upstream's count; at least one batch (upstream's 0 would print an infinite bpb)
                eval_steps = max(1, config.eval_tokens // (B * T * world_size))
                val_loader = MidLoader(val_dataset, tokenizer, B, T, rank, world_size, device, train=False)
                val_bpb = stagerun.validate_bpb(session, record, model, val_loader, eval_steps, token_bytes, step)
                min_val_bpb = min(min_val_bpb, val_bpb)

            if last_step and not config.dry_run:
                meta_out = {"step": step, "val_bpb": val_bpb,
                            "model_config": asdict(replace(orig_model.config, sequence_len=T)),
                            "user_config": asdict(config), "device_batch_size": B, "max_seq_len": T,
                            "world_size": world_size}
                # rank 0 makes the folder, then every rank writes its optimizer shard (no race: the barrier)
                save_checkpoint(checkpoint_dir, step, orig_model.state_dict(),
                                [opt.state_dict() for opt in optimizers], meta_out, rank=rank)
                print0(f"Saved checkpoint of step {step} to {checkpoint_dir}")
                if note := later_steps_note(checkpoint_dir, step):
                    print0(note)
                record.update(checkpoint={"step": step, "dir": str(checkpoint_dir)})

        if last_step:
            break

        # ------------------------------------------------------------------------------------------
        # one training step, timed between device synchronisations
        session.synchronize()
        timer.begin()
        t0 = time.time()
        with timer.section("fwd_bwd"):
            for _ in range(grad_accum):
                with session.autocast():
                    loss = model(x, y)
                train_loss = loss.detach()  # for logging
                loss = loss / grad_accum  # each .backward() adds: normalise to the mean over micro-steps
                loss.backward()
                with timer.section("data"):
                    x, y = next(train_loader)  # prefetch while the device runs the backward pass
                progress = max(progress, train_loader.progress)  # never backwards (the cursor wraps)
        lrm = get_lr_multiplier(progress)
        stagerun.optimizer_step(model, optimizers, lrm, timer, muon_optimizer, stagerun.muon_momentum(step))
        session.synchronize()
        dt = time.time() - t0
        split = timer.split(dt * 1000)
        # ------------------------------------------------------------------------------------------

        step += 1
        loss_value = train_loss.item()
        guard.check(step, loss_value)  # a diverged run ends here, before its value reaches a line or an event
        smooth_train_loss = ema_beta * smooth_train_loss + (1 - ema_beta) * loss_value
        debiased_smooth_loss = smooth_train_loss / (1 - ema_beta ** (step + 1))
        tok_per_sec = config.total_batch_size / dt
        mfu = mfu_percent(num_flops_per_token, tok_per_sec, world_size, session.peak_flops)
        if step > WARMUP_STEPS:
            total_training_time += dt  # only the steps after the first ten
        line = format_progress_step_line(step, 100 * progress, debiased_smooth_loss, lrm, dt, tok_per_sec,
                                         mfu, total_training_time)
        stagerun.log_step(session, record, step, config.num_iterations, debiased_smooth_loss, lrm, dt, tok_per_sec,
                          mfu, total_training_time, line=line, **split)

    # ----------------------------------------------------------------------------------------------
    min_val = min_val_bpb if math.isfinite(min_val_bpb) else None
    peak_mem_mib = stagerun.end(session, record, total_training_time, min_val)
    if val_bpb is not None:
        record.emit("score", name="val_bpb", value=val_bpb)
        record.update(scores={"val_bpb": val_bpb})
    if not stopped_early:  # the steps until the data ended (or the batches given); a stopped run never saw that end
        record.update(num_iterations=step)
    summary = {"peak_mem_mib": peak_mem_mib, "total_training_time_s": total_training_time, "min_val_bpb": min_val,
               "final_val_bpb": val_bpb, "final_mfu": mfu, "final_loss": debiased_smooth_loss}
    if stopped_early:
        message = (f"stopped at step {step} to end before the time limit (--deadline); the checkpoint of step "
                   f"{step} is in {checkpoint_dir}" if not config.dry_run else
                   f"stopped at step {step} to end before the time limit (--deadline)")
        return stagerun.stopped(session, summary, message)
    return summary, "ok", None


def chat_data_identity() -> dict:
    """run.json's data section for a chat stage: the staged chat files' origin (generated stand-ins or
    downloaded) and the tokenizer's hash, so runs on the stand-ins are never compared with real ones."""
    from bench.nanochat import chatdata
    from bench.nanochat.data_origin import DOWNLOADED, GENERATED, combined_origin, tokenizer_sha256
    from bench.nanochat.tokenizer import tokenizer_dir

    found = [GENERATED if chatdata.is_generated(f) else DOWNLOADED
             for s in chatdata.HUB_SPLITS for f in chatdata.split_files(s)]
    return {"origin": combined_origin(found), "tokenizer_sha256": tokenizer_sha256(tokenizer_dir())}


def main(argv: list[str] | None = None) -> int:
    from bench.nanochat import stagerun

    return stagerun.main(mid_train, parse_args, argv)


if __name__ == "__main__":
    exit_now(main())  # without Python's teardown of torch (bench/processes.py)
