"""Model-written code runs sandboxed (bench/nanochat/sandbox.py): hostile "completions" fail, nothing outside changes.

    python -m pytest tests/unit/nanochat/test_sandbox.py -q

Each hostile program is written so that it would pass (run to its end) if its attack worked; the
evaluation scores them all as failures, the correct program after them still passes, and the world
outside (a $HOME, a run directory, a listening server, the parent's secrets, the process table,
the temporary directory) is as it was. Real processes, real kernel fences; nothing is mocked.
"""

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import pytest

from bench.errors import SandboxError
from bench.nanochat import sandbox
from bench.nanochat.sandbox import CHILD, execute_code, isolation

SECRET = "s3cr3t-token-value"
MARKER = b"the test's own connection"
HUMANEVAL_OK = '''
from typing import List


def has_close_elements(numbers: List[float], threshold: float) -> bool:
    """ Check if in given list of numbers, are any two numbers closer to each other than threshold. """
    for i, a in enumerate(numbers):
        for j, b in enumerate(numbers):
            if i != j and abs(a - b) < threshold:
                return True
    return False


def check(candidate):
    assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3) == True
    assert candidate([1.0, 2.0, 5.9, 4.0, 5.0], 0.95) == True
    assert candidate([1.0, 2.0, 3.0, 4.0, 5.0], 0.5) == False


check(has_close_elements)
'''


