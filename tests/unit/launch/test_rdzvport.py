"""The rendezvous port checked on the first node before torchrun: a taken port moves the run to the next
free one, and a block of taken ports fails the run in seconds with one line naming them (real sockets,
real bash; srun and scontrol are stand-ins, the real Slurm runs are in tests/integration/slurm).

    python -m pytest tests/unit/launch/test_rdzvport.py -q
"""

import contextlib
import json
import os
import socket
import subprocess
import sys

from bench.launch import rdzvport
from bench.launch.job import PORT_BASE, LaunchOptions, assemble, write_job
from bench.launch.plan import Sweep
from bench.launch.render import render_sbatch
from tests.support.stubs import write_stubs

SCONTROL = """#!/bin/bash
if [ "$2" = hostnames ]; then printf 'n1\\nn2\\n'; else echo "   NodeAddr=127.0.0.1 NodeHostName=h1"; fi
"""
SRUN = """#!/bin/bash
printf '%s\\0' "$@" >> "$STUB_DIR/srun.args"
"""


def bind_all(ports) -> list[socket.socket]:
    """Listening sockets on every port, or none (an OSError) when one of them is taken."""
    socks = []
    try:
        for port in ports:
            s = socket.socket()
            socks.append(s)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("", port))
            s.listen()
    except OSError:
        for s in socks:
            s.close()
        raise
    return socks


@contextlib.contextmanager
def listening(ports):
    socks = bind_all(ports)
    try:
        yield
    finally:
        for s in socks:
            s.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def test_a_free_port_is_kept_and_a_taken_one_moves_to_the_next():
    port = free_port()
    assert rdzvport.pick(port) == port
    with listening([port]):
        assert not rdzvport.is_free(port)
        assert port < rdzvport.pick(port) < port + rdzvport.SPAN


def a_taken_block(span: int) -> tuple[int, list[socket.socket]]:
    """`span` consecutive ports listened on, and the first. A port after a free one may belong to another
    process (the ephemeral range is shared), so a block that cannot be taken whole is given up for another."""
    for _ in range(50):
        port = free_port()
        try:
            return port, bind_all(range(port, port + span))
        except OSError:
            continue
    raise RuntimeError(f"no {span} consecutive free ports found in 50 tries")


def test_all_ports_taken_is_one_line_naming_them_and_the_node():
    port, socks = a_taken_block(rdzvport.SPAN)
    try:
        r = subprocess.run([sys.executable, "-S", rdzvport.__file__, str(port), "nid001"], capture_output=True,
                           text=True, timeout=30)
    finally:
        for s in socks:
            s.close()
    assert r.returncode == 1 and r.stderr == ""
    assert r.stdout.count("\n") == 1
    assert f"ports {port}-{port + rdzvport.SPAN - 1} on nid001" in r.stdout and "in use" in r.stdout


def free_job_block() -> tuple[int, list[socket.socket]]:
    """A job id whose runs' rendezvous block (PORT_BASE + id % 100 * 100, SPAN ports) is free here, listened on:
    a fixed id would meet whatever else on this machine holds a port of its block."""
    for job_id in range(4300, 4400):
        port = PORT_BASE + job_id % 100 * 100
        try:
            return job_id, bind_all(range(port, port + rdzvport.SPAN))
        except OSError:
            continue
    raise RuntimeError("no job id with a free rendezvous block")


def run_job(tmp_path, job_id: int, scontrol: str = SCONTROL):
    stubs = write_stubs(tmp_path / "stubs", (("scontrol", scontrol), ("srun", SRUN)))
    sweep = Sweep([2], 2, ["bare"], train={"device_type": "cpu"})
    opts = LaunchOptions(base_dir=str(tmp_path / "base"), python=sys.executable, check_images=False)
    [job] = assemble(sweep, opts, tmp_path / "sweep", note=lambda _: None)
    write_job(job, render_sbatch(job))
    env = {"PATH": f"{stubs}:{os.environ['PATH']}", "SLURM_JOB_ID": str(job_id), "SLURM_JOB_NODELIST": "n[1-2]",
           "SLURM_CPUS_ON_NODE": "4", "STUB_DIR": str(tmp_path), "SLURMD_NODENAME": "n1"}
    r = subprocess.run(["bash", str(job.script)], cwd=job.job_dir, env=env, capture_output=True, text=True,
                       timeout=60)
    args = (tmp_path / "srun.args").read_text().split("\0")[:-1] if (tmp_path / "srun.args").exists() else []
    return r, args, json.loads((job.runs[0].run_dir / "run.json").read_text())


def test_rendered_job_moves_off_a_taken_port(tmp_path):
    job_id, socks = free_job_block()
    port = PORT_BASE + job_id % 100 * 100
    for s in socks[1:]:  # the block's first port stays taken, the rest free
        s.close()
    try:
        r, args, _ = run_job(tmp_path, job_id)
    finally:
        socks[0].close()
    endpoint = next(a for a in args if a.startswith("--rdzv_endpoint="))
    assert endpoint != f"--rdzv_endpoint=127.0.0.1:{port}"
    assert port < int(endpoint.rsplit(":", 1)[1]) < port + rdzvport.SPAN


def test_rendered_job_with_every_port_taken_fails_at_once_naming_them(tmp_path):
    job_id, socks = free_job_block()
    port = PORT_BASE + job_id % 100 * 100
    try:
        r, args, manifest = run_job(tmp_path, job_id)
    finally:
        for s in socks:
            s.close()
    assert r.returncode == 1, r.stderr
    assert args == []  # no srun: torchrun never started
    assert manifest["status"] == "failed"
    assert f"rendezvous ports {port}-{port + rdzvport.SPAN - 1} on n1" in manifest["message"]


# slurmctld too busy to answer `scontrol show node` (a timeout when many jobs start at once)
SCONTROL_BUSY = """#!/bin/bash
if [ "$2" = hostnames ]; then printf 'n1\\nn2\\n'; exit 0; fi
echo "slurm_load_node error: Socket timed out on send/recv operation" >&2; exit 1
"""


def test_a_busy_slurmctld_falls_back_to_the_node_name(tmp_path):
    job_id, socks = free_job_block()
    for s in socks:
        s.close()
    r, args, manifest = run_job(tmp_path, job_id, SCONTROL_BUSY)
    assert r.returncode == 0, r.stderr
    endpoint = next(a for a in args if a.startswith("--rdzv_endpoint="))
    assert endpoint.startswith("--rdzv_endpoint=n1:")
    assert manifest["status"] != "pending"
