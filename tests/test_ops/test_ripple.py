"""Ripple op (arXiv:2110.02453): the spatial weights (Eq. 5, C.3, tau, Eq. 6), the explicit
reference against a per-token loop, and every backend (the local/global split with its torch tiles,
its dense blocks, its C++ and its Triton local part) against the reference in value and every
gradient -- odd maps, batch and heads with per-head weights, R_max beyond the map, the tau merge,
the torch paths on every device of the suite; the crossover ``auto`` follows. Triton runs compiled
on a GPU, else on CPU under TRITON_INTERPRET=1 (set by tests/conftest.py)."""
import pytest
import torch

from mmvisattn.ops.ripple import (
    OP,
    group_weights,
    ring_weights,
    ripple_attention,
    ripple_attention_reference,
)
from mmvisattn.ops.ripple.cpu import cpu_backward, cpu_forward
from mmvisattn.ops.ripple.dense import dense_backward, dense_forward, dense_is_faster
from mmvisattn.ops.ripple.local_global import (
    RippleLocalGlobal,
    query_reach,
    ring_weights_reference,
    stick_breaking,
    truncate,
)
from mmvisattn.ops.ripple.pytorch import tiled_backward, tiled_forward
from mmvisattn.ops.utils.dispatch import observing

from ..conftest import KERNEL_DEVICE, kernel_tolerance


def inputs(hw_shape, r_max, batch=2, heads=3, dims=4, value_dims=5, dtype=torch.float64, scale=2.0,
           device='cpu'):
    torch.manual_seed(hw_shape[0] * 100 + hw_shape[1] * 10 + r_max)
    tokens = hw_shape[0] * hw_shape[1]
    # features are >= 0
    q, k = (torch.rand(batch, heads, tokens, dims, dtype=dtype) for _ in range(2))
    v = torch.randn(batch, heads, tokens, value_dims, dtype=dtype)
    logits = torch.randn(batch, heads, tokens, r_max, dtype=dtype) * scale
    return [t.to(device).requires_grad_() for t in (q, k, v, logits)]


# (H, W, R_max, tau): odd maps, R_max beyond the map (merged set empty), one token, R_max = 1, and a
# large tau so that r_hat < R_max and the merge of Eq. 6 starts early for many queries
CASES = [(5, 7, 3, 1e-3), (9, 4, 4, 1e-3), (4, 4, 6, 1e-3), (1, 1, 2, 1e-3), (6, 5, 1, 1e-3),
         (7, 6, 4, 0.3)]


def assert_matches_reference(impl, hw_shape, r_max, tau, dtype=torch.float64, tol=None, **sizes):
    """``impl``: a backend's name, or a function of ``(q, k, v, logits, hw_shape, tau, eps)``."""
    args = inputs(hw_shape, r_max, dtype=dtype, **sizes)
    if callable(impl):
        fast = impl(*args, hw_shape, tau, 1e-6)
    else:
        fast = ripple_attention(*args, hw_shape, tau, impl=impl)
    slow = ripple_attention_reference(*args, hw_shape, tau)
    torch.testing.assert_close(fast, slow, **(tol or {}))
    weights = torch.randn_like(slow)
    fast_grads = torch.autograd.grad((fast * weights).sum(), args)
    slow_grads = torch.autograd.grad((slow * weights).sum(), args)
    for name, a, b in zip('q k v logits'.split(), fast_grads, slow_grads):
        torch.testing.assert_close(a, b, **(tol or {}), msg=lambda m: f'd{name}: {m}')  # noqa: B023


@pytest.mark.parametrize('impl', ['dense', 'cpu'])
@pytest.mark.parametrize('height,width,r_max,tau', CASES)
def test_fast_paths_equal_reference(impl, height, width, r_max, tau):
    assert_matches_reference(impl, (height, width), r_max, tau)


@pytest.mark.parametrize('height,width,r_max,tau', CASES)
def test_torch_path_equals_reference_on_every_device(height, width, r_max, tau, device):
    assert_matches_reference('torch', (height, width), r_max, tau, device=device)


@pytest.mark.parametrize('budget', [1, 600, 2000])
@pytest.mark.parametrize('height,width,r_max', [(9, 7, 2), (6, 11, 3)])
def test_chunks_of_tile_rows_equal_reference(monkeypatch, budget, height, width, r_max):
    """Large maps run in chunks of tile rows of one slice (their halos overlap the next chunk's):
    one tile row per chunk (budget 1) and a few give the reference's values and gradients."""
    monkeypatch.setattr('mmvisattn.ops.ripple.pytorch.CHUNK_ELEMENTS', budget)
    assert_matches_reference('torch', (height, width), r_max, 1e-3)


