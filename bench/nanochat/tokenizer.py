"""GPT-4-style byte-level BPE: trained once on the train split, used through tiktoken for speed.

Mirrors upstream nanochat/tokenizer.py: the same split regex, ids 0-255 = raw bytes (no GPT-2
byte permutation), then merges in merge order, then the 9 special tokens; saved as a pickled tiktoken
Encoding in `$NANOCHAT_BASE_DIR/tokenizer/tokenizer.pkl` plus `token_bytes.pt` for bits-per-byte.
The two are a pair: written together (`save_tokenizer`), checked together at load (`check_pair`), and a
damaged file is one error line naming it, not a traceback.

Training: `trainer="auto"` (the default) uses upstream's Rust trainer `rustbpe` when it is installed
(measured ~2-4x faster than HF `tokenizers` at equal compression: benchmarks/bench_tokenizer.py) and HF
`tokenizers` otherwise; both can be forced. Either way the merges become a tiktoken Encoding, so
encoding at training time is tiktoken's multi-threaded Rust code.
"""

import functools
import importlib.util
import os
import pickle
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Iterable, Iterator

from bench import paths
from bench.contract import atomic_target
from bench.errors import BenchError, ConfigError, DataError, first_line, os_reason, os_remedy
from bench.nanochat.common import ELSEWHERE as BASE_ELSEWHERE, get_base_dir

SPLIT_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,2}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"""
)
SPECIAL_TOKENS = [
    "<|bos|>",  # every document starts with it; the only one pretraining uses
    "<|user_start|>", "<|user_end|>",
    "<|assistant_start|>", "<|assistant_end|>",
    "<|python_start|>", "<|python_end|>",
    "<|output_start|>", "<|output_end|>",
]
TRAINERS = ("auto", "rustbpe", "hf")
TOKENIZER_PKL = "tokenizer.pkl"
TOKEN_BYTES_PT = "token_bytes.pt"
DEFAULT_VOCAB_SIZE = 65536  # upstream's (tok_train's --vocab_size), the speedrun's
# Far above any LLM's vocabulary (GPT-4's is ~100k); HF's trainer aborts the process on sizes near 2^30 and
# rustbpe overflows at 2^32, after all the text was read
MAX_VOCAB = 1 << 24
ELSEWHERE = f"{BASE_ELSEWHERE}, then run `nanochat-bench tokenizer train` again"
FIX_TOKENIZER = "run `nanochat-bench tokenizer train` (after `nanochat-bench data generate` or `data download`)"


def tokenizer_dir() -> Path:
    return get_base_dir() / paths.TOKENIZER_DIR


# ----------------------------------------------------------------------------------------------
# Training


def _gpt2_byte_decoder() -> dict[str, int]:
    """HF's ByteLevel shows byte b as a printable character; this maps the character back to b."""
    from tokenizers import pre_tokenizers

    # The alphabet lists the 256 characters; bytes_to_unicode keeps printable bytes as themselves
    # and shifts the rest to 256+, in byte order, so sorting by (is_shifted, codepoint) recovers b.
    printable = [b for b in range(256) if chr(b) in pre_tokenizers.ByteLevel.alphabet()]
    shifted = [b for b in range(256) if b not in printable]
    decoder = {chr(b): b for b in printable}
    decoder.update({chr(256 + i): b for i, b in enumerate(shifted)})
    assert set(decoder) == set(pre_tokenizers.ByteLevel.alphabet())
    return decoder


def train_ranks_hf(texts: Iterable[str], num_tokens: int) -> dict[bytes, int]:
    """Train BPE with HF `tokenizers`; return tiktoken ranks {token bytes: id}, ids 0-255 = bytes."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(byte_fallback=False, unk_token=None, fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(pattern=Regex(SPLIT_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    trainer = trainers.BpeTrainer(
        vocab_size=num_tokens, show_progress=False, min_frequency=0,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[],
    )
    tok.train_from_iterator(texts, trainer)
    decoder = _gpt2_byte_decoder()
    ranks = {bytes([b]): b for b in range(256)}
    # HF numbers merged tokens in the order the merges were made: that order is the BPE rank
    merged = sorted((i, s) for s, i in tok.get_vocab().items() if len(s) > 1)
    for rank, (_, s) in enumerate(merged, start=256):
        ranks[bytes(decoder[c] for c in s)] = rank
    return ranks


def train_ranks_rustbpe(texts: Iterable[str], num_tokens: int) -> dict[bytes, int]:
    """Train BPE with upstream's `rustbpe` trainer; same return value as train_ranks_hf."""
    try:
        import rustbpe
    except ImportError:
        raise ConfigError("trainer 'rustbpe' needs the rustbpe package: pip install rustbpe") from None
    tok = rustbpe.Tokenizer()
    tok.train_from_iterator(iter(texts), num_tokens, pattern=SPLIT_PATTERN)
    return {bytes(b): rank for b, rank in tok.get_mergeable_ranks()}


