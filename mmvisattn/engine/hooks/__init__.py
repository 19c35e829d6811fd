from .castling_schedule_hook import CastlingScheduleHook
from .dropped_annotations_hook import DroppedAnnotationsHook
from .finite_loss_hook import FiniteLossHook, NonFiniteLoss
from .random_state_hook import RandomStateHook
from .rank_mean_loss_hook import RankMeanLossHook
from .vil_random_shift_hook import ViLRandomShiftHook

__all__ = ['CastlingScheduleHook', 'DroppedAnnotationsHook', 'FiniteLossHook', 'NonFiniteLoss', 'RandomStateHook',
           'RankMeanLossHook', 'ViLRandomShiftHook', 'SAFEGUARD_HOOKS']

# Added by tools/train.py and tools/test.py to every config's ``default_hooks`` (a key the config sets, even to None,
# wins). Not in the runtime bases: mmseg keeps ``default_hooks`` in its schedules and many configs
# inherit stock mmdet/mmseg configs directly, and mmengine refuses a key two bases both define.
SAFEGUARD_HOOKS = dict(
    random_state=dict(type='RandomStateHook'),
    finite_loss=dict(type='FiniteLossHook', interval=1),
    rank_mean_loss=dict(type='RankMeanLossHook'),
    dropped_annotations=dict(type='DroppedAnnotationsHook'))
