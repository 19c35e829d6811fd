"""Sliding-chunk op (arXiv:2103.15358, App. C, D): the torch path with its hand-written backward,
the C++ CPU kernels, the dense path (one SDPA call with the pattern as a bias) and the Triton
kernels equal the masked full-attention reference in value and gradient (queries, keys, values and
the three bias tables) for every masking and neighbour mode, odd grids, batch 2 and 0 / 1 / 2 global
tokens, float32 and half inputs; float64 gradcheck; border chunks compute only their live slots;
saved memory grows with N d, as SDPA's; a window larger than the map is full attention; ``auto``
takes the dense form on CPU up to the measured crossover and the C++ kernels beyond; bad arguments
and a failed kernel build are named; a drawn neighbour (random shifting, a tensor on the device)
equals its mode in every fast path. The torch path runs on every device of the suite; Triton
compiled on a GPU, else under TRITON_INTERPRET=1 on CPU."""
import itertools
import os
import shutil
import sys
import types

import pytest
import torch
import torch.nn.functional as F

from mmvisattn.ops.sliding_chunk import (
    MASKINGS,
    OP,
    sliding_chunk_attention,
    sliding_chunk_attention_reference,
)
from mmvisattn.ops.sliding_chunk.dense import dense_is_faster, visits_once
from mmvisattn.ops.sliding_chunk.layout import MODES, chunk_groups, slot_tables
from mmvisattn.ops.sliding_chunk.pattern import visited_pairs
from mmvisattn.ops.utils import cpu_extension
from mmvisattn.ops.utils.cpu_extension import OPS_DIR, CpuKernelBuildError, load_cpu_kernels
from mmvisattn.ops.utils.dispatch import observing

from ..conftest import KERNEL_DEVICE, float64_dot, kernel_tolerance, saved_elements


def make_inputs(batch=2, heads=2, num_global=1, hw=(5, 7), dims=4, window=2, rel_pos=True,
                dtype=torch.float64, device='cpu'):
    generator = torch.Generator().manual_seed(hw[0] * 31 + hw[1] + 7 * num_global)
    tokens = num_global + hw[0] * hw[1]

    def rand(*shape):
        return torch.randn(*shape, generator=generator, dtype=dtype).to(device).requires_grad_()

    q, k, v = (rand(batch, heads, tokens, dims) for _ in range(3))
    side = 4 * window - 1
    tables = None
    if rel_pos:
        tables = (rand(side * side, heads), rand(2, heads, num_global) if num_global else None,
                  rand(heads, num_global, num_global) if num_global else None)
    return q, k, v, tables


def leaves(q, k, v, tables):
    return [q, k, v] + [t for t in (tables or ()) if t is not None]


def assert_matches_reference(impl, hw, window, num_global, masking, mode, dtype=torch.float64,
                             tol=None, drawn=False, **kw):
    """``impl`` against the reference; ``drawn``: ``mode`` given as a neighbour drawn on the
    device."""
    q, k, v, tables = make_inputs(num_global=num_global, hw=hw, window=window, dtype=dtype, **kw)
    fast_mode = torch.tensor(mode, device=q.device) if drawn else mode
    fast = sliding_chunk_attention(q, k, v, hw, window, num_global, masking, fast_mode, tables,
                                   impl=impl)
    slow = sliding_chunk_attention_reference(q, k, v, hw, window, num_global, masking, mode, tables)
    tol = tol or {}
    torch.testing.assert_close(fast, slow, **tol)
    weights = torch.randn_like(slow)
    inputs = leaves(q, k, v, tables)
    for a, b in zip(torch.autograd.grad((fast * weights).sum(), inputs),
                    torch.autograd.grad((slow * weights).sum(), inputs)):
        torch.testing.assert_close(a, b, **tol)


@pytest.mark.parametrize('impl', ['cpu', 'dense'])
@pytest.mark.parametrize('masking,mode,num_global',
                         itertools.product(MASKINGS, (0, -1, 2, 5), (0, 1, 2)))
def test_fast_paths_equal_reference_every_mode(impl, masking, mode, num_global):
    assert_matches_reference(impl, (5, 7), 2, num_global, masking, mode)


@pytest.mark.parametrize('masking,mode,num_global',
                         itertools.product(MASKINGS, (0, -1, 2, 5), (0, 1, 2)))