def capped_texts(docs: Iterable[str], max_chars: int, doc_cap: int) -> Iterator[str]:
    """Docs cropped to doc_cap characters, stopping once more than max_chars have been given (upstream)."""
    seen = 0
    for doc in docs:
        doc = doc[:doc_cap]
        seen += len(doc)
        yield doc
        if seen > max_chars:
            return


def build_encoding(ranks: dict[bytes, int]):
    """The tiktoken Encoding: merges then the 9 special tokens, ids contiguous from 0."""
    import tiktoken

    special = {name: len(ranks) + i for i, name in enumerate(SPECIAL_TOKENS)}
    return tiktoken.Encoding(name="nanochat-bench", pat_str=SPLIT_PATTERN, mergeable_ranks=ranks,
                             special_tokens=special)


def check_vocab_size(vocab_size: int) -> None:
    """A vocabulary this tokenizer can have (and so a model of it: `nanochat-bench model --vocab_size`)."""
    if vocab_size < 256 + len(SPECIAL_TOKENS) + 1:
        raise ConfigError(f"--vocab_size={vocab_size}: must be at least {256 + len(SPECIAL_TOKENS) + 1} "
                          f"(256 byte tokens, >= 1 merge, {len(SPECIAL_TOKENS)} special tokens)")
    if vocab_size > MAX_VOCAB:
        raise ConfigError(f"--vocab_size={vocab_size}: must be at most {MAX_VOCAB:,} (upstream's is 65,536)")


def check_settings(vocab_size: int, max_chars: int, doc_cap: int) -> None:
    """The values training refuses, checked before any text is read (and by a flow's plan, before a job)."""
    check_vocab_size(vocab_size)
    for flag, value in (("--max_chars", max_chars), ("--doc_cap", doc_cap)):
        if value < 1:  # a negative --doc_cap would cut the end off each document, silently
            raise ConfigError(f"{flag}={value}: must be >= 1 (characters)")


def train_tokenizer(
    vocab_size: int = DEFAULT_VOCAB_SIZE, max_chars: int = 10_000_000_000, doc_cap: int = 10_000, trainer: str = "auto",
    texts: Iterable[str] | None = None, elsewhere: str = ELSEWHERE,
) -> Path:
    """Train on the train split (or `texts`), save tokenizer.pkl and token_bytes.pt; return the directory.
    `elsewhere`: what a tokenizer that cannot be written tells the caller's user to do instead (as
    dataset.generate_shards' `elsewhere`)."""
    if trainer not in TRAINERS:
        raise ConfigError(f"unknown tokenizer trainer {trainer!r}; valid: {', '.join(TRAINERS)}")
    if trainer == "auto":
        trainer = "rustbpe" if importlib.util.find_spec("rustbpe") else "hf"
    check_settings(vocab_size, max_chars, doc_cap)
    if texts is None:
        from bench.nanochat.dataset import parquets_iter_batched

        texts = (doc for batch in parquets_iter_batched("train") for doc in batch)
    num_tokens = vocab_size - len(SPECIAL_TOKENS)
    print(f"tokenizer: reading the training text (up to {max_chars:,} characters), then learning "
          f"{num_tokens - 256:,} merges with {trainer}", flush=True)
    counter = _CharCounter(capped_texts(texts, max_chars, doc_cap), num_tokens - 256)
    t0 = time.time()
    ranks = (train_ranks_hf if trainer == "hf" else train_ranks_rustbpe)(counter, num_tokens)
    train_s = time.time() - t0
    if len(ranks) != num_tokens:
        raise DataError(f"the training text ({counter.chars:,} characters) allows only {len(ranks) - 256} merges, "
                        f"{num_tokens - 256} are needed for --vocab_size={vocab_size}; give more text "
                        f"(more shards, larger --max_chars) or a smaller --vocab_size")
    out = save_tokenizer(build_encoding(ranks), elsewhere=elsewhere)
    print(f"trained {trainer} BPE: vocab {vocab_size:,} on {counter.chars:,} characters in {train_s:.1f}s "
          f"({counter.chars / max(train_s, 1e-9):,.0f} chars/s) -> {out}")
    return out


class _CharCounter:
    """Passes texts through and counts their characters (for the chars/s figure and error messages),
    with a progress line every PROGRESS_CHARS and one when the text is read and merging begins: on the
    full 240 shards reading alone takes minutes."""

    PROGRESS_CHARS = 500_000_000

    def __init__(self, texts: Iterable[str], merges: int = 0):
        self.texts, self.chars, self.merges = texts, 0, merges

    def __iter__(self):
        t0, next_report = time.time(), self.PROGRESS_CHARS
        for text in self.texts:
            self.chars += len(text)
            if self.chars >= next_report:
                print(f"tokenizer: read {self.chars:,} characters ({time.time() - t0:.0f}s)", flush=True)
                next_report += self.PROGRESS_CHARS
            yield text
        print(f"tokenizer: read {self.chars:,} characters in {time.time() - t0:.1f}s; learning {self.merges:,} "
              f"merges", flush=True)


