"""The chat tasks on `data generate --chat` stand-ins: lengths, first rows, the seed-42 shuffle before the crop,
the mixtures' order and the spelling tasks' seeding.  python -m pytest tests/unit/nanochat/test_chat_tasks.py -q"""

import random

import numpy as np
import pyarrow.parquet as pq
import pytest

from bench.errors import DataError
from bench.nanochat import chatdata, chatgen
from bench.nanochat.tasks import mixtures
from bench.nanochat.tasks.arc import ARC
from bench.nanochat.tasks.common import TaskMixture
from bench.nanochat.tasks.customjson import CustomJSON
from bench.nanochat.tasks.gsm8k import GSM8K, answer_parts
from bench.nanochat.tasks.mmlu import MMLU
from bench.nanochat.tasks.smoltalk import SmolTalk
from bench.nanochat.tasks.spellingbee import SimpleSpelling, SpellingBee
from tests.unit.nanochat.chat_fixtures import chat_base, generated_base  # noqa: F401 (fixtures)


def file_rows(repo, config, split):
    files = chatdata.split_files(chatdata.hub_split(repo, config, split))
    return pq.read_table(files[0]).to_pylist()


def test_smoltalk_is_the_seed_42_permutation_then_the_crop(chat_base):
    rows = file_rows("HuggingFaceTB/smol-smoltalk", "default", "train")
    order = np.random.default_rng(42).permutation(len(rows))
    task = SmolTalk(split="train", stop=10_000)
    assert len(SmolTalk(split="train")) == chatgen.SIZES[("HuggingFaceTB/smol-smoltalk", "train")]
    assert len(task) == 10_000
    assert [task[i]["messages"] for i in range(3)] == [rows[order[i]]["messages"] for i in range(3)]


def test_mmlu_auxiliary_rows_are_unwrapped_and_rendered_as_multiple_choice(chat_base):
    raw = file_rows("cais/mmlu", "auxiliary_train", "train")
    first = raw[np.random.default_rng(42).permutation(len(raw))[0]]["train"]
    ex = MMLU(subset="auxiliary_train", split="train")[0]
    user, answer = ex["messages"][0]["content"], ex["messages"][1]["content"]
    assert user.startswith(f"Multiple Choice question: {first['question']}\n- {first['choices'][0]}=A\n")
    assert user.endswith("\n\nRespond only with the letter of the correct answer.")
    assert answer == "ABCD"[first["answer"]] and ex["subject"] == first["subject"]
    assert len(MMLU(subset="all", split="test", stop=5200)) == 5200


def test_gsm8k_calls_split_at_the_last_equals_sign(chat_base):
    parts = answer_parts("So <<a=b=3>>3 done\n#### 3")
    assert parts == [{"type": "text", "text": "So "}, {"type": "python", "text": "a=b"},
                     {"type": "python_output", "text": "3"}, {"type": "text", "text": "3 done\n#### 3"}]
    task = GSM8K(subset="main", split="test", stop=420)
    assert len(task) == 420
    ex = task[0]
    assert [p["type"] for p in ex["messages"][1]["content"]][:3] == ["text", "python", "python_output"]
    assert task.evaluate(ex, "I think #### " + ex["messages"][1]["content"][-1]["text"].split("#### ")[1])


def test_arc_uses_the_rows_own_letters(chat_base):
    for subset in ("ARC-Easy", "ARC-Challenge"):
        ex = ARC(subset=subset, split="train")[0]
        assert ex["messages"][1]["content"] in ex["letters"]
        assert f"={ex['letters'][0]}\n" in ex["messages"][0]["content"]


def test_spelling_test_item_i_is_train_item_i_plus_1_as_upstream_seeds_it(chat_base):
    train, test = SpellingBee(size=10, split="train"), SpellingBee(size=10, split="test")
    assert [test[i] for i in range(5)] == [train[i + 1] for i in range(5)]
    simple = SimpleSpelling(size=5)
    words = list(chatdata.read_words(chatdata.staged_file(chatdata.WORDS_FILE)))
    random.Random(42).shuffle(words)
    word = random.Random(3).choice(words)
    assert simple[3]["messages"] == [{"role": "user", "content": f"Spell the word: {word}"},
                                     {"role": "assistant", "content": f"{word}:{','.join(word)}"}]


def test_spelling_bee_answer_counts_with_a_python_call(chat_base):
    ex = SpellingBee(size=3)[2]
    parts = ex["messages"][1]["content"]
    word, letter = parts[2]["text"].split("'")[1], parts[2]["text"].split("'")[3]
    assert parts[2]["text"] == f"'{word}'.count('{letter}')" and parts[3]["text"] == str(word.count(letter))
    assert parts[4]["text"].endswith(f"#### {word.count(letter)}")


def test_mixture_is_one_random_42_shuffle_of_task_index_pairs(chat_base):
    a, b = SimpleSpelling(size=4), SpellingBee(size=3)
    pairs = [(0, i) for i in range(4)] + [(1, i) for i in range(3)]
    random.Random(42).shuffle(pairs)
    mix = TaskMixture([a, b])
    assert [mix[i] for i in range(7)] == [(a, b)[t][i] for t, i in pairs]