def sandbox_processes() -> list[str]:
    """Processes still running this checkout's sandboxed side (none may outlive a call)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and CHILD.encode() in (entry / "cmdline").read_bytes():
                found.append(entry.name)
        except OSError:
            continue
    return found


class Listener:
    """A TCP server on the host's loopback that records every connection it is offered."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port, self.accepted, self.stop = self.sock.getsockname()[1], [], False
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted.append(conn.recv(100))
            conn.close()

    def offered(self) -> list[bytes]:
        """Every connection made so far. The backlog is served in order, so once a marker connection of ours
        is accepted so is every earlier one, however slow the serving thread is (a fixed wait is not enough)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=30) as marker:
            marker.sendall(MARKER)
        deadline = time.monotonic() + 30
        while MARKER not in self.accepted and time.monotonic() < deadline:
            time.sleep(0.05)
        assert MARKER in self.accepted, "the listener never served its own marker connection"
        return [c for c in self.accepted if c != MARKER]

    def close(self):
        self.stop = True
        self.thread.join()
        self.sock.close()


@pytest.fixture
def world(tmp_path, monkeypatch):
    """The outside: a $HOME and a run directory with files in them, a server, secrets in the environment."""
    home, run_dir, scratch = tmp_path / "home", tmp_path / "runs" / "d20-bare-1", tmp_path / "tmp"
    for d in (home, run_dir, scratch):
        d.mkdir(parents=True)
    (home / "keep.txt").write_text("mine")
    (run_dir / "run.json").write_text('{"status": "ok"}')
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("HF_TOKEN", SECRET)
    monkeypatch.setenv("NANOCHAT_SECRET", SECRET)
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where the sandboxes' temporary dirs go
    listener = Listener()
    yield {"home": home, "run_dir": run_dir, "scratch": scratch, "listener": listener}
    listener.close()


def fences(layers: tuple[str, ...]) -> set[str]:
    """Which kinds of attack the layers in force stop (the module docstring says which layer does what)."""
    landlock = [int(x.split("-")[1]) for x in layers if x.startswith("landlock-")]
    kinds = {"always"}
    if landlock:
        kinds.add("files")
    if "userns+netns+pidns" in layers or landlock:
        kinds.add("other processes")
    if any("netns" in x for x in layers) or "seccomp" in layers or (landlock and landlock[0] >= 4):
        kinds.add("network")
    if "seccomp" in layers or os.getuid() != 0:  # RLIMIT_NPROC spares root
        kinds.add("new processes")
    if "seccomp" in layers or landlock:
        kinds.add("shell")
    return kinds


def hostile_programs(world) -> dict[str, tuple[str, str]]:
    """name -> (a program that runs to its end only if its attack worked, the fence it needs)."""
    # `~` with $HOME scrubbed is the passwd home: aim at it only where no shell can start at all
    target = "~" if "shell" in fences(isolation()) else str(world["home"])
    run_dir, port, parent = world["run_dir"], world["listener"].port, os.getpid()
    return {
        "endless loop": ("while True:\n    pass\n", "always"),
        "fork bomb": ("import posix\nwhile True:\n    posix.fork()\n", "new processes"),
        "10 GB allocation": ("x = bytearray(10 * 1024 ** 3)\nx[-1] = 1\n", "always"),
        "rm -rf ~": (f"import os\nassert os.system('rm -rf {target}') == 0\n", "always"),
        "rm -rf ~ past the guard": (f"import posix\nassert posix.system('rm -rf {target}') == 0, 'no shell'\n",
                                    "shell"),
        "write into the run directory": (f"open({str(run_dir / 'run.json')!r}, 'w').write('{{}}')\n", "files"),
        "a new file in the run directory": (f"open({str(run_dir / 'evil')!r}, 'x').write('x')\n", "files"),
        "list $HOME": (f"import os\nprint(os.listdir({str(world['home'])!r}))\n", "files"),
        "socket to a local server": ((f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
                                      "s.sendall(b'leak')\ns.close()\n"), "network"),
        "/proc/self/environ": ((f"data = open('/proc/self/environ', 'rb').read()\nprint(data)\n"
                                f"assert b'{SECRET}' in data\n"), "always"),
        "the parent's /proc/PID/environ": ((f"data = open('/proc/{parent}/environ', 'rb').read()\nprint(data)\n"
                                            f"assert b'{SECRET}' in data\n"), "other processes"),
        "os.environ": ((f"import os\nprint(dict(os.environ))\n"
                        f"assert '{SECRET}' in str(os.environ) or 'SLURM_JOB_ID' in os.environ\n"), "always"),
    }


def test_hostile_completions_fail_touch_nothing_and_the_evaluation_goes_on(world):
    stopped = fences(isolation())
    hostile = hostile_programs(world)
    unchecked = sorted(name for name, (_, fence) in hostile.items() if fence not in stopped)
    if unchecked:  # a host without that layer: the module docstring says what is reachable there
        warnings.warn(f"not checked on this host (layers {isolation()}): {', '.join(unchecked)}")
    programs = [(name, program) for name, (program, fence) in hostile.items() if fence in stopped]
    programs.append(("correct HumanEval program", HUMANEVAL_OK))
    results = {}
    for name, program in programs:  # as an evaluation would: one after the other, each scored
        results[name] = execute_code(program, timeout_s=5.0 if program is HUMANEVAL_OK else 1.0)
        assert sandbox_processes() == [], f"{name}: a process outlived the call"
    for name, result in results.items():
        want = name == "correct HumanEval program"
        assert result.success is want, f"{name}: {result}"
        assert result.error is None if want else result.error and "\n" not in result.error, name
        assert SECRET not in result.stdout + result.stderr + (result.error or ""), name
    assert results["endless loop"].timeout and results["10 GB allocation"].memory_exceeded
    if "fork bomb" in results:
        assert "Resource temporarily unavailable" in results["fork bomb"].error  # stopped at its first fork
    if "files" in stopped:
        assert "Permission denied" in results["write into the run directory"].error
    # the outside, afterwards
    assert (world["home"] / "keep.txt").read_text() == "mine"
    assert (world["run_dir"] / "run.json").read_text() == '{"status": "ok"}'
    assert sorted(p.name for p in world["run_dir"].iterdir()) == ["run.json"]
    assert list(world["scratch"].iterdir()) == [], "a sandbox's temporary directory was left behind"
    assert world["listener"].offered() == [], "the program reached a server on the host"


def test_the_network_is_out_of_reach_and_the_record_says_by_what(world):
    layers = isolation()
    if "network" not in fences(layers):
        pytest.skip(f"no network fence on this host (layers in force: {layers}): the socket could connect here")
    probe = f"import socket\nsocket.create_connection(('127.0.0.1', {world['listener'].port}), timeout=2)\n"
    result = execute_code(probe, timeout_s=3.0)
    assert not result.success and result.isolation == layers
    assert world["listener"].offered() == []


def test_without_namespaces_the_other_layers_still_hold_and_say_so(world, monkeypatch):
    """Where `unshare` cannot run (a container without user namespaces): forced here by leaving it out."""
    monkeypatch.setattr(sandbox, "_unshare", lambda: ("", []))
    result = execute_code(f"open({str(world['run_dir'] / 'evil')!r}, 'x')\n", timeout_s=2.0)
    assert not any("netns" in x for x in result.isolation) and "rlimits" in result.isolation
    assert set(result.isolation) >= host_offers() - {"userns+netns+pidns"}
    if "files" in fences(result.isolation):
        assert not result.success and not (world["run_dir"] / "evil").exists()
    else:
        warnings.warn(f"no file-system fence without namespaces here (layers {result.isolation})")
    assert execute_code(HUMANEVAL_OK).success
    assert sandbox_processes() == []


def test_a_sandbox_that_cannot_start_is_an_error_not_a_failing_program(monkeypatch):
    """A child that ends before fencing itself in (an `unshare` refused at run time, a missing executable) was
    scored as the program failing: every HumanEval program failed and the score read 0 with no word why."""
    monkeypatch.setattr(sandbox, "_unshare", lambda: ("userns", ["/nonexistent/unshare", "--"]))
    with pytest.raises(SandboxError, match="could not start /nonexistent/unshare"):
        execute_code("pass\n")
    monkeypatch.setattr(sandbox, "_unshare", lambda: ("userns", ["false", "--"]))
    with pytest.raises(SandboxError, match="exit status 1"):
        execute_code("pass\n")
    assert sandbox_processes() == []


def test_a_program_that_ignores_its_timer_is_killed_by_the_parent():
    program = "import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\nwhile True:\n    pass\n"
    started = time.monotonic()
    result = execute_code(program, timeout_s=0.5)
    assert result.timeout and not result.success and result.error == "Execution timed out (process killed)"
    assert time.monotonic() - started < 5 and sandbox_processes() == []


def test_a_timer_firing_outside_the_program_still_leaves_a_verdict():
    """The timer fired in the sandbox's own code (arming it, or reading the error's text, as while a deep
    recursion unwinds): the child crashed with no verdict, a failure that named the sandbox, not the program."""
    slow_text = "import time\n\nclass Slow(Exception):\n    def __str__(self):\n        time.sleep(1)\n" \
                "        return 'slow'\n\nraise Slow()\n"
    assert execute_code(slow_text, timeout_s=0.5).error == "Slow: slow"  # raised in time: the error, as upstream
    at_once = execute_code("pass\n", timeout_s=1e-9)
    assert at_once.success or at_once.error == "Execution timed out", at_once
    assert sandbox_processes() == []


def test_upstreams_verdicts_exit_stdin_and_main_blocks_fail_or_stay_silent_as_there():
    assert execute_code("import sys\nsys.exit(0)\n").error == "SystemExit: 0"
    assert not execute_code("import os\nos._exit(0)\n").success  # no verdict: a failure, as upstream
    assert not execute_code("input()\n").success  # stdin is closed
    assert execute_code("if __name__ == '__main__':\n    raise SystemExit(1)\n").success  # empty globals
    assert "TypeError" in execute_code("import os\nos.remove('x')\n").error  # switched off, as upstream
    for garbled in ("a\x00b", "x = '\ud800'\n", "def f(:\n"):  # what a tokenizer may hand over: a failure
        assert not execute_code(garbled).success


def test_output_is_captured_and_capped():
    result = execute_code("import sys\nprint('out')\nprint('err', file=sys.stderr)\nprint('x' * (3 << 20))\n")
    assert result.success and result.stdout.startswith("out\n") and result.stderr == "err\n"
    assert len(result.stdout) < (1 << 20) + 100 and result.stdout.endswith(f"[output cut at {1 << 20} bytes]")


def test_printing_fails_no_program_as_upstreams_in_memory_capture_fails_none():
    """Past RLIMIT_FSIZE (16 MiB) print raised 'File too large', a lone surrogate UnicodeEncodeError, and print
    after closing fd 1 an OSError: each program failed here and passes upstream."""
    for program in ("for i in range(20):\n    print('x' * (1 << 20))\n", "print('\\ud800')\n",
                    "import os, sys\nos.close(1)\nprint('gone')\nsys.stdout.flush()\n"):
        result = execute_code(program)
        assert result.success, (program[:40], result)
    assert execute_code("print('\\ud800 \\u00e9')\n").stdout == "\\ud800 \u00e9\n"  # escaped, not lost


def reachable_by_others(path: str) -> bool:
    """Whether a user with no rights of its own can read `path` (o+r) through every directory above it (o+x)."""
    path = os.path.realpath(path)
    parents = [os.path.dirname(path)]
    while parents[-1] != "/":
        parents.append(os.path.dirname(parents[-1]))
    return os.stat(path).st_mode & 0o004 and all(os.stat(d).st_mode & 0o001 for d in parents)


def test_a_busy_user_without_user_namespaces_runs_programs_and_their_threads():
    """RLIMIT_NPROC counts the user's every process and thread on the host (outside a user namespace): with 16
    already running (an evaluator with torch has dozens), the sandbox could not start its own thread and every
    program failed, as did a program's threads where seccomp already refused new processes."""
    evaluator = ("import threading, time\n"
                 "for _ in range(20):\n    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
                 "from bench.nanochat import sandbox\n"
                 "sandbox._unshare = lambda: ('', [])  # no user namespace: the count is host-wide\n"
                 "r = sandbox.execute_code('import threading\\nt = threading.Thread(target=print)\\nt.start()\\n')\n"
                 "print(r.success, 'seccomp' in r.isolation, r.error)\n")
    command = [sys.executable, "-c", evaluator]
    if os.getuid() == 0:  # root is spared RLIMIT_NPROC: the evaluator runs as nobody
        import shutil

        python = next((p for p in (sys.executable, shutil.which("python3", path="/usr/bin:/bin"))
                       if p and reachable_by_others(p)), None)
        if shutil.which("setpriv") is None or python is None or not reachable_by_others(CHILD):
            pytest.skip("root, and no interpreter or checkout another user can run")
        command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
                   "--bounding-set=-all", python, "-c", evaluator]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=tempfile.gettempdir(),
                          env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(Path(CHILD).parents[2])})
    assert done.returncode == 0, done.stderr[-2000:]
    success, seccomp, _ = done.stdout.split(" ", 2)
    assert success == "True" or seccomp == "False", done.stdout  # threads are refused only without seccomp


