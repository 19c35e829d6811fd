"""Mixed precision for every registered attention and every implementation that runs on CPU: forward
and backward under CPU autocast in bfloat16 and float16 stay finite and close to float32.

Three inputs: normal (unit Gaussian tokens), x100 (the same times 100: sums over tokens and softmax
logits that leave float16's range) and all-zero. The upstream gradient is a unit Gaussian, divided
by 100 for the x100 input: that is what a dynamic loss scaler settles at, because the stock
``nn.Linear`` weight gradients (input times gradient, summed over tokens) grow with the input and
overflow float16 otherwise, whatever the attention.

Errors are norm-wise, ``||half - float32|| / ||float32||``, over the output and over the gradients
of the input and all parameters together.
"""
from typing import Optional, Tuple

import pytest
import torch
from torch import Tensor

import mmvisattn  # noqa: F401
from mmvisattn.registry import ATTENTIONS, build_attention

EMBED_DIMS, HEADS = 32, 2  # 16-wide heads: the narrowest the Triton kernels' dots take
GRID = (12, 12)
# the interpreter runs kernels on CPU some 1000x slower than torch: the Triton cases use a smaller
# grid and ripple attention 2 stick units (3 x 3 offsets per query in its kernels instead of 7 x 7)
TRITON_GRID = (5, 6)
TRITON_OPTIONS = {'RippleAttention': dict(r_max=2)}
SCALES = {'normal': 1.0, 'x100': 100.0, 'zero': 0.0}

# (output, gradients) bounds per dtype, normal and zero inputs; the largest errors measured over all
# types and impls were bfloat16 4.2e-3 / 6.1e-3, float16 2.7e-3 / 4.4e-3, except for ripple below.
BOUNDS = {torch.bfloat16: (1e-2, 2e-2), torch.float16: (5e-3, 1e-2)}
# The feature map of ripple attention (Eq. 13) takes sin and cos of projections of size |q| sqrt(d):
# bfloat16 queries (autocast rounds the stock Linear's output to 8 bits) move those arguments by
# about 1e-2 and flip the ReLU that follows on features near zero, so its parameters' gradients,
# sums over tokens that largely cancel, differ by a few percent however exactly the map itself is
# computed (float32 throughout: 4.5e-2 at this test's seed, 0.5e-2 to 2.7e-2 at seeds 1-3).
BFLOAT16_GRAD_BOUNDS = {'RippleAttention': 6e-2, 'RippleLinearAttention': 6e-2}
# x100: the softmax of logits some 1e4 apart is nearly one-hot, and autocast rounds q and k (the
# stock Linear's outputs, before any op of ours) by more than the gaps between the top logits, so
# the half and float32 runs pick different keys for some queries. Outputs stay averages of values
# (measured: bfloat16 0.358, float16 0.051); gradients follow the flipped choices and differ by
# several times their size for the stock SoftmaxAttention too (6.7 in bfloat16, 5.5 in float16),
# so for them only finiteness is asserted.
X100_OUTPUT_BOUNDS = {torch.bfloat16: 0.5, torch.float16: 0.1}


def cases():
    for attn_type in sorted(ATTENTIONS.module_dict):
        impls = [impl for impl in ATTENTIONS.get(attn_type).impls if impl != 'auto'] or [None]
        for impl in impls:
            yield pytest.param(attn_type, impl, id=f'{attn_type}-{impl or "only"}')


def forward_backward(attn: torch.nn.Module, x: Tensor, hw_shape: Tuple[int, int], upstream: Tensor,
                     dtype: Optional[torch.dtype]) -> Tuple[Tensor, Tensor]:
    """Output (as float32) and all gradients (input first, then parameters) flattened into one
    vector."""
    x = x.clone().requires_grad_(True)
    attn.zero_grad(set_to_none=True)
    torch.manual_seed(1)  # the same dropout / random-shift draws in every run
    with torch.autocast('cpu', dtype=dtype or torch.bfloat16, enabled=dtype is not None):
        out = attn(x, hw_shape)
    (out.float() * upstream).sum().backward()
    grads = [x.grad] + [p.grad for p in attn.parameters() if p.grad is not None]
    return out.detach().float(), torch.cat([g.float().flatten() for g in grads])


def relative_error(half: Tensor, full: Tensor) -> float:
    return ((half - full).norm() / full.norm().clamp_min(1e-12)).item()


@pytest.mark.parametrize('attn_type,impl', cases())
def test_autocast_finite_and_close_to_float32(attn_type, impl):
    torch.manual_seed(0)
    options = {} if impl is None else dict(impl=impl)
    if impl == 'triton':
        options.update(TRITON_OPTIONS.get(attn_type, {}))
    attn = build_attention(dict(type=attn_type, **options), embed_dims=EMBED_DIMS,
                           num_heads=HEADS).train()
    hw_shape = TRITON_GRID if impl == 'triton' else GRID
    tokens = attn.num_extra_tokens + hw_shape[0] * hw_shape[1]
    base, upstream = torch.randn(2, tokens, EMBED_DIMS), torch.randn(2, tokens, EMBED_DIMS)
    for case, scale in SCALES.items():
        x, grad = base * scale, upstream / max(scale, 1.0)
        out32, grads32 = forward_backward(attn, x, hw_shape, grad, None)
        for dtype in BOUNDS:
            out, grads = forward_backward(attn, x, hw_shape, grad, dtype)
            where = f'{attn_type} impl={impl} {case} {dtype}'
            assert torch.isfinite(out).all(), f'{where}: non-finite output'
            assert torch.isfinite(grads).all(), f'{where}: non-finite gradient'
            if case == 'x100':
                assert relative_error(out, out32) <= X100_OUTPUT_BOUNDS[dtype], where
            else:
                out_bound, grad_bound = BOUNDS[dtype]
                if dtype == torch.bfloat16:
                    grad_bound = BFLOAT16_GRAD_BOUNDS.get(attn_type, grad_bound)
                assert relative_error(out, out32) <= out_bound, where
                assert relative_error(grads, grads32) <= grad_bound, where
