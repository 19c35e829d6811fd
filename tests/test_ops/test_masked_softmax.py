"""The auxiliary masked softmax of Castling-ViT by blocks of queries, recomputed in the backward,
against the literal form: values and gradients over several blocks (the last one shorter), batch and
heads > 1, keys of another length; float64 gradcheck; half inputs whose half-precision logits would
overflow. The dense form (dropout, torch.compile) against the literal one, its dropout mask that of
``F.dropout``, and auto's choice between the two."""
import pytest
import torch
import torch.nn.functional as F

from mmvisattn.ops.masked_softmax import (
    OP,
    Options,
    masked_softmax_attention,
    masked_softmax_attention_reference,
)
from mmvisattn.ops.masked_softmax.dense import masked_softmax_attention_dense
from mmvisattn.ops.masked_softmax.pytorch import masked_softmax_attention_torch, query_block
from mmvisattn.ops.utils.dispatch import Request, UnsupportedInput


def qkv(queries, keys, dtype=torch.float64, scale=1.0, seed=0):
    torch.manual_seed(seed)
    q = torch.randn(2, 3, queries, 8, dtype=dtype) * scale
    k, v = (torch.randn(2, 3, keys, 8, dtype=dtype) * scale for _ in range(2))
    return [t.requires_grad_() for t in (q, k, v)]


@pytest.mark.parametrize('queries,keys,block', [(293, 293, 100), (293, 150, None), (5, 9, 1)])
def test_blocks_equal_the_literal_form_in_value_and_gradients(queries, keys, block):
    q, k, v = qkv(queries, keys)
    blocked, literal = (masked_softmax_attention_torch(q, k, v, 0.01, block=block),
                        masked_softmax_attention_reference(q, k, v, 0.01))
    # the mask drops some
    assert 0 < (torch.softmax(q @ k.transpose(-1, -2) * 8 ** -0.5, -1) <= 0.01).sum()
    torch.testing.assert_close(blocked, literal)
    upstream = torch.randn_like(literal)
    torch.testing.assert_close(torch.autograd.grad(blocked, (q, k, v), upstream),
                               torch.autograd.grad(literal, (q, k, v), upstream))


def test_gradcheck_in_float64():
    q, k, v = (t[:1, :2].detach().requires_grad_() for t in qkv(6, 7, seed=1))
    weights = torch.softmax(q @ k.transpose(-1, -2) * 8 ** -0.5, -1)
    # no weight at the threshold
    assert (weights - 0.1).abs().min() > 1e-3 and (weights <= 0.1).any()
    assert torch.autograd.gradcheck(lambda *t: masked_softmax_attention_torch(*t, 0.1, block=4),
                                    (q, k, v))


def test_one_block_holds_the_budget_of_weights():
    q, k, _ = qkv(1024, 1024, dtype=torch.float32)
    assert query_block(q, k) == 2 ** 25 // (6 * 1024)
    assert query_block(q[..., :1, :], torch.empty(1, 1, 2 ** 26, 1)) == 1


@pytest.mark.parametrize('keys', [29, 17])
def test_dense_form_equals_the_literal_one_in_value_and_gradients(keys):
    q, k, v = qkv(29, keys)
    dense, literal = (masked_softmax_attention_dense(q, k, v, 0.02),
                      masked_softmax_attention_reference(q, k, v, 0.02))
    assert dense.dtype == torch.float64
    torch.testing.assert_close(dense, literal)
    upstream = torch.randn_like(literal)
    torch.testing.assert_close(torch.autograd.grad(dense, (q, k, v), upstream),
                               torch.autograd.grad(literal, (q, k, v), upstream))


def test_dense_dropout_zeroes_kept_weights_as_f_dropout_draws_them():
    q, k, v = qkv(13, 21)
    torch.manual_seed(5)
    out = masked_softmax_attention(q, k, v, 0.02, dropout=0.5)
    torch.manual_seed(5)
    kept = F.dropout(torch.ones(2, 3, 13, 21, dtype=q.dtype), 0.5)
    weights = torch.softmax(q @ k.transpose(-1, -2) * 8 ** -0.5, -1)
    torch.testing.assert_close(out, (weights * (weights > 0.02) * kept) @ v)
    assert (kept == 0).any() and (kept == 2).any()


def test_auto_takes_the_dense_form_for_dropout_or_compile_and_the_blocks_otherwise():
    q, k, v = qkv(9, 11)
    for device in ('cpu', 'cuda', 'meta'):
        request = Request.of((q, k, v), Options(0.0))._replace(device=device)
        assert OP.choose('auto', request) == 'torch'
        assert OP.choose('auto', request._replace(options=Options(0.1))) == 'dense'
        assert OP.choose('auto', request._replace(context='compile')) == 'dense'
    with pytest.raises(UnsupportedInput,
                       match=r"^masked_softmax_attention\(impl='torch'\): dropout=0.1 on the "
                                               r'weights: a recomputed block would draw another '
                                               r'mask$'):
        masked_softmax_attention(q, k, v, 0.05, dropout=0.1, impl='torch')


@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16])
@pytest.mark.parametrize('form', ['blocks', 'dense'])
def test_half_inputs_give_finite_float32_softmax_results(dtype, form):
    """Inputs of size 100 in 8 dimensions: some logits lie beyond float16's range (65504) before the
    scale; the products give float32, the output and gradients come back finite in the inputs' dtype
    and within the rounding of half weights of the float32 result."""
    q, k, v = (
        t.detach().to(dtype).requires_grad_() for t in qkv(40, 40, dtype=torch.float32, scale=100.0)
    )
    assert (q.float() @ k.float().transpose(-1, -2)).abs().max() > torch.finfo(torch.float16).max
    if form == 'blocks':
        out = masked_softmax_attention_torch(q, k, v, 0.02, block=16)
    else:
        out = masked_softmax_attention(q, k, v, 0.02, impl=form)
    literal = masked_softmax_attention_reference(*(t.detach().float() for t in (q, k, v)), 0.02)
    assert out.dtype == dtype and torch.isfinite(out).all()
    assert (out.float() - literal).abs().max() <= 1e-2 * literal.abs().max()
    grads = torch.autograd.grad(out.float().sum(), (q, k, v))
    assert all(grad.dtype == dtype and torch.isfinite(grad).all() for grad in grads)


def test_auto_runs_the_blocks_and_names_a_bad_impl():
    q, k, v = qkv(9, 11)
    torch.testing.assert_close(masked_softmax_attention(q, k, v, 0.05),
                               masked_softmax_attention_torch(q, k, v, 0.05))
    with pytest.raises(ValueError,
                       match=r"impl='reference'; expected one of \('auto', 'dense', 'torch'\)$"):
        masked_softmax_attention(q, k, v, 0.05, impl='reference')
    with pytest.raises(ValueError, match=r"impl='cuda'; expected one of"):
        masked_softmax_attention(q, k, v, 0.05, impl='cuda')
