"""Golden tests: the project's modules reproduce the official implementations.

Each fixture in ``tests/data/official/`` holds an official module's randomised float64 state dict,
its inputs, its outputs and the input gradient for a fixed upstream gradient, written by
``tools/analysis_tools/make_official_fixtures.py`` from the official repositories (provenance in the
folder's README). A test loads the state dict through the project's converter or key map, runs the
project's module and compares outputs and input gradients. No checkout is needed;
``MMVISATTN_OFFICIAL_FIXTURES=DIR`` runs the tests on fixtures written elsewhere.
"""
import os
from pathlib import Path
from typing import Dict

import pytest
import torch
import torch.nn.functional as F

from mmvisattn.models.attentions import (
    LinearAngularAttention,
    LongformerAttention,
    PeripheralAttention,
)
from mmvisattn.models.backbones.pervit import PerViT, convert_pervit_state_dict
from mmvisattn.models.backbones.vil import ViL, convert_vil_state_dict
from mmvisattn.models.layers.smca_transformer import SMCATransformerDecoder
from mmvisattn.utils import rename_keys

FIXTURES = Path(os.environ.get('MMVISATTN_OFFICIAL_FIXTURES')
                or Path(__file__).resolve().parents[1] / 'data/official')
TOLERANCE = 1e-10  # float64, relative to each tensor's largest magnitude


def load_fixture(name: str) -> dict:
    return torch.load(FIXTURES / f'{name}.pt', weights_only=True)


def assert_matches(actual: torch.Tensor, expected: torch.Tensor, what: str) -> float:
    """Max |difference|; fails above ``TOLERANCE`` times the larger of 1 and ``expected``'s largest
    entry."""
    assert actual.shape == expected.shape, (what, actual.shape, expected.shape)
    difference = (actual - expected).abs().max().item()
    scale = max(1.0, expected.abs().max().item())
    assert difference <= TOLERANCE * scale, (
        f'{what}: max |difference| {difference:.3g} (scale {scale:.3g})'
    )
    return difference


def run_with_gradient(module, x: torch.Tensor, grad_output: torch.Tensor, *args):
    """``module(x, *args)`` and the gradient of ``sum(output * grad_output)`` with respect to
    ``x``."""
    x = x.clone().requires_grad_(True)
    out = module(x, *args)
    out.backward(grad_output)
    return out.detach(), x.grad


def keyed_to(module: torch.nn.Module, official: Dict[str, torch.Tensor],
             without_place) -> Dict[str, torch.Tensor]:
    """The official state dict restricted to ``module``'s keys; every dropped key must be one
    ``without_place(key)`` accepts (a buffer the module recomputes, or a shared duplicate)."""
    own = module.state_dict()
    dropped = [key for key in official if key not in own]
    assert all(without_place(key) for key in dropped), dropped
    return {key: value for key, value in official.items() if key in own}


# ---------------------------------------------------------------- ViL: Long2DSCSelfAttention
OFFICIAL_MASKING = {0: 'chunk', 1: 'exact', -1: 'cyclic'}


def vil_attention(fixture: dict) -> LongformerAttention:
    kwargs = fixture['official_kwargs']
    attn = LongformerAttention(kwargs['dim'], kwargs['num_heads'], window=kwargs['w'],
                               num_extra_tokens=kwargs['nglo'],
                               masking=OFFICIAL_MASKING[kwargs['exact']], rel_pos=kwargs['rpe'],
                               share_global_weights=kwargs['sharew'], qkv_bias=kwargs['qkv_bias'],
                               impl='torch').double()
    # relative_position_index is recomputed by the op; the *_global modules are the local ones
    # (sharew)
    state = keyed_to(attn, fixture['state_dict'], lambda key: key == 'relative_position_index'
                     or key.split('.')[0].endswith('_global'))
    attn.load_state_dict(state, strict=True)
    return attn


@pytest.mark.parametrize('name', ['vil_attn_chunk', 'vil_attn_exact', 'vil_attn_cyclic',
                                  'vil_attn_noglobal'])
def test_longformer_attention_equals_the_official_module(name):
    fixture = load_fixture(name)
    attn = vil_attention(fixture).eval()
    hw_shape = (fixture['forward_args']['nx'], fixture['forward_args']['ny'])
    out, grad = run_with_gradient(attn, fixture['inputs']['x'], fixture['grad_output'], hw_shape)
    assert_matches(out, fixture['output'], f'{name} output')
    assert_matches(grad, fixture['grad_input'], f'{name} input gradient')


