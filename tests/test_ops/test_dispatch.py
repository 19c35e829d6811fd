"""Each op's choice is one chain of backends (mmvisattn.ops.utils.dispatch): ``auto`` runs the first
backend that supports a call and that it does not pass over, never failing on the ops' chains; a
backend asked for by name runs wherever it is supported and otherwise raises, in one line, the very
reason ``auto`` skipped it for. Decided on requests alone (no data), so CUDA is tested without a
GPU."""
import itertools
import logging

import pytest
import torch

from mmvisattn.ops import linear_angular, masked_softmax, peripheral, ripple, rwgk, sliding_chunk
from mmvisattn.ops import trig_relu_features as feature_map
from mmvisattn.ops.utils.dispatch import CONTEXTS, Backend, Op, Request, UnsupportedInput
from mmvisattn.ops.utils.triton_launch import head_block, num_warps

# each op with the options of a few calls: small and large maps, every masking, a drawn mode,
# dropout, strides
OPTIONS = {
    ripple.OP: [ripple.Options((5, 7), 3), ripple.Options((100, 100), 8)],
    sliding_chunk.OP: [
        sliding_chunk.Options(hw, window, 1, masking, mode)
        for hw, window, masking, mode in [
            ((7, 7), 7, 'chunk', 0),
            ((56, 56), 7, 'exact', 0),
            ((3, 10), 3, 'cyclic', 0),
            ((56, 56), 7, 'chunk', 'drawn'),
            ((28, 28), 9, 'chunk', 0),
        ]
    ],
    linear_angular.OP: [None],
    masked_softmax.OP: [masked_softmax.Options(0.0), masked_softmax.Options(0.1)],
    peripheral.OP: [None],
    peripheral.POSITION_OP: [None],
    rwgk.OP: [None],
    feature_map.OP: [feature_map.Options(1), feature_map.Options(3)],
}
OPS = list(OPTIONS)
IDS = [op.name for op in OPS]


def requests(op):
    """Requests over devices, dtypes, head widths, gradients and contexts, with each of the op's
    options."""
    for device, dtype, dims, grad, context, options in itertools.product(
            ('cpu', 'cuda', 'meta'), (torch.float32, torch.bfloat16, torch.float64), (32, 96, 160),
            (True, False), CONTEXTS, OPTIONS[op]):
        yield Request(device, dtype, dims, grad, context, options)


@pytest.mark.parametrize('op', OPS, ids=IDS)
def test_auto_always_runs_something(op):
    for request in requests(op):
        chosen = op.choose('auto', request)
        assert op.backends[chosen].unsupported(request) is None, (request, chosen)


@pytest.mark.parametrize('op', OPS, ids=IDS)
def test_a_named_backend_raises_the_reason_auto_skipped_it_for(op):
    for request in requests(op):
        chosen, passed_over = op.explain(request)
        for name, backend in op.backends.items():
            reason = backend.unsupported(request)
            if reason is None:
                assert op.choose(name, request) == name
                continue
            assert passed_over[name] == reason
            with pytest.raises(UnsupportedInput) as error:
                op.choose(name, request)
            assert str(error.value) == f'{op.name}(impl={name!r}): {reason}' and '\n' not in str(
                error.value
            )


@pytest.mark.parametrize('op', OPS, ids=IDS)
def test_unknown_backends_are_refused_with_the_choices(op):
    with pytest.raises(ValueError,
                       match=rf"^{op.name}: impl='reference'; expected one of \('auto', "):
        op.choose('reference', next(requests(op)))


def ripple_request(device, context='eager', hw_shape=(20, 20)):
    return Request(device, torch.float32, 32, context == 'eager', context,
                   ripple.Options(hw_shape, 4))


def test_ripple_exports_through_its_dense_form_on_every_device(machine):
    """Under ONNX export the Triton kernels, the C++ kernels and the tiles cannot be traced: on CUDA
    with Triton installed and on CPU, at any size, auto takes the dense form; the tiles named
    refuse."""
    machine(triton=(3, 6))
    for device, hw_shape in itertools.product(('cuda', 'cpu'), ((20, 20), (100, 100))):
        request = ripple_request(device, 'export', hw_shape)
        assert ripple.OP.choose('auto', request) == 'dense'
        with pytest.raises(UnsupportedInput,
                           match=r"^ripple_attention\(impl='torch'\): ONNX export cannot trace"):
            ripple.OP.choose('torch', request)
    assert ripple.OP.choose('auto', ripple_request('cuda')) == 'triton'


