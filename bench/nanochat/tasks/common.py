"""Task: a sliceable list of conversations; TaskMixture combines tasks; render_mc the multiple-choice
prompt. Slicing (start, stop, step) applies after each task's seed-42 shuffle, as upstream."""

import random

from bench.errors import ConfigError
from bench.nanochat import chatdata

MIXTURE_SEED = 42


class Task:
    """A logical view [start:stop:step] over a task's examples; subclasses give num_examples and get_example."""

    def __init__(self, start: int = 0, stop: int | None = None, step: int = 1):
        if start < 0 or step < 1 or (stop is not None and stop < start):
            raise ConfigError(f"task slice start={start} stop={stop} step={step}: need 0 <= start <= stop, step >= 1")
        self.start, self.stop, self.step = start, stop, step

    eval_type = None  # 'generative' or 'categorical' for the tasks chat evaluation runs

    def num_examples(self) -> int:
        raise NotImplementedError

    def get_example(self, index: int) -> dict:
        raise NotImplementedError

    def __len__(self) -> int:
        # a stop past the end is cut to the end (upstream would index past it; only small data can get there)
        stop = self.num_examples() if self.stop is None else min(self.stop, self.num_examples())
        return max(0, -(-(stop - self.start) // self.step))

    def __getitem__(self, index: int) -> dict:
        return self.get_example(self.start + index * self.step)


class StagedTask(Task):
    """A task over one staged hub split, `ds`, in upstream's seed-42 shuffle."""

    def __init__(self, repo: str, subset: str, split: str, **kwargs):
        super().__init__(**kwargs)
        self.ds = chatdata.shuffled_rows(repo, subset, split)

    def num_examples(self) -> int:
        return len(self.ds)


class TaskMixture(Task):
    """Every example of every task, in one Random(42) shuffle of the (task, index) pairs; a task listed twice
    is seen twice."""

    def __init__(self, tasks, **kwargs):
        super().__init__(**kwargs)
        self.tasks = list(tasks)
        self.index_map = [(t, i) for t, task in enumerate(self.tasks) for i in range(len(task))]
        random.Random(MIXTURE_SEED).shuffle(self.index_map)

    def num_examples(self) -> int:
        return len(self.index_map)

    def get_example(self, index: int) -> dict:
        task, local = self.index_map[index]
        return self.tasks[task][local]


def render_mc(question: str, letters, choices) -> str:
    """The letter comes right after `=`, no space: the answer is the bare letter, the same token as here."""
    query = f"Multiple Choice question: {question}\n"
    query += "".join(f"- {choice}={letter}\n" for letter, choice in zip(letters, choices))
    return query + "\nRespond only with the letter of the correct answer."
