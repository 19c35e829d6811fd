"""Every backend of every op against its reference, on this machine's device.

    python -m mmvisattn.ops.check [--device cuda|cpu] [--dtypes float32 float16 bfloat16] [--ops
    NAME ...]

Each backend that runs on ``--device`` is compared, output and every gradient at an odd map with
batch 2, with the float64 reference of the same inputs, within the dtype's bound (:data:`BOUNDS`);
one that cannot run is listed with the reason. Needs torch (and Triton) only; exits 1 where a
backend fails.
"""
import argparse
import sys
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from . import linear_angular, masked_softmax, peripheral, ripple, rwgk, sliding_chunk
from . import trig_relu_features as feature_map
from .utils.dispatch import Op, UnsupportedInput

# largest error over largest reference value, by the inputs' dtype: TF32 products (10-bit
# mantissa) for float32 kernels, 11 and 8 bits for float16 and bfloat16 inputs
BOUNDS = dict(float32=5e-3, float16=1e-2, bfloat16=5e-2)


class Size(NamedTuple):
    """An op call's size: batch, heads, head width, and the map (``hw``)."""
    batch: int
    heads: int
    dims: int
    hw: Tuple[int, int]

    @property
    def tokens(self) -> int:
        return self.hw[0] * self.hw[1]


class Case(NamedTuple):
    """An op under check: ``inputs(size, device, dtype, generator)`` makes the leaves (every
    floating one gets a gradient), ``call(impl, size, *leaves)`` runs a backend and
    ``reference(size, *leaves)`` the reference."""
    op: Op
    inputs: Callable[..., List[Tensor]]
    call: Callable[..., Tensor]
    reference: Callable[..., Tensor]
    test: Size


def random(draw: Callable, generator: torch.Generator, device, dtype, *shape,
           transform: Callable[[Tensor], Tensor] = lambda t: t) -> Tensor:
    """``transform(draw(*shape))`` drawn in float64 on CPU, cast to ``dtype`` on ``device``."""
    return transform(draw(*shape, generator=generator, dtype=torch.float64)).to(device, dtype)


def randn(generator: torch.Generator, device, dtype, *shape, scale: float = 1.0) -> Tensor:
    return random(torch.randn, generator, device, dtype, *shape, transform=lambda t: t * scale)


def qkv(size: Size, device, dtype, generator, tokens: Optional[int] = None) -> List[Tensor]:
    return [randn(generator, device, dtype, size.batch, size.heads, tokens or size.tokens,
                  size.dims)
            for _ in range(3)]


def small(size: Size) -> bool:
    """Test maps take a smaller window and R_max than the models' (7 and 4), so borders matter."""
    return size.hw[0] < 20


# ViL: one global token, relative-position bias, window 7 (3 on test maps)
def window(size: Size) -> int:
    return 3 if small(size) else 7


def vil_inputs(size: Size, device, dtype, generator) -> List[Tensor]:
    side = 4 * window(size) - 1
    return (qkv(size, device, dtype, generator, 1 + size.tokens)
            + [randn(generator, device, dtype, side * side, size.heads, scale=0.1),
               randn(generator, device, dtype, 2, size.heads, 1, scale=0.1),
               randn(generator, device, dtype, size.heads, 1, 1, scale=0.1)])


# SMCA-Ripple: non-negative features, R_max 4 (2 on test maps)
def ripple_inputs(size: Size, device, dtype, generator) -> List[Tensor]:
    shape = (size.batch, size.heads, size.tokens)
    features = [random(torch.rand, generator, device, dtype, *shape, size.dims) for _ in range(2)]
    logits = randn(generator, device, dtype, *shape, 2 if small(size) else 4)
    return features + [randn(generator, device, dtype, *shape, size.dims), logits]


def peripheral_inputs(size: Size, device, dtype, generator) -> List[Tensor]:
    bias = random(torch.randn, generator, device, dtype, size.heads, size.tokens, size.tokens,
                  transform=lambda t: F.logsigmoid(3 * t))
    return qkv(size, device, dtype, generator) + [bias]


def position_inputs(size: Size, device, dtype, generator) -> List[Tensor]:
    """PerViT's position network, ``size.dims`` hidden channels, ``K = 3``, with zero biases before
    the norms (:func:`position_params`)."""
    hidden, heads = size.dims, size.heads
    return [randn(generator, device, dtype, hidden, 1),
            randn(generator, device, dtype, hidden, hidden, 3, 3),
            *(randn(generator, device, dtype, hidden) for _ in range(2)),
            randn(generator, device, dtype, heads, hidden, 3, 3),
            *(randn(generator, device, dtype, heads) for _ in range(2))]


