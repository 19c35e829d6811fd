"""vil2mmvisattn: synthetic state dicts laid out like the official checkpoints (classification:
``net`` / ``module.layer{i}...`` with a full-attention last stage and other windows; detectron2:
``model`` / ``backbone.bottom_up.layer{i}...`` with shared global projections) load into ViL with
every weight set, tables and tokens resized; unmapped keys are listed; an incomplete checkpoint
fails."""

import pytest
import torch

from mmvisattn.models.backbones.vil import ViL, convert_vil_state_dict

from ..conftest import REPO, load_tool, run_tool

DEMO = REPO / 'configs/vil/retinanet_vil-demo_fpn_1xb8-600i_shapes-coco-128.py'
DEMO_ARCH = dict(embed_dims=(32, 64, 128, 256), depths=(1, 1, 3, 1), num_heads=(1, 2, 4, 8),
                 patch_sizes=(4, 2, 2, 2), windows=(7, 7, 7, 7), num_global=(1, 1, 1, 0))


def official_state_dict(arch, windows, num_global, full_attention_last=False, shared_global=False,
                        prefix=''):
    """Official ``MsViT`` keys and shapes (``layer{i}.0`` patch embedding, odd indices attention
    blocks, even indices MLP blocks); a full-attention stage has ``attn.qkv`` and a table of
    ``(2 * map - 1)^2`` entries for a 7 x 7 map."""
    generator = torch.Generator().manual_seed(0)
    state, channels = {}, 3
    stages = len(arch['depths'])
    for i in range(stages):
        dims, heads, patch, glob = (arch['embed_dims'][i], arch['num_heads'][i],
                                    arch['patch_sizes'][i], num_global[i])

        def put(name, *shape):
            key = f'{prefix}layer{i + 1}.{name}'  # noqa: B023
            state[key] = torch.randn(*shape, generator=generator)

        put('0.proj.weight', dims, channels, patch, patch)
        put('0.proj.bias', dims)
        put('0.norm_embed.weight', dims)
        put('0.norm_embed.bias', dims)
        if glob:
            put('0.cls_token', 1, glob, dims)
        full = full_attention_last and i == stages - 1
        side = 13 if full else 4 * windows[i] - 1
        for k in range(arch['depths'][i]):
            attn, mlp = f'{2 * k + 1}', f'{2 * k + 2}'
            for norm in (f'{attn}.norm', f'{mlp}.norm'):
                put(f'{norm}.weight', dims)
                put(f'{norm}.bias', dims)
            layers = dict(qkv=3) if full else dict(query=1, kv=2)
            if glob and not full:
                layers.update(query_global=1, kv_global=2, proj_global=1)
            layers['proj'] = 1
            for name, mult in layers.items():
                put(f'{attn}.attn.{name}.weight', mult * dims, dims)
                put(f'{attn}.attn.{name}.bias', mult * dims)
            put(f'{attn}.attn.local_relative_position_bias_table', side * side, heads)
            state[f'{prefix}layer{i + 1}.{attn}.attn.relative_position_index'] = torch.zeros(
                4, dtype=torch.long
            )
            if glob:
                put(f'{attn}.attn.g2l_relative_position_bias', 2, heads, glob)
                put(f'{attn}.attn.g2g_relative_position_bias', heads, glob, glob)
            put(f'{mlp}.mlp.fc1.weight', 4 * dims, dims)
            put(f'{mlp}.mlp.fc1.bias', 4 * dims)
            put(f'{mlp}.mlp.fc2.weight', dims, 4 * dims)
            put(f'{mlp}.mlp.fc2.bias', dims)
        channels = dims
    if shared_global:  # nn.Module aliases: the *_global entries repeat the local ones
        for key in list(state):
            for part in ('query', 'kv', 'proj'):
                if f'.attn.{part}_global.' in key:
                    state[key] = state[key.replace(f'.attn.{part}_global.', f'.attn.{part}.')]
    state[f'{prefix}norm.weight'] = torch.ones(arch['embed_dims'][-1])
    return state


