"""mmvisattn: efficient vision attention for the OpenMMLab detection and segmentation stack.

Importing the package (directly or through ``custom_imports=dict(imports=['mmvisattn'])`` in a
config) registers its attentions into ``ATTENTIONS`` and its models into the mmdet and mmseg
``MODELS`` registries, and applies the compatibility shims of :mod:`mmvisattn.compat`.
"""
from .compat import (allow_half_mmcv_ops_on_cpu, allow_runner_checkpoints, register_flop_handles,
                     register_torch_hardsigmoid)
from .version import __version__

allow_runner_checkpoints()
allow_half_mmcv_ops_on_cpu()
register_torch_hardsigmoid()
register_flop_handles()

from . import engine, models  # noqa: E402,F401  (registration happens on import)
from .registry import ATTENTIONS, build_attention, register_model  # noqa: E402

__all__ = ['__version__', 'ATTENTIONS', 'build_attention', 'register_model']
