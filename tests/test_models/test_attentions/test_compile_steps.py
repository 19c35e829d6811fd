"""``torch.compile`` of a training step (forward + backward) of the attentions of ViL (random
shifting off, its border chunks' live slots grouped on the host, and on), SMCA-Ripple,
SegFormer-RWGKA and Castling (both branches): one graph, no graph break and no recompilation over 10
steps at a fixed size, counted with Dynamo's own counters. ``aot_eager`` traces the same graphs and
autograd as inductor without generating code (the inductor run of every attention is
``tools/analysis_tools/compile_attention.py``). Random shifting draws its neighbour on the device,
so the nine draws share one graph (a Python int drawn per step was a graph break and a
specialisation per neighbour, past Dynamo's limit of eight)."""
import pytest
import torch
from torch._dynamo.utils import counters

from mmvisattn.registry import build_attention

# the models' settings (dims, heads, window) on small maps
STEPS = {
    'ViL': (dict(type='LongformerAttention', embed_dims=96, num_heads=3, window=7,
                 num_extra_tokens=1), (21, 28)),
    'ViL (random shifting)': (dict(type='LongformerAttention', embed_dims=96, num_heads=3, window=7,
                                   num_extra_tokens=1, mode=1), (14, 21)),
    'SMCA-Ripple': (dict(type='RippleAttention', embed_dims=256, num_heads=8), (10, 13)),
    'SegFormer-RWGKA': (dict(type='RWGKAttention', embed_dims=32, num_heads=1, num_anchors=64),
                        (32, 32)),
    'Castling': (dict(type='LinearAngularAttention', embed_dims=96, num_heads=3), (8, 8)),
}


@pytest.mark.parametrize('name', sorted(STEPS))
def test_training_step_compiles_once_without_graph_breaks(name):
    cfg, hw_shape = STEPS[name]
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    attn = build_attention(cfg).train()
    compiled = torch.compile(attn, backend='aot_eager', fullgraph=True)  # fullgraph: a break raises
    x = torch.randn(2, attn.num_extra_tokens + hw_shape[0] * hw_shape[1], cfg['embed_dims'],
                    requires_grad=True)
    with torch._dynamo.config.patch(error_on_recompile=True):  # a recompilation raises
        for _ in range(10):
            compiled(x, hw_shape).sum().backward()
    assert counters['stats']['unique_graphs'] == 1 and not counters['graph_break'], dict(counters)
    # and the compiled step computes what the module computes
    torch.manual_seed(1)
    eager = attn(x, hw_shape)
    torch.manual_seed(1)
    torch.testing.assert_close(compiled(x, hw_shape), eager, rtol=1e-5, atol=1e-5)
