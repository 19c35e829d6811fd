"""Parameter and FLOP counting that sees attention: torch's ``FlopCounterMode`` plus the CPU SDPA
kernel, RWGK's ``M x M`` solve and mmengine's conventions for norms, upsampling and pooling, so the
figures equal ``get_model_complexity_info``'s once :data:`MMENGINE_FLOP_HANDLES` are registered
(``import mmvisattn`` does). Multiply-accumulates; element-wise work not counted."""
import math
from typing import Callable, Dict

import torch
import torch.nn as nn
from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count

aten = torch.ops.aten


def solve_flop(a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
    """LU factorisation (2/3 M^3) plus forward and back substitution (2 M^2 per right-hand side),
    in floating-point operations, for every matrix of the batch."""
    size = a_shape[-1]
    batch = math.prod(a_shape[:-2])
    rhs = b_shape[-1] if len(b_shape) == len(a_shape) else 1
    return batch * (2 * size ** 3 // 3 + 2 * size * size * rhs)


def cpu_sdpa_flop(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop_count(query_shape, key_shape, value_shape)


def norm_flop(affine_index: int, per_element: int, affine_per_element: int) -> Callable:
    """A norm as mmengine counts it (``per_element``, or ``affine_per_element`` with an affine
    weight), in flops, twice mmengine's units."""
    def formula(*args, out_shape=None, **kwargs) -> int:
        return 2 * math.prod(args[0]) * (affine_per_element if args[affine_index] is not None
                                         else per_element)
    return formula


def batch_norm_flop(*args, out_shape=None, **kwargs) -> int:
    """Batch norm as mmengine counts it: 1 or 2 per element with running statistics, a norm's 4 or 5
    with batch statistics; ``training`` is argument 5 (3 without running statistics)."""
    training = args[5] if len(args) > 6 else args[3]
    return norm_flop(1, 4, 5)(*args) if training else norm_flop(1, 1, 2)(*args)


def elementwise_flop(input_scale: int, output_scale: int) -> Callable:
    """``input_scale`` per input element plus ``output_scale`` per output element, as mmengine."""
    def formula(*args, out_shape=None, **kwargs) -> int:
        return 2 * (input_scale * math.prod(args[0]) + output_scale * math.prod(out_shape))
    return formula


FORMULAS: Dict[Callable, Callable] = {
    aten._scaled_dot_product_flash_attention_for_cpu: cpu_sdpa_flop,
    aten._linalg_solve_ex: solve_flop,
    # mmengine's conventions for what is no product (its FlopAnalyzer's): norms, resampling
    aten.native_layer_norm: norm_flop(2, 4, 5),
    aten.native_group_norm: norm_flop(1, 4, 5),
    aten._native_batch_norm_legit_no_training: norm_flop(1, 1, 2),
    aten._native_batch_norm_legit: batch_norm_flop,
    aten.native_batch_norm: batch_norm_flop,
    aten.upsample_nearest2d: elementwise_flop(0, 1),
    aten.upsample_bilinear2d: elementwise_flop(0, 4),
    aten._adaptive_avg_pool2d: elementwise_flop(1, 0),  # a 1 x 1 output runs as a mean: not seen
    aten.grid_sampler_2d: elementwise_flop(0, 4),
}
# FlopCounterMode decomposes an overload it does not find (upsampling into index ops, which count
# nothing), so every overload is registered beside its packet
EXTRA_FORMULAS: Dict[Callable, Callable] = {
    **FORMULAS,
    **{
        getattr(packet, name): formula
        for packet, formula in FORMULAS.items()
        for name in packet.overloads()
    },
}


def _jit_shape(value) -> list:
    return value.type().sizes()


def sdpa_macs_jit(inputs, outputs) -> int:
    """mmengine jit handle of ``aten::scaled_dot_product_attention``: ``q k^T`` and the weighted
    sum of the values, in MACs (mmengine's unit), as :func:`cpu_sdpa_flop` counts them."""
    query, key, value = (_jit_shape(x) for x in inputs[:3])
    return sdpa_flop_count(query, key, value) // 2


def solve_macs_jit(inputs, outputs) -> int:
    """mmengine jit handle of ``aten::linalg_solve``, :func:`solve_flop` in MACs."""
    return solve_flop(_jit_shape(inputs[0]), _jit_shape(inputs[1])) // 2


def baddbmm_macs_jit(inputs, outputs) -> int:
    """mmengine jit handle of ``aten::baddbmm`` (``bias + a @ b``, which ``nn.MultiheadAttention``
    uses): the batched product, in MACs."""
    batch, rows, inner = _jit_shape(inputs[1])
    return batch * rows * inner * _jit_shape(inputs[2])[-1]


# handles for mmengine's jit FLOP counter (get_model_complexity_info), for ops it lacks
MMENGINE_FLOP_HANDLES = {'aten::scaled_dot_product_attention': sdpa_macs_jit,
                         'aten::linalg_solve': solve_macs_jit, 'aten::baddbmm': baddbmm_macs_jit,}


@torch.no_grad()
def count_flops(forward: Callable[[], object]) -> Dict[str, int]:
    """MACs of one call of ``forward``: ``{'total': n, <operator name>: n, ...}``."""
    with FlopCounterMode(display=False, custom_mapping=EXTRA_FORMULAS) as counter:
        forward()
    per_op = {
        str(op).split('.')[-1]: flops // 2
        for op, flops in counter.get_flop_counts()['Global'].items()
    }
    return {'total': counter.get_total_flops() // 2, **per_op}


def count_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())
