"""The op calls ``gpu_proof.py`` checks and times: the package's cases (:mod:`mmvisattn.ops.check`)
at the shipped models' layer sizes, the :mod:`lab.experimental` kernels beside the backends, and the
SDPA baseline. Imports torch, Triton and :mod:`mmvisattn.ops` alone.
"""
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

import torch
from torch import Tensor

from mmvisattn.ops import check
from mmvisattn.ops.check import AUX_THRESHOLD, PERIPHERAL_SCALE, Case, Size, window
from mmvisattn.ops.utils.dispatch import Op


def _flex(size: Size, q, k, v, *rel_pos) -> Tensor:
    from lab.experimental.sliding_chunk_flex import sliding_chunk_attention_flex
    return sliding_chunk_attention_flex(q, k, v, size.hw, window(size), 1, 'chunk', 0, rel_pos,
                                        q.shape[-1] ** -0.5)


def _ripple(name: str) -> Callable[..., Tensor]:
    def call(size: Size, q, k, v, logits) -> Tensor:
        from lab.experimental import ripple_fused, ripple_sat
        module = dict(sat=ripple_sat, fused=ripple_fused)[name]
        return getattr(module, f'ripple_attention_{name}')(q, k, v, logits, size.hw, 1e-3, 1e-6)
    return call


def _angular_dense(size: Size, q, k, v) -> Tensor:
    from lab.experimental.linear_angular_dense import linear_angular_attention_dense
    return linear_angular_attention_dense(q, k, v)


def _masked_triton(size: Size, q, k, v) -> Tensor:
    from lab.experimental.masked_softmax_triton import masked_softmax_attention_triton
    return masked_softmax_attention_triton(q, k, v, AUX_THRESHOLD)


def _peripheral_triton(size: Size, q, k, v, bias) -> Tensor:
    from lab.experimental.peripheral_triton import peripheral_attention_triton
    return peripheral_attention_triton(q, k, v, bias, PERIPHERAL_SCALE)


class ProofCase(NamedTuple):
    """An op under proof: its package case, the ``shipped`` sizes (named after their layers), the
    ``experimental`` kernels (``name -> call(size, *leaves)``), the ``dense`` one the crossover
    sweep times against ``auto``, the CPU smoke run's head width and whether the leaves are
    activations (half under autocast) or parameters (float32)."""
    check: Case
    shipped: Dict[str, Size]
    experimental: Dict[str, Callable[..., Tensor]]
    dense: Optional[str] = None
    smoke_dims: int = 16
    activations: bool = True

    @property
    def op(self) -> Op:
        return self.check.op

    @property
    def impls(self) -> Tuple[str, ...]:
        return (*self.op.backends, *self.experimental)

    def call(self, impl: str, size: Size, *leaves: Tensor) -> Tensor:
        if impl in self.experimental:
            return self.experimental[impl](size, *leaves)
        return self.check.call(impl, size, *leaves)


CUDA_TRAINING_ONLY = ('flex',)  # experimental kernels without a CPU backward
_CASES = {case.op.name: case for case in check.CASES}
CASES = [
    ProofCase(_CASES['sliding_chunk_attention'],
              {'ViL-S stage 1 at 800x1344': Size(2, 3, 32, (200, 336)),
               'ViL-S stage 2': Size(2, 3, 64, (100, 168)),
               'ViL-S stage 3': Size(2, 6, 64, (50, 84))}, dict(flex=_flex)),
    ProofCase(_CASES['ripple_attention'],
              {'SMCA-Ripple encoder at 800x1344': Size(2, 8, 32, (25, 42))},
              dict(sat=_ripple('sat'), fused=_ripple('fused')), dense='fused'),
    ProofCase(_CASES['linear_angular_attention'],
              {'Castling ViT-B at 512x512': Size(2, 12, 64, (32, 32))},
              dict(dense=_angular_dense), dense='dense'),
    ProofCase(_CASES['masked_softmax_attention'],
              {'Castling ViT-B auxiliary branch at 512x512': Size(2, 12, 64, (32, 32))},
              dict(triton=_masked_triton)),
    ProofCase(_CASES['peripheral_attention'],
              {'PerViT-T stage 3 at 800x1344': Size(2, 4, 56, (50, 84))},
              dict(triton=_peripheral_triton)),
    ProofCase(_CASES['position_logits'], {'PerViT-T stage 3 at 800x1344': Size(1, 4, 16, (50, 84))},
              {}, smoke_dims=4, activations=False),
    ProofCase(_CASES['rwgk_attention'],
              {'MiT-B0-RWGKA stage 1 at 1024x1024': Size(1, 1, 32, (256, 256))}, {}),
    # a feature map, not an attention: no SDPA row to stand beside
    ProofCase(_CASES['trig_relu_features'], {}, {}),
]


def smoke_size(size: Size, dims: int = 16) -> Size:
    """A size the CPU smoke run takes in a second under the Triton interpreter: batch 2, one head,
    the case's ``smoke_dims``, a map of a few tokens a side."""
    return Size(2, 1, dims, (3, 4) if check.small(size) else (4, 5))


def baseline_inputs(size: Size, device, dtype, generator) -> List[Tensor]:
    """``q, k, v`` of SDPA over the same tokens, heads and head width (the baseline)."""
    return check.qkv(size, device, dtype, generator)


def flash_sdpa(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Every benchmark layer's baseline: softmax over the same tokens, flash backend."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)
