"""One capacity probe: a few real optimizer steps of one model in its own process tree and run directory.

The probe is the trainer itself (torchrun, bench/launch/local.py's command and run-directory set-up),
started in a session of its own so that nothing it does can take the sweep down:
- a CUDA out-of-memory ends the run as `oom` (the trainer records it; the bytes asked are read back);
- host memory is watched: when the machine's available memory falls below a floor the whole tree is
  killed and the probe is `oom` (host), before the kernel's OOM killer picks a victim; a rank that the
  kernel killed anyway (SIGKILL) counts as host OOM too, unless the cgroup's count of OOM kills (cgroup v2,
  bench/processes.py) shows it was another SIGKILL: then the probe `failed` and runs again;
- on CPU an address-space cap (RLIMIT_AS, bench/capacity/capped.py) can stand in for a smaller
  machine (the tests use it);
- a probe that runs past its time limit is killed and recorded as `timeout`: a hang is a result.
The outcome and the probe's facts go into run.json under `capacity`. A probe whose run directory
already holds an outcome for the same settings is read back instead of run again (resumable sweeps; a
`failed` one the sweep runs again).
"""

import math
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from contextlib import suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.analysis.figures import steady_mask
from bench.capacity import capped, lifetime
from bench.processes import oom_killed_since, oom_kills, tree_of
from bench.launch.local import prepare_local
from bench.contract import TRAIN_LOG, Evidence, close_unfinished, log_tail, record_evidence
from bench.contract import ENV_BASE_DIR, METRICS_JSONL, read_run_json, update_run_json

# What a finished probe's record holds. "budget" (not run for lack of time) is never stored; "cancelled" (the trainer
# stopped by a signal from outside the sweep: a kill, not a result of the model's size) is, but runs again; so does
# "failed" (a crash may be the node's, not the size's), read back here for a rebuilt summary, but the sweep moves its
# run directory aside and runs it again (bench/capacity/sweep.py).
OUTCOMES = ("ok", "oom", "timeout", "failed")
POLL_S = 0.25
GRACE_S = 10.0  # between SIGTERM and SIGKILL
_NOT_RECORDED = ("spec", "reused", "run_dir", "extra")  # ProbeResult fields that run.json's record leaves out
KILLED_BY_KERNEL = "a rank was killed by SIGKILL (most likely the kernel's out-of-memory killer: host memory)"
KILLED_BY_OOM_KILLER = "a rank was killed by the kernel's out-of-memory killer (SIGKILL): host memory"
KILLED_FROM_OUTSIDE = ("a rank was killed by SIGKILL, not by the kernel's out-of-memory killer (its cgroup counted "
                       "no OOM kill)")


@dataclass(frozen=True)
class ProbeSpec:
    strategy: str
    depth: int
    aspect_ratio: int = 64
    device_batch_size: int = 1
    max_seq_len: int = 2048
    nproc: int = 1
    steps: int = 3
    device_type: str = ""
    vocab_size: int = 65536
    memory_limit: int | None = None  # CPU: each rank's address-space cap; an ok or oom is only true under it

    @property
    def name(self) -> str:
        a = "" if self.aspect_ratio == 64 else f"-a{self.aspect_ratio}"
        return f"d{self.depth}{a}-b{self.device_batch_size}"

    def train_args(self, bin_dir: Path) -> list[str]:
        B, T = self.device_batch_size, self.max_seq_len
        args = [f"--depth={self.depth}", f"--aspect_ratio={self.aspect_ratio}", f"--max_seq_len={T}",
                f"--device_batch_size={B}", f"--total_batch_size={B * T * self.nproc}",
                f"--num_iterations={self.steps}", f"--strategy={self.strategy}", f"--data_bin_dir={bin_dir}",
                "--eval_every=-1", "--sample_every=-1", "--save_every=0", "--run=capacity"]
        return args + ([f"--device_type={self.device_type}"] if self.device_type else [])


