"""The faults, one function each, with the goal each must meet (issue 15).

A case stages its fault against real processes (tests/faults/harness.py) and returns an Outcome; its
Expect says what a run that fails well looks like: every process gone within the bound, the status and
message in run.json, metrics.jsonl readable, the run listed by `collect` and `report`, no traceback.
tests/faults/test_faults.py runs them; benchmarks/fault_table.py prints their table.
"""

import contextlib
import functools
import http.server
import itertools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from bench.nanochat.download import READ_TIMEOUT_S
from bench.runside.heartbeat import SILENT_AFTER_S
from harness import (FOREVER, TINY, TRACEBACK, Command, Expect, Outcome, Unavailable, cli, ext4_image, fill,
                     is_rank, is_torchrun, outcome_of, python, repo_env, run_env, starting, steps_recorded, tmpfs,
                     wait_steps, wrapper_argv)

LOCAL_BOUND_S = 20.0  # after the fault; a tiny CPU run that fails fast ends in a few seconds
START_BOUND_S = 60.0  # from launch, for faults that hit at start (start-up of 2 ranks is ~15 s on 2 cores)
SIGNAL_CANCEL = {signal.SIGTERM: r"SIGTERM|signal 15", signal.SIGINT: r"SIGINT|signal 2\b|interrupt",
                 signal.SIGHUP: r"SIGHUP|signal 1\b|hang", signal.SIGQUIT: r"SIGQUIT|signal 3\b"}


@dataclass
class Ctx:
    work: Path  # a fresh directory for this case
    base_dir: Path  # NANOCHAT_BASE_DIR with the tiny shards and tokenizer (tests/conftest.py)
    cap_s: float | None = None  # wait at least this long before killing what is left (the table's setting)
    cluster: object = None  # a started tests/faults/conftest.py FaultCluster, for the Slurm cases


@dataclass
class Case:
    name: str
    title: str  # the fault, as the table names it
    run: Callable[[Ctx], Outcome]
    expect: Expect
    slurm: bool = False
    waits: bool = False  # most of its time waits (a stopped rank, a silent mirror): run beside the others (test_faults)

    def cap(self, ctx: Ctx) -> float:
        return max(self.expect.bound_s, ctx.cap_s or 0)


CASES: list[Case] = []


def case(title: str, expect: Expect, slurm: bool = False, waits: bool = False):
    def register(fn):
        CASES.append(Case(fn.__name__, title, fn, expect, slurm, waits))
        return fn
    return register


def by_name(name: str) -> Case:
    return next(c for c in CASES if c.name == name)


def _cap(name: str, ctx: Ctx) -> float:
    return by_name(name).cap(ctx)


# -------------------------------------------------------------------------------------------------
# Local 2-rank runs through `nanochat-bench train`


def train_fault(ctx: Ctx, name: str, inject: Callable[[Command], None] | None, train_args: list[str],
                nproc: int = 2, base_dir: Path | None = None, steps: int = 3, tty: bool = False,
                run_dir: Path | None = None, analyse: bool = True) -> Outcome:
    """Start the wrapper; with `inject`, hit the run once it has `steps` steps, else time from launch."""
    run_dir = run_dir or ctx.work / "runs" / "faults" / name
    with starting():
        cmd = Command(wrapper_argv(run_dir, train_args, nproc), ctx.work / "cmd",
                      env=run_env(base_dir or ctx.base_dir), cwd=ctx.work, tty=tty)
        if inject is not None:
            _started(cmd, lambda: wait_steps(cmd, run_dir, steps))
    try:
        since = cmd.t_start
        if inject is not None:
            since = time.time()
            inject(cmd)
        seconds, left = cmd.wait_gone(_cap(name, ctx), since)
        return outcome_of(name, cmd, run_dir, seconds, left, ctx.work, analyse=analyse)
    finally:
        cmd.cleanup()


def _started(cmd: Command, wait: Callable[[], None]) -> None:
    """Wait for the run to reach the fault's moment; a run that never does is ended here, not left behind."""
    try:
        wait()
    except BaseException:
        cmd.cleanup()
        raise


def _signal_rank(rank: int, sig: int):
    def inject(cmd: Command) -> None:
        os.kill(cmd.tracker.find(is_rank(rank)).pid, sig)
    return inject


def _signal_torchrun(sig: int):
    def inject(cmd: Command) -> None:
        os.kill(cmd.tracker.find(is_torchrun).pid, sig)
    return inject


def _signal_wrapper(sig: int):
    def inject(cmd: Command) -> None:
        cmd.proc.send_signal(sig)
    return inject


DISK_FULL_AT_CHECKPOINTS = r"(No space left|disk full).*base_checkpoints|base_checkpoints.*(No space|full)"
DIED = r"rank {r}.*(SIGKILL|signal 9|killed|died|exit)|(SIGKILL|signal 9|killed|died|exit).*rank {r}"


@case("kill -9 rank 0", Expect(LOCAL_BOUND_S, ("failed",), DIED.format(r=0)))
def kill9_rank0(ctx):
    return train_fault(ctx, "kill9_rank0", _signal_rank(0, signal.SIGKILL), [*TINY, FOREVER])


@case("kill -9 rank 1", Expect(LOCAL_BOUND_S, ("failed",), DIED.format(r=1)))
def kill9_rank1(ctx):
    return train_fault(ctx, "kill9_rank1", _signal_rank(1, signal.SIGKILL), [*TINY, FOREVER])


@case("SIGSTOP rank 1 (hung rank; default flags)", Expect(SILENT_AFTER_S + LOCAL_BOUND_S, ("hung",), r"rank 1\b"),
      waits=True)
def sigstop_rank1(ctx):
    return train_fault(ctx, "sigstop_rank1", _signal_rank(1, signal.SIGSTOP), [*TINY, FOREVER])


@case("SIGTERM to the `nanochat-bench train` wrapper",
      Expect(LOCAL_BOUND_S, ("cancelled",), SIGNAL_CANCEL[signal.SIGTERM]))
def sigterm_wrapper(ctx):
    return train_fault(ctx, "sigterm_wrapper", _signal_wrapper(signal.SIGTERM), [*TINY, FOREVER])


@case("SIGINT to the `nanochat-bench train` wrapper",
      Expect(LOCAL_BOUND_S, ("cancelled",), SIGNAL_CANCEL[signal.SIGINT]))
def sigint_wrapper(ctx):
    return train_fault(ctx, "sigint_wrapper", _signal_wrapper(signal.SIGINT), [*TINY, FOREVER])


@case("SIGQUIT (Ctrl-\\) to the `nanochat-bench train` wrapper",
      Expect(LOCAL_BOUND_S, ("cancelled",), SIGNAL_CANCEL[signal.SIGQUIT]))
def sigquit_wrapper(ctx):
    """Regression: the wrapper did not take SIGQUIT, so it died at once (a core dump where allowed), and torchrun,
    stopped by the kernel's SIGTERM (PR_SET_PDEATHSIG), recorded the run cancelled by a SIGTERM nobody sent, without
    the launcher's exit, wall and CPU time."""
    return train_fault(ctx, "sigquit_wrapper", _signal_wrapper(signal.SIGQUIT), [*TINY, FOREVER])


@case("SIGTERM to torchrun", Expect(LOCAL_BOUND_S, ("cancelled",), SIGNAL_CANCEL[signal.SIGTERM]))
def sigterm_torchrun(ctx):
    return train_fault(ctx, "sigterm_torchrun", _signal_torchrun(signal.SIGTERM), [*TINY, FOREVER])


@case("SIGINT to torchrun", Expect(LOCAL_BOUND_S, ("cancelled",), SIGNAL_CANCEL[signal.SIGINT]))
def sigint_torchrun(ctx):
    return train_fault(ctx, "sigint_torchrun", _signal_torchrun(signal.SIGINT), [*TINY, FOREVER])


