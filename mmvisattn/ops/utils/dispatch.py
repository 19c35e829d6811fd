"""How an op picks its implementation: one chain of backends per op (NATTEN's ``choose_backend``).

An :class:`Op` lists its backends in the order ``impl='auto'`` tries them, each with two checks of a
:class:`Request` (the call without its data) returning a reason or ``None``:

* ``unsupported``: why the backend cannot run the call (device, dtype, head width, tracing);
* ``passed_over``: why ``auto`` takes a later backend although this one could run (a CPU crossover,
  dropout, an export form).

``auto`` runs the first backend neither check stops, logging at ``DEBUG`` why it passed the earlier
ones over; a chain's last backend supports what reaches it, and one that runs out raises
:class:`UnsupportedInput` in one line, as does a named backend where it is unsupported: nothing
falls back on its own. :meth:`Op.explain` gives the choice and the reasons, which
``print_dispatch.py`` prints for every layer from the calls :func:`observing` shows it.
"""
import contextlib
import logging
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import torch
from torch import Tensor

from . import machine
from .arguments import check_choice
from .triton_launch import unsupported_kernel_input

# What runs the call: plain eager, torch.compile's tracer, a dispatch mode (torch's FLOP counter),
# torch.jit tracing (mmengine's FLOP counter), ONNX export
CONTEXTS = ('eager', 'compile', 'dispatch', 'trace', 'export')
# the contexts that record a graph
TRACERS = dict(trace='a torch.jit trace', export='an ONNX export')
MIN_TRITON = (3, 0)
LOGGER = logging.getLogger(__name__)


class UnsupportedInput(ValueError):
    """A backend asked for by name cannot run the call (device, dtype, head width, window)."""


def current_context() -> str:
    """What runs the ops now, one of :data:`CONTEXTS`. ``torch.compile`` is asked first: it keeps
    custom operators and kernels, and its tracer must meet no call that returns a plain int."""
    if torch.compiler.is_compiling():
        return 'compile'
    if torch.onnx.is_in_onnx_export():
        return 'export'
    if torch.jit.is_tracing():
        return 'trace'
    return 'dispatch' if torch._C._len_torch_dispatch_stack() else 'eager'


class Request(NamedTuple):
    """An op call without its data (a named tuple, so ``torch.compile`` traces it): device type,
    dtype, head width, whether a gradient is wanted, what runs it (:data:`CONTEXTS`) and the op's
    deciding ``options`` or ``None``."""
    device: str
    dtype: torch.dtype
    head_dims: int
    grad: bool
    context: str = 'eager'
    options: Optional[Any] = None

    @classmethod
    def of(cls, tensors: Sequence[Tensor], options: Optional[Any] = None) -> 'Request':
        """The request of a call on ``tensors`` (the first decides device and dtype)."""
        return cls(tensors[0].device.type, tensors[0].dtype, max(t.shape[-1] for t in tensors),
                   torch.is_grad_enabled() and any(t.requires_grad for t in tensors),
                   current_context(), options)

    @property
    def traced(self) -> bool:
        """Under ``torch.jit`` tracing or ONNX export, whose graphs hold no C++ or Triton kernel."""
        return self.context in TRACERS

    def describe(self) -> str:
        options = sorted(self.options._asdict().items()) if self.options is not None else ()
        facts = ''.join(f', {name}={value}' for name, value in options)
        return (
            f'{self.device} {str(self.dtype).replace("torch.", "")}, head {self.head_dims}'
            f'{", grad" if self.grad else ""}'
            f'{"" if self.context == "eager" else ", " + self.context}{facts}'
        )


Check = Callable[[Request], Optional[str]]


def always(request: Request) -> None:
    return None


class Backend(NamedTuple):
    """One implementation of an op: its ``impl`` name, its function and its two checks."""
    name: str
    function: Callable
    unsupported: Check = always
    passed_over: Check = always

    def why_not(self, request: Request) -> Optional[str]:
        """Why ``auto`` does not run this backend for ``request``, or ``None``."""
        return self.unsupported(request) or self.passed_over(request)


Observer = Callable[['Op', str, Request], Optional[Callable]]
_OBSERVERS: List[Observer] = []


@contextlib.contextmanager
def observing(observer: Observer) -> Iterator[None]:
    """Inside, each op call is shown to ``observer(op, impl, request)`` first; a function it returns
    runs in place of the backend."""
    _OBSERVERS.append(observer)
    try:
        yield
    finally:
        _OBSERVERS.remove(observer)


class Choice(NamedTuple):
    """One op call as :func:`recording_choices` saw it: the ``impl`` asked, the backend chosen."""
    op: 'Op'
    asked: str
    request: Request
    chosen: str


@contextlib.contextmanager
def recording_choices() -> Iterator[List[Choice]]:
    """Inside, every op call's :class:`Choice` appended to the list it yields: the ops' decision
    watched from outside (nothing changes what ``auto`` picks)."""
    choices: List[Choice] = []
    with observing(lambda op, impl, request: choices.append(
            Choice(op, impl, request, op.choose(impl, request)))):
        yield choices


