"""Pieces of the check that no test-cluster run reaches: the pre-flight hook, nanochat-bench's errors as ReFrame's.

    python -m pytest tests/unit/reframe_checks/test_reframe_checks.py -q
"""

import fnmatch
import re
import runpy
from types import SimpleNamespace

import pytest
import reframe.core.runtime as rt
import reframe.utility.sanity as sn
from reframe.core.exceptions import ConfigError as ReframeConfigError
from reframe.core.exceptions import SanityError
from reframe.core.exceptions import is_severe

from bench import runtimes
from bench.errors import ConfigError
from bench.analysis import why
from bench.analysis.check import load_references
from bench.analysis.columns import perf_units
from bench.reframe_checks import CONFIG_DIR
from bench.reframe_checks.checks import (ENVIRON_FEATURE, nanochat_bench, nccl_net_problem, one_line,
                                         run_problem, runtime_feature)
from bench.workloads.base import EVALUATION, TRAINING

# ReFrame's configuration schema (reframe/schemas/config.json): `alphanum_string` for the features of partitions
# and environments in every 4.x release but 4.10.4, which allows `-` as well; `alphanum_ext_string` (anchored
# since 4.10.1) for the names of systems, partitions and environments. The stricter patterns, so that a config
# that loads with 4.10.4 loads with the others too.
ALPHANUM_STRING = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
ALPHANUM_EXT_STRING = re.compile(r"^[a-zA-Z_](?:[a-zA-Z0-9_-])*$")


def schema_problems(config: dict) -> list[str]:
    """What of a site configuration one of ReFrame's 4.x schemas refuses, or no case of the checks would select:
    a partition's feature that is no runtime's feature."""
    partitions = [p for system in config["systems"] for p in system["partitions"]]
    features = [f for item in partitions + config["environments"] for f in item.get("features", [])]
    names = [s["name"] for s in config["systems"]] + [item["name"] for item in partitions + config["environments"]]
    known = {runtime_feature(r) for r in runtimes.names()} | set(runtimes.names())
    return ([f"feature {f}" for f in features if not ALPHANUM_STRING.match(f)]
            + [f"name {n}" for n in names if not ALPHANUM_EXT_STRING.match(n)]
            + [f"runtime feature {f}" for p in partitions for f in p.get("features", []) if f not in known]
            + [f"environ {e}" for p in partitions for e in p["environs"]
               if e not in {env["name"] for env in config["environments"]}])


@pytest.mark.parametrize("name", ["test_cluster.py", "alps_example.py"])
def test_the_shipped_configs_names_are_valid_in_every_reframe_4_schema(name, monkeypatch):
    """The environment's feature was nanochat-bench, which ReFrame 4.10.1 and 4.11 refuse as a feature: their
    reframe -C refused the shipped configs before it ran anything."""
    monkeypatch.setenv("SCRATCH", "/scratch")
    config = runpy.run_path(str(CONFIG_DIR / name))["site_configuration"]
    assert ENVIRON_FEATURE in [f for env in config["environments"] for f in env["features"]]
    assert schema_problems(config) == []


def test_a_references_file_the_alps_example_names_can_bound_a_run_on_its_gh200s():
    """The example's command set NANOCHAT_BENCH_REFERENCES to results/h200-d20/references.toml, whose references
    all select gpu_name "NVIDIA H200*": no run on the example's GH200 nodes matched one, so none was bounded."""
    text = (CONFIG_DIR / "alps_example.py").read_text()
    named = re.findall(r"(?:NANOCHAT_BENCH_REFERENCES=|references=)(?:\$PWD/)?(\S+)", text)
    gpu = "NVIDIA GH200 120GB"  # torch's name for an Alps node's GPU
    for path in [p for p in named if (CONFIG_DIR.parents[2] / p).is_file()]:  # else the user's own, measured there
        refs = load_references(CONFIG_DIR.parents[2] / path)
        assert any(fnmatch.fnmatchcase(gpu, str(r.where.get("gpu_name", "*"))) for r in refs), path


