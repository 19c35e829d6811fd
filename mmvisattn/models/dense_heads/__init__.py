from .pico_head import PicoHead

__all__ = ['PicoHead']
