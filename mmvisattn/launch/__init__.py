"""What ``tools/train.py`` and ``tools/test.py`` run around the stock mmengine Runner: config loading,
the one-line checks of data and checkpoints, the safeguard hooks and CPU-capable distributed start-up."""
from .checks import check_data_files, check_model_fits_checkpoint, diagnose_failure, read_run_checkpoint
from .runner import init_cpu_distributed, load_config, parse_tool_args, run

__all__ = ['check_data_files', 'check_model_fits_checkpoint', 'diagnose_failure', 'init_cpu_distributed',
           'load_config', 'parse_tool_args', 'read_run_checkpoint', 'run']
