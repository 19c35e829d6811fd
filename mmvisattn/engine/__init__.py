from .hooks import (CastlingScheduleHook, FiniteLossHook, NonFiniteLoss, RandomStateHook, RankMeanLossHook,
                    ViLRandomShiftHook)
from .optim_wrappers import CPUAmpOptimWrapper

__all__ = ['CastlingScheduleHook', 'CPUAmpOptimWrapper', 'FiniteLossHook', 'NonFiniteLoss', 'RandomStateHook',
           'RankMeanLossHook', 'ViLRandomShiftHook']
