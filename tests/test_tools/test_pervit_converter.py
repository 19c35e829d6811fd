"""Converter of official PerViT checkpoints (the keys of github.com/juhongm999/pervit):
every tensor finds its place in the backbone, the classifier is dropped, and checkpoints of another
width or of another model fail in one line."""
import re

import pytest
import torch

import mmvisattn  # noqa: F401
from mmvisattn.models.backbones.pervit import PerViT, convert_pervit_state_dict

from ..conftest import REPO, load_tool

TINY_DEMO = REPO / 'configs/pervit/upernet_pervit-t_1xb8-600i_shapes-cityscapes-128.py'
MINI = dict(num_heads=2, depths=(1, 1, 1, 1), embed_dims=(16, 24, 24, 32),
            stem_channels=(8, 8, 8, 16))

# PerViT key -> official key (the official names, written out independently of the converter's
# rules)
TO_OFFICIAL = [
    (r'^stem\.4\.', 'conv_layers.conv1x1.'), (r'^stem\.(\d)\.', r'conv_layers.conv_layers.\1.'),
    (r'\.cpe\.', '.conv.proj.'), (r'\.attn\.qkv\.', '.attn.to_qkv.'),
    (r'\.attn\.position\.norm(\d)\.', r'.attn.activation.gn\1.'),
    (r'\.attn\.position\.conv(\d)\.', r'.attn.activation.conv\1.'), (r'^norm3\.', 'norm.'),
]


def official_state_dict(model: PerViT) -> dict:
    state = {}
    for key, value in model.state_dict().items():
        if re.match(r'^norm[012]\.', key):
            continue  # the official model has one final norm only
        for pattern, target in TO_OFFICIAL:
            key = re.sub(pattern, target, key)
        state[key] = value.clone()
    state['head.weight'] = torch.randn(1000, model.out_channels[-1])
    state['head.bias'] = torch.zeros(1000)
    return state



def test_official_keys_fill_the_backbone():
    torch.manual_seed(0)
    source = PerViT(MINI)
    official = official_state_dict(source)
    assert ('blocks.0.attn.activation.gn2.bias' in official
            and 'conv_layers.conv1x1.weight' in official)
    converted, dropped = convert_pervit_state_dict(official)
    assert sorted(dropped) == ['head.bias', 'head.weight']
    target = PerViT(MINI)
    missing, unexpected = target.load_state_dict(converted, strict=False)
    assert unexpected == [] and sorted(missing) == [
        f'norm{i}.{p}' for i in range(3) for p in ('bias', 'weight')
    ]
    for key, value in converted.items():
        assert torch.equal(target.state_dict()[key], value), key
    with pytest.raises(KeyError, match="'pos_embed' matches no conversion rule"):
        convert_pervit_state_dict({**official, 'pos_embed': torch.zeros(1)})


def test_cli_checks_the_width_against_a_config(tmp_path, capsys):
    tool = load_tool('tools/model_converters/pervit2mmvisattn.py')
    src, dst = tmp_path / 'official.pth', tmp_path / 'converted.pth'
    torch.save({'model': official_state_dict(PerViT('tiny'))}, src)
    tool.main([str(src), str(dst), '--config', str(TINY_DEMO)])
    assert 'newly initialised in the backbone (6): norm0.bias' in capsys.readouterr().out
    assert 'blocks.11.attn.position.norm2.bias' in torch.load(dst, weights_only=True)['state_dict']
    half_width = dict(num_heads=4, depths=(2, 2, 6, 2), embed_dims=(64, 96, 112, 140),
                      stem_channels=(24, 32, 48, 64))
    torch.save({'model': official_state_dict(PerViT(half_width))}, src)
    with pytest.raises(SystemExit,
                       match=r'error: .*expects .*\(a checkpoint of another width\?\)$'):
        tool.main([str(src), str(dst), '--config', str(TINY_DEMO)])
    torch.save({'state_dict': {'backbone.conv1.weight': torch.zeros(1)}}, src)
    with pytest.raises(SystemExit, match='holds no official PerViT attention keys'):
        tool.main([str(src), str(dst)])
