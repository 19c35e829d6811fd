from .smca import SMCA

__all__ = ['SMCA']
