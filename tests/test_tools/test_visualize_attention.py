"""The attention visualiser draws every attention that exposes its map (the attention_maps
protocol): PerViT's position and mixed maps for the centre and sample queries, and the region
classification of Eq. 11; a model without such attentions is refused in one line."""
import json

import numpy as np
from PIL import Image

from ..conftest import run_tool

NARROW = """
_base_ = {base!r}
model = dict(
    backbone=dict(arch=dict(_delete_=True, num_heads=2, depths=(1, 1, 1, 1),
                            embed_dims=(16, 16, 16, 16), stem_channels=(8, 8, 8, 16)){attn}),
    neck=[dict(type='mmdet.ChannelMapper', in_channels=[16, 16, 16, 16], out_channels=16,
               kernel_size=1),
          dict(type='Feature2Pyramid', embed_dim=16, rescales=[4, 2, 1, 0.5])],
    decode_head=dict(in_channels=[16, 16, 16, 16], channels=16),
    auxiliary_head=None)
"""
DEMO = 'configs/pervit/upernet_pervit-t_1xb8-600i_shapes-cityscapes-128.py'


def write_inputs(tmp_path, attn=''):
    from ..conftest import REPO
    config = tmp_path / 'narrow.py'
    config.write_text(NARROW.format(base=str(REPO / DEMO), attn=attn))
    image = tmp_path / 'image.png'
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (80, 96, 3),
                                                      dtype=np.uint8)).save(image)
    return config, image


def test_visualiser_writes_position_mixed_and_region_pictures(tmp_path):
    config, image = write_inputs(tmp_path)
    out = tmp_path / 'pictures'
    done = run_tool(['tools/analysis_tools/visualize_attention.py', '--config', config, '--image',
                     image, '--out', out, '--queries', 1], cwd=tmp_path)
    names = sorted(p.name for p in out.iterdir())
    assert names == ['mixed_centre.png', 'mixed_query-2x2.png', 'position_centre.png',
                     'position_query-2x2.png', 'regions.json', 'regions.png']
    assert all((out / n).stat().st_size > 2000 for n in names if n.endswith('.png'))
    assert 'wrote' in done.stdout
    regions = json.loads((out / 'regions.json').read_text())
    assert list(regions) == [f'backbone.blocks.{i}.attn' for i in range(4)]
    assert all(len(heads) == 2 for heads in regions.values())


def test_visualiser_refuses_a_model_without_maps(tmp_path):
    config, image = write_inputs(tmp_path, attn=", attn_cfg=dict(type='SoftmaxAttention')")
    done = run_tool(['tools/analysis_tools/visualize_attention.py', '--config', config, '--image',
                     image, '--out', tmp_path / 'pictures'], cwd=tmp_path, check=False)
    assert done.returncode == 1
    assert 'no attention of this model exposes attention_maps(x, hw_shape, query)' in done.stderr


def test_visualiser_draws_ripple_rings(tmp_path):
    config, image = write_inputs(tmp_path, attn=", attn_cfg=dict(type='RippleAttention', r_max=2)")
    out = tmp_path / 'pictures'
    run_tool(['tools/analysis_tools/visualize_attention.py', '--config', config, '--image', image,
              '--out', out, '--queries', 1], cwd=tmp_path)
    assert sorted(p.name for p in out.iterdir()) == ['spatial_weights_centre.png',
                                                     'spatial_weights_query-2x2.png']
