"""Workloads: what a run trains, behind one interface (bench/workloads/base.py), so launchers ask the
workload for its command and the planner asks it to plan each point. Adding a workload or a stage is
one module holding `WORKLOAD` plus one line in `_MODULES` below.

    base.py       the interface, and what a plan holds (PointPlan) and is given (PointContext, Estimate)
    stage.py      what every nanochat stage under torchrun shares (its module, its parser, its commands)
    nanochat.py   nanochat's trainer under torchrun: its batch arithmetic, K, horizon and estimate
    base_loss.py  the base_loss stage: train/val bpb of a base checkpoint (split_tokens rounded per rank count)
    base_eval.py  the base_eval stage: the CORE metric of a base checkpoint
    chat_eval.py  nanochat's chat evaluation (ARC, MMLU, GSM8K, HumanEval, SpellingBee; ChatCORE)
    chat_sft.py   nanochat's SFT stage: examples per step per rank count
    torchrun.py   the one torchrun command line (local and under Slurm)
    mid_train.py  mid-training from the base checkpoint: its batch arithmetic per rank count
    sharedfs.py   whether the nodes share $NANOCHAT_BASE_DIR (the stages read each other's checkpoints)
    nntile/       NNTile's GPT-2 on StarPU, in its own interpreter

Every workload leaves the same run directory (bench/contract/), so collect, report and check read them alike;
run.json's `workload` field tells them apart (`nanochat-base`, `nanochat-base-loss`, `nanochat-base-eval`,
`nanochat-mid`, `nanochat-sft`, `nanochat-chat-eval`, `nntile-gpt2`).

Standard library only, and each member imported on first use: the NNTile interpreter imports this
package too, and must not pull in the main process's torch.
"""

import importlib

from bench.errors import ConfigError

# name -> module holding `WORKLOAD`, an object with the methods of bench.workloads.base.Workload
_MODULES = {"nanochat": "bench.workloads.nanochat", "nntile": "bench.workloads.nntile",
            "base_loss": "bench.workloads.base_loss", "base_eval": "bench.workloads.base_eval",
            "mid_train": "bench.workloads.mid_train", "chat_sft": "bench.workloads.chat_sft",
            "chat_eval": "bench.workloads.chat_eval"}
DEFAULT = "nanochat"


def names() -> list[str]:
    return list(_MODULES)


def summaries() -> str:
    """Every workload's name and summary, for `--workload`'s help."""
    return "; ".join(f"{name}: {get(name).summary}" for name in _MODULES)


def get(name: str):
    """The workload called `name`; an unknown name is a ConfigError listing the valid ones."""
    if name not in _MODULES:
        raise ConfigError(f"unknown workload {name!r}; valid: {', '.join(_MODULES)}")
    return importlib.import_module(_MODULES[name]).WORKLOAD


def by_run_workload(run_workload) -> object | None:
    """The workload whose runs record this run.json `workload`, now or in an older release (None for a name no
    registered one records: a newer release's workload, or no name at all)."""
    if not isinstance(run_workload, str):  # a table's null (None, NaN, pd.NA): no name
        return None
    return next((w for w in map(get, _MODULES)
                 if run_workload in (w.run_workload, *w.former_run_workloads)), None)


def family(run_workload) -> str | None:
    """The program a run of this run.json `workload` comes from ("nanochat", "nntile"), or None for a name no
    registered workload records: what a run is, never guessed from how its name is spelled."""
    return getattr(by_run_workload(run_workload), "family", None) or None