@dataclass
class ProbeResult:
    spec: ProbeSpec
    outcome: str  # ok | oom | timeout | failed | budget | cancelled
    message: str | None = None
    run_dir: str | None = None
    num_params: int | None = None
    peak_mem_mib: float | None = None  # torch's max_memory_allocated over the training steps (CUDA)
    tok_per_sec: float | None = None  # median over the steps after the first
    mfu: float | None = None
    step_ms: float | None = None
    oom_bytes: int | None = None  # the allocation that failed, when the error says
    host_peak_bytes: int | None = None  # how far the host's available memory fell during the probe
    vm_peak_bytes: int | None = None  # the largest address space of one of its processes (sampled)
    device_free_bytes: int | None = None  # the least free memory of its GPUs as it started; the rest was others'
    wall_s: float | None = None
    time_limit_s: float | None = None  # the seconds it was given: a `timeout` under a shorter limit runs again
    reused: bool = False
    extra: dict = field(default_factory=dict)  # the sweep's own facts (prediction, device memory)

    @property
    def fits(self) -> bool:
        return self.outcome == "ok"

    def record(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if k not in _NOT_RECORDED}
        return {"probe": asdict(self.spec), **d, **self.extra}

    def stop_record(self) -> dict:
        """A search's `stopped` when this probe failed or hung: the probe (its run directory's name), why."""
        return {"shape": self.spec.name, "num_params": self.num_params, "outcome": self.outcome,
                "message": self.message}


def pytorch_backend(spec: ProbeSpec, run_dir: Path, data: dict) -> tuple[list[str], dict]:
    """The trainer's command and environment for a probe (a strategy it does not know is a ConfigError
    listing its own)."""
    from bench.nanochat.parallel import Strategy

    Strategy.parse(spec.strategy)
    env = dict(os.environ, **{ENV_BASE_DIR: str(data["base_dir"])})
    env["TORCHDYNAMO_DISABLE"] = "1"  # no torch.compile: minutes per new shape, more than a probe's steps
    module = "bench.nanochat.train"
    if data.get("memory_limit"):
        env.update(capped.MALLOC_ENV, **{capped.ENV_CAP: str(data["memory_limit"])})
        module = "bench.capacity.capped"
    args = spec.train_args(Path(data["bin_dir"]))
    cmd, env = prepare_local(args, spec.nproc, run_dir, env, module=module)
    if spec.nproc == 1:  # one rank: the trainer alone, its process group from these variables (no torchrun)
        env.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(_free_port()))
        cmd = [sys.executable, "-m", module, "--", *args]
        update_run_json(run_dir, launch={"command": cmd})
    return cmd, env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------------------------------
# running


def host_memory() -> tuple[int | None, int | None]:
    """(MemTotal, MemAvailable) of this host in bytes."""
    info = {}
    with suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            key, value = line.split(":", 1)
            info[key] = int(value.split()[0]) * 1024
    return info.get("MemTotal"), info.get("MemAvailable")


def _vm_peak(pids: set[int]) -> int:
    """The largest peak address space (VmPeak) among these processes: what RLIMIT_AS caps."""
    peak = 0
    for pid in pids:
        with suppress(OSError, ValueError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmPeak:"):
                    peak = max(peak, int(line.split()[1]) * 1024)
    return peak


def _kill_tree(proc: subprocess.Popen) -> None:
    """SIGTERM to the probe (torchrun passes it on to its ranks), then SIGKILL to the whole tree, ranks
    included, if anything of it is still there after a grace period: no orphan keeps the GPU's memory."""
    pids: set[int] = set()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids |= tree_of(proc.pid)  # again before each signal: a rank forked after the first look is in it
        for pid in sorted(pids):
            with suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        with suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=GRACE_S)
        deadline = time.time() + GRACE_S
        while time.time() < deadline and not all(map(_zombie, pids)):
            time.sleep(POLL_S)
        if all(map(_zombie, pids)):
            return


