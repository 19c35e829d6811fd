"""Counting what a step launches, on any device: aten calls and Triton kernel launches.

On a GPU every aten call is at least one kernel launch, 5-10 us of host time each, and a layer whose
step issues thousands of them is bound by launches before it is bound by arithmetic.
:class:`LaunchCounter` counts the aten calls a step dispatches (a ``TorchDispatchMode``) and the Triton
kernels the ops launch (through :func:`mmvisattn.ops.utils.triton_launch.launch`), so the suite holds each
attention's CUDA path to a launch budget without a GPU. With ``dry_kernels`` the Triton kernels are
counted and not run (their outputs are left as allocated): the glue around them, which decides the
count, runs on CPU tensors at the shipped sizes, where the Triton interpreter would take minutes.
The count is the same on CPU as on CUDA because the fast paths read nothing back: no step's control
flow depends on data (:mod:`.host_reads`).
"""
from collections import Counter
from typing import List

from torch.utils._python_dispatch import TorchDispatchMode

_ACTIVE: List['LaunchCounter'] = []


class LaunchCounter(TorchDispatchMode):
    """Aten calls by operator and Triton launches by kernel while active::

        with LaunchCounter(dry_kernels=True) as launches:
            attention(x, hw_shape).sum().backward()
        assert launches.total <= 300, launches.summary()
    """

    def __init__(self, dry_kernels: bool = False) -> None:
        super().__init__()
        self.dry_kernels = dry_kernels
        self.aten: Counter = Counter()
        self.triton: Counter = Counter()

    @property
    def total(self) -> int:
        return sum(self.aten.values()) + sum(self.triton.values())

    def summary(self, top: int = 8) -> str:
        common = ', '.join(f'{name} {count}' for name, count in (self.aten + self.triton).most_common(top))
        return (f'{sum(self.aten.values())} aten calls + {sum(self.triton.values())} Triton launches '
                f'(most: {common})')

    def __enter__(self) -> 'LaunchCounter':
        _ACTIVE.append(self)
        return super().__enter__()

    def __exit__(self, *exc) -> None:
        _ACTIVE.remove(self)
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.aten[str(func.overloadpacket.__name__)] += 1
        return func(*args, **(kwargs or {}))


def count_triton_launch(name: str) -> bool:
    """Record a launch of the Triton kernel ``name``; whether it should run (not in a dry count)."""
    if not _ACTIVE:
        return True
    _ACTIVE[-1].triton[name] += 1
    return not _ACTIVE[-1].dry_kernels