def position_params(distance_weight, conv1_weight, norm1_weight, norm1_bias, conv2_weight,
                    norm2_weight, norm2_bias) -> peripheral.PositionParams:
    def zeros(tensor):
        return tensor.new_zeros(tensor.shape[0])
    return peripheral.PositionParams(distance_weight, zeros(distance_weight), conv1_weight,
                                     zeros(conv1_weight), norm1_weight, norm1_bias, conv2_weight,
                                     zeros(conv2_weight), norm2_weight, norm2_bias)


def rwgk_inputs(size: Size, device, dtype, generator) -> List[Tensor]:
    anchors = 16 if small(size) else 64
    return qkv(size, device, dtype, generator) + [
        randn(generator, device, dtype, 1, size.heads, anchors, size.dims) for _ in range(2)]


def feature_inputs(size: Size, device, dtype, generator) -> List[Tensor]:
    return [randn(generator, device, dtype, size.batch, size.heads, size.tokens, size.dims),
            randn(generator, device, dtype, size.dims, size.dims),
            randn(generator, device, dtype, size.dims, 2 * size.dims, scale=0.2),
            randn(generator, device, dtype, size.dims, scale=0.1)]


TEST_MAP = (7, 9)
PERIPHERAL_SCALE = 0.25
FEATURE_SCALE = 0.5
# the auxiliary softmax's threshold here: it drops the smallest weights of the test map, and a
# weight that half precision moves across it changes an output by less than the half bounds
AUX_THRESHOLD = 1e-3

CASES = [
    Case(sliding_chunk.OP, vil_inputs,
         lambda impl, size, q, k, v, *rel_pos: sliding_chunk.sliding_chunk_attention(
             q, k, v, size.hw, window(size), 1, 'chunk', 0, rel_pos, impl=impl),
         lambda size, q, k, v, *rel_pos: sliding_chunk.sliding_chunk_attention_reference(
             q, k, v, size.hw, window(size), 1, 'chunk', 0, rel_pos),
         Size(2, 2, 16, TEST_MAP)),
    Case(ripple.OP, ripple_inputs, lambda impl, size, q, k, v,
         logits: ripple.ripple_attention(q, k, v, logits, size.hw, impl=impl),
         lambda size, q, k, v, logits: ripple.ripple_attention_reference(q, k, v, logits, size.hw),
         Size(2, 2, 16, TEST_MAP)),
    Case(linear_angular.OP, qkv,
         lambda impl, size, q, k, v: linear_angular.linear_angular_attention(q, k, v, impl=impl),
         lambda size, q, k, v: linear_angular.linear_angular_attention_reference(q, k, v),
         Size(2, 3, 16, TEST_MAP)),
    Case(masked_softmax.OP, qkv, lambda impl, size, q, k,
         v: masked_softmax.masked_softmax_attention(q, k, v, AUX_THRESHOLD, impl=impl),
         lambda size, q, k,
         v: masked_softmax.masked_softmax_attention_reference(q, k, v, AUX_THRESHOLD),
         Size(2, 3, 16, TEST_MAP)),
    Case(peripheral.OP, peripheral_inputs, lambda impl, size, q, k, v,
         bias: peripheral.peripheral_attention(q, k, v, bias, PERIPHERAL_SCALE,
                                                                           impl=impl),
         lambda size, q, k, v,
         bias: peripheral.peripheral_attention_reference(q, k, v, bias, PERIPHERAL_SCALE),
         Size(2, 2, 16, TEST_MAP)),
    Case(peripheral.POSITION_OP, position_inputs, lambda impl, size,
         *leaves: peripheral.position_logits(position_params(*leaves), size.hw, impl=impl),
         lambda size,
         *leaves: peripheral.position_logits_reference(position_params(*leaves), size.hw),
         Size(1, 2, 8, TEST_MAP)),
    Case(rwgk.OP, rwgk_inputs,
         lambda impl, size, q, k, v, aq, ak: rwgk.rwgk_attention(q, k, v, aq, ak, impl=impl),
         lambda size, q, k, v, aq, ak: rwgk.rwgk_attention_reference(q, k, v, aq, ak),
         Size(2, 2, 16, TEST_MAP)),
    Case(feature_map.OP, feature_inputs, lambda impl, size, x, w1, w2,
         b2: feature_map.trig_relu_features(x, w1, w2, b2, FEATURE_SCALE, impl=impl),
         lambda size, x, w1, w2,
         b2: feature_map.trig_relu_features_reference(x, w1, w2, b2, FEATURE_SCALE),
         Size(2, 2, 16, TEST_MAP)),
]


