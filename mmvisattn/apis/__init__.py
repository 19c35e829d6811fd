from .launch import check_data_roots, find_corrupted_annotation, init_cpu_distributed, load_config, run

__all__ = ['load_config', 'init_cpu_distributed', 'check_data_roots', 'find_corrupted_annotation', 'run']
