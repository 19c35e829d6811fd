"""The official implementations, imported unmodified from their checkouts (``owner+name`` folders of
a peers folder), for the golden fixtures and the official columns of ``benchmark_suite.py``. The
only stand-ins are a minimal ``timm.models.layers`` (:func:`stub_timm`) and no-op CUDA calls while
PerViT is built (:func:`cuda_calls_stay_on_cpu`); a checkout's packages import only inside
:func:`checkout_on_path`.
"""
import contextlib
import importlib.util
import subprocess
import sys
import types
from pathlib import Path
from typing import Iterator

import torch
import torch.nn as nn

VIL, SMCA, PERVIT, CASTLING = ('microsoft+vision-longformer', 'gaopengcuhk+SMCA-DETR',
                               'juhongm999+pervit', 'GATECH-EIC+Castling-ViT')


def stub_timm() -> None:
    """The three ``timm.models.layers`` helpers the official files import (drop paths all 0)."""
    layers = types.ModuleType('timm.models.layers')
    layers.trunc_normal_ = lambda tensor, std=1.0, **kwargs: nn.init.trunc_normal_(tensor, std=std)
    layers.DropPath = lambda *args, **kwargs: nn.Identity()
    layers.to_2tuple = lambda value: value if isinstance(value, tuple) else (value, value)
    models = types.ModuleType('timm.models')
    models.layers = layers
    timm = types.ModuleType('timm')
    timm.models = models
    sys.modules.update({'timm': timm, 'timm.models': models, 'timm.models.layers': layers})


def import_file(name: str, path: Path, package_dir: Path = None) -> types.ModuleType:
    """Import ``path`` as module ``name``; with ``package_dir``, ``name``'s parent package is that
    folder."""
    if package_dir is not None:
        package = types.ModuleType(name.rsplit('.', 1)[0])
        package.__path__ = [str(package_dir)]
        sys.modules[package.__name__] = package
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def checkout_on_path(root: Path) -> Iterator[None]:
    """``root``'s top-level packages (e.g. PerViT's ``model``) importable while the block runs."""
    sys.path.insert(0, str(root))
    try:
        yield
    finally:
        sys.path.remove(str(root))


@contextlib.contextmanager
def cuda_calls_stay_on_cpu():
    """PerViT's constructor calls ``.cuda()`` / ``.to('cuda')``; on CPU they keep the tensor."""
    cuda, to = torch.Tensor.cuda, torch.Tensor.to
    torch.Tensor.cuda = lambda self, *args, **kwargs: self
    torch.Tensor.to = lambda self, *args, **kwargs: (
        self if args[:1] == ('cuda',) else to(self, *args, **kwargs)
    )
    try:
        yield
    finally:
        torch.Tensor.cuda, torch.Tensor.to = cuda, to


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype):
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def commit_of(checkout: Path) -> str:
    result = subprocess.run(['git', '-C', str(checkout), 'rev-parse', 'HEAD'], capture_output=True,
                            text=True)
    return result.stdout.strip() or 'unknown (not a git checkout)'
