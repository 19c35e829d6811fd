"""The contract every backbone of the project keeps, as timm holds its models to one
(``tests/test_models/test_backbones/test_contract.py`` checks each):

* ``arch``: a name of the class's ``arch_zoo`` or a dict of the same keys (:func:`resolve_arch`);
* ``out_indices``: the stages returned, in order, negative from the last; later stages are not
  built, so every parameter gets a gradient (DDP's ``find_unused_parameters=False``);
* ``frozen_stages``: ``-1`` nothing, ``0`` the stem, ``k >= 1`` the stem and the first ``k`` stages;
* ``norm_eval``: normalisation layers stay in eval mode while training;
* ``out_channels`` and ``out_strides`` of each returned output;
* ``forward(images)`` returns contiguous maps (mmcv's C++ ops read memory as NCHW);
* ``with_cp``: a block is recomputed in the backward when its input needs a gradient
  (:func:`checkpointed`, non-reentrant, so DDP works either way);
* ``attn_cfg`` (``attention_args`` names every argument holding an attention config): any type of
  ``ATTENTIONS``, built with the extra-token contract (:func:`mmvisattn.registry.build_attention`,
  :func:`stage_attention_options`).

:class:`BackboneContract` implements freezing and ``norm_eval``; a backbone names its stem and
stages (:meth:`~BackboneContract.stem_parts`, :meth:`~BackboneContract.stage_parts`) and calls
:meth:`~BackboneContract.set_contract` at the end of ``__init__``."""
from numbers import Integral
from typing import Callable, Dict, List, Sequence, Tuple, Union

import torch.nn as nn
import torch.utils.checkpoint as cp
from torch import Tensor
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.instancenorm import _InstanceNorm

from ..attentions.base import switch_to_deploy

NORM_LAYERS = (_BatchNorm, _InstanceNorm, nn.LayerNorm, nn.GroupNorm)
Part = Union[nn.Module, nn.Parameter]
# PVT and SegFormer reduce the keys and values of every stage to the map at stride 32
REDUCED_KEY_STRIDE = 32


