"""Parsers of Slurm's answers (22.05's openapi v0.0.38 layout and the v0.0.40+ one).

    python -m pytest tests/unit/launch -q
"""

import json
import subprocess

import pytest

from bench.errors import SubmitError
from bench.launch import slurm


def test_parsable_job_id():
    assert slurm.parse_parsable("123\n") == "123"
    assert slurm.parse_parsable("123;alps\n") == "123"
    with pytest.raises(SubmitError, match="Submitted batch job 5"):
        slurm.parse_parsable("Submitted batch job 5")


def test_squeue_json_v0038_and_v0040():
    old = {"jobs": [{"job_id": 5, "job_state": "RUNNING", "exit_code": 0, "nodes": "n[1-2]", "state_reason": "None"}]}
    new = {"jobs": [{"job_id": 6, "job_state": ["COMPLETED"], "nodes": "n1",
                     "exit_code": {"status": ["SUCCESS"], "return_code": {"set": True, "number": 0}}}]}
    assert slurm.parse_squeue_json(json.dumps(old))["5"] == slurm.JobState("5", "RUNNING", "0", "n[1-2]", "None")
    state = slurm.parse_squeue_json(json.dumps(new))["6"]
    assert state.state == "COMPLETED" and state.exit_code == "0" and state.terminal
    with pytest.raises(SubmitError):
        slurm.parse_squeue_json("slurm_load_jobs error")


def test_scontrol_oneliners():
    text = ("JobId=7 JobName=x UserId=root(0) JobState=TIMEOUT Reason=TimeLimit ExitCode=0:15 NodeList=n[1-2]\n"
            "JobId=8 JobName=y JobState=PENDING Reason=Resources ExitCode=0:0 NodeList=(null)\n")
    states = slurm.parse_scontrol_oneliners(text)
    assert states["7"] == slurm.JobState("7", "TIMEOUT", "0:15", "n[1-2]", "TimeLimit")
    assert not states["8"].terminal


def test_missing_sbatch_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    (tmp_path / "job.sbatch").write_text("#!/bin/bash\n")
    with pytest.raises(SubmitError, match="sbatch not found"):
        slurm.SlurmCLI().submit(tmp_path / "job.sbatch")


def test_squeue_json_v0038_exit_codes_are_wait_statuses():
    """Slurm 22.05's squeue --json gives the wait status: a cancelled job's 36608 is exit 143, as scontrol says."""
    jobs = {"jobs": [{"job_id": 12, "job_state": "CANCELLED", "exit_code": 36608},
                     {"job_id": 13, "job_state": "FAILED", "exit_code": 256},
                     {"job_id": 14, "job_state": "CANCELLED", "exit_code": 9}]}
    states = slurm.parse_squeue_json(json.dumps(jobs))
    assert [states[j].exit_code for j in ("12", "13", "14")] == ["143:0", "1:0", "0:9"]


def test_node_cpus_is_the_most_any_node_of_the_partitions_has(monkeypatch):
    """sinfo -N prints one CPU count a node; submit's bound on a --no-exclusive share is the largest. An answer
    without a count (an unknown partition, no sinfo) says nothing rather than 0."""
    asked = []

    def fake(argv, cwd=None):
        asked.append(argv)
        return subprocess.CompletedProcess(argv, 0, stdout="72\n288\n72\n" if "--partition=gpu" in argv else "")

    monkeypatch.setattr(slurm, "_run", fake)
    assert slurm.SlurmCLI().node_cpus("gpu") == 288 and asked[-1][-1] == "--partition=gpu"
    assert slurm.SlurmCLI().node_cpus(None) is None and not any(a.startswith("--partition") for a in asked[-1])