def test_triton_needs_cuda_a_release_and_supported_inputs(machine):
    machine(triton=None)
    assert (
        ripple.OP.explain(ripple_request('cuda'))[1]['triton']
        == 'needs triton >= 3.0; none is installed'
    )
    machine(triton=(2, 3))
    assert (
        ripple.OP.explain(ripple_request('cuda'))[1]['triton']
        == 'needs triton >= 3.0; 2.3 is installed'
    )
    assert ripple.OP.choose('auto', ripple_request('cuda')) == 'torch'
    machine(triton=(3, 6))
    float64 = ripple_request('cuda')._replace(dtype=torch.float64)
    with pytest.raises(UnsupportedInput,
                       match=r"^ripple_attention\(impl='triton'\): dtype float64 is not supported; "
                                               r'expected one of float32, float16, bfloat16$'):
        ripple.OP.choose('triton', float64)
    wide = Request('cuda', torch.float16, 65, True, 'eager',
                   sliding_chunk.Options((56, 56), 7, 1, 'chunk', 0))
    assert (
        sliding_chunk.OP.explain(wide)[1]['triton']
        == 'head width 65 is outside the supported range 1..64'
    )
    window = wide._replace(head_dims=64, options=wide.options._replace(window=9))
    assert (
        sliding_chunk.OP.explain(window)[1]['triton']
        == 'window=9 is outside the supported range 1..8'
    )
    assert sliding_chunk.OP.choose('auto', window) == 'torch'


@pytest.mark.parametrize('capability', [(7, 0), (7, 5)], ids=['sm_70', 'sm_75'])
def test_older_gpus_take_the_torch_paths(machine, capability):
    """On a V100 (sm_70) or a T4 (sm_75), float32, half and bfloat16 alike, auto runs the torch path
    of every op with a Triton kernel, and the kernel asked for by name is refused in one line naming
    the GPU."""
    machine(triton=(3, 6), capability=capability)
    reason = ('Triton kernels for compute capability 8.0 and later; this GPU is '
              f'sm_{capability[0]}{capability[1]}')
    for op in OPS:
        if 'triton' not in op.backends:
            continue
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            request = Request('cuda', dtype, 32, True, 'eager', OPTIONS[op][0])
            chosen, passed_over = op.explain(request)
            assert chosen != 'triton' and passed_over['triton'] == reason, (op.name, dtype)
            with pytest.raises(UnsupportedInput, match=rf"^{op.name}\(impl='triton'\): {reason}$"):
                op.choose('triton', request)
    machine(capability=(8, 0))
    assert ripple.OP.choose('auto', ripple_request('cuda')) == 'triton'


def test_interpreted_kernels_run_only_when_named(machine):
    """Under TRITON_INTERPRET=1 the kernels take CPU tensors when asked for (the tests), and auto
    keeps the CPU backends."""
    machine(interpreted=True, triton=(3, 6))
    request = ripple_request('cpu', hw_shape=(8, 8))
    assert ripple.OP.choose('triton',
                            request) == 'triton' and ripple.OP.choose('auto', request) == 'dense'
    assert 'interpreted' in ripple.OP.explain(request)[1]['triton']
    machine(interpreted=False)
    with pytest.raises(UnsupportedInput,
                       match='Triton kernels for CUDA tensors; these are on cpu$'):
        ripple.OP.choose('triton', request)


def test_dispatch_modes_see_the_torch_paths():
    """Under a dispatch mode (torch's FLOP counter) auto passes the kernels over, which the mode
    would see as one opaque call; asked for by name they still run."""
    request = ripple_request('cpu', 'dispatch', (100, 100))
    assert ripple.OP.choose('auto',
                            request) == 'torch' and ripple.OP.choose('cpu', request) == 'cpu'
    assert feature_map.OP.choose('auto', Request('cpu', torch.float32, 32, False, 'dispatch',
                                                 feature_map.Options(1))) == 'torch'


def test_auto_logs_what_it_passed_over_and_a_chain_that_runs_out_is_one_line(caplog, machine):
    machine(interpreted=False)
    request = ripple_request('cpu', hw_shape=(100, 100))
    with caplog.at_level(logging.DEBUG, logger='mmvisattn.ops.utils.dispatch'):
        assert ripple.OP.choose('auto', request) == 'cpu'
    assert caplog.messages == [f'ripple_attention [{request.describe()}] runs cpu; not triton: '
                               'Triton kernels for CUDA tensors; these are on cpu; not dense: '
                               + ripple.OP.explain(request)[1]['dense']]
    cuda_only = Op('cuda_only',
                   [Backend('kernel', print, lambda request: f'not on {request.device}')])
    with pytest.raises(UnsupportedInput) as error:
        cuda_only.choose('auto', request)
    assert (
        str(error.value)
        == f"cuda_only(impl='auto'): no backend runs {request.describe()}: kernel: not on cpu"
    )


def test_launch_sizes():
    assert [head_block(w) for w in (1, 16, 17, 64, 70, 128)] == [16, 16, 32, 64, 128, 128]
    assert [num_warps(b) for b in (16, 64, 128)] == [4, 4, 8]