def test_torch_path_equals_reference_every_mode_on_every_device(masking, mode, num_global, device):
    assert_matches_reference('torch', (5, 7), 2, num_global, masking, mode, device=device)


@pytest.mark.parametrize('impl', ['torch', 'cpu'])
@pytest.mark.parametrize('masking', MASKINGS)
@pytest.mark.parametrize('mode', [1, 4, 8])
def test_drawn_neighbour_equals_its_mode(impl, masking, mode):
    """Random shifting hands the op its neighbour as a tensor on the device; the tables of the eight
    modes are stacked once and the drawn one picked there: the same values and gradients as the
    mode."""
    assert_matches_reference(impl, (5, 7), 2, 1, masking, mode, drawn=True)


def test_drawn_neighbour_refuses_dense_and_bad_tensors():
    q, k, v, tables = make_inputs()
    drawn = torch.tensor(3)
    with pytest.raises(ValueError,
                       match=r"impl='dense'\): a drawn neighbour \(random shifting\) is picked"):
        sliding_chunk_attention(q, k, v, (5, 7), 2, 1, 'chunk', drawn, tables, impl='dense')
    with pytest.raises(ValueError,
                       match=r'a drawn mode must be a 0-dim integer tensor on cpu holding one of'):
        sliding_chunk_attention(q, k, v, (5, 7), 2, 1, 'chunk', torch.tensor([3]), tables)
    with pytest.raises(ValueError, match=r'a drawn mode must be a 0-dim integer tensor'):
        sliding_chunk_attention(q, k, v, (5, 7), 2, 1, 'chunk', torch.tensor(3.0), tables)


ODD_GRIDS = [((1, 1), 1), ((3, 10), 3), ((4, 4), 2), ((2, 3), 1), ((9, 5), 2)]


@pytest.mark.parametrize('impl', ['torch', 'cpu'])
@pytest.mark.parametrize('hw,window', ODD_GRIDS)
@pytest.mark.parametrize('masking', MASKINGS)
def test_sliding_chunks_equal_reference_odd_grids(impl, hw, window, masking):
    # grids of one and two chunks too, where cyclic neighbours repeat and the reference merges them
    assert_matches_reference(impl, hw, window, 1, masking, 0)


