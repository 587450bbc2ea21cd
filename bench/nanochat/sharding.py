"""Sharding: which row groups each rank reads (bench/nanochat/dataloader.py says why they stride globally), as pure
functions of the row-group counts, so they can be property-tested fast and the planner picks K without torch.
"""

import bisect

import numpy as np



def assign_row_groups(rg_counts: list[int], rank: int, world_size: int) -> list[tuple[int, int]]:
    """(file index, row group index) pairs of one rank: global row groups rank, rank+W, rank+2W, …"""
    starts = np.cumsum([0] + list(rg_counts)).tolist()  # starts[i] = global number of file i's first row group
    out = []
    for g in range(rank, starts[-1], world_size):
        f = bisect.bisect_right(starts, g) - 1
        out.append((f, g - starts[f]))
    return out


def starved_ranks(rows: list[list[int]], world_size: int) -> list[int]:
    """Ranks whose row groups (global r, r+W, …; `rows` = rows per row group, file by file) hold no row:
    such a rank would read nothing for ever while the others wait for it in the next collective."""
    flat = [n for file_rows in rows for n in file_rows]
    return [r for r in range(world_size) if not any(flat[r::world_size])]


def workable_val_files_k_rows(rows: list[list[int]], world_size: int) -> int | None:
    """Smallest K for which both splits (train = files[:-K], val = files[-K:]) give every rank rows."""
    # a split of fewer row groups than ranks starves some: known from the counts, without a pass over every rank
    # (`plan --nodes 1000000` took minutes a K)
    total, val = sum(map(len, rows)), 0
    for k in range(1, len(rows)):
        val += len(rows[-k])
        if min(val, total - val) >= world_size and not starved_ranks(rows[-k:], world_size) \
                and not starved_ranks(rows[:-k], world_size):
            return k
    return None


def workable_val_files_k(rg_counts: list[int], world_size: int) -> int | None:
    """Smallest K for which both splits have >= W row groups (each row group holding rows)."""
    return workable_val_files_k_rows([[1] * n for n in rg_counts], world_size)
