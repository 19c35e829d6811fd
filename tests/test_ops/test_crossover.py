"""Dense forms on a GPU (mmvisattn.ops.utils.crossover): ``auto`` takes an op's dense form on CUDA (ripple's
``fused``, Castling's ``dense``) up to the crossover measured on that GPU and the O(N) kernels above it; on a
GPU without a measurement, and off CUDA, never. The choice is replayed for CUDA on meta tensors (no GPU
needed)."""
import pytest
import torch

from mmvisattn.ops import linear_angular, ripple
from mmvisattn.ops.utils import crossover
from mmvisattn.ops.utils.dispatch import Request


def request(device: str, tokens: int) -> Request:
    return Request(device, torch.bfloat16, 32, True, False,
                   (('hw_shape', (tokens // 8, 8)), ('r_max', 8), ('tokens', tokens)))


@pytest.fixture
def measured(monkeypatch):
    monkeypatch.setattr(crossover, 'current_gpu', lambda: 'NVIDIA H200')
    table = {'ripple_attention': {'NVIDIA H200': 2048}, 'linear_angular_attention': {'NVIDIA H200': 4096}}
    monkeypatch.setattr(crossover, 'CUDA_DENSE_CROSSOVERS', table)
    return table


DENSE_FORMS = [(ripple.OP, 'fused'), (linear_angular.OP, 'dense')]


@pytest.mark.parametrize('op,dense', DENSE_FORMS)
def test_dense_up_to_the_gpus_crossover(measured, op, dense):
    assert crossover.SWEPT_OPS[op.name] == dense  # what the GPU proof sweeps
    limit = measured[op.name]['NVIDIA H200']
    assert op.auto(request('cuda', limit)) == dense
    assert op.auto(request('cuda', limit + 8)) == 'triton'
    assert f'{limit + 8} tokens are past the crossover measured on NVIDIA H200 ({limit})' in op.explain(
        request('cuda', limit + 8))[1][dense]


@pytest.mark.parametrize('op,dense', DENSE_FORMS)
def test_without_a_measurement_auto_stays_as_it_was(monkeypatch, op, dense):
    monkeypatch.setattr(crossover, 'current_gpu', lambda: 'NVIDIA A100-SXM4-80GB')
    assert op.auto(request('cuda', 64)) == 'triton'
    assert op.explain(request('cuda', 64))[1][dense].startswith('no crossover measured on NVIDIA A100-SXM4-80GB')
    monkeypatch.setattr(crossover, 'current_gpu', lambda: None)  # a CPU machine replaying CUDA
    assert op.auto(request('cuda', 64)) == 'triton'


def test_off_cuda_the_cpu_rules_stay(measured):
    assert linear_angular.OP.auto(request('cpu', 64)) == 'torch'
    assert ripple.OP.auto(request('cpu', 64)) == 'dense'  # ripple's own CPU crossover (ops/ripple/dense.py)
    assert ripple.OP.explain(request('cuda', 64))[1]['dense'] == (
        "the dense blocks' crossover is measured on CPU; on CUDA impl='fused' takes small maps")
