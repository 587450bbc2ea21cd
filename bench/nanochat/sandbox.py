"""Model-written code, run where it can reach nothing: HumanEval's programs and the calculator tool.

Upstream (nanochat/execution.py) forks the evaluating process and switches dangerous functions off
inside it; network, open() and ctypes stay available there. Here each program runs in a fresh
interpreter (`python -I -S`, started through subprocess, never a fork of a CUDA process) and the
operating system fences it, layer by layer, each used where the host offers it:

  process     own session; the parent's wall-clock timeout kills the whole process group, and the
              pid namespace when there is one (its first process dying ends every process in it);
              a pipe from the parent ends the program when the parent is gone; stdin closed;
              stdout/stderr go to files read back up to OUTPUT_CAP_BYTES
  limits      RLIMIT_AS and RLIMIT_DATA (memory_mib), CPU, NPROC, FSIZE, NOFILE, no core files
  environment only PATH, LANG and OMP_NUM_THREADS=1: no SLURM_*, no tokens, no HOME, no NANOCHAT_*
  work dir    a fresh empty temporary directory, removed after; a 64 MiB tmpfs over it where a mount
              namespace exists, so the program cannot fill the host's disk
  namespaces  `unshare` user + network + pid + mount namespaces where unprivileged user namespaces
              are allowed: no network interface but a down loopback, no other process visible
  Landlock    (Linux >= 5.13) reads only the Python standard library, writes only the work dir:
              the run directory, $HOME, /proc of other processes are out of reach; TCP connect and
              bind refused (ABI >= 4); signals and abstract sockets stay inside (ABI >= 6)
  seccomp     (x86_64, aarch64) no new process (fork, vfork, clone without CLONE_THREAD), no
              socket(), no ptrace, no signal to another process: a filter built here from stdlib
              ctypes, so a fork bomb stops at its first fork even for root (whom RLIMIT_NPROC spares)

Where a layer is missing (no `unshare`, user namespaces off, an old kernel, another OS) the others
still hold and the result says which were in force (`ExecutionResult.isolation`, `isolation()`):
without namespaces and seccomp the network stays reachable; without Landlock and a mount
namespace the file system is reachable with the evaluating user's rights.

What no layer stops: a program written against this runner can forge its own verdict (it shares
the interpreter that reports it), as upstream's can; it still reaches nothing outside.

Scoring follows upstream: a program passes iff it runs to its end without an exception, within
`timeout_s` (a timer inside, then the parent's kill one second later) and `memory_mib`; it runs with
empty globals, so `if __name__ == "__main__":` blocks do not run; the functions upstream switches
off are switched off too, so the same programs fail.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import lru_cache

OUTPUT_CAP_BYTES = 1 << 20  # stdout and stderr each, as read back
FILE_SIZE_BYTES = 16 << 20  # RLIMIT_FSIZE: any file the program writes, its own output included
WORKDIR_TMPFS = "size=64m,mode=0700"
MAX_PROCESSES = 16  # RLIMIT_NPROC (where seccomp is missing and the user is not root)
MAX_OPEN_FILES = 64
KILL_GRACE_S = 1.0  # the parent kills this long after the program's own timer should have fired
CLEAN_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1"}
UNSHARE_FLAGS = ["--user", "--map-root-user", "--net", "--pid", "--fork", "--mount",
                 "--mount-proc", "--kill-child"]


@dataclass(frozen=True)
class ExecutionResult:
    success: bool  # the program ran to its end without an exception
    stdout: str
    stderr: str
    error: str | None  # one line: why it failed (exception, timeout, memory, killed by signal ...)
    timeout: bool
    memory_exceeded: bool
    isolation: tuple[str, ...] = ()  # the layers that were in force, e.g. ("netns", "landlock-7")


def execute_code(program: str, timeout_s: float = 5.0, memory_mib: int = 256) -> ExecutionResult:
    """Run `program` fenced off (see the module docstring); never raises for what the program does."""
    with tempfile.TemporaryDirectory(prefix="nanochat-sandbox-") as base:
        work = os.path.join(base, "work")
        os.mkdir(work, 0o700)
        paths = {name: os.path.join(base, name) for name in ("program.py", "stdout", "stderr", "status")}
        with open(paths["program.py"], "w", encoding="utf-8") as f:
            f.write(program)
        config = {"program": paths["program.py"], "work": work, "timeout_s": timeout_s,
                  "memory_bytes": int(memory_mib) << 20, "namespaces": bool(_unshare_command())}
        watch_r, watch_w = os.pipe()  # the child ends when this end closes: the parent is gone
        try:
            with open(paths["stdout"], "wb") as out, open(paths["stderr"], "wb") as err, \
                    open(paths["status"], "wb") as status:
                config["status_fd"], config["watch_fd"] = status.fileno(), watch_r
                rc, killed = _run_child(config, out, err, pass_fds=(status.fileno(), watch_r),
                                        deadline_s=timeout_s + KILL_GRACE_S)
        finally:
            os.close(watch_r)
            os.close(watch_w)
        return _result(rc, killed, _read_capped(paths["stdout"]), _read_capped(paths["stderr"]),
                       _read_status(paths["status"]))


@lru_cache(maxsize=1)
def isolation() -> tuple[str, ...]:
    """The layers in force on this host, from a trivial program run once (for run records)."""
    return execute_code("pass", timeout_s=10.0).isolation


# ----------------------------------------------------------------------------- parent side

def _run_child(config: dict, out, err, pass_fds, deadline_s: float) -> tuple[int | None, bool]:
    """Start the child, wait until `deadline_s`, then kill its process group: (returncode, killed)."""
    command = _unshare_command() + [sys.executable, "-I", "-S", os.path.abspath(__file__),
                                    json.dumps(config)]
    try:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                env=dict(CLEAN_ENV), cwd=config["work"], start_new_session=True,
                                pass_fds=pass_fds, close_fds=True)
    except OSError as e:
        err.write(f"sandbox: could not start {command[0]}: {e}\n".encode())
        return None, False
    killed = False
    try:
        proc.wait(timeout=deadline_s)
    except subprocess.TimeoutExpired:
        killed = True
    finally:
        _kill_group(proc.pid)  # also whatever the program left behind in its group
        proc.wait()
    return proc.returncode, killed


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the group is already gone


@lru_cache(maxsize=1)
def _unshare_command() -> list[str]:
    """`unshare` with new user, network, pid and mount namespaces, or [] where that cannot run."""
    unshare = shutil.which("unshare", path=os.environ.get("PATH", "") + os.pathsep + "/usr/bin:/bin")
    if unshare is None or platform.system() != "Linux":
        return []
    command = [unshare, *UNSHARE_FLAGS, "--"]
    try:
        probe = subprocess.run(command + ["true"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, env=dict(CLEAN_ENV), timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return command if probe.returncode == 0 else []


def _read_capped(path: str) -> str:
    with open(path, "rb") as f:
        data = f.read(OUTPUT_CAP_BYTES + 1)
    text = data[:OUTPUT_CAP_BYTES].decode("utf-8", errors="replace")
    return text + f"\n[output cut at {OUTPUT_CAP_BYTES} bytes]" if len(data) > OUTPUT_CAP_BYTES else text


def _read_status(path: str) -> dict | None:
    """The child's last word, or None where it never got to say it (killed, crashed)."""
    with open(path, "rb") as f:
        data = f.read(1 << 16)
    try:
        status = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return status if isinstance(status, dict) else None