class Op:
    """The backends of one op in ``auto``'s order.

    Args:
        name: The op's public function, for messages.
        backends: The chain; its last backend supports every request ``auto`` meets.
    """

    def __init__(self, name: str, backends: Sequence[Backend]) -> None:
        self.name = name
        self.backends = {backend.name: backend for backend in backends}
        self.impls = ('auto', *self.backends)

    def check_impl(self, impl: str, owner: Optional[str] = None, name: str = 'impl') -> str:
        """``impl`` if it names a backend or ``'auto'``, else a one-line ``ValueError``."""
        return check_choice(owner or self.name, impl, self.impls, name)

    def reasons(self, request: Request) -> Dict[str, Optional[str]]:
        """For each backend in order, why ``auto`` passes it over for ``request``, or ``None``."""
        return {name: backend.why_not(request) for name, backend in self.backends.items()}

    def choose(self, impl: str, request: Request) -> str:
        """The backend that runs ``request``: ``auto``'s choice, or ``impl`` checked (a one-line
        :class:`UnsupportedInput` where it cannot run the request)."""
        if impl == 'auto':
            return self._auto(request)
        reason = self.backends[self.check_impl(impl)].unsupported(request)
        if reason is not None:
            raise UnsupportedInput(f'{self.name}(impl={impl!r}): {reason}')
        return impl

    def _auto(self, request: Request) -> str:
        passed: Dict[str, str] = {}
        for name, backend in self.backends.items():
            reason = backend.why_not(request)
            if reason is None:
                if passed and request.context != 'compile' and LOGGER.isEnabledFor(logging.DEBUG):
                    LOGGER.debug('%s [%s] runs %s; %s', self.name, request.describe(), name,
                                 '; '.join(f'not {impl}: {why}' for impl, why in passed.items()))
                return name
            passed[name] = reason
        raise UnsupportedInput(f"{self.name}(impl='auto'): no backend runs {request.describe()}: "
                               + '; '.join(f'{impl}: {why}' for impl, why in passed.items()))

    def explain(self, request: Request) -> Tuple[str, Dict[str, str]]:
        """``auto``'s choice for ``request`` and, for every other backend, why not."""
        chosen = self.choose('auto', request)
        return chosen, {name: reason or f'after {chosen!r} in auto\'s order'
                        for name, reason in self.reasons(request).items() if name != chosen}

    def __call__(self, impl: str, request: Request, *args: Any) -> Any:
        """Run the backend :meth:`choose` picks (or what an :func:`observing` observer gives)."""
        for observer in _OBSERVERS:
            function = observer(self, impl, request)
            if function is not None:
                return function(*args)
        return self.backends[self.choose(impl, request)].function(*args)


# checks shared by the ops

def cpu_kernels(request: Request) -> Optional[str]:
    """The C++ kernels: CPU tensors, not traced."""
    if request.device != 'cpu':
        return f'C++ kernels for CPU tensors; these are on {request.device}'
    if request.traced:
        return f'{TRACERS[request.context]} cannot hold the C++ kernels'
    return None


def opaque_to_dispatch(request: Request) -> Optional[str]:
    """Kernels under a dispatch mode (torch's FLOP counter) are one call it cannot see into; the
    torch path shows it the arithmetic."""
    if request.context == 'dispatch':
        return 'a dispatch mode (a FLOP counter) sees a kernel as one opaque call'
    return None


def interpreted(request: Request) -> Optional[str]:
    """Triton's interpreter (``TRITON_INTERPRET=1``) runs the kernels on CPU tensors, slowly: for
    debugging and tests, when asked for by name."""
    if request.device != 'cuda':
        return ('on CPU tensors the Triton kernels are interpreted (TRITON_INTERPRET=1): for '
                'debugging and tests')
    return opaque_to_dispatch(request)


# the kernels are tuned and compiled ahead of time for sm_80 and sm_90 (bfloat16, 100 KB of shared
# memory a block); older GPUs take the torch paths
MIN_CAPABILITY = (8, 0)


def older_gpu(request: Request) -> Optional[str]:
    """Why a CUDA request's GPU is too old for the kernels, or None."""
    capability = machine.cuda_capability() if request.device == 'cuda' else None
    if capability is None or capability >= MIN_CAPABILITY:
        return None
    return (f'Triton kernels for compute capability {MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]} and '
            f'later; this GPU is sm_{capability[0]}{capability[1]}')


def triton_kernels(max_head_dims: Optional[int] = None) -> Check:
    """The check of Triton kernels that take heads up to ``max_head_dims`` wide (default
    :data:`~mmvisattn.ops.utils.triton_launch.MAX_HEAD_DIMS`)."""
    def unsupported(request: Request) -> Optional[str]:
        if request.device != 'cuda' and not (request.device == 'cpu'
                                             and machine.triton_interpreted()):
            return f'Triton kernels for CUDA tensors; these are on {request.device}'
        if request.traced:
            return f'{TRACERS[request.context]} cannot hold a Triton kernel'
        return (
            old_triton()
            or older_gpu(request)
            or unsupported_kernel_input(request.dtype, request.head_dims, max_head_dims)
        )
    return unsupported


def old_triton() -> Optional[str]:
    """Why the installed Triton cannot run the kernels, or None."""
    installed = machine.installed_triton()
    if installed is None or installed < MIN_TRITON:
        found = ('none is installed' if installed is None
                 else f'{".".join(map(str, installed))} is installed')
        return f'needs triton >= {".".join(map(str, MIN_TRITON))}; {found}'
    return None