@pytest.mark.parametrize('name', ['vil_attn_chunk', 'vil_attn_cyclic'])
def test_longformer_training_modes_equal_the_official_module(name):
    """Own chunk only (mode -1) and random shifting with the neighbour the official run drew."""
    fixture = load_fixture(name)
    attn = vil_attention(fixture).train()
    hw_shape = (fixture['forward_args']['nx'], fixture['forward_args']['ny'])
    for run in fixture['train_runs']:
        neighbour = run.get('sampled_neighbour', run['module_mode'])
        attn.mode = min(run['module_mode'], 1)
        attn.step_mode = lambda device, neighbour=neighbour: neighbour
        out, grad = run_with_gradient(attn, fixture['inputs']['x'], fixture['grad_output'],
                                      hw_shape)
        assert_matches(out, run['output'], f'{name} mode {neighbour} output')
        assert_matches(grad, run['grad_input'], f'{name} mode {neighbour} input gradient')


# ---------------------------------------------------------------- Castling: LinAngularAttention
def castling_attention(fixture: dict) -> LinearAngularAttention:
    """The official module is ``normalisation='token'`` with the (9, 1) token convolution; its
    sparse branch (``sparse_reg``) is the auxiliary masked softmax with threshold 0.02."""
    kwargs = fixture['official_kwargs']
    attn = LinearAngularAttention(kwargs['in_channels'], kwargs['num_heads'],
                                  qkv_bias=kwargs['qkv_bias'], conv='tokens',
                                  kernel_size=kwargs['res_kernel_size'], normalisation='token',
                                  aux_branch=kwargs['sparse_reg'], mask_threshold=0.02).double()
    attn.load_state_dict(fixture['state_dict'], strict=True)
    return attn


