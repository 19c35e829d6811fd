from .checkpoint import (CheckpointError, check_backbone_weights, read_checkpoint, read_converter_input,
                         save_converted, state_dict_of)
from .complexity import count_flops, count_parameters

__all__ = ['CheckpointError', 'check_backbone_weights', 'count_flops', 'count_parameters', 'read_checkpoint',
           'read_converter_input', 'save_converted', 'state_dict_of']