def test_every_runtimes_feature_is_valid_in_every_reframe_4_schema():
    """A case selected the partitions with the feature podman-hpc or sarus-suite, which no partition can declare
    but with ReFrame 4.10.4: those cases never ran. The runtime's name is refused by the other schemas."""
    assert [r for r in runtimes.names() if not ALPHANUM_STRING.match(runtime_feature(r))] == []
    part = {"name": "gh200", "environs": ["nanochat-bench"], "features": ["bare", runtime_feature("podman-hpc")]}
    config = {"systems": [{"name": "site", "partitions": [part]}],
              "environments": [{"name": "nanochat-bench", "features": [ENVIRON_FEATURE]}]}
    assert schema_problems(config) == []
    part["features"] += ["podman-hpc", "sarus-suite"]
    assert schema_problems(config) == ["feature podman-hpc", "feature sarus-suite"]


def test_a_runtimes_case_selects_the_partitions_with_its_feature():
    """The check asked for +podman-hpc, a feature no partition could declare."""
    with rt.temp_runtime(str(CONFIG_DIR / "test_cluster.py"), "nbtest"):
        variant = nanochat_bench.get_variant_nums(runtime=lambda r: r == "podman-hpc")[0]
        check = nanochat_bench(variant_num=variant)
    assert check.runtime == "podman-hpc" and "+podman_hpc" in check.valid_systems


@pytest.mark.parametrize("runtime_spelling, environ_feature", [("podman_hpc", "nanochat_bench"),
                                                                ("podman-hpc", "nanochat-bench")])
def test_a_feature_spelled_with_a_dash_as_reframe_4_10_4_allows_selects_the_cases(
        tmp_path, runtime_spelling, environ_feature):
    """ReFrame 4.10.4 takes a `-` in a feature: a partition declaring podman-hpc never got that runtime's cases,
    and an environment declaring nanochat-bench made 'Found 0 check(s)'."""
    part = {"name": "gh200", "scheduler": "local", "launcher": "local", "environs": ["nb"],
            "features": ["bare", runtime_spelling]}
    config = {"systems": [{"name": "site", "hostnames": [".*"], "partitions": [part]}],
              "environments": [{"name": "nb", "features": [environ_feature]}]}
    (tmp_path / "site.py").write_text(f"site_configuration = {config!r}\n")
    with rt.temp_runtime(str(tmp_path / "site.py"), "site"):
        for runtime in ("podman-hpc", "bare"):
            check = nanochat_bench(variant_num=nanochat_bench.get_variant_nums(runtime=lambda r: r == runtime)[0])
            chosen = rt.valid_sysenv_comb(check.valid_systems, check.valid_prog_environs)
            assert [(p.fullname, [e.name for e in envs]) for p, envs in chosen.items()] == [("site:gh200", ["nb"])]


def test_preflight_busbw_is_a_performance_variable_read_from_the_row():
    """The check reports the row's figures: the pre-flight's busbw as run.json records it, in GB/s."""
    pre = {"preflight": {"backend": "nccl", "busbw_gbps": {"all_reduce": 182.5, "all_gather": 90}}}
    row = why.section_fields(pre)
    assert {k: v for k, v in row.items() if k.startswith("busbw_")} == \
        {"busbw_all_reduce_gbps": 182.5, "busbw_all_gather_gbps": 90.0}
    units = perf_units(TRAINING)
    assert units["busbw_all_reduce_gbps"] == "GB/s" == perf_units(EVALUATION)["busbw_all_reduce_gbps"]
    assert units["tok_per_sec_per_gpu"] == "tok/s" and "tok_per_sec_per_gpu" not in perf_units(EVALUATION)
    assert not any(k.startswith("busbw_") for k in why.section_fields({"preflight": None}))
    fast = {"preflight": {"busbw_gbps": {"all_reduce": "fast"}}}
    assert not any(k.startswith("busbw_") for k in why.section_fields(fast))


