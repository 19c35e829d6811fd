"""Weights in from ``init_cfg=dict(type='Pretrained', checkpoint=PATH_OR_URL)``: a backbone
recognises its family's published formats by their key layout and converts while loading
(``tools/model_converters/``), as mmdet's Swin does.

Each backbone lists its :class:`CheckpointFormat` s (``pretrained_formats``); its own layout, an
mmpretrain classifier's (``backbone.``) and an ``EMAHook`` checkpoint's are always read. Loading
logs one line (format, tensors loaded, left new, dropped); an unknown layout, another model or width
fails in one line naming the file. URLs go through torch's hub cache with their hash checked;
reading is always ``weights_only``."""
import os.path as osp
import re
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple
from urllib.parse import urlparse

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
    inner = {
        key[len(prefix):]: value for key, value in state_dict.items() if key.startswith(prefix)
    }
    return inner or state_dict


def split_pretrained(init_cfg) -> Tuple[Optional[dict], Optional[list]]:
    """The ``Pretrained`` entry of an ``init_cfg`` (a dict or a list of them), or ``None``, and the
    other entries (``None`` when there are none)."""
    cfgs = init_cfg if isinstance(init_cfg, (list, tuple)) else [init_cfg]
    pretrained = next((cfg for cfg in cfgs if isinstance(cfg, dict)
                       and cfg.get('type') == 'Pretrained'), None)
    return pretrained, [cfg for cfg in cfgs if cfg is not pretrained and cfg is not None] or None


def read_pretrained(path: str, use_ema: bool = False) -> Tuple[StateDict, str]:
    """The state dict of a local file or URL, read ``weights_only``, and a note on the EMA weights
    taken; one-line :class:`CheckpointError` otherwise."""
    if not path.startswith(('http://', 'https://')):
        return raw_or_ema_weights(read_checkpoint(path, WRAPPERS), path, use_ema)
    check_hash = HASHED_NAME.search(osp.basename(path)) is not None
    # the hub cache is keyed by file name: a name without a hash (ViL's are all model_best.pth)
    # takes its folder along
    file_name = None if check_hash else '_'.join(urlparse(path).path.strip('/').split('/')[-2:])
    try:
        checkpoint = torch.hub.load_state_dict_from_url(path, map_location='cpu',
                                                        check_hash=check_hash,
                                                        file_name=file_name, weights_only=True)
    except RuntimeError as exc:
        raise CheckpointError(
            f'checkpoint {path!r} could not be used: {str(exc).splitlines()[0]}'
        ) from None
    except OSError as exc:  # URLError and HTTPError included
        raise CheckpointError(f'checkpoint {path!r} could not be downloaded ({exc})') from None
    return raw_or_ema_weights(checkpoint, path, use_ema)


def raw_or_ema_weights(checkpoint: object, path: str, use_ema: bool) -> Tuple[StateDict, str]:
    """The weights of an ``EMAHook`` checkpoint (``state_dict`` averaged, ``ema_state_dict`` raw):
    the raw ones unless ``use_ema``; any other checkpoint's as it is (``use_ema`` refused)."""
    ema = checkpoint.get('ema_state_dict') if isinstance(checkpoint, dict) else None
    if ema is None:
        if use_ema:
            raise CheckpointError(f'checkpoint {path!r} holds no EMA weights (no ema_state_dict) '
                                  'for use_ema=True')
        return state_dict_of(checkpoint, path, WRAPPERS), ''
    averaged = state_dict_of(checkpoint, path, WRAPPERS)
    raw = {key[len('module.'):]: value for key, value in ema.items() if key.startswith('module.')}
    if use_ema:
        return averaged, f'the EMA weights (the raw ones, {len(raw)} tensors, left)'
    return (raw,
            f'the raw weights (the EMA copy, {len(averaged)} tensors, left; use_ema=True takes it)')


# what an mmpretrain ImageClassifier checkpoint holds besides its backbone
CLASSIFIER_PARTS = ('neck.', 'head.', 'data_preprocessor.')


def backbone_of_classifier(state_dict: StateDict) -> Tuple[StateDict, List[str]]:
    """An mmpretrain ``ImageClassifier`` checkpoint's ``backbone.`` weights unprefixed, and its
    other keys; anything else as it is."""
    is_classifier = (any(key.startswith('head.') for key in state_dict)
                     and all(key.startswith(('backbone.',)
                                            + CLASSIFIER_PARTS) for key in state_dict))
    if not is_classifier:
        return state_dict, []
    return strip_prefix(state_dict, 'backbone.'), sorted(
        key for key in state_dict if key.startswith(CLASSIFIER_PARTS)
    )


