"""The BPE tokenizer: vocab layout, encoding, token bytes, errors.  python -m pytest tests/unit/nanochat/test_tokenizer.py -q"""

import pickle

import pytest
import torch

from bench.errors import ConfigError, DataError
from bench.nanochat import corpus, tokenizer

TEXTS = ["Hello world!", "déjà vu — naïve café", "한국어 텍스트", "x = 12345 + 0.5\n\n\tdef f(): return 'a'\r\n",
         "emoji 🤖🙂", "", " ", "<|bos|> stays text"]


def test_vocab_layout_bytes_merges_then_specials(base_dir_env):
    enc = tokenizer.get_tokenizer().enc
    assert enc.n_vocab == 512
    assert all(enc.decode_single_token_bytes(b) == bytes([b]) for b in range(256))  # id == byte value
    specials = {i: enc.decode_single_token_bytes(i).decode() for i in range(503, 512)}
    assert list(specials.values()) == tokenizer.SPECIAL_TOKENS
    assert all(len(enc.decode_single_token_bytes(i)) >= 2 for i in range(256, 503))  # merges in between
    assert enc._pat_str == tokenizer.SPLIT_PATTERN


def test_encode_decode_round_trip(base_dir_env):
    tok = tokenizer.get_tokenizer()
    for text in TEXTS:
        assert tok.decode(tok.encode(text)) == text
    batch = tok.encode(TEXTS, prepend=tok.get_bos_token_id(), num_threads=2)
    assert isinstance(batch, list) and len(batch) == len(TEXTS)
    assert all(ids[0] == tok.get_bos_token_id() and tok.decode(ids[1:]) == t for ids, t in zip(batch, TEXTS))
    assert tok.encode("a", prepend="<|bos|>")[0] == tok.get_bos_token_id() == 503
    assert tok.get_bos_token_id() not in tok.encode("<|bos|> stays text")  # special strings are not parsed


def test_merges_compress_training_like_text(base_dir_env):
    tok = tokenizer.get_tokenizer()
    text = "\n\n".join(corpus.documents(20, seed=999))
    assert len(text.encode()) / len(tok.encode(text)) > 1.8  # bytes/token well above 1 (raw bytes)


def test_token_bytes_are_upstream_tok_trains(base_dir_env):
    """bpb's denominator as upstream 5c93a56's scripts/tok_train.py writes it: each token decoded alone (tiktoken's
    errors="replace"), its UTF-8 length, 0 for the special tokens; a byte that is no whole character alone counts
    as the 3 bytes of its U+FFFD, not 1."""
    tb = tokenizer.get_token_bytes()
    enc = tokenizer.get_tokenizer().enc
    special_set = set(tokenizer.SPECIAL_TOKENS)
    token_strings = [enc.decode([token_id]) for token_id in range(enc.n_vocab)]  # upstream's loop, verbatim
    upstream = [0 if s in special_set else len(s.encode("utf-8")) for s in token_strings]
    assert tb.dtype == torch.int32 and tb.shape == (512,)
    assert tb.tolist() == upstream
    assert tb[:128].eq(1).all() and tb[128:256].eq(3).all() and tb[503:].eq(0).all()



def test_missing_tokenizer_names_path_and_command(tmp_path, monkeypatch):
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    with pytest.raises(DataError, match=r"no tokenizer at .*tokenizer\.pkl; run `nanochat-bench tokenizer train`"):
        tokenizer.get_tokenizer()
    with pytest.raises(DataError, match="token_bytes.pt"):
        tokenizer.get_token_bytes()


def train_and_measure(base, monkeypatch, trainer):
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(base))
    tokenizer.train_tokenizer(vocab_size=400, texts=corpus.documents(300, seed=1), trainer=trainer)
    tok = tokenizer.get_tokenizer()
    held_out = "\n".join(corpus.documents(30, seed=2))
    assert tok.get_vocab_size() == 400 and tok.decode(tok.encode(held_out)) == held_out
    with open(base / "tokenizer" / "tokenizer.pkl", "rb") as f:
        assert pickle.load(f).n_vocab == 400
    return len(held_out.encode()) / len(tok.encode(held_out))


def test_hf_trainer_compresses_like_upstream_rustbpe(tmp_path, monkeypatch):
    """Same text, same vocab: bytes/token of the HF path (used without rustbpe) within 1% of rustbpe's."""
    pytest.importorskip("rustbpe")
    ours = train_and_measure(tmp_path / "hf", monkeypatch, "hf")
    upstream = train_and_measure(tmp_path / "rustbpe", monkeypatch, "rustbpe")
    assert ours > 1.5  # a broken merge order or byte mapping drops this toward 1.0 (measured ~1.86)
    assert abs(ours - upstream) / upstream < 0.01