@pytest.mark.parametrize('height,width,r_max', [(40, 37, 4), (50, 9, 2)])
def test_cpu_bands_of_tile_rows_equal_reference(height, width, r_max):
    """The C++ backward runs bands of tile rows in parallel, in two passes so that no two add into
    the same keys: 2 bands of 5 tile rows (R_max 4, tile 4), 12 bands of about 2 (R_max 2, tile
    2)."""
    assert_matches_reference('cpu', (height, width), r_max, 1e-3, batch=1, heads=2)


def test_cpu_kernels_refuse_other_devices():
    q = torch.zeros(1, 4, 2, device='meta')
    with pytest.raises(ValueError,
                       match=r"^ripple_attention\(impl='cpu'\): C\+\+ kernels for CPU tensors; "
                                         r'these are on meta$'):
        ripple_attention(q, q, q, q, (2, 2), impl='cpu')


@pytest.mark.parametrize('budget', [1, 100])
@pytest.mark.parametrize('height,width,r_max', [(9, 7, 2), (6, 11, 3)])
def test_dense_blocks_of_queries_equal_reference(monkeypatch, budget, height, width, r_max):
    """The dense local part runs in blocks of queries: one query per block (budget 1) and a few give
    the reference's values and gradients."""
    monkeypatch.setattr('mmvisattn.ops.ripple.dense.SCORE_BUDGET', budget)
    assert_matches_reference('dense', (height, width), r_max, 1e-3)


@pytest.mark.parametrize('hw_shape', [(18, 18), (19, 18)])
def test_dense_equals_tiled_at_the_crossover(hw_shape):
    """Where ``auto`` switches (R_max 8: 18x18 dense, beyond it the C++ tiles), the dense form, the
    torch tiles and the C++ tiles give the same values and gradients in float32."""
    args = [
        t.detach().float().requires_grad_()
        for t in inputs(hw_shape, 8, batch=1, heads=2, dims=8, value_dims=8)
    ]
    dense = ripple_attention(*args, hw_shape, impl='dense')
    weights = torch.randn_like(dense)
    dense_grads = torch.autograd.grad((dense * weights).sum(), args)
    for impl in ('torch', 'cpu'):
        tiled = ripple_attention(*args, hw_shape, impl=impl)
        torch.testing.assert_close(dense, tiled, rtol=1e-4, atol=1e-5)
        for a, b in zip(dense_grads, torch.autograd.grad((tiled * weights).sum(), args)):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_auto_follows_the_measured_crossover():
    """On CPU ``auto`` runs the dense local part up to ``0.8 x`` the tiled work per query in tokens
    (R_max 8: 324 tokens), the C++ tiles beyond; ``impl`` forces any."""
    assert dense_is_faster((18, 18), 8) and not dense_is_faster((19, 18), 8)
    assert dense_is_faster((10, 10), 4) and not dense_is_faster((11, 10), 4)
    picked = []

    def record(op, impl, request):  # the backend chosen, none run
        return (lambda *args: picked.append(op.choose(impl, request))) if op is OP else None

    with observing(record):
        for hw_shape, impl in [((18, 18), 'auto'), ((19, 18), 'auto'), ((18, 18), 'torch'),
                               ((18, 18), 'cpu'), ((19, 18), 'dense')]:
            q, k, v, logits = (
                t.detach() for t in inputs(hw_shape, 8, batch=1, heads=1, dims=2, value_dims=2)
            )
            ripple_attention(q, k, v, logits, hw_shape, impl=impl)
    assert picked == ['dense', 'cpu', 'torch', 'cpu', 'dense']


@pytest.mark.parametrize('height,width,r_max,tau', [(5, 7, 2, 1e-3), (3, 4, 4, 0.3)])
def test_triton_equals_reference(height, width, r_max, tau):
    assert_matches_reference('triton', (height, width), r_max, tau, dtype=torch.float32,
                             tol=kernel_tolerance(KERNEL_DEVICE), batch=1, heads=2,
                             device=KERNEL_DEVICE)


LOCAL_PARTS = [(tiled_forward, tiled_backward), (dense_forward, dense_backward),
               (cpu_forward, cpu_backward)]


