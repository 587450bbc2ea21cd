"""The chat data of mid-training, SFT and chat evaluation, staged under $NANOCHAT_BASE_DIR for offline nodes.

Upstream nanochat fetches these at run time on every rank (`datasets.load_dataset`, and urlopen for two files);
compute nodes usually have no internet, so here they are staged once and the tasks only read the staged files:
- Hugging Face datasets as the hub's own parquet files, under `chat_data/<owner>/<name>/<path in the repo>`;
- `identity_conversations.jsonl` and `words_alpha.txt` where upstream keeps them, in the base directory itself.
A row's place after upstream's `.shuffle(seed=42)` is HF datasets' permutation, numpy's
`default_rng(42).permutation(n)`, applied here without the `datasets` package.
"""

import functools
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from bench.contract import write_text_atomic
from bench.errors import DataError, json_reason
from bench.nanochat.common import get_base_dir

CHAT_DIR = "chat_data"
SHUFFLE_SEED = 42
GENERATED_KEY = b"nanochat_bench_generated"  # parquet metadata of a `data generate --chat` stand-in
FIX_MISSING = "run `nanochat-bench data download --chat` (offline stand-ins: `nanochat-bench data generate --chat`)"
IDENTITY_FILE = "identity_conversations.jsonl"
IDENTITY_URL = "https://karpathy-public.s3.us-west-2.amazonaws.com/identity_conversations.jsonl"
WORDS_FILE = "words_alpha.txt"
WORDS_URL = "https://raw.githubusercontent.com/dwyl/english-words/refs/heads/master/words_alpha.txt"
# what no entry of a word list holds (words_alpha.txt is letters; dwyl's other lists add digits and ' - . &): a
# line with one is an HTML error page, JSON or binary (bytes that are not UTF-8 read as \udc80-\udcff) instead
NOT_A_WORD = re.compile(r'[\s<>{}"\x00-\x1f\x7f\udc80-\udcff]')


@dataclass(frozen=True)
class HubSplit:
    """One split of a Hugging Face dataset: the repo, the config/split upstream asks for, and its files there."""
    repo: str
    config: str
    split: str
    pattern: str  # glob of its parquet files inside the repo
    columns: tuple[str, ...]  # what the task reads (checked when staged)


def _split(repo, config, split, folder, columns) -> HubSplit:
    return HubSplit(repo, config, split, f"{folder}/{split}-*.parquet", columns)


_SMOL = ("messages",)
_MMLU = ("question", "subject", "choices", "answer")
_GSM = ("question", "answer")
_ARC = ("question", "choices", "answerKey")
HUB_SPLITS = (
    _split("HuggingFaceTB/smol-smoltalk", "default", "train", "data", _SMOL),
    _split("HuggingFaceTB/smol-smoltalk", "default", "test", "data", _SMOL),
    _split("cais/mmlu", "auxiliary_train", "train", "auxiliary_train", ("train",)),
    _split("cais/mmlu", "all", "test", "all", _MMLU),
    _split("openai/gsm8k", "main", "train", "main", _GSM),
    _split("openai/gsm8k", "main", "test", "main", _GSM),
    *(_split("allenai/ai2_arc", sub, split, sub, _ARC)
      for sub in ("ARC-Easy", "ARC-Challenge") for split in ("train", "test")),
    _split("openai/openai_humaneval", "openai_humaneval", "test", "openai_humaneval",
           ("prompt", "canonical_solution", "test", "entry_point")),
)


def chat_dir() -> Path:
    return get_base_dir() / CHAT_DIR


def hub_split(repo: str, config: str, split: str) -> HubSplit:
    for s in HUB_SPLITS:
        if (s.repo, s.config, s.split) == (repo, config, split):
            return s
    known = ", ".join(f"{s.repo} {s.config}/{s.split}" for s in HUB_SPLITS)
    raise DataError(f"no staged chat data is defined for {repo} {config}/{split} (known: {known})")


def split_files(s: HubSplit, root: Path | None = None) -> list[Path]:
    """The staged parquet files of a split, in the order HF datasets reads them (sorted names)."""
    folder = (root or chat_dir()) / s.repo
    return sorted(folder.glob(s.pattern))


def read_staged_table(path: Path, columns: tuple[str, ...], fix: str = FIX_MISSING):
    """The file's table; DataError naming it, what is wrong and `fix` when it does not read or lacks a column."""
    try:
        table = pq.read_table(path)
    except Exception as e:  # pyarrow raises several types for a truncated or foreign file
        raise DataError(f"{path}: not a readable parquet file ({type(e).__name__}: {e}); {fix}") from None
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise DataError(f"{path}: lacks column(s) {', '.join(missing)} (has {', '.join(table.column_names)}); "
                        f"{fix}")
    return table


def is_generated(path: Path) -> bool:
    try:
        return GENERATED_KEY in (pq.read_schema(path).metadata or {})
    except Exception:  # unreadable: not ours either way; the readers name it
        return False


GENERATED_FILES = "generated.json"  # under chat_data/: sha256 of the plain files `data generate --chat` wrote


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def mark_generated(written: dict[Path, Path]) -> None:
    """Plain files have no footer to carry a mark: their digests are listed beside the staged data instead.
    `written`: each file's final path -> where its content is now (a temp file renamed onto it after the mark)."""
    chat_dir().mkdir(parents=True, exist_ok=True)
    write_text_atomic(chat_dir() / GENERATED_FILES,
                      json.dumps({final.name: _sha256(now) for final, now in written.items()}, indent=1) + "\n")


