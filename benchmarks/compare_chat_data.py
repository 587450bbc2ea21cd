"""Our chat tasks and conversation rendering against upstream nanochat's own code, on the same staged data.

    NANOCHAT_UPSTREAM_DIR=/tmp/upstream-nanochat NANOCHAT_BASE_DIR=/tmp/chat-base \\
        python benchmarks/compare_chat_data.py [--rows 300]

Needs a checkout of upstream karpathy/nanochat at 5c93a56 (never vendored here) and the `datasets` package in
this Python (upstream loads every hub dataset with it). Upstream's `datasets.load_dataset(<hub name>, ...)` is
redirected to `load_dataset("parquet", data_files=<our staged files>)`, so both sides read the same files,
upstream with HF datasets' own `.shuffle(seed=42)` and `.map`. If `$NANOCHAT_BASE_DIR` holds no staged chat data,
`data generate --chat` stand-ins are written first. The tokenizer is a small BPE trained on the offline corpus.

Compared per task and per mixture: the length, the first `--rows` conversations and as many spread over the
rest, and render_conversation's ids and mask of each; the exit status is 1 on any difference.
"""

import argparse
import os
import sys
from pathlib import Path

TASKS = [  # (label, upstream module, class, kwargs); ours take the same arguments
    ("SmolTalk train", "tasks.smoltalk", "SmolTalk", {"split": "train"}),
    ("SmolTalk test", "tasks.smoltalk", "SmolTalk", {"split": "test"}),
    ("SmolTalk train[:10000]", "tasks.smoltalk", "SmolTalk", {"split": "train", "stop": 10_000}),
    ("MMLU auxiliary_train", "tasks.mmlu", "MMLU", {"subset": "auxiliary_train", "split": "train"}),
    ("MMLU all/test[:5200]", "tasks.mmlu", "MMLU", {"subset": "all", "split": "test", "stop": 5200}),
    ("GSM8K main/train", "tasks.gsm8k", "GSM8K", {"subset": "main", "split": "train"}),
    ("GSM8K main/test[:420]", "tasks.gsm8k", "GSM8K", {"subset": "main", "split": "test", "stop": 420}),
    ("ARC-Easy train", "tasks.arc", "ARC", {"subset": "ARC-Easy", "split": "train"}),
    ("ARC-Challenge train", "tasks.arc", "ARC", {"subset": "ARC-Challenge", "split": "train"}),
    ("ARC-Easy test", "tasks.arc", "ARC", {"subset": "ARC-Easy", "split": "test"}),
    ("HumanEval", "tasks.humaneval", "HumanEval", {}),
    ("SimpleSpelling train 2000", "tasks.spellingbee", "SimpleSpelling", {"size": 2000, "split": "train"}),
    ("SimpleSpelling test 500", "tasks.spellingbee", "SimpleSpelling", {"size": 500, "split": "test"}),
    ("SpellingBee train 2000", "tasks.spellingbee", "SpellingBee", {"size": 2000, "split": "train"}),
    ("SpellingBee test 256", "tasks.spellingbee", "SpellingBee", {"size": 256, "split": "test"}),
]
OURS = {"tasks.smoltalk": "bench.nanochat.tasks.smoltalk", "tasks.mmlu": "bench.nanochat.tasks.mmlu",
        "tasks.gsm8k": "bench.nanochat.tasks.gsm8k", "tasks.arc": "bench.nanochat.tasks.arc",
        "tasks.spellingbee": "bench.nanochat.tasks.spellingbee", "tasks.humaneval": "bench.nanochat.tasks.humaneval",
        "tasks.customjson": "bench.nanochat.tasks.customjson"}


def redirect_load_dataset():
    """Point upstream's `load_dataset(<hub name>, [config], split=...)` at the staged parquet files."""
    import datasets

    from bench.nanochat import chatdata

    real = datasets.load_dataset

    def staged(path, name=None, split=None, **kwargs):
        config = name or ("default" if path.endswith("smol-smoltalk") else path.split("/")[-1])
        files = chatdata.split_files(chatdata.hub_split(path, config, split))
        return real("parquet", data_files=[str(f) for f in files], split="train")

    datasets.load_dataset = staged
    for module in ("tasks.smoltalk", "tasks.mmlu", "tasks.gsm8k", "tasks.arc", "tasks.humaneval"):
        sys.modules[module].load_dataset = staged


def small_tokenizer():
    from bench.nanochat import corpus
    from bench.nanochat.tokenizer import Tokenizer, build_encoding, train_ranks_rustbpe

    ranks = train_ranks_rustbpe(list(corpus.paragraphs())[:3000], 2048)
    return Tokenizer(build_encoding(ranks))


