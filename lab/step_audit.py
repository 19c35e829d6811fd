"""Auditing a training step on the CPU for what it would cost on a GPU: what it reads back from the
device (:class:`HostReadCounter`) and what it launches (:class:`LaunchCounter`).

On a GPU each host read of a tensor (``item``, a data-sized output as of ``nonzero``,
``linalg.solve``'s check) drains the stream, every layer, every step. :class:`HostReadCounter` finds
those calls on CPU by the aten operators that need the data on the host. It cannot see host-device
copies, which the GPU proof's sync audit covers.
"""
import traceback
from collections import Counter
from contextlib import ExitStack
from typing import Dict
from unittest import mock

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

aten = torch.ops.aten

# aten operators whose result needs the data on the host: scalar reads, data-sized outputs and
# checks that raise on a value
HOST_READ_OPS = frozenset({
    aten._local_scalar_dense.default, aten.is_nonzero.default, aten.equal.default,
    aten.nonzero.default, aten.nonzero_static.default, aten.argwhere.default,
    aten.masked_select.default,
    aten._unique.default, aten._unique2.default, aten.unique_dim.default,
    aten.unique_consecutive.default,
    aten.repeat_interleave.Tensor, aten._linalg_check_errors.default,
})


class HostReadCounter(TorchDispatchMode):
    """Counts host reads (:data:`HOST_READ_OPS`) while active, by operator and by the line of
    mmvisattn (else the innermost frame) that made them (``nonzero_static`` too: control flow must
    not depend on data)::

        with HostReadCounter() as reads:
            loss = model(x).sum(); loss.backward()
        assert reads.total == 0, reads.summary()
    """

    def __init__(self) -> None:
        super().__init__()
        self.by_op: Counter = Counter()
        self.by_line: Counter = Counter()

    @property
    def total(self) -> int:
        return sum(self.by_op.values())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in HOST_READ_OPS:
            self.by_op[str(func.overloadpacket.__name__)] += 1
            self.by_line[_caller()] += 1
        return func(*args, **(kwargs or {}))

    def summary(self) -> str:
        """One line: the total, then each operator and each causing line with its count."""
        ops = ', '.join(f'{name} x{count}' for name, count in self.by_op.most_common())
        lines = '; '.join(f'{line} x{count}' for line, count in self.by_line.most_common())
        return f'{self.total} host reads ({ops or "none"}) at {lines or "-"}'

    def as_dict(self) -> Dict[str, Dict[str, int]]:
        return dict(by_op=dict(self.by_op), by_line=dict(self.by_line))


def _caller() -> str:
    """``file:line`` of the innermost frame of mmvisattn outside this module, else the innermost
    frame outside torch."""
    frames = traceback.extract_stack()[:-2]
    for frame in reversed(frames):
        if '/mmvisattn/' in frame.filename and not frame.filename.endswith('host_reads.py'):
            return f'{frame.filename.split("/mmvisattn/", 1)[1]}:{frame.lineno}'
    for frame in reversed(frames):
        if '/torch/' not in frame.filename:
            return f'{frame.filename}:{frame.lineno}'
    return '?'


class LaunchCounter(TorchDispatchMode):
    """Aten calls by operator and Triton launches by kernel while active (each aten call is a GPU
    launch, so a step issuing thousands is launch-bound). Triton launches are counted by patching
    ``JITFunction.run`` (and the interpreter's); ``dry_kernels`` counts them without running, so the
    glue runs at the shipped sizes on CPU::

        with LaunchCounter(dry_kernels=True) as launches:
            attention(x, hw_shape).sum().backward()
        assert launches.total <= 300, launches.summary()
    """

    def __init__(self, dry_kernels: bool = False) -> None:
        super().__init__()
        self.dry_kernels = dry_kernels
        self.aten: Counter = Counter()
        self.triton: Counter = Counter()
        self._patches = ExitStack()

    @property
    def total(self) -> int:
        return sum(self.aten.values()) + sum(self.triton.values())

    def summary(self, top: int = 8) -> str:
        common = ', '.join(
            f'{name} {count}' for name, count in (self.aten + self.triton).most_common(top)
        )
        return (f'{sum(self.aten.values())} aten calls + {sum(self.triton.values())} Triton '
                f'launches (most: {common})')

    def __enter__(self) -> 'LaunchCounter':
        from triton.runtime.interpreter import InterpretedFunction
        from triton.runtime.jit import JITFunction
        for cls in (JITFunction, InterpretedFunction):
            self._patches.enter_context(mock.patch.object(cls, 'run', self._launcher(cls.run)))
        return super().__enter__()

    def __exit__(self, *exc) -> None:
        self._patches.close()
        return super().__exit__(*exc)

    def _launcher(self, run):
        def counted(kernel, *args, **kwargs):
            self.triton[kernel.fn.__name__] += 1
            if self.dry_kernels:
                return None
            with _disable_current_modes():  # the interpreter's own tensor calls are not the step's
                return run(kernel, *args, **kwargs)
        return counted

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.aten[str(func.overloadpacket.__name__)] += 1
        return func(*args, **(kwargs or {}))
