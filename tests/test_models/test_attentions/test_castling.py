"""LinearAngularAttention: deploy output equals training output once the auxiliary weight is 0,
deploy removes the quadratic branch, the official 'token' normalisation, and the schedule hook."""
from types import SimpleNamespace

import pytest
import torch

import mmvisattn  # noqa: F401
from mmvisattn.engine import CastlingScheduleHook
from mmvisattn.ops.linear_angular import linear_angular_attention_reference
from mmvisattn.ops.masked_softmax import masked_softmax_attention_reference
from mmvisattn.ops.utils.dispatch import recording_choices
from mmvisattn.registry import build_attention

from ...conftest import saved_elements


def castling(**options):
    torch.manual_seed(0)
    return build_attention(dict(type='LinearAngularAttention', **options), embed_dims=24,
                           num_heads=3).double()


@pytest.mark.parametrize('conv', ['tokens', 'spatial'])
@pytest.mark.parametrize('normalisation', ['kernel', 'token'])
def test_deploy_equals_training_at_zero_aux_weight(conv, normalisation):
    attn = castling(conv=conv, normalisation=normalisation, kernel_size=3)
    x = torch.randn(2, 5 * 7, 24, dtype=torch.float64)
    with_aux = attn(x, (5, 7))
    attn.aux_weight.fill_(0.0)
    faded = attn(x, (5, 7))
    assert not torch.allclose(with_aux, faded)
    attn.switch_to_deploy()
    torch.testing.assert_close(attn(x, (5, 7)), faded)
    assert attn.complexity == 'linear' and not attn.has_aux_branch


def test_kernel_normalisation_matches_reference():
    attn = castling(aux_branch=False)
    x = torch.randn(2, 4 * 6, 24, dtype=torch.float64)
    q, k, v = (attn.split_heads(t) for t in attn.qkv(x).chunk(3, dim=-1))
    expected = linear_angular_attention_reference(q, k, v) + attn.dconv(v)
    torch.testing.assert_close(attn(x, (4, 6)), attn.proj(attn.merge_heads(expected)))


def test_official_token_normalisation():
    """0.5 v + (1/pi) q^ (k^T v), each token L2-normalised, then dconv(v) added (official order)."""
    attn = castling(normalisation='token', aux_branch=False)
    x = torch.randn(1, 3 * 3, 24, dtype=torch.float64)
    q, k, v = (attn.split_heads(t) for t in attn.qkv(x).chunk(3, dim=-1))
    qn, kn = (torch.nn.functional.normalize(t, dim=-1) for t in (q, k))
    mixed = 0.5 * v + qn @ (kn.transpose(-1, -2) @ v) / torch.pi
    expected = mixed / mixed.norm(dim=-1, keepdim=True) + attn.dconv(v)
    torch.testing.assert_close(attn(x, (3, 3)), attn.proj(attn.merge_heads(expected)))


def test_switch_to_deploy_twice_is_named():
    attn = castling()
    attn.switch_to_deploy()
    with pytest.raises(RuntimeError, match=r'switch_to_deploy\(\) called twice'):
        attn.switch_to_deploy()


@pytest.mark.parametrize('options,message', [
    (dict(conv='3x3'), "conv='3x3'; expected one of"),
    (dict(normalisation='softmax'), "normalisation='softmax'; expected one of"),
    (dict(kernel_size=4), 'kernel_size=4 must be a positive odd integer'),
    (dict(aux_impl='flash'), "LinearAngularAttention: aux_impl='flash'; expected one of"),
])
def test_bad_settings_name_the_value(options, message):
    with pytest.raises(ValueError, match=message):
        castling(**options)


def test_schedule_hook_fades_then_removes_the_branch():
    attns = [castling(), castling()]
    model = torch.nn.Sequential(*attns)
    hook = CastlingScheduleHook(fade_start=0.5, fade_end=0.75)
    seen = []
    for iteration in range(100):
        hook.before_train_iter(SimpleNamespace(model=model, iter=iteration, max_iters=100),
                               iteration)
        seen.append((attns[0].has_aux_branch, float(attns[0].aux_weight)))
    assert seen[49] == (True, 1.0)
    assert seen[62] == (True, pytest.approx(1 - 12 / 25))
    assert seen[74] == (True, pytest.approx(1 / 25))
    assert seen[75] == (False, 0.0) and seen[99] == (False, 0.0)
    assert all(not a.has_aux_branch for a in attns)
    with pytest.raises(ValueError, match='fade_start=0.8, fade_end=0.5'):
        CastlingScheduleHook(fade_start=0.8, fade_end=0.5)