def test_a_program_ends_when_the_evaluating_process_is_killed(tmp_path):
    """The evaluator killed mid-program (Slurm's SIGKILL, say): the sandbox goes with it, no orphan."""
    evaluator = ("from bench.nanochat.sandbox import execute_code\n"
                 "execute_code('import time\\ntime.sleep(60)', timeout_s=60)")
    parent = subprocess.Popen([sys.executable, "-c", evaluator],
                              env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3]),
                                   "TMPDIR": str(tmp_path)})  # its temporary dir stays behind: it was killed
    deadline = time.monotonic() + 20
    while not sandbox_processes() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sandbox_processes(), "the sandbox never started"
    parent.kill()
    parent.wait()
    while sandbox_processes() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sandbox_processes() == []


def test_the_standard_library_imports_its_c_extensions_and_nothing_else_is_readable():
    """HumanEval/162 hashes with md5: _hashlib loads libcrypto, which the fences must let through."""
    ok = execute_code("import hashlib, zlib, sqlite3, decimal, json, re\n"
                      "assert hashlib.md5(b'Hello world').hexdigest() == '3e25960a79dbc69b674cd4ec67a72c62'\n")
    assert ok.success, ok
    if any(x.startswith("landlock-") for x in ok.isolation):
        assert "Permission denied" in execute_code("open('/etc/passwd').read()\n").error