@pytest.mark.parametrize('local', LOCAL_PARTS, ids=['tiled', 'dense', 'cpu'])
def test_gradcheck_local_global_backward(local):
    """The hand-written backward of the local part (tiled: overlapping halos folded back; dense: the
    weights' gradients added back by group; C++: the halos added into the maps) together with the
    global sums and the normalisation, in float64."""
    torch.manual_seed(0)
    hw_shape, r_max = (3, 5), 3
    args = [torch.rand(2, 15, 3, dtype=torch.float64), torch.rand(2, 15, 3, dtype=torch.float64),
            torch.randn(2, 15, 2, dtype=torch.float64),
            torch.randn(2, 15, r_max, dtype=torch.float64), torch.rand(2, 15, dtype=torch.float64)]
    assert torch.autograd.gradcheck(lambda *a: RippleLocalGlobal.apply(*a, hw_shape, 1e-6, local),
                                    [t.requires_grad_() for t in args], fast_mode=True)


def test_reference_equals_per_token_loop():
    """Eq. 4 and 6 spelt out for every (query, token) pair with Python scalars."""
    hw_shape, r_max, tau = (4, 5), 2, 0.2
    q, k, v, logits = (t.detach() for t in inputs(hw_shape, r_max, batch=1, heads=1))
    alpha, _ = stick_breaking(logits)
    expected = torch.zeros_like(v)
    positions = [(i, j) for i in range(4) for j in range(5)]
    for query, (i, j) in enumerate(positions):
        a = alpha[0, 0, query].tolist()
        r_hat = next((r for r in range(r_max) if 1 - sum(a[:r + 1]) < tau), r_max)
        reach = max(i, 3 - i, j, 4 - j)
        share = (1 - sum(a[:r_hat])) / (reach - r_hat + 1)
        num, den = torch.zeros(v.shape[-1], dtype=v.dtype), 0.0
        for token, (m, n) in enumerate(positions):
            group = max(abs(m - i), abs(n - j))
            score = float(q[0, 0, query] @ k[0, 0, token]) * (a[group] if group < r_hat else share)
            num, den = num + score * v[0, 0, token], den + score
        expected[0, 0, query] = num / (den + 1e-6)
    torch.testing.assert_close(ripple_attention_reference(q, k, v, logits, hw_shape, tau), expected)


def test_weights_on_the_simplex():
    logits = torch.randn(3, 7, 5, dtype=torch.float64) * 3
    alpha, remaining = stick_breaking(logits)
    assert (alpha > 0).all()
    torch.testing.assert_close(alpha.sum(-1), torch.ones(3, 7, dtype=torch.float64))
    torch.testing.assert_close(remaining[..., -1], alpha[..., -1])
    # the modified sigmoid of C.3: zero logits, equal weights
    uniform, _ = stick_breaking(torch.zeros(2, 4))
    torch.testing.assert_close(uniform, torch.full((2, 5), 0.2))
    # on a 13 x 13 map every query's farthest group lies beyond R_max = 5: the Eq. 6 weights of its
    # non-empty groups sum to one
    weights = group_weights(logits[:1, :1].expand(1, 169, 5), (13, 13), 1e-3)
    non_empty = torch.arange(13)[None] <= query_reach((13, 13))[:, None]
    torch.testing.assert_close((weights * non_empty).sum(-1),
                               torch.ones(1, 169, dtype=torch.float64))


def test_tau_stops_the_sticks_and_merges_the_rest():
    # sticks of lengths 1/2 each (logit log(R_max - r) cancels the offset): remaining 1/2, 1/4, 1/8,
    # 1/16
    r_max = 4
    logits = torch.log(torch.arange(r_max, 0, -1, dtype=torch.float64)).expand(1, r_max)
    for tau, r_hat in [(0.3, 1), (0.2, 2), (0.1, 3), (0.01, 4)]:
        alpha, got, merged = truncate(logits, tau)
        assert got.item() == r_hat
        torch.testing.assert_close(merged, torch.tensor([0.5 ** r_hat], dtype=torch.float64))
    # a 1 x 9 map, query in the middle: groups 0-4; with tau = 0.2 groups 2, 3, 4 share 1/4 equally
    beta, merged_weight = ring_weights(logits.expand(9, r_max), (1, 9), 0.2)
    torch.testing.assert_close(merged_weight[4], torch.tensor(0.25 / 3, dtype=torch.float64))
    torch.testing.assert_close(beta[4], torch.tensor([0.5, 0.25, 0, 0], dtype=torch.float64)
                               - torch.tensor([0.25 / 3] * 2 + [0] * 2, dtype=torch.float64))


