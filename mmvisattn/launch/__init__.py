"""What ``tools/train.py`` and ``tools/test.py`` run around the stock mmengine Runner, and every other
tool takes from them: config loading with its one-line checks (:mod:`.config_checks`), the checks of
data and checkpoints, the safeguard hooks and CPU-capable distributed start-up."""
from .checks import check_data_files, check_model_fits_checkpoint, diagnose_failure, read_run_checkpoint
from .runner import add_config_arguments, init_cpu_distributed, load_config, parse_tool_args, run

__all__ = ['add_config_arguments', 'check_data_files', 'check_model_fits_checkpoint', 'diagnose_failure',
           'init_cpu_distributed', 'load_config', 'parse_tool_args', 'read_run_checkpoint', 'run']
