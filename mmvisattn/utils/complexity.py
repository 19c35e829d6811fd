"""Parameter and FLOP counting that sees attention: torch's dispatch-level ``FlopCounterMode``
counts every matmul (so ``q @ k^T`` and ``attn @ v``, which mmengine's module-hook counter
misses), convolutions and SDPA kernels; this module adds the two it lacks here: the CPU SDPA
kernel and the ``M x M`` linear solve of random-walk attention.

Counts are multiply-accumulates (MACs), the unit OpenMMLab's ``get_flops`` and most vision papers
report as "FLOPs"; one MAC is two floating-point operations. Element-wise work (softmax, norms,
activations) is not counted, as in those tools.
"""
from typing import Callable, Dict

import torch
import torch.nn as nn
from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count

aten = torch.ops.aten


def solve_flop(a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
    """LU factorisation (2/3 M^3) plus forward and back substitution (2 M^2 per right-hand side),
    in floating-point operations, for every matrix of the batch."""
    size = a_shape[-1]
    batch = 1
    for dim in a_shape[:-2]:
        batch *= dim
    rhs = b_shape[-1] if len(b_shape) == len(a_shape) else 1
    return batch * (2 * size ** 3 // 3 + 2 * size * size * rhs)


def cpu_sdpa_flop(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop_count(query_shape, key_shape, value_shape)


EXTRA_FORMULAS: Dict[Callable, Callable] = {
    aten._scaled_dot_product_flash_attention_for_cpu: cpu_sdpa_flop,
    aten._linalg_solve_ex: solve_flop,
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


# handles for mmengine's jit FLOP counter (``get_model_complexity_info``), for the ops it has none for
MMENGINE_FLOP_HANDLES = {
    'aten::scaled_dot_product_attention': sdpa_macs_jit,
    'aten::linalg_solve': solve_macs_jit,
}


@torch.no_grad()
def count_flops(forward: Callable[[], object]) -> Dict[str, int]:
    """MACs of one call of ``forward``: ``{'total': n, <operator name>: n, ...}``."""
    with FlopCounterMode(display=False, custom_mapping=EXTRA_FORMULAS) as counter:
        forward()
    per_op = {str(op).split('.')[-1]: flops // 2 for op, flops in counter.get_flop_counts()['Global'].items()}
    return {'total': counter.get_total_flops() // 2, **per_op}


def count_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())
