"""The transformer initialisation the ported models share (DeiT / timm, and the official ViL and
PerViT code): truncated-normal weights of standard deviation 0.02, zero biases."""
from typing import Callable

import torch.nn as nn
from mmengine.model.weight_init import trunc_normal_, trunc_normal_init
from torch import Tensor

INIT_STD = 0.02


def init_linear_layers(module: nn.Module, keep: Callable[[str], bool] = lambda name: False) -> None:
    """Every ``nn.Linear`` of ``module`` (mmengine's ``trunc_normal_init``), except those whose
    name ``keep`` accepts (layers with an initialisation of their own)."""
    for name, layer in module.named_modules():
        if isinstance(layer, nn.Linear) and not keep(name):
            trunc_normal_init(layer, std=INIT_STD, bias=0)


def init_embedding(parameter: Tensor) -> None:
    """A position embedding, class token or bias table."""
    trunc_normal_(parameter, std=INIT_STD)
