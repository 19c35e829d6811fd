"""Training hooks of mmvisattn."""
from typing import Optional

from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper
from mmengine.registry import HOOKS


@HOOKS.register_module()
class CastlingScheduleHook(Hook):
    """Fade out and remove the train-only auxiliary branches of castling attentions.

    Castling-ViT (arXiv:2211.10526) trains with an auxiliary softmax attention that must vanish
    before inference; no public source says how. ``aux_weight`` is 1 until ``fade_start``, falls
    linearly to 0 at ``fade_end``, and there ``switch_to_deploy()`` leaves the linear-time module
    alone. Fractions of ``runner.max_iters``.

    Args:
        fade_start: Fraction of training at which the auxiliary weight starts to fall.
        fade_end: Fraction at which it reaches 0 and the branch is removed.
    """

    priority = 'NORMAL'

    def __init__(self, fade_start: float = 0.5, fade_end: float = 0.75) -> None:
        if not 0.0 <= fade_start <= fade_end <= 1.0:
            raise ValueError(f'CastlingScheduleHook: need 0 <= fade_start <= fade_end <= 1, got '
                             f'fade_start={fade_start}, fade_end={fade_end}')
        self.fade_start = fade_start
        self.fade_end = fade_end

    def weight_at(self, progress: float) -> float:
        """Auxiliary weight at a fraction ``progress`` of training."""
        if progress < self.fade_start:
            return 1.0
        if progress >= self.fade_end:
            return 0.0
        return 1.0 - (progress - self.fade_start) / (self.fade_end - self.fade_start)

    def before_train_iter(self, runner, batch_idx: int, data_batch: Optional[dict] = None) -> None:
        self._apply(runner, self.weight_at(runner.iter / runner.max_iters))

    def before_val_epoch(self, runner) -> None:
        """Validate with the current weight: EMAHook, which runs first, swaps every buffer of the
        averaged copy in, and that copy's ``aux_weight`` is never averaged (it is not a weight)."""
        self._apply(runner, self.weight_at(runner.iter / runner.max_iters))

    def before_test_epoch(self, runner) -> None:
        """``tools/test.py`` evaluates the model that is deployed: without the auxiliary branches.
        (Checkpoints do not record the fade, which is a training schedule, not a weight.)"""
        self._apply(runner, 0.0)

    @staticmethod
    def _apply(runner, weight: float) -> None:
        """Set ``aux_weight`` of every castling module; at 0, remove the branch for good."""
        model = runner.model.module if is_model_wrapper(runner.model) else runner.model
        for module in model.modules():
            if getattr(module, 'has_aux_branch', False):
                if weight == 0.0:
                    module.switch_to_deploy()
                else:
                    module.aux_weight.fill_(weight)
