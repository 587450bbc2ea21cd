"""Which program a run comes from is the workload registry's answer (bench/workloads `family`), not its name's
prefix: the side-by-side table and the legacy values of nanochat's older records both ask it.

    python -m pytest tests/unit/analysis/test_workload_family.py -q
"""

import sys
import types

import pandas as pd
import pytest

from bench import workloads
from bench.analysis.collect import collect
from bench.analysis.scaling import LEGACY, with_legacy
from bench.analysis.sidebyside import side_by_side
from bench.workloads.stage import TorchrunStage

BASE = {"depth": 20, "max_seq_len": 2048, "total_batch_size": 524_288, "device_batch_size": 32}


class Speedrun(TorchrunStage):
    """A later stage of nanochat's recipe whose run.json name does not start with "nanochat"."""

    name = "speedrun"
    run_workload = "speedrun-base"


@pytest.fixture
def speedrun_registered(monkeypatch):
    module = types.ModuleType("speedrun_workload")
    module.WORKLOAD = Speedrun()
    monkeypatch.setitem(sys.modules, "speedrun_workload", module)
    monkeypatch.setitem(workloads._MODULES, "speedrun", "speedrun_workload")


def test_the_family_is_the_registered_workloads_whatever_its_name(speedrun_registered):
    assert workloads.family("speedrun-base") == "nanochat"  # by its name's prefix: none
    assert workloads.family("nanochat-sft") == "nanochat" and workloads.family("nntile-gpt2") == "nntile"
    assert workloads.family("nanochat-base-train") == "nanochat"  # results/h200-d20: an older release's name
    # a newer release's workload, or none recorded: not guessed, and no crash
    assert {workloads.family(w) for w in ("nanochat-rl", "nntile-llama", None, float("nan"), 3)} == {None}


def test_legacy_values_fill_the_registered_nanochat_runs_only(speedrun_registered):
    rows = pd.DataFrame({"workload": ["speedrun-base", "nanochat-base-train", "nanochat-rl", "nntile-gpt2", None]})
    for col in LEGACY:
        rows[col] = None
    filled = with_legacy(rows)
    assert list(filled["strategy"]) == ["zero2", "zero2", None, None, None]


def test_a_registered_nanochat_workload_stands_beside_nntile(speedrun_registered, make_run, tmp_path):
    make_run("nn", tok_s=500.0, workload="nntile-gpt2", config=BASE)
    make_run("speedrun", tok_s=17_000.0, workload="speedrun-base", config=BASE)
    make_run("newer", tok_s=9_000.0, workload="nanochat-rl", config=BASE)  # a newer release's: left out
    pairs = side_by_side(collect([tmp_path / "runs"]).table)
    assert list(pairs["workload"]) == ["speedrun-base", "nntile-gpt2"]
    assert list(pairs["vs_nanochat"].round(3)) == [1.0, round(500 / 17_000, 3)]


def test_a_row_with_no_workload_has_no_family_whatever_null_the_table_holds():
    """Regression: a run whose run.json could not be read has pd.NA as its workload in the table, and the report's
    note on a baseline whose runs all failed took the family of every row: 'boolean value of NA is ambiguous'."""
    assert [workloads.family(null) for null in (None, float("nan"), pd.NA)] == [None, None, None]
    rows = with_legacy(pd.DataFrame({"workload": pd.array(["nanochat-base", pd.NA], dtype="string"),
                                     **{col: [None, None] for col in LEGACY}}))
    assert rows[next(iter(LEGACY))].tolist()[1] is None
