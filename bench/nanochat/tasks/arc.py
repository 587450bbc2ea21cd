"""ARC (allenai/ai2_arc), Easy and Challenge: multiple choice with the dataset's own letters."""

from bench.nanochat.tasks.common import StagedTask, render_mc

REPO = "allenai/ai2_arc"


class ARC(StagedTask):
    eval_type = "categorical"

    def __init__(self, subset: str, split: str, **kwargs):
        super().__init__(REPO, subset, split, **kwargs)

    def get_example(self, index: int) -> dict:
        row = self.ds[index]
        letters = row["choices"]["label"]
        messages = [{"role": "user", "content": render_mc(row["question"], letters, row["choices"]["text"])},
                    {"role": "assistant", "content": row["answerKey"]}]
        return {"messages": messages, "letters": letters}

    def evaluate(self, conversation: dict, response: str) -> bool:
        return response == conversation["messages"][-1]["content"]
