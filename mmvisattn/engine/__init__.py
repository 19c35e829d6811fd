from .hooks import CastlingScheduleHook

__all__ = ['CastlingScheduleHook']
