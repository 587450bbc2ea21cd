"""A chat conversation as token ids plus the mask of the tokens the assistant is trained on.

Upstream nanochat's render_conversation / render_for_completion (nanochat/tokenizer.py at 5c93a56), over our
Tokenizer's public API. A conversation is `{"messages": [{"role", "content"}, ...]}`:
- a leading `system` message is merged into the first user message as `system + "\\n\\n" + user`;
- the roles then alternate user, assistant, user, ...; user content is a str;
- assistant content is a str, or a list of parts `{"type": "text"|"python"|"python_output", "text": ...}`.
Mask: 1 on the assistant's text, its python calls (start and end tokens included) and assistant_end; 0 on BOS,
the user turns, assistant_start and the python outputs (at test time Python writes them, not the model).
The ids are cut to `max_tokens` after rendering; no end token is put back.
"""

from bench.errors import DataError

MAX_TOKENS = 2048  # upstream's default cut, "helps prevent OOMs"


class ConversationError(DataError):
    """A conversation that does not follow the chat format (roles out of order, unknown part or content type)."""


def _special_ids(tokenizer) -> dict[str, int]:
    names = ("user_start", "user_end", "assistant_start", "assistant_end",
             "python_start", "python_end", "output_start", "output_end")
    ids = {name: tokenizer.encode_special(f"<|{name}|>") for name in names}
    ids["bos"] = tokenizer.get_bos_token_id()
    return ids


def merged_messages(conversation: dict) -> list[dict]:
    """The messages with a leading system message folded into the user message after it (a copy; the input
    is left as it was); ConversationError when the order of roles is not user, assistant, user, ..."""
    messages = conversation.get("messages") if isinstance(conversation, dict) else None
    if not messages:
        raise ConversationError("conversation has no messages (expected {'messages': [{'role': 'user', ...}, ...]})")
    if messages[0].get("role") == "system":
        if len(messages) < 2 or messages[1].get("role") != "user":
            got = messages[1].get("role") if len(messages) > 1 else "nothing"
            raise ConversationError(f"a system message must be followed by a user message, not {got}")
        first = dict(messages[1], content=messages[0]["content"] + "\n\n" + messages[1]["content"])
        messages = [first] + list(messages[2:])
    for i, message in enumerate(messages):
        expected = "user" if i % 2 == 0 else "assistant"
        if message.get("role") != expected:
            raise ConversationError(f"message {i} is from {message.get('role')!r} but should be from {expected!r} "
                                    "(roles alternate user, assistant, ... after an optional system message)")
    return messages


def _assistant_tokens(tokenizer, content, sp: dict[str, int]) -> tuple[list[int], list[int]]:
    if isinstance(content, str):
        ids = tokenizer.encode(content)
        return ids, [1] * len(ids)
    if not isinstance(content, list):
        raise ConversationError(f"assistant content must be a str or a list of parts, not {type(content).__name__}")
    ids, mask = [], []
    for part in content:
        value = tokenizer.encode(part["text"])
        kind = part.get("type")
        if kind == "text":
            piece, m = value, 1
        elif kind == "python":  # the tool call is the model's to write: supervised
            piece, m = [sp["python_start"], *value, sp["python_end"]], 1
        elif kind == "python_output":  # Python writes these at test time: not supervised
            piece, m = [sp["output_start"], *value, sp["output_end"]], 0
        else:
            raise ConversationError(f"unknown assistant part type {kind!r} (expected text, python or python_output)")
        ids += piece
        mask += [m] * len(piece)
    return ids, mask


def render_conversation(tokenizer, conversation: dict, max_tokens: int = MAX_TOKENS) -> tuple[list[int], list[int]]:
    """(ids, mask) of one conversation, as upstream's tokenizer.render_conversation."""
    sp = _special_ids(tokenizer)
    ids, mask = [sp["bos"]], [0]
    for message in merged_messages(conversation):
        content = message["content"]
        if message["role"] == "user":
            if not isinstance(content, str):
                raise ConversationError(f"user content must be a str, not {type(content).__name__}")
            piece = [sp["user_start"], *tokenizer.encode(content), sp["user_end"]]
            ids += piece
            mask += [0] * len(piece)
        else:
            body, body_mask = _assistant_tokens(tokenizer, content, sp)
            ids += [sp["assistant_start"], *body, sp["assistant_end"]]
            mask += [0, *body_mask, 1]
    return ids[:max_tokens], mask[:max_tokens]


def render_for_completion(tokenizer, conversation: dict) -> list[int]:
    """The prompt for sampling the last (assistant) reply: the conversation without it, cut, then assistant_start."""
    messages = conversation.get("messages") or []
    if not messages or messages[-1].get("role") != "assistant":
        raise ConversationError("render_for_completion needs a conversation that ends with an assistant message")
    ids, _ = render_conversation(tokenizer, dict(conversation, messages=list(messages[:-1])))
    return ids + [tokenizer.encode_special("<|assistant_start|>")]