def test_the_mixtures_of_mid_training_and_sft(chat_base):
    n = {k: v for k, v in chatgen.SIZES.items()}
    identity = chatgen.IDENTITY_LINES
    assert len(mixtures.mid_train()) == (n[("HuggingFaceTB/smol-smoltalk", "train")] + n[("cais/mmlu", "train")]
                                         + n[("openai/gsm8k", "train")] + 2 * identity + 200_000 + 80_000)
    assert len(mixtures.mid_val()) == n[("HuggingFaceTB/smol-smoltalk", "test")] + 5200 + 420
    assert len(mixtures.chat_sft_train()) == 2 * n[("allenai/ai2_arc", "train")] + n[("openai/gsm8k", "train")] \
        + 10_000 + identity + 300 + 300
    assert len(mixtures.chat_sft_val()) == n[("HuggingFaceTB/smol-smoltalk", "test")]


def test_identity_conversations_are_read_whole(chat_base):
    task = CustomJSON()
    assert len(task) == chatgen.IDENTITY_LINES
    assert task[0]["messages"][0]["role"] == "user"


def test_humaneval_rows_and_the_program_the_evaluation_runs(chat_base):
    from bench.nanochat.tasks.humaneval import HumanEval, program

    ex = HumanEval()[0]
    prompt = ex["messages"][0]["content"]
    assert ex["messages"][1]["content"].startswith(prompt + "\n")
    code = program(ex, "Here:\n```python\ndef f():\n    pass\n```\nbye")
    assert code.startswith("\n\ndef f():\n    pass\n\n") and code.endswith(f"check({ex['entry_point']})")
    namespace = {}
    exec(program(ex, ex["messages"][1]["content"]), namespace)  # the stand-in's own solution passes its test


def test_a_staged_row_with_a_wrong_role_order_is_one_line_naming_the_row(tmp_path, monkeypatch):
    import pyarrow as pa
    import pytest

    from bench.nanochat.chat_format import ConversationError

    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    s = chatdata.hub_split("HuggingFaceTB/smol-smoltalk", "default", "test")
    path = tmp_path / chatdata.CHAT_DIR / s.repo / "data" / "test-00000-of-00001.parquet"
    path.parent.mkdir(parents=True)
    bad = [{"role": "assistant", "content": "a"}, {"role": "user", "content": "b"}]
    pq.write_table(pa.table({"messages": [bad]}), path)
    with pytest.raises(ConversationError, match=r"smol-smoltalk row 0 .*message 0 is from 'assistant'") as e:
        SmolTalk(split="test")[0]
    assert "\n" not in str(e.value)


def test_an_empty_word_list_is_one_line_naming_the_file_not_an_index_error(tmp_path, monkeypatch):
    import pytest

    from bench.errors import DataError

    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    (tmp_path / chatdata.WORDS_FILE).write_text("\n\n")
    for task in (SpellingBee, SimpleSpelling):
        with pytest.raises(DataError, match=rf"^{tmp_path / chatdata.WORDS_FILE}: the word list is empty; run "):
            task(size=4, split="test").get_example(0)


BAD_WORD_LISTS = {  # what a proxy, a wrong URL or a damaged copy leaves in the list's place: (bytes, bad line)
    "an HTML error page": (b"<!DOCTYPE html>\n<html><body>Proxy error</body></html>\n", 1),
    "JSON": (b'aardvark\n{"words": ["aardvark", "abacus"]}\n', 2),
    "binary bytes": (b"aardvark\nabacus\n\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\n", 3),
}


@pytest.mark.parametrize("what", BAD_WORD_LISTS)
def test_a_word_list_that_is_not_one_is_refused_naming_the_line(what, tmp_path, monkeypatch):
    """Any file with a non-blank line was taken: the spelling tasks spelled out '<!DOCTYPE html>' and JSON, and
    bytes that are not UTF-8 ended them in a UnicodeDecodeError."""
    content, line = BAD_WORD_LISTS[what]
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    (tmp_path / chatdata.WORDS_FILE).write_bytes(content)
    for task in (SpellingBee, SimpleSpelling):
        with pytest.raises(DataError, match=rf"^{tmp_path / chatdata.WORDS_FILE}:{line}: .* is not a word") as e:
            task(size=4, split="test").get_example(0)
        assert "one word a line" in str(e.value) and "nanochat-bench data download --chat" in str(e.value)


def test_a_word_list_keeps_words_with_capitals_digits_and_punctuation(tmp_path, monkeypatch):
    """words_alpha.txt is lower-case letters with CRLF line ends; other lists of dwyl/english-words add these."""
    monkeypatch.setenv("NANOCHAT_BASE_DIR", str(tmp_path))
    (tmp_path / chatdata.WORDS_FILE).write_bytes(b"aardvark\r\nAachen\r\n'tis\r\na-\r\nA.M.\r\n2nd\r\n&c\r\n\r\n")
    assert chatdata.staged_words() == ("aardvark", "Aachen", "'tis", "a-", "A.M.", "2nd", "&c", "")
    assert SimpleSpelling(size=4, split="test").get_example(0)["messages"][0]["role"] == "user"