def host_offers() -> set[str]:
    """The layers this host offers, probed apart from the sandbox, so a layer that breaks fails here."""
    offered = set()
    if sys.platform.startswith("linux"):
        import ctypes
        import shutil

        abi = ctypes.CDLL(None).syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1))  # Landlock's version
        if abi > 0:
            offered.add(f"landlock-{abi}")
        unshare = shutil.which("unshare")
        if unshare and subprocess.run([unshare, "-rnpfm", "--mount-proc", "true"], check=False,
                                      capture_output=True).returncode == 0:
            offered.add("userns+netns+pidns")
        if os.uname().machine in ("x86_64", "aarch64") and "Seccomp:" in Path("/proc/self/status").read_text():
            offered.add("seccomp")
    return offered


def test_every_layer_the_host_offers_is_in_force():
    assert host_offers() <= set(isolation()), f"offered {sorted(host_offers())}, in force {isolation()}"


@pytest.mark.parametrize("module", ["sandbox.py", "sandbox_child.py", "calculator.py"])
def test_the_sandbox_is_standard_library_only(module):
    import ast

    path = Path(CHILD).parent / module
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    assert names <= set(sys.stdlib_module_names) | {"bench", "__future__"}, names


def test_user_and_network_namespaces_alone_where_a_new_proc_is_refused(world, monkeypatch):
    """Some containers refuse `--mount-proc`: the sandbox then keeps the user and network namespaces."""
    import shutil

    layer, flags = sandbox.UNSHARE_TRIES[1]
    unshare = shutil.which("unshare")
    if unshare is None or "userns+netns+pidns" not in host_offers():
        pytest.skip("no user namespaces on this host")
    monkeypatch.setattr(sandbox, "_unshare", lambda: (layer, [unshare, *flags, "--"]))
    assert execute_code(HUMANEVAL_OK).isolation[0] == "userns+netns"
    probe = f"import socket\nsocket.create_connection(('127.0.0.1', {world['listener'].port}), timeout=2)\n"
    assert not execute_code(probe, timeout_s=3.0).success
    assert world["listener"].offered() == [] and sandbox_processes() == []
