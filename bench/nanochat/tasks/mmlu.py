"""MMLU (cais/mmlu): four-choice questions; auxiliary_train for mid-training, all/test for evaluation."""

from bench.nanochat.tasks.common import StagedTask, render_mc

REPO = "cais/mmlu"


class MMLU(StagedTask):
    letters = ("A", "B", "C", "D")
    eval_type = "categorical"

    def __init__(self, subset: str, split: str, **kwargs):
        super().__init__(REPO, subset, split, **kwargs)
        self.subset = subset

    def get_example(self, index: int) -> dict:
        row = self.ds[index]
        if self.subset == "auxiliary_train":  # these rows come wrapped in a field "train"
            row = row["train"]
        messages = [{"role": "user", "content": render_mc(row["question"], self.letters, row["choices"])},
                    {"role": "assistant", "content": self.letters[row["answer"]]}]
        return {"messages": messages, "subject": row["subject"], "letters": self.letters}

    def evaluate(self, conversation: dict, response: str) -> bool:
        return response == conversation["messages"][-1]["content"]
