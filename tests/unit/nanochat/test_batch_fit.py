"""Batch fitting (bench/nanochat/config.py) keeps total_batch_size fixed; impossible points say which
totals would work; the model's FLOPs per token, which the planner's estimates use, is nanochat's.

    python -m pytest tests/unit/nanochat/test_batch_fit.py -q
"""

import pytest
from hypothesis import given
from hypothesis import strategies as st

import torch

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
