from .hooks import CastlingScheduleHook
from .optim_wrappers import CPUAmpOptimWrapper
from .vil_hooks import ViLRandomShiftHook

__all__ = ['CastlingScheduleHook', 'CPUAmpOptimWrapper', 'ViLRandomShiftHook']
