"""The nanochat workload: bench/nanochat/train.py under torchrun, one process per GPU (or CPU rank).

How it plans a sweep point (README, "Under Slurm"):
- weak scaling (the default): each rank keeps its work, device batch x sequence, with no accumulation,
  so total_batch_size = device batch x sequence x ranks grows with the ranks;
- strong: total_batch_size stays fixed (524,288 by default) and gradient accumulation makes up the
  difference (bench.nanochat.config.fit_batch lowers the device batch where it must);
- K (NANOCHAT_VAL_FILES_K): the smallest number of last shards whose row groups serve every rank;
- the horizon: SWEEP_NUM_ITERATIONS steps unless told otherwise (-1: the recipe's own, 20 tokens per
  parameter, 21,400 steps at d20), and the wall time of those steps at the assumed MFU.
Trainer flags keep nanochat's names and defaults (bench.nanochat.config.TrainConfig).
"""

from dataclasses import replace
from pathlib import Path

from bench import contract, paths
from bench.errors import DataError
from bench.nanochat.tokenizer import DEFAULT_VOCAB_SIZE
from bench.contract import WORKLOAD as NANOCHAT_WORKLOAD
from bench.workloads.base import ModelShape, PointContext, PointPlan, Settings
from bench.workloads.stage import TorchrunStage, argv_of

VOCAB_SIZE = DEFAULT_VOCAB_SIZE  # the recipe's tokenizer, for estimates made before any tokenizer is read
SWEEP_NUM_ITERATIONS = 200  # long enough for a steady state after warm-up and compile
TRAIN_FLAGS_ALWAYS = {"core_metric_every": -1, "sample_every": -1}  # not part of a throughput benchmark


# Beyond this many ranks a K left to the trainer's default (1) is a gamble: one validation shard of FineWeb-Edu
# serves as many ranks as it has row groups, so a point whose data shape is unknown is refused, not guessed.
UNPLANNED_K_MAX_RANKS = 32


def fit_device_memory(config, ranks: int, dbs: int, accum: int, point) -> tuple[int, int, str]:
    """(device batch, accumulation, note): the largest device batch that fits the GPU's memory (the memory
    model) and the site's observed limit at this rank count, keeping the tokens per rank and step
    (device batch x accumulation), so the model trains the same way; unchanged when it already fits."""
    from bench.nanochat.memory import GIB, MemoryPoint, estimate

    sequences = dbs * accum  # per rank per optimizer step
    cap, why = site_cap(point, dbs)
    if point.gpu_memory_bytes:
        def need(b: int) -> int:
            return estimate(MemoryPoint(config.depth, config.aspect_ratio, VOCAB_SIZE, config.max_seq_len, b, ranks,
                                        config.strategy, "cuda", True, sequences // b,
                                        fp8=getattr(config, "fp8", False),
                                        fused_kernels=getattr(config, "fused_kernels", ""))).need_bytes
        while cap > 1 and need(cap) > point.gpu_memory_bytes:
            cap, why = cap // 2, f"the memory model: {dbs} needs ~{need(dbs) / GIB:.0f} GiB of " \
                                 f"{point.gpu_memory_bytes / GIB:.0f} GiB"
    return lower_device_batch(dbs, accum, cap, why)


def site_cap(point, dbs: int) -> tuple[int, str]:
    """(the largest device batch, why) that the site's observed limit at this rank count allows: `dbs` and "" where
    it has none or `dbs` is within it."""
    if point.max_device_batch and point.max_device_batch < dbs:
        return point.max_device_batch, f"the site's limit at {point.ranks} ranks"
    return dbs, ""


def lower_device_batch(dbs: int, accum: int, cap: int, why: str) -> tuple[int, int, str]:
    """(device batch, accumulation, note): the largest device batch up to `cap` that divides the sequences per rank
    and step (device batch x accumulation), the accumulation making up the rest; unchanged within `cap`."""
    if cap >= dbs:
        return dbs, accum, ""
    sequences = dbs * accum
    new = max(b for b in range(1, cap + 1) if sequences % b == 0)
    was = f"{dbs} x accumulation {accum}" if accum > 1 else dbs  # both sides of the arrow are the same sequences
    return new, sequences // new, f"device batch {was} -> {new} x accumulation {sequences // new} ({why})"


