"""What autograd saves for the backward of a step: the activations it holds at its peak, the same on
any device (the benchmarks' and the tests' memory figures)."""
import gc
import weakref
from typing import Callable, Dict

import torch


class SavedTensors(torch.autograd.graph.saved_tensors_hooks):
    """Records what autograd saves for the backward while active, under ``label()`` (e.g. the
    running module); :meth:`alive` counts the storages still held. Each storage counts once, whole;
    what a dead graph saved is not counted."""

    def __init__(self, label: Callable[[], str] = str):
        self.saved = []
        self.label = label
        super().__init__(self.pack, lambda alias: alias)

    def __enter__(self) -> 'SavedTensors':
        super().__enter__()
        return self

    def pack(self, tensor: torch.Tensor) -> torch.Tensor:
        # an alias without the grad_fn, held by the graph alone (an output packed as itself would
        # hold its own grad_fn, a cycle that keeps a dead graph alive)
        alias = tensor.detach()
        self.saved.append((self.label(), weakref.ref(alias)))
        return alias

    def alive(self, in_elements: bool = False) -> Dict[str, int]:
        """Bytes (or elements) per label of the saved storages still alive."""
        gc.collect()  # graphs that died in reference cycles of Python objects
        by_storage = {}
        for label, ref in self.saved:
            tensor = ref()
            if tensor is not None:
                storage = tensor.untyped_storage()
                size = storage.nbytes() // (tensor.element_size() if in_elements else 1)
                by_storage.setdefault(storage.data_ptr(), (label, size))
        totals = {}
        for label, size in by_storage.values():
            totals[label] = totals.get(label, 0) + size
        return totals


def saved_for_backward(run: Callable[[], object], in_elements: bool = False) -> int:
    """Bytes (or elements) autograd holds for the backward once ``run()`` returns: a step's peak
    activations, the same on any device."""
    with SavedTensors() as saved:
        result = run()  # holds the graph, and what it saved, alive until they are counted
    total = sum(saved.alive(in_elements).values())
    del result
    return total