def _result(rc: int | None, killed: bool, stdout: str, stderr: str, status: dict | None) -> ExecutionResult:
    isolation = tuple(str(x) for x in status.get("isolation", ())) if status else ()
    if killed:
        return ExecutionResult(False, stdout, stderr, "Execution timed out (process killed)", True, False,
                               isolation)
    if status is None or "success" not in status:
        return ExecutionResult(False, stdout, stderr, _no_result_reason(rc, stderr), False,
                               "MemoryError" in stderr, isolation)
    error = status.get("error")
    return ExecutionResult(status["success"] is True, stdout, stderr,
                           None if error is None else str(error).splitlines()[0] if str(error) else str(error),
                           status.get("timeout") is True, status.get("memory_exceeded") is True, isolation)


def _no_result_reason(rc: int | None, stderr: str) -> str:
    if rc is None:
        return "Execution failed (the sandbox could not start)"
    if rc < 0 or rc > 128:
        signum = -rc if rc < 0 else rc - 128
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        return f"Execution failed (no result returned): killed by {name}"
    last = next((line for line in reversed(stderr.splitlines()) if line.strip()), "")
    return f"Execution failed (no result returned): exit status {rc}" + (f": {last[:200]}" if last else "")


# ----------------------------------------------------------------------------- child side
# Runs in the fresh interpreter: `python -I -S sandbox.py CONFIG`. Order matters: everything that
# needs a right (mount, reading the program) comes before the fences; threads start after them,
# since Landlock and seccomp bind the calling thread and what it starts.

