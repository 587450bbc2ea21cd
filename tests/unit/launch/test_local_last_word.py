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


def _signalled_after(monkeypatch, target, name, when=lambda **kwargs: True):
    """`target`'s function `name` sends this process SIGINT once it returned (a Ctrl-C at that moment)."""
    import signal

    real = getattr(target, name)

    def then_ctrl_c(*args, **kwargs):
        result = real(*args, **kwargs)
        if when(**kwargs):
            os.kill(os.getpid(), signal.SIGINT)
        return result

    monkeypatch.setattr(target, name, then_ctrl_c)


def test_a_ctrl_c_before_the_workload_started_records_the_run_stopped(tmp_path, monkeypatch):
    """Between run.json's `pending` and torchrun's start a Ctrl-C ended the launcher with a traceback, the run
    pending for good."""
    from bench.launch import local

    started = tmp_path / "started"
    stand_in = tmp_path / "python"
    stand_in.write_text(f"#!/bin/sh\ntouch {started}\n")
    stand_in.chmod(0o755)
    _signalled_after(monkeypatch, local, "prepare_local")
    run_dir = tmp_path / "run"
    try:
        rc = run_local([], 2, run_dir, env=dict(os.environ), python=str(stand_in))
    except KeyboardInterrupt:
        pytest.fail("the launcher ended with KeyboardInterrupt")
    manifest = json.loads((run_dir / "run.json").read_text())
    assert rc == 130 and not started.exists()
    assert manifest["status"] == "cancelled" and manifest["message"] == ("nanochat-bench train received SIGINT; "
                                                                         "the workload was not started")


def test_a_ctrl_c_at_any_line_before_the_start_records_the_run_stopped(tmp_path):
    """A Ctrl-C that came after the launcher had set its exit status to 0 but before it checked for a signal
    skipped the start, yet run.json's launch said exit code 0 beside `cancelled`, and the launcher exited 0."""
    import inspect
    import signal
    import sys

    from bench.launch import local

    lines, first = inspect.getsourcelines(run_local)
    begin = first + next(i for i, line in enumerate(lines) if "prepare_local(" in line) + 1
    end = first + next(i for i, line in enumerate(lines) if "subprocess.Popen(" in line)
    for target in range(begin, end):  # the signal comes just before line `target` runs
        fired = []

        def on_line(frame, event, _arg, target=target, fired=fired):
            if event == "line" and frame.f_lineno == target and not fired:
                fired.append(target)
                os.kill(os.getpid(), signal.SIGINT)  # its handler runs before os.kill returns
            return on_line

        started = tmp_path / f"started-{target}"
        stand_in = tmp_path / f"python-{target}"
        stand_in.write_text(f"#!/bin/sh\ntouch {started}\n")
        stand_in.chmod(0o755)
        run_dir = tmp_path / f"run-{target}"
        sys.settrace(lambda frame, event, arg: on_line if frame.f_code is local.run_local.__code__ else None)
        try:
            rc = run_local([], 2, run_dir, env=dict(os.environ), python=str(stand_in))
        finally:
            sys.settrace(None)
        if not fired:  # no code on that line (a comment, a blank line)
            continue
        manifest = json.loads((run_dir / "run.json").read_text())
        assert not started.exists(), target
        assert (rc, manifest["launch"]["exit_code"], manifest["status"]) == (130, -2, "cancelled"), target
        assert manifest["message"] == "nanochat-bench train received SIGINT; the workload was not started", target


def test_a_ctrl_c_during_the_last_writes_leaves_the_run_recorded_by_its_own_exit(tmp_path, monkeypatch, capfd):
    """A Ctrl-C after the workload had ended on its own (exit 3) was recorded as its stop ("the workload was
    stopped"), the run shown cancelled; before, with the default handlers back, it ended the launcher with a
    traceback."""
    from bench import contract

    stand_in = tmp_path / "python"
    stand_in.write_text("#!/bin/sh\nexit 3\n")
    stand_in.chmod(0o755)
    # the first write of the end: the launch's figures
    _signalled_after(monkeypatch, contract, "update_run_json", lambda launch=None, **_: "exit_code" in (launch or {}))
    run_dir = tmp_path / "run"
    try:
        rc = run_local([], 2, run_dir, env=dict(os.environ), python=str(stand_in))
    except KeyboardInterrupt:
        pytest.fail("the launcher ended with KeyboardInterrupt")
    manifest = json.loads((run_dir / "run.json").read_text())
    assert rc == 3 and manifest["status"] == "failed" and manifest["launch"]["exit_code"] == 3
    assert [e["kind"] for e in manifest["evidence"] if e["kind"] in ("stopped", "cancelled")] == []
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.parametrize("damage", ["{", '{"schema_version": "99.0", "status": "running"}'])
def test_a_run_json_damaged_by_the_workload_keeps_its_exit_status_in_one_line(tmp_path, damage, capfd):
    """A run.json the workload left not JSON, or of a newer major, ended the launcher's last writes in a RunJsonError
    or SchemaError: the workload's exit status was lost (the CLI exited 1). It is kept, with one line saying why
    run.json was not given the workload's end, and the file is left as it is."""
    stand_in = tmp_path / "python"
    stand_in.write_text(f"#!/bin/sh\nprintf '%s' '{damage}' > \"$NANOCHAT_BENCH_RUN_DIR/run.json\"\nexit 3\n")
    stand_in.chmod(0o755)
    run_dir = tmp_path / "run"
    assert run_local([], 2, run_dir, env=dict(os.environ), python=str(stand_in)) == 3
    assert (run_dir / "run.json").read_text() == damage
    err = [line for line in capfd.readouterr().err.splitlines() if line]
    assert len(err) == 1 and err[0].startswith(f"error: {run_dir / 'run.json'}"), err
    assert err[0].endswith("the workload's end (exit code 3) is not recorded in it"), err
    from bench.cli import main  # `train` too: it read run.json again for its last line

    assert main(["train", "--python", str(stand_in), "--nproc", "1", "--run-dir", str(tmp_path / "cli")]) == 3
    assert [line for line in capfd.readouterr().err.splitlines() if line.startswith("error: ")] == [
        err[0].replace(str(run_dir), str(tmp_path / "cli"))]
