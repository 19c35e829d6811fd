"""tools/model_converters/mit2mmvisattn.py on synthetic checkpoints laid out as mmseg's MiT ones:
converted weights load through ``init_cfg=Pretrained``, only the anchors stay new, and a checkpoint
of another width or kind fails in one line."""
import torch
from mmengine.config import Config
from mmseg.models.backbones import MixVisionTransformer
from mmseg.registry import MODELS

import mmvisattn  # noqa: F401

from ..conftest import REPO, run_tool

B0_CONFIG = (
    REPO / 'configs/segformer_rwgka/segformer_mit-b0-rwgka_8xb1-160k_cityscapes-1024x1024.py'
)


def stock_checkpoint(path, embed_dims=32):
    torch.manual_seed(0)
    stock = MixVisionTransformer(embed_dims=embed_dims, num_layers=[2, 2, 2, 2],
                                 num_heads=[1, 2, 5, 8])
    torch.save({'state_dict': stock.state_dict()}, path)
    return stock


def test_convert_then_load_through_init_cfg(tmp_path):
    stock = stock_checkpoint(tmp_path / 'mit_b0.pth')
    done = run_tool(['tools/model_converters/mit2mmvisattn.py', tmp_path / 'mit_b0.pth',
                     tmp_path / 'mit_b0_rwgka.pth', '--config', B0_CONFIG], cwd=tmp_path)
    # sr and norm, weight and bias, 6 blocks
    assert '24 spatial-reduction tensors dropped' in done.stdout
    new = done.stdout.split('newly initialised in the backbone (')[1]
    assert new.startswith('16)') and all(
        'anchor' in name for name in new.split(': ')[1].split('\n')[0].split(', ')
    )
    cfg = Config.fromfile(B0_CONFIG)
    cfg.model.backbone.init_cfg.checkpoint = str(tmp_path / 'mit_b0_rwgka.pth')
    backbone = MODELS.build(cfg.model.backbone)
    backbone.init_weights()
    torch.testing.assert_close(backbone.layers[0][0].projection.weight,
                               stock.layers[0][0].projection.weight)
    in_proj = stock.layers[2][1][1].attn.attn.in_proj_weight
    torch.testing.assert_close(backbone.layers[2][1][1].attn.attn.kv.weight, in_proj[160:])


def test_checkpoint_of_another_width_is_named(tmp_path):
    stock_checkpoint(tmp_path / 'mit_b1.pth', embed_dims=64)
    done = run_tool(['tools/model_converters/mit2mmvisattn.py', tmp_path / 'mit_b1.pth',
                     tmp_path / 'out.pth', '--config', B0_CONFIG], cwd=tmp_path, check=False)
    assert done.returncode == 1
    assert (
        'expects (32, 3, 7, 7) (a checkpoint of another width?)'
        in done.stderr.strip().splitlines()[-1]
    )
    assert not (tmp_path / 'out.pth').exists()


def test_non_mit_checkpoint_is_refused(tmp_path):
    torch.save({'state_dict': {'conv1.weight': torch.zeros(1)}}, tmp_path / 'resnet.pth')
    done = run_tool(['tools/model_converters/mit2mmvisattn.py', tmp_path / 'resnet.pth',
                     tmp_path / 'out.pth'],
                    cwd=tmp_path, check=False)
    assert done.returncode == 1
    assert 'holds no MiT attention keys' in done.stderr
