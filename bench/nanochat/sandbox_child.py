"""The sandboxed side of bench/nanochat/sandbox.py: fence this interpreter in, run the program, report.

Started as `python -I -S sandbox_child.py PROGRAM WORK TIMEOUT_S MEMORY_BYTES NAMESPACES STATUS_FD WATCH_FD
READ_DIR...` (NAMESPACES: the layer's name, or `-`); stdlib only, and few imports: every call of the calculator
tool pays for them, which is also why its report to the parent is plain lines, not JSON. The report: a line
`isolation LAYER...` once the fences are up, then `verdict SUCCESS TIMEOUT MEMORY_EXCEEDED` and, on failure, a
line with the error. Order matters: what needs a right (mounting, reading the program) comes before the fences;
the watch thread starts after them, since Landlock and seccomp bind the calling thread and the threads it
starts, not threads already running; the limits come last, as RLIMIT_NPROC counts threads too.
"""

import ctypes
import errno
import io
import os
import signal
import struct
import sys

WORKDIR_TMPFS = b"size=64m,mode=0700"
MAX_PROCESSES = 16  # RLIMIT_NPROC: where seccomp is missing and the user is not root
MAX_OPEN_FILES = 64
FILE_SIZE_BYTES = 16 << 20  # RLIMIT_FSIZE: any file the program writes; print's output past it is dropped
LINUX = sys.platform.startswith("linux")


class TimeoutException(Exception):
    pass


def main(argv: list) -> None:
    """`argv` as the module docstring says; NAMESPACES is the layer's name as the parent made them."""
    program_path, work, timeout_s, memory_bytes, namespaces, status_fd, watch_fd, *read_dirs = argv
    timeout_s, status_fd = float(timeout_s), int(status_fd)
    with open(program_path, encoding="utf-8", errors="surrogatepass") as f:
        program = f.read()
    layers = []
    if namespaces != "-":
        layers.append(namespaces)
        if "pidns" in namespaces and _mount_tmpfs(work):  # the mount namespace comes with the pid one
            layers.append("tmpfs-workdir")
    os.chdir(work)  # after the mount: into the tmpfs, not the directory under it
    abi = _landlock(work, read_dirs)
    if abi:
        layers.append(f"landlock-{abi}")
    no_fork = _seccomp()
    if no_fork:
        layers.append("seccomp")
    _start_parent_watch(int(watch_fd))
    # RLIMIT_NPROC counts the user's every process and thread (host-wide outside a user namespace; an evaluator
    # has dozens): set after the watch thread, and only where seccomp does not already refuse a new process
    _set_limits(int(memory_bytes), timeout_s, None if no_fork else MAX_PROCESSES)
    layers.append("rlimits")
    os.write(status_fd, ("isolation " + " ".join(layers) + "\n").encode())
    _disable_like_upstream()
    streams = sys.stdout, sys.stderr = _output(1), _output(2)
    status = _run_program(program, timeout_s)
    for stream in streams:  # the program may have replaced sys.stdout: these hold what it printed
        try:
            stream.flush()
        except Exception:  # closed by the program: the verdict still goes out
            pass
    verdict = " ".join(str(int(status[key])) for key in ("success", "timeout", "memory_exceeded"))
    error = "" if status["error"] is None else " ".join(status["error"].split()) + "\n"
    os.write(status_fd, f"verdict {verdict}\n{error}".encode("utf-8", errors="replace"))
    os._exit(0)  # the program's atexit handlers and threads do not outlive its verdict


def _run_program(program: str, timeout_s: float) -> dict:
    """Upstream's verdict: success iff exec ends without an exception, within the timer."""
    status = {"success": False, "error": None, "timeout": False, "memory_exceeded": False}

    def on_alarm(signum, frame):
        raise TimeoutException("Timed out!")

    signal.signal(signal.SIGALRM, on_alarm)
    try:
        try:  # the timer may fire anywhere in here, even while an exception unwinds: the handlers below see it
            signal.setitimer(signal.ITIMER_REAL, timeout_s)
            exec(compile(program, "<program>", "exec"), {})  # empty globals, as upstream
            status["success"] = True
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except TimeoutException:
        status.update(timeout=True, error="Execution timed out")
    except MemoryError as e:
        status.update(memory_exceeded=True, error=f"Memory limit exceeded: {e}")
    except BaseException as e:  # SystemExit and KeyboardInterrupt fail the program too, as upstream
        status["error"] = f"{type(e).__name__}: {e}"
    return status


