from .hooks import (CastlingScheduleHook, DroppedAnnotationsHook, FiniteLossHook, NonFiniteLoss, RandomStateHook,
                    RankMeanLossHook, ViLRandomShiftHook)
from .optim_wrappers import CPUAmpOptimWrapper

__all__ = ['CastlingScheduleHook', 'CPUAmpOptimWrapper', 'DroppedAnnotationsHook', 'FiniteLossHook', 'NonFiniteLoss',
           'RandomStateHook', 'RankMeanLossHook', 'ViLRandomShiftHook']
