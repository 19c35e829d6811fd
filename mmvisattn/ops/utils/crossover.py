"""Where an op's dense form is faster on a GPU: crossovers measured per GPU model, and the refusal
``auto`` asks on CUDA.

Some ops have a form whose cost is a few batched ``N x N`` products on tensor cores (ripple's
spatial weights as one ``N x N`` factor, Castling's deploy kernel ``phi(Q) phi(K)^T V``): on small maps
it can beat their O(N) kernels, which pay for their recurrences or summaries in launches and latency.
Where the two cross depends on the GPU. :data:`CUDA_DENSE_CROSSOVERS` holds, per op and GPU name
(``torch.cuda.get_device_name()``), the largest token count at which the GPU proof's crossover sweep
(``tools/analysis_tools/gpu_proof.py``, its record under ``docs/records/gpu/``) measured the dense form
faster in forward + backward; ``auto`` takes the dense form up to it. On a GPU without a measurement
``auto`` stays as it was (the op's O(N) order), and ``tests/test_tools/test_gpu_records.py`` holds the
table to the newest records.
"""
from functools import lru_cache
from typing import Dict, Optional

import torch

from .dispatch import Refusal, Request

# {op: {GPU name: the largest token count where the dense form was measured faster}}; none measured yet
CUDA_DENSE_CROSSOVERS: Dict[str, Dict[str, int]] = {}
# {op: its dense form's impl} for the ops whose dense form auto takes below a crossover (their dense_on_cuda
# refusals): the proof sweeps them
SWEPT_OPS: Dict[str, str] = {}


@lru_cache(maxsize=8)
def _device_name(index: int) -> str:
    return torch.cuda.get_device_name(index)


def current_gpu() -> Optional[str]:
    """The name of the current CUDA device, or ``None`` without one (a dry run replaying CUDA on a CPU
    machine); read once per device."""
    if not torch.cuda.is_available():
        return None
    return _device_name(torch.cuda.current_device())


def dense_on_cuda(op: str, kernels: Optional[Refusal] = None, impl: str = 'dense') -> Refusal:
    """The refusal of ``op``'s dense form (its implementation ``impl``) on CUDA: taken up to the crossover
    measured on this GPU (the request's ``tokens`` fact), refused on a GPU without one; ``kernels``: the
    refusal of the dense form's own kernels, asked first."""
    SWEPT_OPS[op] = impl

    def refusal(request: Request) -> Optional[str]:
        if request.device != 'cuda':
            return f'taken on CUDA below a crossover measured on the GPU; these are on {request.device}'
        reason = kernels and kernels(request)
        if reason:
            return reason
        gpu = current_gpu()
        crossover = CUDA_DENSE_CROSSOVERS.get(op, {}).get(gpu)
        if crossover is None:
            return f'no crossover measured on {gpu or "this GPU"}: the O(N) form stays (GPU records)'
        tokens = request.fact('tokens')
        if tokens > crossover:
            return f'{tokens} tokens are past the crossover measured on {gpu} ({crossover})'
        return None
    return refusal
