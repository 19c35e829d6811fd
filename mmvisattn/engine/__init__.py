from .hooks import (
                    CastlingScheduleHook,
                    DroppedAnnotationsHook,
                    FiniteLossHook,
                    NonFiniteLoss,
                    RandomStateHook,
                    RankMeanLossHook,
                    ViLRandomShiftHook,
)
from .layer_decay import BackboneLayerDecayOptimWrapperConstructor
from .optim_wrappers import CPUAmpOptimWrapper

__all__ = ['BackboneLayerDecayOptimWrapperConstructor', 'CastlingScheduleHook',
           'CPUAmpOptimWrapper', 'DroppedAnnotationsHook', 'FiniteLossHook', 'NonFiniteLoss',
           'RandomStateHook', 'RankMeanLossHook', 'ViLRandomShiftHook']
