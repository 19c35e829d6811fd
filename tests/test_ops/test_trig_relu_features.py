"""The feature map of ripple attention (arXiv:2110.02453, Appendix C.1, Eq. 13): the torch and C++
passes against its autograd form in value and every gradient (several chunks and blocks of rows),
against each other in float32, a float64 gradcheck of the hand-written backward on a permuted view,
the tensors saved, and half-precision inputs."""
import pytest
import torch

from mmvisattn.ops.trig_relu_features import trig_relu_features, trig_relu_features_reference
from mmvisattn.ops.trig_relu_features.cpu import features_backward, features_forward
from mmvisattn.ops.trig_relu_features.pytorch import torch_backward, torch_forward


def feature_inputs(dtype=torch.float64, shape=(2, 3, 11, 8), num_features=6):
    torch.manual_seed(7)
    x = torch.randn(*shape, dtype=dtype) * 2
    w1 = torch.randn(num_features, shape[-1], dtype=dtype)
    w2 = torch.randn(shape[-1], 2 * num_features, dtype=dtype) * 0.3
    # some features below zero: the ReLU's mask matters
    b2 = torch.randn(shape[-1], dtype=dtype) * 0.1
    return [t.requires_grad_() for t in (x, w1, w2, b2)]


@pytest.mark.parametrize('impl, chunk, shape', [
    ('torch', 4, (2, 3, 11, 8)),  # several chunks of tokens in the backward
    ('torch', 4096, (2, 3, 11, 8)),  # one
    ('cpu', None, (2, 3, 11, 8)),  # one block of rows
    ('cpu', None, (2, 5, 61, 8)),  # 610 rows: two blocks of 256 and a shorter one
])
def test_feature_map_equals_eq13_in_value_and_gradients(monkeypatch, impl, chunk, shape):
    if chunk is not None:
        monkeypatch.setattr('mmvisattn.ops.trig_relu_features.pytorch.CHUNK_TOKENS', chunk)
    args = feature_inputs(shape=shape)
    fast = trig_relu_features(*args, scale=0.7, impl=impl)
    slow = trig_relu_features_reference(*args, scale=0.7)
    torch.testing.assert_close(fast, slow)
    assert 0 < (slow == 0).float().mean() < 1
    weights = torch.randn_like(slow)
    for a, b in zip(torch.autograd.grad((fast * weights).sum(), args),
                    torch.autograd.grad((slow * weights).sum(), args)):
        torch.testing.assert_close(a, b)


def test_feature_map_cpu_passes_equal_torch_passes_in_float32():
    """The C++ passes (SLEEF's sine and cosine, blocked products) against the torch passes, float32,
    on the heads of a qkv projection read in place."""
    x, w1, w2, b2 = (t.detach().float() for t in feature_inputs(shape=(2, 300, 3, 8)))
    heads = x.transpose(1, 2)
    features = torch_forward(heads, w1, w2, b2, 0.7)
    torch.testing.assert_close(features_forward(heads, w1, w2, b2, 0.7), features)
    grad_out = torch.randn_like(features)
    # the weights' gradients sum 1800 rows in another order (blocks per thread, against chunks)
    for a, b in zip(features_backward(heads, w1, w2, features, grad_out, 0.7),
                    torch_backward(heads, w1, w2, features, grad_out, 0.7)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize('impl', ['torch', 'cpu'])
def test_feature_map_gradcheck_and_saved_tensors(impl):
    """float64 gradcheck of the hand-written backward on a permuted view (the modules' heads); only
    the input and the output are saved."""
    x, w1, w2, b2 = feature_inputs(shape=(2, 5, 3, 4), num_features=3)
    view = x.transpose(1, 2)
    assert torch.autograd.gradcheck(lambda *a: trig_relu_features(*a, scale=0.5, impl=impl),
                                    (view, w1, w2, b2))
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        out = trig_relu_features(view, w1, w2, b2, impl=impl)
    assert sum(t.numel() for t in saved) == sum(t.numel() for t in (view, w1, w2, out))


@pytest.mark.parametrize('impl', ['torch', 'cpu'])
def test_feature_map_half_inputs_keep_their_dtype(impl):
    x, w1, w2, b2 = (t.detach().float().requires_grad_() for t in feature_inputs())
    half = x.detach().bfloat16().requires_grad_()
    out = trig_relu_features(half, w1, w2, b2, impl=impl)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), trig_relu_features_reference(half.float(), w1, w2, b2),
                               atol=2e-2, rtol=2e-2)
    out.float().sum().backward()
    assert half.grad.dtype == torch.bfloat16 and w1.grad.dtype == torch.float32
