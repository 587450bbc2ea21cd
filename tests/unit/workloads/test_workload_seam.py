"""Adding a workload is one module plus one registry line: a tiny stage, declared here with batch rules of
its own (a fixed evaluation budget split over the ranks, impossible when a rank would get no sequence),
is planned, tabled, assembled and rendered by the launch layer with no special case for it.

    python -m pytest tests/unit/workloads/test_workload_seam.py -q
"""

import sys
import types

import pytest

from bench import workloads
from bench.errors import ConfigError
from bench.launch.job import LaunchOptions, assemble
from bench.launch.plan import Sweep, format_table
from bench.launch.render import render_sbatch
from bench.workloads.base import PointPlan, Settings, Workload
from bench.workloads.torchrun import torchrun_command

SEQ = 64


class TinyLoss(Workload):
    """A stand-in for a later speedrun stage (base_loss): evaluate `eval_tokens` tokens, split evenly."""

    name = "tiny_loss"
    run_workload = "nanochat-tiny_loss"
    PLAN_COLUMNS = (("eval_bs", "eval_batch", "{}"), ("eval_tokens", "eval_tokens", "{:,}"))

    def settings(self, train, scaling):
        unknown = sorted(set(train) - {"eval_tokens"})
        if unknown:
            raise ConfigError(f"tiny_loss takes --train-arg eval_tokens=N only, not {', '.join(unknown)}")
        tokens = int(train.get("eval_tokens", 4096))
        return Settings(tokens, (f"--eval_tokens={tokens}",), {"eval_tokens": tokens})

    def uses_gpus(self, settings):
        return False

    def plan(self, settings, point):
        per_rank = settings.config // (point.ranks * SEQ)
        if per_rank == 0:
            return PointPlan(reason=f"{settings.config} eval tokens give {point.ranks} ranks no sequence of {SEQ}")
        return PointPlan(train_argv=(*settings.argv, f"--eval_batch={per_rank}"), env=(("TINY_SPLIT", "val"),),
                         columns=(("eval_batch", per_rank), ("eval_tokens", settings.config)))

    def launch_command(self, python, nodes, nproc_per_node, argv, containerised, numa_binding=None,
                       join_timeout_s=None):
        return torchrun_command(python, nproc_per_node, argv, nnodes=nodes, module="tiny.base_loss",
                                join_timeout_s=join_timeout_s)

    def manifest_config(self, argv):
        return {"max_seq_len": SEQ}


@pytest.fixture
def tiny_registered(monkeypatch):
    module = types.ModuleType("tiny_loss_workload")
    module.WORKLOAD = TinyLoss()
    monkeypatch.setitem(sys.modules, "tiny_loss_workload", module)
    monkeypatch.setitem(workloads._MODULES, "tiny_loss", "tiny_loss_workload")  # the one registry line


def test_a_registered_stage_plans_its_own_batch_rules(tiny_registered):
    sweep = Sweep([1, 2, 64], 2, ["bare"], train={"eval_tokens": "4096"}, workload="tiny_loss")
    one, two, many = sweep.points()
    assert (one.plan.column("eval_batch"), two.plan.column("eval_batch")) == (32, 16)
    assert one.train_argv == ("--eval_tokens=4096", "--eval_batch=32") and one.env == (("TINY_SPLIT", "val"),)
    assert not many.possible and "give 128 ranks no sequence" in many.reason
    text = format_table(sweep)
    header = text.splitlines()[0].split()
    assert header[4:6] == ["eval_bs", "eval_tokens"] and "device_bs" not in header
    assert "4,096" in text and "impossible: 4096 eval tokens" in text
    assert "workload: tiny_loss --eval_tokens=4096" in text and "no estimate on CPU" in text


def test_a_registered_stage_is_assembled_and_rendered_like_any_other(tiny_registered, tmp_path):
    sweep = Sweep([2], 2, ["bare"], train={}, workload="tiny_loss")
    opts = LaunchOptions(base_dir=str(tmp_path / "base"), python="/usr/bin/python3", check_images=False)
    [job] = assemble(sweep, opts, tmp_path / "sweep", note=lambda _: None)
    text = render_sbatch(job)
    assert "-m tiny.base_loss -- --eval_tokens=4096 --eval_batch=16" in text
    assert "--deadline=" not in text  # the stage declares no deadline flag
    assert "export TINY_SPLIT=val" in text and "#SBATCH --gpus-per-node" not in text
    assert "rdzvport.py" in text  # it meets at torchrun's rendezvous, so the port is checked too
    assert job.runs[0].manifest["workload"] == "nanochat-tiny_loss"
    assert job.runs[0].manifest["config"] == {"max_seq_len": SEQ}


def test_an_unregistered_name_is_refused_listing_the_registered_ones():
    with pytest.raises(ConfigError, match="unknown workload 'tiny_loss'; valid: nanochat, nntile"):
        Sweep([1], 2, ["bare"], workload="tiny_loss")


def test_a_sweep_is_frozen_and_plans_each_node_count_once(tiny_registered, tmp_path, monkeypatch):
    calls = []
    plan = TinyLoss.plan
    monkeypatch.setattr(TinyLoss, "plan", lambda self, settings, point: calls.append(point.nodes) or
                        plan(self, settings, point))
    sweep = Sweep([1, 2], 2, ["bare", "podman"], repeats=3, workload="tiny_loss")
    opts = LaunchOptions(base_dir=str(tmp_path / "base"), python="/usr/bin/python3", check_images=False)
    format_table(sweep)
    assert len(assemble(sweep, opts, tmp_path / "sweep", compare=True, note=lambda _: None)) == 2
    assert len(sweep.points()) == 12 and sorted(calls) == [1, 2]
    with pytest.raises(AttributeError):
        sweep.scaling = "strong"
