"""torch-nntile's GPT-2 made trainable with tiles, and the names its tiled axes go by.

Runs only inside the NNTile interpreter (imports torch_nntile). Three workarounds for torch-nntile 0.1.0:
- Autograd sums the gradients of a tensor used twice (the residual stream, the input of Q, K and V)
  with a plain torch add, and torch-nntile refuses to tile a graph holding plain torch ops. `fork` makes
  such a tensor's uses explicit and sums their gradients with NNTile's own add; tiled training is then
  the same computation as untiled. Gradient accumulation over micro-batches goes through the same add
  (`accumulate`).
- Its GPT-2 initialises both embeddings with std 1; GPT-2 (and HF's GPT2LMHeadModel) use
  `initializer_range` (0.02), so they are drawn again.
- The vocabulary axis is never tiled: that crashes in 0.1.0 (`malloc(): corrupted top size`).
"""

from functools import reduce

import torch
from torch_nntile.nn.functional import add, mul_scalar
from torch_nntile.nn.model import GPT2LMHead
from torch_nntile.nn.model.gpt2_minimal import GPT2Attention, GPT2Block
from torch_nntile.nn.sdpa import nntile_model_transpose, sdpa_kernel
from transformers import GPT2Config

import torch_nntile

# tile flag -> the axis-group name it sets (the names are ours; NNTile matches them by string)
AXIS_OF_TILE = {"minibatch_tile": "batch", "seq_tile": "seq", "embd_tile": "embd", "inner_tile": "inner",
                "head_tile": "head"}


class _Fork(torch.autograd.Function):
    """n aliases of x; their gradients are summed with NNTile's add instead of autograd's torch add."""

    @staticmethod
    def forward(ctx, x, n):
        return tuple(x.view_as(x) for _ in range(n))

    @staticmethod
    def backward(ctx, *grads):
        return reduce(add, [g for g in grads if g is not None]), None


def fork(x, n: int):
    return _Fork.apply(x, n)


class ForkedAttention(GPT2Attention):
    """torch-nntile's GPT2Attention.forward with its input forked into Q, K and V."""

    def forward(self, x, causal_mask):
        xq, xk, xv = fork(x, 3)
        q = self._add_qkv_bias(nntile_model_transpose(self._qkv_proj(xq, self.q_weight), 1), self.q_bias)
        k = self._add_qkv_bias(nntile_model_transpose(self._qkv_proj(xk, self.k_weight), 1), self.k_bias)
        v = self._add_qkv_bias(nntile_model_transpose(self._qkv_proj(xv, self.v_weight), 1), self.v_bias)
        out = sdpa_kernel(q, k, v, mask=causal_mask, batch_ndim=2)
        return self._output_proj(nntile_model_transpose(out, 3))


class ForkedBlock(GPT2Block):
    """torch-nntile's GPT2Block.forward with each residual branch point forked."""

    def forward(self, x, causal_mask):
        residual, x = fork(x, 2)
        x = add(residual, self.attn(self.ln_1(x), causal_mask))
        residual, x = fork(x, 2)
        return add(residual, self.mlp(self.ln_2(x)))


def build_model(shape: dict, seed: int) -> GPT2LMHead:
    """The GPT-2 of `shape` on the CPU (dropout off, as NNTile trains), embeddings drawn as GPT-2 draws them."""
    torch.manual_seed(seed)
    hf = GPT2Config(vocab_size=shape["vocab_size"], n_positions=shape["n_positions"], n_embd=shape["n_embd"],
                    n_layer=shape["n_layer"], n_head=shape["n_head"], n_inner=shape["n_inner"],
                    layer_norm_epsilon=shape["layer_norm_epsilon"], resid_pdrop=0.0, embd_pdrop=0.0,
                    attn_pdrop=0.0)
    model = GPT2LMHead(hf)
    with torch.no_grad():
        for emb in (model.transformer.wte, model.transformer.wpe):
            for p in emb.parameters():
                p.normal_(0.0, shape["initializer_range"])
    for block in model.transformer.h:
        block.__class__ = ForkedBlock  # same modules and weights, forward with forks
        block.attn.__class__ = ForkedAttention
    return model


def name_axes(model: GPT2LMHead, tokens) -> None:
    """Name the axis groups the tile flags cut, on tensors of the pending graph (call before compiling)."""
    torch_nntile.set_axis_group_name(tokens, {0: "batch", 1: "seq"})
    torch_nntile.set_axis_group_name(model.transformer.wte.weight, {1: "embd"})  # the residual stream
    for block in model.transformer.h:  # each layer's inner and head axes are groups of their own
        torch_nntile.set_axis_group_name(block.mlp.c_fc.weight, {0: "inner"})
        torch_nntile.set_axis_group_name(block.attn.q_weight, {2: "head"})


def apply_tiling(tiles: dict[str, int], extents: dict[str, int]) -> None:
    """Tile each named axis whose tile is smaller than the axis (an untiled axis is left as it is)."""
    for flag, axis in AXIS_OF_TILE.items():
        if tiles[flag] < extents[flag]:
            torch_nntile.set_axis_group_tiling(axis, tiles[flag])


def accumulate(acc, grad, weight: float):
    """acc + weight * grad through NNTile's add and scale (None acc: weight * grad)."""
    if acc is None:
        return mul_scalar(grad, weight) if weight != 1.0 else grad
    return add(acc, grad, alpha=1.0, beta=weight)


def tiling_summary() -> dict:
    """How many axis groups of the pending graph the tile flags cut, of how many, from NNTile's own
    listing ("Pending TensorGraph: ..., axis_groups=91, ..." then one line a group, `pending_tile=N`
    on the groups that will be tiled when the graph compiles)."""
    import re

    lines = torch_nntile.format_axis_groups().splitlines()
    total = re.search(r"axis_groups=(\d+)", lines[0])
    return {"tiled_axis_groups": sum("pending_tile=" in line for line in lines[1:]),
            "axis_groups": int(total[1]) if total else None}
