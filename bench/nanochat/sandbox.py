"""Model-written code, run where it can reach nothing: HumanEval's programs and the calculator tool.

Upstream (nanochat/execution.py) forks the evaluating process and switches dangerous functions off
inside it; network, open() and ctypes stay available there. Here each program runs in a fresh
interpreter (`python -I -S`, started through subprocess, never a fork of a CUDA process) and the
operating system fences it, layer by layer, each used where the host offers it:

  process     own session; the parent's wall-clock timeout kills the whole process group, and the
              pid namespace when there is one (its first process dying ends every process in it);
              a pipe from the parent ends the program when the parent is gone; stdin closed;
              stdout/stderr go to files read back up to OUTPUT_CAP_BYTES
  limits      RLIMIT_AS and RLIMIT_DATA (memory_mib), CPU, FSIZE, NOFILE, no core files; NPROC without seccomp
  environment only PATH, LANG and OMP_NUM_THREADS=1: no SLURM_*, no tokens, no HOME, no NANOCHAT_*
  work dir    a fresh empty temporary directory, removed after; a 64 MiB tmpfs over it where a mount
              namespace exists, so the program cannot fill the host's disk
  namespaces  `unshare` user + network + pid + mount namespaces where unprivileged user namespaces
              are allowed: no network interface but a down loopback, no other process visible
              (user + network alone where a new /proc is refused, as in some containers)
  Landlock    (Linux >= 5.13) reads only the Python standard library and the system's shared
              libraries (/lib, /usr/lib, ...), writes only the work dir:
              the run directory, $HOME, /proc of other processes are out of reach; TCP connect and
              bind refused (ABI >= 4); signals and abstract sockets stay inside (ABI >= 6)
  seccomp     (x86_64, aarch64) no new process (fork, vfork, clone without CLONE_THREAD), no
              socket(), no ptrace, no signal to another process: a filter built here from stdlib
              ctypes, so a fork bomb stops at its first fork even for root (whom RLIMIT_NPROC spares)

Where a layer is missing (no `unshare`, user namespaces off, an old kernel, another OS) the others
still hold and the result says which were in force (`ExecutionResult.isolation`, `isolation()`):
without namespaces and seccomp the network stays reachable; without Landlock and a mount
namespace the file system is reachable with the evaluating user's rights; without a pid namespace
and seccomp a process the program starts in a session of its own (fork, setsid, fork) outlives the
call, and a fork bomb run as root meets no limit: only a pid namespace or a cgroup ends every
process a program started, and neither is open to an unprivileged user where `unshare` is refused.

What no layer stops: a program written against this runner can forge its own verdict (it shares
the interpreter that reports it), as upstream's can; it still reaches nothing outside.

Scoring follows upstream: a program passes iff it runs to its end without an exception, within
`timeout_s` (a timer inside, then the parent's kill one second later) and `memory_mib`; it runs with
empty globals, so `if __name__ == "__main__":` blocks do not run; the functions upstream switches
off are switched off too, so the same programs fail. One difference remains: only the standard
library is importable here, while upstream's forked child still has what the evaluating process had
imported (numpy, with torch): a program importing numpy fails here and may pass there.
"""

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from functools import lru_cache

from bench.errors import SandboxError

OUTPUT_CAP_BYTES = 1 << 20  # stdout and stderr each, as read back
KILL_GRACE_S = 1.0  # the parent kills this long after the program's own timer should have fired
GROUP_GONE_S = 2.0  # how long a killed process group may take to disappear (reaping included)
CLEAN_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1"}
UNSHARE_TRIES = (  # (the layer's name, unshare's flags), the fullest first: a container may refuse a new /proc
    ("userns+netns+pidns", ["--user", "--map-root-user", "--net", "--pid", "--fork", "--mount", "--mount-proc",
                            "--kill-child"]),
    ("userns+netns", ["--user", "--map-root-user", "--net"]),
)
SYSTEM_LIBRARY_DIRS = ("/lib", "/lib32", "/lib64", "/usr/lib", "/usr/lib32", "/usr/lib64", "/usr/local/lib",
                       "/etc/ld.so.cache")  # read-only to the program; no /etc beyond the loader's cache
CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox_child.py")


@dataclass(frozen=True)
class ExecutionResult:
    success: bool  # the program ran to its end without an exception
    stdout: str
    stderr: str
    error: str | None  # one line: why it failed (exception, timeout, memory, killed by signal ...)
    timeout: bool
    memory_exceeded: bool
    isolation: tuple[str, ...] = ()  # the layers in force, e.g. ("userns+netns+pidns", "landlock-7")


def execute_code(program: str, timeout_s: float = 5.0, memory_mib: int = 256) -> ExecutionResult:
    """Run `program` fenced off (see the module docstring); never raises for what the program does, but
    SandboxError where the sandbox cannot start: every program would fail, a score saying nothing of the model."""
    if not timeout_s > 0 or not memory_mib > 0:
        raise ValueError(f"execute_code: timeout_s ({timeout_s}) and memory_mib ({memory_mib}) must be > 0")
    with tempfile.TemporaryDirectory(prefix="nanochat-sandbox-", ignore_cleanup_errors=True) as base:
        work = os.path.join(base, "work")
        os.mkdir(work, 0o700)
        paths = {name: os.path.join(base, name) for name in ("program.py", "stdout", "stderr", "status")}
        with open(paths["program.py"], "w", encoding="utf-8", errors="surrogatepass") as f:
            f.write(program)
        watch_r, watch_w = os.pipe()  # the child ends when this end closes: the parent is gone
        try:
            with open(paths["stdout"], "wb") as out, open(paths["stderr"], "wb") as err, \
                    open(paths["status"], "wb") as status:
                args = [paths["program.py"], work, repr(float(timeout_s)), str(int(memory_mib) << 20),
                        _unshare()[0] or "-", str(status.fileno()), str(watch_r),
                        *_stdlib_dirs()]
                rc, killed = _run_child(args, work, out, err, pass_fds=(status.fileno(), watch_r),
                                        deadline_s=timeout_s + KILL_GRACE_S)
        finally:
            os.close(watch_r)
            os.close(watch_w)
        return _result(rc, killed, _read_capped(paths["stdout"]), _read_capped(paths["stderr"]), paths["status"])


@lru_cache(maxsize=1)
def isolation() -> tuple[str, ...]:
    """The layers in force on this host, from a trivial program run once (for run records)."""
    return execute_code("pass", timeout_s=10.0).isolation


# ----------------------------------------------------------------------------- parent side

def _run_child(args: list[str], work: str, out, err, pass_fds, deadline_s: float) -> tuple[int | None, bool]:
    """Start the child, wait until `deadline_s`, then kill its process group: (returncode, killed)."""
    command = _unshare()[1] + [sys.executable, "-I", "-S", CHILD, *args]
    try:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                env=dict(CLEAN_ENV), cwd=work, start_new_session=True,
                                pass_fds=pass_fds, close_fds=True)
    except OSError as e:
        err.write(f"sandbox: could not start {command[0]}: {e}\n".encode())
        return None, False
    try:
        killed = not _exited(proc, deadline_s)
    finally:
        # The group's id stays reserved while its leader is unreaped: kill first, then reap.
        with contextlib.suppress(ProcessLookupError, PermissionError):  # only the leader was left
            os.killpg(proc.pid, signal.SIGKILL)  # whatever is left of it: the program, or what it started
        proc.wait()
        _wait_group_gone(proc.pid)
    return proc.returncode, killed


def _exited(proc: subprocess.Popen, within_s: float) -> bool:
    """Whether the child exits within `within_s`, left unreaped (WNOWAIT) where the OS allows."""
    if not hasattr(os, "waitid"):  # reaped at once: its group id could then be reused before the kill
        try:
            proc.wait(timeout=within_s)
            return True
        except subprocess.TimeoutExpired:
            return False
    end, delay = time.monotonic() + within_s, 0.001
    while os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        if time.monotonic() >= end:
            return False
        time.sleep(delay)
        delay = min(2 * delay, 0.02)
    return True


