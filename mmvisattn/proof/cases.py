"""The op calls ``gpu_proof.py`` checks and times: for every op, its inputs at a test size (odd maps,
batch 2) and at the size of the layer of a shipped model, its implementations that can run on
CUDA, its float64 reference and a call of the same shape through SDPA (the baseline).

Imports torch and ``mmvisattn.ops`` alone, as the proof runs on a bare GPU machine.
"""
from typing import Callable, Dict, List, NamedTuple, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from mmvisattn.ops import linear_angular, masked_softmax, peripheral, ripple, rwgk, sliding_chunk
from mmvisattn.ops import trig_relu_features as feature_map
from mmvisattn.ops.utils.dispatch import Op
from mmvisattn.ops.linear_angular import linear_angular_attention, linear_angular_attention_reference
from mmvisattn.ops.masked_softmax import masked_softmax_attention, masked_softmax_attention_reference
from mmvisattn.ops.peripheral import peripheral_attention, peripheral_attention_reference
from mmvisattn.ops.ripple import ripple_attention, ripple_attention_reference
from mmvisattn.ops.rwgk import rwgk_attention, rwgk_attention_reference
from mmvisattn.ops.sliding_chunk import sliding_chunk_attention, sliding_chunk_attention_reference


class Size(NamedTuple):
    """An op call's size: batch, heads, head width, and the map (``hw``) or token count (``hw[0]``)."""
    batch: int
    heads: int
    dims: int
    hw: Tuple[int, int]

    @property
    def tokens(self) -> int:
        return self.hw[0] * self.hw[1]


class Case(NamedTuple):
    """An op under proof.

    ``dispatch`` is the op's :class:`~mmvisattn.ops.utils.dispatch.Op`; ``inputs(size, device, dtype,
    generator)`` makes the leaves (gradients are checked for each floating one); ``call(impl, size,
    *leaves)`` runs an implementation; ``reference(size, *leaves)`` the twin (run in float64); ``impls``
    those that run on CUDA tensors (``cpu`` is CPU-only); the ``test`` size, and the ``shipped`` ones
    the benchmarks time, each named after the layer of the model it comes from. ``activations``: whether
    the leaves are activations, which AMP hands the op in half precision, or parameters, which it keeps
    in float32 (the autocast section casts only the former). ``smoke_dims``: the head width of the CPU
    smoke run, as small as the kernels take (the position network's hidden channels: its taps are loops).
    """
    dispatch: Op
    inputs: Callable[..., List[Tensor]]
    call: Callable[..., Tensor]
    reference: Callable[..., Tensor]
    impls: Tuple[str, ...]
    test: Size
    shipped: Dict[str, Size]
    activations: bool = True
    smoke_dims: int = 16


def _random(draw: Callable, generator: torch.Generator, device, dtype, *shape,
            transform: Callable[[Tensor], Tensor] = lambda t: t) -> Tensor:
    """``transform(draw(*shape))`` drawn in float64 and cast to ``dtype`` on ``device``; on the meta device
    only the shape (the dispatch replay of the tests: nothing drawn, nothing allocated)."""
    if torch.device(device).type == 'meta':
        return torch.empty(*shape, device='meta', dtype=dtype)
    return transform(draw(*shape, generator=generator, dtype=torch.float64)).to(device, dtype)


def _randn(generator: torch.Generator, device, dtype, *shape, scale: float = 1.0) -> Tensor:
    return _random(torch.randn, generator, device, dtype, *shape, transform=lambda t: t * scale)


def _qkv(size: Size, device, dtype, generator, tokens: int) -> List[Tensor]:
    return [_randn(generator, device, dtype, size.batch, size.heads, tokens, size.dims) for _ in range(3)]


def _small(size: Size) -> bool:
    """Test maps take a smaller window and R_max than the models' (7 and 4), so borders matter."""
    return size.hw[0] < 20


# ViL: one global token, relative-position bias, window 7 (3 on test maps)
def _window(size: Size) -> int:
    return 3 if _small(size) else 7


def _vil_inputs(size: Size, device, dtype, generator) -> List[Tensor]:
    side = 4 * _window(size) - 1
    return (_qkv(size, device, dtype, generator, 1 + size.tokens)
            + [_randn(generator, device, dtype, side * side, size.heads, scale=0.1),
               _randn(generator, device, dtype, 2, size.heads, 1, scale=0.1),
               _randn(generator, device, dtype, size.heads, 1, 1, scale=0.1)])


def _vil_call(impl: str, size: Size, q, k, v, *rel_pos) -> Tensor:
    return sliding_chunk_attention(q, k, v, size.hw, _window(size), 1, 'chunk', 0, rel_pos, impl=impl)