def _hang_up(cmd: Command) -> None:
    """What closing a terminal does to a job: the terminal goes, and the shell sends SIGHUP to the group."""
    cmd.hang_up()
    os.killpg(cmd.proc.pid, signal.SIGHUP)


@case("terminal closed: SIGHUP to the process group, stdout/stderr gone",
      Expect(LOCAL_BOUND_S, ("cancelled",), SIGNAL_CANCEL[signal.SIGHUP]))
def sighup_terminal(ctx):
    return train_fault(ctx, "sighup_terminal", _hang_up, [*TINY, FOREVER], tty=True)


@case("kill -9 rank 1 mid-accumulation (8 micro-steps)", Expect(LOCAL_BOUND_S, ("failed",), DIED.format(r=1)))
def kill9_mid_accumulation(ctx):
    args = [a for a in TINY if not a.startswith("--total_batch_size")] + ["--total_batch_size=1024", FOREVER]
    return train_fault(ctx, "kill9_mid_accumulation", _signal_rank(1, signal.SIGKILL), args, steps=2)


# -------------------------------------------------------------------------------------------------
# Trainer faults that end well with default flags (issue 23)


def _stop_rank_once_in_the_group(rank: int):
    """SIGSTOP a rank as soon as its heartbeat says it joined the process group: before its first step
    (pre-flight, model, data). Before that it waits inside torch's rendezvous, which has its own timeout."""
    from bench.runside.heartbeat import STARTUP_EVENTS

    def joined(beat: Path) -> bool:
        try:
            return json.loads(beat.read_text()).get("event") not in STARTUP_EVENTS
        except (OSError, ValueError):
            return False

    def inject(cmd: Command, run_dir: Path) -> None:
        beat = run_dir / ".heartbeat" / f"rank{rank}.json"
        deadline = time.time() + START_BOUND_S
        while not joined(beat) and time.time() < deadline and cmd.rc is None:
            time.sleep(0.02)
        os.kill(cmd.tracker.find(is_rank(rank)).pid, signal.SIGSTOP)
    return inject


def _no_step_before_stop(o: Outcome) -> list[str]:
    return [] if o.facts.get("steps_at_fault") == 0 else [f"the fault hit after {o.facts.get('steps_at_fault')} steps"]


@case("SIGSTOP rank 1 before the first step (default flags)",
      Expect(SILENT_AFTER_S + LOCAL_BOUND_S, ("hung",), r"rank 1\b", extra=_no_step_before_stop), waits=True)
def sigstop_rank1_before_first_step(ctx):
    run_dir = ctx.work / "runs" / "faults" / "sigstop_rank1_before_first_step"
    with starting():
        cmd = Command(wrapper_argv(run_dir, [*TINY, FOREVER]), ctx.work / "cmd", env=run_env(ctx.base_dir),
                      cwd=ctx.work)
        _started(cmd, lambda: _stop_rank_once_in_the_group(1)(cmd, run_dir))
    try:
        steps = steps_recorded(run_dir)
        seconds, left = cmd.wait_gone(_cap("sigstop_rank1_before_first_step", ctx), time.time())
        o = outcome_of("sigstop_rank1_before_first_step", cmd, run_dir, seconds, left, ctx.work)
        o.facts["steps_at_fault"] = steps
        return o
    finally:
        cmd.cleanup()


JOIN_S = 30.0  # the trainer's default --join_timeout_s on one node (bench/runside/join.py)


def _ended_soon_after_rank0_waited(o: Outcome) -> list[str]:
    """The bound that matters: from rank 0 reaching the process group (its `imports_done` event) to the
    last process gone, the join bound plus a failing run's usual end."""
    waited = o.facts.get("after_rank0_waited_s")
    if waited is None:
        return ["rank 0 recorded no `imports_done` event"]
    bound = JOIN_S + LOCAL_BOUND_S
    return [] if waited <= bound else [f"the run ended {waited:.0f} s after rank 0 began to wait (bound {bound:.0f} s)"]


@case("SIGSTOP rank 1 before it joins the process group (default flags)",
      Expect(START_BOUND_S + JOIN_S, ("hung",), r"rank 1\b.*(join|process group)",
             extra=_ended_soon_after_rank0_waited), waits=True)
def sigstop_rank1_before_join(ctx):
    run_dir = ctx.work / "runs" / "faults" / "sigstop_rank1_before_join"
    with starting():
        cmd = Command(wrapper_argv(run_dir, [*TINY, FOREVER]), ctx.work / "cmd", env=run_env(ctx.base_dir),
                      cwd=ctx.work)
        # stopped as soon as its process exists: before its imports, its first event and its first beat
        _started(cmd, lambda: os.kill(cmd.tracker.find(is_rank(1), timeout=START_BOUND_S).pid, signal.SIGSTOP))
    try:
        since = time.time()
        seconds, left = cmd.wait_gone(_cap("sigstop_rank1_before_join", ctx), since)
        o = outcome_of("sigstop_rank1_before_join", cmd, run_dir, seconds, left, ctx.work)
        waited = [e["t"] for e in _events(run_dir) if e.get("event") == "imports_done"]
        if waited and seconds is not None:
            o.facts["after_rank0_waited_s"] = since + seconds - waited[0]
        return o
    finally:
        cmd.cleanup()


def _events(run_dir: Path) -> list[dict]:
    from bench.analysis.rundir import read_events

    path = run_dir / "metrics.jsonl"
    return read_events(path, []) if path.exists() else []


@case("SIGSTOP rank 1 during validation (default flags)",
      Expect(SILENT_AFTER_S + LOCAL_BOUND_S, ("hung",), r"rank 1\b"), waits=True)
def sigstop_rank1_in_validation(ctx):
    # every step validates over 400 passes: nearly all of the run's time is validation
    args = [a for a in TINY if not a.startswith("--eval_every")] + ["--eval_every=1", "--eval_tokens=51200", FOREVER]
    return train_fault(ctx, "sigstop_rank1_in_validation", _signal_rank(1, signal.SIGSTOP), args, steps=1)


@case("a re-run into the directory of a former 4-rank run, rank 1 stopped",
      Expect(SILENT_AFTER_S + LOCAL_BOUND_S, ("hung",), r"rank 1\b"), waits=True)
def rerun_former_4rank_dir(ctx):
    from tests.support.synthetic import write_heartbeat

    run_dir = ctx.work / "runs" / "faults" / "rerun_former_4rank_dir"
    for rank in range(4):  # the beats an earlier 4-rank run left behind, minutes old
        write_heartbeat(run_dir, rank, time.time() - 600, 12)
    return train_fault(ctx, "rerun_former_4rank_dir", _signal_rank(1, signal.SIGSTOP), [*TINY, FOREVER],
                       run_dir=run_dir)


@case("kill -9 of the torchrun agent (the ranks must not train on as orphans)",
      Expect(LOCAL_BOUND_S, ("failed",), r"torchrun agent .* gone"))
def kill9_torchrun(ctx):
    return train_fault(ctx, "kill9_torchrun", _signal_torchrun(signal.SIGKILL), [*TINY, FOREVER])


PAUSE_S = SILENT_AFTER_S + 15  # longer than a heartbeat may be silent and than a steady collective may wait


def _pause_wrapper(cmd: Command) -> None:
    """Ctrl-Z of the wrapper: nobody reads the ranks' output, the pipe fills, then it goes on."""
    cmd.proc.send_signal(signal.SIGSTOP)
    time.sleep(PAUSE_S)
    cmd.proc.send_signal(signal.SIGCONT)


def _collected_ok(o: Outcome) -> list[str]:
    return [] if o.listed and o.listed[0] == "ok" else [f"collect lists {o.listed}, not an ok row"]


