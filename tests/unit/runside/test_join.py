"""A rank that never joins the process group (bench/runside/join.py): the wait is bounded by
--join_timeout_s and its error names the missing rank and what its heartbeat says.

    python -m pytest tests/unit/runside/test_join.py -q
"""

import socket
import time

import pytest

from bench.errors import ConfigError
from bench.nanochat.config import parse_args
from bench.runside.join import (JOIN_TIMEOUT_MULTINODE_S, JOIN_TIMEOUT_S, NotJoined, join_bound, join_group, missing_ranks,
                                 not_joined_message)
from tests.support.synthetic import write_heartbeat

GLOO_TIMEOUT = "wait timeout after 30000ms, keys: /default_pg/0//cpu//0/1"  # torch 2.13's, rank 1 missing


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_real_init_whose_peer_never_comes_ends_at_the_bound_naming_it(monkeypatch):
    import torch.distributed as dist

    monkeypatch.delenv("NANOCHAT_BENCH_RUN_DIR", raising=False)
    url = f"tcp://127.0.0.1:{free_port()}"
    t = time.time()
    with pytest.raises(NotJoined, match=r"^rank 1 did not join the process group within 2 s of rank 0 "
                                        r"\(--join_timeout_s=2\): it has no heartbeat at all"):
        join_group(lambda timeout: dist.init_process_group("gloo", init_method=url, rank=0, world_size=2,
                                                           timeout=timeout), 0, 2, 2.0)
    assert time.time() - t < 10 and not dist.is_initialized()


def test_the_store_keys_name_the_missing_rank_and_its_beat_says_how():
    assert missing_ranks(GLOO_TIMEOUT, 0, 4) == [1]
    assert missing_ranks(GLOO_TIMEOUT, 2, 4) == [1]


def test_a_stale_beat_is_a_stopped_rank_a_fresh_one_a_slow_one(tmp_path, monkeypatch):
    monkeypatch.setenv("NANOCHAT_BENCH_RUN_DIR", str(tmp_path))
    monkeypatch.delenv("NANOCHAT_BENCH_T0", raising=False)
    now = time.time()
    write_heartbeat(tmp_path, 1, now - 25, None, event="imports_done", host="nid2")
    msg = not_joined_message(GLOO_TIMEOUT, 0, 2, 30, now=now)
    assert msg.startswith("rank 1 did not join the process group within 30 s of rank 0 (--join_timeout_s=30): "
                          "it has stopped on nid2 (pid 101): no heartbeat for 25 s, last event `imports_done`")
    write_heartbeat(tmp_path, 1, now - 1, None, event="start", host="nid2")
    slow = not_joined_message(GLOO_TIMEOUT, 0, 2, 30, now=now)
    assert "it has a live heartbeat on nid2 (pid 101), last event `start`" in slow
    assert "larger --join_timeout_s" in msg


def test_without_keys_the_ranks_without_a_live_beat_are_named(tmp_path, monkeypatch):
    monkeypatch.setenv("NANOCHAT_BENCH_RUN_DIR", str(tmp_path))
    monkeypatch.delenv("NANOCHAT_BENCH_T0", raising=False)
    now = time.time()
    for rank in (0, 2):
        write_heartbeat(tmp_path, rank, now - 1, None, event="start")
    write_heartbeat(tmp_path, 3, now - 60, None, event="start")
    msg = not_joined_message("Socket Timeout", 0, 4, 30, now=now)
    assert msg.startswith("ranks 1, 3 did not join") and "rank 1 has no heartbeat at all" in msg
    assert "rank 3 has stopped on nid1 (pid 103): no heartbeat for 60 s" in msg


def test_the_flag_defaults_to_the_bound_and_refuses_too_short_a_one():
    assert parse_args([]).join_timeout_s == -1
    # one node: its ranks start together; across nodes each starts its own container first
    assert join_bound(-1, 4, 4) == JOIN_TIMEOUT_S == 30 and join_bound(-1, 8, 4) == JOIN_TIMEOUT_MULTINODE_S
    assert join_bound(45, 8, 4) == 45 and join_bound(0, 8, 4) is None
    assert parse_args(["--join_timeout_s=0"]).join_timeout_s == 0
    with pytest.raises(ConfigError, match=r"--join_timeout_s=1: give 0 \(off\), -1 \(the default\) or 10 to"):
        parse_args(["--join_timeout_s=1"]).validate()
