"""Staged chat data: what a missing, corrupt or mixed file does, the generate/download commands' refusals.
The download is tried against a closed local port (no site network here).
python -m pytest tests/unit/nanochat/test_chat_staging.py -q"""

import os
import subprocess
import sys

import pytest

from bench.errors import DataError
from bench.nanochat import chatdata, chatgen, chatstage
from bench.nanochat.tasks.customjson import CustomJSON
from bench.nanochat.tasks.smoltalk import SmolTalk
from bench.nanochat.tasks.spellingbee import SpellingBee


def cli(*args, base):
    env = dict(os.environ, NANOCHAT_BASE_DIR=str(base), PYTHONPATH=os.getcwd())
    return subprocess.run([sys.executable, "-m", "bench.cli", *args], capture_output=True, text=True, env=env,
                          timeout=120)


def test_a_missing_staged_split_names_the_download_command(tmp_path, monkeypatch):
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    for build in (lambda: SmolTalk(split="train"), CustomJSON, lambda: SpellingBee(size=3)):
        with pytest.raises(DataError, match="nanochat-bench data download --chat") as e:
            build()
        assert "\n" not in str(e.value) and str(tmp_path) in str(e.value)


def test_a_corrupt_jsonl_line_names_file_and_line(tmp_path):
    path = tmp_path / "conv.jsonl"
    path.write_text('[{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]\n\n{"role": oops\n')
    with pytest.raises(DataError, match=rf"{path}:3: not valid JSON"):
        CustomJSON(path)
    path.write_text('[{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]\n')
    with pytest.raises(DataError, match=rf"{path}:1: message 1 must be .*assistant"):
        CustomJSON(path)


def test_a_damaged_parquet_file_names_it(tmp_path, monkeypatch):
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    chatgen.generate()
    victim = chatdata.split_files(chatdata.hub_split("openai/gsm8k", "main", "train"))[0]
    victim.write_bytes(victim.read_bytes()[:100])
    with pytest.raises(DataError, match=rf"{victim}: not a readable parquet file"):
        chatstage.check_split(chatdata.hub_split("openai/gsm8k", "main", "train"))


def test_generate_refuses_to_replace_then_overwrites(tmp_path):
    first = cli("data", "generate", "--chat", base=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "generated " in first.stdout and "identity_conversations.jsonl: 24 rows" in first.stdout
    again = cli("data", "generate", "--chat", base=tmp_path)
    assert again.returncode == 1 and again.stderr.count("\n") == 1 and "--overwrite" in again.stderr
    assert cli("data", "generate", "--chat", "--overwrite", base=tmp_path).returncode == 0


def test_download_refuses_to_mix_with_stand_ins_and_fails_offline_in_one_line(tmp_path):
    assert cli("data", "generate", "--chat", base=tmp_path).returncode == 0
    mixed = cli("data", "download", "--chat", "--url", "http://127.0.0.1:9", base=tmp_path)
    assert mixed.returncode == 1 and "stand-in is staged there" in mixed.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    offline = cli("data", "download", "--chat", "--url", "http://127.0.0.1:9", "--retries", "1", base=empty)
    assert offline.returncode == 1 and offline.stderr.count("\n") == 1, offline.stderr
    assert "1 attempt(s) failed" in offline.stderr and "--url" in offline.stderr
    assert "-n/--num-shards" in cli("data", "download", base=empty).stderr


def test_generated_plain_files_are_known_as_stand_ins(tmp_path, monkeypatch):
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    chatgen.generate()
    identity = tmp_path / chatdata.IDENTITY_FILE
    assert chatdata.is_generated_file(identity) and chatdata.is_generated_file(tmp_path / chatdata.WORDS_FILE)
    for split in chatdata.HUB_SPLITS:  # as if the hub splits had been downloaded over the stand-ins
        for f in chatdata.split_files(split):
            f.unlink()
    with pytest.raises(DataError, match=rf"{identity}: a `data generate --chat` stand-in"):
        chatstage._stage_file(chatdata.IDENTITY_FILE, "http://127.0.0.1:9/x", 1, 1.0, overwrite=False)
    identity.write_text(identity.read_text() + '[{"role": "user", "content": "a"}, '
                                               '{"role": "assistant", "content": "b"}]\n')
    assert not chatdata.is_generated_file(identity)  # changed since: not the stand-in any more
