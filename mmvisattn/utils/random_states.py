"""The random-number states of a process, captured for a checkpoint and restored (torch and numpy
only; :class:`mmvisattn.engine.hooks.RandomStateHook` uses them).
"""
import random
from typing import Dict, List

import numpy as np
import torch
from torch import Tensor

RandomStates = Dict[str, object]


def numpy_globals() -> List[object]:
    """The globals numpy's pickles of arrays, dtypes and scalars refer to (numpy 1.x and 2.x): what
    ``torch.load(weights_only=True)`` must be allowed to rebuild NumPy's state (and any array)."""
    core = getattr(np, '_core', None) or np.core
    dtype_classes = [type(np.dtype(code)) for code in '?bBhHiIlLqQefdgFDGUS']
    return [core.multiarray._reconstruct, core.multiarray.scalar, np.ndarray, np.dtype,
            *dtype_classes]


def capture_random_states() -> RandomStates:
    """The Python, NumPy, torch CPU and (with CUDA in use) current CUDA generator states."""
    states = dict(python=random.getstate(), numpy=np.random.get_state(),
                  torch=torch.get_rng_state())
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states['cuda'] = torch.cuda.get_rng_state()
    return states


def generator_state(state: Tensor) -> Tensor:
    """A generator state as ``set_rng_state`` takes it: a CPU byte tensor, whatever device the
    checkpoint was mapped to."""
    return state.detach().to(device='cpu', dtype=torch.uint8)


def restore_random_states(states: RandomStates) -> None:
    """Put back the states of :func:`capture_random_states`; a CUDA state is restored where CUDA is
    available (a checkpoint of a GPU run resumed on CPU keeps the CPU streams exact)."""
    random.setstate(states['python'])
    np.random.set_state(states['numpy'])
    torch.set_rng_state(generator_state(states['torch']))
    if 'cuda' in states and torch.cuda.is_available():
        torch.cuda.set_rng_state(generator_state(states['cuda']))
