"""Log the loss of the whole distributed batch, not rank 0's share of it."""
from typing import Optional

import torch
from mmengine.dist import all_reduce, get_comm_device, get_world_size
from mmengine.hooks import Hook
from mmengine.registry import HOOKS


@HOOKS.register_module()
class RankMeanLossHook(Hook):
    """Replace every value a training step reports (``loss``, its terms, accuracies) by its mean
    over the ranks before the runtime-info hook records it, so the logged numbers describe the
    whole batch of every rank rather than rank 0's alone. Gradients are unaffected (DDP already
    averages them); one ``all_reduce`` of a few floats per iteration, on the device of the process
    group's backend (CUDA for NCCL), whatever each value is: a Python float or a tensor on any
    device. Does nothing in a single-process run. mmengine (0.10.7) reduces nothing, and mmdet/mmseg
    ship no hook for it.
    """

    priority = 'HIGHEST'  # before RuntimeInfoHook (VERY_HIGH) stores the values for the logger

    def after_train_iter(self, runner, batch_idx: int, data_batch=None,
                         outputs: Optional[dict] = None) -> None:
        if not outputs or get_world_size() == 1:
            return
        names, device = list(outputs), get_comm_device()
        values = torch.stack([torch.as_tensor(outputs[name],
                                              device=device).detach().float().reshape(())
                              for name in names])
        all_reduce(values, op='mean')
        for name, value in zip(names, values):
            outputs[name] = value
