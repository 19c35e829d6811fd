"""Random-shifting training of Vision Longformer (arXiv:2103.15358, App. D): mode-1 attentions see
their own chunk and one random neighbour; late in training they switch to all eight neighbours (mode
0), which inference uses."""
from typing import Optional

from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper
from mmengine.registry import HOOKS


@HOOKS.register_module()
class ViLRandomShiftHook(Hook):
    """Switch every ``LongformerAttention`` in random-shifting mode (``mode=1``) to ``mode=0`` at
    ``switch_at`` of ``runner.max_iters`` (App. D: 75%). Build the model with
    ``attn_cfg=dict(type='LongformerAttention', mode=1)``.

    Args:
        switch_at: Fraction of the training iterations after which all neighbours are used.
    """

    priority = 'NORMAL'

    def __init__(self, switch_at: float = 0.75) -> None:
        if not 0.0 <= switch_at <= 1.0:
            raise ValueError(f'ViLRandomShiftHook: switch_at={switch_at}; expected a fraction in '
                             '[0, 1]')
        self.switch_at = switch_at

    def before_train_iter(self, runner, batch_idx: int, data_batch: Optional[dict] = None) -> None:
        if runner.iter < self.switch_at * runner.max_iters:
            return
        model = runner.model.module if is_model_wrapper(runner.model) else runner.model
        for module in model.modules():
            if getattr(module, 'mode', None) == 1 and hasattr(module, 'step_mode'):
                module.mode = 0
