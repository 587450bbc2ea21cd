"""One run per run directory (bench/runside/runclaim.py): the lock, a finished run refused, stale files gone.

    python -m pytest tests/unit/runside/test_runclaim.py -q
"""

import json
import subprocess
import sys
import textwrap
import time

import pytest

from bench.runside import runclaim
from bench.runside.heartbeat import DIR as HEARTBEAT_DIR

HOLD = textwrap.dedent("""
    import sys, time
    from bench.runside import runclaim
    runclaim.claim(sys.argv[1])
    print("held", flush=True)
    time.sleep(60)
""")


@pytest.fixture
def holder(tmp_path):
    """Another process holding tmp_path/run, as a concurrent run's launcher does."""
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    yield run_dir, proc
    proc.kill()
    proc.wait()


def test_a_second_run_is_refused_at_once_naming_the_holder(holder):
    run_dir, proc = holder
    t0 = time.time()
    with pytest.raises(runclaim.RunDirBusy, match=rf"in use by another run \(pid {proc.pid} on "):
        runclaim.claim(run_dir)
    assert time.time() - t0 < 1
    assert not runclaim.ours(run_dir)  # nothing of this run may be written there


def test_overwrite_never_touches_a_directory_in_use(holder):
    run_dir, proc = holder
    (run_dir / "metrics.jsonl").write_text('{"event": "start", "t": 1.0}\n')  # the live run's events
    with pytest.raises(runclaim.RunDirBusy, match=r"in use by another run"):
        runclaim.claim(run_dir, refuse_finished=True, overwrite=True)
    assert (run_dir / "metrics.jsonl").read_text() == '{"event": "start", "t": 1.0}\n'


def test_overwrite_empties_a_finished_run_but_keeps_its_lock(tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / HEARTBEAT_DIR).mkdir(parents=True)
    for name in ("metrics.jsonl", "run.json", "train.log", f"{HEARTBEAT_DIR}/rank3.json"):
        (run_dir / name).write_text("{}")
    runclaim.claim(run_dir, refuse_finished=True, overwrite=True)
    assert sorted(p.name for p in run_dir.iterdir()) == [runclaim.LOCK] and runclaim.ours(run_dir)
    runclaim.release(run_dir)


def test_overwrite_deletes_the_runs_files_and_keeps_what_else_is_there(tmp_path):
    """--overwrite emptied the whole directory: a user's notes, an analysis folder and a sweep kept beside the run
    went with the run's files."""
    run_dir = tmp_path / "run"
    runs = ["run.json", "metrics.jsonl", "train.log", ".reserve", "base_eval.csv", "profile_step12.txt",
            "profile_step12.json", "slurm-4242.log", "job.sbatch", "environment.toml", ".run.json.x1y2.tmp",
            f"{HEARTBEAT_DIR}/rank0.json", "nccl/rank0.log", "report/figures/01-x-step.png", "attempts/41/train.log"]
    users = ["mynotes.txt", "analysis/plot.py", "sweep/point/run.json", "sweep/point/metrics.jsonl", ".envrc",
             "train.log.bak"]
    for name in runs + users:
        (run_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (run_dir / name).write_text("{}")
    runclaim.claim(run_dir, refuse_finished=True, overwrite=True)
    runclaim.release(run_dir)
    left = sorted(p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*") if p.is_file())
    assert left == sorted([runclaim.LOCK, *users])
    assert not (run_dir / "nccl").exists() and not (run_dir / "report").exists()


def test_the_runs_files_are_the_ones_its_writers_name():
    """What --overwrite deletes is named in runclaim beside the modules that write it: they agree."""
    from fnmatch import fnmatchcase

    from bench.contract.files import RESERVE
    from bench.launch.job import SCRIPT_NAME, SLURM_LOG
    from bench.launch.submit import NCCL_DIR
    from bench.nanochat.base_eval import CSV_IN_RUN_DIR
    from bench.runtimes.ce import EDF_NAME

    assert {RESERVE, NCCL_DIR, CSV_IN_RUN_DIR, SCRIPT_NAME, EDF_NAME, HEARTBEAT_DIR} <= set(runclaim.RUN_ENTRIES)
    assert any(fnmatchcase(SLURM_LOG.replace("%j", "4242"), p) for p in runclaim.RUN_FILES)


def test_the_lock_goes_with_its_process(holder):
    run_dir, proc = holder
    proc.kill()
    proc.wait()
    runclaim.claim(run_dir)  # kill -9 leaves no stale lock
    assert runclaim.ours(run_dir)
    runclaim.release(run_dir)


def test_a_directory_holding_a_run_is_refused_unless_resumed(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text('{"event": "start", "t": 1.0}\n')
    (run_dir / "run.json").write_text('{"status": "ok"}')
    with pytest.raises(runclaim.RunDirBusy, match=r"already holds a run.*--resume_from_step"):
        runclaim.claim(run_dir, refuse_finished=True)
    assert (run_dir / "metrics.jsonl").read_text().count("\n") == 1 and "ok" in (run_dir / "run.json").read_text()
    runclaim.claim(run_dir, refuse_finished=True, resume=True)
    runclaim.release(run_dir)


def test_an_earlier_runs_heartbeats_are_removed(tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / HEARTBEAT_DIR).mkdir(parents=True)
    (run_dir / HEARTBEAT_DIR / "rank3.json").write_text(json.dumps({"rank": 3, "t": 1.0}))
    runclaim.claim(run_dir)
    assert list((run_dir / HEARTBEAT_DIR).iterdir()) == []
    runclaim.release(run_dir)


def test_this_runs_beats_and_a_rank_renaming_its_own_are_left_alone(tmp_path, monkeypatch):
    """Rank 0 claims the directory while the other ranks have begun to beat: removing their temp file before its
    rename would fail that rank's write (and, before, end its heartbeat thread)."""
    monkeypatch.setenv("NANOCHAT_BENCH_T0", "2000.5")
    beats = tmp_path / "run" / HEARTBEAT_DIR
    beats.mkdir(parents=True)
    (beats / "rank1.json").write_text(json.dumps({"rank": 1, "t": 2001.0, "run": "2000.5"}))
    (beats / ".rank2.json.abc.tmp").write_text("{}")
    (beats / "rank3.json").write_text(json.dumps({"rank": 3, "t": 1.0, "run": "1000.000000"}))
    runclaim.claim(tmp_path / "run")
    runclaim.release(tmp_path / "run")
    assert sorted(p.name for p in beats.iterdir()) == [".rank2.json.abc.tmp", "rank1.json"]


def test_an_unwritable_directory_is_one_clear_error(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(runclaim.RunDirError, match="file"):
        runclaim.claim(tmp_path / "file" / "run")


@pytest.mark.parametrize("args, resumes", [(["--resume_from_step=20"], True), (["--resume_from_step", "4"], True),
                                           (["--resume_from_step=-1"], False), (["--depth=4"], False)])
def test_resuming(args, resumes):
    assert runclaim.resuming(args) is resumes


UPDATE = textwrap.dedent("""
    import sys
    from bench.contract import Evidence, record_evidence
    for i in range(40):
        record_evidence(sys.argv[1], Evidence(source="trainer", kind="exit", exit_code=0, message=str(i)))
""")


def test_run_json_updates_are_serialised(tmp_path):
    """Two processes each append 40 pieces of evidence to run.json by read-modify-write: none is lost."""
    from bench.contract import load_manifest, update_run_json

    update_run_json(tmp_path, message="0")
    procs = [subprocess.Popen([sys.executable, "-c", UPDATE, str(tmp_path)]) for _ in range(2)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    assert len(load_manifest(tmp_path).evidence) == 80