@pytest.mark.parametrize('dtype,bound', [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_cpu_kernels_equal_reference_in_float32_and_half(dtype, bound):
    """The float32 kernels (vectorised exp) on a 28x28 map at w 7, batch 2, against the float64
    reference of the same inputs: largest error over largest value. bfloat16 inputs are computed in
    float32 and come back, gradients included, in bfloat16; measured 3e-3 on the output and 1.2e-2
    on the bias table's gradient, which autograd sums in bfloat16 outside the kernels, as on the
    torch path (the same figures there)."""
    q, k, v, tables = make_inputs(batch=2, heads=3, num_global=1, hw=(28, 28), dims=8, window=7,
                                  dtype=dtype)
    out = sliding_chunk_attention(q, k, v, (28, 28), 7, 1, 'chunk', 0, tables, impl='cpu')
    inputs = leaves(q, k, v, tables)
    exact = [x.detach().double().requires_grad_() for x in inputs]
    reference = sliding_chunk_attention_reference(*exact[:3], (28, 28), 7, 1, 'chunk', 0, exact[3:])
    weights = torch.randn(reference.shape, generator=torch.Generator().manual_seed(0),
                          dtype=torch.float64)
    grads = torch.autograd.grad((out.double() * weights).sum(), inputs)
    expected = torch.autograd.grad((reference * weights).sum(), exact)
    assert out.dtype == dtype and all(grad.dtype == dtype for grad in grads)
    for got, want in zip((out, *grads), (reference, *expected)):
        assert (got.double() - want).abs().max() <= bound * want.abs().max()


@pytest.mark.parametrize('hw,window', ODD_GRIDS)
@pytest.mark.parametrize('masking', ['chunk', 'exact'])
def test_dense_equals_reference_odd_grids(hw, window, masking):
    assert_matches_reference('dense', hw, window, 1, masking, 0)


def test_dense_refuses_keys_visited_twice():
    """Cyclic wrapping on a grid of one or two chunks visits a key in several slots, each with its
    own bias, which one additive bias per pair cannot hold: dense asked for fails in one line, auto
    stays on the sliding chunks."""
    q, k, v, tables = make_inputs(hw=(3, 10), window=3)
    with pytest.raises(ValueError,
                       match=r"^sliding_chunk_attention\(impl='dense'\): masking='cyclic' on a "
                       r"3x10 "
                                         r'map of window 3 visits some keys twice; the dense bias '
                                         r'holds one per pair$'):
        sliding_chunk_attention(q, k, v, (3, 10), 3, 1, 'cyclic', rel_pos=tables, impl='dense')
    assert dense_is_faster((3, 10), 3, 1, 0) and not visits_once((3, 10), 3, 'cyclic', 0)


@pytest.mark.parametrize('masking', MASKINGS)
def test_visits_once_on_the_chunk_grid_equals_the_pattern(masking):
    """The chunk-grid answer against the count of every query's visits to every key, from token
    coordinates: grids of one to four chunks a side, every mode."""
    for hw, window, mode in itertools.product([(3, 10), (4, 7), (5, 5), (7, 12), (2, 2)], (2, 3),
                                              MODES):
        visits = sum(match.long() for match, _ in visited_pairs(hw, window, masking, mode))
        assert visits_once(hw, window, masking,
                           mode) == bool((visits <= 1).all()), (hw, window, mode)


@pytest.mark.parametrize('impl', ['torch', 'cpu', 'dense'])
def test_fast_paths_equal_reference_without_bias(impl):
    assert_matches_reference(impl, (6, 5), 2, 1, 'chunk', 0, rel_pos=False)


def test_dense_equals_sliding_chunks_at_the_crossover():
    """w 7 with one global token: 19x18 (343 tokens, 0.78 of a query's 442 slots) is the largest map
    ``auto`` runs dense; there and on the map one row larger the dense form, the torch path and the
    C++ kernels agree in float32."""
    for hw in [(19, 18), (19, 19)]:
        q, k, v, tables = make_inputs(batch=2, heads=2, num_global=1, hw=hw, dims=8, window=7,
                                      dtype=torch.float32)
        dense = sliding_chunk_attention(q, k, v, hw, 7, 1, rel_pos=tables, impl='dense')
        inputs, weights = leaves(q, k, v, tables), torch.randn_like(dense)
        dense_grads = torch.autograd.grad((dense * weights).sum(), inputs)
        for impl in ('torch', 'cpu'):
            linear = sliding_chunk_attention(q, k, v, hw, 7, 1, rel_pos=tables, impl=impl)
            torch.testing.assert_close(dense, linear, rtol=1e-4, atol=1e-5)
            for a, b in zip(dense_grads, torch.autograd.grad((linear * weights).sum(), inputs)):
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize('budget', [1, 200])
@pytest.mark.parametrize('masking', MASKINGS)
def test_slices_of_chunks_equal_reference(monkeypatch, budget, masking):
    """Large maps run in slices of heads and chunks: one chunk of one head per slice (budget 1)
    and a few chunks per slice give the reference's values and gradients."""
    monkeypatch.setattr('mmvisattn.ops.sliding_chunk.pytorch.SCORE_BUDGET', budget)
    assert_matches_reference('torch', (7, 9), 2, 1, masking, 0)


@pytest.mark.parametrize('masking', MASKINGS)
def test_chunk_groups_keep_exactly_the_live_slots(masking):
    """Every chunk is in one group, whose slots are the columns some query of the chunk may use, in
    the tables' order; on a 28x28 map at w 7 (4x4 chunks) corner chunks keep 1 + 4 w^2 slots, edge
    chunks 1 + 6 w^2, inner ones all 1 + 9 w^2."""
    index, invalid = slot_tables((28, 28), 7, 1, masking, 0, torch.device('cpu'))
    groups = chunk_groups((28, 28), 7, 1, masking, 0, torch.device('cpu'))
    assert chunk_groups((28, 28), 7, 1, masking, 0, torch.device('cpu')) is groups  # cached
    seen = torch.zeros(index.shape[0], dtype=torch.long)
    for group in groups:
        chunks = torch.arange(index.shape[0]) if group.chunks is None else group.chunks
        seen[chunks] += 1
        columns = torch.arange(index.shape[1]) if group.columns is None else group.columns
        live = ~invalid[chunks].all(dim=1)
        assert live[:, columns].all() and live.sum(dim=1).eq(len(columns)).all()
        assert torch.equal(group.index, index[chunks][:, columns])
        masked = invalid[chunks][..., columns]
        assert (group.invalid is None and not masked.any()) or torch.equal(group.invalid, masked)
    assert seen.eq(1).all()
    if masking == 'chunk':
        slots = sorted(
            group.index.shape[1] for group in groups for _ in range(group.index.shape[0])
        )
        assert slots == [197] * 4 + [295] * 8 + [442] * 4


def assert_gradcheck(impl, q, k, v, tables):
    def fn(q, k, v, table, g2l, g2g):
        return sliding_chunk_attention(q, k, v, (3, 4), 2, 1, 'exact', 0, (table, g2l, g2g),
                                       impl=impl)

    assert torch.autograd.gradcheck(fn, (q, k, v, *tables))


@pytest.mark.parametrize('impl', ['torch', 'cpu', 'dense'])
def test_gradcheck_hand_written_backward(impl):
    """The backwards of the torch path and the C++ kernels, and the dense path's gather of the bias,
    whose gradient is added back by one index_add_."""
    q, k, v, tables = make_inputs(batch=1, heads=2, num_global=1, hw=(3, 4), dims=2, window=2)
    assert_gradcheck(impl, q, k, v, tables)


def test_gradcheck_torch_path_on_every_device(device):
    assert_gradcheck('torch', *make_inputs(batch=2, heads=2, num_global=1, hw=(3, 4), dims=2,
                                           window=2, device=device))


@pytest.mark.parametrize('masking', MASKINGS)
def test_window_larger_than_map_is_full_attention(masking):
    # cyclic padding repeats the one chunk nine times: full attention over the map, but a global
    # token would then weigh 1/9 of a local one, so the cyclic case is checked without one
    num_global = 0 if masking == 'cyclic' else 1
    q, k, v, _ = make_inputs(num_global=num_global, hw=(5, 6), window=8, rel_pos=False)
    full = F.scaled_dot_product_attention(q, k, v)
    for impl in ('torch', 'cpu'):
        torch.testing.assert_close(
            sliding_chunk_attention(q, k, v, (5, 6), 8, num_global, masking, impl=impl), full
        )
    if masking != 'cyclic':
        torch.testing.assert_close(
            sliding_chunk_attention(q, k, v, (5, 6), 8, num_global, masking, impl='dense'), full
        )
    torch.testing.assert_close(
        sliding_chunk_attention_reference(q, k, v, (5, 6), 8, num_global, masking), full
    )


def test_exact_window_is_the_conv_like_neighbourhood():
    # a key's value reaches a query only within w along both axes
    hw, window = (9, 9), 2
    q, k, _, _ = make_inputs(batch=1, heads=1, num_global=0, hw=hw, window=window, rel_pos=False)
    v = torch.eye(81, dtype=torch.float64)[None, None]
    weights = sliding_chunk_attention(q.detach(), k.detach(), v, hw, window, masking='exact',
                                      impl='torch')[0, 0]
    pos = torch.arange(81)
    near = ((pos[:, None] // 9
             - pos[None] // 9).abs() <= window) & ((pos[:, None] % 9
                                                    - pos[None] % 9).abs() <= window)
    assert (weights[~near] == 0).all() and (weights[near] > 0).all()


@pytest.mark.parametrize('impl', ['torch', 'cpu'])
@pytest.mark.parametrize('masking', MASKINGS)
def test_saved_tensors_grow_linearly_like_sdpa(impl, masking):
    """The backward recomputes the probabilities (the C++ kernels from one log-sum-exp per query):
    per token and head the op saves its inputs and output, ``4 d`` values, plus the global query's
    probability of the token, its padding flag (a cached table) and the C++ kernels' log-sum-exp
    (the probabilities were ``G + 9 w^2``: 145 here), the same order as SDPA's saved tensors. The
    global rows read the key tables the local attention saves, so ``k`` and ``v`` are not kept
    twice."""
    dims, window = 4, 4

    def saved(side):
        q, k, v, tables = make_inputs(batch=1, heads=1, num_global=1, hw=(side, side), dims=dims,
                                      window=window, dtype=torch.float32)
        return saved_elements(
            lambda: sliding_chunk_attention(
                q, k, v, (side, side), window, 1, masking, rel_pos=tables, impl=impl
            )
        )

    # per added token (the bias tables and slot indices are a constant, the same at every size)
    small, medium, large = saved(16), saved(32), saved(64)
    first, second = (medium - small) / (32 ** 2 - 16 ** 2), (large - medium) / (64 ** 2 - 32 ** 2)
    assert second == 4 * dims + 2 + int(impl == 'cpu')
    assert abs(second - first) < 0.1 * first  # linear growth


def test_auto_follows_the_measured_crossover():
    """On CPU ``auto`` runs the dense form while the map holds at most 0.8 of a query's slots (w 7,
    one global token, mode 0: 353 of 442 tokens, 19x18), the C++ sliding chunks beyond; ``impl``
    forces any."""
    assert dense_is_faster((18, 18), 7, 1, 0) and dense_is_faster((19, 18), 7, 1, 0) \
        and not dense_is_faster((19, 19), 7, 1, 0)
    assert dense_is_faster((6, 6), 7, 0, -1) and not dense_is_faster((6, 7), 7, 0, -1)
    picked = []

    def record(op, impl, request):  # the backend chosen, none run
        return (lambda q, *args: picked.append(op.choose(impl, request)) or q) if op is OP else None

    with observing(record):
        for hw, impl in [((19, 18), 'auto'), ((19, 19), 'auto'), ((19, 18), 'torch'),
                         ((19, 18), 'cpu'), ((19, 19), 'dense')]:
            q, k, v, _ = make_inputs(batch=1, heads=1, num_global=1, hw=hw, dims=2, window=7,
                                     rel_pos=False)
            sliding_chunk_attention(q, k, v, hw, 7, 1, impl=impl)
    assert picked == ['dense', 'cpu', 'torch', 'cpu', 'dense']


def test_cpu_kernels_refuse_other_devices():
    q = torch.zeros(1, 1, 5, 2, device='meta')
    with pytest.raises(ValueError,
                       match=r"^sliding_chunk_attention\(impl='cpu'\): C\+\+ kernels for CPU "
                       r"tensors; "
                                         r'these are on meta$'):
        sliding_chunk_attention(q, q, q, (2, 2), 2, 1, impl='cpu')


def test_failed_kernel_build_is_one_line(monkeypatch):
    """A compiler error (many lines from ninja) becomes one line naming the source and the way round
    it."""
    def failing_load(**kwargs):
        raise RuntimeError('Error building extension \'mmvisattn_sliding_chunk_cpu\'\nninja: build '
                           'stopped\n...')

    monkeypatch.setattr('torch.utils.cpp_extension.load', failing_load)
    with pytest.raises(CpuKernelBuildError) as error:
        load_cpu_kernels.__wrapped__('sliding_chunk')
    message, source = str(error.value), OPS_DIR / 'sliding_chunk' / 'cpu.cpp'
    assert '\n' not in message and message.startswith(
        f'{source}: the CPU kernels did not compile ('
    )
    assert ("Error building extension 'mmvisattn_sliding_chunk_cpu'" in message
            and "impl='torch'" in message)


def test_every_process_builds_with_the_pip_ninja(monkeypatch, tmp_path):
    """Whatever ninja comes first on a process's PATH (a machine's own, another version), the build
    runs pip's: two versions hash a command differently and would each rebuild what the other
    built."""
    folders = {name: tmp_path / name for name in ('machine', 'pip')}
    for folder in folders.values():
        folder.mkdir()
        (folder / 'ninja').write_text('#!/bin/sh\n')
        (folder / 'ninja').chmod(0o755)
    monkeypatch.setitem(sys.modules, 'ninja', types.SimpleNamespace(BIN_DIR=str(folders['pip'])))
    monkeypatch.setenv('PATH', os.pathsep.join([str(folders['machine']), os.environ['PATH']]))
    cpu_extension._put_ninja_on_path()
    assert shutil.which('ninja') == str(folders['pip'] / 'ninja')
    path = os.environ['PATH']
    cpu_extension._put_ninja_on_path()
    assert os.environ['PATH'] == path  # already first: PATH does not grow with every build


def test_a_relative_path_to_the_pip_ninja_is_made_absolute(monkeypatch, tmp_path):
    """``PATH=.venv/bin:...`` finds pip's ninja here, but torch runs ninja in the build folder,
    where the relative entry names nothing: the pip ninja goes first by its absolute path."""
    (tmp_path / 'bin').mkdir()
    (tmp_path / 'bin' / 'ninja').write_text('#!/bin/sh\n')
    (tmp_path / 'bin' / 'ninja').chmod(0o755)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, 'ninja', types.SimpleNamespace(BIN_DIR=str(tmp_path / 'bin')))
    monkeypatch.setenv('PATH', os.pathsep.join(['bin', os.environ['PATH']]))
    cpu_extension._put_ninja_on_path()
    assert os.environ['PATH'].split(os.pathsep)[0] == str(tmp_path / 'bin')


@pytest.mark.parametrize('kwargs,message', [
    (dict(window=0), 'window=0; expected a positive integer'),
    (dict(window=2.5), 'window=2.5; expected a positive integer'),
    (dict(window=True), 'window=True; expected a positive integer'),
    (dict(masking='padded'), "masking='padded'; expected one of"),
    (dict(mode=9), 'mode=9; expected an integer in -1..8'),
    (dict(impl='cuda'), "impl='cuda'; expected one of"),
    (dict(hw_shape=(5, 6)), r'does not hold 1 global \+ 5x6 tokens'),
])
def test_bad_arguments_are_named(kwargs, message):
    q, k, v, _ = make_inputs(rel_pos=False)
    args = dict(hw_shape=(5, 7), window=2, num_global=1)
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        sliding_chunk_attention(q, k, v, **args)


@pytest.mark.parametrize('masking,mode,num_global',
                         [('chunk', 0, 1), ('exact', 0, 2), ('cyclic', 3, 0), ('chunk', -1, 1)])
def test_triton_equals_reference(masking, mode, num_global):
    assert_matches_reference('triton', (5, 3), 2, num_global, masking, mode, dtype=torch.float32,
                             tol=kernel_tolerance(KERNEL_DEVICE), batch=1, device=KERNEL_DEVICE)


def test_triton_takes_a_drawn_neighbour():
    assert_matches_reference('triton', (5, 7), 2, 1, 'chunk', 6, dtype=torch.float32,
                             tol=kernel_tolerance(KERNEL_DEVICE), batch=1, device=KERNEL_DEVICE,
                             drawn=True)


def test_triton_bias_gradient_shares_add_up(monkeypatch):
    """Two programs per (head, neighbour) summing the bias gradient of 12 chunks in registers, their
    tables summed after the kernel."""
    monkeypatch.setattr('mmvisattn.ops.sliding_chunk.triton.BIAS_SHARES', 2)
    assert_matches_reference('triton', (5, 7), 2, 1, 'chunk', 0, dtype=torch.float32,
                             tol=kernel_tolerance(KERNEL_DEVICE), batch=1, device=KERNEL_DEVICE)


@pytest.mark.parametrize('hw,window,masking',
                         [((9, 5), 4, 'chunk'), ((5, 6), 8, 'exact'), ((8, 9), 7, 'chunk')])
def test_triton_odd_grids_and_key_blocks(hw, window, masking):
    """Chunks cut by the map's border, a window larger than the map, and ViL's window 7 (49 keys a
    chunk in blocks of KEY_BLOCK, the last one partly past the chunk), two images."""
    assert_matches_reference('triton', hw, window, 1, masking, 0, dtype=torch.float32,
                             tol=kernel_tolerance(KERNEL_DEVICE), batch=2, device=KERNEL_DEVICE)


@float64_dot
def test_triton_gradcheck_float64():
    """The kernels' hand-written backward in float64 (which the op refuses: only this test passes
    it, to the kernels' function), gradcheck's fast mode (random projections of the Jacobian: the
    interpreter is slow), every bias table, a global token and the exact window."""
    from mmvisattn.ops.sliding_chunk.triton import sliding_chunk_attention_triton
    q, k, v, tables = make_inputs(batch=1, heads=1, num_global=1, hw=(3, 4), dims=2, window=2,
                                  device=KERNEL_DEVICE)

    def fn(q, k, v, table, g2l, g2g):
        return sliding_chunk_attention_triton(q, k, v, (3, 4), 2, 1, 'exact', 0, (table, g2l, g2g),
                                              0.7)

    assert torch.autograd.gradcheck(fn, (q, k, v, *tables), fast_mode=True)
