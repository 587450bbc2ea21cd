"""Properties of the row-group sharding, as pure functions of row-group counts per file.

python -m pytest tests/unit/nanochat/test_sharding.py -q

Row groups are numbered globally across a split's files and rank r takes r, r+W, r+2W, … (the bench's
fix to upstream, which strides inside each file and leaves ranks empty when W exceeds a file's count).
"""

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.errors import DataError
from bench.nanochat.dataloader import check_shares
from bench.nanochat.dataset import split_of
from bench.nanochat.sharding import assign_row_groups, starved_ranks, workable_val_files_k, workable_val_files_k_rows

counts_st = st.lists(st.integers(min_value=0, max_value=120), min_size=1, max_size=12)
world_st = st.integers(min_value=1, max_value=512)
k_st = st.integers(min_value=1, max_value=8)


def check_split(split, files, rg_counts, world_size, all_rg_counts, k):
    """check_shares with every row group holding rows: at least one row group per rank."""
    check_shares(split, files, [[1] * n for n in rg_counts], world_size, [[1] * n for n in all_rg_counts], k)


def all_ranks(counts, world_size):
    return [assign_row_groups(counts, r, world_size) for r in range(world_size)]


@settings(max_examples=200, deadline=None)
@given(counts=counts_st, world_size=world_st)
def test_ranks_are_disjoint_cover_everything_and_are_non_empty(counts, world_size):
    ranks = all_ranks(counts, world_size)
    used = [rg for rank in ranks for rg in rank]
    assert len(used) == len(set(used))  # disjoint
    assert set(used) == {(f, i) for f, n in enumerate(counts) for i in range(n)}  # every row group used
    if sum(counts) >= world_size:
        assert all(ranks)  # non-empty
    sizes = [len(r) for r in ranks]
    assert max(sizes) - min(sizes) <= 1  # balanced to one row group


@settings(max_examples=100, deadline=None)
@given(counts=counts_st, world_size=world_st, rank=st.integers(min_value=0, max_value=511))
def test_rank_strides_globally_in_file_order(counts, world_size, rank):
    rank %= world_size
    mine = assign_row_groups(counts, rank, world_size)
    starts = [sum(counts[:f]) for f in range(len(counts))]
    assert [starts[f] + i for f, i in mine] == list(range(rank, sum(counts), world_size))
    assert mine == sorted(mine)  # files are walked in order, one open file at a time


@settings(max_examples=100, deadline=None)
@given(counts=st.lists(st.integers(min_value=1, max_value=60), min_size=2, max_size=16), k=k_st, world_size=world_st)
def test_validation_set_is_fixed_and_independent_of_world_size(counts, k, world_size):
    k = min(k, len(counts) - 1)
    files = [Path(f"shard_{i:05d}.parquet") for i in range(len(counts))]
    val_files, val_counts = split_of(files, "val", k), split_of(counts, "val", k)
    assert val_files == files[-k:] and split_of(files, "train", k) == files[:-k]
    once = all_ranks(val_counts, world_size)
    assert once == all_ranks(val_counts, world_size)  # identical across calls (fresh loader per eval)
    union = sorted(rg for rank in once for rg in rank)
    assert union == sorted(rg for rank in all_ranks(val_counts, 1) for rg in rank)  # same set for every W


@settings(max_examples=200, deadline=None)
@given(counts=st.lists(st.integers(min_value=0, max_value=60), min_size=2, max_size=16), world_size=world_st)
def test_suggested_k_works_and_is_the_smallest(counts, world_size):
    k = workable_val_files_k(counts, world_size)
    works = [j for j in range(1, len(counts))
             if sum(counts[-j:]) >= world_size and sum(counts[:-j]) >= world_size]
    assert k == (works[0] if works else None)


@settings(max_examples=100, deadline=None)
@given(counts=counts_st, world_size=world_st)
def test_check_split_raises_exactly_when_a_rank_would_be_empty(counts, world_size):
    files = [Path(f"shard_{i:05d}.parquet") for i in range(len(counts))]
    if sum(counts) >= world_size:
        check_split("val", files, counts, world_size, counts + [world_size], 1)
        return
    with pytest.raises(DataError) as e:
        check_split("val", files, counts, world_size, counts + [world_size], 1)
    assert f"{sum(counts)} row group(s) in {len(counts)} file(s)" in str(e.value)
    assert f"{world_size} ranks" in str(e.value)


def test_upstream_limit_is_gone():
    """52 row groups per shard, 1 val shard, 64 ranks: upstream leaves ranks 52-63 spinning forever."""
    with pytest.raises(DataError, match=r"val split has 52 row group\(s\).*64 ranks.*NANOCHAT_VAL_FILES_K=2 \(now 1\)"):
        check_split("val", [Path("shard_00239.parquet")], [52], 64, [52] * 240, 1)
    assert all(all_ranks([52, 52], 64))  # with K=2 every rank has data, across the file boundary
    assert assign_row_groups([52, 52], 60, 64) == [(1, 8)]


rows_st = st.lists(st.lists(st.integers(min_value=0, max_value=3), max_size=12), min_size=1, max_size=8)


@settings(max_examples=200, deadline=None)
@given(rows=rows_st, world_size=st.integers(min_value=1, max_value=40))
def test_a_rank_is_starved_exactly_when_all_its_row_groups_are_empty(rows, world_size):
    counts = [len(r) for r in rows]
    starved = [r for r in range(world_size)
               if not any(rows[f][i] for f, i in assign_row_groups(counts, r, world_size))]
    assert starved_ranks(rows, world_size) == starved


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.lists(st.integers(min_value=0, max_value=3), max_size=12), min_size=2, max_size=10),
       world_size=st.integers(min_value=1, max_value=40))
def test_suggested_k_gives_every_rank_rows_in_both_splits_and_is_the_smallest(rows, world_size):
    works = [k for k in range(1, len(rows))
             if not starved_ranks(rows[-k:], world_size) and not starved_ranks(rows[:-k], world_size)]
    assert workable_val_files_k_rows(rows, world_size) == (works[0] if works else None)


def test_counts_and_rows_agree_when_no_row_group_is_empty():
    for counts in ([52], [52, 52], [3, 0, 5], [1]):
        for w in (1, 2, 3, 52, 64, 104):
            assert workable_val_files_k(counts, w) == workable_val_files_k_rows([[1] * c for c in counts], w)


def test_more_ranks_than_row_groups_are_refused_without_a_pass_over_every_rank(monkeypatch):
    """`plan --nodes 1000000` asked every K of 40 shards about each of 4,000,000 ranks: minutes, then nothing fits.
    A split of fewer row groups than ranks starves some, which the counts alone say."""
    import bench.nanochat.sharding as sharding

    def every_rank(rows, world_size):
        raise AssertionError(f"a pass over {world_size} ranks")

    monkeypatch.setattr(sharding, "starved_ranks", every_rank)
    assert workable_val_files_k([32] * 40, 4_000_000) is None
