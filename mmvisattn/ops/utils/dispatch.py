"""The one dispatch rule of every op with several implementations (NATTEN's ``choose_backend``).

Each op lists its implementations in an :class:`Op`, one file per value (``reference.py``, the torch
path, ``cpu.py`` with its C++ ``cpu.cpp``, ``triton.py``, ``dense.py``), each with a *refusal*: a
function of the call's :class:`Request` (device, dtype, head width, gradients, tracing and the op's
own facts, such as a window) that says why the implementation cannot, or should not, run it, or
``None`` where it can. ``impl='auto'`` takes the first implementation of the device's order that
does not refuse; every order ends with ``'torch'``, which refuses nothing, so ``auto`` never raises
where ``impl='torch'`` runs. An explicit ``impl`` runs as asked (the implementation itself refuses
what it cannot take, in one line).

A :class:`Request` holds no data, so the choice can be made for another device or dtype than the
one at hand: :func:`record_dispatch` collects the requests of a forward pass, which
``tools/analysis_tools/print_dispatch.py`` replays for ``--device cuda`` on a machine without a GPU
(with ``dry_run``, on meta tensors, where every op returns an empty result of its output's shape).
"""
import contextlib
import dataclasses
from importlib.util import find_spec
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import torch
from torch import Tensor

from .cpu_extension import kernels_hidden
from .triton_launch import unsupported_kernel_input

# auto's order on devices that have none of their own: the torch path runs wherever torch does
DEFAULT_ORDER = ('torch',)
# the value ops receive from Op.choose during a dry run (record_dispatch(dry_run=True))
DRY_RUN = 'dry-run'
MIN_TRITON = (3, 0)


def check_impl(owner: str, impl: str, impls: Sequence[str], name: str = 'impl') -> str:
    """``impl``, or a one-line ``ValueError`` naming ``owner``, the argument ``name`` and the
    values it accepts."""
    if impl not in impls:
        raise ValueError(f'{owner}: {name}={impl!r}; expected one of {tuple(impls)}')
    return impl


class Request(NamedTuple):
    """An op call as dispatch sees it, without its data (a named tuple: ``torch.compile`` traces it).

    Attributes:
        device: Device type of the inputs (``'cpu'``, ``'cuda'``, ``'meta'``, ...).
        dtype: Their dtype.
        head_dims: The widest last dimension among them (the head width).
        grad: Whether a gradient is wanted (grad mode on and an input requiring it).
        traced: Under ``torch.jit`` tracing or a dispatch mode, where opaque kernels would be
            recorded as one call (:func:`~mmvisattn.ops.utils.cpu_extension.kernels_hidden`).
        facts: The op's own arguments that decide (window, map size, ...), as ``(name, value)`` pairs.
    """
    device: str
    dtype: torch.dtype
    head_dims: int
    grad: bool
    traced: bool
    facts: Tuple[Tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, tensors: Sequence[Tensor], **facts: Any) -> 'Request':
        """The request of a call on ``tensors`` (the first decides device and dtype)."""
        return cls(tensors[0].device.type, tensors[0].dtype, max(t.shape[-1] for t in tensors),
                   torch.is_grad_enabled() and any(t.requires_grad for t in tensors), kernels_hidden(),
                   tuple(sorted(facts.items())))

    def fact(self, name: str) -> Any:
        return dict(self.facts)[name]

    def on(self, device: Optional[str] = None, dtype: Optional[torch.dtype] = None) -> 'Request':
        """The same call on another device or in another dtype, untraced (a training step there)."""
        return self._replace(device=device or self.device, dtype=dtype or self.dtype, traced=False)

    def describe(self) -> str:
        facts = ''.join(f', {name}={value}' for name, value in self.facts)
        return (f'{self.device} {str(self.dtype).replace("torch.", "")}, head {self.head_dims}'
                f'{", grad" if self.grad else ""}{facts}')


Refusal = Callable[[Request], Optional[str]]