class TimeoutException(Exception):
    pass


def _child_main(config: dict) -> None:
    with open(config["program"], encoding="utf-8") as f:
        program = f.read()
    status_fd, watch_fd = config["status_fd"], config["watch_fd"]
    layers = []
    if config["namespaces"]:
        layers.append("userns+netns+pidns")
        if _mount_tmpfs(config["work"]):
            layers.append("tmpfs-workdir")
    os.chdir(config["work"])
    _set_limits(config["memory_bytes"], config["timeout_s"])
    layers.append("rlimits")
    abi = _landlock(config["work"])
    if abi:
        layers.append(f"landlock-{abi}")
    if _seccomp():
        layers.append("seccomp")
    _start_parent_watch(watch_fd)
    _disable_like_upstream()
    status = _run_program(program, config["timeout_s"])
    status["isolation"] = layers
    sys.stdout.flush()
    sys.stderr.flush()
    os.write(status_fd, json.dumps(status).encode())
    os._exit(0)  # the program's atexit handlers and threads do not outlive its verdict


def _run_program(program: str, timeout_s: float) -> dict:
    status = {"success": False, "error": None, "timeout": False, "memory_exceeded": False}

    def on_alarm(signum, frame):
        raise TimeoutException("Timed out!")

    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        exec(compile(program, "<program>", "exec"), {})
        status["success"] = True
    except TimeoutException:
        status.update(timeout=True, error="Execution timed out")
    except MemoryError as e:
        status.update(memory_exceeded=True, error=f"Memory limit exceeded: {e}")
    except BaseException as e:  # SystemExit and KeyboardInterrupt fail the program too, as upstream
        status["error"] = f"{type(e).__name__}: {e}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return status


def _set_limits(memory_bytes: int, timeout_s: float) -> None:
    import resource

    cpu_s = int(timeout_s) + 2
    limits = {"RLIMIT_AS": memory_bytes, "RLIMIT_DATA": memory_bytes, "RLIMIT_CPU": cpu_s,
              "RLIMIT_NPROC": MAX_PROCESSES, "RLIMIT_FSIZE": FILE_SIZE_BYTES,
              "RLIMIT_NOFILE": MAX_OPEN_FILES, "RLIMIT_CORE": 0}
    for name, value in limits.items():
        which = getattr(resource, name, None)
        if which is None:
            continue
        _, hard = resource.getrlimit(which)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        try:
            resource.setrlimit(which, (value, value))  # hard too: the program cannot raise it back
        except (ValueError, OSError):
            pass  # this OS refuses that one; the others still hold
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an over-long write fails with an error instead


def _start_parent_watch(watch_fd: int) -> None:
    import threading

    def watch():
        try:
            os.read(watch_fd, 1)  # returns (or fails) only when the parent's end is closed
        finally:
            os._exit(137)

    threading.Thread(target=watch, daemon=True).start()


