from .hooks import CastlingScheduleHook
from .vil_hooks import ViLRandomShiftHook

__all__ = ['CastlingScheduleHook', 'ViLRandomShiftHook']
