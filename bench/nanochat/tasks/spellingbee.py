"""SpellingBee (count a letter in a word, by hand then with a python call) and SimpleSpelling (spell a word),
synthetic rows over the staged English word list.

Item i draws from `random.Random(i)` (train) or `Random(-(i + 1))` (test). CPython seeds an int by its absolute
value, so test item i equals train item i + 1: kept as upstream 5c93a56 has it (fixed there on 2025-12-08).
"""

import random

from bench.nanochat import chatdata
from bench.nanochat.tasks.common import Task
from bench.nanochat.tasks.gsm8k import GSM8K
from bench.nanochat.tasks.templates import USER_MSG_TEMPLATES

LETTERS = "abcdefghijklmnopqrstuvwxyz"
QUOTES = ("", "'", '"')
SPLITS = ("train", "test")


def _item_rng(index: int, split: str) -> random.Random:
    return random.Random(index if split == "train" else -(index + 1))


class _Spelling(Task):
    eval_type = "generative"

    def __init__(self, size: int = 1000, split: str = "train", **kwargs):
        super().__init__(**kwargs)
        if split not in SPLITS:
            raise chatdata.DataError(f"spelling task split {split!r}: expected train or test")
        self.size, self.split = size, split
        self.words = list(chatdata.staged_words())

    def num_examples(self) -> int:
        return self.size


def _spell_out(word: str, letter: str) -> str:
    text = (f"We are asked to find the number '{letter}' in the word '{word}'. Let me try a manual approach first.\n\n"
            f"First spell the word out:\n{word}:{','.join(word)}\n\nThen count the occurrences of '{letter}':\n")
    count = 0
    for i, char in enumerate(word, 1):
        if char == letter:
            count += 1
            text += f"{i}:{char} hit! count={count}\n"  # no space before char: " a" is another token than "a"
        else:
            text += f"{i}:{char}\n"
    return text + f"\nThis gives us {count}."


class SpellingBee(_Spelling):
    def get_example(self, index: int) -> dict:
        rng = _item_rng(index, self.split)
        # the draws below are in upstream's order: each one moves the generator
        word = rng.choice(self.words)
        letter = rng.choice(word) if rng.random() < 0.9 else rng.choice(LETTERS)
        count = word.count(letter)
        template = rng.choice(USER_MSG_TEMPLATES)
        if rng.random() < 0.3:
            template = template.lower()
        letter_quote, word_quote = rng.choice(QUOTES), rng.choice(QUOTES)
        user = template.format(letter=f"{letter_quote}{letter}{letter_quote}", word=f"{word_quote}{word}{word_quote}")
        if rng.random() < 0.5:
            user += "?"
        parts = [
            {"type": "text", "text": _spell_out(word, letter)},
            {"type": "text", "text": "\n\nLet me double check this using Python:\n\n"},
            {"type": "python", "text": f"'{word}'.count('{letter}')"},
            {"type": "python_output", "text": str(count)},
            {"type": "text", "text": f"\n\nPython gives us {count}.\n\nMy final answer is:\n\n#### {count}"},
        ]
        return {"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": parts}]}

    evaluate = GSM8K.evaluate  # the number after `####`, as in GSM8K's answers


class SimpleSpelling(_Spelling):
    def __init__(self, size: int = 1000, split: str = "train", **kwargs):
        super().__init__(size, split, **kwargs)
        random.Random(42).shuffle(self.words)  # another word order than SpellingBee's

    def get_example(self, index: int) -> dict:
        word = _item_rng(index, self.split).choice(self.words)
        return {"messages": [{"role": "user", "content": f"Spell the word: {word}"},
                             {"role": "assistant", "content": f"{word}:{','.join(word)}"}]}
