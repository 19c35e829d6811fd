"""The largest square training input with batch 2 that fits the device, for one model, in its own
process (``gpu_proof_models.py --largest``):

    python -m mmvisattn.benchmarks.largest_input '{"config": ..., "deploy": false, "stride": 32,
        "start": 256, "ceiling": 8192, "memory_cap_mb": null}'

One float32 training step (loss, backward, AdamW) on synthetic targets (:mod:`.model_pairs`) per side:
doubling from ``start`` until a side fails (or ``ceiling``), then bisection on the stride. A try that
runs out of memory is caught and the allocator's cache emptied; ``memory_cap_mb`` caps the process
first (:func:`mmvisattn.proof.model_probe.cap_memory`). Prints the result as one JSON line.
"""
import json
import sys
from typing import Dict

OOM_SIGNS = ('out of memory', "can't allocate memory", 'not enough memory', 'MemoryError', 'OutOfMemoryError')


def fits(model, side: int, device: str) -> bool:
    """One float32 training step (loss, backward, AdamW) at batch 2 and ``side`` fits the device."""
    import torch
    from mmvisattn.benchmarks.model_pairs import TrainingStep
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
        if any(sign in str(error) for sign in OOM_SIGNS):
            return False
        raise
    finally:
        del step
        model.zero_grad(set_to_none=True)
        if device == 'cuda':
            torch.cuda.empty_cache()


def largest_side(model, stride: int, start: int, ceiling: int, device: str) -> Dict[str, object]:
    """Doubling from ``start`` until a side fails (or ``ceiling``), then bisection on the stride."""
    tried: Dict[int, bool] = {}
    side = start
    while side <= ceiling and tried.setdefault(side, fits(model, side, device)):
        side *= 2
    good = max([s for s, ok in tried.items() if ok], default=0)
    bad = min([s for s, ok in tried.items() if not ok], default=None)
    while bad is not None and bad - good > stride:
        middle = (good + bad) // 2 // stride * stride
        if middle <= good:
            break
        if tried.setdefault(middle, fits(model, middle, device)):
            good = middle
        else:
            bad = middle
    return dict(largest_input=good or None, tried={str(s): ok for s, ok in sorted(tried.items())},
                saturated=bad is None)


def largest_worker(payload: Dict) -> Dict:
    """In its own process: the model of ``payload['config']`` on the device, its largest side."""
    import torch
    from mmvisattn.benchmarks.model_pairs import build_training_model
    from mmvisattn.proof.model_probe import cap_memory
    device = 'cuda' if torch.cuda.is_available() else 'cpu'
    torch.manual_seed(0)
    model = build_training_model(payload['config'], payload.get('deploy', False)).to(device)
    if payload.get('memory_cap_mb'):
        cap_memory(payload['memory_cap_mb'])
    return largest_side(model, payload['stride'], payload['start'], payload['ceiling'], device)


if __name__ == '__main__':
    print(json.dumps(largest_worker(json.loads(sys.argv[1]))))
