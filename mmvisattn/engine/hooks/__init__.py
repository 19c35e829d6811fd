from .castling_schedule_hook import CastlingScheduleHook
from .dropped_annotations_hook import DroppedAnnotationsHook
from .finite_loss_hook import FiniteLossHook, NonFiniteLoss
from .preemption_hook import PreemptionHook
from .random_state_hook import RandomStateHook
from .rank_mean_loss_hook import RankMeanLossHook
from .vil_random_shift_hook import ViLRandomShiftHook

__all__ = ['CastlingScheduleHook', 'DroppedAnnotationsHook', 'FiniteLossHook', 'NonFiniteLoss',
           'PreemptionHook', 'RandomStateHook', 'RankMeanLossHook', 'ViLRandomShiftHook']