def token_byte_lengths(encoding) -> list[int]:
    """UTF-8 bytes of every token as upstream's scripts/tok_train.py counts them, bpb's denominator: the token
    decoded alone (errors replaced), so a token that is part of a character counts the 3 bytes of its U+FFFD,
    not its raw bytes, which would make every bpb differ from upstream's; 0 for specials."""
    special_ids = set(encoding._special_tokens.values())
    return [0 if i in special_ids else len(encoding.decode([i]).encode("utf-8")) for i in range(encoding.n_vocab)]


def raw_byte_lengths(encoding) -> list[int]:
    """Each token's raw bytes (0 for specials): what token_bytes.pt held before it counted as upstream does."""
    special_ids = set(encoding._special_tokens.values())
    return [0 if i in special_ids else len(encoding.decode_single_token_bytes(i)) for i in range(encoding.n_vocab)]


def save_tokenizer(encoding, directory: Path | None = None, elsewhere: str = ELSEWHERE) -> Path:
    """Write tokenizer.pkl and token_bytes.pt as a pair; return the directory.

    Both are written to temp files beside them first, then renamed into place together (token_bytes.pt,
    then tokenizer.pkl). A failure while writing (a full disk) leaves the previous pair as it was, with one
    line saying why; a crash between the two renames leaves a pair that `get_token_bytes` finds does not
    belong together, and says so."""
    import torch

    directory = directory or tokenizer_dir()
    lengths = torch.tensor(token_byte_lengths(encoding), dtype=torch.int32)
    try:
        with ExitStack() as renames:  # each renamed when the block ends cleanly, the last one entered first
            for name, write in ((TOKENIZER_PKL, lambda f: pickle.dump(encoding, f)),
                                (TOKEN_BYTES_PT, lambda f: torch.save(lengths, f))):
                with open(renames.enter_context(atomic_target(directory / name)), "wb") as f:
                    write(f)
                    f.flush()
                    os.fsync(f.fileno())  # a full disk fails here, before any rename
    except OSError as e:
        raise DataError(f"cannot write the tokenizer into {directory}: {os_reason(e)}; the tokenizer there before "
                        f"(if any) is unchanged; {os_remedy(e, elsewhere)}") from None
    return directory


# ----------------------------------------------------------------------------------------------
# Use


class Tokenizer:
    """The subset of upstream's RustBPETokenizer that pretraining uses, over a tiktoken Encoding."""

    def __init__(self, encoding):
        self.enc = encoding
        self.bos_token_id = encoding.encode_single_token("<|bos|>")

    def get_vocab_size(self) -> int:
        return self.enc.n_vocab

    def get_bos_token_id(self) -> int:
        return self.bos_token_id

    def encode_special(self, text: str) -> int:
        return self.enc.encode_single_token(text)

    def encode(self, text, prepend=None, num_threads: int = 4):
        """str -> ids, or list of str -> list of ids (multi-threaded); `prepend` (id or special name) goes first."""
        if isinstance(prepend, str):
            prepend = self.encode_special(prepend)
        if isinstance(text, str):
            ids = self.enc.encode_ordinary(text)  # special-token strings in text stay plain text
            return [prepend] + ids if prepend is not None else ids
        if isinstance(text, list):
            batch = self.enc.encode_ordinary_batch(text, num_threads=num_threads)
            if prepend is not None:
                for ids in batch:
                    ids.insert(0, prepend)
            return batch
        raise TypeError(f"encode takes a str or a list of str, not {type(text).__name__}")

    __call__ = encode

    def decode(self, ids) -> str:
        return self.enc.decode(ids)


def _require(path: Path) -> Path:
    if not path.is_file():
        raise DataError(f"no tokenizer at {path}; {FIX_TOKENIZER}")
    return path


def _damaged(path: Path, e: BaseException) -> DataError:
    return DataError(f"{path} is damaged ({first_line(e)[:160]}); run `nanochat-bench tokenizer train` again to "
                     f"write the tokenizer's files anew")


