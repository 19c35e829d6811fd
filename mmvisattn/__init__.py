"""mmvisattn: efficient vision attention for the OpenMMLab detection and segmentation stack.

Importing the package (or ``custom_imports=dict(imports=['mmvisattn'])`` in a config) registers its
attentions into ``ATTENTIONS`` and its models into the mmdet, mmseg and mmpretrain ``MODELS``
registries, and applies :mod:`mmvisattn.compat`'s fixes and additions; it alters nothing else (the
tools apply their conveniences themselves).

The ops layer, :mod:`mmvisattn.ops`, needs only torch (and triton). Without OpenMMLab the package
imports without registering anything, and ``mmvisattn.models`` fails on its first OpenMMLab import,
naming the package.
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
