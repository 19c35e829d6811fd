"""torchvision without its compiled ops: the two schemas torchvision 0.28 needs to import.

Its x86_64 PyPI wheels are CUDA builds whose ``_C`` does not load beside a CPU torch, and it then
fails to import ("operator torchvision::nms does not exist"). Where the library does not load,
``nms`` and ``qnms`` are defined without kernels: torchvision imports, and a compiled op fails with
its own message. Imports torch alone."""
import importlib.machinery
import importlib.util
import os
import sys
from typing import List, Optional

import torch

# the ops whose fake kernels torchvision 0.28 registers whether or not its library loaded
TORCHVISION_UNCHECKED_OPS = ('nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor',
                             'qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor')
# kept alive: a dropped Library removes its ops
_TORCHVISION_SCHEMAS: List[torch.library.Library] = []


def torchvision_library() -> Optional[str]:
    """The path of torchvision's compiled ``_C`` library, or ``None`` without one."""
    spec = importlib.util.find_spec('torchvision')
    if spec is None or not spec.submodule_search_locations:
        return None
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = os.path.join(spec.submodule_search_locations[0], '_C' + suffix)
        if os.path.isfile(path):
            return path
    return None


def import_torchvision_without_its_ops() -> None:
    """Define the ops torchvision registers unchecked where its library does not load; nothing where
    it loads or torchvision is already imported."""
    if 'torchvision' in sys.modules or _TORCHVISION_SCHEMAS:
        return
    path = torchvision_library()
    if path is None:
        return
    try:
        # what torchvision's import does first; it loads once per process
        torch.ops.load_library(path)
        return
    except (OSError, RuntimeError):
        pass
    library = torch.library.Library('torchvision', 'FRAGMENT')
    for schema in TORCHVISION_UNCHECKED_OPS:
        library.define(schema)
    _TORCHVISION_SCHEMAS.append(library)