# an ok run is a row of the report's results, not of its failures table: collect's row is what is checked
@case(f"the wrapper paused for {PAUSE_S:.0f} s (Ctrl-Z): the ranks' stdout pipe full",
      Expect(PAUSE_S + 120, ("ok",), exit_zero=True, listed=False, extra=_collected_ok), waits=True)
def wrapper_paused(ctx):
    return train_fault(ctx, "wrapper_paused", _pause_wrapper, [*TINY, "--num_iterations=1500"])


def _first_run_kept(o: Outcome) -> list[str]:
    return [] if o.facts.get("kept") else [f"the first run's record changed: {o.facts.get('first')}"]


def _first_run(ctx: Ctx, run_dir: Path, args: list[str]) -> Command:
    return Command(wrapper_argv(run_dir, args), ctx.work / "first", env=run_env(ctx.base_dir), cwd=ctx.work)


def _second_run_outcome(ctx: Ctx, name: str, run_dir: Path, first_record) -> Outcome:
    cmd = Command(wrapper_argv(run_dir, [*TINY, "--num_iterations=5"]), ctx.work / "second",
                  env=run_env(ctx.base_dir), cwd=ctx.work)
    try:
        seconds, left = cmd.wait_gone(_cap(name, ctx), cmd.t_start)
        o = outcome_of(name, cmd, None, seconds, left, ctx.work)
    finally:
        cmd.cleanup()
    o.facts["first"] = first_record()
    return o


@case("the same --run-dir as a finished ok run", Expect(START_BOUND_S, refused=True, message=r"already holds a run",
                                                        extra=_first_run_kept))
def rerun_finished_dir(ctx):
    run_dir = ctx.work / "runs" / "faults" / "rerun_finished_dir"
    first = _first_run(ctx, run_dir, [*TINY, "--num_iterations=3"])
    try:
        first.wait_gone(START_BOUND_S + 60, first.t_start)
    finally:
        first.cleanup()
    before = (run_dir / "run.json").read_text(), (run_dir / "metrics.jsonl").read_text()
    o = _second_run_outcome(ctx, "rerun_finished_dir", run_dir,
                            lambda: ((run_dir / "run.json").read_text(), (run_dir / "metrics.jsonl").read_text()))
    o.facts["kept"] = o.facts["first"] == before and '"status": "ok"' in before[0]
    return o


@case("two runs started at once with one --run-dir",
      Expect(START_BOUND_S, refused=True, message=r"in use by another run", extra=_first_run_kept))
def concurrent_run_dir(ctx):
    run_dir = ctx.work / "runs" / "faults" / "concurrent_run_dir"
    first = _first_run(ctx, run_dir, [*TINY, FOREVER])
    try:
        deadline = time.time() + START_BOUND_S
        while not (run_dir / ".lock").exists() or not (run_dir / ".lock").read_text():
            assert time.time() < deadline and first.rc is None, first.output()[-3000:]
            time.sleep(0.05)  # the first wrapper holds the lock; its trainer is still starting
        o = _second_run_outcome(ctx, "concurrent_run_dir", run_dir, lambda: first.rc)
        wait_steps(first, run_dir, 2)  # the first run trains on, undisturbed
        o.facts["kept"] = o.facts["first"] is None and steps_recorded(run_dir) >= 2
        return o
    finally:
        first.cleanup()


def _json_clean(o: Outcome) -> list[str]:
    text = (o.run_dir / "run.json").read_text() + (o.run_dir / "metrics.jsonl").read_text()
    return [f"bare {w} in the run's JSON" for w in ("NaN", "Infinity") if w in text]


@case("loss diverging (every LR 1e4)", Expect(START_BOUND_S, ("diverged",), r"diverged at step \d+", extra=_json_clean))
def diverged_lr(ctx):
    lrs = ["--matrix_lr=1e4", "--embedding_lr=1e4", "--unembedding_lr=1e4"]
    return train_fault(ctx, "diverged_lr", None, [*TINY, "--num_iterations=200", *lrs])


@case("a learning rate of nan", Expect(START_BOUND_S, refused=True, message=r"--matrix_lr=nan"))
def lr_nan(ctx):
    return command_fault(ctx, "lr_nan", [wrapper_argv(ctx.work / "runs" / "lr_nan", [*TINY, "--matrix_lr=nan"])])


def _saved_checkpoint(ctx: Ctx, tag: str) -> tuple[list[str], Path]:
    """A 2-rank run that saves its checkpoint at step 2 (model, meta, one optimizer shard per rank): the
    flags of a run with that tag, and the checkpoint directory."""
    args = [a for a in TINY if not a.startswith("--model_tag")] + [f"--model_tag={tag}"]
    first = _first_run(ctx, ctx.work / "runs" / "faults" / f"{tag}_saved", [*args, "--num_iterations=2",
                                                                           "--save_every=2"])
    try:
        first.wait_gone(START_BOUND_S + 60, first.t_start)
    finally:
        first.cleanup()
    return args, ctx.base_dir / "base_checkpoints" / tag


def _cut_short(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:1000])  # as a full disk or a killed copy leaves a file


@case("a corrupt checkpoint on resume", Expect(START_BOUND_S, ("failed",), r"model_000002\.pt.*damaged"))
def corrupt_checkpoint_resume(ctx):
    args, checkpoints = _saved_checkpoint(ctx, "corrupt_resume")
    _cut_short(checkpoints / "model_000002.pt")
    return train_fault(ctx, "corrupt_checkpoint_resume", None, [*args, "--num_iterations=4", "--resume_from_step=2"])


# rank 1's own line, not torchrun's "rank 1 exited with status 1" nor rank 0's "lost contact" echo
@case("a truncated optimizer shard on resume (rank 1's optim_000002_rank1.pt)",
      Expect(START_BOUND_S, ("failed",), r"^rank 1: \S*optim_000002_rank1\.pt cannot be read.*damaged"))
def truncated_optim_shard_resume(ctx):
    args, checkpoints = _saved_checkpoint(ctx, "optim_resume")
    _cut_short(checkpoints / "optim_000002_rank1.pt")
    return train_fault(ctx, "truncated_optim_shard_resume", None,
                       [*args, "--num_iterations=4", "--resume_from_step=2"])


# -------------------------------------------------------------------------------------------------
# Commands, one after the other, each bounded by the case's cap


def run_command(ctx: Ctx, name: str, argv: list[str], work: Path, cwd: Path | None = None,
                env: dict | None = None) -> Outcome:
    """One command, bounded by the case's cap; its stderr lines (non-empty) in facts["stderr"]."""
    cmd = Command(argv, work, env=env, cwd=cwd or ctx.work)
    try:
        seconds, left = cmd.wait_gone(_cap(name, ctx), cmd.t_start)
        o = outcome_of(name, cmd, None, seconds, left, ctx.work)
    finally:
        cmd.cleanup()
    o.facts["argv"] = argv
    o.facts["stderr"] = [ln for ln in cmd.stderr_path.read_text(errors="replace").splitlines() if ln.strip()]
    return o


def command_fault(ctx: Ctx, name: str, argv_list: list[list[str]], cwd: Path | None = None,
                  env: dict | None = None) -> Outcome:
    """Run commands one after the other; the outcome of the first that fails (or of the last)."""
    o = None
    for i, argv in enumerate(argv_list):
        o = run_command(ctx, name, argv, ctx.work / f"cmd{i}", cwd, env)
        if o.seconds is None or o.rc != 0 or o.traceback:
            break
    return o


def combined(each: list[Outcome]) -> Outcome:
    """Commands that each met the fault on their own, as one row: the first one's outcome, the longest of
    their times, a traceback if any printed one, and all of them in facts["each"]."""
    return replace(
        each[0], facts={**each[0].facts, "each": each}, traceback=any(x.traceback for x in each),
        left_alive=[m for x in each for m in x.left_alive],
        seconds=None if any(x.seconds is None for x in each) else max(x.seconds for x in each))


