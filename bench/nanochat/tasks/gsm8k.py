"""GSM8K (openai/gsm8k main): grade-school maths; each `<<expr=result>>` in an answer becomes a calculator call
(python part) and its result (python_output part), split at the LAST `=`."""

import re

from bench.nanochat.tasks.common import StagedTask

REPO = "openai/gsm8k"
ANSWER_RE = re.compile(r"#### (\-?[0-9\.\,]+)")


def extract_answer(completion: str) -> str | None:
    """The number after `####`, commas removed (the official GSM8K normalisation)."""
    match = ANSWER_RE.search(completion)
    return match.group(1).strip().replace(",", "") if match else None


def answer_parts(answer: str) -> list[dict]:
    parts = []
    for piece in re.split(r"(<<[^>]+>>)", answer):
        if piece.startswith("<<") and piece.endswith(">>"):
            inner = piece[2:-2]
            expr, result = inner.rsplit("=", 1) if "=" in inner else (inner, "")
            parts += [{"type": "python", "text": expr}, {"type": "python_output", "text": result}]
        else:
            parts.append({"type": "text", "text": piece})
    return parts


class GSM8K(StagedTask):
    eval_type = "generative"

    def __init__(self, subset: str, split: str, **kwargs):
        super().__init__(REPO, subset, split, **kwargs)

    def get_example(self, index: int) -> dict:
        row = self.ds[index]
        return {"messages": [{"role": "user", "content": row["question"]},
                             {"role": "assistant", "content": answer_parts(row["answer"])}]}

    def evaluate(self, conversation: dict, response: str) -> int:
        reference = conversation["messages"][-1]["content"][-1]["text"]
        return int(extract_answer(response) == extract_answer(reference))
