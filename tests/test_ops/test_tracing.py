"""Under ``torch.jit.trace`` (ONNX export, mmengine's FLOP counter) the hand-written autograd
Functions run their own forward as plain ops: the traced graph gives the eager result, and no
Python op is left in it."""
import pytest
import torch

from mmvisattn.ops.linear_angular import linear_angular_attention
from mmvisattn.ops.recompute import checkpointed_chunks
from mmvisattn.ops.ripple import ripple_attention


def check_traced(fn, *inputs):
    traced = torch.jit.trace(fn, inputs, check_trace=False)
    assert 'PythonOp' not in str(traced.graph)
    torch.testing.assert_close(traced(*inputs), fn(*inputs))


def test_linear_angular_traces():
    q, k, v = torch.randn(3, 2, 2, 20, 8)
    check_traced(lambda q, k, v: linear_angular_attention(q, k, v, 'torch'), q, k, v)


@pytest.mark.parametrize('impl', ['torch', 'sat'])
def test_ripple_traces(impl):
    q, k, v = torch.randn(3, 1, 2, 30, 8).abs()
    logits = torch.randn(1, 2, 30, 3)
    check_traced(lambda q, k, v, logits: ripple_attention(q, k, v, logits, (5, 6), impl=impl), q, k, v, logits)


def test_chunked_recompute_traces():
    x = torch.randn(2, 50, 4)
    check_traced(lambda x: checkpointed_chunks(torch.sin, (x,), 16), x)
