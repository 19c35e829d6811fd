"""A training step of every attention reads nothing back from the device.

Counted on CPU by :class:`lab.step_audit.HostReadCounter` (``item``/``int``/``bool`` of
tensors, ``nonzero``, ``unique``, ``masked_select``, linalg's error checks): after a warm-up step,
which builds the cached tables, one forward + backward in training mode at the shipped sizes must
make none, in every implementation that can run on CUDA (the torch paths at the shipped sizes, the
Triton kernels' glue on a smaller map, the kernels counted and not run). On a GPU each such read
stalls the stream, every layer, every step. Measured before the tables were cached on the device:
ViL 14 at 50x84 (the slot-table groups recomputed every call, the random-shift draw read back),
PerViT 200 (one per chunk of the position network), ripple 12 (the tile geometry rebuilt), RWGK 2
(the solve's error check).
"""
import pytest
import torch

from lab.step_audit import HostReadCounter, LaunchCounter
from mmvisattn.registry import ATTENTIONS, build_attention

# the attention of each shipped model at the size of its layers for the model's training input
SHIPPED = {
    'LongformerAttention': (dict(embed_dims=384, num_heads=6, window=7, num_extra_tokens=1, mode=1),
                            (50, 84)),  # ViL-S
    # stage 3 at 800x1344, random shifting
    # PerViT-T stage 3 at 800x1344
    'PeripheralAttention': (dict(embed_dims=224, num_heads=4), (50, 84)),
    # SMCA-Ripple encoder at 800x1344
    'RippleAttention': (dict(embed_dims=256, num_heads=8), (25, 42)),
    'RippleLinearAttention': (dict(embed_dims=256, num_heads=8), (25, 42)),  # SMCA-LA encoder
    # Castling ViT-B at 512, both branches
    'LinearAngularAttention': (dict(embed_dims=768, num_heads=12), (32, 32)),
    # MiT-B0-RWGKA stage 1 at 1024x1024
    'RWGKAttention': (dict(embed_dims=32, num_heads=1), (256, 256)),
    'SoftmaxAttention': (dict(embed_dims=256, num_heads=8), (25, 42)),  # SMCA encoder
    'LinearAttention': (dict(embed_dims=256, num_heads=8), (25, 42)),
    # MiT-B0 stage 1
    'SpatialReductionAttention': (dict(embed_dims=32, num_heads=1, sr_ratio=8), (256, 256)),
}
# the attentions whose op has Triton kernels: their glue on a small map (PerViT's position network
# at the shipped size alone costs some 20 s, whichever implementation follows it)
TRITON_SIZE = dict(embed_dims=32, num_heads=2)
TRITON_MAP = (6, 7)


def host_reads_of_a_step(cfg: dict, hw_shape, batch: int = 1) -> HostReadCounter:
    """The host reads of the second of two training steps (forward + backward) of the attention."""
    torch.manual_seed(0)
    attn = build_attention(cfg).train()
    x = torch.randn(batch, attn.num_extra_tokens + hw_shape[0] * hw_shape[1], cfg['embed_dims'],
                    requires_grad=True)
    attn(x, hw_shape).sum().backward()
    with HostReadCounter() as reads:
        attn(x, hw_shape).sum().backward()
    return reads


def test_every_registered_attention_is_audited():
    assert sorted(SHIPPED) == sorted(ATTENTIONS.module_dict)


@pytest.mark.parametrize('name', sorted(SHIPPED))
def test_training_step_at_the_shipped_size_reads_nothing_back(name):
    cfg, hw_shape = SHIPPED[name]
    cfg = dict(cfg, type=name)
    if 'torch' in getattr(ATTENTIONS.get(name), 'impls', ()):
        # the path CUDA runs where the kernels refuse (auto would take C++ here)
        cfg['impl'] = 'torch'
    reads = host_reads_of_a_step(cfg, hw_shape)
    assert reads.total == 0, f'{name}: {reads.summary()}'


@pytest.mark.parametrize('name', sorted(name for name in SHIPPED
                                        if 'triton' in getattr(ATTENTIONS.get(name), 'impls', ())))
def test_triton_training_step_reads_nothing_back(name):
    """The kernels counted, not run (``dry_kernels``): a kernel runs outside the dispatch modes, so
    what the counter audits is the glue around it, whatever the kernel computes."""
    cfg = dict(SHIPPED[name][0], **TRITON_SIZE, type=name, impl='triton')
    with LaunchCounter(dry_kernels=True) as launches:
        reads = host_reads_of_a_step(cfg, TRITON_MAP, batch=2)
    assert reads.total == 0, f'{name}: {reads.summary()}'
    assert sum(launches.triton.values()) > 0, f'{name}: no Triton kernel launched'


def test_the_counter_sees_what_a_gpu_would_wait_for():
    """What each kind of read looks like to the counter (the failures it exists to catch)."""
    x = torch.arange(6.0)
    with HostReadCounter() as reads:
        int(x[0])
        bool(x.any())
        x.nonzero()
        torch.unique(x)
        x.masked_select(x > 2)
        torch.linalg.solve(torch.eye(2), torch.ones(2, 1))
        x.tolist()  # on CPU not an operator: the GPU proof's sync audit covers such reads
    assert reads.total == 6, reads.summary()
    assert 'test_host_reads.py' in reads.summary()
