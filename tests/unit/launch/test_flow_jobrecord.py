"""The batch script's record of a flow stage that does not start: `jobrecord.py not-run RUN_DIR STAGE`, as the
sweep's shipped copy runs it on the host's Python.

    python -m pytest tests/unit/launch/test_flow_jobrecord.py -q
"""

import subprocess
import sys

from bench import contract
from bench.launch import jobrecord
from bench.launch.job import ship_bookkeeping


def test_a_stage_not_run_is_cancelled_naming_the_stage_that_failed(tmp_path):
    lib, run_dir = tmp_path / ".lib", tmp_path / "n1-bare-r1" / "mid_train"
    ship_bookkeeping(lib)
    run_dir.mkdir(parents=True)
    contract.update_run_json(run_dir, run_id="n1-bare-r1", stage="mid_train", status="pending")
    r = subprocess.run([sys.executable, str(lib / "jobrecord.py"), "not-run", str(run_dir), "base_eval"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    run = contract.read_run_json(run_dir)
    assert run["status"] == "cancelled" and "stage base_eval" in run["message"]
    assert [(e["source"], e["kind"]) for e in run["evidence"]] == [("batch_script", "not_run")]
    assert jobrecord.kept(str(run_dir)) == 1  # a resubmission runs it again
