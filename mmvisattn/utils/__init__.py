from .checkpoint import check_backbone_weights, save_converted
from .complexity import count_flops, count_parameters

__all__ = ['count_flops', 'count_parameters', 'check_backbone_weights', 'save_converted']