def test_schedule_hook_sets_the_weight_for_validation_and_deploys_for_testing():
    attn = castling()
    runner = SimpleNamespace(model=torch.nn.Sequential(attn), iter=60, max_iters=100)
    hook = CastlingScheduleHook(fade_start=0.5, fade_end=0.75)
    attn.aux_weight.fill_(1.0)  # what EMAHook's buffer swap leaves before validation
    hook.before_val_epoch(runner)
    assert attn.has_aux_branch and float(attn.aux_weight) == pytest.approx(0.6)
    hook.before_test_epoch(runner)
    assert not attn.has_aux_branch and float(attn.aux_weight) == 0.0


def test_token_conv_equals_the_official_conv2d():
    attn = castling()
    v = torch.randn(2, attn.num_heads, 37, attn.head_dims, dtype=torch.float64)
    torch.testing.assert_close(attn.token_conv(v), attn.dconv(v))


def test_auxiliary_branch_is_the_masked_softmax_with_the_modules_threshold():
    """The training branch (blocks recomputed in the backward) equals the literal masked softmax at
    the module's threshold, in value and gradients; with attn_drop in training it draws a dropout
    mask."""
    attn = castling(mask_threshold=0.05).train()
    q, k, v = (torch.randn(2, 3, 37, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
    branch, literal = attn.auxiliary(q, k, v), masked_softmax_attention_reference(q, k, v, 0.05)
    torch.testing.assert_close(branch, literal)
    upstream = torch.randn_like(branch)
    torch.testing.assert_close(torch.autograd.grad(branch, (q, k, v), upstream),
                               torch.autograd.grad(literal, (q, k, v), upstream))
    dropped = castling(mask_threshold=0.05, attn_drop=0.5).train()
    with recording_choices() as choices:
        assert not torch.allclose(dropped.auxiliary(q, k, v), literal)
        torch.testing.assert_close(dropped.eval().auxiliary(q, k, v), literal)
    assert [choice.chosen for choice in choices] == ['dense', 'torch']


def test_both_branches_on_their_other_backends_equal_the_torch_paths():
    """impl='triton' (the linear-angular kernels, under the interpreter on CPU) and aux_impl='dense'
    (every weight under autograd) against the torch paths: value and every parameter's gradient."""
    x = torch.randn(2, 5 * 7, 24, requires_grad=True)
    outputs, grads = [], []
    for options in (dict(impl='torch', aux_impl='torch'), dict(impl='triton', aux_impl='dense')):
        attn = castling(**options).float().train()
        with recording_choices() as choices:
            out = attn(x, (5, 7))
        assert {choice.op.name: choice.chosen for choice in choices} == {
            'linear_angular_attention': options['impl'],
            'masked_softmax_attention': options['aux_impl']}
        outputs.append(out)
        grads.append(torch.autograd.grad(out.square().sum(), (x, *attn.parameters())))
    torch.testing.assert_close(*outputs, rtol=1e-4, atol=1e-5)
    for fast, slow in zip(*grads):
        torch.testing.assert_close(fast, slow, rtol=1e-4, atol=1e-5)


def test_training_form_saves_memory_linear_in_the_tokens():
    """The auxiliary softmax's weights are recomputed block by block in the backward, never kept:
    a layer in its training form saves linearly growing activations (4x the tokens, at most 4.5x the
    elements; the N x N weights alone would grow 16x)."""
    torch.manual_seed(0)
    attn = build_attention(dict(type='LinearAngularAttention'), embed_dims=48, num_heads=3).train()
    saved = {}
    for side in (16, 32):
        x = torch.randn(2, side * side, 48, requires_grad=True)
        saved[side] = saved_elements(lambda: attn(x, (side, side)))  # noqa: B023
    assert saved[32] <= 4.5 * saved[16], saved
    assert saved[32] < 2 * 3 * (32 * 32) ** 2  # less than one batch's N x N weights
