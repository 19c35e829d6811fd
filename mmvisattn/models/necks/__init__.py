from .csp_pan import CSPPAN

__all__ = ['CSPPAN']
