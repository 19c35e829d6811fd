"""The Triton paths refuse, before any launch and in one line naming the value, what their kernels
do not take: float64, heads wider than the op supports, a sliding-chunk window over 8."""
import pytest
import torch

from mmvisattn.ops.linear_angular import linear_angular_attention
from mmvisattn.ops.peripheral import peripheral_attention
from mmvisattn.ops.ripple import ripple_attention
from mmvisattn.ops.sliding_chunk import sliding_chunk_attention
from mmvisattn.ops.utils.triton_launch import UnsupportedInput, head_block, num_warps


def qkv(width, tokens=16, dtype=torch.float32):
    return [torch.rand(1, 2, tokens, width, dtype=dtype) for _ in range(3)]


CALLS = {
    'linear_angular_attention': lambda q, k, v: linear_angular_attention(q, k, v, impl='triton'),
    'peripheral_attention': lambda q, k, v: peripheral_attention(q, k, v, torch.zeros(2, 16, 16), 0.5, impl='triton'),
    'ripple_attention': lambda q, k, v: ripple_attention(q, k, v, torch.zeros(1, 2, 16, 2), (4, 4), impl='triton'),
    'sliding_chunk_attention': lambda q, k, v: sliding_chunk_attention(q, k, v, (4, 4), 2, impl='triton'),
}
MAX_WIDTHS = {'linear_angular_attention': 128, 'peripheral_attention': 128, 'ripple_attention': 128,
              'sliding_chunk_attention': 64}


@pytest.mark.parametrize('op', sorted(CALLS))
def test_float64_is_refused_in_one_line(op):
    with pytest.raises(UnsupportedInput, match=rf"^{op}\(impl='triton'\): dtype float64 is not supported; expected "
                                               r"one of float32, float16, bfloat16 \(impl='torch' takes any"):
        CALLS[op](*qkv(16, dtype=torch.float64))


@pytest.mark.parametrize('op', sorted(CALLS))
def test_too_wide_heads_are_refused_in_one_line(op):
    width = MAX_WIDTHS[op] + 1
    with pytest.raises(UnsupportedInput, match=rf"^{op}\(impl='triton'\): head width {width} is outside the "
                                               rf"supported range 1..{MAX_WIDTHS[op]}"):
        CALLS[op](*qkv(width))


def test_sliding_chunk_window_over_eight_is_refused():
    q, k, v = qkv(16, tokens=100)
    with pytest.raises(UnsupportedInput, match=r"window=9 is outside the supported range 1..8"):
        sliding_chunk_attention(q, k, v, (10, 10), 9, impl='triton')
    assert sliding_chunk_attention(q, k, v, (10, 10), 9, impl='torch').shape == q.shape  # legal in torch


def test_launch_sizes():
    assert [head_block(w) for w in (1, 16, 17, 64, 70, 128)] == [16, 16, 32, 64, 128, 128]
    assert [num_warps(b) for b in (16, 64, 128)] == [4, 4, 8]
