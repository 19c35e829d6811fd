"""Weights in from ``init_cfg``: a backbone named with ``init_cfg=dict(type='Pretrained',
checkpoint=PATH_OR_URL)`` recognises, from the key layout alone, the formats its family is published
in, and converts while loading with the functions the offline converters of
``tools/model_converters/`` use, as mmdet's Swin converts official Swin keys on load.

Each backbone lists its :class:`CheckpointFormat` s (``pretrained_formats``); its own layout (keys
of its ``state_dict``) is always read. Loading logs one line: the format found, how many tensors
were loaded and which parameters stay newly initialised (the RWGK anchors, for instance). A
checkpoint in no known layout, or one whose tensors do not fit (another width), fails in one line
naming the file and what was expected. URLs go through torch's hub cache, and a file name that
carries a hash (``name-<sha256 prefix>.pth``, as OpenMMLab's and torchvision's do) is checked
against it; reading is always ``weights_only``.
"""
import os.path as osp
import re
from urllib.parse import urlparse
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from mmengine.logging import print_log
from torch import Tensor

from mmvisattn.utils.checkpoint import CheckpointError, read_checkpoint, state_dict_of

StateDict = Dict[str, Tensor]
WRAPPERS = ('state_dict', 'model', 'net', 'module')  # mmengine / timm and MAE / official ViL / DeiT
HASHED_NAME = re.compile(r'-([a-f0-9]{6,})\.')  # torch.hub's rule for a hash in a file name


class CheckpointFormat(NamedTuple):
    """A published layout of a family's weights: ``matches(state_dict)`` tells it from its keys,
    ``convert(state_dict, backbone)`` returns the backbone's keys."""
    name: str
    matches: Callable[[StateDict], bool]
    convert: Callable[[StateDict, nn.Module], StateDict]


def any_key(pattern: str) -> Callable[[StateDict], bool]:
    """A ``matches`` that holds when some key matches ``pattern`` (``re.search``)."""
    compiled = re.compile(pattern)
    return lambda state_dict: any(compiled.search(key) for key in state_dict)


def strip_prefix(state_dict: StateDict, prefix: str) -> StateDict:
    """The keys under ``prefix`` without it, or ``state_dict`` itself when none is."""
    inner = {key[len(prefix):]: value for key, value in state_dict.items() if key.startswith(prefix)}
    return inner or state_dict


def split_pretrained(init_cfg) -> Tuple[Optional[dict], Optional[list]]:
    """The ``Pretrained`` entry of an ``init_cfg`` (a dict or a list of them), or ``None``, and the
    other entries (``None`` when there are none)."""
    cfgs = init_cfg if isinstance(init_cfg, (list, tuple)) else [init_cfg]
    pretrained = next((cfg for cfg in cfgs if isinstance(cfg, dict) and cfg.get('type') == 'Pretrained'), None)
    return pretrained, [cfg for cfg in cfgs if cfg is not pretrained and cfg is not None] or None


def read_pretrained(path: str) -> StateDict:
    """The state dict of a local file or a URL (through torch's hub cache, its hash checked where the
    file name carries one), read ``weights_only``; one-line :class:`CheckpointError` otherwise."""
    if not path.startswith(('http://', 'https://')):
        return state_dict_of(read_checkpoint(path, WRAPPERS), path, WRAPPERS)
    check_hash = HASHED_NAME.search(osp.basename(path)) is not None
    # the hub cache is keyed by file name: a name without a hash (ViL's are all model_best.pth) takes
    # its folder along
    file_name = None if check_hash else '_'.join(urlparse(path).path.strip('/').split('/')[-2:])
    try:
        checkpoint = torch.hub.load_state_dict_from_url(path, map_location='cpu', check_hash=check_hash,
                                                        file_name=file_name, weights_only=True)
    except RuntimeError as exc:
        raise CheckpointError(f'checkpoint {path!r} could not be used: {str(exc).splitlines()[0]}') from None
    except OSError as exc:  # URLError and HTTPError included
        raise CheckpointError(f'checkpoint {path!r} could not be downloaded ({exc})') from None
    return state_dict_of(checkpoint, path, WRAPPERS)


def _check_fit(owner: str, path: str, converted: StateDict, target: StateDict) -> None:
    misshapen = [f'{key} {tuple(value.shape)} (expected {tuple(target[key].shape)})'
                 for key, value in converted.items() if key in target and value.shape != target[key].shape]
    if misshapen:
        raise CheckpointError(f'{owner}: checkpoint {path!r} does not fit this {owner}: {"; ".join(misshapen[:3])}'
                              ' (weights of another size?)')


def load_pretrained(backbone: nn.Module, cfg: dict, formats: Sequence[CheckpointFormat]) -> List[str]:
    """Load ``cfg['checkpoint']`` (``prefix`` kept as mmengine's ``Pretrained`` reads it) into
    ``backbone`` in whichever of its own layout and ``formats`` it is; returns the parameters that
    stay newly initialised."""
    owner, path = type(backbone).__name__, str(cfg['checkpoint'])
    state_dict = read_pretrained(path)
    if cfg.get('prefix'):
        state_dict = strip_prefix(state_dict, cfg['prefix'])
    target = backbone.state_dict()
    own = CheckpointFormat(f'{owner} (this project)', lambda keys: bool(set(keys) & set(target)),
                           lambda keys, _: keys)
    found = next((fmt for fmt in (*formats, own) if fmt.matches(state_dict)), None)
    if found is None:
        expected = ', '.join([fmt.name for fmt in formats] + [own.name])
        raise CheckpointError(f'{owner}: checkpoint {path!r} is in no layout {owner} reads (expected {expected}; '
                              f'its first keys: {list(state_dict)[:3]})')
    try:
        converted = {key: value for key, value in found.convert(state_dict, backbone).items() if key in target}
    except (KeyError, ValueError) as exc:  # the converters' one-line refusals
        raise CheckpointError(f'{owner}: checkpoint {path!r} ({found.name}): {exc.args[0]}') from None
    if not converted:
        raise CheckpointError(f'{owner}: checkpoint {path!r} ({found.name}) sets none of this {owner}\'s weights')
    _check_fit(owner, path, converted, target)
    backbone.load_state_dict(converted, strict=False)
    new = sorted(set(target) - set(converted))
    print_log(f'{owner}: loaded {path} as {found.name}: {len(converted)} of {len(target)} tensors; newly '
              f'initialised ({len(new)}): {", ".join(new[:8]) + (" ..." if len(new) > 8 else "") or "none"}',
              logger='current')
    return new


class LoadsPretrained:
    """``init_weights`` for a ``Pretrained`` ``init_cfg``: the class's whole ``init_weights`` chain
    runs first as it would without one (every weight initialised, the ones the checkpoint lacks
    included), then :func:`load_pretrained` loads the checkpoint with the class's
    ``pretrained_formats``. Mixed in before the backbone's base class."""

    pretrained_formats: Sequence[CheckpointFormat] = ()

    def init_weights(self) -> None:
        cfg, others = split_pretrained(self.init_cfg)
        if cfg is None:
            super().init_weights()
            return
        init_cfg, self.init_cfg = self.init_cfg, others
        try:
            self.init_weights()  # from the top of the class: its own steps see no checkpoint either
        finally:
            self.init_cfg = init_cfg
        load_pretrained(self, cfg, self.pretrained_formats)
