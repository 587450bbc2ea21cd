"""SFT's batches: one conversation per row, padded, the loss on the assistant's tokens only (mirrors upstream
5c93a56 scripts/chat_sft.py, sft_data_generator).

Rank r renders examples r, r+W, r+2W, ... of the dataset and starts over at its end, endlessly (the step count
decides when training stops, not the data). A batch of B conversations becomes (inputs, targets) of B rows, each
as wide as its longest conversation less one token: inputs are ids[:-1], padded with assistant_end; targets are
ids[1:], -1 (the loss's ignore index) where mask[1:] is 0 (BOS, user turns, assistant_start, tool outputs) and
on the padding.
"""

import torch

from bench.errors import DataError
from bench.nanochat.chat_format import ConversationError, render_conversation

IGNORE = -1  # the cross entropy's ignore_index (bench/nanochat/gpt.py)


def collate(batch: list[tuple[list[int], list[int]]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) of rendered (ids, mask) pairs, on `device`."""
    width = max(len(ids) for ids, _ in batch) - 1  # a conversation of n tokens gives n-1 inputs and targets
    inputs = torch.full((len(batch), width), pad_id, dtype=torch.long)
    targets = torch.full((len(batch), width), IGNORE, dtype=torch.long)
    for row, (ids, mask) in enumerate(batch):
        ids_t = torch.tensor(ids, dtype=torch.long)
        inputs[row, :len(ids) - 1] = ids_t[:-1]
        targets[row, :len(ids) - 1] = ids_t[1:].masked_fill(torch.tensor(mask[1:]) == 0, IGNORE)
    return inputs.to(device), targets.to(device)


def sft_batches(dataset, tokenizer, batch_size: int, rank: int, world_size: int, device, what: str = "SFT"):
    """Endless (inputs, targets) batches of `batch_size` conversations for this rank."""
    if len(dataset) <= rank:  # this rank would take no example and loop for ever
        raise DataError(f"{what} data has {len(dataset)} example(s): too few for {world_size} rank(s), each needs "
                        f"at least one; stage the full data (`nanochat-bench data download --chat`)")
    pad_id = tokenizer.encode_special("<|assistant_end|>")  # the padding is never a target
    batch = []
    while True:
        for index in range(rank, len(dataset), world_size):
            try:
                batch.append(render_conversation(tokenizer, dataset[index]))
            except ConversationError as e:  # a malformed example: one line naming it
                raise DataError(f"{what} example {index} of {len(dataset)}: {e}") from None
            if len(batch) == batch_size:
                yield collate(batch, pad_id, device)
                batch = []
