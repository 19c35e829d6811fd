"""The largest square training input with batch 2 that fits the device, for one model, in its own
process (``gpu_proof_models.py --largest``):

    python -m lab.bench.largest_input '{"config": ..., "deploy": false, "stride": 32,
        "start": 256, "ceiling": 8192, "memory_cap_mb": null}'

One float32 AdamW training step on synthetic targets (:mod:`.model_pairs`) per side, doubling from
``start`` until a side fails (or ``ceiling``), then bisection on the stride; out-of-memory is caught
and the cache emptied; ``memory_cap_mb`` caps the process (:func:`cap_memory`). Prints one JSON
line.
"""
import json
import os
import sys
from typing import Dict

# std::bad_alloc: a C++ allocation (a kernel's scratch, not torch's allocator) the host refused
OOM_SIGNS = ('out of memory', "can't allocate memory", 'not enough memory', 'MemoryError',
             'OutOfMemoryError', 'std::bad_alloc')
# oneDNN reports a buffer the capped address space refused (a convolution's scratchpad or JIT code)
# as a failed primitive creation with no word of memory: a sign only where a CPU run is capped
CAPPED_CPU_OOM_SIGNS = (*OOM_SIGNS, 'could not create a primitive')


def out_of_memory(text: str, capped_cpu: bool) -> bool:
    """The allocator's refusal; ``capped_cpu``: the run's address space was capped."""
    return any(sign in text for sign in (CAPPED_CPU_OOM_SIGNS if capped_cpu else OOM_SIGNS))


def cap_memory(megabytes: float) -> None:
    """Cap this process at ``megabytes`` more than it holds (CPU: its address space) or at that much
    of the GPU's memory, so that a run past it fails as out of memory."""
    import torch
    if torch.cuda.is_available():
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, megabytes * 2 ** 20 / total))
        return
    import resource
    with open('/proc/self/statm') as statm:
        virtual = int(statm.read().split()[0]) * os.sysconf('SC_PAGE_SIZE')
    limit = virtual + int(megabytes * 2 ** 20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def fits(model, side: int, device: str, capped: bool = False) -> bool:
    """One float32 training step (loss, backward, AdamW) at batch 2 and ``side`` fits the device
    (``capped``: under :func:`cap_memory`)."""
    import torch

    from lab.bench.model_pairs import TrainingStep
    step = None
    try:
        step = TrainingStep(model, 2, side, side, device=device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        step()
        optimizer.step()
        if device == 'cuda':
            torch.cuda.synchronize()
        return True
    except (torch.cuda.OutOfMemoryError, MemoryError):
        return False
    except RuntimeError as error:  # the CPU allocator's refusal under a capped address space
        if out_of_memory(str(error), capped and device == 'cpu'):
            return False
        raise
    finally:
        del step
        model.zero_grad(set_to_none=True)
        if device == 'cuda':
            torch.cuda.empty_cache()


def largest_side(model, stride: int, start: int, ceiling: int, device: str,
                 capped: bool = False) -> Dict[str, object]:
    """Doubling from ``start`` until a side fails (or ``ceiling``), then bisection on the stride."""
    tried: Dict[int, bool] = {}
    side = start
    while side <= ceiling and tried.setdefault(side, fits(model, side, device, capped)):
        side *= 2
    good = max([s for s, ok in tried.items() if ok], default=0)
    bad = min([s for s, ok in tried.items() if not ok], default=None)
    while bad is not None and bad - good > stride:
        middle = (good + bad) // 2 // stride * stride
        if middle <= good:
            break
        if tried.setdefault(middle, fits(model, middle, device, capped)):
            good = middle
        else:
            bad = middle
    return dict(largest_input=good or None, tried={str(s): ok for s, ok in sorted(tried.items())},
                saturated=bad is None)


def largest_worker(payload: Dict) -> Dict:
    """In its own process: the model of ``payload['config']`` on the device, its largest side."""
    import torch

    from lab.bench.model_pairs import build_training_model
    device = 'cuda' if torch.cuda.is_available() else 'cpu'
    torch.manual_seed(0)
    model = build_training_model(payload['config'], payload.get('deploy', False)).to(device)
    capped = bool(payload.get('memory_cap_mb'))
    if capped:
        cap_memory(payload['memory_cap_mb'])
    return largest_side(model, payload['stride'], payload['start'], payload['ceiling'], device,
                        capped)


if __name__ == '__main__':
    print(json.dumps(largest_worker(json.loads(sys.argv[1]))))
