"""Batch fitting (bench/nanochat/config.py) keeps total_batch_size fixed; impossible points say which
totals would work; the model's FLOPs per token, which the planner's estimates use, is nanochat's.

    python -m pytest tests/unit/nanochat/test_batch_fit.py -q
"""

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

import torch

from bench.errors import ConfigError
from bench.nanochat.config import fit_batch, grad_accum_steps
from bench.nanochat.gpt import GPT, GPTConfig


@pytest.mark.parametrize("ranks,dbs,accum", [(1, 32, 8), (2, 32, 4), (4, 32, 2), (8, 32, 1), (16, 16, 1),
                                             (32, 8, 1), (64, 4, 1)])
def test_d20_recipe_at_every_power_of_two(ranks, dbs, accum):
    fit = fit_batch(524288, 32, 2048, ranks)
    assert (fit.device_batch_size, fit.grad_accum) == (dbs, accum)
    assert bool(fit.note) == (dbs != 32)


def test_impossible_point_names_totals_that_work():
    fit = fit_batch(524288, 32, 2048, 3)
    assert not fit.possible
    assert "6,144" in fit.reason and "522,240" in fit.reason and "528,384" in fit.reason


def test_too_many_ranks_for_the_total():
    fit = fit_batch(524288, 32, 2048, 512)
    assert not fit.possible and "1,048,576" in fit.reason


@given(total_seqs=st.integers(1, 4096), dbs=st.integers(1, 64), seq=st.sampled_from([64, 512, 2048]),
       ranks=st.integers(1, 128))
def test_fit_keeps_the_total_exact_or_explains(total_seqs, dbs, seq, ranks):
    total = total_seqs * seq
    fit = fit_batch(total, dbs, seq, ranks)
    if fit.possible:
        assert fit.device_batch_size * seq * ranks * fit.grad_accum == total
        assert 1 <= fit.device_batch_size <= dbs
    else:
        assert total % (seq * ranks) != 0 and "not a multiple" in fit.reason


def test_the_trainer_agrees_with_the_fit_at_the_same_device_batch():
    for ranks in (1, 2, 8):
        fit = fit_batch(524288, 32, 2048, ranks)
        assert grad_accum_steps(524288, 32, 2048, ranks) == fit.grad_accum


def test_flops_per_token_matches_nanochat_d20():
    d20 = GPTConfig.from_depth(20, vocab_size=65536, sequence_len=2048)
    assert d20.flops_per_token() == 3_491_758_080  # nanochat's estimate_flops for d20 (3.491758e9)
    assert d20.num_params() == 560_988_160


@pytest.mark.parametrize("depth,seq", [(1, 64), (4, 256), (20, 2048)])
def test_shape_arithmetic_matches_the_built_model(depth, seq):
    config = GPTConfig.from_depth(depth, vocab_size=65536, sequence_len=seq)
    with torch.device("meta"):
        model = GPT(config)
    assert config.num_params() == model.num_params()


def _walked_fit(total, dbs, seq, ranks):
    """fit_batch's device batch as it was found before: every batch from the asked one down, tried in turn."""
    sequences = total // (seq * ranks)
    return max(b for b in range(1, min(dbs, sequences) + 1) if sequences % b == 0)


def _walked_sizes(total, dbs, seq, ranks):
    """grad_accum_steps' sizes that divide the total, found the same way before."""
    return [b for b in range(min(dbs, total // (seq * ranks)), 0, -1) if total % (b * seq * ranks) == 0]


@pytest.mark.parametrize("seq", [1, 64, 2048])
def test_the_device_batch_found_is_the_one_every_batch_tried_in_turn_found(seq):
    for total_seqs in (*range(1, 130), 360, 1000, 4096, 5040, 65536, 99991, 524288):
        for ranks in (1, 2, 3, 8, 64):
            for dbs in (1, 2, 3, 7, 16, 32, 64, 100, 1000):
                total = total_seqs * seq
                fit = fit_batch(total, dbs, seq, ranks)
                if total % (seq * ranks) == 0:
                    assert fit.device_batch_size == _walked_fit(total, dbs, seq, ranks), (total, dbs, seq, ranks)
                try:
                    grad_accum_steps(total, dbs, seq, ranks)
                except ConfigError as e:
                    sizes = _walked_sizes(total, dbs, seq, ranks)
                    if sizes:
                        assert f"--device_batch_size={' | '.join(str(b) for b in sizes[:6])} with" in str(e)
                    else:
                        assert f"with --total_batch_size={total}; or" not in str(e)


@pytest.mark.timeout(10)
@pytest.mark.parametrize("total,dbs,seq", [
    (2_048_000_000_000, 1_000_000_000, 2048),  # divides: every batch up to 1e9 was tried (minutes)
    (2_048_000_002_048, 1_000_000_000, 2048),  # does not: the sizes that would were sought the same way
    (2**40 - 87, 2**40 - 1, 1),  # a prime count of sequences: no batch but 1 divides it
    (2**40, 2**40 - 1, 1),
])
def test_a_huge_total_or_device_batch_answers_at_once(total, dbs, seq):
    start = time.monotonic()
    fit = fit_batch(total, dbs, seq, 1)
    try:
        grad_accum_steps(total, dbs, seq, 1)
    except ConfigError:
        pass
    assert time.monotonic() - start < 1.5
    assert fit.device_batch_size * fit.grad_accum * seq == total


def test_a_total_of_more_sequences_than_any_search_allows_is_refused_naming_it():
    fit = fit_batch(2**41 * 2048, 8, 2048, 1)
    assert not fit.possible and "2,199,023,255,552 sequences per rank" in fit.reason
    with pytest.raises(ConfigError, match=r"^--total_batch_size=4,503,599,627,370,496 is 2,199,023,255,552 "
                                          r"sequences per rank .*at most 1,099,511,627,776 \(2\^40\)"):
        grad_accum_steps(2**41 * 2048, 3, 2048, 1)