def test_the_network_is_checked_where_the_partition_names_one_and_nodes_talk():
    slingshot = {"network": {"backend": "nccl", "net": "AWS Libfabric", "net_provider": "cxi"}}
    assert nccl_net_problem(slingshot, "AWS Libfabric", nodes=2) is None
    assert nccl_net_problem({"network": {"net": "Socket"}}, "AWS Libfabric", nodes=2) == \
        "NCCL's network between nodes was 'Socket', the partition expects 'AWS Libfabric'"
    assert "records none" in nccl_net_problem({}, "AWS Libfabric", nodes=4)
    assert nccl_net_problem({}, "AWS Libfabric", nodes=1) is None and nccl_net_problem({}, "", nodes=4) is None


def test_the_network_is_judged_as_the_runs_own_gate_judges_it():
    """The gate (bench/netgate.py) let a run through whose NCCL said 'IB' for a partition's 'ib', or whose only
    proof was its NET/IB transport lines; sanity then failed the same run ('records none', 'was IB')."""
    assert nccl_net_problem({"network": {"net": "IB"}}, "ib", nodes=2) is None
    assert nccl_net_problem({"network": {"transports": {"NET/IB": 8}}}, "IB", nodes=2) is None
    assert nccl_net_problem({"network": {"transports": {"NET/Socket": 8}}}, "IB", nodes=2) == \
        "NCCL's network between nodes was 'Socket', the partition expects 'IB'"


def test_expected_failures_reach_reframe_as_its_own_soft_errors():
    with pytest.raises(ReframeConfigError, match="^gpus_per_node is required$") as info:
        with one_line(ReframeConfigError):
            raise ConfigError("gpus_per_node is required")
    assert not is_severe(info.type, info.value, info.tb)  # ReFrame prints it as one line, no traceback
    with pytest.raises(KeyError):  # a bug stays a bug
        with one_line(ReframeConfigError):
            raise KeyError("x")


def test_a_run_without_a_status_is_judged_by_why_its_run_json_was_not_read(tmp_path):
    """collect gives a run whose run.json cannot be read no status; the check said 'run.json status is None: no
    message', never the reason its row carries."""
    from bench.analysis.rundir import read_run_dir

    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "run.json").write_text("")
    row = read_run_dir(tmp_path / "r")
    assert row["status"] is None and row["skip_reason"].startswith("run.json is empty")
    assert run_problem(row, TRAINING) == f"run {row['run_id']} has no status: {row['skip_reason']}"
    assert run_problem({**row, "status": float("nan")}, TRAINING) == run_problem(row, TRAINING)  # from a table
    assert run_problem({**row, "skip_reason": None}, TRAINING) == "run.json status is None: no message"


@pytest.mark.parametrize("text, why", [("garbage\n", "run.json is not valid JSON (Expecting value: line 1)"),
                                       ("", "run.json is empty (nanochat-bench replaces it whole: a copy or "
                                             "another tool emptied it)")])
def test_a_damaged_run_json_fails_sanity_with_its_reason(make_run, text, why):
    """Settling the run raised the reader's error, whose advice is the launcher's ('move it aside ... for the run
    to start anew'), and ReFrame printed it with a traceback; a run whose events end well gave no reason at all."""
    run_dir = make_run("r1")
    (run_dir / "run.json").write_text(text)
    check = SimpleNamespace(run_dir=str(run_dir), job=SimpleNamespace(exitcode=0), _kind=TRAINING, num_nodes=1)
    check.row = lambda: nanochat_bench.row(check)
    with pytest.raises(SanityError) as info:
        sn.evaluate(nanochat_bench.run_finished_ok(check))
    assert str(info.value) == f"run r1 has no status: {why}"
    assert (run_dir / "run.json").read_text() == text  # left as it was found


def test_a_run_directory_removed_during_the_job_fails_sanity_saying_so(tmp_path):
    """Setup writes run.json before ReFrame's job starts: its absence said 'the batch script never ran' of a batch
    script that ran, when something removed the run directory."""
    check = SimpleNamespace(run_dir=str(tmp_path / "gone"), job=SimpleNamespace(exitcode=0, stdout="rfm_job.out"))
    check.row = lambda: nanochat_bench.row(check)
    with pytest.raises(SanityError) as info:
        sn.evaluate(nanochat_bench.run_finished_ok(check))
    assert str(info.value) == (f"no run.json in {tmp_path / 'gone'}: setup wrote one, so the run directory was "
                               f"removed or moved while ReFrame's job ran (see rfm_job.out)")