def val_files_k(config, data, ranks: int) -> tuple[int | None, str]:
    """(K, "") for parquet data whose shape is known; (None, "") when it is not planned; (None, why)."""
    if config.data_bin_dir or data is None:
        return None, ""
    k = data.val_files_k(ranks)
    if k is None:
        return None, (f"no validation split serves {ranks} ranks: {data.source} have "
                      f"{sum(data.row_groups)} row group(s) in all, and both splits need one per rank; "
                      f"download more shards")
    return k, ""


class Nanochat(TorchrunStage):
    name = "nanochat"
    summary = "pre-training, bench/nanochat under torchrun"
    run_workload = NANOCHAT_WORKLOAD
    former_run_workloads = ("nanochat-base-train",)  # before one name was kept in the contract (results/h200-d20)
    # (table header, plan column, format)
    PLAN_COLUMNS = (("device_bs", "device_batch_size", "{}"), ("grad_accum", "grad_accum", "{}"),
                    ("total_batch", "total_batch_size", "{:,}"), ("steps", "num_iterations", "{}"))
    deadline_flag = "--deadline="
    resume_flag = "--resume_from_step="
    takes_depth = True
    module = "bench.nanochat.train"
    parser = "bench.nanochat.config:parse_args"
    weak_scaled = ("total_batch_size", "device batch x sequence x ranks")

    def check(self, argv: list[str], nproc: int) -> None:
        from bench.nanochat.config import force_flash_from_env, grad_accum_steps  # torch-free: no torch here

        config = self.parse(argv)
        force_flash_from_env()  # a word it cannot read, here before torchrun starts (each rank reads it again)
        grad_accum_steps(config.total_batch_size, config.device_batch_size, config.max_seq_len, nproc)
        if config.data_bin_dir and not (Path(config.data_bin_dir) / "train.bin").is_file():  # before torchrun
            raise DataError(f"--data_bin_dir={config.data_bin_dir}: no train.bin there; `nanochat-bench data bin` "
                            "writes one (default: $NANOCHAT_BASE_DIR/base_data_bin, ~/.cache/nanochat/base_data_bin)")
        super().check(argv, nproc)  # then NANOCHAT_VAL_FILES_K, unless --data_bin_dir (reads_val_files)

    def reads_val_files(self, settings: Settings) -> bool:
        return not settings.config.data_bin_dir  # a .bin directory holds its own validation split

    # -- planning -------------------------------------------------------------------------------------
    def settings(self, train: dict, scaling: str) -> Settings:
        self.refuse_weak_scaled(train, scaling)
        train = {"num_iterations": SWEEP_NUM_ITERATIONS, **train}
        # the trainer's own parser refuses bad flags now, before any job exists
        return Settings(self.parse(argv_of({**TRAIN_FLAGS_ALWAYS, **train})), train=train)

    def plan(self, settings: Settings, point: PointContext) -> PointPlan:
        from bench.nanochat.config import scaled_batch, training_horizon

        base, ranks = settings.config, point.ranks
        seq = base.max_seq_len
        fit, total = scaled_batch(point.scaling, base.total_batch_size, base.device_batch_size, seq, ranks)
        if not fit.possible:
            return PointPlan(reason=fit.reason)
        dbs, accum, note = fit.device_batch_size, fit.grad_accum, fit.note
        if base.device_type != "cpu":
            dbs, accum, fitted = fit_device_memory(base, ranks, dbs, accum, point)
            note = "; ".join(filter(None, [note, fitted]))
        k, why_not = val_files_k(base, point.data, ranks)
        if why_not:
            return PointPlan(reason=why_not)
        if k is None and point.data is None and not base.data_bin_dir and ranks > UNPLANNED_K_MAX_RANKS:
            return PointPlan(reason=(
                f"K ({contract.ENV_VAL_FILES_K}) cannot be planned for {ranks} ranks: no shards on this host and no "
                f"--row-groups; with the trainer's K=1 every rank may not get a validation row group and the run "
                f"would stop at start-up on the cluster; pass --data-dir DIR or --row-groups N --shards M"))
        config = replace(base, device_batch_size=dbs, total_batch_size=total)
        from bench.nanochat.gptconfig import GPTConfig

        model = GPTConfig.from_depth(config.depth, VOCAB_SIZE, seq, config.aspect_ratio)
        steps, _ = training_horizon(config, model.num_params(), model.flops_per_token())
        est = None if config.device_type == "cpu" else \
            point.estimate.hours(model.flops_per_token() * total * steps, ranks, dbs)
        env = {contract.ENV_VAL_FILES_K: str(k)} if k is not None else {}
        if config.force_flash_sdpa:
            env[contract.ENV_FORCE_FLASH_SDPA] = "1"
        flags = {**TRAIN_FLAGS_ALWAYS, **settings.train, "device_batch_size": dbs, "total_batch_size": total}
        return PointPlan(train_argv=tuple(argv_of(flags)), env=tuple(sorted(env.items())),
                         columns=(("device_batch_size", dbs), ("grad_accum", accum), ("total_batch_size", total),
                                  ("num_iterations", steps)),
                         manifest=(("grad_accum", accum),), val_files_k=k, tokens=total * steps, est_hours=est,
                         note=note)

    def model_of(self, train: dict) -> ModelShape:
        """The model pre-training with these flags trains: what a flow's later stages load, and are estimated by."""
        from bench.nanochat.gptconfig import GPTConfig

        config = self.parse(argv_of({**TRAIN_FLAGS_ALWAYS, **train}))
        model = GPTConfig.from_depth(config.depth, VOCAB_SIZE, config.max_seq_len, config.aspect_ratio)
        return ModelShape(config.depth, config.max_seq_len, model.flops_per_token())

    def memory_warning(self, settings: Settings, plan: PointPlan, point: PointContext, gpu: str) -> str | None:
        """The memory model's warning when a GPU point will not fit (bench/nanochat/memory.py)."""
        config = settings.config
        if config.device_type == "cpu" or not plan.possible:
            return None
        from bench.nanochat.memory import fit_warning

        return fit_warning(config.depth, plan.column("device_batch_size"), config.max_seq_len, point.ranks, gpu,
                           config.strategy, aspect_ratio=config.aspect_ratio, grad_accum=plan.column("grad_accum"))

    def describe(self, sweep) -> list[str]:
        config = sweep.settings.config
        grows = "total batch grows with the ranks" if sweep.scaling == "weak" else "total batch fixed"
        return [f"workload: depth={config.depth} max_seq_len={config.max_seq_len} scaling={sweep.scaling} ({grows})",
                f"validation files: {data_line(sweep)}"]


def data_line(sweep, tokens: str = "training tokens") -> str:
    """What the plan knows of the data: where K came from, and how many shards to download (`tokens`: what the runs
    read of the training split)."""
    shards = sweep.shards_needed()
    need = f"; download {shards} shard(s) ({tokens} at ~52M a shard, +10%, + K validation, and a row group " \
        "a rank in each split)" if shards else ""
    if (shards or 0) > paths.MAX_SHARD + 1:  # the loader wraps around: the runs would read the training tokens again
        need += (f", more than the {paths.MAX_SHARD + 1:,} FineWeb-Edu has: the runs would read its training tokens "
                 "more than once")
    if sweep.data is None:
        return ("K not planned: no shards found and no --row-groups given (the runs use "
                f"{contract.ENV_VAL_FILES_K} or 1; give --data-dir or --row-groups N --shards M){need}")
    return f"K chosen per point from {sweep.data.source}{need}"


WORKLOAD = Nanochat()
