"""Layer-wise learning-rate decay for detectors and segmentors ("Masked Autoencoders Are Scalable
Vision Learners", arXiv:2111.06377, App. A.1): parameters at depth ``d`` of ``L`` learn at
``base_lr * layer_decay_rate ** (L - d - 1)``.

mmpretrain's ``LearningRateDecayOptimWrapperConstructor`` asks the model for ``get_layer_depth``,
which only its classifiers answer; mmdet's and mmseg's know their own backbones by parameter names.
:class:`BackboneLayerDecayOptimWrapperConstructor` asks the backbone instead, so every backbone with
``get_layer_depth`` decays in any config; necks and heads learn at the base rate."""
import functools
from typing import Callable, List, Optional

from mmengine.registry import OPTIM_WRAPPER_CONSTRUCTORS
from mmpretrain.engine.optimizers import LearningRateDecayOptimWrapperConstructor
from torch import nn


@OPTIM_WRAPPER_CONSTRUCTORS.register_module()
class BackboneLayerDecayOptimWrapperConstructor(LearningRateDecayOptimWrapperConstructor):
    """mmpretrain's layer-decay constructor for a model whose ``backbone`` answers
    ``get_layer_depth(param_name, prefix)``; ``paramwise_cfg`` takes mmpretrain's keys.

    Example::

        optim_wrapper = dict(optimizer=dict(type='AdamW', lr=1e-4, weight_decay=0.05),
                             constructor='BackboneLayerDecayOptimWrapperConstructor',
                             paramwise_cfg=dict(layer_decay_rate=0.65, norm_decay_mult=0.0))
    """

    def add_params(self, params: List[dict], module: nn.Module, prefix: str = '',
                   get_layer_depth: Optional[Callable] = None, **kwargs) -> None:
        if get_layer_depth is None and not hasattr(module, 'get_layer_depth'):
            backbone = getattr(module, 'backbone', None)
            if not hasattr(backbone, 'get_layer_depth'):
                raise ValueError(f'{type(self).__name__}: {type(backbone or module).__name__} has '
                                 'no get_layer_depth(param_name, prefix); expected a backbone that '
                                 'answers it')
            get_layer_depth = functools.partial(backbone.get_layer_depth,
                                                prefix=f'{prefix}backbone.')
        super().add_params(params, module, prefix, get_layer_depth, **kwargs)