def leaves(case: Case, size: Size, device, dtype: torch.dtype, seed: int = 0) -> List[Tensor]:
    """The case's inputs on ``device`` in ``dtype``, floating ones as gradient-requiring leaves."""
    tensors = case.inputs(size, device, dtype, torch.Generator().manual_seed(seed))
    return [t.requires_grad_() if t.is_floating_point() else t for t in tensors]


def upstream_like(out: Tensor, seed: int = 1) -> Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(out.shape, generator=generator,
                       dtype=torch.float64).to(out.device, out.dtype)


def gradients(forward: Callable[[], Tensor], inputs: List[Tensor],
              upstream: Optional[Tensor] = None):
    """``forward()`` and its inputs' gradients for ``upstream`` (:func:`upstream_like`)."""
    out = forward()
    upstream = upstream_like(out) if upstream is None else upstream
    return out, torch.autograd.grad(out, [t for t in inputs if t.requires_grad], upstream)


def relative_error(got: Tensor, want: Tensor) -> float:
    """Largest error over the largest reference value, in float64 on the CPU."""
    got, want = got.detach().double().cpu(), want.detach().double().cpu()
    return ((got - want).abs().max() / want.abs().max().clamp_min(1e-30)).item()


def compare(case: Case, size: Size, inputs: List[Tensor], results: List[Tensor],
            dtype: str) -> Dict:
    """The ``results`` (output, then gradients) of a call on ``inputs`` against the reference: the
    largest relative error, and whether it is within :data:`BOUNDS`."""
    exact = [t.detach().double().requires_grad_(t.requires_grad) for t in inputs]
    reference, exact_grads = gradients(lambda: case.reference(size, *exact), exact,
                                       upstream_like(results[0]).double())
    errors = [relative_error(got, want) for got, want in zip(results, [reference, *exact_grads])]
    worst = ['output', *(f'grad {i}' for i in range(len(results) - 1))][errors.index(max(errors))]
    return dict(error=max(errors), worst=worst, bound=BOUNDS[dtype],
                ok=max(errors) <= BOUNDS[dtype])


def run(case: Case, impl: str, device, dtype: str) -> Tuple[List[Tensor], List[Tensor]]:
    """One call of backend ``impl`` at the test size: its leaves, output and gradients."""
    inputs = leaves(case, case.test, device, getattr(torch, dtype))
    out, grads = gradients(lambda: case.call(impl, case.test, *inputs), inputs)
    return inputs, [out.detach(), *grads]


def check(case: Case, impl: str, device, dtype: str) -> Dict:
    """One row: backend ``impl`` of ``case`` in ``dtype`` on ``device``, or why it cannot run."""
    row = dict(op=case.op.name, impl=impl, dtype=dtype)
    try:
        inputs, results = run(case, impl, device, dtype)
    except UnsupportedInput as error:
        return dict(row, skipped=str(error))
    return dict(row, **compare(case, case.test, inputs, results, dtype))


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    parser.add_argument('--dtypes', nargs='+', default=list(BOUNDS), choices=list(BOUNDS))
    parser.add_argument('--ops', nargs='+', choices=[case.op.name for case in CASES],
                        help='the ops to check (default: all)')
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    rows = [check(case, impl, args.device, dtype) for case in CASES if not args.ops
            or case.op.name in args.ops
            for impl in case.op.backends for dtype in args.dtypes]
    for row in rows:
        where = f'{row["op"]} {row["impl"]} {row["dtype"]}'
        if 'skipped' in row:
            print(f'{where}: not run ({row["skipped"]})')
        else:
            print(f'{where}: {"ok" if row["ok"] else "FAILED"}, error {row["error"]:.1e} '
                  f'({row["worst"]}) against {row["bound"]:.0e}')
    failed = [row for row in rows if not row.get('ok', True)]
    print(f'{len(rows) - len(failed)} of {len(rows)} ok or not run on {args.device}; {len(failed)} '
          'failed')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