def _check_fit(owner: str, path: str, converted: StateDict, target: StateDict) -> None:
    misshapen = [
        f'{key} {tuple(value.shape)} (expected {tuple(target[key].shape)})'
        for key, value in converted.items()
        if key in target and value.shape != target[key].shape
    ]
    if misshapen:
        raise CheckpointError(f'{owner}: checkpoint {path!r}: {len(misshapen)} of its '
                              f'{len(converted)} tensors do not fit this {owner}: '
                              f'{"; ".join(misshapen[:3])} (weights of another size?)')


def _check_own_layout(owner: str, path: str, state_dict: StateDict, target: StateDict) -> None:
    """A checkpoint read as this class's own layout must set most of its weights: one that shares a
    few names (``norm.weight``...) is another model's."""
    unknown = [key for key in state_dict if key not in target]
    if len(state_dict) - len(unknown) < len(target) / 2:
        raise CheckpointError(f'{owner}: checkpoint {path!r}: {len(unknown)} of its '
                              f'{len(state_dict)} keys do not fit '
                              f'this {owner} (first: {", ".join(unknown[:3])}), which has '
                              f'{len(target)}: the weights of another model?')


def _names(keys: Sequence[str]) -> str:
    return ', '.join(keys[:8]) + (' ...' if len(keys) > 8 else '') if keys else 'none'


def find_layout(owner: str, path: str, state_dict: StateDict, target: StateDict,
                formats: Sequence[CheckpointFormat]) -> CheckpointFormat:
    """The first of ``formats`` that the checkpoint's keys match, else this class's own layout,
    which must set most of its weights; one-line :class:`CheckpointError` when neither fits."""
    own = CheckpointFormat(f'{owner} (this project)', lambda keys: bool(set(keys) & set(target)),
                           lambda keys, _: keys)
    found = next((fmt for fmt in (*formats, own) if fmt.matches(state_dict)), None)
    if found is None:
        expected = ', '.join([fmt.name for fmt in formats] + [own.name])
        raise CheckpointError(f'{owner}: checkpoint {path!r} is in no layout {owner} reads '
                              f'(expected {expected}; none of its {len(state_dict)} keys fits; its '
                              f'first keys: {list(state_dict)[:3]})')
    if found is own:
        _check_own_layout(owner, path, state_dict, target)
    return found


def load_pretrained(backbone: nn.Module, cfg: dict,
                    formats: Sequence[CheckpointFormat]) -> List[str]:
    """Load ``cfg['checkpoint']`` into ``backbone`` from its own layout or one of ``formats`` (a
    classifier's backbone included); returns the parameters left newly initialised."""
    owner, path = type(backbone).__name__, str(cfg['checkpoint'])
    state_dict, ema_note = read_pretrained(path, cfg.get('use_ema', False))
    if cfg.get('prefix'):
        state_dict = strip_prefix(state_dict, cfg['prefix'])
    state_dict, classifier_parts = backbone_of_classifier(state_dict)
    target = backbone.state_dict()
    found = find_layout(owner, path, state_dict, target, formats)
    try:
        converted = found.convert(state_dict, backbone)
    except (KeyError, ValueError) as exc:  # the converters' one-line refusals
        raise CheckpointError(
            f'{owner}: checkpoint {path!r} ({found.name}): {exc.args[0]}'
        ) from None
    dropped = classifier_parts + sorted(key for key in converted if key not in target)
    converted = {key: value for key, value in converted.items() if key in target}
    if not converted:
        raise CheckpointError(f'{owner}: checkpoint {path!r} ({found.name}) sets none of this '
                              f'{owner}\'s weights')
    _check_fit(owner, path, converted, target)
    backbone.load_state_dict(converted, strict=False)
    new = sorted(set(target) - set(converted))
    layout = found.name + (', from an mmpretrain classifier' if classifier_parts else '')
    print_log(f'{owner}: loaded {path} as {layout}{", " + ema_note if ema_note else ""}: '
              f'{len(converted)} of {len(target)} tensors; newly initialised ({len(new)}): '
              f'{_names(new)}; dropped ({len(dropped)}): {_names(dropped)}', logger='current')
    return new


class LoadsPretrained:
    """``init_weights`` for a ``Pretrained`` ``init_cfg``: the class's whole chain runs first, then
    :func:`load_pretrained` loads the checkpoint. Mixed in before the backbone's base class."""

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
