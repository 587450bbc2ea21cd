"""The fault-injection harness: start a real run, break it, and record how it ended.

A run's processes are found by a tag in their environment (`NANOCHAT_FAULTS_TAG=<uuid>`), which every
process of a run inherits: the `nanochat-bench train` wrapper, torchrun, the ranks (which torchrun puts
in sessions of their own, so neither the process tree nor the process group finds them all), and under
Slurm the batch script, srun and the tasks on every node. `Tracker` watches those pids (with their start
times, so a reused pid is never mistaken for one of ours), says when the last one ended, and kills the
rest by pid when a bound passes.

`Outcome` is what a case leaves: seconds until the last process ended, exit code, run.json status and
message, the events metrics.jsonl still yields, whether a Python traceback reached stderr or a log, and
whether `collect` + `report` list the run. `Expect` is the goal for a case; `problems(outcome, expect)`
lists every way the outcome misses it (empty: the case meets the goal).

Needs Linux /proc; the mounts (tmpfs, an ext4 image on a loop device) need root.
"""

import contextlib
import json
import os
import pty
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

TAG_ENV = "NANOCHAT_FAULTS_TAG"
TRACEBACK = "Traceback (most recent call last)"
# The trainer flags of every local run: a model small enough that two CPU ranks step in milliseconds.
TINY = ["--depth=1", "--max_seq_len=32", "--device_batch_size=2", "--total_batch_size=128",
        "--eval_every=-1", "--sample_every=-1", "--model_tag=faults"]
FOREVER = "--num_iterations=100000"  # a run that only a fault ends


class Unavailable(Exception):
    """This machine cannot stage the fault (no root for a mount, no Slurm): the case is skipped."""


def in_ci() -> bool:
    """CI=true: a fault that cannot be staged is an error there, never a silent skip."""
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


# -------------------------------------------------------------------------------------------------
# Processes


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, start time in clock ticks) of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    if b")" not in data:  # read as the process was reaped: an empty file
        return None
    fields_ = data[data.rindex(b")") + 2:].split()
    return fields_[0].decode(), int(fields_[1]), int(fields_[19])


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def environ_of(pid: int) -> dict[str, str]:
    out = {}
    for item in _read(f"/proc/{pid}/environ").split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            out[key.decode(errors="replace")] = value.decode(errors="replace")
    return out


def cmdline_of(pid: int) -> str:
    return _read(f"/proc/{pid}/cmdline").replace(b"\0", b" ").decode(errors="replace").strip()


@dataclass
class Member:
    pid: int
    start: int
    cmdline: str
    env: dict[str, str]


