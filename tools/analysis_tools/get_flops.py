"""Parameters and FLOPs (multiply-accumulates, OpenMMLab's unit) of a detection or segmentation
config, with the attention matmuls and linear solves counted: the figures of mmengine's
``get_model_complexity_info`` (mmdet's and mmseg's ``get_flops.py``) once ``mmvisattn`` is imported,
plus a break-down by operator.

The tool's logic: :mod:`mmvisattn.analysis.flops`."""
from mmvisattn.analysis.flops import main

if __name__ == '__main__':
    main()
