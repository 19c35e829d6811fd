"""Stop training at the first non-finite loss, naming the iteration and the loss terms."""
import math
from typing import Optional

import torch
from mmdet.engine.hooks import CheckInvalidLossHook
from mmengine.registry import HOOKS


class NonFiniteLoss(RuntimeError):
    """A training loss became NaN or infinite; the message names the iteration and the terms."""


@HOOKS.register_module()
class FiniteLossHook(CheckInvalidLossHook):
    """mmdet's ``CheckInvalidLossHook``, checking every iteration by default and failing in one line
    naming the iteration and the term (the stock hook asserts with no message). In mmengine's root
    registry, so segmentation configs use it too; it runs after ``RankMeanLossHook``, so a NaN on
    any rank stops every rank at the same iteration.

    Args:
        interval: Check every ``interval`` iterations (mmdet's default is 50).
    """

    priority = 'ABOVE_NORMAL'  # before the logger and CheckpointHook: no NaN checkpoint is written

    def __init__(self, interval: int = 1) -> None:
        super().__init__(interval)

    def after_train_iter(self, runner, batch_idx: int, data_batch: Optional[dict] = None,
                         outputs: Optional[dict] = None) -> None:
        if (
            not outputs
            or 'loss' not in outputs
            or not self.every_n_train_iters(runner, self.interval)
        ):
            return
        # the sum of every term, detached (a float of a graph's tensor warns): one conversion
        if math.isfinite(float(torch.as_tensor(outputs['loss']).detach())):
            return
        values = {name: float(value) for name, value in outputs.items() if 'loss' in name}
        terms = ', '.join(f'{name} {value:.4g}' for name, value in values.items())
        raise NonFiniteLoss('training stopped: the loss is not finite at iteration '
                            f'{runner.iter + 1} ({terms})')
