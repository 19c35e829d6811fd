"""What ``tools/train.py`` and ``tools/test.py`` run around the stock Runner: config loading with
its one-line checks, data and checkpoint checks, the safeguard hooks and a distributed start-up that
works on CPU too."""
from .checks import (
                     check_data_files,
                     check_model_fits_checkpoint,
                     diagnose_failure,
                     read_run_checkpoint,
)
from .process_group import join_process_group
from .runner import add_config_arguments, load_config, parse_tool_args, run

__all__ = ['add_config_arguments', 'check_data_files', 'check_model_fits_checkpoint',
           'diagnose_failure',
           'join_process_group', 'load_config', 'parse_tool_args', 'read_run_checkpoint', 'run']
