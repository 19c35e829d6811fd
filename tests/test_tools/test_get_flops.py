"""The FLOP counter sees attention matmuls and the M x M solve: checked against closed forms on
single attentions, and the tool runs on a config."""
from importlib import import_module

import pytest
import torch

import mmvisattn  # noqa: F401
from mmvisattn.registry import build_attention
from mmvisattn.utils import count_flops

from ..conftest import REPO, run_tool


def linear_macs(tokens, dims, outputs):
    return tokens * dims * outputs


def test_softmax_attention_counts_scores_and_mixing():
    tokens, dims = 16 * 16, 32
    attn = build_attention(dict(type='SoftmaxAttention'), embed_dims=dims, num_heads=4).eval()
    macs = count_flops(lambda: attn(torch.randn(1, tokens, dims), (16, 16)))
    projections = linear_macs(tokens, dims, 3 * dims) + linear_macs(tokens, dims, dims)
    assert macs['total'] == projections + 2 * tokens * tokens * dims


def test_rwgk_attention_counts_graphs_walk_and_solve():
    tokens, dims, heads, anchors = 12 * 10, 32, 2, 8
    head_dims = dims // heads
    attn = build_attention(dict(type='RWGKAttention', num_anchors=anchors), embed_dims=dims,
                           num_heads=heads).eval()
    macs = count_flops(lambda: attn(torch.randn(1, tokens, dims), (12, 10)))
    projections = linear_macs(tokens, dims, 3 * dims) + linear_macs(tokens, dims, dims)
    per_head = (2 * tokens * anchors * head_dims  # G_Q and G_K logits
                + anchors * tokens * head_dims  # G_K V
                + anchors * tokens * anchors  # G_K G_Q
                + tokens * anchors * head_dims)  # G_Q (solved)
    solve = heads * (2 * anchors ** 3 // 3 + 2 * anchors * anchors * head_dims) // 2
    assert macs['_linalg_solve_ex'] == solve
    assert macs['total'] == projections + heads * per_head + solve


@pytest.mark.parametrize('config,params,operator', [
    ('segformer_rwgka/segformer_mit-b0-rwgka_1xb8-600i_shapes-cityscapes-128.py',
     'params: 3.38 M  (backbone 2.98 M, decode_head 0.40 M)', '_linalg_solve_ex'),
    ('demo/retinanet_r18_fpn_1xb8-600i_shapes-coco-128.py',
     'params: 19.81 M  (backbone 11.18 M, neck 3.77 M, bbox_head 4.87 M)', 'convolution'),
])
def test_get_flops_tool_in_both_scopes(tmp_path, config, params, operator):
    done = run_tool(['tools/analysis_tools/get_flops.py', REPO / 'configs' / config, '--shape', 128,
                     '--json', tmp_path / 'f.json'], cwd=tmp_path)
    assert params in done.stdout
    assert operator in done.stdout and 'FLOPs (multiply-accumulates)' in done.stdout


FAMILY_DEMOS = ['vil/retinanet_vil-demo_fpn_1xb8-600i_shapes-coco-128.py',
                'segformer_rwgka/segformer_mit-b0-rwgka_1xb8-600i_shapes-cityscapes-128.py',
                'smca/smca_r18_1xb8-600i_shapes-coco-128.py',
                'picodet/picodet-s_castling_1xb16-600i_shapes-coco-128.py',
                'pervit/upernet_pervit-t_1xb8-600i_shapes-cityscapes-128.py',
                'castling/segformer-head_castling-levit-s_1xb8-600i_shapes-cityscapes-128.py',
                'smca/smca-ripple_r50_8xb2-50e_coco.py']


@pytest.mark.parametrize('config', FAMILY_DEMOS, ids=lambda c: c.split('/')[-1].split('_')[0])
def test_stock_flop_counter_counts_every_family(config):
    """mmengine's ``get_model_complexity_info``, which mmdet's and mmseg's ``get_flops.py`` call
    with ``model.forward`` bound to the data samples, traces every family (the hand-written
    autograd Functions run their forward as plain ops under tracing), counts the attention kernels
    through the handles ``import mmvisattn`` registers, and gives the project's figure: the
    project's counter counts norms, upsampling and pooling with mmengine's conventions. The one
    residue: an adaptive pooling to 1 x 1 runs as a mean, which the project's counter cannot tell
    from other means (PerViT's UperNet: 2,048 of 1.45 G)."""
    from functools import partial

    from mmengine.analysis import get_model_complexity_info
    from mmengine.config import Config

    from mmvisattn.registry import build_from_config
    get_flops = import_module('mmvisattn.analysis.flops')
    cfg = Config.fromfile(REPO / 'configs' / config)
    model = build_from_config(cfg).eval()
    meta = dict(img_shape=(128, 128), ori_shape=(128, 128), pad_shape=(128, 128),
                batch_input_shape=(128, 128), scale_factor=(1.0, 1.0))
    if cfg.default_scope == 'mmdet':
        from mmdet.structures import DetDataSample as Sample
    else:
        from mmseg.structures import SegDataSample as Sample
    model.forward = partial(model.forward, data_samples=[Sample(metainfo=meta)])
    stock = get_model_complexity_info(model, None, inputs=torch.zeros(1, 3, 128, 128),
                                      show_table=False, show_arch=False)['flops']
    ours = get_flops.measure(str(REPO / 'configs' / config), (128, 128))['gmacs'] * 1e9
    assert abs(stock - ours) <= max(8, 2e-6 * ours), (stock, ours)


@pytest.mark.parametrize('attn_cfg',
                         [dict(type='SoftmaxAttention'), dict(type='RWGKAttention', num_anchors=8)],
                         ids=lambda c: c['type'])
def test_stock_counter_counts_attention_kernels_as_the_project(attn_cfg):
    """With the registered handles, mmengine counts an attention (SDPA, or the RWGK solve) exactly
    as the project's counter does."""
    from mmengine.analysis import get_model_complexity_info
    attn = build_attention(attn_cfg, embed_dims=32, num_heads=2).eval()

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = attn

        def forward(self, x):
            return self.attn(x, (12, 10))

    x = torch.randn(1, 120, 32)
    stock = get_model_complexity_info(Wrapped(), None, inputs=x, show_table=False,
                                      show_arch=False)['flops']
    assert stock == count_flops(lambda: attn(x, (12, 10)))['total']


def test_the_default_input_is_the_configs_test_size():
    """PicoDet-S-320 counts at 320x320 (its test Resize), not at a size of the tool's choosing."""
    config = REPO / 'configs/picodet/picodet-s_castling_8xb32-300e_coco-320.py'
    done = run_tool(['tools/analysis_tools/get_flops.py', config], cwd=REPO)
    assert 'input: 320x320' in done.stdout