def test_node_cpus_counts_only_the_nodes_the_constraint_selects(monkeypatch):
    """A partition of 288-CPU and 72-CPU nodes: with --constraint gh200 (the 72-CPU ones) the bound was still 288,
    so a share only the other nodes could hold passed, and sbatch refused every job. Now the nodes' features
    (sinfo's %f) decide which count, where the constraint is one feature or features joined by & or | alone."""
    sinfo = "288 x86,a100\n72 gh200,arm\n72 gh200,arm,big\n"
    monkeypatch.setattr(slurm, "_run", lambda argv, cwd=None: subprocess.CompletedProcess(argv, 0, stdout=sinfo))
    cli = slurm.SlurmCLI()
    assert cli.node_cpus("gpu") == 288 and cli.node_cpus("gpu", "gh200") == 72
    assert cli.node_cpus("gpu", "gh200&big") == 72 and cli.node_cpus("gpu", "arm|a100") == 288
    assert cli.node_cpus("gpu", "h100") is None  # no node has it: nothing to bound the share by
    assert cli.node_cpus("gpu", "gh200&big|x86") == 288  # a form not read here: every node, as before
    assert slurm.features_match("gh200&a100|x86") is None and slurm.features_match("!gh200") is None


def test_nodes_gives_each_nodes_cpus_and_features(monkeypatch):
    """sinfo -N's `%c %f` a node a line; sinfo's "(null)" (a node without features) is no feature a constraint could
    ask for. A failed sinfo says nothing."""
    sinfo = "288 x86,a100\n72 (null)\n"
    monkeypatch.setattr(slurm, "_run", lambda argv, cwd=None: subprocess.CompletedProcess(argv, 0, stdout=sinfo))
    assert slurm.SlurmCLI().nodes("gpu") == [("288", {"x86", "a100"}), ("72", set())]
    monkeypatch.setattr(slurm, "_run", lambda argv, cwd=None: subprocess.CompletedProcess(argv, 1, stdout=sinfo))
    assert slurm.SlurmCLI().nodes("gpu") is None


def test_a_job_in_a_hidden_partition_is_found_not_taken_for_a_forgotten_one(monkeypatch):
    """squeue and scontrol leave out the jobs of a hidden partition (one the site configures Hidden=YES, which its
    users may still submit to) unless asked for --all: such a running job read UNKNOWN, status recorded its run
    failed, and --resubmit-failed submitted it again beside the live one."""
    squeue = json.dumps({"jobs": [{"job_id": 41, "job_state": ["RUNNING"], "nodes": "nid[001-032]"}]})

    def cluster(argv, cwd=None):
        shown = "--all" in argv or "-a" in argv  # Slurm's rule for a hidden partition's jobs
        if argv[0] == "squeue":
            return subprocess.CompletedProcess(argv, 0, stdout=squeue if shown else '{"jobs": []}')
        return subprocess.CompletedProcess(argv, 0, stdout="JobId=41 JobState=RUNNING NodeList=nid[001-032]\n"
                                           if shown else "No jobs in the system\n")

    monkeypatch.setattr(slurm, "_run", cluster)
    assert slurm.SlurmCLI().states(["41"])["41"].state == "RUNNING"


def test_a_hidden_partition_is_one_slurm_has(monkeypatch):
    """sinfo lists a hidden partition (Hidden=YES) only when asked for --all, so `submit --partition` of one its users
    may submit to was refused as one Slurm does not have."""
    def sinfo(argv, cwd=None):
        shown = "--all" in argv or "-a" in argv
        return subprocess.CompletedProcess(argv, 0, stdout="normal\ndebug\n" + ("hero\n" if shown else ""))

    monkeypatch.setattr(slurm, "_run", sinfo)
    assert slurm.SlurmCLI().partitions() == ["debug", "hero", "normal"]


