"""The base_loss stage (bench/nanochat/base_loss.py) under torchrun: train and val bpb of a base checkpoint.

Its plan: split_tokens must be a multiple of device_batch_size x sequence length x ranks (upstream asserts it;
20 x 524,288 is 20 batches at 8 ranks of 32 x 2048), so at each rank count the planner rounds it to the nearest
multiple (at least one batch) and says so in the point's note; K is chosen so that the validation split serves
every rank, as for training. The sequence length is the checkpoint's: the planner takes --max_seq_len when
given, else the recipe's 2048, and the stage refuses a split_tokens that does not divide at run time.
Its time: both splits' tokens forward only (a third of training's FLOPs per token) through the flow's model.
"""

from bench import contract
from bench.workloads.base import EVALUATION, FORWARD_SHARE, PointContext, PointPlan, Settings
from bench.workloads.stage import TorchrunStage, argv_of, model_estimate

RUN_WORKLOAD = "nanochat-base-loss"
RECIPE_SEQ_LEN = 2048


def round_split_tokens(split_tokens: int, per_step: int) -> tuple[int, str]:
    """(the nearest multiple of per_step, at least one; a note when it changed)."""
    steps = max(1, round(split_tokens / per_step))
    rounded = steps * per_step
    if rounded == split_tokens:
        return rounded, ""
    return rounded, (f"split_tokens {split_tokens:,} -> {rounded:,} ({steps} x {per_step:,}, "
                     f"a multiple of B x T x ranks)")


class BaseLoss(TorchrunStage):
    name = "base_loss"
    summary = "train and val bits per byte of a base checkpoint"
    run_workload = RUN_WORKLOAD
    module = "bench.nanochat.base_loss"
    parser = "bench.nanochat.base_loss_config:parse"
    kind = EVALUATION
    reads_checkpoint = True  # the base checkpoint
    PLAN_COLUMNS = (("device_bs", "device_batch_size", "{}"), ("split_tokens", "split_tokens", "{:,}"),
                    ("steps", "eval_steps", "{}"))
    headers = {"problems_per_sec": "sequences/s", "eval_tok_per_sec": "tok/s (forward)"}  # its scores count rows

    def reads_val_files(self, settings: Settings) -> bool:
        return True

    def plan(self, settings: Settings, point: PointContext) -> PointPlan:
        config, ranks = settings.config, point.ranks
        seq = config.max_seq_len if config.max_seq_len > 0 else RECIPE_SEQ_LEN
        per_step = config.device_batch_size * seq * ranks
        split_tokens, note = round_split_tokens(config.split_tokens, per_step)
        k = point.data.val_files_k(ranks) if point.data is not None else None
        if point.data is not None and k is None:
            return PointPlan(reason=f"no validation split serves {ranks} ranks: {point.data.source} have "
                                    f"{sum(point.data.row_groups)} row group(s) in all; download more shards")
        from bench.nanochat.base_loss_config import SPLITS

        est, assumed = model_estimate(point, config, len(SPLITS) * split_tokens, config.device_batch_size,
                                      f"{len(SPLITS)} splits x {split_tokens:,} tokens forward", FORWARD_SHARE)
        flags = {**settings.train, "split_tokens": split_tokens}
        env = ((contract.ENV_VAL_FILES_K, str(k)),) if k is not None else ()
        # the download must hold the train split's split_tokens, as it holds a training run's tokens
        return PointPlan(train_argv=tuple(argv_of(flags)), env=env, val_files_k=k, tokens=split_tokens,
                         note="; ".join(filter(None, [note, assumed])), est_hours=est,
                         columns=(("device_batch_size", config.device_batch_size), ("split_tokens", split_tokens),
                                  ("eval_steps", split_tokens // per_step)))

    def describe(self, sweep) -> list[str]:
        from bench.workloads.nanochat import data_line

        return [*super().describe(sweep), "validation files: " + data_line(sweep, "the train split's split_tokens")]

    def read_events(self, events: list[dict], config: dict) -> list[dict]:
        """Before its score events carried `tokens` (contract 2.3 and before), each split's score evaluated
        config.split_tokens tokens."""
        from bench.analysis.figures import finite  # standard library only, as this module

        split = config.get("split_tokens")
        if not isinstance(split, int) or isinstance(split, bool):
            return events
        return [{**ev, "tokens": split} if ev["event"] == "score" and ev.get("tokens") is None
                and finite(ev.get("problems")) is not None else ev for ev in events]


WORKLOAD = BaseLoss()
