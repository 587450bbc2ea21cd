"""A run directory written by release 7031fbf (schema_version 1) is read by today's reader, with its figures.

The fixture tests/assets/release-7031fbf/local/run-1 is that release's own output: `git worktree add
/tmp/old 7031fbf`, then in it `PYTHONPATH=/tmp/old python -m pytest tests/integration/test_train.py -k
run_succeeds --basetemp=OUT` (a 2-rank CPU run through its local launcher), and OUT/runs0/local/run-1
copied here unchanged.

    python -m pytest tests/unit/contract/test_release_7031fbf.py -q
"""

import json
import shutil
import statistics
from pathlib import Path

from bench import contract
from bench.analysis.rundir import read_run_dir

OLD_RUN = Path(__file__).resolve().parents[2] / "assets" / "release-7031fbf" / "local" / "run-1"


def test_the_fixture_is_major_1():
    assert json.loads((OLD_RUN / "run.json").read_text())["schema_version"] == 1


def test_an_old_run_is_read_with_its_figures():
    row = read_run_dir(OLD_RUN)
    assert row["skip_reason"] is None and row["status"] == "ok"
    assert "schema_version 1" in row["notes"]
    steps = [json.loads(line) for line in (OLD_RUN / "metrics.jsonl").read_text().splitlines()]
    steps = [e for e in steps if e["event"] == "step"]
    steady = [e["tok_per_sec"] for e in steps if e["step"] > 10]  # nanochat's warm-up rule
    assert row["tok_per_sec"] == statistics.median(steady)
    assert row["steps_recorded"] == len(steps) == 24 and row["world_size"] == 2
    assert row["min_val_bpb"] == 3.3795425136239543 and row["total_training_time_s"] == 0.4213755130767822
    assert row["t0"] == 1796154947.59177 and row["startup_overhead_s"] > 0  # launch_t0, migrated to launch.t0
    assert (row["depth"], row["total_batch_size"], row["runtime"]) == (2, 512, "bare")


def test_an_old_run_rewritten_by_a_writer_keeps_what_it_had(tmp_path):
    run = shutil.copytree(OLD_RUN, tmp_path / "run-1")
    m = contract.record_evidence(run, contract.Evidence(source="batch_script", kind="node_lost", message="n2 lost"))
    assert (m.status, m.schema_version, m.launch.t0, m.launch.kind) == ("ok", contract.SCHEMA_VERSION,
                                                                       1796154947.59177, "local")
    assert m.result.final_val_bpb == 3.3795425136239543 and m.grad_accum == 1
    assert [e.kind for e in m.evidence] == ["completed", "node_lost"]  # its ok stands first
