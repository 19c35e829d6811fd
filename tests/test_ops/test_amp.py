"""Every hand-written autograd Function of mmvisattn.ops states its autocast behaviour: its forward
and backward run with autocast off (``amp.autocast_off``), or its docstring says what it does
instead; and the mixed-precision helpers keep float64 and the norm clamp finite."""
import importlib
import inspect
import pkgutil

import torch

import mmvisattn.ops
from mmvisattn.ops.utils.amp import autocast_off, float32_math, norm_eps, upcast


def autograd_functions():
    for info in pkgutil.walk_packages(mmvisattn.ops.__path__, 'mmvisattn.ops.'):
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, torch.autograd.Function) and cls.__module__ == info.name:
                yield cls


# every wrapper autocast_off makes runs this code
AUTOCAST_OFF = autocast_off(lambda ctx: None).__code__


def test_every_function_declares_its_autocast_behaviour():
    functions = list(autograd_functions())
    assert len(functions) >= 8
    for cls in functions:
        wrapped = all(inspect.getattr_static(cls, name).__func__.__code__ is AUTOCAST_OFF
                      for name in ('forward', 'backward'))
        assert wrapped or 'Autocast:' in (cls.__doc__ or ''), cls.__qualname__


def test_function_runs_with_autocast_off_and_sees_the_input_dtype():
    seen = []

    class Probe(torch.autograd.Function):
        @staticmethod
        @autocast_off
        def forward(ctx, x):
            seen.append((torch.is_autocast_enabled('cpu'), (x @ x).dtype))
            return x.clone()

        @staticmethod
        @autocast_off
        def backward(ctx, grad):
            return grad

    with torch.autocast('cpu', dtype=torch.bfloat16):
        Probe.apply(torch.ones(2, 2, requires_grad=True)).sum().backward()
    assert seen == [(False, torch.float32)]


def test_float32_math_and_upcast_keep_float64():
    @float32_math
    def mean_square(x):
        return (x * x).sum(dim=-1, keepdim=True) / x.shape[-1]

    half = torch.full((4,), 200.0, dtype=torch.float16)
    assert torch.isinf((half * half).sum())  # 160000 leaves float16's range on the way
    assert mean_square(half).dtype == torch.float16 and mean_square(half).item() == 40000
    with torch.autocast('cpu', dtype=torch.bfloat16):
        assert mean_square(torch.full((4,), 200.0)).dtype == torch.float32
    assert upcast(torch.ones(1, dtype=torch.float64))[0].dtype == torch.float64
    assert upcast(half)[0].dtype == torch.float32


def test_norm_eps_keeps_zero_row_gradients_finite():
    assert norm_eps(torch.float32) == norm_eps(torch.bfloat16) == 1e-12
    assert 1 / norm_eps(torch.float16) == 65504 ** 0.5