def _disable_like_upstream() -> None:
    """The functions upstream's reliability_guard sets to None, so that the same programs fail."""
    import builtins
    import faulthandler

    faulthandler.disable()
    builtins.exit = builtins.quit = None
    for name in ("kill", "system", "putenv", "remove", "removedirs", "rmdir", "fchdir", "setuid",
                 "fork", "forkpty", "killpg", "rename", "renames", "truncate", "replace", "unlink",
                 "fchmod", "fchown", "chmod", "chown", "chroot", "lchflags", "lchmod", "lchown",
                 "getcwd", "chdir"):
        setattr(os, name, None)
    shutil.rmtree = shutil.move = shutil.chown = None
    subprocess.Popen = None
    builtins.help = None
    for name in ("ipdb", "joblib", "resource", "psutil", "tkinter"):
        sys.modules[name] = None
    sys.stdin.close()


def _mount_tmpfs(work: str) -> bool:
    """A size-capped tmpfs over the work dir, private to this mount namespace."""
    libc = ctypes.CDLL(None, use_errno=True)
    ms_nosuid, ms_nodev = 2, 4
    return libc.mount(b"tmpfs", work.encode(), b"tmpfs", ms_nosuid | ms_nodev, WORKDIR_TMPFS.encode()) == 0


# Landlock (linux/landlock.h): syscall numbers are the same on every architecture.
_LANDLOCK_CREATE_RULESET, _LANDLOCK_ADD_RULE, _LANDLOCK_RESTRICT_SELF = 444, 445, 446
_FS_RIGHTS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1,
                     5: (1 << 16) - 1}  # ABI 2 adds REFER, 3 TRUNCATE, 5 IOCTL_DEV
_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1, 2, 4, 8
_FS_TRUNCATE = 1 << 14
_NET_BIND_TCP, _NET_CONNECT_TCP = 1, 2
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1, 2
_PR_SET_NO_NEW_PRIVS = 38


