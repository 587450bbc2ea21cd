"""Conversation rendering: ids and training mask of each role and tool pattern, truncation, the system merge
and the role-order errors.  python -m pytest tests/unit/nanochat/test_chat_format.py -q"""

import pytest

from bench.nanochat.chat_format import ConversationError, render_conversation, render_for_completion
from tests.unit.nanochat.chat_fixtures import (ASSISTANT_END, ASSISTANT_START, BOS, OUTPUT_END, OUTPUT_START,
                                               PYTHON_END, PYTHON_START, USER_END, USER_START, byte_tokenizer)

TOK = byte_tokenizer()


def b(text):
    return list(text.encode())


def test_special_token_ids_follow_the_merges():
    assert [TOK.encode_special(f"<|{n}|>") for n in ("user_start", "assistant_end", "output_end")] == \
        [USER_START, ASSISTANT_END, OUTPUT_END]


def test_plain_turns_train_on_assistant_text_and_end_only():
    ids, mask = render_conversation(TOK, {"messages": [{"role": "user", "content": "hi"},
                                                       {"role": "assistant", "content": "yo"}]})
    assert ids == [BOS, USER_START, *b("hi"), USER_END, ASSISTANT_START, *b("yo"), ASSISTANT_END]
    assert mask == [0, 0, 0, 0, 0, 0, 1, 1, 1]


def test_python_call_is_supervised_and_its_output_is_not():
    parts = [{"type": "text", "text": "a"}, {"type": "python", "text": "1+1"},
             {"type": "python_output", "text": "2"}, {"type": "text", "text": "b"}]
    ids, mask = render_conversation(TOK, {"messages": [{"role": "user", "content": "q"},
                                                       {"role": "assistant", "content": parts}]})
    body = ids[ids.index(ASSISTANT_START) + 1:]
    assert body == [*b("a"), PYTHON_START, *b("1+1"), PYTHON_END, OUTPUT_START, *b("2"), OUTPUT_END, *b("b"),
                    ASSISTANT_END]
    assert mask[ids.index(ASSISTANT_START) + 1:] == [1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1]


def test_system_message_is_merged_into_the_first_user_message():
    conv = {"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
                         {"role": "assistant", "content": "A"}]}
    ids, _ = render_conversation(TOK, conv)
    assert ids[:6] == [BOS, USER_START, *b("S\n\nU"), USER_END][:6]
    assert conv["messages"][1]["content"] == "U"  # the input is not changed


def test_multi_turn_masks_each_assistant_turn_and_truncates():
    msgs = [{"role": "user", "content": "u1"}, {"role": "assistant", "content": "a1"},
            {"role": "user", "content": "u2"}, {"role": "assistant", "content": "a2"}]
    ids, mask = render_conversation(TOK, {"messages": msgs})
    assert sum(mask) == 6 and len(ids) == 1 + 2 * (4 + 4)
    cut, cut_mask = render_conversation(TOK, {"messages": msgs}, max_tokens=5)
    assert cut == ids[:5] and cut_mask == mask[:5] and ASSISTANT_END not in cut


def test_special_strings_in_content_stay_plain_text():
    ids, _ = render_conversation(TOK, {"messages": [{"role": "user", "content": "<|bos|>"},
                                                    {"role": "assistant", "content": "x"}]})
    assert ids.count(BOS) == 1


@pytest.mark.parametrize("messages, words", [
    ([{"role": "assistant", "content": "a"}], "message 0 is from 'assistant' but should be from 'user'"),
    ([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], "message 1 is from 'user'"),
    ([{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}], "followed by a user message"),
    ([{"role": "user", "content": ["x"]}], "user content must be a str"),
    ([{"role": "user", "content": "q"}, {"role": "assistant", "content": [{"type": "image", "text": ""}]}],
     "unknown assistant part type 'image'"),
])
def test_wrong_conversations_are_one_clear_error(messages, words):
    with pytest.raises(ConversationError, match=words) as e:
        render_conversation(TOK, {"messages": messages})
    assert "\n" not in str(e.value)


def test_render_for_completion_drops_the_answer_and_primes_the_assistant():
    conv = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "A"}]}
    assert render_for_completion(TOK, conv) == [BOS, USER_START, *b("q"), USER_END, ASSISTANT_START]
    with pytest.raises(ConversationError, match="ends with an assistant"):
        render_for_completion(TOK, {"messages": conv["messages"][:1]})
