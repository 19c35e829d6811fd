"""Layer-wise learning-rate decay for detectors and segmentors, the fine-tuning recipe of "Masked
Autoencoders Are Scalable Vision Learners" (arXiv:2111.06377, Appendix A.1, end-to-end fine-tuning;
BEiT's before it): the parameters at depth ``d`` of ``L`` learn at
``base_lr * layer_decay_rate ** (L - d - 1)``.

mmpretrain's ``LearningRateDecayOptimWrapperConstructor`` does this for classifiers, asking the
model for ``get_layer_depth``, which only mmpretrain's classifiers answer; mmdet's and mmseg's
layer-decay constructors know their own ConvNeXt, BEiT and ViT by parameter names
only. :class:`BackboneLayerDecayOptimWrapperConstructor` is mmpretrain's constructor asking the
model's backbone instead, so every backbone of the project (and any with ``get_layer_depth``) decays
in an mmdet, mmseg or mmpretrain config; the necks and heads learn at the base rate."""
import functools
from typing import Callable, List, Optional

from mmengine.registry import OPTIM_WRAPPER_CONSTRUCTORS
from mmpretrain.engine.optimizers import LearningRateDecayOptimWrapperConstructor
from torch import nn


@OPTIM_WRAPPER_CONSTRUCTORS.register_module()
class BackboneLayerDecayOptimWrapperConstructor(LearningRateDecayOptimWrapperConstructor):
    """mmpretrain's layer-decay constructor for any model with a ``backbone`` that answers
    ``get_layer_depth(param_name, prefix)``. ``paramwise_cfg`` takes mmpretrain's keys:
    ``layer_decay_rate``, ``bias_decay_mult``, ``norm_decay_mult``, ``flat_decay_mult`` and
    ``custom_keys`` (their ``decay_mult``; the learning rates are the decay's).

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