def _vil_reference(size: Size, q, k, v, *rel_pos) -> Tensor:
    return sliding_chunk_attention_reference(q, k, v, size.hw, _window(size), 1, 'chunk', 0, rel_pos)


# SMCA-Ripple: non-negative features, R_max 4 (2 on test maps)
def _ripple_inputs(size: Size, device, dtype, generator) -> List[Tensor]:
    shape = (size.batch, size.heads, size.tokens)
    features = [_random(torch.rand, generator, device, dtype, *shape, size.dims) for _ in range(2)]
    logits = _randn(generator, device, dtype, *shape, 2 if _small(size) else 4)
    return features + [_randn(generator, device, dtype, *shape, size.dims), logits]


def _plain_inputs(size: Size, device, dtype, generator) -> List[Tensor]:
    return _qkv(size, device, dtype, generator, size.tokens)


def _peripheral_inputs(size: Size, device, dtype, generator) -> List[Tensor]:
    bias = _random(torch.randn, generator, device, dtype, size.heads, size.tokens, size.tokens,
                   transform=lambda t: F.logsigmoid(3 * t))
    return _plain_inputs(size, device, dtype, generator) + [bias]


def _position_inputs(size: Size, device, dtype, generator) -> List[Tensor]:
    """PerViT's position network, ``size.dims`` hidden channels, ``K = 3``: the parameters whose gradients
    are not cancelled by the instance norms (the biases of the distance weighting and both projections
    are constants, :func:`_position_params`)."""
    hidden, heads = size.dims, size.heads
    return [_randn(generator, device, dtype, hidden, 1), _randn(generator, device, dtype, hidden, hidden, 3, 3),
            *(_randn(generator, device, dtype, hidden) for _ in range(2)),
            _randn(generator, device, dtype, heads, hidden, 3, 3), *(_randn(generator, device, dtype, heads)
                                                                      for _ in range(2))]


def _position_params(distance_weight, conv1_weight, norm1_weight, norm1_bias, conv2_weight, norm2_weight,
                     norm2_bias) -> peripheral.PositionParams:
    """The leaves of :func:`_position_inputs` with zero biases before the norms (which cancel them)."""
    def zeros(tensor):
        return tensor.new_zeros(tensor.shape[0])
    return peripheral.PositionParams(distance_weight, zeros(distance_weight), conv1_weight, zeros(conv1_weight),
                                     norm1_weight, norm1_bias, conv2_weight, zeros(conv2_weight), norm2_weight,
                                     norm2_bias)


def _rwgk_inputs(size: Size, device, dtype, generator) -> List[Tensor]:
    anchors = 16 if _small(size) else 64
    return _plain_inputs(size, device, dtype, generator) + [
        _randn(generator, device, dtype, 1, size.heads, anchors, size.dims) for _ in range(2)]


def _feature_inputs(size: Size, device, dtype, generator) -> List[Tensor]:
    return [_randn(generator, device, dtype, size.batch, size.heads, size.tokens, size.dims),
            _randn(generator, device, dtype, size.dims, size.dims),
            _randn(generator, device, dtype, size.dims, 2 * size.dims, scale=0.2),
            _randn(generator, device, dtype, size.dims, scale=0.1)]


TEST_MAP = (7, 9)
CUDA_TRAINING_ONLY = ('flex',)  # implementations without a CPU backward
PERIPHERAL_SCALE = 0.25
FEATURE_SCALE = 0.5
# the auxiliary softmax's threshold in the proof: it drops the smallest weights of the test map, and a
# weight that half precision moves across it changes an output by less than the half bounds
AUX_THRESHOLD = 1e-3