class Tracker:
    """The processes carrying one tag: found by scanning /proc, watched by pid and start time."""

    def __init__(self, tag: str):
        self.tag = tag
        self.members: dict[int, Member] = {}
        # pid -> (start time, command line) of processes known not to carry the tag
        self._others: dict[int, tuple[int, str]] = {}
        self._needle = f"{TAG_ENV}={tag}".encode()

    def scan(self) -> None:
        # A process is known by pid, start time and command line: exec keeps the first two, so a worker
        # seen between torchrun's fork and its exec (the agent's command line and environment) is
        # looked at again once it runs the trainer, as is a child that exec'd into a tagged environment.
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            pid = int(name)
            st = _stat(pid)
            if st is None:
                continue
            cmdline = cmdline_of(pid)
            known, seen = self.members.get(pid), (st[2], cmdline)
            if (known and (known.start, known.cmdline) == seen) or self._others.get(pid) == seen:
                continue
            env = _read(f"/proc/{pid}/environ")
            # a member that exec'd with a scrubbed environment (a sandbox) is still one of the run's
            if self._needle + b"\0" in env + b"\0" or (known and known.start == st[2]):
                self.members[pid] = Member(pid, st[2], cmdline, environ_of(pid))
            else:
                self._others[pid] = seen

    def is_alive(self, m: Member) -> bool:
        st = _stat(m.pid)
        return st is not None and st[2] == m.start and st[0] not in ("Z", "X")

    def alive(self) -> list[Member]:
        return [m for m in self.members.values() if self.is_alive(m)]

    def find(self, predicate: Callable[[Member], bool], timeout: float = 30) -> Member:
        """The first live member for which predicate holds (scanning until timeout)."""
        deadline = time.time() + timeout
        while True:
            self.scan()
            hits = [m for m in self.alive() if predicate(m)]
            if hits:
                return min(hits, key=lambda m: m.pid)
            if time.time() > deadline:
                raise AssertionError(f"no process of the run matched within {timeout}s; "
                                     f"have: {[m.cmdline[:80] for m in self.alive()]}")
            time.sleep(0.2)

    def wait_gone(self, deadline: float, poll: float = 0.05, rescan: float = 0.5) -> float | None:
        """The time the last member ended, or None if some are still alive at the deadline."""
        next_scan = 0.0
        while True:
            now = time.time()
            if now >= next_scan:
                self.scan()
                next_scan = now + rescan
            if not self.alive():
                self.scan()  # a last look for a process started since the previous scan
                if not self.alive():
                    return time.time()
            if now > deadline:
                return None
            time.sleep(poll)

    def kill_all(self) -> list[str]:
        """SIGKILL every live member (after SIGCONT, for stopped ones); their command lines."""
        self.scan()
        killed = []
        for m in self.alive():
            killed.append(m.cmdline[:120])
            for sig in (signal.SIGCONT, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(m.pid, sig)
        return killed


TORCHRUN = ("bench.launch.elastic", "torch.distributed.run")  # our torchrun entry, or torch's own


def is_rank(rank: int) -> Callable[[Member], bool]:
    return lambda m: "bench.nanochat.train" in m.cmdline and not is_torchrun(m) and m.env.get("RANK") == str(rank)


def is_torchrun(m: Member) -> bool:
    return any(name in m.cmdline for name in TORCHRUN)


# -------------------------------------------------------------------------------------------------
# Run directories


def read_run(run_dir: Path | None) -> tuple[dict, str | None]:
    """run.json as a dict and, when it cannot be read, why."""
    if run_dir is None:
        return {}, "no run directory"
    path = Path(run_dir) / "run.json"
    try:
        return json.loads(path.read_text()), None
    except FileNotFoundError:
        return {}, "no run.json"
    except (OSError, ValueError) as e:
        return {}, f"run.json unreadable: {e}"


def read_metrics(run_dir: Path | None) -> tuple[int | None, list[str]]:
    """(events kept, notes) of metrics.jsonl through the analysis' own reader."""
    from bench.analysis.rundir import read_events

    notes: list[str] = []
    if run_dir is None or not (Path(run_dir) / "metrics.jsonl").exists():
        return None, notes
    return len(read_events(Path(run_dir) / "metrics.jsonl", notes)), notes


def steps_recorded(run_dir: Path) -> int:
    try:
        return _read(str(Path(run_dir) / "metrics.jsonl")).count(b'"event": "step"')
    except OSError:
        return 0


def listed_by_analysis(run_dir: Path, work: Path) -> tuple[str | None, str | None, bool]:
    """(status, message) of the run's row in a fresh `collect` of its sweep, and whether `report`'s
    report.md names the run with that status. In-process: the cases where collect itself is at fault
    run it as a command instead."""
    import pandas as pd

    from bench.analysis.collect import collect
    from bench.analysis.report import write_report

    table = collect([Path(run_dir).parent], work / "table").table
    rows = table[table["run_id"] == Path(run_dir).name]
    if rows.empty:
        return None, None, False
    row = rows.iloc[0]
    write_report(table, work / "report")
    md = (work / "report" / "report.md").read_text()
    cell = lambda text: re.compile(rf"\|\s*{re.escape(str(text))}\s*\|")  # noqa: E731 - a padded table cell
    status, message = row["status"], row["message"]
    listed = any(cell(row["run_id"]).search(ln) and cell(status).search(ln) for ln in md.splitlines())
    missing = lambda v: v is None or bool(pd.isna(v))  # noqa: E731 - None, NaN or pandas' NA (an ok run's message)
    return None if missing(status) else str(status), None if missing(message) else str(message), listed


# -------------------------------------------------------------------------------------------------
# Outcomes and goals


@dataclass
class Outcome:
    fault: str
    seconds: float | None = None  # from the fault until the last process ended; None: alive at the cap
    cap_s: float | None = None  # how long the harness waited before killing what was left
    rc: int | None = None  # exit status of the command the fault was aimed at (None: killed by the harness)
    run_dir: Path | None = None
    status: str | None = None
    message: str | None = None
    run_json_problem: str | None = None
    events: int | None = None  # events metrics.jsonl yields; None: there is no metrics.jsonl
    metrics_notes: list[str] = field(default_factory=list)
    traceback: bool = False
    error_lines: list[str] = field(default_factory=list)  # `error:` / `error (kind):` lines on stderr
    listed: tuple[str | None, str | None, bool] | None = None  # (status, message, in report) from analysis
    left_alive: list[str] = field(default_factory=list)  # processes the harness had to kill at the cap
    output: str = ""  # stderr, stdout and logs, for a failing test's message
    facts: dict = field(default_factory=dict)  # what a case measured besides (files found, ...)


@dataclass
class Expect:
    """The goal: everything ends within bound_s, with this status and message, and nothing is lost."""
    bound_s: float
    status: tuple[str, ...] | None = None  # final run.json status; None: not asserted
    message: str | None = None  # regex, in run.json's message (or in the error line when refused)
    refused: bool = False  # stopped before any run: non-zero exit, one `error:` line, no run directory needed
    exit_zero: bool = False  # the command succeeds (collect over damaged input)
    listed: bool = True  # collect + report list the run with its status
    extra: Callable[[Outcome], list[str]] | None = None


def problems(o: Outcome, e: Expect) -> list[str]:
    """Every way the outcome misses the goal."""
    out = []
    if o.seconds is None:
        out.append(f"processes still alive after {o.cap_s or e.bound_s:.0f}s: {o.left_alive}")
    elif o.seconds > e.bound_s:
        out.append(f"the last process ended after {o.seconds:.1f}s (bound {e.bound_s:.0f}s)")
    if o.traceback:
        out.append("a Python traceback reached stderr or a log")
    if e.exit_zero:
        if o.rc != 0:
            out.append(f"exit status {o.rc}, expected 0")
    elif o.rc == 0:
        out.append("exit status 0 after a fault")
    if e.refused:
        hits = [ln for ln in o.error_lines if not e.message or re.search(e.message, ln)]
        if not hits:
            out.append(f"no one-line `error:` matching {e.message!r} on stderr (error lines: {o.error_lines})")
    if e.status is not None:
        if o.status not in e.status:
            out.append(f"run.json status {o.status!r} ({o.run_json_problem or o.message!r}), "
                       f"expected {'/'.join(e.status)}")
        elif e.message and not re.search(e.message, o.message or ""):
            out.append(f"run.json message {o.message!r} does not match {e.message!r}")
    if any("malformed" in n or "unreadable" in n for n in o.metrics_notes):
        out.append(f"metrics.jsonl: {o.metrics_notes}")
    if e.listed and e.status is not None:
        if o.listed is None:
            out.append("not collected")
        else:
            status, message, in_report = o.listed
            if status is None:  # no row for the run, or collect/report raised (the message says which)
                out.append(f"collect does not list the run ({message or 'no row with its run_id'})")
            elif status not in e.status:
                out.append(f"collect lists status {status!r}, expected {'/'.join(e.status)}")
            elif e.message and not re.search(e.message, message or ""):
                out.append(f"collect lists message {message!r}, not matching {e.message!r}")
            if not in_report:
                out.append("report.md does not list the run with its status")
    if e.extra:
        out += e.extra(o)
    return out


# -------------------------------------------------------------------------------------------------
# Starting and ending runs


def default_signal_dispositions() -> None:
    """Let our commands start with the dispositions a command typed at a terminal has. A harness started
    in the background by a non-interactive shell has SIGINT and SIGQUIT ignored, and its children would
    inherit that (an ignored SIGINT never reaches the wrapper's KeyboardInterrupt); Python handlers, unlike
    SIG_IGN, fall back to the default across exec."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (signal.SIGQUIT, signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is signal.SIG_IGN:
            signal.signal(sig, signal.SIG_DFL)


# Cases run side by side (test_faults.py) start their runs one at a time: a start-up is CPU-bound (2 ranks
# importing torch), and six at once on 2 cores would stretch each past the bounds measured from it.
STARTING = threading.Lock()


@contextlib.contextmanager
def starting():
    """Hold while a run starts and until its fault hits; the waits that follow overlap with the other cases'."""
    with STARTING:
        yield


class Command:
    """One command of a run, started in a session of its own with the run's tag in its environment.

    Output goes to files (no pipe can fill up and stall it), or with `tty=True` to a pseudo-terminal,
    read by a thread, that `hang_up()` closes as a terminal window would be."""

    def __init__(self, argv: list[str], work: Path, env: dict | None = None, cwd: Path | None = None,
                 tty: bool = False):
        self.work = Path(work)
        self.work.mkdir(parents=True, exist_ok=True)
        self.tag = uuid.uuid4().hex
        self.tracker = Tracker(self.tag)
        default_signal_dispositions()
        env = repo_env(env)
        env[TAG_ENV] = self.tag
        env.setdefault("OMP_NUM_THREADS", "1")
        self.stdout_path, self.stderr_path = self.work / "stdout.txt", self.work / "stderr.txt"
        self._master = None
        self.cap_s: float | None = None
        self.t_start = time.time()
        if tty:
            master, slave = pty.openpty()
            self._master = master
            self.proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=slave, stdout=slave, stderr=slave,
                                         start_new_session=True)
            os.close(slave)
            self._reader = threading.Thread(target=self._copy_tty, args=(master,), daemon=True)
            self._reader.start()
        else:
            with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
                self.proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out,
                                             stderr=err, start_new_session=True)
        self.tracker.members[self.proc.pid] = Member(self.proc.pid, (_stat(self.proc.pid) or ("", 0, -1))[2],
                                                     " ".join(argv), env)

    def _copy_tty(self, master: int) -> None:  # the fd, not self._master: hang_up may clear that meanwhile
        with open(self.stderr_path, "wb") as f:
            while True:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    return
                if not chunk:
                    return
                f.write(chunk)
                f.flush()

    def hang_up(self) -> None:
        """Close the terminal: its reader side goes away, as when a terminal window is closed."""
        if self._master is not None:
            os.close(self._master)
            self._master = None

    def wait_gone(self, bound_s: float, since: float) -> tuple[float | None, list[str]]:
        """(seconds from `since` until the last process ended, or None; processes killed at the bound)."""
        self.cap_s = bound_s
        end = self.tracker.wait_gone(since + bound_s)
        left = [] if end is not None else self.tracker.kill_all()
        if end is None:
            self.tracker.wait_gone(time.time() + 10)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        if self._master is not None:
            self.hang_up()
        return (None if end is None else end - since), left

    @property
    def rc(self) -> int | None:
        return self.proc.poll()

    def output(self) -> str:
        paths = (self.stderr_path, self.stdout_path)
        return "".join(p.read_text(errors="replace") if p.exists() else "" for p in paths)

    def cleanup(self) -> None:
        self.tracker.kill_all()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.hang_up()


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def repo_env(env: dict | None = None) -> dict:
    """The environment with this checkout first on PYTHONPATH, so every process runs the code under test."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(repo_root()), env.get("PYTHONPATH", "")) if p)
    return env


def python() -> list[str]:
    return [sys.executable]


def cli(*args: str) -> list[str]:
    """`nanochat-bench ARGS` as this interpreter runs it."""
    return [*python(), "-m", "bench.cli", *args]


def wrapper_argv(run_dir: Path, train_args: list[str], nproc: int = 2) -> list[str]:
    return cli("train", "--nproc", str(nproc), "--run-dir", str(run_dir), "--", *train_args)


def run_env(base_dir: Path, **extra: str) -> dict:
    env = dict(os.environ, NANOCHAT_BASE_DIR=str(base_dir), **extra)
    env.pop("NANOCHAT_VAL_FILES_K", None)
    env.pop("NANOCHAT_BENCH_RUN_DIR", None)
    return env


def wait_steps(cmd: Command, run_dir: Path, n: int, timeout: float = 120) -> None:
    """Until the run has recorded n training steps (the fault then hits a run in full swing)."""
    deadline = time.time() + timeout
    while steps_recorded(run_dir) < n:
        if cmd.rc is not None:
            raise AssertionError(f"the run ended (exit {cmd.rc}) before {n} steps:\n{cmd.output()[-3000:]}")
        if time.time() > deadline:
            raise AssertionError(f"fewer than {n} steps after {timeout}s:\n{cmd.output()[-3000:]}")
        time.sleep(0.1)


def logs_of(run_dir: Path | None) -> str:
    if run_dir is None or not Path(run_dir).is_dir():
        return ""
    texts = []
    with contextlib.suppress(OSError):
        for p in sorted(Path(run_dir).iterdir()):
            if p.suffix == ".log" and p.is_file() and not p.is_symlink():
                texts.append(p.read_text(errors="replace"))
    return "".join(texts)


def outcome_of(fault: str, cmd: Command, run_dir: Path | None, seconds: float | None, left: list[str],
               work: Path, analyse: bool = True) -> Outcome:
    """Everything a case is judged on, read after the last process ended."""
    text = cmd.output()
    logs = logs_of(run_dir)
    o = Outcome(fault, seconds=seconds, cap_s=cmd.cap_s, rc=cmd.rc if not left else None, run_dir=run_dir,
                left_alive=left,
                traceback=TRACEBACK in text or TRACEBACK in logs, output=(text + logs)[-6000:])
    o.error_lines = [ln.strip() for ln in text.splitlines() if re.match(r"\s*(\[rank \d+\] )?error[: (]", ln)]
    manifest, o.run_json_problem = read_run(run_dir)
    o.status, o.message = manifest.get("status"), manifest.get("message")
    o.events, o.metrics_notes = read_metrics(run_dir)
    if analyse and run_dir is not None and manifest:
        try:
            o.listed = listed_by_analysis(run_dir, work / "analysis")
        except Exception as e:  # noqa: BLE001 - a failing collect is an outcome like any other
            o.listed = (None, f"collect/report failed: {type(e).__name__}: {e}", False)
    return o


# -------------------------------------------------------------------------------------------------
# Filesystems that fail on purpose (root only)


def _sh(*argv: str) -> None:
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        raise Unavailable(f"{' '.join(argv)}: {r.stderr.strip() or r.returncode}")


def require_root() -> None:
    if os.geteuid() != 0:
        raise Unavailable("needs root (mounts)")


@contextlib.contextmanager
def tmpfs(path: Path, size: str, read_only: bool = False):
    """A tmpfs of `size` at path (e.g. "64k"): a disk that fills up; `read_only` for one that refuses writes."""
    require_root()
    path.mkdir(parents=True, exist_ok=True)
    _sh("mount", "-t", "tmpfs", "-o", f"size={size},mode=0755" + (",ro" if read_only else ""), "tmpfs", str(path))
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


@contextlib.contextmanager
def ext4_image(path: Path, size_mb: int = 16):
    """An ext4 filesystem in an image file on a loop device, mounted errors=remount-ro at path; the
    yielded function makes the kernel remount it read-only at once, open files and all (ext4's
    trigger_fs_error), as a filesystem does after an I/O error."""
    require_root()
    path.mkdir(parents=True, exist_ok=True)
    image = path.with_name(path.name + ".img")
    with open(image, "wb") as f:
        f.truncate(size_mb << 20)
    _sh("mkfs.ext4", "-q", "-F", str(image))
    _sh("mount", "-o", "loop,errors=remount-ro", str(image), str(path))
    device = next((line.split()[0] for line in Path("/proc/mounts").read_text().splitlines()
                   if line.split()[1] == str(path)), "")

    def make_read_only() -> None:
        Path(f"/sys/fs/ext4/{Path(device).name}/trigger_fs_error").write_text("fault injection\n")

    try:
        yield make_read_only
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)
        image.unlink(missing_ok=True)


def fill(directory: Path) -> int:
    """Write a filler file into directory until its filesystem is full; the bytes written."""
    written = 0
    chunk = b"\0" * 4096
    with open(directory / "filler", "wb", buffering=0) as f:
        with contextlib.suppress(OSError):
            while True:
                written += f.write(chunk)
    with contextlib.suppress(OSError), open(directory / "filler-tail", "wb", buffering=0) as f:
        while f.write(b"\0"):  # the last bytes of a partly used block
            written += 1
    return written