def each_command(ctx: Ctx, name: str, argv_list: list[list[str]], cwd: Path | None = None,
                 env: dict | None = None) -> Outcome:
    """Run every command, not only up to the first that fails: their combined outcome."""
    return combined([run_command(ctx, name, argv, ctx.work / f"cmd{i}", cwd, env)
                     for i, argv in enumerate(argv_list)])


def _all(*checks: Callable[[Outcome], list[str]]) -> Callable[[Outcome], list[str]]:
    """One goal made of several."""
    return lambda o: [miss for check in checks for miss in check(o)]


def one_error_line(pattern: str) -> Callable[[Outcome], list[str]]:
    """The goal of a refused command (of each, after each_command): a non-zero exit and exactly one line on
    stderr, an `error:` matching `pattern`."""
    def check(o: Outcome) -> list[str]:
        out = []
        for x in o.facts.get("each", [o]):
            lines = x.facts.get("stderr", [])
            if x.rc in (0, None) or len(lines) != 1 or not lines[0].startswith("error: ") \
                    or not re.search(pattern, lines[0]):
                out.append(f"`{' '.join(x.facts['argv'][3:])}`: exit {x.rc}, stderr {lines[-3:]} "
                           f"(want one `error:` line matching {pattern!r})")
        return out
    return check


# -------------------------------------------------------------------------------------------------
# Data faults: shards made for the case, tokenizer shared


def base_with_shards(ctx: Ctx, shards: dict[str, Callable[[Path], None] | None]) -> Path:
    """A NANOCHAT_BASE_DIR sharing the tiny tokenizer; `shards` maps a file name to a writer (None:
    copy the tiny shard of that name)."""
    base = ctx.work / "base"
    (base / "base_data").mkdir(parents=True)
    os.symlink(ctx.base_dir / "tokenizer", base / "tokenizer")
    for name, write in shards.items():
        path = base / "base_data" / name
        if write is None:
            shutil.copy(ctx.base_dir / "base_data" / name, path)
        else:
            write(path)
    return base


def _docs(n: int, seed: int = 0) -> list[str]:
    from bench.nanochat import corpus

    return corpus.documents(n, seed=seed)


def _val_with_empty_row_group(path: Path) -> None:
    """4 row groups, the third (global row group 2, rank 2's only one at 4 ranks) without rows."""
    docs = _docs(24, seed=7)
    schema = pa.schema([("text", pa.string())])
    with pq.ParquetWriter(path, schema, compression="zstd") as w:
        for chunk in (docs[:8], docs[8:16], [], docs[16:]):
            w.write_table(pa.table({"text": pa.array(chunk, type=pa.string())}))


def _val_message(o: Outcome) -> list[str]:
    return [] if "shard_00002.parquet" in (o.message or "") else ["the message does not name shard_00002.parquet"]


@case("validation shard with an empty row group, 4 ranks",
      Expect(START_BOUND_S + 30, ("no_data",), r"NANOCHAT_VAL_FILES_K=2", extra=_val_message))
def empty_val_row_group(ctx):
    base = base_with_shards(ctx, {"shard_00000.parquet": None, "shard_00001.parquet": None,
                                  "shard_00002.parquet": _val_with_empty_row_group})
    args = [a for a in TINY if not a.startswith(("--total_batch_size", "--eval_every"))]
    args += ["--total_batch_size=256", "--eval_every=2", "--eval_tokens=512", FOREVER]
    return train_fault(ctx, "empty_val_row_group", None, args, nproc=4, base_dir=base)


def _no_text_column(path: Path) -> None:
    pq.write_table(pa.table({"content": pa.array(_docs(64), type=pa.string())}), path, row_group_size=16)


@case("a shard without a `text` column",
      Expect(START_BOUND_S, ("no_data",), r"shard_00000\.parquet.*text|text.*shard_00000\.parquet"))
def shard_without_text(ctx):
    base = base_with_shards(ctx, {"shard_00000.parquet": _no_text_column, "shard_00001.parquet": None,
                                  "shard_00002.parquet": None})
    return train_fault(ctx, "shard_without_text", None, [*TINY, FOREVER], base_dir=base)