def _set_limits(memory_bytes: int, timeout_s: float, processes: int | None) -> None:
    import resource

    limits = {"RLIMIT_AS": memory_bytes, "RLIMIT_DATA": memory_bytes, "RLIMIT_CPU": int(timeout_s) + 2,
              "RLIMIT_FSIZE": FILE_SIZE_BYTES, "RLIMIT_NOFILE": MAX_OPEN_FILES, "RLIMIT_CORE": 0,
              **({} if processes is None else {"RLIMIT_NPROC": processes})}
    for name, value in limits.items():
        which = getattr(resource, name, None)
        if which is None:
            continue
        _, hard = resource.getrlimit(which)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        try:
            resource.setrlimit(which, (value, value))  # the hard one too: the program cannot raise it back
        except (ValueError, OSError):
            pass  # this OS refuses that one; the others still hold
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past FSIZE then fails with an error


class _Dropping(io.RawIOBase):
    """A file descriptor that takes every write: what FSIZE refuses (or a descriptor the program closed) is
    dropped, so printing fails no program, as upstream's in-memory capture fails none; the parent reads the
    first OUTPUT_CAP_BYTES."""

    def __init__(self, fd: int):
        self.fd = fd

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        try:
            os.write(self.fd, data)
        except OSError:
            pass
        return len(data)


def _output(fd: int) -> io.TextIOWrapper:
    """stdout or stderr on `fd`; text no UTF-8 can carry (a lone surrogate) is written escaped, not refused."""
    return io.TextIOWrapper(io.BufferedWriter(_Dropping(fd)), encoding="utf-8", errors="backslashreplace")


def _start_parent_watch(watch_fd: int) -> None:
    import _thread  # built in; threading would cost an import on every call

    def watch():
        try:
            os.read(watch_fd, 1)  # returns (or fails) only once the parent's end is closed
        finally:
            os._exit(137)  # as a pid namespace's first process, this ends every process in it

    _thread.start_new_thread(watch, ())


def _disable_like_upstream() -> None:
    """What upstream's reliability_guard switches off, switched off here too: the same programs fail.

    Upstream also switches off shutil.rmtree/move/chown and subprocess.Popen; importing those
    modules here would cost every call, and they fail all the same: shutil's helpers call the os
    functions below, and a new process is refused by seccomp or (without it) Landlock's no-execute.
    """
    import builtins
    import faulthandler

    faulthandler.disable()
    builtins.exit = builtins.quit = builtins.help = None
    for name in ("kill", "system", "putenv", "remove", "removedirs", "rmdir", "fchdir", "setuid", "fork",
                 "forkpty", "killpg", "rename", "renames", "truncate", "replace", "unlink", "fchmod",
                 "fchown", "chmod", "chown", "chroot", "lchflags", "lchmod", "lchown", "getcwd", "chdir"):
        setattr(os, name, None)
    for name in ("ipdb", "joblib", "resource", "psutil", "tkinter"):
        sys.modules[name] = None
    if sys.stdin is not None:
        sys.stdin.close()  # a read fails at once


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _mount_tmpfs(work: str) -> bool:
    """A size-capped tmpfs over the work dir, private to this mount namespace and gone with it."""
    ms_nosuid, ms_nodev = 2, 4
    return _libc().mount(b"tmpfs", work.encode(), b"tmpfs", ms_nosuid | ms_nodev, WORKDIR_TMPFS) == 0


# ----------------------------------------------------------------------------- Landlock
# linux/landlock.h; the syscall numbers are the same on every architecture.
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_RULE_PATH_BENEATH = 1
_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1, 2, 4, 8
_FS_TRUNCATE, _FS_IOCTL_DEV = 1 << 14, 1 << 15
_FS_ALL = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1, 5: (1 << 16) - 1}
_FS_FILE_ONLY = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV
_NET_BIND_TCP, _NET_CONNECT_TCP = 1, 2
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1, 2
_PR_SET_NO_NEW_PRIVS = 38


