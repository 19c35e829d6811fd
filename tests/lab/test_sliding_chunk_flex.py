"""The experimental sliding-chunk attention through FlexAttention: the forward equals the masked
full-attention reference for every masking, neighbour mode (fixed and drawn on the device) and
global count, on partial chunks and odd grids, in float32 (1e-5) and bfloat16 (1e-2), eager and
under ``torch.compile``. Its gradients (CUDA only) are checked by the GPU proof against the same
reference. Where it cannot run (a backward on CPU, keys visited twice, a torch without
FlexAttention) it fails in one line."""
import itertools

import pytest
import torch

from lab.experimental import sliding_chunk_flex as flex
from mmvisattn.ops.sliding_chunk import MASKINGS, sliding_chunk_attention_reference
from mmvisattn.ops.sliding_chunk.layout import MODES

from ..test_ops.test_sliding_chunk import make_inputs


def sliding_chunk_attention(q, k, v, hw_shape, window, num_global=0, masking='chunk', mode=0,
                            rel_pos=None):
    return flex.sliding_chunk_attention_flex(q, k, v, hw_shape, window, num_global, masking, mode,
                                             rel_pos, q.shape[-1] ** -0.5)

FLOAT32_BOUND = dict(atol=1e-5, rtol=0)


def forward_pair(hw, window, num_global, masking, mode, dtype=torch.float32, drawn=False,
                 device='cpu'):
    q, k, v, tables = make_inputs(num_global=num_global, hw=hw, window=window, dtype=torch.float32,
                                  device=device)
    fast_mode = torch.tensor(mode, device=device) if drawn else mode
    with torch.no_grad():
        fast = sliding_chunk_attention(q.to(dtype), k.to(dtype), v.to(dtype), hw, window,
                                       num_global, masking, fast_mode, tables)
        slow = sliding_chunk_attention_reference(q, k, v, hw, window, num_global, masking, mode,
                                                 tables)
    return fast, slow


@pytest.mark.parametrize('masking,num_global', itertools.product(MASKINGS, (0, 1, 2)))
def test_flex_equals_reference_every_mode(masking, num_global):
    """Partial border chunks (5x7 at w 2) in every fixed and drawn mode, whole ones (9x9 at w 3) in
    modes 0 and -1 (several chunks a block in both), and chunks of more than one block (25x26 at w
    12)."""
    for hw, window, modes in (((5, 7), 2, MODES), ((9, 9), 3, (0, -1)), ((25, 26), 12, (0,))):
        for mode in modes:
            fast, slow = forward_pair(hw, window, num_global, masking, mode)
            torch.testing.assert_close(fast, slow, **FLOAT32_BOUND,
                                       msg=f'{hw} w{window} mode {mode}')
            if mode > 0:
                drawn, _ = forward_pair(hw, window, num_global, masking, mode, drawn=True)
                torch.testing.assert_close(drawn, slow, **FLOAT32_BOUND,
                                           msg=f'{hw} w{window} drawn {mode}')


def test_flex_bfloat16_within_1e_2():
    """Largest error over the largest reference value (bfloat16 outputs keep 8 bits of mantissa)."""
    fast, slow = forward_pair((11, 13), 3, 1, 'exact', 0, dtype=torch.bfloat16)
    assert fast.dtype == torch.bfloat16
    assert (fast.float() - slow).abs().max() <= 1e-2 * slow.abs().max()


def test_flex_compiled_equals_reference():
    """The whole op under ``torch.compile``: cyclic wrapping, two global tokens, a neighbour drawn
    on the device (its block tables picked inside the graph)."""
    q, k, v, tables = make_inputs(num_global=2, hw=(9, 10), window=3, dtype=torch.float32)
    compiled = torch.compile(sliding_chunk_attention)
    with torch.no_grad():
        fast = compiled(q, k, v, (9, 10), 3, 2, 'cyclic', torch.tensor(6), tables)
        slow = sliding_chunk_attention_reference(q, k, v, (9, 10), 3, 2, 'cyclic', 6, tables)
    torch.testing.assert_close(fast, slow, **FLOAT32_BOUND)


def test_flex_backward_on_cpu_fails_in_one_line():
    q, k, v, tables = make_inputs(hw=(5, 7), window=2, dtype=torch.float32)
    with pytest.raises(ValueError, match=r"^sliding_chunk_attention_flex: FlexAttention has no "
                                         r"backward on CPU \(forward only there; CUDA trains\)$"):
        sliding_chunk_attention(q, k, v, (5, 7), 2, 1, rel_pos=tables)


def test_flex_refuses_keys_visited_twice():
    """Cyclic wrapping on a grid of two chunk rows meets the same chunk as two neighbours."""
    q, k, v, _ = make_inputs(hw=(4, 7), window=2, dtype=torch.float32, rel_pos=False)
    assert not flex.visits_keys_once((4, 7), 2, 'cyclic',
                                     0) and flex.visits_keys_once((4, 7), 2, 'chunk', 0)
    with torch.no_grad(), pytest.raises(ValueError,
                                        match=r"a key is visited twice .*; expected impl='torch'$"):
        sliding_chunk_attention(q, k, v, (4, 7), 2, 1, 'cyclic')


def test_flex_names_a_torch_without_it(monkeypatch):
    monkeypatch.setattr(flex, 'HAS_FLEX', False)
    q, k, v, _ = make_inputs(hw=(5, 7), window=2, dtype=torch.float32, rel_pos=False)
    with torch.no_grad(), pytest.raises(ValueError,
                                        match=r'needs torch\.nn\.attention\.flex_attention'):
        sliding_chunk_attention(q, k, v, (5, 7), 2, 1)
