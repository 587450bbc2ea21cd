"""Mid-training's loader: conversations packed into rows (mirrors mid_data_generator of karpathy/nanochat
scripts/mid_train.py at 5c93a56).

Each rank reads conversations `rank, rank + W, rank + 2W, ...` of the mixture, renders each whole (BOS
first, cut at 2048 tokens) and appends its ids to one token buffer: no loss mask (every token is trained
on), no padding, no attention mask between conversations. A batch pops exactly B*T+1 tokens (inputs the
first B*T, targets the last B*T) and leaves the rest for the next. Upstream kept `last_step` and the
progress in globals set inside the generator; here they are the loader's attributes, for the loop to read:
- the train cursor passing the end of the mixture wraps it and sets `last_step` (that batch is still
  made, then the loop stops before training on it);
- `num_iterations` > 0 counts the batches made, the first one (fetched before the loop) included, and
  sets `last_step` at the N-th: N-1 optimizer steps at one micro-step each, as upstream;
- `progress` is `batches / num_iterations`, else the cursor's fraction of the mixture, and drives the LR.
A validation loader never sets `last_step` (upstream's did when num_iterations > 0, ending the run at
the first evaluation that ran that many batches; fixed upstream in dddb95c).
"""

import torch

from bench.errors import DataError
from bench.nanochat.chat_format import ConversationError, render_conversation


class MidLoader:
    """An endless iterator of (inputs int32 [B, T], targets int64 [B, T]) on `device`."""

    def __init__(self, dataset, tokenizer, device_batch_size: int, max_seq_len: int, rank: int, world_size: int,
                 device, train: bool = True, num_iterations: int = -1):
        if len(dataset) == 0:
            raise ValueError("the mixture has no conversations")
        self.dataset, self.tokenizer = dataset, tokenizer
        self.B, self.T = device_batch_size, max_seq_len
        self.world_size, self.device, self.train = world_size, device, train
        self.num_iterations = num_iterations
        self.cursor = rank  # steps by world_size: each rank sees its own conversations
        self.buffer: list[int] = []
        self.batches = 0
        self.last_step = False
        self.progress = 0.0  # 0 -> 1 over the epoch (train only)
        self.pin = torch.device(device).type == "cuda"

    def __iter__(self):
        return self

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
        needed = self.B * self.T + 1
        size = len(self.dataset)
        while len(self.buffer) < needed:
            try:
                ids, _ = render_conversation(self.tokenizer, self.dataset[self.cursor])
            except ConversationError as e:
                raise DataError(f"{where(self.dataset, self.cursor)} of the {'train' if self.train else 'val'} "
                                f"mixture: {e}") from None
            self.buffer.extend(ids)
            self.cursor += self.world_size
            if self.cursor >= size:
                self.cursor -= size  # another epoch; training ends at the first wrap
                if self.train:
                    self.last_step = True
        self.batches += 1
        if self.train and 0 < self.num_iterations <= self.batches:
            self.last_step = True
        scratch = torch.tensor(self.buffer[:needed], dtype=torch.int64)
        del self.buffer[:needed]  # the remainder carries over to the next batch
        if self.pin:
            scratch = scratch.pin_memory()
        if self.train:
            self.progress = self.batches / self.num_iterations if self.num_iterations > 0 else self.cursor / size
        inputs = scratch[:-1].view(self.B, self.T).to(device=self.device, dtype=torch.int32, non_blocking=True)
        targets = scratch[1:].view(self.B, self.T).to(device=self.device, dtype=torch.int64, non_blocking=True)
        return inputs, targets


def where(dataset, index: int) -> str:
    """A mixture's conversation by its task and the task's own row, for a message about it."""
    if hasattr(dataset, "index_map"):
        task, local = dataset.index_map[index]
        return f"conversation {local} of {type(dataset.tasks[task]).__name__} (row {index})"
    return f"conversation {index}"
