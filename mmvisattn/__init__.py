"""mmvisattn: efficient vision attention for the OpenMMLab detection and segmentation stack.

Importing the package (directly or through ``custom_imports=dict(imports=['mmvisattn'])`` in a
config) registers its attentions into ``ATTENTIONS`` and its models into the mmdet, mmseg and
mmpretrain ``MODELS`` registries, and applies the fixes and additions of :mod:`mmvisattn.compat`
(the only place that changes another library's code): fixes of defects of the pinned stack a user
meets without the project's models, and names stock does not have. It alters nothing else of the
stack; the project's tools apply their conveniences themselves
(:func:`mmvisattn.compat.apply_tool_patches`).

The ops layer, :mod:`mmvisattn.ops`, stands alone: it needs torch (and triton for its kernels), as
NATTEN and flash-linear-attention do. Where OpenMMLab is not installed (a bare GPU machine checking
the kernels, ``python -m mmvisattn.ops.check``) the package imports without registering anything,
and ``mmvisattn.models`` fails on its first OpenMMLab import, naming the package.
"""
from importlib.util import find_spec

from .version import __version__

__all__ = ['__version__']

if find_spec('mmengine') is not None:
    from .compat import apply_patches

    # first: mmdet's models import mmpretrain, which imports torchvision (see compat)
    apply_patches()
    from . import engine, models  # noqa: F401,E402  (registration happens on import)
    from .registry import ATTENTIONS, build_attention, register_model  # noqa: E402
    __all__ += ['ATTENTIONS', 'build_attention', 'register_model']
