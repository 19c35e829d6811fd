from .checkpoint import (
                         CheckpointError,
                         check_backbone_weights,
                         converter_arguments,
                         read_checkpoint,
                         read_converter_input,
                         rename_keys,
                         require_source_keys,
                         save_converted,
                         state_dict_of,
)
from .complexity import count_flops, count_parameters

__all__ = ['CheckpointError', 'check_backbone_weights', 'converter_arguments', 'count_flops',
           'count_parameters', 'read_checkpoint', 'read_converter_input', 'rename_keys',
           'require_source_keys', 'save_converted', 'state_dict_of']