def probe_indices(n: int, rows: int) -> list[int]:
    spread = range(rows, n, max(1, (n - rows) // rows)) if n > rows else []
    return sorted(set(range(min(n, rows))) | set(spread) | ({n - 1} if n else set()))


def compare(label, ours, theirs, render_ours, render_theirs, rows) -> list[str]:
    if len(ours) != len(theirs):
        return [f"{label}: {len(ours)} rows here, {len(theirs)} upstream"]
    for i in probe_indices(len(ours), rows):
        a, b = ours[i], theirs[i]
        if a["messages"] != b["messages"]:
            here, there = repr(a["messages"])[:300], repr(b["messages"])[:300]
            return [f"{label}: row {i} differs:\n  here:     {here}\n  upstream: {there}"]
        if render_ours(a) != render_theirs(b):
            return [f"{label}: row {i} renders to other ids or mask"]
    print(f"same  {label}: {len(ours):,} rows, {len(probe_indices(len(ours), rows))} compared (messages, ids, mask)")
    return []


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=300, help="first rows compared, and as many spread over the rest")
    args = p.parse_args(argv)
    upstream = Path(os.environ.get("NANOCHAT_UPSTREAM_DIR", "/tmp/upstream-nanochat"))
    if not (upstream / "tasks" / "spellingbee.py").is_file():
        print(f"error: no upstream nanochat checkout at {upstream} (set NANOCHAT_UPSTREAM_DIR)")
        return 2
    sys.path.insert(0, str(upstream))
    import importlib

    from bench.nanochat import chat_format, chatdata, chatgen

    if not chatdata.split_files(chatdata.HUB_SPLITS[0]):
        chatgen.generate()
    for module in OURS:
        importlib.import_module(module)  # upstream's
    redirect_load_dataset()
    from nanochat.tokenizer import RustBPETokenizer
    from tasks.common import TaskMixture as UpMixture

    ours_tok = small_tokenizer()
    up_tok = RustBPETokenizer(ours_tok.enc, "<|bos|>")

    def render_ours(c):
        return chat_format.render_conversation(ours_tok, c)

    def render_theirs(c):
        return up_tok.render_conversation(c)

    failures = []
    for label, module, cls, kwargs in TASKS:
        theirs = getattr(sys.modules[module], cls)(**kwargs)
        ours = getattr(importlib.import_module(OURS[module]), cls)(**kwargs)
        failures += compare(label, ours, theirs, render_ours, render_theirs, args.rows)
    identity = str(chatdata.staged_file(chatdata.IDENTITY_FILE))
    up_custom = sys.modules["tasks.customjson"].CustomJSON
    failures += compare("CustomJSON identity", importlib.import_module(OURS["tasks.customjson"]).CustomJSON(identity),
                        up_custom(identity), render_ours, render_theirs, args.rows)
    failures += compare_mixtures(UpMixture, render_ours, render_theirs, args.rows, identity)
    for f in failures:
        print(f"DIFF  {f}")
    print(f"{'all same' if not failures else f'{len(failures)} difference(s)'}")
    return 1 if failures else 0


def compare_mixtures(UpMixture, render_ours, render_theirs, rows, identity) -> list[str]:
    """upstream's mixture lists, built from upstream's classes, against bench.nanochat.tasks.mixtures."""
    from bench.nanochat.tasks import mixtures
    from tasks.arc import ARC
    from tasks.customjson import CustomJSON
    from tasks.gsm8k import GSM8K
    from tasks.mmlu import MMLU
    from tasks.smoltalk import SmolTalk
    from tasks.spellingbee import SimpleSpelling, SpellingBee

    theirs = {
        "mid_train": lambda: UpMixture([SmolTalk(split="train"), MMLU(subset="auxiliary_train", split="train"),
                                        GSM8K(subset="main", split="train"), CustomJSON(filepath=identity),
                                        CustomJSON(filepath=identity), SimpleSpelling(size=200000, split="train"),
                                        SpellingBee(size=80000, split="train")]),
        "mid_val": lambda: UpMixture([SmolTalk(split="test"), MMLU(subset="all", split="test", stop=5200),
                                      GSM8K(subset="main", split="test", stop=420)]),
        "chat_sft_train": lambda: UpMixture([ARC(subset="ARC-Easy", split="train"),
                                             ARC(subset="ARC-Challenge", split="train"),
                                             GSM8K(subset="main", split="train"), SmolTalk(split="train", stop=10_000),
                                             CustomJSON(filepath=identity), SimpleSpelling(size=300, split="train"),
                                             SpellingBee(size=300, split="train")]),
        "chat_sft_val": lambda: SmolTalk(split="test"),
    }
    failures = []
    for name, build in theirs.items():
        failures += compare(f"mixture {name}", getattr(mixtures, name)(), build(), render_ours, render_theirs, rows)
    return failures


if __name__ == "__main__":
    sys.exit(main())
