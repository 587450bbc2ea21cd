"""A stdout nobody reads never stops training (bench/runside/console.py: print0 after detach_output).

    python -m pytest tests/unit/runside/test_console.py -q
"""

import select
import subprocess
import sys
import textwrap

PRINTER = textwrap.dedent("""
    import sys, time
    from bench.nanochat.common import print0
    from bench.runside.console import detach_output, drain_output
    detach_output()
    t0 = time.time()
    for i in range(20000):  # ~2 MB: far more than a pipe holds
        print0(f"step {i:05d} | " + "x" * 90)
    sys.stderr.write(f"printed in {time.time() - t0:.2f}\\n")
    sys.stderr.flush()
    drain_output(timeout_s=0.5)
""")


def test_print0_does_not_block_on_a_full_pipe():
    proc = subprocess.Popen([sys.executable, "-c", PRINTER], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        # nobody reads stdout until the loop has ended: a print0 that blocks never gets there
        assert select.select([proc.stderr], [], [], 60)[0], "print0 blocked on the full pipe"
        line = proc.stderr.readline().decode()
        assert line.startswith("printed in "), line
        out = proc.stdout.read().decode()
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        proc.wait()
    assert out.startswith("step 00000 |")
    assert "line(s) of output dropped while stdout was not read" in out or out.count("\n") == 20000