@functools.lru_cache(maxsize=4)
def _load_encoding(path: Path, mtime_ns: int, size: int):
    """The pickled tiktoken Encoding at `path`, unpickled once per version of the file (the trainer reads
    it for the tokenizer and again to check token_bytes.pt against it)."""
    import tiktoken

    try:
        with open(path, "rb") as f:
            encoding = pickle.load(f)
    except Exception as e:  # noqa: BLE001 - a cut or overwritten pickle fails in many ways, all meaning "damaged"
        raise _damaged(path, e) from None
    if not isinstance(encoding, tiktoken.Encoding):
        raise _damaged(path, TypeError(f"it holds a {type(encoding).__name__}, not a tiktoken Encoding"))
    return encoding


def _encoding():
    path = _require(tokenizer_dir() / TOKENIZER_PKL)
    st = path.stat()
    return _load_encoding(path, st.st_mtime_ns, st.st_size)


def get_tokenizer() -> Tokenizer:
    """The trained tokenizer of $NANOCHAT_BASE_DIR (DataError naming the path if it is missing or damaged)."""
    return Tokenizer(_encoding())


def saved_vocab_size() -> int | None:
    """The vocabulary of the tokenizer $NANOCHAT_BASE_DIR holds; None where it holds none, or a damaged one (which
    its users' own load names). A base directory that is not there is not made."""
    if not (Path(paths.base_dir()) / paths.TOKENIZER_DIR / TOKENIZER_PKL).is_file():
        return None
    try:
        return get_tokenizer().get_vocab_size()
    except BenchError:
        return None


def refuse_raw_byte_counts(encoding, have: list[int], path: Path, command: str) -> None:
    """DataError where `have`, the byte counts read from `path`, are each token's raw bytes, as earlier releases
    wrote them (token_bytes.pt, `data bin`'s token_bytes.npy), not upstream's (token_byte_lengths): `command` writes
    them again."""
    if have == raw_byte_lengths(encoding) != token_byte_lengths(encoding):
        raise DataError(f"{path} counts each token's raw bytes, as an earlier nanochat-bench wrote it, not its bytes "
                        f"decoded alone as upstream's, so its bpb would not be upstream's; run `nanochat-bench "
                        f"{command}` again")


def check_pair(encoding, token_bytes, directory: Path) -> None:
    """DataError unless token_bytes.pt is the one written with tokenizer.pkl: one entry per token, each the
    token's byte length. Two `tokenizer train` runs, or one cut between its two renames, leave a pair
    that indexes out of range (an IndexError mid-training) or, worse, gives every bpb wrong bytes."""
    expected = token_byte_lengths(encoding)
    have = token_bytes.tolist()
    if have == expected:
        return
    refuse_raw_byte_counts(encoding, have, directory / TOKEN_BYTES_PT, "tokenizer train")
    if len(have) != len(expected):
        where = f"tokenizer.pkl has {len(expected):,} tokens but token_bytes.pt {len(have):,} entries"
    else:
        first = next(i for i, (a, b) in enumerate(zip(have, expected)) if a != b)
        where = f"their byte lengths differ from token {first}"
    raise DataError(f"{directory}: {TOKENIZER_PKL} and {TOKEN_BYTES_PT} do not belong together ({where}; written "
                    f"by two `tokenizer train` runs, or one that did not finish); run `nanochat-bench tokenizer "
                    f"train` again")


def get_token_bytes(device="cpu"):
    """int32 [vocab]: UTF-8 bytes of each token, 0 for special tokens (bpb's denominator); checked to be
    the pair of tokenizer.pkl (DataError otherwise)."""
    import torch

    path = _require(tokenizer_dir() / TOKEN_BYTES_PT)
    try:
        with open(path, "rb") as f:
            lengths = torch.load(f, map_location="cpu")
    except Exception as e:  # noqa: BLE001 - torch.load of a cut zip raises RuntimeError, of garbage many kinds
        raise _damaged(path, e) from None
    if not isinstance(lengths, torch.Tensor) or lengths.dim() != 1:
        raise _damaged(path, TypeError("it holds no 1-D tensor of token byte lengths"))
    check_pair(_encoding(), lengths, path.parent)
    return lengths.to(device)


# ----------------------------------------------------------------------------------------------
# Evaluation (upstream scripts/tok_eval.py)


def eval_texts() -> dict[str, str]:
    """The offline texts of corpus.eval_texts plus the first row group of each split when shards exist."""
    from bench.nanochat import corpus, dataset

    texts = corpus.eval_texts()
    for split in dataset.SPLITS:
        try:
            first = next(dataset.parquets_iter_batched(split), None)
        except DataError:
            continue  # no shards yet: the offline texts alone
        if first:
            texts[f"data-{split}"] = "\n".join(first)
    return texts


def compression_rows(tokenizer: Tokenizer, texts: dict[str, str]) -> list[tuple[str, int, int]]:
    """(name, UTF-8 bytes, tokens) per text: bytes/token is the compression ratio tok_eval reports."""
    return [(name, len(text.encode("utf-8")), len(tokenizer.encode(text))) for name, text in texts.items()]
