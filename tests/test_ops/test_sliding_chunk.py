"""Sliding-chunk op (arXiv:2103.15358, App. C, D): the torch path with its hand-written backward and the
Triton kernels equal the masked full-attention reference in value and gradient (queries, keys,
values and the three bias tables) for every masking and neighbour mode, odd grids, batch 2 and
0 / 1 / 2 global tokens; float64 gradcheck; saved memory grows with N d, as SDPA's; a window larger than the
map is full attention; bad arguments are named. Triton runs under TRITON_INTERPRET=1 on CPU."""
import itertools

import pytest
import torch
import torch.nn.functional as F

from mmvisattn.ops.sliding_chunk import MASKINGS, sliding_chunk_attention, sliding_chunk_attention_reference

from ..conftest import saved_elements


def make_inputs(batch=2, heads=2, num_global=1, hw=(5, 7), dims=4, window=2, rel_pos=True, dtype=torch.float64):
    generator = torch.Generator().manual_seed(hw[0] * 31 + hw[1] + 7 * num_global)
    tokens = num_global + hw[0] * hw[1]

    def rand(*shape):
        return torch.randn(*shape, generator=generator, dtype=dtype).requires_grad_()

    q, k, v = (rand(batch, heads, tokens, dims) for _ in range(3))
    side = 4 * window - 1
    tables = None
    if rel_pos:
        tables = (rand(side * side, heads), rand(2, heads, num_global) if num_global else None,
                  rand(heads, num_global, num_global) if num_global else None)
    return q, k, v, tables


def leaves(q, k, v, tables):
    return [q, k, v] + [t for t in (tables or ()) if t is not None]


def assert_matches_reference(impl, hw, window, num_global, masking, mode, dtype=torch.float64, tol=None, **kw):
    q, k, v, tables = make_inputs(num_global=num_global, hw=hw, window=window, dtype=dtype, **kw)
    fast = sliding_chunk_attention(q, k, v, hw, window, num_global, masking, mode, tables, impl=impl)
    slow = sliding_chunk_attention_reference(q, k, v, hw, window, num_global, masking, mode, tables)
    tol = tol or {}
    torch.testing.assert_close(fast, slow, **tol)
    weights = torch.randn_like(slow)
    inputs = leaves(q, k, v, tables)
    for a, b in zip(torch.autograd.grad((fast * weights).sum(), inputs),
                    torch.autograd.grad((slow * weights).sum(), inputs)):
        torch.testing.assert_close(a, b, **tol)


@pytest.mark.parametrize('masking,mode,num_global', itertools.product(MASKINGS, (0, -1, 2, 5), (0, 1, 2)))
def test_torch_equals_reference_every_mode(masking, mode, num_global):
    assert_matches_reference('torch', (5, 7), 2, num_global, masking, mode)


@pytest.mark.parametrize('hw,window', [((1, 1), 1), ((3, 10), 3), ((4, 4), 2), ((2, 3), 1), ((9, 5), 2)])
@pytest.mark.parametrize('masking', MASKINGS)
def test_torch_equals_reference_odd_grids(hw, window, masking):
    # grids of one and two chunks too, where cyclic neighbours repeat and the reference merges them
    assert_matches_reference('torch', hw, window, 1, masking, 0)


def test_torch_equals_reference_without_bias():
    assert_matches_reference('torch', (6, 5), 2, 1, 'chunk', 0, rel_pos=False)


@pytest.mark.parametrize('budget', [1, 200])
@pytest.mark.parametrize('masking', MASKINGS)
def test_slices_of_chunks_equal_reference(monkeypatch, budget, masking):
    """Large maps run in slices of heads and chunks: one chunk of one head per slice (budget 1)
    and a few chunks per slice give the reference's values and gradients."""
    monkeypatch.setattr('mmvisattn.ops.sliding_chunk.pytorch.SCORE_BUDGET', budget)
    assert_matches_reference('torch', (7, 9), 2, 1, masking, 0)


def test_gradcheck_hand_written_backward():
    q, k, v, tables = make_inputs(batch=1, heads=2, num_global=1, hw=(3, 4), dims=2, window=2)

    def fn(q, k, v, table, g2l, g2g):
        return sliding_chunk_attention(q, k, v, (3, 4), 2, 1, 'exact', 0, (table, g2l, g2g), impl='torch')

    assert torch.autograd.gradcheck(fn, (q, k, v, *tables))


