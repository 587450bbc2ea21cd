"""The chat_sft stage: bench/nanochat/chat_sft.py under torchrun, one process per GPU (or CPU rank).

How it plans a sweep point: an optimizer step takes target_examples_per_step conversations over all ranks,
device_batch_size per micro-batch per rank, so the target must be a multiple of device batch x ranks
(upstream asserts it; at 8 ranks its 32 are 4 per rank, no accumulation):
- weak scaling (the default): each rank keeps its work, device batch conversations a step, no accumulation,
  so the target grows with the ranks (device batch x ranks: 32 at 8 ranks, 256 at 64) and the horizon of
  one epoch shrinks with it;
- strong: the target stays (32 by default) and the device batch is lowered to the largest that divides it,
  with the accumulation that makes it up; a rank count that no device batch serves (32 examples over 64 ranks)
  is refused, naming the targets that would work.
A multi-node point needs $NANOCHAT_BASE_DIR on a filesystem all nodes share (bench/workloads/sharedfs.py): every
rank reads the checkpoint of the stage before. The horizon: --num_iterations, else one epoch of the mixture,
counted from the real data's rows (22,439 at upstream 5c93a56; a generated stand-in has fewer, and the run
counts its own). Its time: num_iterations - 1 updates (the last pass only evaluates) of examples-per-step
conversations, each at most MAX_TOKENS - 1 positions (the rows are padded to the longest of a micro-batch, so
this upper bound is what the model may run), through the flow's model (evaluations not counted).
"""

from bench.workloads.base import PointContext, PointPlan, Settings
from bench.workloads.stage import ChatStage, argv_of, model_estimate

RUN_WORKLOAD = "nanochat-sft"
SFT_TRAIN_ROWS = 22_439  # upstream's SFT mixture on the real data (speedrun report of 2025-11-11)


class ChatSFT(ChatStage):
    name = "chat_sft"
    summary = "SFT from a mid-training checkpoint (or a base one: --source=base)"
    run_workload = RUN_WORKLOAD
    module = "bench.nanochat.chat_sft"
    parser = "bench.nanochat.sftconfig:parse_sft_args"
    deadline_flag = "--deadline="
    weak_scaled = ("target_examples_per_step", "device batch x ranks")
    PLAN_COLUMNS = (("device_bs", "device_batch_size", "{}"), ("grad_accum", "grad_accum", "{}"),
                    ("examples/step", "target_examples_per_step", "{}"), ("steps", "steps", "{}"))
    # tok/s counts the supervised tokens (upstream's num_tokens); MFU every position run, padding included
    step_tokens = "supervised"
    passes_without_step = 1  # num_iterations - 1 updates: the last pass only evaluates
    headers = {"tok_per_sec": "supervised tok/s", "tok_per_sec_per_gpu": "supervised tok/s/{per}",
               "mfu": "MFU % (all positions)"}

    def check(self, argv: list[str], nproc: int) -> None:
        from bench.nanochat.sftconfig import sft_grad_accum

        config = self.parse(argv)
        sft_grad_accum(config.target_examples_per_step, config.device_batch_size, nproc)

    def plan(self, settings: Settings, point: PointContext) -> PointPlan:
        from bench.nanochat.sftconfig import batch_sizes_that_work

        base, ranks = settings.config, point.ranks
        if point.scaling == "weak":
            dbs, target, note = base.device_batch_size, base.device_batch_size * ranks, ""
        else:
            target = base.target_examples_per_step
            sizes = batch_sizes_that_work(target, base.device_batch_size, ranks)
            if not sizes:
                return PointPlan(reason=unmet_target(target, base.device_batch_size, ranks))
            dbs = sizes[0]
            note = "" if dbs == base.device_batch_size else \
                f"device batch lowered from {base.device_batch_size} to {dbs}"
        accum = target // (dbs * ranks)
        steps = base.num_iterations if base.num_iterations > 0 else SFT_TRAIN_ROWS // target * base.num_epochs
        if base.num_iterations <= 0:
            note = "; ".join(filter(None, [note, f"steps from the real data's {SFT_TRAIN_ROWS:,} rows"]))
        from bench.nanochat.chat_format import MAX_TOKENS

        positions = MAX_TOKENS - 1  # a conversation's inputs at most: the rendering cuts it at MAX_TOKENS
        est, assumed = model_estimate(point, base, (steps - 1) * target * positions, dbs,
                                      f"{steps - 1} updates x {target} conversations x at most {positions:,} positions")
        flags = {**settings.train, "device_batch_size": dbs, "target_examples_per_step": target}
        return PointPlan(train_argv=tuple(argv_of(flags)),
                         columns=(("device_batch_size", dbs), ("grad_accum", accum),
                                  ("target_examples_per_step", target), ("num_iterations", steps),
                                  # the updates it makes, as its estimate and status count them
                                  ("steps", steps - self.passes_without_step)),
                         manifest=(("grad_accum", accum),), note="; ".join(filter(None, [note, assumed])),
                         est_hours=est)

    def describe(self, sweep) -> list[str]:
        grows = "examples per step grow with the ranks" if sweep.scaling == "weak" else "examples per step fixed"
        return [f"workload: chat_sft source={sweep.settings.config.source} scaling={sweep.scaling} ({grows})"]


def unmet_target(target: int, device_batch_size: int, ranks: int) -> str:
    """Why `ranks` cannot share `target` examples a step, and the targets that would work."""
    works = [m * ranks for m in (1, 2, 4)] if target < ranks else \
        [t for t in (target // ranks * ranks, (target // ranks + 1) * ranks) if t > 0]
    return (f"target_examples_per_step {target} is not a multiple of device batch x {ranks} ranks for any device "
            f"batch <= {device_batch_size}; targets that work: {', '.join(map(str, works))} "
            f"(--train-arg target_examples_per_step=N), or --scaling weak")


WORKLOAD = ChatSFT()