def test_classification_checkpoint_with_other_windows_and_full_attention():
    # ImageNet layout: window 5 (table 19^2) in stage 1, a global token in the last, full-attention
    # stage
    source = official_state_dict(DEMO_ARCH, (5, 7, 7, 7), (1, 1, 1, 1), full_attention_last=True,
                                 prefix='module.')
    model = ViL(arch=DEMO_ARCH)
    target = model.state_dict()
    converted, unmapped = convert_vil_state_dict(source, target)
    assert set(converted) == set(target)
    model.load_state_dict(converted)  # strict: every weight set, every shape fits
    qkv = source['module.layer4.1.attn.qkv.weight']
    torch.testing.assert_close(converted['stages.3.blocks.0.attn.query.weight'], qkv[:256])
    torch.testing.assert_close(converted['stages.3.blocks.0.attn.kv.weight'], qkv[256:])
    torch.testing.assert_close(converted['stages.2.blocks.2.ffn.layers.1.weight'],
                               source['module.layer3.6.mlp.fc2.weight'])
    table = converted['stages.0.blocks.0.attn.local_relative_position_bias_table']
    assert table.shape == (27 * 27, 1)
    assert 'module.layer4.0.cls_token' in unmapped and 'module.norm.weight' in unmapped
    # ViL shares the global projections
    assert 'module.layer1.1.attn.query_global.weight' in unmapped


def test_detectron2_checkpoint_copies_every_tensor():
    source = official_state_dict(DEMO_ARCH, (7,) * 4, (1, 1, 1, 0), shared_global=True,
                                 prefix='backbone.bottom_up.')
    source['backbone.fpn_lateral2.weight'] = torch.zeros(1)
    model = ViL(arch=DEMO_ARCH)
    converted, unmapped = convert_vil_state_dict(source, model.state_dict())
    model.load_state_dict(converted)
    for ours, theirs in [('stages.1.patch_embed.projection.weight', 'layer2.0.proj.weight'),
                         ('stages.1.patch_embed.norm.bias', 'layer2.0.norm_embed.bias'),
                         ('stages.2.blocks.1.norm1.weight', 'layer3.3.norm.weight'),
                         ('stages.2.blocks.1.attn.g2l_relative_position_bias',
                          'layer3.3.attn.g2l_relative_position_bias'),
                         ('stages.0.cls_token', 'layer1.0.cls_token')]:
        torch.testing.assert_close(converted[ours], source['backbone.bottom_up.' + theirs])
    assert 'backbone.fpn_lateral2.weight' in unmapped
    assert 'backbone.bottom_up.layer1.1.attn.relative_position_index' in unmapped


def test_separate_global_projections_get_the_checkpoint_or_the_local_copy():
    source = official_state_dict(DEMO_ARCH, (7,) * 4, (1, 1, 1, 1), full_attention_last=True)
    model = ViL(arch=DEMO_ARCH,
                attn_cfg=dict(type='LongformerAttention', share_global_weights=False))
    converted, _ = convert_vil_state_dict(source, model.state_dict())
    model.load_state_dict(converted)
    torch.testing.assert_close(converted['stages.0.blocks.0.attn.proj_global.weight'],
                               source['layer1.1.attn.proj_global.weight'])
    torch.testing.assert_close(converted['stages.2.blocks.0.attn.query_global.weight'],
                               source['layer3.1.attn.query_global.weight'])


def test_tool_converts_and_fails_on_unset_weights(tmp_path):
    source = official_state_dict(DEMO_ARCH, (7,) * 4, (1, 1, 1, 0), prefix='module.')
    torch.save({'net': source}, tmp_path / 'vil.pth')
    done = run_tool(['tools/model_converters/vil2mmvisattn.py', tmp_path / 'vil.pth',
                     tmp_path / 'out.pth', '--config', DEMO], cwd=tmp_path)
    assert 'module.norm.weight' in done.stdout
    saved = torch.load(tmp_path / 'out.pth', weights_only=True)['state_dict']
    ViL(arch=DEMO_ARCH).load_state_dict(saved)
    del source['module.layer3.4.mlp.fc1.weight']
    torch.save({'net': source}, tmp_path / 'partial.pth')
    unset = r'backbone weights stay unset, e\.g\. \[.stages\.2\.blocks\.1\.ffn\.layers\.0\.0'
    with pytest.raises(SystemExit, match=unset):
        load_tool('tools/model_converters/vil2mmvisattn.py').main(
            [str(tmp_path / 'partial.pth'), str(tmp_path / 'bad.pth'), '--config', str(DEMO)])
