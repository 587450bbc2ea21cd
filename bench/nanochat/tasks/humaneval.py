"""HumanEval (openai/openai_humaneval test): the prompt is the start of a program, the answer prompt + solution.
A completion passes when its `program(...)` runs without an error in the sandbox (bench/nanochat/sandbox.py):
model-written code is never run in the evaluating process."""

import re

from bench.nanochat.tasks.common import StagedTask

REPO = "openai/openai_humaneval"
CODE_BLOCK_RE = re.compile(r"```(?:python)?\s*\n(.*?)\n```", re.DOTALL)


def leading_imports(prompt: str) -> str:
    """The import lines at the top of the prompt (comments and blank lines skipped), which a completion may omit."""
    imports = []
    for line in prompt.split("\n"):
        stripped = line.strip()
        if stripped.startswith(("import ", "from ")):
            imports.append(stripped)
        elif stripped and not stripped.startswith("#"):
            break
    return "\n".join(imports)


def completion_code(completion: str) -> str:
    """The first fenced code block (plain or python) of a completion, else the whole completion."""
    blocks = CODE_BLOCK_RE.findall(completion)
    return (blocks[0] if blocks else completion).strip()


def program(conversation: dict, completion: str) -> str:
    return (leading_imports(conversation["messages"][0]["content"]) + "\n\n" + completion_code(completion) + "\n\n"
            + conversation["test"] + "\n" + f"check({conversation['entry_point']})")


class HumanEval(StagedTask):
    eval_type = "generative"

    def __init__(self, **kwargs):
        super().__init__(REPO, "openai_humaneval", "test", **kwargs)

    def get_example(self, index: int) -> dict:
        row = self.ds[index]
        messages = [{"role": "user", "content": row["prompt"]},
                    {"role": "assistant", "content": f"{row['prompt']}\n{row['canonical_solution']}"}]
        return {"messages": messages, "entry_point": row["entry_point"], "test": row["test"]}

    def evaluate(self, conversation: dict, completion: str) -> bool:
        from bench.nanochat.sandbox import execute_code  # a separate, limited process per program

        return execute_code(program(conversation, completion)).success