def _wait_group_gone(pgid: int) -> None:
    """A killed `unshare` leaves its child (the pid namespace's first process) to die and be reaped
    a moment later by another process: wait for that, a bounded time."""
    end = time.monotonic() + GROUP_GONE_S
    with contextlib.suppress(ProcessLookupError, PermissionError):
        while time.monotonic() < end:
            os.killpg(pgid, 0)  # raises once no process of the group is left
            time.sleep(0.005)


@lru_cache(maxsize=1)
def _unshare() -> tuple[str, list[str]]:
    """The namespaces this host lets `unshare` make (a layer's name) and the command, or ("", [])."""
    unshare = shutil.which("unshare", path=os.environ.get("PATH", "") + os.pathsep + "/usr/bin:/bin")
    if unshare is None or not sys.platform.startswith("linux"):
        return "", []
    for layer, flags in UNSHARE_TRIES:
        command = [unshare, *flags, "--"]
        try:
            probe = subprocess.run(command + ["true"], check=False, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(CLEAN_ENV),
                                   timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if probe.returncode == 0:
            return layer, command
    return "", []


@lru_cache(maxsize=1)
def _stdlib_dirs() -> list[str]:
    """What the program may read: this interpreter's standard library (the child's too) and the
    shared libraries its extension modules load (libcrypto for hashlib, libz for zlib, ...)."""
    import _json
    import _struct

    paths = sysconfig.get_paths()
    dirs = {os.path.realpath(paths[key]) for key in ("stdlib", "platstdlib") if key in paths}
    dirs.add(os.path.realpath(os.path.dirname(os.__file__)))
    dirs.update(os.path.realpath(os.path.dirname(m.__file__)) for m in (_json, _struct)
                if getattr(m, "__file__", None))  # lib-dynload, wherever this build keeps it
    dirs.update(os.path.realpath(d) for d in (*SYSTEM_LIBRARY_DIRS, os.path.join(sys.base_prefix, "lib"))
                if os.path.exists(d))
    return sorted(dirs)


def _read_capped(path: str) -> str:
    with open(path, "rb") as f:
        data = f.read(OUTPUT_CAP_BYTES + 1)
    text = data[:OUTPUT_CAP_BYTES].decode("utf-8", errors="replace")
    return text + f"\n[output cut at {OUTPUT_CAP_BYTES} bytes]" if len(data) > OUTPUT_CAP_BYTES else text


def _result(rc: int | None, killed: bool, stdout: str, stderr: str, status_path: str) -> ExecutionResult:
    """The child's report read back: the layers once they are up, then the verdict (none where it never came)."""
    with open(status_path, "rb") as f:
        lines = f.read(1 << 16).decode("utf-8", errors="replace").splitlines()
    layers = tuple(lines[0].split()[1:]) if lines and lines[0].startswith("isolation") else ()
    fields = lines[1].split() if len(lines) > 1 else []
    if not layers and not killed:  # it ended before fencing itself in: the host's fault, never the program's
        raise SandboxError(f"model-written code cannot be run sandboxed here ({sys.executable} {CHILD}): "
                           f"{_no_result_reason(rc, stderr)}")
    if killed:
        return ExecutionResult(False, stdout, stderr, "Execution timed out (process killed)", True, False, layers)
    if len(fields) != 4 or fields[0] != "verdict" or not set(fields[1:]) <= {"0", "1"}:
        return ExecutionResult(False, stdout, stderr, _no_result_reason(rc, stderr), False,
                               "MemoryError" in stderr, layers)
    success, timeout, memory = (flag == "1" for flag in fields[1:])
    error = None if success else lines[2][:500] if len(lines) > 2 else "Execution failed"
    return ExecutionResult(success, stdout, stderr, error, timeout, memory, layers)


def _no_result_reason(rc: int | None, stderr: str) -> str:
    last = next((line for line in reversed(stderr.splitlines()) if line.strip()), "")
    if rc is None:  # _run_child wrote why into stderr
        return last
    if rc < 0 or rc > 128:
        signum = -rc if rc < 0 else rc - 128
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        return f"Execution failed (no result returned): killed by {name}"
    return f"Execution failed (no result returned): exit status {rc}" + (f": {last[:200]}" if last else "")