class _Reaper:
    """Starts the probe (bench/capacity/lifetime.py: own session, dies with the sweep) and, when the sweep
    leaves the probe's block by an exception (Ctrl-C, SIGTERM, a bug), kills the probe's whole tree and
    records the stop before the exception goes on: no probe outlives the sweep, and a resumed sweep runs
    the stopped probe again."""

    def __init__(self, run_dir: Path):
        self.run_dir, self.proc = run_dir, None

    def __enter__(self) -> "_Reaper":
        return self

    def start(self, cmd: list[str], env: dict, log) -> subprocess.Popen:
        # The stop signals wait while the probe starts (the child unblocks them before exec): a signal that
        # landed inside Popen would leave a started probe that this reaper never heard of.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, lifetime.SIGNALS)
        try:
            self.proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         preexec_fn=lifetime.child_setup(os.getpid()))
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        return self.proc

    def __exit__(self, kind, error, _tb) -> None:
        if kind is None or (self.proc is not None and self.proc.poll() is not None):
            return  # ended by itself: its own record stands
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, lifetime.SIGNALS)  # a second Ctrl-C waits for this
        try:
            if self.proc is not None:
                _kill_tree(self.proc)
                self.proc.wait()
            # last, once nothing of the probe is left to write its run.json
            if isinstance(error, lifetime.Stopped):
                evidence = Evidence(source="probe", kind="stopped", signal=error.args[0],
                                    message=f"the capacity sweep was stopped ({error.args[0]}) while this probe "
                                            "ran; it runs again when the sweep is resumed")
            elif self.proc is None:
                evidence = Evidence(source="probe", kind="error",
                                    message=f"the probe could not start: {kind.__name__}: {error}")
            else:
                evidence = Evidence(source="probe", kind="stopped",
                                    message=f"the capacity sweep ended with {kind.__name__} while this probe ran")
            record_evidence(self.run_dir, evidence)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _zombie(pid: int) -> bool:
    """A zombie, or gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def run_probe(spec: ProbeSpec, run_dir: Path, data: dict, timeout_s: float, host_floor: int = 2 << 30,
              deadline_cut: bool = False) -> ProbeResult:
    """Run one probe to its end, whatever that is. `data`: base_dir, bin_dir (bench/capacity/data.py) and
    memory_limit (bytes each rank may add after start-up, bench/capacity/capped.py; None = no cap).
    `deadline_cut`: the timeout is the sweep's remaining time, not the probe's own limit, so running out
    of it is `budget`, not a hang."""
    shutil.rmtree(run_dir, ignore_errors=True)  # no stale events from an unfinished earlier attempt
    cmd, env = pytorch_backend(spec, run_dir, data)
    t0 = time.time()
    base_avail = host_memory()[1]
    oom_kills_before = oom_kills()
    host_peak, vm_peak, stopped = 0, 0, None
    with open(run_dir / TRAIN_LOG, "ab") as log, _Reaper(run_dir) as reaper:
        proc = reaper.start(cmd, env, log)
        while proc.poll() is None:
            time.sleep(POLL_S)
            vm_peak = max(vm_peak, _vm_peak(tree_of(proc.pid)))
            avail = host_memory()[1]
            if avail is not None and base_avail is not None:
                host_peak = max(host_peak, base_avail - avail)
                if avail < host_floor:
                    stopped = ("oom", f"host out of memory: available memory fell to {avail / 2**30:.1f} GiB "
                                      f"({host_peak / 2**30:.1f} GiB taken by the probe); stopped it")
            if not stopped and time.time() - t0 > timeout_s:
                # out of memory already seen (a rank the kernel killed, one that recorded it) while torchrun takes
                # the others down is the probe's outcome: the time ran out on a teardown, not on a hang
                stopped = _oom_seen(run_dir, oom_kills_before) or (
                    ("budget", "the sweep's time budget ran out") if deadline_cut else
                    ("timeout", f"no end after {timeout_s:.0f} s: stopped (a hang or too slow)"))
            if stopped:
                record_evidence(run_dir, Evidence(source="probe", kind="oom" if stopped[0] == "oom" else "time_limit",
                                                  message=stopped[1]))
                _kill_tree(proc)
                break
    rc = proc.wait()
    close_unfinished(run_dir, rc, "the probe", source="probe")
    result = classify(spec, run_dir, stopped, rc, oom_kills_before)
    result.host_peak_bytes = host_peak or None
    result.vm_peak_bytes = vm_peak or None
    result.wall_s = time.time() - t0
    result.time_limit_s = timeout_s
    if result.outcome != "budget":
        update_run_json(run_dir, capacity=result.record())
    return result


# ------------------------------------------------------------------------------------------------
# reading a probe's run directory

_GIB_ASKED = re.compile(r"Tried to allocate ([\d.]+) (GiB|MiB|KiB|B)")
_BYTES_ASKED = re.compile(r"tried to allocate (\d+) bytes")
_UNIT = {"GiB": 2 ** 30, "MiB": 2 ** 20, "KiB": 2 ** 10, "B": 1}


def bytes_asked(message: str | None) -> int | None:
    """The size of the failed allocation in a CUDA or CPU out-of-memory message."""
    if not message:
        return None
    if m := _GIB_ASKED.search(message):
        return int(float(m[1]) * _UNIT[m[2]])
    if m := _BYTES_ASKED.search(message):
        return int(m[1])
    return None


def classify(spec: ProbeSpec, run_dir: Path, stopped: tuple[str, str] | None = None, rc: int | None = None,
             oom_kills_before: int | None = None) -> ProbeResult:
    """The probe's outcome from what its run directory holds (and the exit status of its process, and the cgroup's
    count of OOM kills as it started: None where unreadable)."""
    from bench.analysis.rundir import read_events

    run = read_run_json(run_dir)
    status, message = run.get("status"), run.get("message")
    events = read_events(run_dir / METRICS_JSONL, [])
    steps = [e for e in events if e["event"] == "step"]
    end = next((e for e in events if e["event"] == "end"), {})
    ready = next((e for e in events if e["event"] == "model_ready"), {})
    r = ProbeResult(spec, "failed", message, str(run_dir), num_params=ready.get("num_params"))
    if stopped:
        r.outcome, r.message = stopped
        r.oom_bytes = bytes_asked(r.message) if r.outcome == "oom" else None
    elif status == "ok":
        losses = [e.get("loss") for e in steps]
        if len(steps) < spec.steps or not all(isinstance(x, (int, float)) and math.isfinite(x) for x in losses):
            r.message = f"{len(steps)} of {spec.steps} steps, losses {losses}: not a finite training run"
        else:
            r.outcome = "ok"
            # the report's steady steps and medians (bench/analysis/figures.py): at the default 3 steps the last
            # two (the first allocates and warms up), and their mean, not the faster one
            mask, _ = steady_mask([e["step"] for e in steps])
            later = [e for e, steady in zip(steps, mask) if steady]
            r.tok_per_sec, r.step_ms = (statistics.median(e[k] for e in later) for k in ("tok_per_sec", "dt_ms"))
            mfus = [e["mfu"] for e in later if isinstance(e.get("mfu"), (int, float))]
            r.mfu = statistics.median(mfus) if mfus else None
            r.peak_mem_mib = end.get("peak_mem_mib") or None  # 0 on CPU: no allocator statistics there
    elif status == "oom":
        r.outcome, r.oom_bytes = "oom", bytes_asked(message)
    elif status == "timeout":
        r.outcome = "timeout"
    elif status == "cancelled":  # a SIGTERM to the probe alone (kill, a job's teardown): it runs again on resume
        r.outcome = "cancelled"
    elif rc == -signal.SIGKILL or _killed_by_sigkill(run_dir):
        if (by_oom_killer := oom_killed_since(oom_kills_before)) is False:  # a kill -9: not the model's size
            r.message = KILLED_FROM_OUTSIDE
        else:
            r.outcome = "oom"
            r.message = KILLED_BY_KERNEL if by_oom_killer is None else KILLED_BY_OOM_KILLER
            record_evidence(run_dir, Evidence(source="probe", kind="oom", signal="SIGKILL", message=r.message))
    return r


def _oom_seen(run_dir: Path, oom_kills_before: int | None = None) -> tuple[str, str] | None:
    """("oom", why) where the probe's run already shows it ran out of memory, before it was stopped."""
    with suppress(OSError, ValueError):
        run = read_run_json(run_dir)
        if run.get("status") == "oom":
            return "oom", run.get("message") or "out of memory"
    if _killed_by_sigkill(run_dir) and (by_oom_killer := oom_killed_since(oom_kills_before)) is not False:
        return "oom", KILLED_BY_KERNEL if by_oom_killer is None else KILLED_BY_OOM_KILLER
    return None