def stage_attention_options(stride: int) -> Dict[str, int]:
    """The settings a backbone offers a stage's attention at ``stride``: the reduction ratio leaving
    keys at stride 32, as PVT and SegFormer (8, 4, 2, 1)."""
    return dict(sr_ratio=max(1, REDUCED_KEY_STRIDE // stride))


def resolve_arch(owner: str, arch: Union[str, Dict], arch_zoo: Dict[str, Dict],
                 keys: Sequence[str]) -> Dict:
    """The settings ``arch`` names in ``arch_zoo``, or ``arch`` itself as a dict of every key of
    ``keys``; otherwise a one-line ``ValueError`` naming ``owner``, the value and what is
    accepted."""
    if isinstance(arch, str) and arch in arch_zoo:
        return dict(arch_zoo[arch])
    if not isinstance(arch, dict):
        raise ValueError(f'{owner}: arch={arch!r}; expected one of {sorted(arch_zoo)} or a dict '
                         f'with keys {tuple(keys)}')
    missing = [key for key in keys if key not in arch]
    if missing:
        raise ValueError(f'{owner}: arch dict misses {missing}; expected keys {tuple(keys)}')
    return dict(arch)


def check_out_indices(owner: str, out_indices: Union[int, Sequence[int]],
                      num_stages: int) -> Tuple[int, ...]:
    """``out_indices`` as non-negative stage indices in order; a one-line ``ValueError`` for an
    index out of range, a repeated stage or none."""
    indices = (out_indices,) if isinstance(out_indices, Integral) else tuple(out_indices)
    valid = all(isinstance(i, Integral) and not isinstance(i, bool) and
                -num_stages <= i < num_stages
                for i in indices)
    resolved = tuple(sorted(int(i) % num_stages for i in indices)) if valid else ()
    if not valid or not resolved or len(set(resolved)) != len(resolved):
        raise ValueError(f'{owner}: out_indices={out_indices!r}; expected stage indices below '
                         f'{num_stages} '
                         f'(down to {-num_stages}, counting from the last), each stage once')
    return resolved


def check_frozen_stages(owner: str, frozen_stages: int, num_stages: int) -> int:
    """``frozen_stages`` must be an integer in ``-1 .. num_stages``."""
    if isinstance(frozen_stages, bool) or not isinstance(frozen_stages, Integral) \
            or not -1 <= frozen_stages <= num_stages:
        raise ValueError(f'{owner}: frozen_stages={frozen_stages!r}; expected -1 (none), 0 (the '
                         f'stem) or up to {num_stages} (the stem and that many stages)')
    return int(frozen_stages)


def checkpointed(block: Callable[..., Tensor], with_cp: bool, x: Tensor, *args) -> Tensor:
    """``block(x, *args)``, recomputed in the backward pass instead of keeping its activations when
    ``with_cp`` and ``x`` needs a gradient (the rule of mmcv's and mmseg's layers)."""
    if with_cp and x.requires_grad:
        return cp.checkpoint(block, x, *args, use_reentrant=False)
    return block(x, *args)


def _freeze(part: Part) -> None:
    if isinstance(part, nn.Parameter):
        part.requires_grad = False
        return
    part.eval()
    for param in part.parameters():
        param.requires_grad = False


class BackboneContract:
    """The shared part of the contract (see the module docstring), mixed into an ``nn.Module``."""

    out_indices: Tuple[int, ...]
    frozen_stages: int
    norm_eval: bool
    out_channels: List[int]
    out_strides: List[int]
    attention_args: Tuple[str, ...] = ()

    def set_contract(self, out_indices: Union[int, Sequence[int]], frozen_stages: int,
                     norm_eval: bool,
                     stage_channels: Sequence[int], stage_strides: Sequence[int]) -> None:
        """Check and record the contract's arguments (one ``stage_channels`` and ``stage_strides``
        entry per stage) and freeze the stages; call at the end of ``__init__``."""
        owner = type(self).__name__
        self.out_indices = check_out_indices(owner, out_indices, len(stage_channels))
        self.frozen_stages = check_frozen_stages(owner, frozen_stages, len(stage_channels))
        self.drop_stages_after(self.out_indices[-1])
        self.norm_eval = bool(norm_eval)
        self.out_channels = [stage_channels[i] for i in self.out_indices]
        self.out_strides = [stage_strides[i] for i in self.out_indices]
        self.freeze_stages()

    def switch_to_deploy(self) -> None:
        """The deploy form: every train-only branch removed (Castling's auxiliary softmax), as
        mmdeploy and ``CastlingScheduleHook`` call it."""
        switch_to_deploy(self)

    def stem_parts(self) -> List[Part]:
        """The modules and parameters before the first stage (by default the ``stem`` module)."""
        return [self.stem]

    def stage_parts(self, index: int) -> List[Part]:
        """The modules and parameters of stage ``index``, parameters several stages share excluded
        (by default ``stages[index]``)."""
        return [self.stages[index]]

    def drop_stages_after(self, last: int) -> None:
        """Remove the stages after ``last``, which no output needs (by default from ``stages``)."""
        del self.stages[last + 1:]

    def depth_parts(self) -> List[List[Part]]:
        """The parts at each depth of layer-wise learning-rate decay, from the input: the stem, then
        each stage (each layer of a plain ViT, whose stages are its layers)."""
        return [self.stem_parts()] + [
            self.stage_parts(index) for index in range(self.out_indices[-1] + 1)
        ]

    def get_layer_depth(self, param_name: str, prefix: str = '') -> Tuple[int, int]:
        """mmpretrain's layer-wise decay protocol: ``(depth, count)`` of ``prefix + param_name``; 0
        for the stem, ``i + 1`` for the i-th of :meth:`depth_parts`, ``count - 1`` for the rest
        (shared parameters, modules after the backbone)."""
        parts = self.depth_parts()
        count = len(parts) + 1
        if not param_name.startswith(prefix):
            return count - 1, count
        depths: Dict[int, int] = {}
        for depth, group in enumerate(parts):
            # the first depth holding a parameter wins: a stage may hold the stem
            for part in group:
                for param in [part] if isinstance(part, nn.Parameter) else part.parameters():
                    depths.setdefault(id(param), depth)
        param = dict(self.named_parameters()).get(param_name[len(prefix):])
        return depths.get(id(param), count - 1), count

    def freeze_stages(self) -> None:
        if self.frozen_stages < 0:
            return
        kept = min(self.frozen_stages, self.out_indices[-1] + 1)
        for part in self.stem_parts() + [
            part for index in range(kept) for part in self.stage_parts(index)
        ]:
            _freeze(part)

    def train(self, mode: bool = True):
        super().train(mode)
        self.freeze_stages()
        if mode and self.norm_eval:
            for module in self.modules():
                if isinstance(module, NORM_LAYERS):
                    module.eval()
        return self