def is_generated_file(path: Path) -> bool:
    """Whether `path` is a stand-in `data generate --chat` wrote (an unreadable record marks nothing)."""
    record = chat_dir() / GENERATED_FILES
    if not path.is_file() or not record.is_file():
        return False
    try:
        digests = json.loads(record.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(digests, dict) and digests.get(path.name) == _sha256(path)


class ShuffledRows:
    """A staged split, indexed in upstream's `load_dataset(...).shuffle(seed=42)` order; rows are read on demand."""

    def __init__(self, s: HubSplit, seed: int = SHUFFLE_SEED, root: Path | None = None):
        files = split_files(s, root)
        if not files:
            raise DataError(f"{(root or chat_dir()) / s.repo / s.pattern}: missing staged chat data ({s.repo} "
                            f"{s.config}/{s.split}); {FIX_MISSING}")
        import pyarrow as pa

        self.table = pa.concat_tables([read_staged_table(f, s.columns) for f in files]).combine_chunks()
        self.order = np.random.default_rng(seed).permutation(self.table.num_rows)

    def __len__(self) -> int:
        return len(self.order)

    def __getitem__(self, index: int) -> dict:
        return self.table.slice(int(self.order[index]), 1).to_pylist()[0]


def shuffled_rows(repo: str, config: str, split: str) -> ShuffledRows:
    """One read per split, base directory and process: the mixtures and the evaluations share splits."""
    return _shuffled_rows(repo, config, split, chat_dir(), _files_key(split_files(hub_split(repo, config, split))))


def _files_key(files: list[Path]) -> tuple:
    return tuple((str(f), f.stat().st_mtime_ns, f.stat().st_size) for f in files)


@functools.lru_cache(maxsize=32)
def _shuffled_rows(repo: str, config: str, split: str, root: Path, _key: tuple) -> ShuffledRows:
    return ShuffledRows(hub_split(repo, config, split), root=root)


def staged_file(name: str) -> Path:
    """A staged single file (identity conversations, word list); DataError naming the command when absent."""
    path = get_base_dir() / name
    if not path.is_file():
        raise DataError(f"{path}: missing staged chat data; {FIX_MISSING}")
    return path


def missing_staged(base: Path) -> str:
    """"" when every split and file `data download --chat` stages is under the base directory `base`, else one line
    naming the first one missing (and how many more) and the command. Only names are looked up, nothing is read:
    a flow asks before hours of pre-training, and the stage still checks each file's contents when it reads it."""
    root, base = Path(base) / CHAT_DIR, Path(base)
    missing = [root / s.repo / s.pattern for s in HUB_SPLITS if not split_files(s, root)]
    missing += [base / name for name in (IDENTITY_FILE, WORDS_FILE) if not (base / name).is_file()]
    if not missing:
        return ""
    more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
    return f"{missing[0]}: missing staged chat data{more}; {FIX_MISSING}"


def read_jsonl_conversations(path: Path) -> list[list[dict]]:
    """Each non-blank line a JSON array of >= 2 {role, content: str} messages alternating from user;
    DataError naming file and line otherwise."""
    with open(path, encoding="utf-8") as f:
        return [_conversation_line(path, lineno, line.strip()) for lineno, line in enumerate(f, 1) if line.strip()]


def _conversation_line(path: Path, lineno: int, line: str) -> list[dict]:
    where = f"{path}:{lineno}"
    try:
        messages = json.loads(line)
    except json.JSONDecodeError as e:
        raise DataError(f"{where}: not valid JSON ({json_reason(e, one_line=True)}); each line must be a JSON array "
                        "of {\"role\", \"content\"} messages") from None
    if not isinstance(messages, list) or len(messages) < 2:
        raise DataError(f"{where}: expected a JSON array of at least 2 messages")
    for i, m in enumerate(messages):
        expected = "user" if i % 2 == 0 else "assistant"
        if not isinstance(m, dict) or m.get("role") != expected or not isinstance(m.get("content"), str):
            got = m.get("role") if isinstance(m, dict) else type(m).__name__
            raise DataError(f"{where}: message {i} must be {{\"role\": \"{expected}\", \"content\": <str>}} "
                            f"(got role {got!r}); roles alternate from user")
    return messages


def read_words(path: str | os.PathLike) -> tuple[str, ...]:
    """The word list, one word a line, as upstream reads it (stripped, blank lines kept; bytes that are not UTF-8
    come as surrogates, for staged_words to name their line)."""
    return _read_words(*_files_key([Path(path)])[0])


def staged_words() -> tuple[str, ...]:
    """The staged word list as read_words gives it; DataError naming the file when it has no word (the spelling
    tasks draw from it: an empty list ended them in an IndexError), or naming the first line that is no word (a
    web page or JSON in its place would be spelled out as words)."""
    path = staged_file(WORDS_FILE)
    words = read_words(path)
    if not any(words):
        raise DataError(f"{path}: the word list is empty; {FIX_MISSING}")
    bad = next((i for i, word in enumerate(words) if NOT_A_WORD.search(word)), None)
    if bad is not None:
        raise DataError(f"{path}:{bad + 1}: {words[bad][:60]!r} is not a word; the list holds one word a line, as "
                        f"{WORDS_URL} does, not a web page, JSON or binary; {FIX_MISSING}")
    return words


@functools.lru_cache(maxsize=4)
def _read_words(path: str, _mtime_ns: int, _size: int) -> tuple[str, ...]:
    with open(path, encoding="utf-8", errors="surrogateescape") as f:  # bad bytes: staged_words names the line
        return tuple(line.strip() for line in f)
