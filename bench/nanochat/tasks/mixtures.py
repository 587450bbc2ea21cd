"""The datasets of upstream 5c93a56's scripts/mid_train.py and scripts/chat_sft.py, in their order."""

from bench.nanochat.tasks.arc import ARC
from bench.nanochat.tasks.common import TaskMixture
from bench.nanochat.tasks.customjson import CustomJSON
from bench.nanochat.tasks.gsm8k import GSM8K
from bench.nanochat.tasks.mmlu import MMLU
from bench.nanochat.tasks.smoltalk import SmolTalk
from bench.nanochat.tasks.spellingbee import SimpleSpelling, SpellingBee


def mid_train() -> TaskMixture:
    identity = CustomJSON()
    return TaskMixture([
        SmolTalk(split="train"),
        MMLU(subset="auxiliary_train", split="train"),
        GSM8K(subset="main", split="train"),
        identity, identity,  # two epochs of the identity conversations
        SimpleSpelling(size=200_000, split="train"),
        SpellingBee(size=80_000, split="train"),
    ])


def mid_val() -> TaskMixture:
    return TaskMixture([
        SmolTalk(split="test"),
        MMLU(subset="all", split="test", stop=5200),  # about the train ratios
        GSM8K(subset="main", split="test", stop=420),
    ])


def chat_sft_train() -> TaskMixture:
    return TaskMixture([
        ARC(subset="ARC-Easy", split="train"),
        ARC(subset="ARC-Challenge", split="train"),
        GSM8K(subset="main", split="train"),
        SmolTalk(split="train", stop=10_000),
        CustomJSON(),
        SimpleSpelling(size=300, split="train"),
        SpellingBee(size=300, split="train"),
    ])


def chat_sft_val() -> SmolTalk:
    return SmolTalk(split="test")
