"""Log the loss of the whole distributed batch, not rank 0's share of it."""
from typing import Optional

import torch
from mmengine.dist import all_reduce, get_comm_device, get_world_size
from mmengine.hooks import Hook
from mmengine.registry import HOOKS


@HOOKS.register_module()
class RankMeanLossHook(Hook):
    """Log every value a training step reports (``loss``, its terms, accuracies) as its mean over
    the ranks rather than rank 0's alone (mmengine 0.10.7 reduces nothing). Gradients are
    unaffected; one ``all_reduce`` of a few floats per iteration; nothing in a single-process run.
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