class Op:
    """The implementations of one op, their refusals and ``auto``'s order per device type.

    Args:
        name: The op's public function, for messages.
        refusals: ``{impl: refusal}`` in the order of the op's ``IMPLS`` (after ``'auto'``);
            a refusal returns why the implementation passes the request over, or ``None``.
        orders: ``{device type: impls}``, auto's order there; every order ends with ``'torch'``.
    """

    def __init__(self, name: str, refusals: Dict[str, Refusal], orders: Dict[str, Sequence[str]]) -> None:
        for device, order in orders.items():
            if order[-1] != 'torch' or not set(order) <= set(refusals):
                raise ValueError(f'{name}: the {device} order {order} must name known implementations and end '
                                 "with 'torch'")
        self.name, self.refusals, self.orders = name, refusals, orders
        self.impls = ('auto', *refusals)

    def order(self, device: str) -> Sequence[str]:
        return self.orders.get(device, DEFAULT_ORDER)

    def refusal(self, impl: str, request: Request) -> Optional[str]:
        """Why ``impl`` passes ``request`` over in ``auto``, or ``None``; also for implementations
        outside the device's order (the reason they are not in it)."""
        reason = self.refusals[impl](request)
        if reason is None and impl not in self.order(request.device):
            return f'not in auto\'s {request.device} order {tuple(self.order(request.device))}'
        return reason

    def auto(self, request: Request) -> str:
        """The implementation ``impl='auto'`` runs for ``request``."""
        return next(impl for impl in self.order(request.device) if self.refusals[impl](request) is None)

    def explain(self, request: Request) -> Tuple[str, Dict[str, str]]:
        """``auto``'s choice for ``request`` and, for every other implementation, why not."""
        chosen = self.auto(request)
        return chosen, {impl: self.refusal(impl, request) or f'after {chosen!r} in auto\'s order'
                        for impl in self.refusals if impl != chosen}

    def choose(self, impl: str, request: Request) -> str:
        """``impl`` checked, or ``auto`` resolved for ``request``; recorded where
        :func:`record_dispatch` is active (which, in a dry run, makes the op return at once)."""
        chosen = check_impl(self.name, impl, self.impls)
        if chosen == 'auto':
            chosen = self.auto(request)
        if _RECORDS:
            _RECORDS[-1].add(self, impl, request, chosen)
            if _RECORDS[-1].dry_run:
                return DRY_RUN
        return chosen


def dry_output(q: Tensor, v: Tensor) -> Tensor:
    """What an op returns in a dry run: ``(..., N, E)``, the shape of every op's output, with no data."""
    return v.new_empty(*q.shape[:-1], v.shape[-1])


@dataclasses.dataclass
class DispatchRecord:
    """One op call: the op, the ``impl`` asked for, the request, the implementation chosen, and the
    ``layer`` (a name the caller sets, e.g. the attention module's) it was made in."""
    op: Op
    asked: str
    request: Request
    chosen: str
    layer: str


class DispatchLog:
    """The calls made while :func:`record_dispatch` is active; ``layer`` names the records that follow."""

    def __init__(self, dry_run: bool) -> None:
        self.dry_run, self.layer = dry_run, ''
        self.records: List[DispatchRecord] = []

    def add(self, op: Op, asked: str, request: Request, chosen: str) -> None:
        self.records.append(DispatchRecord(op, asked, request, chosen, self.layer))


_RECORDS: List[DispatchLog] = []


@contextlib.contextmanager
def record_dispatch(dry_run: bool = False) -> Iterator[DispatchLog]:
    """Record every op call made inside; with ``dry_run``, ops compute nothing and return
    :func:`dry_output` (for meta tensors, where the choice is all that is wanted)."""
    log = DispatchLog(dry_run)
    _RECORDS.append(log)
    try:
        yield log
    finally:
        _RECORDS.remove(log)


# refusals shared by the ops

def reference_only(request: Request) -> str:
    return 'the obviously-correct twin, for tests (quadratic memory)'


def runs_anywhere(request: Request) -> None:
    return None


def cpu_kernels(request: Request) -> Optional[str]:
    """The C++ kernels: CPU tensors, not under tracing or a dispatch mode."""
    if request.device != 'cpu':
        return f'C++ kernels for CPU tensors; these are on {request.device}'
    if request.traced:
        return 'traced or under a dispatch mode, which would record the C++ kernels as one opaque call'
    return None


def _installed_triton() -> Optional[Tuple[int, ...]]:
    if find_spec('triton') is None:
        return None
    from importlib.metadata import PackageNotFoundError, version
    try:
        return tuple(int(part) for part in version('triton').split('.')[:2])
    except (PackageNotFoundError, ValueError):
        return None


# read once: the refusal of the Triton kernels runs on every call, torch.compile's tracer included
INSTALLED_TRITON = _installed_triton()


def triton_version() -> Optional[Tuple[int, ...]]:
    """The installed Triton's ``(major, minor)``, or ``None`` where it is not installed."""
    return INSTALLED_TRITON


def triton_kernels(max_head_dims: Optional[int] = None) -> Refusal:
    """The refusal of Triton kernels that take heads up to ``max_head_dims`` wide (default
    :data:`~mmvisattn.ops.utils.triton_launch.MAX_HEAD_DIMS`)."""
    def refusal(request: Request) -> Optional[str]:
        if request.device != 'cuda':
            return (f'Triton kernels for CUDA tensors; these are on {request.device} (TRITON_INTERPRET=1 runs '
                    "them on CPU for tests, with impl='triton')")
        found = triton_version()
        if found is None or found < MIN_TRITON:
            wanted = '.'.join(map(str, MIN_TRITON))
            return f'needs triton >= {wanted}; ' + ('none is installed' if found is None else
                                                    f'{".".join(map(str, found))} is installed')
        return unsupported_kernel_input(request.dtype, request.head_dims, max_head_dims)
    return refusal