def _killed_by_sigkill(run_dir: Path) -> bool:
    log = log_tail(run_dir / TRAIN_LOG, 20000)
    return "Signal 9 (SIGKILL)" in log or re.search(r"exitcode\s*:\s*-9\b", log) is not None


def recorded_spec(cap: dict) -> dict:
    """The settings of a probe's `capacity` record, as ProbeSpec takes them. Earlier releases recorded --device-type
    as given ("" when left out): the device the sweep resolved, recorded beside it, is the one it ran on."""
    stored = {"memory_limit": None, **cap["probe"]}  # a probe recorded without a cap had none
    if not stored.get("device_type") and cap.get("device_type"):
        stored["device_type"] = cap["device_type"]
    return stored


def read_probe(spec: ProbeSpec, run_dir: Path) -> ProbeResult | None:
    """A finished probe of the same settings, read back from its run directory; None if it must run."""
    cap = read_run_json(run_dir).get("capacity")
    stored = recorded_spec(cap) if cap and isinstance(cap.get("probe"), dict) else None
    if stored != asdict(spec) or cap.get("outcome") not in OUTCOMES:
        return None
    fields = {k: cap.get(k) for k in ProbeResult.__dataclass_fields__ if k not in _NOT_RECORDED}
    extra = {k: v for k, v in cap.items() if k not in fields and k != "probe"}
    return ProbeResult(spec, **fields, run_dir=str(run_dir), reused=True, extra=extra)
