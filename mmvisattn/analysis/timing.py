"""The one timing loop and peak-memory reader of the benchmarks, the package's and the lab's.

Times are wall seconds on CPU and CUDA-event seconds on a GPU; steps timed together alternate their
order every round, so a drift of the machine falls on each alike. Peak memory is
``max_memory_allocated`` on a GPU and the resettable peak resident set (``VmHWM``) on CPU. Needs
torch only.
"""
import math
import statistics
import time
from typing import Callable, Dict, List

import torch


def _seconds(step: Callable[[], object], cuda: bool) -> float:
    if not cuda:
        start = time.perf_counter()
        step()
        return time.perf_counter() - start
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    step()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3


def rounds(steps: Dict[str, Callable[[], object]], count: int, budget: float = math.inf,
           warm_up: int = 1, cuda: bool = False) -> Dict[str, List[float]]:
    """Seconds of every step per round, order reversed every other round, after ``warm_up`` calls;
    stops at ``count`` rounds or ``budget`` seconds (at least three)."""
    for step in steps.values():
        for _ in range(warm_up):
            step()
    times = {label: [] for label in steps}
    order = list(steps)
    started = time.perf_counter()
    for index in range(count):
        for label in order if index % 2 == 0 else order[::-1]:
            times[label].append(_seconds(steps[label], cuda))
        if index >= 2 and time.perf_counter() - started > budget:
            break
    return times


def median_ms(step: Callable[[], object], repeats: int, warm_up: int = 1,
              cuda: bool = False) -> float:
    """The median of ``repeats`` timed calls of ``step``, in ms."""
    return 1e3 * statistics.median(rounds({'step': step}, repeats, warm_up=warm_up,
                                          cuda=cuda)['step'])


def reset_peak(cuda: bool) -> None:
    """Start a new peak (CUDA's allocator statistics, or the resident set's high-water mark)."""
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        return
    # '5' resets VmHWM to the current resident set
    with open('/proc/self/clear_refs', 'w') as clear_refs:
        clear_refs.write('5')


def peak_mb(cuda: bool) -> float:
    """The peak since the last :func:`reset_peak` (or the process's start), MB."""
    if cuda:
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() / 2 ** 20
    with open('/proc/self/status') as status:
        return next(int(line.split()[1]) for line in status if line.startswith('VmHWM:')) / 1024


def peak_growth_mb(step: Callable[[], object], cuda: bool = False) -> float:
    """How far the peak rises above the memory in use while ``step()`` runs, MB."""
    reset_peak(cuda)
    base = torch.cuda.memory_allocated() / 2 ** 20 if cuda else peak_mb(cuda)
    step()
    return peak_mb(cuda) - base