def _landlock(work: str, read_dirs: list) -> int:
    """Read `read_dirs`, write `work`, no TCP, nothing else; the ABI version in force, 0 if none."""
    if not LINUX:
        return 0
    libc = _libc()
    abi = libc.syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))  # the version
    if abi < 1:
        return 0
    fs = _FS_ALL[min(abi, 5)]
    net = _NET_BIND_TCP | _NET_CONNECT_TCP if abi >= 4 else 0  # no rule for them: every port refused
    scoped = _SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL if abi >= 6 else 0
    size = 8 if abi < 4 else 16 if abi < 6 else 24  # struct landlock_ruleset_attr grew with the ABI
    attr = ctypes.create_string_buffer(struct.pack("QQQ", fs, net, scoped)[:size], size)
    ruleset = libc.syscall(_CREATE_RULESET, attr, ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        return 0
    try:
        rules = [(path, _FS_READ_FILE | _FS_READ_DIR) for path in read_dirs]
        rules += [(work, fs), ("/dev/null", _FS_READ_FILE | _FS_WRITE_FILE)]
        if not all(_allow(libc, ruleset, path, rights & fs) for path, rights in rules):
            return 0
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return 0
        if libc.syscall(_RESTRICT_SELF, ruleset, ctypes.c_uint32(0)) != 0:
            return 0
    finally:
        os.close(ruleset)
    return abi


def _allow(libc, ruleset: int, path: str, rights: int) -> bool:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return True  # nothing there to allow
    try:
        if not os.path.isdir(path):
            rights &= _FS_FILE_ONLY  # a file takes no directory rights
        rule = ctypes.create_string_buffer(struct.pack("=Qi", rights, fd), 12)  # packed path_beneath_attr
        return libc.syscall(_ADD_RULE, ruleset, ctypes.c_int(_RULE_PATH_BENEATH), rule, ctypes.c_uint32(0)) == 0
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------- seccomp
# linux/seccomp.h and linux/filter.h: a classic BPF program over struct seccomp_data
# (nr at offset 0, arch at 4, args[0] at 16).
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_REFUSED = {  # clone is refused unless it makes a thread; the rest always
    "x86_64": {"clone": 56, "clone3": 435, "fork": 57, "vfork": 58, "socket": 41, "ptrace": 101,
               "kill": 62, "tkill": 200, "tgkill": 234, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297,
               "pidfd_open": 434, "pidfd_send_signal": 424, "process_vm_readv": 310,
               "process_vm_writev": 311},
    "aarch64": {"clone": 220, "clone3": 435, "socket": 198, "ptrace": 117, "kill": 129, "tkill": 130,
                "tgkill": 131, "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240, "pidfd_open": 434,
                "pidfd_send_signal": 424, "process_vm_readv": 270, "process_vm_writev": 271},
}
_ERRNO = {"clone3": errno.ENOSYS,  # the C library then falls back to clone, whose flags can be read
          "fork": errno.EAGAIN, "vfork": errno.EAGAIN}
_CLONE_THREAD = 0x00010000
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_LD_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2


def _seccomp() -> bool:
    """No new process, socket, ptrace or signal; False where this architecture or OS has no filter."""
    machine = os.uname().machine if LINUX else ""
    if machine not in _REFUSED:
        return False
    code = _assemble(_filter(machine))
    libc = _libc()
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return False
    insns = ctypes.create_string_buffer(code, len(code))
    fprog = ctypes.create_string_buffer(struct.pack("HxxxxxxP", len(code) // 8, ctypes.addressof(insns)))
    return libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, fprog, 0, 0) == 0


def _filter(machine: str) -> list:
    """Instructions (code, jump-if-true label, jump-if-false label, k) and labels (1-tuples)."""
    calls = _REFUSED[machine]
    prog = [(_LD_ABS, None, None, 4), (_JEQ, None, "eperm", _AUDIT_ARCH[machine]),  # another ABI: refused
            (_LD_ABS, None, None, 0)]
    if machine == "x86_64":
        prog.append((_JGE, "eperm", None, 0x40000000))  # the x32 ABI's numbers
    prog += [(_JEQ, f"deny-{name}" if name != "clone" else "clone", None, nr) for name, nr in calls.items()]
    prog.append((_RET, None, None, _RET_ALLOW))
    prog += [("clone",), (_LD_ABS, None, None, 16), (_JSET, None, "eagain", _CLONE_THREAD),
             (_RET, None, None, _RET_ALLOW)]  # a thread
    for name in calls:
        if name != "clone":
            prog += [(f"deny-{name}",), (_RET, None, None, _RET_ERRNO | _ERRNO.get(name, errno.EPERM))]
    prog += [("eperm",), (_RET, None, None, _RET_ERRNO | errno.EPERM)]
    prog += [("eagain",), (_RET, None, None, _RET_ERRNO | errno.EAGAIN)]
    return prog


def _assemble(prog: list) -> bytes:
    """Labels into BPF's forward jump offsets; struct sock_filter packed."""
    where, index = {}, 0
    for item in prog:
        if len(item) == 1:
            where[item[0]] = index
        else:
            index += 1
    out = []
    for item in prog:
        if len(item) == 1:
            continue
        code, jt, jf, k = item
        jt, jf = (0 if label is None else where[label] - len(out) - 1 for label in (jt, jf))
        out.append(struct.pack("HBBI", code, jt, jf, k))
    return b"".join(out)


if __name__ == "__main__":
    main(sys.argv[1:])