def corrupt_row_group(path: Path, row_group: int) -> None:
    """Overwrite bytes in the middle of a row group's compressed page, as a bad disk block would."""
    chunk = pq.ParquetFile(path).metadata.row_group(row_group).column(0)
    with open(path, "r+b") as f:
        f.seek(chunk.data_page_offset + chunk.total_compressed_size // 2)
        f.write(b"\xff" * 64)


@case("a corrupt page mid-file (parquet row group 3 of 16)",
      Expect(START_BOUND_S, ("no_data",), r"shard_00000\.parquet.*row group 3"))
def corrupt_page(ctx):
    def write(path: Path) -> None:
        shutil.copy(ctx.base_dir / "base_data" / path.name, path)
        corrupt_row_group(path, 3)  # global row group 3: rank 1's second one, read after ~100 steps

    base = base_with_shards(ctx, {"shard_00000.parquet": write, "shard_00001.parquet": None,
                                  "shard_00002.parquet": None})
    return train_fault(ctx, "corrupt_page", None, [*TINY, FOREVER], base_dir=base)


@case("a truncated shard", Expect(START_BOUND_S, ("no_data",), r"shard_00001\.parquet"))
def truncated_shard(ctx):
    def write(path: Path) -> None:
        data = (ctx.base_dir / "base_data" / path.name).read_bytes()
        path.write_bytes(data[: len(data) // 2])

    base = base_with_shards(ctx, {"shard_00000.parquet": None, "shard_00001.parquet": write,
                                  "shard_00002.parquet": None})
    return train_fault(ctx, "truncated_shard", None, [*TINY, FOREVER], base_dir=base)


def _with_invalid_utf8(source: Path, path: Path) -> None:
    """`source` with two bytes that are not UTF-8 in a document of row group 1 (rank 1's first), written as
    raw string bytes: pyarrow does not check them, and a shard made elsewhere may hold such."""
    docs = [d.encode() for d in pq.read_table(source).column("text").to_pylist()]
    docs[20] = docs[20][:50] + b"\xff\xfe" + docs[20][50:]  # row 20: row group 1 (rows 16-31)
    offsets = pa.array([0, *itertools.accumulate(map(len, docs))], type=pa.int32())
    text = pa.Array.from_buffers(pa.string(), len(docs), [None, offsets.buffers()[1], pa.py_buffer(b"".join(docs))])
    pq.write_table(pa.table({"text": text}), path, row_group_size=16, compression="zstd")


@case("invalid UTF-8 bytes in a shard's text (row group 1)",
      Expect(START_BOUND_S, ("no_data",), r"shard_00000\.parquet: row group 1 of 16 .*not valid UTF-8"))
def invalid_utf8_shard(ctx):
    def write(path: Path) -> None:
        _with_invalid_utf8(ctx.base_dir / "base_data" / path.name, path)

    base = base_with_shards(ctx, {"shard_00000.parquet": write, "shard_00001.parquet": None,
                                  "shard_00002.parquet": None})
    return train_fault(ctx, "invalid_utf8_shard", None, [*TINY, FOREVER], base_dir=base)


@case("truncated tokenizer files (both cut in half), then `nanochat-bench train`",
      Expect(START_BOUND_S, ("no_data",), r"tokenizer/(tokenizer\.pkl|token_bytes\.pt) is damaged.*tokenizer train"))
def truncated_tokenizer(ctx):
    base = ctx.work / "base"
    shutil.copytree(ctx.base_dir / "tokenizer", base / "tokenizer")
    os.symlink(ctx.base_dir / "base_data", base / "base_data")
    for path in (base / "tokenizer").iterdir():  # as a copy of the directory that stopped half-way
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return train_fault(ctx, "truncated_tokenizer", None, [*TINY, FOREVER], base_dir=base)


# -------------------------------------------------------------------------------------------------
# Data and tokenizer commands: `data download|generate`, `tokenizer train` (a command each)

COMMAND_START_S = 15.0  # a command's start-up (its imports) on this loaded 2-core host, with room


def _staged(ctx: Ctx, argv: list[str], env: dict) -> None:
    """A command that prepares the fault: it must succeed, else the case cannot be staged (and says why)."""
    r = subprocess.run(argv, env=repo_env(env), cwd=ctx.work, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"staging `{' '.join(argv[3:])}` failed:\n{(r.stderr + r.stdout)[-3000:]}"


class _QuietFiles(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@contextlib.contextmanager
def http_mirror(directory: Path):
    """A real HTTP server on 127.0.0.1 serving `directory`: a shard mirror for `data download --url`."""
    handler = functools.partial(_QuietFiles, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _files(directory: Path, leave_out: tuple[str, ...] = ()) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.name not in leave_out}


def _unchanged(o: Outcome) -> list[str]:
    before, after = o.facts["before"], o.facts["after"]
    changed = sorted(n for n in before.keys() | after.keys() if before.get(n) != after.get(n))
    return [f"files changed, added or gone: {changed}"] if changed else []


@case("`data generate` into a directory of downloaded shards (listed in sources.json)",
      Expect(COMMAND_START_S + 15, refused=True, message=r"shard_00000\.parquet, shard_00001\.parquet \(downloaded\)",
             extra=_all(one_error_line(r"--overwrite"), _unchanged)))
def generate_over_downloads(ctx):
    from bench.nanochat import corpus, dataset

    mirror = ctx.work / "mirror"
    for i in range(2):  # shards in FineWeb-Edu's layout, without the mark `data generate` puts in its footers
        dataset.write_shard(mirror / dataset.shard_name(i), corpus.documents(64, seed=300 + i), row_group_size=16)
    env = run_env(ctx.work / "base")
    with http_mirror(mirror) as url:
        _staged(ctx, cli("data", "download", "-n", "2", "-w", "2", "--url", url), env)
    data = ctx.work / "base" / "base_data"
    before = _files(data)  # the two shards and sources.json
    o = command_fault(ctx, "generate_over_downloads", [cli("data", "generate", "--shards", "3",
                                                           "--docs-per-shard", "64")], env=env)
    o.facts.update(before=before, after=_files(data))
    return o


def _whole_shards_only(o: Outcome) -> list[str]:
    """After a full disk: every file left is a shard with all its rows, none a temp file or a torn shard."""
    bad = {name: rows for name, rows in o.facts["left"].items() if rows != o.facts["docs"]}
    return [f"left behind (file: rows or why unreadable): {bad}"] if bad else []


def _rows(path: Path) -> int | str:
    try:
        return pq.ParquetFile(path).metadata.num_rows
    except Exception as e:  # noqa: BLE001 - any file that is not a whole shard is the finding
        return f"{type(e).__name__}: {e}"


@case("disk full during `data generate` (NANOCHAT_BASE_DIR a 1 MiB tmpfs)",
      Expect(COMMAND_START_S + 15, refused=True, message=r"cannot write into \S*/base_data: .*(No space left|disk full)",
             extra=_all(one_error_line(r"NANOCHAT_BASE_DIR"), _whole_shards_only)))
def generate_disk_full(ctx):
    docs = 512  # 8 shards of 512 documents (~350 KB each): the third does not fit
    with tmpfs(ctx.work / "small", "1m") as mnt:
        o = command_fault(ctx, "generate_disk_full", [cli("data", "generate", "--shards", "8", "--docs-per-shard",
                                                          str(docs))], env=run_env(mnt))
        o.facts.update(docs=docs, left={p.name: _rows(p) for p in sorted((mnt / "base_data").iterdir())})
        return o


def _tokenizer_loads(base: Path) -> str:
    """`<vocab size> <token_bytes entries>` of base/tokenizer loaded as the trainer loads it, or its error."""
    code = ("from bench.nanochat import tokenizer as t; "
            "print(t.get_tokenizer().get_vocab_size(), len(t.get_token_bytes()))")
    r = subprocess.run([*python(), "-c", code], env=repo_env(run_env(base)), capture_output=True, text=True,
                       timeout=120)
    return r.stdout.strip() if r.returncode == 0 else (r.stderr.strip().splitlines() or ["?"])[-1]


def _old_pair_kept(o: Outcome) -> list[str]:
    loads = o.facts["loads"]
    return _unchanged(o) + ([] if re.fullmatch(r"(\d+) \1", loads) else [f"the pair does not load as one: {loads}"])


@case("disk full during `tokenizer train` (the tokenizer directory a 256 KiB tmpfs, filled)",
      Expect(COMMAND_START_S + 30, refused=True,
             message=r"cannot write the tokenizer into \S*/tokenizer: .*(No space left|disk full).*unchanged",
             extra=_all(one_error_line(r"tokenizer train"), _old_pair_kept)))
def tokenizer_train_disk_full(ctx):
    base = ctx.work / "base"
    base.mkdir(parents=True)
    os.symlink(ctx.base_dir / "base_data", base / "base_data")
    with tmpfs(base / "tokenizer", "256k") as directory:
        for path in (ctx.base_dir / "tokenizer").iterdir():
            shutil.copy(path, directory / path.name)  # the pair trained before (vocab 512)
        before = _files(directory)
        fill(directory)
        o = command_fault(ctx, "tokenizer_train_disk_full", [cli("tokenizer", "train", "--vocab_size=400")],
                          env=run_env(base))
        o.facts.update(before=before, after=_files(directory, leave_out=("filler", "filler-tail")),
                       loads=_tokenizer_loads(base))
        return o


@contextlib.contextmanager
def _unanswering_mirror(listen: bool):
    """The URL of a port on 127.0.0.1 that refuses every connection (bound, then closed: nothing listens)
    or, with `listen`, takes them and never answers (a listening socket nobody reads: the kernel's backlog
    completes the handshakes)."""
    sock = socket.socket()
    try:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/mirror"
        if listen:
            sock.listen(64)
        else:
            sock.close()
        yield url
    finally:
        sock.close()


def _nothing_downloaded(o: Outcome) -> list[str]:
    return [f"files made: {o.facts['made']}"] if o.facts["made"] else []


def download_fault(ctx: Ctx, name: str, listen: bool) -> Outcome:
    """`data download -n 240 -w 8` (speedrun's shard count, more workers than the default) from a mirror
    that never answers, the command's other flags at their defaults."""
    base = ctx.work / "base"
    with _unanswering_mirror(listen) as url:
        o = command_fault(ctx, name, [cli("data", "download", "-n", "240", "-w", "8", "--url", url)],
                          env=run_env(base))
    o.facts["made"] = sorted(str(p.relative_to(base)) for p in base.rglob("*") if p.is_file()) if base.exists() else []
    return o


# The documented bounds (bench/nanochat/download.py): one HEAD request before any download finds the mirror
# gone; a refusing host is tried 3 times 0.5 s apart, a silent one is given one read timeout (--timeout).
@case("`data download -n 240 -w 8` from a mirror that refuses every connection",
      Expect(COMMAND_START_S, refused=True, message=r"cannot reach \S*/mirror/shard_00000\.parquet: connection refused",
             extra=_all(one_error_line(r"--url"), _nothing_downloaded)))
def download_refusing_mirror(ctx):
    return download_fault(ctx, "download_refusing_mirror", listen=False)


@case("`data download -n 240 -w 8` from a mirror that takes connections and never answers",
      Expect(COMMAND_START_S + READ_TIMEOUT_S, refused=True,
             message=r"cannot reach \S*/mirror/shard_00000\.parquet: .*sent nothing within the read timeout",
             extra=_all(one_error_line(r"--url"), _nothing_downloaded)), waits=True)
def download_silent_mirror(ctx):
    return download_fault(ctx, "download_silent_mirror", listen=True)


# -------------------------------------------------------------------------------------------------
# Flags


@case("--num_iterations=-5", Expect(START_BOUND_S, refused=True, message=r"--num_iterations=-5"))
def negative_num_iterations(ctx):
    args = [a for a in TINY] + ["--num_iterations=-5"]
    return train_fault(ctx, "negative_num_iterations", None, args)


def _nothing_outside_checkpoints(o: Outcome) -> list[str]:
    stray = o.facts.get("outside", [])
    return [f"checkpoint files outside base_checkpoints: {stray}"] if stray else []


@case("--model_tag=../..",
      Expect(START_BOUND_S, refused=True, message=r"--model_tag", extra=_nothing_outside_checkpoints))
def model_tag_escapes(ctx):
    base = ctx.work / "nest" / "base"  # ../.. of base/base_checkpoints is ctx.work/nest
    base.mkdir(parents=True)
    for sub in ("tokenizer", "base_data"):
        os.symlink(ctx.base_dir / sub, base / sub)
    args = [a for a in TINY if not a.startswith("--model_tag")] + ["--model_tag=../..", "--num_iterations=2"]
    o = train_fault(ctx, "model_tag_escapes", None, args, base_dir=base)
    o.facts["outside"] = sorted(str(p.relative_to(ctx.work)) for p in (ctx.work / "nest").glob("*.pt"))
    return o


def _nothing_outside_runs(o: Outcome) -> list[str]:
    return [f"wrote outside runs/: {o.facts['stray']}"] if o.facts["stray"] else []


@case("--name .. (sweep name)",
      Expect(START_BOUND_S, refused=True, message=r"--name", listed=False, extra=_nothing_outside_runs))
def sweep_name_dotdot(ctx):
    cwd = ctx.work / "cwd"
    cwd.mkdir(parents=True)
    cmd = Command(cli("render", "sbatch", "--nodes=1", "--runtimes=bare", "--gpus-per-node=2", "--device_type=cpu",
                      f"--base-dir={ctx.base_dir}", "--name", ".."), ctx.work / "cmd", cwd=cwd)
    try:
        seconds, left = cmd.wait_gone(_cap("sweep_name_dotdot", ctx), cmd.t_start)
        o = outcome_of("sweep_name_dotdot", cmd, None, seconds, left, ctx.work)
        o.facts["stray"] = sorted(p.name for p in cwd.iterdir() if p.name != "runs") + \
            sorted(str(p.relative_to(ctx.work)) for p in ctx.work.iterdir() if p.name not in ("cwd", "cmd"))
        return o
    finally:
        cmd.cleanup()


# -------------------------------------------------------------------------------------------------
# The run directory's filesystem


@case("run directory on a read-only filesystem at start",
      Expect(START_BOUND_S, refused=True, message=r"ro/run"))
def run_dir_read_only(ctx):
    with tmpfs(ctx.work / "ro", "1m", read_only=True):
        return train_fault(ctx, "run_dir_read_only", None, [*TINY, FOREVER], run_dir=ctx.work / "ro" / "run")


@case("run directory is a file", Expect(START_BOUND_S, refused=True, message=r"afile"))
def run_dir_is_file(ctx):
    (ctx.work / "afile").write_text("not a directory\n")
    return train_fault(ctx, "run_dir_is_file", None, [*TINY, FOREVER], run_dir=ctx.work / "afile")


@case("run directory on a full disk at start (tmpfs, filled)",
      Expect(START_BOUND_S, refused=True, message=r"full/run.*(space|full)|(space|full).*full/run"))
def run_dir_full_at_start(ctx):
    with tmpfs(ctx.work / "full", "64k") as mnt:
        fill(mnt)
        return train_fault(ctx, "run_dir_full_at_start", None, [*TINY, FOREVER], run_dir=mnt / "run")


def _names_run_dir(o: Outcome) -> list[str]:
    """The run directory cannot take a final status any more: the error line must say why, and where."""
    if not any("ext4/run" in ln and "read-only" in ln.lower() for ln in o.error_lines):
        return [f"no error line naming the read-only run directory (error lines: {o.error_lines})"]
    return []


@case("run directory turns read-only mid-run (ext4 remounted ro)",
      Expect(LOCAL_BOUND_S, extra=_names_run_dir))
def run_dir_read_only_mid_run(ctx):
    with ext4_image(ctx.work / "ext4") as make_read_only:
        return train_fault(ctx, "run_dir_read_only_mid_run", lambda cmd: make_read_only(), [*TINY, FOREVER],
                           run_dir=ctx.work / "ext4" / "run")


@case("run directory fills up mid-run (tmpfs, filled)",
      Expect(LOCAL_BOUND_S, ("failed",), r"No space left|disk full|full"))
def run_dir_full_mid_run(ctx):
    with tmpfs(ctx.work / "full", "2m") as mnt:
        return train_fault(ctx, "run_dir_full_mid_run", lambda cmd: fill(mnt / "run"), [*TINY, FOREVER],
                           run_dir=mnt / "run")


@case("checkpoint on a full disk (base_checkpoints on a 256 KiB tmpfs)",
      Expect(START_BOUND_S, ("failed",), DISK_FULL_AT_CHECKPOINTS))
def checkpoint_disk_full(ctx):
    base = ctx.work / "base"
    base.mkdir(parents=True)
    for sub in ("tokenizer", "base_data"):
        os.symlink(ctx.base_dir / sub, base / sub)
    with tmpfs(base / "base_checkpoints", "256k"):
        return train_fault(ctx, "checkpoint_disk_full", None, [*TINY, "--num_iterations=3", "--save_every=3"],
                           base_dir=base)


# -------------------------------------------------------------------------------------------------
# Analysis over hostile run directories (a command each: a hang must be caught)


def _fifo_listed(o: Outcome) -> list[str]:
    from bench.analysis.collect import load_table

    table_dir = o.facts["table"]
    if not (table_dir / "runs.csv").exists():
        return ["no table written"]
    rows = load_table(table_dir)
    out = [] if len(rows) == 1 and rows["status"].iloc[0] == "failed" else \
        [f"table rows: {rows[['source', 'status']].to_dict('records')}"]
    notes = str(rows["notes"].iloc[0]) if len(rows) else ""
    if "metrics.jsonl" not in notes:
        out.append(f"the row's notes do not say metrics.jsonl was skipped: {notes!r}")
    report = o.facts["report"] / "report.md"
    if not report.exists() or "fifo-run" not in report.read_text():
        out.append("report.md does not list the run")
    return out


@case("collect over a FIFO named metrics.jsonl", Expect(30, exit_zero=True, listed=False, extra=_fifo_listed))
def collect_fifo(ctx):
    run = ctx.work / "runs" / "s" / "fifo-run"
    run.mkdir(parents=True)
    (run / "run.json").write_text('{"schema_version": 1, "run_id": "fifo-run", "status": "failed", '
                                  '"message": "rank 0: boom"}\n')
    os.mkfifo(run / "metrics.jsonl")
    table, report = ctx.work / "table", ctx.work / "report"
    o = command_fault(ctx, "collect_fifo", [cli("collect", str(ctx.work / "runs"), "--out", str(table)),
                                            cli("report", str(table), "--out", str(report))])
    o.facts.update(table=table, report=report)
    return o


@case("collect with a symlink loop as the root", Expect(30, refused=True, message=r"loop", listed=False))
def collect_symlink_loop(ctx):
    os.symlink("loop", ctx.work / "loop")
    return command_fault(ctx, "collect_symlink_loop",
                         [cli("collect", str(ctx.work / "loop"), "--out", str(ctx.work / "table"))])


# -------------------------------------------------------------------------------------------------
# Analysis over hostile tables and references files


def _collected_table(ctx: Ctx) -> Path:
    """The table `collect` writes (runs.csv, runs.parquet) of a synthetic sweep of 2 runs."""
    from bench.analysis.collect import collect
    from tests.support.synthetic import SweepSpec, generate_sweep

    generate_sweep(ctx.work / "runs", SweepSpec(world_sizes=(8,), repeats=2, steps=12))
    collect([ctx.work / "runs"], ctx.work / "table")
    return ctx.work / "table"


def references_fault(ctx: Ctx, name: str, content: bytes) -> Outcome:
    refs = ctx.work / "refs.toml"
    refs.write_bytes(content)
    return command_fault(ctx, name, [cli("check", str(_collected_table(ctx)), "--references", str(refs))])


@case("a references file with a string bound (lower = '-5%') given to `check`",
      Expect(30, refused=True, message=r"refs\.toml: .*lower = '-5%' is not a number",
             extra=one_error_line(r"lower <= 0")))
def references_string_bound(ctx):
    return references_fault(ctx, "references_string_bound", b"[[reference]]\nwhere = { runtime = \"bare\" }\n"
                                                            b"figures.tok_per_sec = { value = 1000, lower = '-5%' }\n")


@case("a references file of binary bytes given to `check`",
      Expect(30, refused=True, message=r"--references \S*refs\.toml: not UTF-8 text", extra=one_error_line(r"TOML")))
def references_binary(ctx):
    return references_fault(ctx, "references_binary", b"[[reference]]\nname = \"\xff\xfe\x00\"\n\x89PNG\r\n\x1a\n")


def _no_report(o: Outcome) -> list[str]:
    written = sorted(p.name for p in o.facts["report"].glob("*")) if o.facts["report"].exists() else []
    return [f"report wrote {written} from the torn table"] if written else []


@case("`runs.csv` cut mid-row (a copy that stopped), then `report` and `check`",
      Expect(30, refused=True, message=r"copy/runs\.csv: a torn table",
             extra=_all(one_error_line(r"copy/runs\.csv: a torn table"), _no_report)))
def torn_runs_csv(ctx):
    text = (_collected_table(ctx) / "runs.csv").read_text().rstrip("\n")
    last = text.rsplit("\n", 1)[1]
    copy = ctx.work / "copy"  # runs.csv comes before runs.parquet: a copy cut there has no parquet
    copy.mkdir()
    (copy / "runs.csv").write_text(text[: len(text) - len(last) // 2])
    refs = ctx.work / "refs.toml"
    refs.write_text('[[reference]]\nwhere = { runtime = "bare" }\nfigures.tok_per_sec = { value = 1000 }\n')
    report = ctx.work / "report"
    o = each_command(ctx, "torn_runs_csv", [cli("report", str(copy), "--out", str(report)),
                                            cli("check", str(copy), "--references", str(refs))])
    o.facts["report"] = report
    return o


# -------------------------------------------------------------------------------------------------
# Hostile strings into edf


HOSTILE = {  # flag -> values that must come out as valid TOML holding them, or be refused with one line
    "--image": ["/x/a\x01b.sqsh", "/x/esc\x1b[31m.sqsh", "/x/del\x7f.sqsh", "/x/ls\u2028.sqsh",
                os.fsdecode(b"/x/not-utf8-\xff.sqsh")],
    "--mount": ["/a\x01:/b", "/a:/b\x1f", "/a\u0085:/b"],
    "--annotation": ["com.x.y=a\x02b", "com.x.z=line\nbreak"],
    "--env": ["A=x\x01y", "B=x\ny", "C=\x0b", "D=x\u2029y"],
}


def _edf_results(o: Outcome) -> list[str]:
    return o.facts.get("bad", [])


@case("hostile strings into `edf` (control characters in image, mount, annotation, env)",
      Expect(60, exit_zero=True, listed=False, extra=_edf_results))
def edf_hostile(ctx):
    """Each value alone through `nanochat-bench edf`: valid TOML that holds it exactly, or one error line."""
    bad, total, seconds = [], 0.0, 0.0
    o = Outcome("edf_hostile", seconds=0.0, rc=0)
    for flag, values in HOSTILE.items():
        for value in values:
            out = ctx.work / f"edf{int(total)}.toml"
            total += 1
            argv = cli("edf", "-o", str(out))
            argv += ["--image", "/x/ok.sqsh", flag, value] if flag != "--image" else [flag, value]
            t = time.time()
            r = subprocess.run(argv, capture_output=True, env=repo_env(), timeout=30)
            seconds += time.time() - t
            err = r.stderr.decode(errors="replace")
            if TRACEBACK in err:
                o.traceback = True
                bad.append(f"{flag} {value!r}: traceback ({err.strip().splitlines()[-1]})")
            elif r.returncode != 0:
                if not (err.startswith("error: ") and err.count("\n") == 1):
                    bad.append(f"{flag} {value!r}: refused without one `error:` line: {err!r}")
            else:
                try:
                    doc = tomllib.loads(out.read_text())
                except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
                    bad.append(f"{flag} {value!r}: invalid TOML ({e})")
                    continue
                if not _holds(doc, flag, value):
                    bad.append(f"{flag} {value!r}: the TOML does not hold the value")
                    continue
                before = out.read_bytes()
                r = subprocess.run(cli("edf", "--regenerate", str(out)), capture_output=True, env=repo_env(),
                                   timeout=30)
                err = r.stderr.decode(errors="replace")
                if TRACEBACK in err:
                    o.traceback = True
                    bad.append(f"{flag} {value!r}: --regenerate traceback ({err.strip().splitlines()[-1]})")
                elif r.returncode != 0 or out.read_bytes() != before:
                    bad.append(f"{flag} {value!r}: --regenerate does not reproduce the file ({err.strip()!r})")
    o.seconds, o.facts["bad"] = seconds, bad
    o.message = f"{len(bad)} of {int(total)} values mishandled" + (f": {bad[0]}" if bad else "")
    return o


def _holds(doc: dict, flag: str, value: str) -> bool:
    if flag == "--image":
        return doc.get("image") == value
    if flag == "--mount":
        return value in doc.get("mounts", [])
    key, _, v = value.partition("=")
    if flag == "--env":
        return doc.get("env", {}).get(key) == v
    node = doc.get("annotations", {})
    for part in key.split("."):
        node = node.get(part, {}) if isinstance(node, dict) else {}
    return node == v


# The header an older `edf` wrote for `--env 'B=x<newline>y'`: the command split over two comment lines.
LEGACY_EDF = """\
# Container Engine environment definition (EDF) for nanochat-bench; see edf/README.md.
# Generated by: nanochat-bench edf --image /x/ok.sqsh --env 'B=x
# y'
# Do not edit: change the command above and run `nanochat-bench edf --regenerate <this file>`.
image = "/x/ok.sqsh"
"""


@case("`edf --regenerate` of a file whose header holds a newline in a value",
      Expect(30, refused=True, message=r"legacy\.toml", listed=False))
def edf_regenerate_newline(ctx):
    path = ctx.work / "legacy.toml"
    path.write_text(LEGACY_EDF)
    return command_fault(ctx, "edf_regenerate_newline", [cli("edf", "--regenerate", str(path))])


def _dollar_taken_as_written(o: Outcome) -> list[str]:
    """The missing image is refused for what it is; the present one, and the EDF, keep the path as written."""
    missing, present, edf_made = o.facts["each"]
    out = one_error_line(r"does not exist")(missing)
    out += [f"the error speaks of a variable: {missing.facts['stderr']}"] if "variable" in missing.output else []
    image = o.facts["image"]
    for what, x, written in (("render", present, o.facts["rendered"]), ("edf", edf_made, o.facts["edf"])):
        if x.rc != 0 or written != image:
            out.append(f"{what} of the present image: exit {x.rc}, image {written!r} (stderr {x.facts['stderr'][-2:]})")
    return out


def _toml_image(path: Path) -> str | None:
    return tomllib.loads(path.read_text()).get("image") if path.is_file() else None


@case("an image path with a literal `$` (`render` of it missing, then present; `edf`)",
      Expect(60, refused=True, message=r"image '\S*img\$\.sqsh' does not exist", extra=_dollar_taken_as_written))
def image_literal_dollar(ctx):
    image = ctx.work / "images" / "img$.sqsh"  # a `$` before no name: a character, not a variable
    name = "image_literal_dollar"

    def render(out: Path) -> Outcome:
        return run_command(ctx, name, cli("render", "sbatch", "--nodes=1", "--runtimes=ce", "--gpus-per-node=2",
                                          "--device_type=cpu", f"--base-dir={ctx.base_dir}", f"--image=ce={image}",
                                          f"--out={out}"), out.with_name(out.name + "-cmd"))

    missing = render(ctx.work / "sweep-missing")
    image.parent.mkdir()
    image.write_bytes(b"hsqs" + bytes(4092))  # SquashFS's magic, then the rest of a block
    present = render(ctx.work / "sweep")
    edf_made = run_command(ctx, name, cli("edf", "--image", str(image), "-o", str(ctx.work / "ce.toml")),
                           ctx.work / "edf-cmd")
    o = combined([missing, present, edf_made])
    o.facts.update(image=str(image), rendered=_toml_image(ctx.work / "sweep" / "n1-ce-r1" / "environment.toml"),
                   edf=_toml_image(ctx.work / "ce.toml"))
    return o


# -------------------------------------------------------------------------------------------------
# Slurm: a 2-node job on the test cluster (2 nodes x 2 CPU ranks)

SLURM_TINY = ["--gpus-per-node=2", "--depth=1", "--max_seq_len=32", "--device_batch_size=2", FOREVER,
              "--eval_every=-1", "--device_type=cpu"]  # weak scaling: 2 x 32 tokens x 4 ranks a step


def slurm_fault(ctx: Ctx, name: str, inject: Callable[[str], None] | None, train: list[str] = SLURM_TINY,
                held: Callable[[str], contextlib.AbstractContextManager[dict]] | None = None) -> Outcome:
    """Render a 2-node job, submit it, hit it once it steps, and follow its processes (the batch script,
    srun and the tasks on both nodes, found by their tag) until the last one ended. With `held`, the job is
    submitted held and released inside `held(job id)` (what the fault needs in place before the job starts,
    the job id known; its facts join the outcome's); without `inject`, timed from the start until the end."""
    from bench import cli

    cluster = ctx.cluster
    if cluster is None:
        raise Unavailable("no Slurm cluster")
    out = ctx.work / "sweep"
    rc = cli.main(["render", "sbatch", "--nodes=2", "--runtimes=bare", *train, f"--base-dir={ctx.base_dir}",
                   f"--out={out}"])
    assert rc == 0
    run_dir = out / "n2-bare-r1"
    cmd = Command(["sbatch", "--parsable", *(["--hold"] if held else []), "job.sbatch"], ctx.work / "cmd",
                  env=run_env(ctx.base_dir, SLURM_CONF=str(cluster.conf)), cwd=run_dir)
    job_id = ""
    try:
        assert cmd.proc.wait(timeout=60) == 0, cmd.output()
        job_id = cmd.stdout_path.read_text().strip().split(";")[0]
        with (held(job_id) if held else contextlib.nullcontext({})) as facts:
            if held:
                cluster.run(["scontrol", "release", job_id])
            since = time.time()
            if inject is not None:
                deadline = since + 180
                while steps_recorded(run_dir) < 3:
                    state = cluster.job_state(job_id)
                    assert state in ("PENDING", "CONFIGURING", "RUNNING"), f"job {job_id} {state} before 3 steps"
                    assert time.time() < deadline, f"job {job_id} made fewer than 3 steps in 180s"
                    time.sleep(0.5)
                since = time.time()
                inject(job_id)
            else:  # nothing to hit: follow the job from its start (sbatch itself ended at once)
                deadline = since + 120
                while cluster.job_state(job_id) in ("PENDING", "CONFIGURING") and time.time() < deadline:
                    time.sleep(0.2)
                # RUNNING in slurmctld comes before slurmd starts the batch script (later still on a node
                # whose slurmd has just restarted): wait for the job's first process, or for its end
                while (not _job_process_seen(cmd) and cluster.job_state(job_id) == "RUNNING"
                       and time.time() < deadline):
                    time.sleep(0.2)
            seconds, left = cmd.wait_gone(_cap(name, ctx), since)
        o = outcome_of(name, cmd, run_dir, seconds, left, ctx.work)
        o.rc, o.facts["job_state"] = cluster.exit_code(job_id), cluster.job_state(job_id)
        o.facts.update(facts)
        return o
    finally:
        cmd.cleanup()
        if job_id:
            cluster.run(["scancel", job_id], check=False)


def _job_process_seen(cmd: Command) -> bool:
    cmd.tracker.scan()
    return bool(cmd.tracker.alive())


def _job_ended(o: Outcome) -> list[str]:
    """A job that Slurm requeued would run again into the same run directory, on top of this run."""
    state = o.facts.get("job_state")
    return [] if state not in ("PENDING", "REQUEUED", "RUNNING", "CONFIGURING") else \
        [f"Slurm left the job {state} (requeued into the same run directory)"]


@case("`scancel` of a running 2-node Slurm job",
      Expect(30, ("cancelled",), r"SIGTERM|signal 15|cancel", extra=_job_ended), slurm=True)
def slurm_scancel(ctx):
    return slurm_fault(ctx, "slurm_scancel", lambda job: ctx.cluster.run(["scancel", job]))


@case("slurmd of the second node killed mid-job (kill -9)",
      Expect(60, ("failed",), r"n2|node", extra=_job_ended), slurm=True)
def slurm_node_lost(ctx):
    try:
        return slurm_fault(ctx, "slurm_node_lost", lambda job: ctx.cluster.kill_slurmd("n2"))
    finally:
        ctx.cluster.restart_slurmd("n2")


@contextlib.contextmanager
def _rendezvous_port_taken(job_id: str):
    """The job's rendezvous port (bench/launch/job.py: PORT_BASE + job id % 100 x 100 + the run's index)
    held by a listening socket on its first node (both nodes of the test cluster are this host) from
    before the job starts to its end; then how many connections came to it (a rank that went there)."""
    from bench.launch.job import PORT_BASE

    facts = {"port": PORT_BASE + int(job_id) % 100 * 100}  # the job's only run: index 0
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as torchrun's store binds
        sock.bind(("", facts["port"]))
        sock.listen(16)
        sock.setblocking(False)
        yield facts
        facts["connections"] = 0
        with contextlib.suppress(BlockingIOError):
            while True:
                sock.accept()[0].close()
                facts["connections"] += 1


def _port_left_alone(o: Outcome) -> list[str]:
    n = o.facts.get("connections")
    return [] if n == 0 else [f"{n} connection(s) to the taken port {o.facts.get('port')}: a rank went there"]


# the run moves to the next free port (bench/launch/rdzvport.py) and ends ok; a rank waiting for a store it
# cannot reach would be silent until the join timeout, far past the bound
@case("the rendezvous port of a 2-node Slurm job taken on its first node before the job starts",
      Expect(START_BOUND_S + 60, ("ok",), exit_zero=True, listed=False,
             extra=_all(_collected_ok, _port_left_alone, _job_ended)), slurm=True)
def slurm_rdzv_port_taken(ctx):
    train = [a for a in SLURM_TINY if a != FOREVER] + ["--num_iterations=5"]
    return slurm_fault(ctx, "slurm_rdzv_port_taken", None, train=train, held=_rendezvous_port_taken)


def local_cases() -> list[Case]:
    return [c for c in CASES if not c.slurm]


def slurm_cases() -> list[Case]:
    return [c for c in CASES if c.slurm]

