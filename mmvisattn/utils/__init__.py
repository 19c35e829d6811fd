from .complexity import count_flops, count_parameters

__all__ = ['count_flops', 'count_parameters']
