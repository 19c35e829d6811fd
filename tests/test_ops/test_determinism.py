"""Every backend of every op under ``torch.use_deterministic_algorithms(True)`` (what mmengine's
``randomness=dict(deterministic=True)`` turns on): it runs none of the operations that have no
deterministic CUDA kernel, its results match the reference, and two runs agree bit for bit.

Without a GPU the CUDA side is shown through what the backends call: torch's operations that raise
on CUDA under the mode (:data:`NO_DETERMINISTIC_CUDA_KERNEL`, from
``torch.use_deterministic_algorithms``' list, and floating-point ``cumsum``) are refused by a
dispatch mode that sees every aten call, backwards included, and Triton's atomics (float additions
in any order) by the interpreter. With a GPU the same test runs the backends on CUDA, where torch
itself refuses and two runs are compared for real."""
import contextlib
from typing import Iterator

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from mmvisattn.ops import check
from mmvisattn.ops.utils import dispatch, machine

from ..conftest import KERNEL_DEVICE

aten = torch.ops.aten
# The backward passes (and the few forwards) torch has no deterministic CUDA kernel for: under the
# mode they raise on CUDA tensors.
NO_DETERMINISTIC_CUDA_KERNEL = {
    aten.upsample_linear1d_backward, aten.upsample_bilinear2d_backward,
    aten.upsample_bicubic2d_backward,
    aten.upsample_trilinear3d_backward, aten._adaptive_avg_pool2d_backward,
    aten._adaptive_avg_pool3d_backward,
    aten.adaptive_max_pool2d_backward, aten.avg_pool3d_backward, aten.grid_sampler_2d_backward,
    aten.reflection_pad1d_backward, aten.reflection_pad2d_backward, aten.replication_pad1d_backward,
    aten.replication_pad2d_backward, aten.put_, aten.histc, aten.bincount, aten.median,
    aten.nll_loss2d_forward, aten.embedding_bag, aten._embedding_bag,
}


class NoNondeterministicCudaKernels(TorchDispatchMode):
    """Raises on an aten call that has no deterministic CUDA kernel, on whichever device it runs."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        packet = func.overloadpacket
        floating_cumsum = packet is aten.cumsum and args[0].is_floating_point()
        if packet in NO_DETERMINISTIC_CUDA_KERNEL or floating_cumsum:
            raise AssertionError(f'{func} has no deterministic CUDA kernel')
        return func(*args, **(kwargs or {}))


def _refuse_atomics(*args, **kwargs):
    raise AssertionError('a Triton kernel adds with atomics: the order of float additions varies '
                         'run to run')


@contextlib.contextmanager
def deterministic_algorithms() -> Iterator[None]:
    """The mode on inside (cuBLAS takes it with the workspace tests/conftest.py sets), as it was
    after."""
    enabled = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(enabled)


@contextlib.contextmanager
def refused_calls(monkeypatch) -> Iterator[None]:
    """The calls above refused; the ops see an eager call (the dispatch mode is the test's)."""
    if machine.triton_interpreted():
        from triton.runtime import interpreter
        for name in ('create_atomic_rmw', 'create_atomic_cas'):
            monkeypatch.setattr(interpreter.InterpreterBuilder, name, _refuse_atomics)
    with monkeypatch.context() as patch, NoNondeterministicCudaKernels():
        patch.setattr(dispatch, 'current_context', lambda: 'eager')
        yield


def run_where_supported(case, impl):
    """The backend's run on the kernels' device (CUDA where there is a GPU), else on the CPU."""
    try:
        return KERNEL_DEVICE, check.run(case, impl, KERNEL_DEVICE, 'float32')
    except dispatch.UnsupportedInput:
        return torch.device('cpu'), check.run(case, impl, 'cpu', 'float32')


BACKENDS = [pytest.param(case, impl, id=f'{case.op.name}-{impl}') for case in check.CASES
            for impl in case.op.backends]


@pytest.mark.parametrize('case,impl', BACKENDS)
def test_every_backend_is_deterministic_under_the_mode(case, impl, monkeypatch):
    """Forward and backward at the check's test size, twice, under the mode (which also fills the
    memory torch.empty hands out with NaN: a read of an unwritten cell shows); the reference
    (autograd through torch's own formulas, float64 on the CPU) runs outside the refusals."""
    with deterministic_algorithms():
        with refused_calls(monkeypatch):
            device, (inputs, first) = run_where_supported(case, impl)
            second = check.run(case, impl, device, 'float32')[1]
        row = check.compare(case, case.test, inputs, first, 'float32')
    assert row['ok'], row
    names = ['output', *(f'grad {i}' for i in range(len(first) - 1))]
    differ = [name for name, a, b in zip(names, first, second) if not torch.equal(a, b)]
    assert not differ, f'{case.op.name} {impl} on {device}: two runs differ in {differ}'
