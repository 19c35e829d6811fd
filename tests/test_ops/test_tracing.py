"""Under ``torch.jit.trace`` (ONNX export, mmengine's FLOP counter) the hand-written autograd
Functions run their own forward as plain ops: the traced graph gives the eager result, and no
Python op is left in it."""
import pytest
import torch

from mmvisattn.ops.linear_angular import linear_angular_attention
from mmvisattn.ops.ripple import ripple_attention
from mmvisattn.ops.rwgk import rwgk_attention
from mmvisattn.ops.utils.recompute import checkpointed_chunks


def check_traced(fn, *inputs):
    traced = torch.jit.trace(fn, inputs, check_trace=False)
    assert 'PythonOp' not in str(traced.graph)
    torch.testing.assert_close(traced(*inputs), fn(*inputs))


def test_linear_angular_traces():
    q, k, v = torch.randn(3, 2, 2, 20, 8)
    check_traced(lambda q, k, v: linear_angular_attention(q, k, v, 'torch'), q, k, v)


@pytest.mark.parametrize('budget', [None, 1])
@pytest.mark.parametrize('impl', ['torch', 'dense'])
def test_ripple_traces(monkeypatch, impl, budget):
    """Also with inputs that need gradients (a model's, as the FLOP counter traces it) and in
    several groups of slices (budget 1)."""
    if budget is not None:
        for module in ('local_global', 'pytorch'):  # the groups of slices, and the tiles' chunks
            monkeypatch.setattr(f'mmvisattn.ops.ripple.{module}.CHUNK_ELEMENTS', budget)
    q, k, v = (t.requires_grad_() for t in torch.randn(3, 1, 2, 30, 8).abs())
    logits = torch.randn(1, 2, 30, 3, requires_grad=True)
    check_traced(lambda q, k, v, logits: ripple_attention(q, k, v, logits, (5, 6), impl=impl), q, k,
                 v, logits)


def test_rwgk_traces():
    q, k, v = (t.requires_grad_() for t in torch.randn(3, 2, 2, 30, 8))
    anchor_q, anchor_k = (t.requires_grad_() for t in torch.randn(2, 1, 2, 5, 8))
    check_traced(lambda q, k, v, anchor_q,
                 anchor_k: rwgk_attention(q, k, v, anchor_q, anchor_k, 0.5),
                 q, k, v, anchor_q, anchor_k)


def test_chunked_recompute_traces():
    x = torch.randn(2, 50, 4)
    check_traced(lambda x: checkpointed_chunks(lambda span, part: part.sin(), x.shape[-2], 16,
                                               (x,)), x)


@pytest.mark.parametrize('masking', ['chunk', 'exact', 'cyclic'])
@pytest.mark.parametrize('num_global', [0, 1])
def test_traced_sliding_chunk_equals_the_reference(masking, num_global):
    """The sliding-chunk op's own traced form (export, FLOP counters) against the explicit
    reference, on a map that needs padding, with relative-position biases."""
    from mmvisattn.ops.sliding_chunk import (
        sliding_chunk_attention,
        sliding_chunk_attention_reference,
    )
    torch.manual_seed(0)
    hw, window, heads = (7, 8), 3, 2
    q, k, v = torch.randn(3, 2, heads, num_global + 56, 8)
    local = torch.randn((4 * window - 1) ** 2, heads)
    tables = (local, torch.randn(2, heads, num_global),
              torch.randn(heads, num_global, num_global)) if num_global \
        else (local, None, None)

    def traced_op(q, k, v):
        return sliding_chunk_attention(q, k, v, hw, window, num_global, masking, 0, tables,
                                       impl='torch')

    traced = torch.jit.trace(traced_op, (q, k, v), check_trace=False)
    assert 'PythonOp' not in str(traced.graph)
    torch.testing.assert_close(
        traced(q, k, v),
        sliding_chunk_attention_reference(q, k, v, hw, window, num_global, masking, 0, tables),
        rtol=1e-5,
        atol=1e-6,
    )
