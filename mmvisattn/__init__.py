"""mmvisattn: efficient vision attention for the OpenMMLab detection and segmentation stack.

Importing the package (directly or through ``custom_imports=dict(imports=['mmvisattn'])`` in a
config) registers its attentions into ``ATTENTIONS`` and its models into the mmdet and mmseg
``MODELS`` registries, and applies the compatibility shims of :mod:`mmvisattn.compat`.

The ops layer, :mod:`mmvisattn.ops`, stands alone: it needs torch (and triton for its kernels), as
NATTEN and flash-linear-attention do. Where OpenMMLab is not installed (a bare GPU machine proving
the kernels, ``tools/analysis_tools/gpu_proof.py``) the package imports without registering
anything, and ``mmvisattn.models`` fails on its first OpenMMLab import, naming the package.
"""
from importlib.util import find_spec

from .version import __version__

__all__ = ['__version__']

if find_spec('mmengine') is not None:
    from .compat import (allow_half_mmcv_ops_on_cpu, allow_runner_checkpoints, register_flop_handles,
                         register_torch_hardsigmoid)

    allow_runner_checkpoints()
    allow_half_mmcv_ops_on_cpu()
    register_torch_hardsigmoid()
    register_flop_handles()

    from . import engine, models  # noqa: F401  (registration happens on import)
    from .registry import ATTENTIONS, build_attention, register_model

    __all__ += ['ATTENTIONS', 'build_attention', 'register_model']