def test_a_run_json_that_cannot_be_opened_fails_sanity_with_its_reason(make_run):
    """A run.json that cannot be opened at all (here a directory of that name; EACCES, EIO alike) raised the
    OSError of settling the run out of sanity, and ReFrame printed it with a traceback."""
    run_dir = make_run("r1")
    (run_dir / "run.json").unlink()
    (run_dir / "run.json").mkdir()
    check = SimpleNamespace(run_dir=str(run_dir), job=SimpleNamespace(exitcode=0), _kind=TRAINING, num_nodes=1)
    check.row = lambda: nanochat_bench.row(check)
    with pytest.raises(SanityError) as info:
        sn.evaluate(nanochat_bench.run_finished_ok(check))
    assert str(info.value) == "run r1 has no status: run.json is a directory, not a regular file (not read)"
    assert (run_dir / "run.json").is_dir()  # left as it was found


def test_a_run_json_that_cannot_be_settled_fails_sanity_with_its_reason(make_run, monkeypatch):
    """A run left running whose run.json reads but cannot be rewritten (ENOSPC, a read-only filesystem) raised the
    OSError out of sanity too."""
    import errno
    from bench import contract

    run_dir = make_run("r1", status="running")

    def full(*_, **__):
        raise OSError(errno.ENOSPC, "No space left on device", str(run_dir / "run.json.tmp"))
    monkeypatch.setattr(contract, "close_unfinished", full)
    check = SimpleNamespace(run_dir=str(run_dir), job=SimpleNamespace(exitcode=0), _kind=TRAINING, num_nodes=1)
    check.row = lambda: nanochat_bench.row(check)
    with pytest.raises(SanityError) as info:
        sn.evaluate(nanochat_bench.run_finished_ok(check))
    assert str(info.value) == f"run r1 (running) could not be settled: No space left on device ({run_dir}/run.json.tmp)"


def test_a_run_whose_figures_the_reader_refused_is_judged_by_the_readers_reason(make_run):
    """A run.json that breaks the run contract but says status ok: its figures are not computed, so its row has no
    step count, and the check said 'recorded no step events' of a metrics.jsonl full of steps."""
    import json
    from bench.analysis.rundir import read_run_dir

    run_dir = make_run("r1")
    manifest = json.loads((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(json.dumps({**manifest, "nodes": "one"}))
    row = read_run_dir(run_dir)
    assert row["status"] == "ok" and row["skip_reason"].startswith("run.json does not follow the run contract")
    assert run_problem(row, TRAINING) == f"run r1 cannot be measured: {row['skip_reason']}"


def test_a_run_json_whose_stat_fails_fails_sanity_with_its_reason(make_run, monkeypatch):
    """On Python 3.11, Path.exists() raises the OSError of a stat that fails other than with ENOENT (EACCES, EIO),
    and it escaped sanity with a traceback. The stat is made to fail here (EIO), as root passes a mode of 000."""
    import errno
    import os

    run_dir = make_run("r1")

    def failing(real):
        def stat(path, *args, **kwargs):
            if os.fspath(path).endswith("run.json"):
                raise OSError(errno.EIO, "Input/output error", os.fspath(path))
            return real(path, *args, **kwargs)
        return stat
    monkeypatch.setattr(os, "stat", failing(os.stat))
    monkeypatch.setattr(os, "lstat", failing(os.lstat))
    check = SimpleNamespace(run_dir=str(run_dir), job=SimpleNamespace(exitcode=0), _kind=TRAINING, num_nodes=1)
    check.row = lambda: nanochat_bench.row(check)
    with pytest.raises(SanityError) as info:
        sn.evaluate(nanochat_bench.run_finished_ok(check))
    assert str(info.value) == "run r1 has no status: run.json unreadable: Input/output error"