@pytest.mark.parametrize('triton', [False, True], ids=['torch', 'triton'])
@pytest.mark.parametrize('hw_shape,r_max,tau',
                         [((9, 7), 5, 1e-3), ((1, 9), 4, 0.2), ((6, 6), 8, 0.05)])
def test_ring_weights_backward_equals_autograd_and_gradchecks(hw_shape, r_max, tau, triton):
    """The written-out passes of the ring weights (torch's reverse sweep over the stick products,
    and the Triton kernels' scans) against autograd through the twin: every r_hat from 0 to R_max
    occurs (logits of scale 3), R_max beyond the map and not a power of two, a large tau, batch and
    heads > 1; then float64 gradcheck where no stick product sits at tau."""
    reach = query_reach(hw_shape).unsqueeze(-1)
    logits = inputs(hw_shape, r_max, scale=3.0)[3]
    fast = ring_weights(logits, hw_shape, tau, triton)
    slow = ring_weights_reference(logits, reach, tau)
    r_hat = truncate(logits, tau)[1]
    assert set(r_hat.unique().tolist()) >= {0, r_max} or hw_shape == (1, 9)
    cotangents = [torch.randn_like(fast[0]), torch.randn_like(fast[1])]
    grads = [torch.autograd.grad((out[0] * cotangents[0]).sum()
                                 + (out[1].reshape(fast[1].shape) * cotangents[1]).sum(),
                                 logits)[0] for out in (fast, slow)]
    torch.testing.assert_close(fast[0], slow[0])
    torch.testing.assert_close(fast[1], slow[1].squeeze(-1))
    torch.testing.assert_close(*grads)
    # the kernels run interpreted: gradcheck's fast mode (random projections of the Jacobian) for
    # them
    assert torch.autograd.gradcheck(lambda x: ring_weights(x, hw_shape, tau, triton),
                                    (logits[0, 0].detach().requires_grad_(),), fast_mode=triton)


@pytest.mark.parametrize('change,message', [
    (dict(impl='cuda'), r"impl='cuda'; expected one of"),
    (dict(tau=0.0), r'tau=0.0; expected 0 < tau < 1'),
    (dict(tau=1.5), r'tau=1.5; expected 0 < tau < 1'),
    (dict(hw_shape=(4, 4)), r'15 tokens do not match hw_shape=\(4, 4\)'),
    (dict(r_max=0), r'R_max=0 \(logits.shape\[-1\]\); expected R_max >= 1'),
])
def test_bad_input_one_line(change, message):
    q, k, v, logits = inputs((3, 5), 2)
    if 'r_max' in change:
        logits = logits[..., :0]
    call = dict(hw_shape=(3, 5), tau=1e-3, impl='torch')
    call.update({key: value for key, value in change.items() if key != 'r_max'})
    with pytest.raises(ValueError, match=message):
        ripple_attention(q, k, v, logits, **call)


@pytest.mark.parametrize('impl', ['dense', 'torch', 'cpu'])
def test_saved_memory_is_linear_in_tokens(impl):
    """What autograd keeps grows with the tokens, not with their square (R_max fixed)."""
    def saved_elements(hw_shape):
        sizes = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: sizes.append(t.numel()) or t,
                                                      lambda t: t):
            ripple_attention(*(t.detach().float().requires_grad_() for t in inputs(hw_shape, 4)),
                             hw_shape, impl=impl)
        return sum(sizes)
    assert saved_elements((16, 32)) < 2.2 * saved_elements((16, 16))
    assert saved_elements((32, 32)) < 4.4 * saved_elements((16, 16))


@pytest.mark.parametrize('local', LOCAL_PARTS, ids=['tiled', 'dense', 'cpu'])
def test_local_global_keeps_only_inputs_and_output(local):
    """The scores are recomputed in the backward: saved are q, k, v, beta, w_m, the output and the
    normaliser."""
    q, k, v, logits = (t.detach().requires_grad_() for t in inputs((12, 10), 4))
    beta = logits.detach().reshape(-1, 120, 4).requires_grad_()
    merged_weight = torch.rand(6, 120, dtype=torch.float64, requires_grad=True)
    sizes = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: sizes.append(t.numel()) or t,
                                                  lambda t: t):
        RippleLocalGlobal.apply(q.reshape(-1, 120, 4), k.reshape(-1, 120, 4), v.reshape(-1, 120, 5),
                                beta, merged_weight, (12, 10), 1e-6, local)
    assert sum(sizes) == 6 * 120 * (4 + 4 + 5 + 4 + 1 + 5 + 1)