@pytest.mark.parametrize('masking', MASKINGS)
def test_window_larger_than_map_is_full_attention(masking):
    # cyclic padding repeats the one chunk nine times: full attention over the map, but a global
    # token would then weigh 1/9 of a local one, so the cyclic case is checked without one
    num_global = 0 if masking == 'cyclic' else 1
    q, k, v, _ = make_inputs(num_global=num_global, hw=(5, 6), window=8, rel_pos=False)
    full = F.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(sliding_chunk_attention(q, k, v, (5, 6), 8, num_global, masking, impl='torch'), full)
    torch.testing.assert_close(sliding_chunk_attention_reference(q, k, v, (5, 6), 8, num_global, masking), full)


def test_exact_window_is_the_conv_like_neighbourhood():
    # a key's value reaches a query only within w along both axes
    hw, window = (9, 9), 2
    q, k, _, _ = make_inputs(batch=1, heads=1, num_global=0, hw=hw, window=window, rel_pos=False)
    v = torch.eye(81, dtype=torch.float64)[None, None]
    weights = sliding_chunk_attention(q.detach(), k.detach(), v, hw, window, masking='exact', impl='torch')[0, 0]
    pos = torch.arange(81)
    near = ((pos[:, None] // 9 - pos[None] // 9).abs() <= window) & ((pos[:, None] % 9 - pos[None] % 9).abs() <= window)
    assert (weights[~near] == 0).all() and (weights[near] > 0).all()


@pytest.mark.parametrize('masking', MASKINGS)
def test_saved_tensors_grow_linearly_like_sdpa(masking):
    """The backward recomputes the probabilities from one log-sum-exp per query: per token and head
    the op saves its inputs, output and that number, about ``4 d + 1`` values (the probabilities
    were ``G + 9 w^2``: 145 here), the same order as SDPA's saved tensors."""
    dims, window = 4, 4

    def saved(side):
        q, k, v, tables = make_inputs(batch=1, heads=1, num_global=1, hw=(side, side), dims=dims, window=window,
                                      dtype=torch.float32)
        return saved_elements(lambda: sliding_chunk_attention(q, k, v, (side, side), window, 1, masking,
                                                              rel_pos=tables, impl='torch'))

    # per added token (the bias tables and slot indices are a constant, the same at every size)
    small, medium, large = saved(16), saved(32), saved(64)
    first, second = (medium - small) / (32 ** 2 - 16 ** 2), (large - medium) / (64 ** 2 - 32 ** 2)
    assert second < 8 * (dims + 1)
    assert abs(second - first) < 0.1 * first  # linear growth


def test_auto_picks_torch_on_cpu():
    q, k, v, tables = make_inputs()
    torch.testing.assert_close(sliding_chunk_attention(q, k, v, (5, 7), 2, 1, rel_pos=tables),
                               sliding_chunk_attention(q, k, v, (5, 7), 2, 1, rel_pos=tables, impl='torch'))


@pytest.mark.parametrize('kwargs,message', [
    (dict(window=0), 'window=0; expected a positive integer'),
    (dict(window=2.5), 'window=2.5; expected a positive integer'),
    (dict(window=True), 'window=True; expected a positive integer'),
    (dict(masking='padded'), "masking='padded'; expected one of"),
    (dict(mode=9), 'mode=9; expected an integer in -1..8'),
    (dict(impl='cuda'), "impl='cuda'; expected one of"),
    (dict(hw_shape=(5, 6)), r'does not hold 1 global \+ 5x6 tokens'),
])
def test_bad_arguments_are_named(kwargs, message):
    q, k, v, _ = make_inputs(rel_pos=False)
    args = dict(hw_shape=(5, 7), window=2, num_global=1)
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        sliding_chunk_attention(q, k, v, **args)


@pytest.mark.parametrize('masking,mode,num_global', [('chunk', 0, 1), ('exact', 0, 2), ('cyclic', 3, 0),
                                                     ('chunk', -1, 1)])
def test_triton_equals_reference(masking, mode, num_global):
    assert_matches_reference('triton', (5, 3), 2, num_global, masking, mode, dtype=torch.float32,
                             tol=dict(rtol=1e-4, atol=1e-5), batch=1)