def test_too_little_text_for_the_vocab(tmp_path, monkeypatch):
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    with pytest.raises(DataError, match="allows only .* merges.*--vocab_size=65536"):
        tokenizer.train_tokenizer(vocab_size=65536, texts=["tiny text, few pairs"])
    assert not (tmp_path / "tokenizer" / "tokenizer.pkl").exists()


@pytest.mark.parametrize("flags, message", [
    (dict(max_chars=0), "--max_chars=0: must be >= 1"),
    (dict(doc_cap=-100), "--doc_cap=-100: must be >= 1"),  # was silent: each document less its last 100 chars
    (dict(vocab_size=99_999_999_999), "--vocab_size=99999999999: must be at most"),  # was an OverflowError
])
def test_out_of_range_flags_are_refused_before_reading(flags, message, tmp_path, monkeypatch):
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    with pytest.raises(ConfigError, match=message):
        tokenizer.train_tokenizer(**{"vocab_size": 300, **flags}, texts=corpus.documents(20, seed=1), trainer="hf")
    assert not (tmp_path / "tokenizer").exists()


def test_max_chars_and_doc_cap_bound_the_text():
    out = list(tokenizer.capped_texts(["a" * 50, "b" * 50, "c" * 50, "d" * 50], max_chars=70, doc_cap=30))
    assert out == ["a" * 30, "b" * 30, "c" * 30]  # stops once more than max_chars were given


# ----------------------------------------------------------------------------------------------
# The two files are one set (issue 23: a new tokenizer.pkl beside the old token_bytes.pt)


@pytest.fixture
def trained(tmp_path, monkeypatch):
    """A 300-token tokenizer in its own NANOCHAT_BASE_DIR; returns its directory."""
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    return tokenizer.train_tokenizer(vocab_size=300, texts=corpus.documents(100, seed=1), trainer="hf")


def test_a_pair_from_two_trainings_is_refused_at_load(trained, capsys):
    old_bytes = (trained / "token_bytes.pt").read_bytes()
    tokenizer.train_tokenizer(vocab_size=320, texts=corpus.documents(100, seed=1), trainer="hf")
    assert sorted(p.name for p in trained.iterdir()) == ["token_bytes.pt", "tokenizer.pkl"]  # no temp file is left
    (trained / "token_bytes.pt").write_bytes(old_bytes)  # as a cut between the two renames would leave it
    with pytest.raises(DataError, match=r"tokenizer.pkl and token_bytes.pt do not belong together "
                                        r"\(tokenizer.pkl has 320 tokens but token_bytes.pt 300 entries"):
        tokenizer.get_token_bytes()
    from bench.nanochat.tokbin import vocabulary

    with pytest.raises(DataError, match="do not belong together"):  # what the trainer calls first
        vocabulary("")


def test_same_size_but_other_tokens_is_refused(trained):
    lengths = tokenizer.get_token_bytes()
    lengths[260] += 1
    torch.save(lengths, trained / "token_bytes.pt")
    with pytest.raises(DataError, match="their byte lengths differ from token 260"):
        tokenizer.get_token_bytes()


def test_raw_byte_token_bytes_are_refused_with_the_command(trained):
    """A token_bytes.pt of raw token bytes (what `tokenizer train` wrote before) is named as such, not as a pair
    cut between two renames."""
    enc = tokenizer.get_tokenizer().enc
    special_ids = set(enc._special_tokens.values())
    raw = [0 if i in special_ids else len(enc.decode_single_token_bytes(i)) for i in range(enc.n_vocab)]
    torch.save(torch.tensor(raw, dtype=torch.int32), trained / "token_bytes.pt")
    with pytest.raises(DataError, match=r"token_bytes.pt counts each token's raw bytes.*run `nanochat-bench "
                                        r"tokenizer train` again"):
        tokenizer.get_token_bytes()


@pytest.mark.parametrize("name", ["tokenizer.pkl", "token_bytes.pt"])
def test_truncated_tokenizer_files_are_one_line_naming_the_file(trained, name, capsys):
    from bench.cli import main

    path = trained / name
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(DataError, match=rf"{path} is damaged \(.*\); run `nanochat-bench tokenizer train` again"):
        tokenizer.get_token_bytes()
    if name == "tokenizer.pkl":
        assert main(["tokenizer", "eval"]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"error: {path} is damaged")


def test_a_tokenizer_file_of_another_kind_is_damaged(trained):
    with open(trained / "tokenizer.pkl", "wb") as f:
        pickle.dump({"not": "an encoding"}, f)
    with pytest.raises(DataError, match="holds a dict, not a tiktoken Encoding"):
        tokenizer.get_tokenizer()
