"""Launches per training step of one layer on the path ``auto`` takes on CUDA, at the shipped sizes.

On a GPU each aten call is at least one kernel launch (5-10 us of host time), so a layer that issues
thousands is launch-bound before it is compute-bound. Counted on CPU by
:class:`lab.step_audit.LaunchCounter`: the aten calls of the second of two training steps (forward +
backward of two images under bfloat16 autocast; the first builds the cached tables) plus the Triton
launches the ops make, the kernels themselves skipped (``dry_kernels``: the glue around them decides
the count, and reads nothing back, so it is the count of a CUDA step). The backends are those
``auto`` picks for a CUDA request of the layer (replayed as ``print_dispatch.py`` replays a
config's), and the ops' step budgets are those of a GPU
(:func:`mmvisattn.ops.utils.recompute.step_budget`). Budget: 300 a layer.
"""
import pytest
import torch

from lab.proof.compile_kernels import OP_ARGUMENTS
from lab.step_audit import LaunchCounter
from mmvisattn.analysis.print_dispatch import recording, replayed
from mmvisattn.ops.utils import recompute
from mmvisattn.registry import build_attention

LAUNCH_BUDGET = 300

# the layer of each shipped model at the size of its training input (800x1344, 512x512, 1024x1024)
SHIPPED = {
    'ViL-S stage 1': (dict(type='LongformerAttention', embed_dims=96, num_heads=3,
                           num_extra_tokens=1), (200, 336)),
    'ViL-S stage 2': (dict(type='LongformerAttention', embed_dims=192, num_heads=3,
                           num_extra_tokens=1), (100, 168)),
    'ViL-S stage 3': (dict(type='LongformerAttention', embed_dims=384, num_heads=6,
                           num_extra_tokens=1), (50, 84)),
    'ViL-S stage 3, random shifting': (dict(type='LongformerAttention', embed_dims=384, num_heads=6,
                                            num_extra_tokens=1, mode=1), (50, 84)),
    'SMCA-Ripple encoder': (dict(type='RippleAttention', embed_dims=256, num_heads=8), (25, 42)),
    'Castling ViT-B, both branches': (dict(type='LinearAngularAttention', embed_dims=768,
                                           num_heads=12), (32, 32)),
    'PerViT-T stage 3': (dict(type='PeripheralAttention', embed_dims=224, num_heads=4), (50, 84)),
    'MiT-B0-RWGKA stage 1': (dict(type='RWGKAttention', embed_dims=32, num_heads=1, num_anchors=64,
                                  lam=0.5),
                             (256, 256)),
}


def cuda_choices(cfg: dict, hw_shape) -> dict:
    """The backends ``auto`` picks on a CUDA request in bfloat16: ``impl`` for the layer's own op (a
    feature map's op, or Castling's auxiliary softmax, are others) and each further op's attribute
    (:data:`lab.proof.compile_kernels.OP_ARGUMENTS`)."""
    attn = build_attention(dict(cfg)).to('meta').train()
    x = torch.zeros(1, attn.num_extra_tokens + hw_shape[0] * hw_shape[1], cfg['embed_dims'],
                    device='meta')
    with recording(['']) as records:
        attn(x, hw_shape)
    arguments = {
        op().name: argument for argument, op in OP_ARGUMENTS.items() if hasattr(attn, argument)
    }
    choices = {}
    for record in records:
        argument = arguments.get(record.op.name, 'impl' if record.op.impls == attn.impls else None)
        if argument is not None:
            choices[argument] = record.op.choose(
                'auto', replayed(record.request, 'cuda', torch.bfloat16, 'eager')
            )
    return choices


def launches_of_a_step(cfg: dict, hw_shape) -> LaunchCounter:
    torch.manual_seed(0)
    attn = build_attention(dict(cfg, **cuda_choices(cfg, hw_shape))).train()
    x = torch.randn(2, attn.num_extra_tokens + hw_shape[0] * hw_shape[1], cfg['embed_dims'],
                    requires_grad=True)
    counts = []
    for _ in range(2):
        with torch.autocast('cpu',
                            dtype=torch.bfloat16), LaunchCounter(dry_kernels=True) as launches:
            attn(x, hw_shape).float().sum().backward()
        counts.append(launches)
    return counts[-1]


# PerViT's step at 50x84 costs some 12 s on two cores (SDPA's math form with a bias): `make
# test-slow`
LAYERS = [pytest.param(layer, marks=pytest.mark.slow) if layer.startswith('PerViT')
          else layer for layer in SHIPPED]


@pytest.mark.parametrize('layer', LAYERS)
def test_cuda_path_launches_at_most_300_a_step(monkeypatch, layer):
    monkeypatch.setattr(recompute, 'CACHE_BUDGETED', ())  # the GPU's step budgets
    cfg, hw_shape = SHIPPED[layer]
    launches = launches_of_a_step(cfg, hw_shape)
    assert launches.total <= LAUNCH_BUDGET, f'{layer}: {launches.summary()}'


def test_the_counter_sees_aten_calls_and_triton_launches():
    """A dry count records the Triton kernels by name without running them, and the glue's aten
    calls."""
    from mmvisattn.ops.linear_angular import linear_angular_attention
    q = torch.randn(1, 2, 16, 16)
    with LaunchCounter(dry_kernels=True) as launches:
        linear_angular_attention(q, q, q, impl='triton')
    assert dict(launches.triton) == {'_summarise': 1, '_mix': 1} and sum(launches.aten.values()) > 0
    assert launches.total == sum(launches.aten.values()) + 2