CASES = [
    Case(sliding_chunk.OP, _vil_inputs, _vil_call, _vil_reference, ('dense', 'torch', 'triton', 'flex'),
         Size(2, 2, 16, TEST_MAP),
         {'ViL-S stage 1 at 800x1344': Size(2, 3, 32, (200, 336)), 'ViL-S stage 2': Size(2, 3, 64, (100, 168)),
          'ViL-S stage 3': Size(2, 6, 64, (50, 84))}),
    Case(ripple.OP, _ripple_inputs,
         lambda impl, size, q, k, v, logits: ripple_attention(q, k, v, logits, size.hw, impl=impl),
         lambda size, q, k, v, logits: ripple_attention_reference(q, k, v, logits, size.hw),
         ('sat', 'dense', 'torch', 'triton', 'fused'), Size(2, 2, 16, TEST_MAP),
         {'SMCA-Ripple encoder at 800x1344': Size(2, 8, 32, (25, 42))}),
    Case(linear_angular.OP, _plain_inputs,
         lambda impl, size, q, k, v: linear_angular_attention(q, k, v, impl=impl),
         lambda size, q, k, v: linear_angular_attention_reference(q, k, v), ('torch', 'triton', 'dense'),
         Size(2, 3, 16, TEST_MAP), {'Castling ViT-B at 512x512': Size(2, 12, 64, (32, 32))}),
    Case(masked_softmax.OP, _plain_inputs,
         lambda impl, size, q, k, v: masked_softmax_attention(q, k, v, AUX_THRESHOLD, impl=impl),
         lambda size, q, k, v: masked_softmax_attention_reference(q, k, v, AUX_THRESHOLD), ('torch', 'triton'),
         Size(2, 3, 16, TEST_MAP), {'Castling ViT-B auxiliary branch at 512x512': Size(2, 12, 64, (32, 32))}),
    Case(peripheral.OP, _peripheral_inputs,
         lambda impl, size, q, k, v, bias: peripheral_attention(q, k, v, bias, PERIPHERAL_SCALE, impl=impl),
         lambda size, q, k, v, bias: peripheral_attention_reference(q, k, v, bias, PERIPHERAL_SCALE),
         ('torch', 'triton'), Size(2, 2, 16, TEST_MAP), {'PerViT-T stage 3 at 800x1344': Size(2, 4, 56, (50, 84))}),
    Case(peripheral.POSITION_OP, _position_inputs,
         lambda impl, size, *leaves: peripheral.position_logits(_position_params(*leaves), size.hw, impl=impl),
         lambda size, *leaves: peripheral.position_logits_reference(_position_params(*leaves), size.hw),
         ('torch', 'triton'), Size(1, 2, 8, TEST_MAP), {'PerViT-T stage 3 at 800x1344': Size(1, 4, 16, (50, 84))},
         activations=False, smoke_dims=4),
    Case(rwgk.OP, _rwgk_inputs,
         lambda impl, size, q, k, v, aq, ak: rwgk_attention(q, k, v, aq, ak, impl=impl),
         lambda size, q, k, v, aq, ak: rwgk_attention_reference(q, k, v, aq, ak), ('torch',),
         Size(2, 2, 16, TEST_MAP), {'MiT-B0-RWGKA stage 1 at 1024x1024': Size(1, 1, 32, (256, 256))}),
    Case(feature_map.OP, _feature_inputs,
         lambda impl, size, x, w1, w2, b2: feature_map.trig_relu_features(x, w1, w2, b2, FEATURE_SCALE, impl=impl),
         lambda size, x, w1, w2, b2: feature_map.trig_relu_features_reference(x, w1, w2, b2, FEATURE_SCALE), ('torch',),
         Size(2, 2, 16, TEST_MAP), {}),  # a feature map, not an attention: no SDPA row to stand beside
]


# The op's fastest implementation at each shipped size, forward + backward in bfloat16, as the proof
# measured it (its benchmark rows' ``fastest_impl``; NVIDIA H200, 2026-11-26, before the block-sparse
# sliding-chunk kernels, the peripheral and masked-softmax flash kernels and Castling's dense kernel).
# auto's CUDA order takes it there (tests/test_tools/test_gpu_proof.py) and a test holds it to the
# newest proof record of each GPU (tests/test_tools/test_gpu_records.py); where a GPU measures another,
# both change together.
FASTEST_ON_CUDA = {
    ('sliding_chunk_attention', 'ViL-S stage 1 at 800x1344'): 'triton',
    ('sliding_chunk_attention', 'ViL-S stage 2'): 'triton',
    ('sliding_chunk_attention', 'ViL-S stage 3'): 'triton',
    ('ripple_attention', 'SMCA-Ripple encoder at 800x1344'): 'triton',
    ('linear_angular_attention', 'Castling ViT-B at 512x512'): 'triton',
    ('masked_softmax_attention', 'Castling ViT-B auxiliary branch at 512x512'): 'torch',  # the kernels: not timed yet
    ('peripheral_attention', 'PerViT-T stage 3 at 800x1344'): 'torch',
    ('position_logits', 'PerViT-T stage 3 at 800x1344'): 'triton',  # by the tiles' sweep (GPU records); its row not yet
    ('rwgk_attention', 'MiT-B0-RWGKA stage 1 at 1024x1024'): 'torch',
}


def smoke_size(size: Size, dims: int = 16) -> Size:
    """A size the CPU smoke run takes in a second under the Triton interpreter: batch 2, one head, the
    case's ``smoke_dims``, a map of a few tokens a side."""
    return Size(2, 1, dims, (3, 4) if _small(size) else (4, 5))


def baseline_inputs(size: Size, device, dtype, generator) -> List[Tensor]:
    """``q, k, v`` of SDPA over the same tokens, heads and head width (the baseline of the benchmarks)."""
    return _plain_inputs(size, device, dtype, generator)


def flash_sdpa(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """The baseline of every benchmark layer: softmax attention over the same tokens, flash backend."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)
