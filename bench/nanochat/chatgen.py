"""Offline stand-ins for the staged chat data (`nanochat-bench data generate --chat`): the same files, columns and
nesting as the hub's parquet files and the two plain files, with small row counts and text drawn from the
offline corpus (bench/nanochat/corpus.py), so the later stages run in tests, the smoke job and CI."""

import json
import re
from contextlib import ExitStack
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from bench.contract import atomic_target
from bench.errors import DataError, os_reason_and_remedy
from bench.nanochat import chatdata, corpus
from bench.nanochat.common import ELSEWHERE, get_base_dir

SEED = 1234
# rows per (repo, config, split): more than the crops of the mixtures (SmolTalk train stop=10_000, MMLU test
# stop=5200, GSM8K test stop=420), so each crop bites as on the real data
SIZES = {
    ("HuggingFaceTB/smol-smoltalk", "train"): 10_400, ("HuggingFaceTB/smol-smoltalk", "test"): 400,
    ("cais/mmlu", "train"): 600, ("cais/mmlu", "test"): 5_300,
    ("openai/gsm8k", "train"): 400, ("openai/gsm8k", "test"): 450,
    ("allenai/ai2_arc", "train"): 80, ("allenai/ai2_arc", "test"): 60,
    ("openai/openai_humaneval", "test"): 20,
}
IDENTITY_LINES = 24


def english_words() -> list[str]:
    """Lower-case alphabetic words of the corpus, sorted and unique, like words_alpha.txt."""
    words = set()
    for p in corpus.paragraphs():
        words.update(w.lower() for w in re.findall(r"[A-Za-z]{2,}", p))
    return sorted(words)


def _smoltalk_row(t: corpus.CorpusText, i: int) -> dict:
    turns = 1 + t.rng.randrange(3)
    messages = [{"content": t.sentence(120), "role": "system"}] if t.rng.random() < 0.2 else []
    for _ in range(turns):
        messages += [{"content": t.sentence(), "role": "user"}, {"content": t.sentence(400), "role": "assistant"}]
    return {"messages": messages, "source": "generated"}


def _mmlu_row(t: corpus.CorpusText, i: int) -> dict:
    return {"question": t.sentence(), "subject": t.rng.choice(("anatomy", "astronomy", "virology")),
            "choices": [t.sentence(60) for _ in range(4)], "answer": t.rng.randrange(4)}


def _gsm8k_row(t: corpus.CorpusText, i: int) -> dict:
    a, b = t.rng.randrange(2, 99), t.rng.randrange(2, 99)
    c = a * b
    return {"question": f"{t.sentence(150)} What is {a} times {b}, plus {a}?",
            "answer": f"First {a} * {b} = <<{a}*{b}={c}>>{c}.\nThen {c} + {a} = <<{c}+{a}={c + a}>>{c + a}.\n"
                      f"#### {c + a:,}"}


def _arc_row(t: corpus.CorpusText, i: int) -> dict:
    k = t.rng.choice((3, 4, 4, 5))
    labels = list("ABCDE"[:k]) if t.rng.random() < 0.9 else [str(j + 1) for j in range(k)]
    return {"id": f"generated-{i}", "question": t.sentence(),
            "choices": {"text": [t.sentence(50) for _ in labels], "label": labels}, "answerKey": t.rng.choice(labels)}


def _humaneval_row(t: corpus.CorpusText, i: int) -> dict:
    name = f"add_{i}"
    return {"task_id": f"HumanEval/{i}", "prompt": f'def {name}(a, b):\n    """{t.sentence(80)}"""\n',
            "canonical_solution": "    return a + b + %d\n" % i,
            "test": f"def check(f):\n    assert f(1, 2) == {3 + i}\n", "entry_point": name}


ROW_MAKERS = {"HuggingFaceTB/smol-smoltalk": _smoltalk_row, "cais/mmlu": _mmlu_row, "openai/gsm8k": _gsm8k_row,
              "allenai/ai2_arc": _arc_row, "openai/openai_humaneval": _humaneval_row}


def _columns(s: chatdata.HubSplit, t: corpus.CorpusText) -> dict:
    rows = [ROW_MAKERS[s.repo](t, i) for i in range(SIZES[(s.repo, s.split)])]
    if s.config == "auxiliary_train":  # the hub's MMLU rows are wrapped in a field "train"
        return {"train": rows}
    return {k: [r[k] for r in rows] for k in rows[0]}


def _identity(t: corpus.CorpusText, path: Path) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for i in range(IDENTITY_LINES):
            turns = 1 + i % 3
            messages = []
            for _ in range(turns):
                messages += [{"role": "user", "content": t.sentence(100)},
                             {"role": "assistant", "content": "I am nanochat. " + t.sentence(200)}]
            f.write(json.dumps(messages, ensure_ascii=False) + "\n")


def generate(overwrite: bool = False) -> list[tuple[Path, int]]:
    """Write every staged chat file; (path, rows) for each."""
    base, root = get_base_dir(), chatdata.chat_dir()
    targets = [root / s.repo / s.pattern.replace("*", "00000-of-00001") for s in chatdata.HUB_SPLITS]
    identity, words = base / chatdata.IDENTITY_FILE, base / chatdata.WORDS_FILE
    there = [p for p in (*targets, identity, words) if p.exists()]
    if there and not overwrite:
        raise DataError(f"{there[0]}: chat data is already staged there ({len(there)} file(s)); pass --overwrite "
                        "to replace it with generated stand-ins")
    t = corpus.CorpusText(SEED)
    out = []
    # a downloaded split may have more files; the stand-in replaces them all, once it is in place
    stale = [old for s in chatdata.HUB_SPLITS for old in chatdata.split_files(s) if old not in targets]
    # Every file is written to a temp file and renamed into place when all are written, after the mark that names
    # the plain files as stand-ins: an interrupted run leaves what was there, never a stand-in that reads as real.
    try:
        with ExitStack() as renames:
            for s, path in zip(chatdata.HUB_SPLITS, targets):
                path.parent.mkdir(parents=True, exist_ok=True)
                table = pa.table(_columns(s, t)).replace_schema_metadata({chatdata.GENERATED_KEY: b"1"})
                pq.write_table(table, renames.enter_context(atomic_target(path)))
                out.append((path, table.num_rows))
            written = {identity: Path(renames.enter_context(atomic_target(identity))),
                       words: Path(renames.enter_context(atomic_target(words)))}
            _identity(t, written[identity])
            out.append((identity, IDENTITY_LINES))
            vocabulary = english_words()
            written[words].write_text("\n".join(vocabulary) + "\n", encoding="utf-8")
            out.append((words, len(vocabulary)))
            chatdata.mark_generated(written)
    except OSError as e:  # a full or read-only disk: each temp file is gone, what was there is unchanged
        raise DataError(f"data generate --chat: cannot write into {base}: "
                        f"{os_reason_and_remedy(e, ELSEWHERE)}") from None
    for old in stale:
        old.unlink(missing_ok=True)
    return out
