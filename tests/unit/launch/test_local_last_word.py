"""The local launcher's last word on a run that recorded no end names what started its processes: torchrun for
every nanochat stage (base_train and the stages after it alike), the workload's own launcher otherwise.

    python -m pytest tests/unit/launch/test_local_last_word.py -q
"""

import json
import os

import pytest

from bench.launch.local import run_local


@pytest.fixture
def dying_python(tmp_path):
    """A stand-in interpreter that dies at once, before any trainer could record anything."""
    path = tmp_path / "python"
    path.write_text("#!/bin/sh\necho 'ImportError: no module named torch' >&2\nexit 3\n")
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize("workload", ["nanochat", "base_loss", "chat_eval"])
def test_a_stage_that_never_started_names_torchrun(workload, dying_python, tmp_path):
    run_dir = tmp_path / "run"
    assert run_local([], 2, run_dir, env=dict(os.environ), workload=workload, python=dying_python) == 3
    manifest = json.loads((run_dir / "run.json").read_text())
    assert manifest["status"] == "failed"
    assert manifest["message"] == "the trainer never started (torchrun exit code 3): ImportError: no module named torch"


def test_a_workload_killed_by_a_signal_exits_128_plus_it(tmp_path):
    killed = tmp_path / "python"
    killed.write_text("#!/bin/sh\nkill -9 $$\n")  # as torchrun's agent killed with -9 (the OOM killer, a user)
    killed.chmod(0o755)
    run_dir = tmp_path / "run"
    assert run_local([], 2, run_dir, env=dict(os.environ), python=str(killed)) == 128 + 9
    assert json.loads((run_dir / "run.json").read_text())["launch"]["exit_code"] == -9
