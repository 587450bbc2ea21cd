"""Every table takes a catalogued column's header and cell format from bench/analysis/columns.py, so a label
changed there changes every table that shows the column.

    python -m pytest tests/unit/analysis/test_table_headers.py -q
"""

from dataclasses import replace

import pandas as pd
import pytest

from bench.analysis import columns
from bench.analysis.sidebyside import side_by_side_table
from bench.analysis.tables import split_table


@pytest.fixture
def relabelled(monkeypatch):
    """Each catalogued column of these tables under a new label (its format kept)."""
    names = ["step_time_ms", *(f"step_{k}" for k in columns.SPLIT), "total_batch_size", "num_params", "tok_per_sec",
             "mfu", "peak_mem_mib"]
    by_name = {**columns.BY_NAME, **{n: replace(columns.BY_NAME[n], label=f"<{n}>") for n in names}}
    monkeypatch.setattr(columns, "BY_NAME", by_name)
    return names


def test_the_step_split_takes_its_headers_from_the_catalogue(relabelled):
    point = {"runtime": "bare", "world_size": 8, "nodes": "1", "step_time_ms": 100.0,
             **{f"step_{k}": 20.0 for k in columns.SPLIT}}
    table = split_table(pd.DataFrame([point]), "GPUs")
    assert table.columns == ["runtime", "GPUs", "nodes", "<step_time_ms>", *(f"<step_{k}>" for k in columns.SPLIT)]
    assert table.rows[0][3:5] == ["100.0", "20.0 (20.0%)"]


def test_the_side_by_side_table_takes_its_headers_from_the_catalogue(relabelled):
    point = {"depth": 2, "max_seq_len": 64, "total_batch_size": 512, "device": "CPU", "world_size": 2, "nodes": 1,
             "workload": "nntile-gpt2", "runtime": "bare", "variant": "", "runs": 2, "num_params": 1.5e6,
             "tok_per_sec": 1234.5, "vs_nanochat": 0.5, "mfu": None, "peak_mem_mib": 10.0}
    table = side_by_side_table(pd.DataFrame([point]))
    assert [h for h in table.columns if h.startswith("<")] == [
        "<total_batch_size>", "<num_params>", "<tok_per_sec>", "<mfu>", "<peak_mem_mib>"]
    assert table.rows[0][table.columns.index("<tok_per_sec>")] == "1,234"


@pytest.mark.parametrize("value, kind, text", [(-0.04, "1", "0.0"), (-0.0004, "3", "0.000"), (-0.0002, "pct", "0.0%"),
                                               (-0.06, "1", "-0.1"), (1234.56, "1", "1,234.6")])
def test_a_value_that_rounds_to_zero_reads_zero_not_minus_zero(value, kind, text):
    """A phase's time just below zero (clock skew between ranks) printed as -0.0 in the tables."""
    from bench.analysis.tables import fmt

    assert fmt(value, kind) == text