def fake_slurm(tmp_path, monkeypatch, **answers):
    """squeue and scontrol on PATH that answer (exit status, stdout, stderr); returns what reads their argvs."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir(parents=True)
    for name, (rc, out, err) in answers.items():
        (tmp_path / f"{name}.out").write_text(out)
        (tmp_path / f"{name}.err").write_text(err)
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\necho "{name} $*" >> {log}\ncat {tmp_path}/{name}.out\n'
                          f'cat {tmp_path}/{name}.err >&2\nexit {rc}\n')
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return lambda: [line.split() for line in log.read_text().splitlines()] if log.exists() else []


def squeue_json(*jobs: tuple[int, str]) -> str:
    return json.dumps({"jobs": [{"job_id": job_id, "job_state": [state], "nodes": "n1"} for job_id, state in jobs]})


def test_status_asks_squeue_for_the_sweeps_jobs_not_the_whole_machines(tmp_path, monkeypatch):
    """status polled `squeue --json --all`, every job of every user of a production machine (tens of thousands),
    and scontrol's list of them all besides once one of the sweep's jobs had left the queue."""
    machine = squeue_json(*((j, "RUNNING") for j in range(900, 960)), (101, "RUNNING"))  # Slurm < 24.05: all
    calls = fake_slurm(tmp_path, monkeypatch, squeue=(0, machine, ""), scontrol=(0, "", ""))
    states = slurm.SlurmCLI().states(["101", "102"])
    assert states["101"].state == "RUNNING" and states["102"].state == "UNKNOWN"  # 102: forgotten
    assert calls() == [["squeue", "--json", "--all", "--jobs=101,102"]]  # no scontrol: squeue answered


def test_a_sweep_of_many_jobs_asks_squeue_in_a_few_calls(tmp_path, monkeypatch):
    calls = fake_slurm(tmp_path, monkeypatch, squeue=(0, squeue_json((8, "PENDING"), (12, "RUNNING")), ""))
    monkeypatch.setattr(slurm, "SQUEUE_JOBS_PER_CALL", 2)
    states = slurm.SlurmCLI().states(["12", "8", "9", "10", "11"])
    assert [s.state for s in states.values()] == ["RUNNING", "PENDING", "UNKNOWN", "UNKNOWN", "UNKNOWN"]
    assert [argv[-1] for argv in calls()] == ["--jobs=8,9", "--jobs=10,11", "--jobs=12"]


def test_one_forgotten_job_is_not_taken_for_a_silent_slurm(tmp_path, monkeypatch):
    """squeue asked for one job fails when slurmctld no longer knows it: the job ended, Slurm answered."""
    calls = fake_slurm(tmp_path, monkeypatch, squeue=(1, "", "slurm_load_jobs error: Invalid job id specified\n"),
               scontrol=(1, "", "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n"))
    assert slurm.SlurmCLI().states(["7"])["7"].state == "UNKNOWN"
    assert [argv[0] for argv in calls()] == ["squeue"]


def test_scontrol_answers_where_squeue_cannot(tmp_path, monkeypatch):
    fake_slurm(tmp_path, monkeypatch, squeue=(1, "", "squeue: error: unable to load openapi plugins\n"),
               scontrol=(0, "JobId=7 JobState=RUNNING NodeList=n1\nJobId=99 JobState=PENDING\n", ""))
    states = slurm.SlurmCLI().states(["7", "8"])
    assert states["7"].state == "RUNNING" and states["8"].state == "UNKNOWN" and "99" not in states
    fake_slurm(tmp_path / "down", monkeypatch, squeue=(1, "", "Unable to contact slurm controller\n"),
               scontrol=(1, "", "Unable to contact slurm controller\n"))
    with pytest.raises(SubmitError, match="Slurm did not answer: squeue: 'Unable to contact slurm controller'"):
        slurm.SlurmCLI().states(["7"])


def test_slurm_2205_squeue_json_with_slurmctld_down_is_no_answer(tmp_path, monkeypatch):
    """Slurm 22.05's squeue --json exits 0 when slurmctld is down, its errors beside an empty job list: every job read
    UNKNOWN (forgotten), so status recorded each running job's run as ended and --resubmit-failed sent it again."""
    down = json.dumps({"meta": {"plugin": {"type": "openapi/v0.0.38"}, "Slurm": {"release": "22.05.8"}},
                       "errors": [{"description": "Failed while looking for jobs", "error_number": -1,
                                   "error": "Unspecified error", "source": "slurm_load_jobs"}], "jobs": []})
    fake_slurm(tmp_path, monkeypatch, squeue=(0, down, ""),
               scontrol=(1, "", "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n"))
    with pytest.raises(SubmitError, match=r"Slurm did not answer: squeue: 'slurm_load_jobs: Failed while looking for "
                                          r"jobs \(Unspecified error\)'; scontrol: .*connect failure"):
        slurm.SlurmCLI().states(["7"])
    fake_slurm(tmp_path / "back", monkeypatch, squeue=(0, down, ""), scontrol=(0, "JobId=7 JobState=RUNNING\n", ""))
    assert slurm.SlurmCLI().states(["7"])["7"].state == "RUNNING"