@pytest.mark.parametrize('name', ['castling_linangular', 'castling_linangular_sparse'])
def test_linear_angular_attention_equals_the_official_module(name):
    fixture = load_fixture(name)
    attn = castling_attention(fixture).eval()
    tokens = fixture['inputs']['x'].shape[1]
    # the official module takes no grid; the token convolution needs none
    hw_shape = (5, tokens // 5)
    out, grad = run_with_gradient(attn, fixture['inputs']['x'], fixture['grad_output'], hw_shape)
    assert_matches(out, fixture['output'], f'{name} output')
    assert_matches(grad, fixture['grad_input'], f'{name} input gradient')


# ---------------------------------------------------------------- PerViT: MPA and VisionTransformer
def test_peripheral_attention_equals_the_official_mpa():
    """``MPA`` with its ``rpe_proj`` (the distance weighting ``w_r``) on a 7x7 grid."""
    fixture = load_fixture('pervit_mpa')
    kwargs = fixture['official_kwargs']
    attn = PeripheralAttention(kwargs['dim'], kwargs['num_heads'], qkv_bias=kwargs['qkv_bias'],
                               norm_init=tuple(kwargs['norm_init']), impl='torch').double()
    prefix = 'blocks.0.attn.'
    official = {prefix + key: value for key, value in fixture['state_dict'].items()}
    converted, dropped = convert_pervit_state_dict(official)
    state = {key[len(prefix):]: value for key, value in converted.items()}
    state.update({key.replace('rpe_proj.', 'distance_proj.'): value
                  for key, value in fixture['rpe_proj_state_dict'].items()})
    assert not dropped
    attn.load_state_dict(state, strict=True)
    out, grad = run_with_gradient(attn.eval(), fixture['inputs']['x'], fixture['grad_output'],
                                  tuple(fixture['forward_args']['grid']))
    assert_matches(out, fixture['output'], 'MPA output')
    assert_matches(grad, fixture['grad_input'], 'MPA input gradient')


def test_pervit_equals_the_official_vision_transformer():
    """A small official PerViT (one stem conv, widths 8-16-16-24, 12 blocks) through the converter;
    the official classifier (final norm, token mean, head) is applied to the last stage output."""
    fixture = load_fixture('pervit_tiny')
    kwargs = fixture['official_kwargs']
    stem = kwargs['convstem_dims'][1:]
    model = PerViT(arch=dict(num_heads=kwargs['num_heads'], depths=(2, 2, 6, 2),
                             embed_dims=tuple(kwargs['emb_dims']),
                             stem_channels=tuple(stem)), out_indices=(3,)).double().eval()
    converted, dropped = convert_pervit_state_dict(fixture['state_dict'], num_stem_convs=len(stem))
    assert sorted(dropped) == ['head.bias', 'head.weight']
    model.load_state_dict(converted, strict=True)
    head = {
        key[len('head.'):]: value
        for key, value in fixture['state_dict'].items()
        if key.startswith('head.')
    }

    def logits(image: torch.Tensor) -> torch.Tensor:
        features = model(image)[0].flatten(2).mean(dim=2)
        return F.linear(features, head['weight'], head['bias'])

    out, grad = run_with_gradient(logits, fixture['inputs']['x'], fixture['grad_output'])
    assert_matches(out, fixture['output'], 'PerViT logits')
    assert_matches(grad, fixture['grad_input'], 'PerViT input gradient')


# ---------------------------------------------------------------- ViL: MsViT
# (fixture, ViL arch): three sliding-chunk stages (w 3, global tokens in stages 1-2, every stage
# padded); the classification layout, whose last stage is full attention on a 7x7 map (13x13
# table), converted into sliding chunks of w 7 (27x27 table).
MSVIT_LAYOUTS = {
    'vil_msvit_tiny': dict(embed_dims=(16, 32, 48), depths=(1, 1, 1), num_heads=(2, 2, 3),
                           patch_sizes=(4, 2, 2), windows=(3, 3, 3), num_global=(1, 1, 0)),
    'vil_msvit_fullattn': dict(embed_dims=(16, 16, 16, 16), depths=(1, 1, 1, 1),
                               num_heads=(1, 2, 2, 2),
                               patch_sizes=(4, 1, 1, 1), windows=(3, 3, 3, 7),
                               num_global=(1, 1, 1, 1)),
}


def converted_msvit(fixture: dict, arch: dict) -> ViL:
    model = ViL(arch=arch, drop_path_rate=0.0,
                norm_eps=fixture['official_kwargs']['ln_eps']).double().eval()
    converted, unmapped = convert_vil_state_dict(fixture['state_dict'], model.state_dict())
    assert all(key.startswith(('head.', 'norm.')) or key.endswith('relative_position_index')
               or '_global.' in key
               for key in unmapped), unmapped
    model.load_state_dict(converted, strict=True)
    return model


def official_classifier(fixture: dict, model: ViL):
    """The official head on a last stage without global tokens: final norm, token mean, linear."""
    weights = {
        key: value
        for key, value in fixture['state_dict'].items()
        if key.startswith(('head.', 'norm.'))
    }

    def logits(image: torch.Tensor) -> torch.Tensor:
        tokens = model(image)[-1].flatten(2).transpose(1, 2)
        tokens = F.layer_norm(tokens, tokens.shape[-1:], weights['norm.weight'],
                              weights['norm.bias'], eps=fixture['official_kwargs']['ln_eps'])
        return F.linear(tokens.mean(dim=1), weights['head.weight'], weights['head.bias'])

    return logits


@pytest.mark.parametrize('name', sorted(MSVIT_LAYOUTS))
def test_vil_equals_the_official_msvit(name):
    """Every stage's map through ``convert_vil_state_dict``; for the layout without a global token
    in the last stage, also the official classifier's logits and the image gradient."""
    fixture = load_fixture(name)
    model = converted_msvit(fixture, MSVIT_LAYOUTS[name])
    maps = model(fixture['inputs']['x'])
    for stage, map_ in enumerate(maps, start=1):
        tokens = fixture['stage_outputs'][f'layer{stage}_tokens']
        height, width = fixture['stage_outputs'][f'layer{stage}_hw']
        expected = tokens[:, -height * width:].transpose(1, 2).reshape(map_.shape)
        assert_matches(map_.detach(), expected, f'{name} stage {stage}')
    if model.stages[-1].num_global:
        return
    out, grad = run_with_gradient(official_classifier(fixture, model), fixture['inputs']['x'],
                                  fixture['grad_output'])
    assert_matches(out, fixture['output'], f'{name} logits')
    assert_matches(grad, fixture['grad_input'], f'{name} input gradient')


def test_full_attention_table_is_recentred_not_stretched():
    """The 13x13 table of the official full-attention stage keeps its biases at their offsets in
    the 27x27 sliding-chunk table; stretching it (the earlier conversion, and the official
    converter's) moves them, and the last stage then differs from the official model."""
    fixture = load_fixture('vil_msvit_fullattn')
    model = converted_msvit(fixture, MSVIT_LAYOUTS['vil_msvit_fullattn'])
    table = model.stages[3].blocks[0].attn.local_relative_position_bias_table
    official = fixture['state_dict']['layer4.1.attn.local_relative_position_bias_table']
    heads = official.shape[1]
    assert torch.equal(table.detach().t().reshape(heads, 27, 27)[:, 7:20, 7:20],
                       official.t().reshape(heads, 13, 13))
    with torch.no_grad():
        stretched = F.interpolate(official.t().reshape(1, heads, 13, 13), size=(27, 27),
                                  mode='bilinear')
        table.copy_(stretched[0].flatten(1).t())
    expected = fixture['stage_outputs']['layer4_tokens'][:, 1:].transpose(1, 2).reshape(2, -1, 7, 7)
    assert (model(fixture['inputs']['x'])[-1] - expected).abs().max() > 1e-3
# ---------------------------------------------------------------- SMCA: the decoder
# parts of an official TransformerDecoderLayer -> parts of an SMCATransformerDecoderLayer
SMCA_LAYER_PARTS = {'self_attn': 'self_attn.attn', 'multihead_attn': 'cross_attn.attn',
                    'linear1': 'ffn.layers.0.0', 'linear2': 'ffn.layers.1', 'norm1': 'norms.0',
                    'norm2': 'norms.1', 'norm3': 'norms.2', 'norm4': 'norm_query',
                    'point1': 'ref_point_head', 'point2': 'offset_proj', 'point3': 'scale_proj'}
SMCA_DECODER_KEYS = [*[(rf'^layers\.(\d+)\.{part}\.', rf'layers.\1.{ours}.')
                       for part, ours in SMCA_LAYER_PARTS.items()],
                     (r'^norm\.', 'post_norm.')]


def smca_decoder_state_dict(official: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    converted, dropped = rename_keys(official, SMCA_DECODER_KEYS, complete='official SMCA decoder')
    assert not dropped
    return converted


def test_smca_decoder_equals_the_official_decoder():
    """Two official ``TransformerDecoderLayer``s (scale type 3, 8 heads) on a padded batch: the
    hidden states of every layer, the reference logits of the first, and the gradients of the
    memory, its positions, the query positions and the queries."""
    fixture = load_fixture('smca_decoder')
    kwargs, inputs = fixture['official_kwargs'], fixture['inputs']
    attn_cfg = dict(embed_dims=kwargs['d_model'], num_heads=kwargs['nhead'], dropout=0.0,
                    batch_first=True)
    decoder = SMCATransformerDecoder(
        num_layers=kwargs['num_decoder_layers'], return_intermediate=kwargs['return_intermediate'],
        layer_cfg=dict(scale_type='per_head_xy', smooth=kwargs['smooth'], self_attn_cfg=attn_cfg,
                       cross_attn_cfg=attn_cfg,
                       ffn_cfg=dict(embed_dims=kwargs['d_model'],
                                    feedforward_channels=kwargs['dim_feedforward'],
                                    num_fcs=2, ffn_drop=0.0,
                                    act_cfg=dict(type='ReLU', inplace=True)))).double()
    decoder.load_state_dict(smca_decoder_state_dict(fixture['state_dict']), strict=True)
    decoder.eval()
    # sequence-first official tensors -> batch-first; the reference span is each image's valid
    # size in stride-32 cells (official: h_w / 32)
    leaves = {name: inputs[name].transpose(0, 1).clone().requires_grad_(True)
              for name in ('memory', 'pos', 'query_pos', 'tgt')}
    reference_logits = []
    decoder.layers[0].ref_point_head.register_forward_hook(
        lambda module, args, out: reference_logits.append(out)
    )
    hidden, _ = decoder(query=leaves['tgt'], key=leaves['memory'], value=leaves['memory'],
                        query_pos=leaves['query_pos'], key_pos=leaves['pos'],
                        key_padding_mask=inputs['memory_key_padding_mask'],
                        hw_shape=tuple(fixture['forward_args']['feature_hw']),
                        ref_scale=inputs['h_w'][0] / 32)
    hidden = hidden.transpose(1, 2)  # (layers, Q, B, C) as the official
    logits = reference_logits[0].transpose(0, 1)
    ((hidden * fixture['grad_output']).sum()
     + (logits * fixture['grad_output_reference_logits']).sum()).backward()
    assert_matches(hidden.detach(), fixture['output'], 'SMCA hidden states')
    assert_matches(logits.detach(), fixture['reference_logits'], 'SMCA reference logits')
    assert_matches(leaves['memory'].grad.transpose(0, 1), fixture['grad_input'],
                   'SMCA memory gradient')
    for name in ('pos', 'query_pos', 'tgt'):
        assert_matches(leaves[name].grad.transpose(0, 1),
                       fixture['grad_inputs_extra'][f'grad_{name}'], f'SMCA {name} gradient')
