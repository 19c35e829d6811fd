from .checks import check_data_files, check_model_fits_checkpoint, diagnose_failure, read_run_checkpoint
from .launch import init_cpu_distributed, load_config, run

__all__ = ['check_data_files', 'check_model_fits_checkpoint', 'diagnose_failure', 'init_cpu_distributed',
           'load_config', 'read_run_checkpoint', 'run']