def _landlock(work: str) -> int:
    """Read the standard library, write the work dir, nothing else; the ABI in force, 0 if none."""
    if platform.system() != "Linux":
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    abi = libc.syscall(_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    if abi < 1:
        return 0
    fs = _FS_RIGHTS_BY_ABI[min(abi, 5)]
    attr = struct.pack("QQQ", fs, _NET_BIND_TCP | _NET_CONNECT_TCP if abi >= 4 else 0,
                       _SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL if abi >= 6 else 0)
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    buf = ctypes.create_string_buffer(attr[:size], size)
    ruleset = libc.syscall(_LANDLOCK_CREATE_RULESET, buf, ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        return 0
    try:
        read_only = _FS_READ_FILE | _FS_READ_DIR
        file_rights = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | (_FS_TRUNCATE if abi >= 3 else 0)
        rules = [(path, read_only) for path in _stdlib_dirs()]
        rules += [(work, fs), ("/dev/null", (_FS_READ_FILE | _FS_WRITE_FILE) & file_rights)]
        for path, rights in rules:
            if not _landlock_allow(libc, ruleset, path, rights):
                return 0
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return 0
        if libc.syscall(_LANDLOCK_RESTRICT_SELF, ruleset, ctypes.c_uint32(0)) != 0:
            return 0
    finally:
        os.close(ruleset)
    return abi


def _landlock_allow(libc, ruleset: int, path: str, rights: int) -> bool:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return True  # nothing there to allow
    try:
        if not os.path.isdir(path):
            rights &= _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE | (1 << 15)
        rule = ctypes.create_string_buffer(struct.pack("=Qi", rights, fd), 12)
        return libc.syscall(_LANDLOCK_ADD_RULE, ruleset, ctypes.c_int(1), rule, ctypes.c_uint32(0)) == 0
    finally:
        os.close(fd)


def _stdlib_dirs() -> list[str]:
    import sysconfig

    paths = sysconfig.get_paths()
    dirs = {os.path.realpath(paths[key]) for key in ("stdlib", "platstdlib") if key in paths}
    dirs |= {os.path.realpath(os.path.dirname(os.__file__))}
    return sorted(dirs)


# seccomp (linux/seccomp.h, linux/filter.h): a classic BPF program over struct seccomp_data.
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_SYSCALLS = {  # the calls refused, by architecture; clone is refused unless it makes a thread
    "x86_64": {"clone": 56, "clone3": 435, "fork": 57, "vfork": 58, "socket": 41, "ptrace": 101,
               "kill": 62, "tkill": 200, "tgkill": 234, "rt_sigqueueinfo": 129,
               "rt_tgsigqueueinfo": 297, "pidfd_open": 434, "pidfd_send_signal": 424,
               "process_vm_readv": 310, "process_vm_writev": 311},
    "aarch64": {"clone": 220, "clone3": 435, "socket": 198, "ptrace": 117, "kill": 129,
                "tkill": 130, "tgkill": 131, "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240,
                "pidfd_open": 434, "pidfd_send_signal": 424, "process_vm_readv": 270,
                "process_vm_writev": 271},
}
_CLONE_THREAD = 0x00010000
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_LD_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2


def _seccomp() -> bool:
    machine = platform.machine()
    if platform.system() != "Linux" or machine not in _SYSCALLS:
        return False
    import errno

    nr = _SYSCALLS[machine]
    deny = {"clone3": errno.ENOSYS}  # so that the C library falls back to clone, which is checked
    deny.update({name: errno.EAGAIN for name in ("fork", "vfork")})
    # (code, jump-if-true label, jump-if-false label, k); labels resolve to forward offsets
    prog = [(_LD_ABS, None, None, 4), (_JEQ, None, "eperm", _AUDIT_ARCH[machine]), (_LD_ABS, None, None, 0)]
    if machine == "x86_64":
        prog.append((_JGE, "eperm", None, 0x40000000))  # the x32 ABI
    prog.append((_JEQ, "clone", None, nr["clone"]))
    for name, number in nr.items():
        if name != "clone":
            prog.append((_JEQ, f"deny-{name}", None, number))
    prog.append((_RET, None, None, _RET_ALLOW))
    prog.append(("clone",))
    prog.append((_LD_ABS, None, None, 16))  # args[0], low word: the clone flags
    prog.append((_JSET, None, "eagain", _CLONE_THREAD))
    prog.append((_RET, None, None, _RET_ALLOW))  # a thread
    for name in nr:
        if name != "clone":
            prog.append((f"deny-{name}",))
            prog.append((_RET, None, None, _RET_ERRNO | deny.get(name, errno.EPERM)))
    prog += [("eperm",), (_RET, None, None, _RET_ERRNO | errno.EPERM)]
    prog += [("eagain",), (_RET, None, None, _RET_ERRNO | errno.EAGAIN)]
    code = _assemble(prog)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return False
    filt = ctypes.create_string_buffer(code, len(code))
    fprog = struct.pack("HxxxxxxP", len(code) // 8, ctypes.addressof(filt))
    fprog_buf = ctypes.create_string_buffer(fprog, len(fprog))
    return libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, fprog_buf, 0, 0) == 0


def _assemble(prog: list[tuple]) -> bytes:
    """Resolve labels (1-tuples) into BPF's forward jump offsets and pack struct sock_filter."""
    where, index = {}, 0
    for item in prog:
        if len(item) == 1:
            where[item[0]] = index
        else:
            index += 1
    out, index = [], 0
    for item in prog:
        if len(item) == 1:
            continue
        code, jt, jf, k = item
        jt, jf = (0 if label is None else where[label] - index - 1 for label in (jt, jf))
        out.append(struct.pack("HBBI", code, jt, jf, k))
        index += 1
    return b"".join(out)


if __name__ == "__main__":
    _child_main(json.loads(sys.argv[1]))
