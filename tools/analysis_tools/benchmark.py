"""Inference speed (images per second) of any config, as mmdet's and mmseg's ``benchmark.py``, on
CPU or CUDA:

    python tools/analysis_tools/benchmark.py CONFIG [CHECKPOINT] [--max-iter 2000] [--device
    cpu|cuda] ...

The tool's logic: :mod:`mmvisattn.analysis.benchmark`."""
from mmvisattn.analysis.benchmark import main

if __name__ == '__main__':
    main()
