"""Shared by the chat tests: a byte-level tokenizer (each byte its own id, the 9 special tokens after) and a base
directory holding `data generate --chat` stand-ins."""

import pytest

from bench.nanochat.tokenizer import Tokenizer, build_encoding

BOS, USER_START, USER_END, ASSISTANT_START, ASSISTANT_END = 256, 257, 258, 259, 260
PYTHON_START, PYTHON_END, OUTPUT_START, OUTPUT_END = 261, 262, 263, 264


def byte_tokenizer() -> Tokenizer:
    return Tokenizer(build_encoding({bytes([i]): i for i in range(256)}))


@pytest.fixture(scope="module")
def generated_base(tmp_path_factory):
    from bench.nanochat import chatgen

    base = tmp_path_factory.mktemp("chat-base")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NANOCHAT_BASE_DIR", str(base))
        chatgen.generate()
    return base


@pytest.fixture
def chat_base(generated_base, monkeypatch):
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(generated_base))
    return generated_base
