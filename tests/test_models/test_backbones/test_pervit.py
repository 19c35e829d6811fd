"""PeripheralAttention and the PerViT backbone (arXiv:2206.06801): Phi_p's symmetry and peripheral
initialization, normalised attention rows, the eval-mode cache, forward at several resolutions,
sizes against Table A5 and one-line errors."""
import math
from typing import List, Tuple

import pytest
import torch

import mmvisattn  # noqa: F401
from mmvisattn.models.attentions import PeripheralAttention
from mmvisattn.models.backbones import PerViT
from mmvisattn.registry import build_attention

from ...conftest import load_tool

VISUALIZER = load_tool('tools/analysis_tools/visualize_attention.py')  # holds the region analysis
cell_distances, nonlocality = VISUALIZER.cell_distances, VISUALIZER.nonlocality
region_radii, region_scores = VISUALIZER.region_radii, VISUALIZER.region_scores


def perturbed(attn: PeripheralAttention, seed: int = 0) -> PeripheralAttention:
    """Random position parameters (the initialization is too regular to show asymmetry)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for param in list(attn.position.parameters()) + list(attn.distance_proj.parameters()):
            param.add_(0.5 * torch.randn_like(param))
    return attn


def centre_map(phi_p: torch.Tensor, side: int) -> torch.Tensor:
    centre = (side // 2) * side + side // 2
    return phi_p[:, centre].view(-1, side, side)


def test_position_attention_is_rotation_symmetric_only_without_neighbourhoods():
    side = 7
    plain = perturbed(PeripheralAttention(16, 2, kernel_size=1)).position_attention((side, side))
    maps = centre_map(plain, side)
    torch.testing.assert_close(torch.rot90(maps, 1, (1, 2)), maps)
    torch.testing.assert_close(maps.flip(1), maps)
    # the same distance gets the same score for every query, not only the centre
    cells = torch.cartesian_prod(torch.arange(float(side)), torch.arange(float(side)))
    distances = torch.cdist(cells, cells)
    same = (distances[3] - distances[3][:, None]).abs() < 1e-6
    assert torch.allclose(plain[:, 3][:, None, :].expand(-1, side ** 2, -1)[:, same],
                          plain[:, 3][:, :, None].expand(-1, -1, side ** 2)[:, same])
    projected = centre_map(perturbed(PeripheralAttention(16, 2)).position_attention((side, side)),
                           side)
    assert (torch.rot90(projected, 1, (1, 2)) - projected).abs().max() > 1e-3


def test_peripheral_initialization_scores_nearer_keys_higher_in_early_layers():
    side = 14
    model = PerViT(dict(num_heads=4, depths=(2, 2, 6, 2), embed_dims=(16, 16, 16, 16),
                        stem_channels=(8, 8, 8, 16)))
    assert model.blocks[0].attn.position.norm2.bias[0].item() == pytest.approx(-5.0)
    assert model.blocks[-1].attn.position.norm2.weight[0].item() == pytest.approx(0.01)
    with torch.no_grad():
        first = model.blocks[0].attn.position_attention((side, side))
        last = model.blocks[-1].attn.position_attention((side, side))
    cells = torch.cartesian_prod(torch.arange(float(side)), torch.arange(float(side)))
    distance = torch.cdist(cells[side // 2 * side + side // 2:][:1], cells)[0]
    scores = centre_map(first, side).flatten(1)
    rings = [scores[:, (distance >= r) & (distance < r + 1)].mean(1) for r in range(6)]
    assert all((near > far).all() for near, far in zip(rings, rings[1:]))
    assert (nonlocality(first, (side, side)) < 0.5 * nonlocality(last, (side, side))).all()
    assert last.std() < 0.01  # the last layer starts nearly uniform (global)


def test_region_classification_uses_the_radii_of_appendix_b():
    assert [round(r, 2) for r in region_radii((14, 14))] == [1.19, 3.37, 5.83, 7.9]
    distance = cell_distances((14, 14))
    rings = torch.stack([(distance < 1).float(), ((distance >= 2) & (distance < 3)).float(),
                         ((distance >= 4) & (distance < 5)).float(),
                         ((distance >= 6) & (distance < 7)).float()])
    assert region_scores(rings, (14, 14)).argmax(dim=1).tolist() == [0, 1, 2, 3]


def test_mixed_attention_rows_sum_to_one_and_match_the_module_output():
    torch.manual_seed(0)
    attn = perturbed(PeripheralAttention(16, 2)).eval()
    x = torch.randn(2, 5 * 6, 16)
    maps = attn.attention_maps(x, (5, 6), (2, 3))
    assert maps['position'].shape == maps['mixed'].shape == (2, 5, 6)
    torch.testing.assert_close(maps['mixed'].sum(dim=(1, 2)), torch.ones(2))
    assert ((maps['position'] > 0) & (maps['position'] < 1)).all()
    # the row of the mixed attention reproduces the module's output for that token (before proj)
    v = attn.split_heads(attn.qkv(x[:1]).chunk(3, dim=-1)[2])
    expected = attn.proj(attn.merge_heads(torch.einsum('hn,bhnd->bhd', maps['mixed'].flatten(1),
                                                       v)[:, :, None]))
    torch.testing.assert_close(attn(x, (5, 6))[0, 2 * 6 + 3], expected[0, 0])


def test_phi_p_is_cached_in_eval_mode_until_the_weights_change():
    attn = PeripheralAttention(16, 2)
    x = torch.randn(1, 12, 16)
    attn.eval()
    first = attn.log_position_attention((3, 4))
    assert attn.log_position_attention((3, 4)) is first
    assert attn.log_position_attention((4, 3)) is not first
    with torch.no_grad():
        attn.position.norm2.bias.add_(1.0)
    assert not torch.equal(attn.log_position_attention((3, 4)), first)
    attn.train()
    attn(x, (3, 4)).sum().backward()
    assert (attn.position.conv1.weight.grad is not None
            and attn.distance_proj.weight.grad is not None)
    frozen = PeripheralAttention(16, 2, freeze_position=True)
    assert frozen.log_position_attention((3, 4)) is frozen.log_position_attention((3, 4))
    frozen(x, (3, 4)).sum().backward()
    assert frozen.position.conv1.weight.grad is None


@pytest.mark.parametrize('hw_shape', [(1, 1), (3, 5), (8, 8)])
def test_attention_forward_at_several_resolutions(hw_shape):
    attn = build_attention(dict(type='PeripheralAttention'), embed_dims=24, num_heads=3)
    x = torch.randn(2, hw_shape[0] * hw_shape[1], 24, requires_grad=True)
    out = attn(x, hw_shape)
    assert out.shape == x.shape
    out.sum().backward()
    assert torch.isfinite(x.grad).all()


def test_backbone_outputs_four_stride16_stages_at_several_sizes():
    model = PerViT(dict(num_heads=2, depths=(1, 1, 2, 1), embed_dims=(16, 24, 32, 40),
                        stem_channels=(8, 8, 16, 16)),
                   out_indices=(0, 1, 2, 3))
    assert model.out_channels == [24, 32, 40, 40]
    for size in [(16, 16), (50, 70)]:
        outs = model(torch.randn(2, 3, *size))
        grid = tuple(math.ceil(s / 16) for s in size)
        assert [tuple(o.shape) for o in outs] == [(2, c, *grid) for c in model.out_channels]
    swapped = PerViT(dict(num_heads=2, depths=(1, 1, 1, 1), embed_dims=(16, 16, 16, 16),
                          stem_channels=(8, 8, 8, 16)),
                     out_indices=(3,), attn_cfg=dict(type='SoftmaxAttention'))
    assert swapped.rpe_proj is None and swapped(torch.randn(1, 3, 32, 32))[0].shape == (1, 16, 2, 2)


def saved_bytes(model: PerViT, image: torch.Tensor) -> Tuple[int, List[torch.Tensor]]:
    """Bytes that autograd keeps from the forward pass for the backward pass, and the outputs."""
    total = 0

    def keep(tensor):
        nonlocal total
        total += tensor.numel() * tensor.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda tensor: tensor):
        outs = model(image)
    return total, outs


def test_with_cp_recomputes_blocks_with_the_same_outputs_and_gradients():
    torch.manual_seed(0)
    arch = dict(num_heads=2, depths=(1, 1, 1, 1), embed_dims=(16, 16, 24, 24),
                stem_channels=(8, 8, 8, 16))
    plain, checkpointed = PerViT(arch), PerViT(arch, with_cp=True)
    checkpointed.load_state_dict(plain.state_dict())
    image = torch.randn(2, 3, 160, 192)
    results = []
    for model in (plain, checkpointed):
        kept, outs = saved_bytes(model, image)
        sum(out.square().sum() for out in outs).backward()
        results.append((kept, outs, [p.grad for p in model.parameters()]))
    (kept_plain, outs_plain, grads_plain), (kept_cp, outs_cp, grads_cp) = results
    for a, b in zip([*outs_plain, *grads_plain], [*outs_cp, *grads_cp]):
        torch.testing.assert_close(a, b)
    assert kept_cp < kept_plain / 4, (kept_cp, kept_plain)  # Phi_p's hidden maps are not kept


# Table A5: size (M) with the ImageNet head, and the share of Phi_p (M)
TABLE_A5 = {'tiny': (7.6, 0.04), 'small': (21.3, 0.14), 'medium': (43.7, 0.31)}


@pytest.mark.parametrize('arch', sorted(TABLE_A5))
def test_sizes_with_imagenet_head_match_table_a5(arch):
    with torch.device('meta'):
        model = PerViT(arch, out_indices=(3,))  # norm3 is the official final norm
    size = sum(p.numel() for p in model.parameters()) + model.out_channels[-1] * 1000 + 1000
    phi_p = model.rpe_proj.weight.numel() + model.rpe_proj.bias.numel() + sum(
        p.numel() for block in model.blocks for p in block.attn.position.parameters())
    paper_size, paper_phi_p = TABLE_A5[arch]
    assert abs(size / 1e6 - paper_size) / paper_size < 0.03
    assert round(phi_p / 1e6, 2) == paper_phi_p


def test_bad_inputs_raise_one_line():
    with pytest.raises(ValueError, match="^PerViT: arch='huge'; expected one of"):
        PerViT('huge')
    with pytest.raises(ValueError, match='out_indices=\\(4,\\)'):
        PerViT('tiny', out_indices=(4,))
    with pytest.raises(ValueError, match='image of 8x64 is smaller than the stem stride 16'):
        PerViT(dict(num_heads=1, depths=(1,), embed_dims=(8,), stem_channels=(4, 4, 4, 8)),
               out_indices=(0,))(
            torch.randn(1, 3, 8, 64))
    with pytest.raises(ValueError, match='kernel_size=2'):
        PeripheralAttention(16, 2, kernel_size=2)
    with pytest.raises(ValueError, match='hw_shape'):
        PeripheralAttention(16, 2)(torch.randn(1, 10, 16), (3, 4))
